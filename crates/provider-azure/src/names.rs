//! Names of a machine's resources, its provider ID, tag keys and ARM IDs.

/// Suffix of a machine's NIC name (`<vm>-nic`).
pub const NIC_SUFFIX: &str = "-nic";
/// Suffix of a machine's OS disk name (`<vm>-os-disk`).
pub const OS_DISK_SUFFIX: &str = "-os-disk";
/// Suffix of a machine's data disk names (`<vm>-[<name>-]<lun>-data-disk`).
pub const DATA_DISK_SUFFIX: &str = "-data-disk";
/// The Azure Disk CSI driver.
pub const CSI_DRIVER_NAME: &str = "disk.csi.azure.com";
/// Prefix of the cluster tag key.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io-cluster-";
/// Prefix of the role tag key.
pub const ROLE_TAG_PREFIX: &str = "kubernetes.io-role-";
/// Tag carrying the Machine's UID on the VM and its NIC: a retried create
/// adopts the VM that carries it. (Azure tag names cannot contain `/`.)
pub const MACHINE_UID_TAG: &str = "mcm.gardener.cloud-machine-uid";

/// The NIC of a VM.
pub fn nic_name(vm: &str) -> String {
    format!("{vm}{NIC_SUFFIX}")
}

/// The OS disk of a VM.
pub fn os_disk_name(vm: &str) -> String {
    format!("{vm}{OS_DISK_SUFFIX}")
}

/// The name suffix of a data disk: `-<lun>-data-disk` or `-<name>-<lun>-data-disk`.
pub fn data_disk_suffix(name: &str, lun: i64) -> String {
    if name.trim().is_empty() {
        format!("-{lun}{DATA_DISK_SUFFIX}")
    } else {
        format!("-{name}-{lun}{DATA_DISK_SUFFIX}")
    }
}

/// A data disk of a VM.
pub fn data_disk_name(vm: &str, name: &str, lun: i64) -> String {
    format!("{vm}{}", data_disk_suffix(name, lun))
}

/// The provider ID: `azure:///<location>/<vm>`.
pub fn provider_id(location: &str, vm: &str) -> String {
    format!("azure:///{location}/{vm}")
}

/// The type segment (the last `<type>/<name>` pair's type) of an ARM resource
/// ID, or `None` when it is not one: `/subscriptions/<s>/resourceGroups/<rg>/providers/<ns>/<type>/<name>…`.
pub fn resource_type_of(id: &str) -> Option<&str> {
    let parts: Vec<&str> = id.trim_matches('/').split('/').collect();
    if parts.len() < 2 || !parts[0].eq_ignore_ascii_case("subscriptions") || parts[1].is_empty() {
        return None;
    }
    let p = parts
        .iter()
        .position(|s| s.eq_ignore_ascii_case("providers"))?;
    let rest = &parts[p + 1..];
    // <namespace>/<type>/<name>[/<type>/<name>]*
    if rest.len() < 3 || rest.len().is_multiple_of(2) || rest.iter().any(|s| s.is_empty()) {
        return None;
    }
    Some(rest[rest.len() - 2])
}

/// The last segment of an ARM ID (the resource's name).
pub fn name_of(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_the_references() {
        assert_eq!(nic_name("m1"), "m1-nic");
        assert_eq!(os_disk_name("m1"), "m1-os-disk");
        assert_eq!(data_disk_name("m1", "", 0), "m1-0-data-disk");
        assert_eq!(data_disk_name("m1", "etcd", 2), "m1-etcd-2-data-disk");
        assert_eq!(provider_id("westeurope", "m1"), "azure:///westeurope/m1");
    }

    #[test]
    fn arm_resource_types_are_parsed() {
        let crg = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/capacityReservationGroups/g";
        assert_eq!(resource_type_of(crg), Some("capacityReservationGroups"));
        let nested = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s1";
        assert_eq!(resource_type_of(nested), Some("subnets"));
        assert_eq!(resource_type_of("not-an-id"), None);
        assert_eq!(resource_type_of("/subscriptions/s/resourceGroups/rg"), None);
        assert_eq!(name_of(crg), "g");
    }
}
