//! Deleting what a machine left behind: the VM of a failed create, and the
//! NIC, OS disk and data disks of a VM that is gone, never came to be, or
//! could not be updated. Design: docs/design/providers/azure.md, "Clean-up".
//!
//! Every step is idempotent (DELETE of a missing resource is success), so a
//! failed clean-up is simply run again by the next create or delete. A NIC or
//! disk of the machine's name that another VM holds is not the machine's
//! leftover: it is kept, with a warning, and does not fail the call.

use crate::arm::models::VirtualMachine;
use crate::arm::ArmError;
use crate::driver::{AzureDriver, Ctx};
use crate::names;
use futures::future::join_all;
use mcm_driver::Status;
use tracing::warn;

/// Names of the machine's own managed disks that VM `name` refers to, read
/// from its storage profile (the class may have changed since it was made):
/// only those named as the driver names them (`<vm>-os-disk`,
/// `<vm>-…-data-disk`). Other disks attached to the VM, such as persistent
/// volumes the CSI driver attached, are never the machine's to delete.
pub(crate) fn disks_of(name: &str, vm: &VirtualMachine) -> Vec<String> {
    let Some(sp) = vm
        .properties
        .as_ref()
        .and_then(|p| p.storage_profile.as_ref())
    else {
        return Vec::new();
    };
    let os = sp.os_disk.iter().filter_map(|d| d.name.clone());
    let data = sp.data_disks.iter().filter_map(|d| d.name.clone());
    let (os_disk, prefix) = (
        names::os_disk_name(name).to_ascii_lowercase(),
        format!("{name}-").to_ascii_lowercase(),
    );
    os.chain(data)
        .filter(|n| {
            let n = n.to_ascii_lowercase();
            n == os_disk || (n.starts_with(&prefix) && n.ends_with(names::DATA_DISK_SUFFIX))
        })
        .collect()
}

/// Whether `holder` (an ARM ID of a VM) names a VM other than `vm`.
fn held_by_another(holder: Option<&str>, vm: &str) -> bool {
    holder.is_some_and(|h| !h.is_empty() && !names::name_of(h).eq_ignore_ascii_case(vm))
}

impl AzureDriver {
    /// Deletes the VM (when `with_vm`), then its NIC and every disk of the
    /// machine: the names the spec gives them plus `known_disks` (those the
    /// VM itself listed), two disks at a time. Missing ones are fine; one
    /// held by another VM is kept.
    pub(crate) async fn cleanup(
        &self,
        ctx: &Ctx,
        vm: &str,
        with_vm: bool,
        known_disks: &[String],
    ) -> Result<(), Status> {
        let rg = &ctx.spec.resource_group;
        let mut errors = Vec::new();
        if with_vm {
            if let Err(e) = ctx.arm.delete_vm(rg, vm).await {
                errors.push(e.to_string());
            }
        }
        let nic = names::nic_name(vm);
        if let Err(e) = ctx.arm.delete_nic(rg, &nic).await {
            if let Some(e) = self.unless_held_nic(ctx, vm, &nic, e).await {
                errors.push(e);
            }
        }
        let mut disks = vec![names::os_disk_name(vm)];
        disks.extend(
            ctx.spec
                .properties
                .storage_profile
                .data_disks
                .iter()
                .map(|d| names::data_disk_name(vm, &d.name, d.lun)),
        );
        for d in known_disks {
            if !disks.iter().any(|have| have.eq_ignore_ascii_case(d)) {
                disks.push(d.clone());
            }
        }
        for pair in disks.chunks(2) {
            let results = join_all(pair.iter().map(|d| async move {
                match ctx.arm.delete_disk(rg, d).await {
                    Ok(_) => None,
                    Err(e) => self.unless_held_disk(ctx, vm, d, e).await,
                }
            }))
            .await;
            errors.extend(results.into_iter().flatten());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Status::internal(format!(
                "failed to delete leftover resources of VM {vm}: {}",
                errors.join("; ")
            )))
        }
    }

    /// A failed NIC deletion is an error unless the NIC is held by another VM.
    async fn unless_held_nic(&self, ctx: &Ctx, vm: &str, nic: &str, e: ArmError) -> Option<String> {
        let rg = &ctx.spec.resource_group;
        let holder = match ctx.arm.get_nic(rg, nic).await {
            Ok(Some(n)) => n.properties.virtual_machine.map(|s| s.id),
            _ => return Some(e.to_string()),
        };
        if held_by_another(holder.as_deref(), vm) {
            warn!(machine = %vm, resource_group = %rg, nic = %nic, held_by = ?holder,
                "a NIC of this machine's name is attached to another VM; keeping it");
            return None;
        }
        Some(e.to_string())
    }

    /// A failed disk deletion is an error unless the disk is held by another VM.
    async fn unless_held_disk(
        &self,
        ctx: &Ctx,
        vm: &str,
        disk: &str,
        e: ArmError,
    ) -> Option<String> {
        let rg = &ctx.spec.resource_group;
        let holder = match ctx.arm.get_disk(rg, disk).await {
            Ok(Some(d)) => d.managed_by,
            _ => return Some(e.to_string()),
        };
        if held_by_another(holder.as_deref(), vm) {
            warn!(machine = %vm, resource_group = %rg, disk = %disk, held_by = ?holder,
                "a disk of this machine's name is attached to another VM; keeping it");
            return None;
        }
        Some(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_holder_naming_another_vm_keeps_a_resource() {
        let id = |n: &str| {
            format!("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/{n}")
        };
        assert!(held_by_another(Some(&id("other")), "m1"));
        assert!(!held_by_another(Some(&id("M1")), "m1"));
        assert!(!held_by_another(None, "m1"));
        assert!(!held_by_another(Some(""), "m1"));
    }

    #[test]
    fn the_machines_disks_a_vm_lists_are_named_as_the_driver_names_them() {
        let vm: VirtualMachine = serde_json::from_value(json!({"location": "x", "properties": {
            "storageProfile": {"osDisk": {"name": "M1-os-disk", "createOption": "FromImage"},
                "dataDisks": [
                    {"lun": 3, "name": "m1-old-3-data-disk", "createOption": "Empty"},
                    {"lun": 4, "name": "pvc-0f3c", "createOption": "Attach"},
                    {"lun": 5, "name": "m10-0-data-disk", "createOption": "Attach"},
                    {"lun": 6, "name": "m1-restored-snapshot", "createOption": "Attach"}]}}}))
        .expect("vm");
        assert_eq!(
            disks_of("m1", &vm),
            vec!["M1-os-disk", "m1-old-3-data-disk"],
            "a persistent volume, another machine's disk and a foreign disk are not the machine's"
        );
    }
}
