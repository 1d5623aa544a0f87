//! Hot update (docs/design/providers/openstack.md, "Hot update"): the
//! server's metadata follows the class's `tags` through Nova's server
//! metadata API (`POST /servers/{id}/metadata` for new and changed items,
//! `DELETE /servers/{id}/metadata/{key}` for items the class dropped); every
//! other providerSpec field needs a new server.

use crate::api::{self, Server};
use crate::driver::{machine_name, provider_id, OpenStackDriver, MACHINE_UID_KEY};
use crate::errors::OsError;
use crate::spec::{decode, OpenStackSpec, CLUSTER_TAG_PREFIX, ROLE_TAG_PREFIX};
use mcm_driver::provider_spec::{self, SecretUse};
use mcm_driver::{
    changed_fields, Code, DriverResult, InPlaceChanges, MachineRequest, Status,
    UpdateMachineRequest, UpdateMachineResponse,
};
use serde_json::Value;
use std::collections::BTreeMap;
use tracing::info;

/// The JSON path prefix of a metadata item in the providerSpec.
const TAGS_PATH: &str = "spec.tags.";

/// Whether a metadata key is one the driver manages itself or finds the
/// server by: the cluster and role keys, the Machine UID and identity keys.
fn is_reserved(key: &str) -> bool {
    key.contains(CLUSTER_TAG_PREFIX)
        || key.contains(ROLE_TAG_PREFIX)
        || key == MACHINE_UID_KEY
        || mcm_driver::TagStyle::Dash.is_identity_key(key)
}

/// Which changes between two OpenStack providerSpecs a running server can
/// take: the items of `spec.tags` (server metadata), except the cluster and
/// role keys (the driver finds a machine's server by them) and the keys the
/// driver writes itself.
pub fn in_place_changes(last_applied: &Value, current: &Value) -> InPlaceChanges {
    let mut out = InPlaceChanges::default();
    for field in changed_fields(last_applied, current) {
        match field.strip_prefix(TAGS_PATH) {
            Some(key) if !is_reserved(key) => out.in_place.push(field),
            _ => out.need_replacement.push(field),
        }
    }
    out
}

/// What the metadata calls must do on a server: the class's items whose
/// value differs or is missing, and the keys the last-applied spec had, the
/// class no longer has, and the server still carries (never a reserved key,
/// nor an item the class never managed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataPlan {
    /// Items to create or update.
    pub set: BTreeMap<String, String>,
    /// Keys to delete.
    pub remove: Vec<String>,
}

impl MetadataPlan {
    /// Whether the server already matches.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

/// The metadata changes that make `server` match `spec`.
pub fn metadata_plan(spec: &OpenStackSpec, last: &OpenStackSpec, server: &Server) -> MetadataPlan {
    let set = spec
        .tags
        .iter()
        .filter(|(k, v)| server.metadata.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remove = last
        .tags
        .keys()
        .filter(|k| {
            !spec.tags.contains_key(*k) && server.metadata.contains_key(*k) && !is_reserved(k)
        })
        .cloned()
        .collect();
    MetadataPlan { set, remove }
}

/// The machine status of a failed metadata call: an item Nova rejects (400,
/// e.g. a value longer than 255 characters) is `InvalidArgument` with Nova's
/// message; everything else as other calls.
fn update_status(e: OsError, what: &str) -> Status {
    let code = match e.status() {
        Some(400) => Code::InvalidArgument,
        _ => e.code(),
    };
    Status::new(code, format!("{what}: {e}"))
}

impl OpenStackDriver {
    /// UpdateMachine: converges the server's metadata on the class's tags.
    pub(crate) async fn update(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        let r = MachineRequest {
            machine: req.machine.clone(),
            machine_class: req.machine_class.clone(),
            secret: req.secret.clone(),
        };
        let name = machine_name(&r).to_string();
        // A class that no longer validates is reported, not applied, and
        // before any cloud call (prepare below opens a session).
        let spec = provider_spec::decode_class::<OpenStackSpec>(&req.machine_class)?.value;
        provider_spec::validate(&spec, true, &req.secret, SecretUse::Existing)?;
        let changes = in_place_changes(
            &req.last_applied_provider_spec,
            &req.machine_class.provider_spec,
        );
        if !changes.need_replacement.is_empty() {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "machine {name}: these providerSpec changes need a new server, nothing was changed: {}",
                    changes.need_replacement.join(", ")
                ),
            ));
        }
        let p = self.prepare(&req.machine_class, &req.secret).await?;
        // A last-applied spec that no longer decodes manages no item: only
        // the class's items are set, nothing is removed.
        let last = decode(&req.last_applied_provider_spec).unwrap_or_default();
        let server = self
            .find(&p, &r)
            .await
            .map_err(|e| update_status(e, &format!("looking up the server of machine {name}")))?
            .ok_or_else(|| Status::not_found(format!("machine {name:?}: no server found")))?;
        let plan = metadata_plan(&p.spec, &last, &server);
        let id = server.id.as_str();
        if !plan.set.is_empty() {
            api::update_server_metadata(&p.cloud, id, &plan.set)
                .await
                .map_err(|e| {
                    update_status(
                        e,
                        &format!("setting metadata of server {id} (machine {name})"),
                    )
                })?;
            info!(machine = %name, server = id, items = plan.set.len(), "server metadata set");
        }
        for key in &plan.remove {
            api::delete_server_metadata_item(&p.cloud, id, key)
                .await
                .map_err(|e| {
                    update_status(
                        e,
                        &format!("deleting metadata item {key:?} of server {id} (machine {name})"),
                    )
                })?;
        }
        if !plan.remove.is_empty() {
            info!(machine = %name, server = id, keys = ?plan.remove, "server metadata removed");
        }
        Ok(UpdateMachineResponse {
            last_known_state: if plan.is_empty() {
                String::new()
            } else {
                format!("Updated {}", provider_id(&p.spec.region, id))
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(tags: Value) -> Value {
        json!({
            "apiVersion": "openstack.machine.gardener.cloud/v1alpha1",
            "kind": "MachineProviderConfig",
            "spec": {"flavorName": "m1.small", "imageName": "ubuntu", "region": "RegionOne", "tags": tags}
        })
    }

    const CLUSTER: &str = "kubernetes.io-cluster-shoot--a";
    const ROLE: &str = "kubernetes.io-role-node";

    #[test]
    fn tags_change_in_place_and_an_unchanged_spec_has_no_change() {
        let a = spec(json!({CLUSTER: "1", ROLE: "1", "team": "a", "old": "o"}));
        let b = spec(json!({CLUSTER: "1", ROLE: "1", "team": "b", "cost": "x"}));
        let c = in_place_changes(&a, &b);
        assert_eq!(
            c.in_place,
            vec!["spec.tags.cost", "spec.tags.old", "spec.tags.team"]
        );
        assert!(c.need_replacement.is_empty(), "{c:?}");
        assert!(c.all_in_place());
        assert!(in_place_changes(&a, &a.clone()).is_empty());
    }

    #[test]
    fn flavor_image_and_membership_keys_need_a_new_server() {
        let a = spec(json!({CLUSTER: "1", ROLE: "1", "team": "a"}));
        let mut b = spec(json!({"kubernetes.io-cluster-shoot--b": "1", ROLE: "1", "team": "b"}));
        b["spec"]["flavorName"] = json!("m1.large");
        b["spec"]["imageName"] = json!("ubuntu-next");
        let c = in_place_changes(&a, &b);
        assert_eq!(c.in_place, vec!["spec.tags.team"]);
        assert_eq!(
            c.need_replacement,
            vec![
                "spec.flavorName",
                "spec.imageName",
                "spec.tags.kubernetes.io-cluster-shoot--a",
                "spec.tags.kubernetes.io-cluster-shoot--b",
            ]
        );
        assert!(!c.all_in_place());
    }

    fn decoded(tags: Value) -> OpenStackSpec {
        decode(&spec(tags)).unwrap_or_default()
    }

    fn server(items: &[(&str, &str)]) -> Server {
        Server {
            id: "s-1".into(),
            metadata: items
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Server::default()
        }
    }

    #[test]
    fn the_plan_sets_what_differs_and_removes_only_keys_the_class_dropped() {
        let last = decoded(json!({CLUSTER: "1", ROLE: "1", "team": "a", "old": "o"}));
        let want = decoded(json!({CLUSTER: "1", ROLE: "1", "team": "b"}));
        let s = server(&[
            (CLUSTER, "1"),
            (ROLE, "1"),
            ("team", "a"),
            ("old", "o"),
            ("foreign", "f"),
            (MACHINE_UID_KEY, "u"),
        ]);
        let plan = metadata_plan(&want, &last, &s);
        assert_eq!(
            plan.set,
            BTreeMap::from([("team".to_string(), "b".to_string())])
        );
        assert_eq!(plan.remove, vec!["old"]);
        let done = server(&[(CLUSTER, "1"), (ROLE, "1"), ("team", "b"), ("foreign", "f")]);
        assert!(metadata_plan(&want, &last, &done).is_empty());
    }
}
