//! Hot update (docs/design/providers/azure.md, "Hot update"): the class's
//! tags on the VM, its NICs and its managed disks, each with one PATCH of
//! its `tags` (which replaces them all); every other providerSpec field
//! needs a new VM.

use crate::arm::ArmError;
use crate::driver::AzureDriver;
use crate::names::{self, CLUSTER_TAG_PREFIX, MACHINE_UID_TAG, ROLE_TAG_PREFIX};
use crate::spec::AzureProviderSpec;
use mcm_driver::{
    changed_fields, Code, DriverResult, InPlaceChanges, Status, TagStyle, UpdateMachineRequest,
    UpdateMachineResponse,
};
use serde_json::Value;
use std::collections::BTreeMap;
use tracing::info;

/// Whether a tag key is one the driver finds a machine's resources by or
/// writes itself: the cluster and role keys, the Machine UID and identity tags.
pub fn is_reserved(key: &str) -> bool {
    key.starts_with(CLUSTER_TAG_PREFIX)
        || key.starts_with(ROLE_TAG_PREFIX)
        || key == MACHINE_UID_TAG
        || TagStyle::Dash.is_identity_key(key)
}

/// Which changes between two Azure providerSpecs a running VM can take:
/// `tags.<key>`, except the reserved keys ([`is_reserved`]).
pub fn in_place_changes(last_applied: &Value, current: &Value) -> InPlaceChanges {
    let mut out = InPlaceChanges::default();
    for field in changed_fields(last_applied, current) {
        match field.strip_prefix("tags.") {
            Some(key) if !is_reserved(key) => out.in_place.push(field),
            _ => out.need_replacement.push(field),
        }
    }
    out
}

/// The tags a resource is to have, `None` when it has them: its tags, less
/// the keys the last-applied spec had and the class dropped, with the
/// class's tags set. Reserved keys are never added, changed or removed (a
/// disk made with its VM keeps carrying none of them), and tags someone
/// else set stay.
pub fn tag_plan(
    spec: &AzureProviderSpec,
    last: &AzureProviderSpec,
    have: &BTreeMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let mut want = have.clone();
    for k in last.tags.keys() {
        if !spec.tags.contains_key(k) && !is_reserved(k) {
            want.remove(k);
        }
    }
    for (k, v) in spec.tags.iter().filter(|(k, _)| !is_reserved(k)) {
        want.insert(k.clone(), v.clone());
    }
    (want != *have).then_some(want)
}

/// The resource group and name of an ARM ID (`…/resourceGroups/{rg}/…/{name}`).
pub fn group_and_name(id: &str) -> Option<(&str, &str)> {
    let parts: Vec<&str> = id.split('/').collect();
    let rg = parts
        .windows(2)
        .find(|w| w[0].eq_ignore_ascii_case("resourceGroups"))
        .map(|w| w[1])?;
    let name = names::name_of(id);
    (!rg.is_empty() && !name.is_empty()).then_some((rg, name))
}

/// The machine status of a failed tag PATCH: a tag ARM rejects (400, e.g.
/// `InvalidTagNameCharacters`) is `InvalidArgument` with ARM's message;
/// everything else as the other calls.
fn update_status(e: &ArmError, what: &str) -> Status {
    match e.status() {
        Some(400) => Status::new(Code::InvalidArgument, format!("{what}: {e}")),
        _ => e.to_status(what),
    }
}

impl AzureDriver {
    pub(crate) async fn update(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        let vm = req.machine.metadata.name.clone().unwrap_or_default();
        // A class that no longer validates is reported, not applied
        // (context makes no cloud call).
        let ctx = self.context(&req.machine_class, &req.secret)?;
        let changes = in_place_changes(
            &req.last_applied_provider_spec,
            &req.machine_class.provider_spec,
        );
        if !changes.need_replacement.is_empty() {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "VM {vm}: these providerSpec changes need a new VM, nothing was changed: {}",
                    changes.need_replacement.join(", ")
                ),
            ));
        }
        // A last-applied spec that no longer decodes manages no tag: the
        // class's are set, none removed.
        let last: AzureProviderSpec =
            serde_json::from_value(req.last_applied_provider_spec.clone()).unwrap_or_default();
        let rg = ctx.spec.resource_group.as_str();
        let found = ctx.arm.get_vm(rg, &vm).await.map_err(|e| {
            update_status(
                &e,
                &format!("Failed to get VM: [ResourceGroup: {rg}, Name: {vm}]"),
            )
        })?;
        let Some(machine) = found else {
            return Err(Status::not_found(format!(
                "VM: [ResourceGroup: {rg}, Name: {vm}] is not found"
            )));
        };
        let member = ctx
            .spec
            .membership_tag_keys()
            .is_some_and(|(c, r)| machine.tags.contains_key(c) && machine.tags.contains_key(r));
        if !member {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!("VM: [ResourceGroup: {rg}, Name: {vm}] lacks the class's cluster and role tags; it is not changed"),
            ));
        }
        let mut changed = 0usize;
        if let Some(tags) = tag_plan(&ctx.spec, &last, &machine.tags) {
            ctx.arm
                .patch_vm(rg, &vm, &serde_json::json!({ "tags": tags }))
                .await
                .map_err(|e| update_status(&e, &format!("failed to tag VM {vm}")))?;
            changed += 1;
        }
        let props = machine.properties.unwrap_or_default();
        for nic in props.network_profile.unwrap_or_default().network_interfaces {
            let Some((nic_rg, name)) = group_and_name(&nic.id) else {
                continue;
            };
            let Some(have) = ctx
                .arm
                .get_nic(nic_rg, name)
                .await
                .map_err(|e| update_status(&e, &format!("Failed to get NIC {name}")))?
            else {
                continue;
            };
            if let Some(tags) = tag_plan(&ctx.spec, &last, &have.tags) {
                ctx.arm
                    .patch_nic_tags(nic_rg, name, &tags)
                    .await
                    .map_err(|e| update_status(&e, &format!("failed to tag NIC {name}")))?;
                changed += 1;
            }
        }
        let storage = props.storage_profile.unwrap_or_default();
        let disk_ids = storage
            .os_disk
            .and_then(|d| d.managed_disk)
            .and_then(|m| m.id)
            .into_iter()
            .chain(
                storage
                    .data_disks
                    .into_iter()
                    .filter_map(|d| d.managed_disk.and_then(|m| m.id)),
            );
        for id in disk_ids {
            let Some((disk_rg, name)) = group_and_name(&id) else {
                continue;
            };
            let Some(have) = ctx
                .arm
                .get_disk(disk_rg, name)
                .await
                .map_err(|e| update_status(&e, &format!("Failed to get disk {name}")))?
            else {
                continue;
            };
            if let Some(tags) = tag_plan(&ctx.spec, &last, &have.tags) {
                ctx.arm
                    .patch_disk_tags(disk_rg, name, &tags)
                    .await
                    .map_err(|e| update_status(&e, &format!("failed to tag disk {name}")))?;
                changed += 1;
            }
        }
        if changed > 0 {
            info!(machine = %vm, resource_group = %rg, resources = changed, "tags updated");
        }
        Ok(UpdateMachineResponse::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLUSTER: &str = "kubernetes.io-cluster-shoot--a";
    const ROLE: &str = "kubernetes.io-role-node";

    fn spec(tags: Value) -> Value {
        json!({"location": "westeurope", "resourceGroup": "rg", "tags": tags,
               "properties": {"hardwareProfile": {"vmSize": "Standard_D2s_v3"},
                              "storageProfile": {"imageReference": {"urn": "a:b:c:1"}}}})
    }

    #[test]
    fn tags_change_in_place_and_no_change_is_empty() {
        let a = spec(json!({CLUSTER: "1", ROLE: "1", "team": "a", "old": "o"}));
        let b = spec(json!({CLUSTER: "1", ROLE: "1", "team": "b", "cost": "x"}));
        let c = in_place_changes(&a, &b);
        assert_eq!(c.in_place, vec!["tags.cost", "tags.old", "tags.team"]);
        assert!(c.all_in_place(), "{c:?}");
        assert!(in_place_changes(&a, &a.clone()).is_empty());
    }

    #[test]
    fn vm_size_image_and_membership_tags_need_a_new_vm() {
        let a = spec(json!({CLUSTER: "1", ROLE: "1", "team": "a"}));
        let mut b = spec(json!({"kubernetes.io-cluster-shoot--b": "1", ROLE: "1", "team": "b"}));
        b["properties"]["hardwareProfile"]["vmSize"] = json!("Standard_D4s_v3");
        b["properties"]["storageProfile"]["imageReference"]["urn"] = json!("a:b:c:2");
        let c = in_place_changes(&a, &b);
        assert_eq!(c.in_place, vec!["tags.team"]);
        assert_eq!(
            c.need_replacement,
            vec![
                "properties.hardwareProfile.vmSize",
                "properties.storageProfile.imageReference.urn",
                "tags.kubernetes.io-cluster-shoot--a",
                "tags.kubernetes.io-cluster-shoot--b",
            ]
        );
    }

    fn decoded(tags: Value) -> AzureProviderSpec {
        serde_json::from_value(spec(tags)).unwrap_or_default()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_plan_keeps_reserved_and_foreign_tags_and_removes_what_the_class_dropped() {
        let last = decoded(json!({CLUSTER: "1", ROLE: "1", "team": "a", "old": "o"}));
        let want = decoded(json!({CLUSTER: "1", ROLE: "1", "team": "b"}));
        let vm = map(&[
            (CLUSTER, "1"),
            (ROLE, "1"),
            ("team", "a"),
            ("old", "o"),
            ("foreign", "f"),
            (MACHINE_UID_TAG, "u"),
        ]);
        assert_eq!(
            tag_plan(&want, &last, &vm),
            Some(map(&[
                (CLUSTER, "1"),
                (ROLE, "1"),
                ("team", "b"),
                ("foreign", "f"),
                (MACHINE_UID_TAG, "u"),
            ]))
        );
        // A disk made with its VM has none of the class's tags: it gets the
        // class's own tags, never the membership keys.
        assert_eq!(
            tag_plan(&want, &last, &BTreeMap::new()),
            Some(map(&[("team", "b")]))
        );
        let done = map(&[(CLUSTER, "1"), (ROLE, "1"), ("team", "b")]);
        assert_eq!(tag_plan(&want, &last, &done), None);
    }

    #[test]
    fn an_arm_id_names_its_group_and_resource() {
        assert_eq!(
            group_and_name("/subscriptions/s/resourceGroups/rg-1/providers/Microsoft.Network/networkInterfaces/m-nic"),
            Some(("rg-1", "m-nic"))
        );
        assert_eq!(group_and_name("m-nic"), None);
    }
}
