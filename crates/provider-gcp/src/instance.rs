//! The Compute `Instance` a machine asks for, built from the providerSpec as
//! the reference builds it, plus the machine's UID in the metadata (so a
//! retried insert can tell its own instance from another one of the same name).

use crate::spec::{
    GcpDisk, GcpNetworkInterface, GcpProviderSpec, DISK_TYPE_PERSISTENT, DISK_TYPE_SCRATCH,
};
use google_cloud_compute_v1::model::{
    attached_disk, metadata, network_interface, scheduling, AcceleratorConfig, AccessConfig,
    AdvancedMachineFeatures, AliasIpRange, AttachedDisk, AttachedDiskInitializeParams,
    CustomerEncryptionKey, Instance, Metadata, NetworkInterface, Scheduling, ServiceAccount,
    ShieldedInstanceConfig, Tags,
};
use std::collections::HashMap;

/// The metadata key that carries the Machine object's UID.
pub const MACHINE_UID_METADATA_KEY: &str = "mcm-machine-uid";
/// The metadata key of cloud-config user data.
pub const USER_DATA_KEY: &str = "user-data";
/// The metadata key of user data that is a script.
pub const STARTUP_SCRIPT_KEY: &str = "startup-script";

/// What the instance is made for.
pub struct InstanceInput<'a> {
    /// The machine name (= instance name).
    pub name: &'a str,
    /// The Machine object's UID.
    pub machine_uid: &'a str,
    /// The project.
    pub project: &'a str,
    /// The user data from the Secret.
    pub user_data: &'a str,
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The instance for a machine.
pub fn build_instance(spec: &GcpProviderSpec, input: &InstanceInput<'_>) -> Instance {
    let zone = &spec.zone;
    let mut i = Instance::new()
        .set_name(input.name)
        .set_can_ip_forward(spec.can_ip_forward)
        .set_deletion_protection(spec.deletion_protection)
        .set_labels(
            spec.labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<HashMap<_, _>>(),
        )
        .set_machine_type(format!("zones/{zone}/machineTypes/{}", spec.machine_type))
        .set_scheduling(
            Scheduling::new()
                .set_automatic_restart(spec.scheduling.automatic_restart)
                .set_on_host_maintenance(scheduling::OnHostMaintenance::from(
                    spec.scheduling.on_host_maintenance.as_str(),
                ))
                .set_preemptible(spec.scheduling.preemptible),
        )
        .set_tags(Tags::new().set_items(spec.tags.clone()))
        .set_disks(
            spec.disks
                .iter()
                .map(|d| attached_disk(d, zone))
                .collect::<Vec<_>>(),
        )
        .set_metadata(Metadata::new().set_items(metadata_items(spec, input)))
        .set_network_interfaces(
            spec.network_interfaces
                .iter()
                .map(|n| network_interface(n, spec, input.project))
                .collect::<Vec<_>>(),
        )
        .set_service_accounts(
            spec.service_accounts
                .iter()
                .map(|sa| {
                    ServiceAccount::new()
                        .set_email(sa.email.clone())
                        .set_scopes(sa.scopes.clone())
                })
                .collect::<Vec<_>>(),
        );
    if let Some(p) = non_empty(&spec.min_cpu_platform) {
        i = i.set_min_cpu_platform(p);
    }
    if let Some(d) = &spec.description {
        i = i.set_description(d.clone());
    }
    if let Some(g) = &spec.gpu {
        i = i.set_guest_accelerators([AcceleratorConfig::new()
            .set_accelerator_type(format!(
                "projects/{}/zones/{zone}/acceleratorTypes/{}",
                input.project, g.accelerator_type
            ))
            .set_accelerator_count(i32::try_from(g.count).unwrap_or(i32::MAX))]);
    }
    if let Some(s) = &spec.shielded_instance_configuration {
        let mut c = ShieldedInstanceConfig::new();
        if let Some(v) = s.integrity_monitoring {
            c = c.set_enable_integrity_monitoring(v);
        }
        if let Some(v) = s.secure_boot {
            c = c.set_enable_secure_boot(v);
        }
        if let Some(v) = s.vtpm {
            c = c.set_enable_vtpm(v);
        }
        i = i.set_shielded_instance_config(c);
    }
    if let Some(a) = &spec.advanced_machine_features {
        i = i.set_advanced_machine_features(
            AdvancedMachineFeatures::new()
                .set_enable_nested_virtualization(a.enable_nested_virtualization),
        );
    }
    i
}

fn metadata_items(spec: &GcpProviderSpec, input: &InstanceInput<'_>) -> Vec<metadata::Items> {
    let user_key = if input.user_data.starts_with("#cloud-config") {
        USER_DATA_KEY
    } else {
        STARTUP_SCRIPT_KEY
    };
    let mut items = vec![metadata::Items::new()
        .set_key(user_key)
        .set_value(input.user_data)];
    for m in &spec.metadata {
        let mut item = metadata::Items::new().set_key(m.key.clone());
        if let Some(v) = &m.value {
            item = item.set_value(v.clone());
        }
        items.push(item);
    }
    items.push(
        metadata::Items::new()
            .set_key(MACHINE_UID_METADATA_KEY)
            .set_value(input.machine_uid),
    );
    items
}

fn attached_disk(d: &GcpDisk, zone: &str) -> AttachedDisk {
    let auto_delete = d.auto_delete.unwrap_or(true);
    let mut disk = if d.type_ == DISK_TYPE_SCRATCH {
        AttachedDisk::new()
            .set_type(attached_disk::Type::from(DISK_TYPE_SCRATCH))
            .set_boot(false)
            .set_auto_delete(auto_delete)
            .set_interface(attached_disk::Interface::from(d.interface.as_str()))
            .set_initialize_params(
                AttachedDiskInitializeParams::new()
                    .set_disk_type(format!("zones/{zone}/diskTypes/local-ssd")),
            )
    } else {
        let mut p = AttachedDiskInitializeParams::new()
            .set_disk_type(format!("zones/{zone}/diskTypes/{}", d.type_))
            .set_labels(
                d.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<HashMap<_, _>>(),
            );
        if d.size_gb != 0 {
            p = p.set_disk_size_gb(d.size_gb);
        }
        if let Some(img) = non_empty(&d.image) {
            p = p.set_source_image(img);
        }
        if d.provisioned_iops != 0 {
            p = p.set_provisioned_iops(d.provisioned_iops);
        }
        if d.provisioned_throughput != 0 {
            p = p.set_provisioned_throughput(d.provisioned_throughput);
        }
        if let Some(pool) = d.storage_pool.as_deref().and_then(non_empty) {
            p = p.set_storage_pool(pool);
        }
        AttachedDisk::new()
            .set_type(attached_disk::Type::from(DISK_TYPE_PERSISTENT))
            .set_boot(d.boot)
            .set_auto_delete(auto_delete)
            .set_initialize_params(p)
    };
    if let Some(e) = &d.encryption {
        let mut k = CustomerEncryptionKey::new().set_kms_key_name(e.kms_key_name.trim());
        if let Some(sa) = non_empty(e.kms_key_service_account.trim()) {
            k = k.set_kms_key_service_account(sa);
        }
        disk = disk.set_disk_encryption_key(k);
    }
    disk
}

fn network_interface(
    n: &GcpNetworkInterface,
    spec: &GcpProviderSpec,
    project: &str,
) -> NetworkInterface {
    let mut nic = NetworkInterface::new();
    if !n.disable_external_ip {
        nic = nic.set_access_configs([AccessConfig::new()]);
    }
    if !n.network.is_empty() {
        nic = nic.set_network(format!("projects/{project}/global/networks/{}", n.network));
    }
    if !n.subnetwork.is_empty() {
        nic = nic.set_subnetwork(format!(
            "regions/{}/subnetworks/{}",
            spec.region, n.subnetwork
        ));
    }
    if n.stack_type == "IPV4_IPV6" || n.use_alias_ips {
        if let Some(s) = non_empty(&n.stack_type) {
            nic = nic.set_stack_type(network_interface::StackType::from(s.as_str()));
        }
        if let Some(a) = non_empty(&n.ipv6_access_type) {
            nic = nic.set_ipv_6_access_type(network_interface::Ipv6AccessType::from(a.as_str()));
        }
        let mut r = AliasIpRange::new();
        if let Some(c) = non_empty(&n.ip_cidr_range) {
            r = r.set_ip_cidr_range(c);
        }
        if let Some(s) = non_empty(&n.subnetwork_range_name) {
            r = r.set_subnetwork_range_name(s);
        }
        nic = nic.set_alias_ip_ranges([r]);
    }
    nic
}

/// The UID recorded in an instance's metadata.
pub fn machine_uid_of(i: &Instance) -> Option<&str> {
    i.metadata
        .as_ref()?
        .items
        .iter()
        .find(|m| m.key.as_deref() == Some(MACHINE_UID_METADATA_KEY))
        .and_then(|m| m.value.as_deref())
}

#[cfg(test)]
mod tests;
