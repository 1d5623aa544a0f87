//! DeleteMachine: the VM (cascading to its NIC and disks), and the NIC and
//! disks a VM left behind or a half-created machine never got to attach.

use crate::arm::models::VirtualMachine;
use crate::cleanup::disks_of;
use crate::driver::AzureDriver;
use crate::names;
use mcm_driver::{Code, DeleteMachineRequest, DeleteMachineResponse, DriverResult, Status};
use serde_json::{json, Value};
use tracing::{info, warn};

/// Whether a PATCH of the VM would be accepted (the reference's check).
fn updatable(vm: &VirtualMachine) -> bool {
    let failed = vm.provisioning_state() == Some("Failed");
    let detaching = vm
        .properties
        .as_ref()
        .and_then(|p| p.storage_profile.as_ref())
        .is_some_and(|s| s.data_disks.iter().any(|d| d.to_be_detached == Some(true)));
    !failed && !detaching
}

/// The PATCH that sets `deleteOption: Delete` where it is missing, or `None`.
/// (NICs are compared by the name at the end of their ID.)
fn delete_options_patch(vm: &VirtualMachine, nic_name: &str) -> Option<Value> {
    let p = vm.properties.as_ref()?;
    let is_delete = |o: &Option<String>| o.as_deref() == Some("Delete");
    let mut needed = false;
    let mut storage = serde_json::Map::new();
    if let Some(sp) = &p.storage_profile {
        if let Some(os) = &sp.os_disk {
            if !is_delete(&os.delete_option) {
                needed = true;
                storage.insert("osDisk".into(), json!({"deleteOption": "Delete"}));
            }
        }
        if sp.data_disks.iter().any(|d| !is_delete(&d.delete_option)) {
            needed = true;
            let disks: Vec<Value> = sp
                .data_disks
                .iter()
                .map(|d| {
                    let mut d = d.clone();
                    d.delete_option = Some("Delete".into());
                    serde_json::to_value(d).unwrap_or(Value::Null)
                })
                .collect();
            storage.insert("dataDisks".into(), Value::Array(disks));
        }
    }
    let mut nics = Vec::new();
    if let Some(np) = &p.network_profile {
        for n in &np.network_interfaces {
            let del = n.properties.as_ref().map(|p| &p.delete_option);
            if names::name_of(&n.id).eq_ignore_ascii_case(nic_name) && !del.is_some_and(is_delete) {
                needed = true;
                let primary = n.properties.as_ref().and_then(|p| p.primary);
                nics.push(json!({"id": n.id, "properties": {"deleteOption": "Delete", "primary": primary}}));
            } else {
                nics.push(serde_json::to_value(n).unwrap_or(Value::Null));
            }
        }
    }
    if !needed {
        return None;
    }
    let mut props = serde_json::Map::new();
    if !storage.is_empty() {
        props.insert("storageProfile".into(), Value::Object(storage));
    }
    props.insert("networkProfile".into(), json!({"networkInterfaces": nics}));
    Some(json!({ "properties": props }))
}

impl AzureDriver {
    pub(crate) async fn delete(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        let ctx = self.existing_context(&req.machine_class, &req.secret)?;
        let vm = req
            .machine
            .metadata
            .name
            .clone()
            .unwrap_or_default()
            .to_lowercase();
        let rg = ctx.spec.resource_group.clone();
        let internal = |what: &str, e: crate::arm::ArmError| {
            let code = if e.machine_code() == Code::Unavailable {
                Code::Unavailable
            } else {
                Code::Internal
            };
            Status::new(code, format!("{what}: {e}"))
        };
        let exists = ctx
            .arm
            .resource_group_exists(&rg)
            .await
            .map_err(|e| internal(&format!("failed to check resource group {rg}"), e))?;
        if !exists {
            warn!(machine = %vm, resource_group = %rg, "skipping delete: the resource group no longer exists");
            return Ok(DeleteMachineResponse::default());
        }
        let existing = ctx.arm.get_vm(&rg, &vm).await.map_err(|e| {
            internal(
                &format!("failed to get virtual machine for VM: [resourceGroup: {rg}, name: {vm}]"),
                e,
            )
        })?;
        match existing {
            None => {
                info!(machine = %vm, resource_group = %rg, "no VM; deleting a leftover NIC and disks if any");
                self.cleanup(&ctx, &vm, false, &[]).await?;
            }
            Some(v) if updatable(&v) => {
                if let Some(patch) = delete_options_patch(&v, &names::nic_name(&vm)) {
                    ctx.arm.patch_vm(&rg, &vm, &patch).await.map_err(|e| {
                        internal(&format!("failed to set the delete options of VM {vm}"), e)
                    })?;
                }
                ctx.arm
                    .delete_vm(&rg, &vm)
                    .await
                    .map_err(|e| internal(&format!("failed to delete VM {vm}"), e))?;
            }
            Some(v) => {
                info!(machine = %vm, resource_group = %rg, "VM cannot be updated; deleting it and then its NIC and disks");
                ctx.arm
                    .delete_vm(&rg, &vm)
                    .await
                    .map_err(|e| internal(&format!("failed to delete VM {vm}"), e))?;
                self.cleanup(&ctx, &vm, false, &disks_of(&vm, &v)).await?;
            }
        }
        info!(machine = %vm, resource_group = %rg, "deleted the machine's VM, NIC and disks");
        Ok(DeleteMachineResponse::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(json: Value) -> VirtualMachine {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_vm_whose_nic_and_disks_are_deleted_with_it_needs_no_patch() {
        let v = vm(json!({"location": "x", "properties": {
            "storageProfile": {"osDisk": {"createOption": "FromImage", "deleteOption": "Delete"}},
            "networkProfile": {"networkInterfaces": [{"id": "/s/x/networkInterfaces/m1-nic", "properties": {"deleteOption": "Delete"}}]}
        }}));
        assert_eq!(delete_options_patch(&v, "m1-nic"), None);
    }

    #[test]
    fn missing_delete_options_are_patched_and_the_nic_is_matched_by_name() {
        let v = vm(json!({"location": "x", "properties": {
            "storageProfile": {"osDisk": {"createOption": "FromImage"},
                "dataDisks": [{"lun": 0, "createOption": "Empty", "deleteOption": "Detach"}]},
            "networkProfile": {"networkInterfaces": [{"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/m1-nic"}]}
        }}));
        let p = delete_options_patch(&v, "m1-nic").unwrap();
        assert_eq!(
            p.pointer("/properties/storageProfile/osDisk/deleteOption"),
            Some(&json!("Delete"))
        );
        assert_eq!(
            p.pointer("/properties/storageProfile/dataDisks/0/deleteOption"),
            Some(&json!("Delete"))
        );
        assert_eq!(
            p.pointer("/properties/networkProfile/networkInterfaces/0/properties/deleteOption"),
            Some(&json!("Delete"))
        );
    }

    #[test]
    fn failed_or_detaching_vms_are_not_updatable() {
        let failed = vm(json!({"location": "x", "properties": {"provisioningState": "Failed"}}));
        assert!(!updatable(&failed));
        let detaching = vm(json!({"location": "x", "properties": {"storageProfile": {
            "dataDisks": [{"lun": 0, "createOption": "Attach", "toBeDetached": true}]}}}));
        assert!(!updatable(&detaching));
        assert!(updatable(&vm(
            json!({"location": "x", "properties": {"provisioningState": "Succeeded"}})
        )));
    }
}
