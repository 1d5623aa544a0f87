//! The NIC, disk and VM bodies CreateMachine sends, built from the providerSpec
//! as the reference builds them.

use crate::arm::models::{self as m, SubResource};
use crate::names;
use crate::spec::{AzureProviderSpec, DataDisk, ImageReference};
use base64::Engine;
use std::collections::BTreeMap;

/// The spec's tags plus the machine UID tag.
pub fn tags(spec: &AzureProviderSpec, machine_uid: &str) -> BTreeMap<String, String> {
    let mut t = spec.tags.clone();
    if !machine_uid.is_empty() {
        t.insert(names::MACHINE_UID_TAG.to_string(), machine_uid.to_string());
    }
    t
}

/// The NIC: dynamic private IP in the subnet, IP forwarding on, accelerated
/// networking as the spec says, type Standard, no public IP.
pub fn nic(
    spec: &AzureProviderSpec,
    nic_name: &str,
    subnet_id: &str,
    machine_uid: &str,
) -> m::NetworkInterface {
    m::NetworkInterface {
        location: spec.location.clone(),
        tags: tags(spec, machine_uid),
        properties: m::NicProperties {
            ip_configurations: vec![m::IpConfiguration {
                name: nic_name.to_string(),
                properties: m::IpConfigurationProperties {
                    private_ip_allocation_method: Some("Dynamic".into()),
                    subnet: Some(SubResource::new(subnet_id)),
                    ..Default::default()
                },
            }],
            enable_ip_forwarding: Some(true),
            enable_accelerated_networking: spec.properties.network_profile.accelerated_networking,
            nic_type: Some("Standard".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The VM's image reference (a URN becomes publisher/offer/sku/version).
pub fn image_reference(r: &ImageReference) -> m::ImageReference {
    if let Some(urn) = r.urn.as_deref().filter(|u| !u.trim().is_empty()) {
        let p: Vec<&str> = urn.split(':').collect();
        let part = |i: usize| p.get(i).map(|s| s.to_string());
        return m::ImageReference {
            publisher: part(0),
            offer: part(1),
            sku: part(2),
            version: part(3),
            ..Default::default()
        };
    }
    m::ImageReference {
        id: Some(r.id.clone()).filter(|s| !s.trim().is_empty()),
        community_gallery_image_id: r.community_gallery_image_id.clone(),
        shared_gallery_image_id: r.shared_gallery_image_id.clone(),
        ..Default::default()
    }
}

/// A disk created from an image before the VM (data disks with `imageRef`).
pub fn image_disk(
    spec: &AzureProviderSpec,
    d: &DataDisk,
    image: m::ImageDiskReference,
    gallery: bool,
) -> m::Disk {
    m::Disk {
        location: spec.location.clone(),
        tags: spec.tags.clone(),
        zones: spec.zones(),
        sku: Some(m::DiskSku {
            name: d.storage_account_type.clone(),
        }),
        properties: m::DiskProperties {
            creation_data: m::CreationData {
                create_option: "FromImage".into(),
                image_reference: (!gallery).then(|| image.clone()),
                gallery_image_reference: gallery.then_some(image),
            },
            disk_size_gb: Some(d.disk_size_gb),
            os_type: Some("Linux".into()),
            provisioning_state: None,
        },
        ..Default::default()
    }
}

/// An OpenSSH `ssh-rsa` public key whose private key nobody has: the
/// reference sends a throw-away RSA-4096 key when the spec has none, since
/// Azure requires one for Linux VMs; a random odd 4096-bit modulus does the
/// same without ever holding a private key.
pub fn throwaway_ssh_key() -> String {
    fn put(buf: &mut Vec<u8>, bytes: &[u8]) {
        buf.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        buf.extend_from_slice(bytes);
    }
    let mut modulus = vec![0u8; 513];
    rand::Rng::fill(&mut rand::rng(), &mut modulus[1..]);
    modulus[1] |= 0x80;
    modulus[512] |= 1;
    let mut blob = Vec::new();
    put(&mut blob, b"ssh-rsa");
    put(&mut blob, &[1, 0, 1]);
    put(&mut blob, &modulus);
    format!(
        "ssh-rsa {}",
        base64::engine::general_purpose::STANDARD.encode(blob)
    )
}

/// Inputs of the VM body besides the spec.
pub struct VmInputs<'a> {
    /// The VM name.
    pub vm_name: &'a str,
    /// The NIC's ARM ID.
    pub nic_id: &'a str,
    /// The secret's user data.
    pub user_data: &'a [u8],
    /// The marketplace plan, when the image has one.
    pub plan: Option<m::Plan>,
    /// LUN → ARM ID of the disks created from images.
    pub image_disks: BTreeMap<i64, String>,
    /// The Machine's UID (tagged).
    pub machine_uid: &'a str,
}

/// The VM: every NIC and disk deleted with it, customData = base64 of the
/// user data, computer name = VM name, zone / availability set / VMSS /
/// identity / diagnostics / security / capacity reservation as configured.
pub fn vm(spec: &AzureProviderSpec, i: VmInputs<'_>) -> m::VirtualMachine {
    let p = &spec.properties;
    let sp = &p.storage_profile;
    let key = &p.os_profile.linux_configuration.ssh.public_keys;
    let key_data = if key.key_data.trim().is_empty() {
        throwaway_ssh_key()
    } else {
        key.key_data.clone()
    };
    let data_disks = sp
        .data_disks
        .iter()
        .map(|d| {
            let attached = i.image_disks.get(&d.lun);
            m::DataDisk {
                lun: d.lun,
                name: Some(names::data_disk_name(i.vm_name, &d.name, d.lun)),
                create_option: if attached.is_some() {
                    "Attach"
                } else {
                    "Empty"
                }
                .into(),
                caching: Some(if d.caching.trim().is_empty() {
                    "None".to_string()
                } else {
                    d.caching.clone()
                }),
                delete_option: Some("Delete".into()),
                disk_size_gb: Some(d.disk_size_gb),
                managed_disk: Some(m::ManagedDisk {
                    id: attached.cloned(),
                    storage_account_type: Some(d.storage_account_type.clone()),
                    security_profile: None,
                }),
                to_be_detached: None,
            }
        })
        .collect();
    let os = &sp.os_disk;
    let properties = m::VmProperties {
        hardware_profile: Some(m::HardwareProfile {
            vm_size: p.hardware_profile.vm_size.clone(),
        }),
        storage_profile: Some(m::StorageProfile {
            image_reference: Some(image_reference(&sp.image_reference)),
            os_disk: Some(m::OsDisk {
                name: Some(names::os_disk_name(i.vm_name)),
                create_option: os.create_option.clone(),
                caching: Some(os.caching.clone()).filter(|c| !c.is_empty()),
                delete_option: Some("Delete".into()),
                disk_size_gb: Some(os.disk_size_gb),
                managed_disk: Some(m::ManagedDisk {
                    id: None,
                    storage_account_type: Some(os.managed_disk.storage_account_type.clone())
                        .filter(|s| !s.is_empty()),
                    security_profile: os
                        .managed_disk
                        .security_profile
                        .as_ref()
                        .and_then(|s| s.security_encryption_type.clone())
                        .map(|t| m::VmDiskSecurityProfile {
                            security_encryption_type: Some(t),
                        }),
                }),
            }),
            data_disks,
            disk_controller_type: Some(sp.disk_controller_type.clone()).filter(|s| !s.is_empty()),
        }),
        os_profile: Some(m::OsProfile {
            computer_name: Some(i.vm_name.to_string()),
            admin_username: Some(p.os_profile.admin_username.clone()),
            custom_data: Some(base64::engine::general_purpose::STANDARD.encode(i.user_data)),
            linux_configuration: Some(m::LinuxConfiguration {
                disable_password_authentication: p
                    .os_profile
                    .linux_configuration
                    .disable_password_authentication,
                ssh: Some(m::SshConfiguration {
                    public_keys: vec![m::SshPublicKey {
                        path: key.path.clone(),
                        key_data,
                    }],
                }),
            }),
        }),
        network_profile: Some(m::NetworkProfile {
            network_interfaces: vec![m::NicReference {
                id: i.nic_id.to_string(),
                properties: Some(m::NicReferenceProperties {
                    primary: Some(true),
                    delete_option: Some("Delete".into()),
                }),
            }],
        }),
        availability_set: p
            .availability_set
            .as_ref()
            .map(|s| SubResource::new(s.id.clone())),
        virtual_machine_scale_set: p
            .virtual_machine_scale_set
            .as_ref()
            .map(|s| SubResource::new(s.id.clone())),
        diagnostics_profile: p
            .diagnostics_profile
            .as_ref()
            .map(|d| m::DiagnosticsProfile {
                boot_diagnostics: m::BootDiagnostics {
                    enabled: d.enabled,
                    storage_uri: d.storage_uri.clone(),
                },
            }),
        security_profile: p.security_profile.as_ref().map(|s| m::SecurityProfile {
            security_type: s.security_type.clone(),
            uefi_settings: s.uefi_settings.as_ref().map(|u| m::UefiSettings {
                secure_boot_enabled: u.secure_boot_enabled,
                vtpm_enabled: u.vtpm_enabled,
            }),
        }),
        capacity_reservation: p
            .capacity_reservation
            .as_ref()
            .and_then(|c| c.capacity_reservation_group_id.clone())
            .map(|id| m::CapacityReservationProfile {
                capacity_reservation_group: SubResource::new(id),
            }),
        provisioning_state: None,
        vm_id: None,
    };
    m::VirtualMachine {
        location: spec.location.clone(),
        tags: tags(spec, i.machine_uid),
        zones: spec.zones(),
        plan: i.plan,
        identity: p.identity_id.as_ref().map(|id| m::VmIdentity {
            kind: "UserAssigned".into(),
            user_assigned_identities: [(id.clone(), serde_json::json!({}))].into_iter().collect(),
        }),
        properties: Some(properties),
        ..Default::default()
    }
}
