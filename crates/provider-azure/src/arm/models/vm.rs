//! The virtual machine body (the fields the driver sends or reads).

use super::SubResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `Microsoft.Compute/virtualMachines`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachine {
    /// ARM ID (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Region.
    #[serde(default)]
    pub location: String,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Availability zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
    /// Marketplace plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
    /// Managed identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<VmIdentity>,
    /// Properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<VmProperties>,
}

impl VirtualMachine {
    /// `properties.provisioningState`.
    pub fn provisioning_state(&self) -> Option<&str> {
        self.properties
            .as_ref()
            .and_then(|p| p.provisioning_state.as_deref())
    }
}

/// A marketplace plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Plan name.
    #[serde(default)]
    pub name: String,
    /// Publisher.
    #[serde(default)]
    pub publisher: String,
    /// Product (offer).
    #[serde(default)]
    pub product: String,
}

/// `identity`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmIdentity {
    /// `UserAssigned`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Identity ID → `{}`.
    #[serde(default)]
    pub user_assigned_identities: BTreeMap<String, Value>,
}

/// `properties` of a VM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmProperties {
    /// Size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<HardwareProfile>,
    /// Image and disks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_profile: Option<StorageProfile>,
    /// Computer name, admin, custom data, SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_profile: Option<OsProfile>,
    /// NICs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_profile: Option<NetworkProfile>,
    /// Availability set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_set: Option<SubResource>,
    /// Flexible scale set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_scale_set: Option<SubResource>,
    /// Boot diagnostics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics_profile: Option<DiagnosticsProfile>,
    /// Security type and UEFI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_profile: Option<SecurityProfile>,
    /// Capacity reservation group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<CapacityReservationProfile>,
    /// `Creating`, `Succeeded`, `Failed`, `Deleting`… (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
    /// The VM's unique ID (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_id: Option<String>,
}

/// `hardwareProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HardwareProfile {
    /// VM size.
    #[serde(default)]
    pub vm_size: String,
}

/// `storageProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfile {
    /// Image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_reference: Option<ImageReference>,
    /// OS disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_disk: Option<OsDisk>,
    /// Data disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_disks: Vec<DataDisk>,
    /// `SCSI` or `NVMe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_controller_type: Option<String>,
}

/// `imageReference`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReference {
    /// Image resource ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Marketplace publisher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
    /// Marketplace offer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<String>,
    /// Marketplace SKU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// Marketplace version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Community gallery image.
    #[serde(
        default,
        rename = "communityGalleryImageId",
        skip_serializing_if = "Option::is_none"
    )]
    pub community_gallery_image_id: Option<String>,
    /// Shared gallery image.
    #[serde(
        default,
        rename = "sharedGalleryImageId",
        skip_serializing_if = "Option::is_none"
    )]
    pub shared_gallery_image_id: Option<String>,
}

/// Managed disk parameters of a VM disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedDisk {
    /// The disk's ARM ID (attach / read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Storage account type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_account_type: Option<String>,
    /// Confidential VM encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_profile: Option<VmDiskSecurityProfile>,
}

/// `managedDisk.securityProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmDiskSecurityProfile {
    /// Encryption type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_encryption_type: Option<String>,
}

/// `osDisk`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OsDisk {
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `FromImage`, …
    #[serde(default)]
    pub create_option: String,
    /// Caching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caching: Option<String>,
    /// `Delete` or `Detach` with the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<String>,
    /// Size in GiB.
    #[serde(
        default,
        rename = "diskSizeGB",
        skip_serializing_if = "Option::is_none"
    )]
    pub disk_size_gb: Option<i64>,
    /// Managed disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_disk: Option<ManagedDisk>,
}

/// A data disk of a VM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataDisk {
    /// LUN.
    pub lun: i64,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Empty` or `Attach`.
    #[serde(default)]
    pub create_option: String,
    /// Caching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caching: Option<String>,
    /// `Delete` or `Detach` with the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<String>,
    /// Size in GiB.
    #[serde(
        default,
        rename = "diskSizeGB",
        skip_serializing_if = "Option::is_none"
    )]
    pub disk_size_gb: Option<i64>,
    /// Managed disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_disk: Option<ManagedDisk>,
    /// Marked for detachment (read only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_be_detached: Option<bool>,
}

/// `osProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OsProfile {
    /// Computer (host) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_name: Option<String>,
    /// Admin user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_username: Option<String>,
    /// Base64 user data (write only: ARM never returns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_data: Option<String>,
    /// Linux settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linux_configuration: Option<LinuxConfiguration>,
}

/// `linuxConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinuxConfiguration {
    /// No password login.
    #[serde(default)]
    pub disable_password_authentication: bool,
    /// SSH keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshConfiguration>,
}

/// `ssh`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshConfiguration {
    /// Public keys.
    #[serde(default)]
    pub public_keys: Vec<SshPublicKey>,
}

/// An SSH public key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshPublicKey {
    /// authorized_keys path.
    #[serde(default)]
    pub path: String,
    /// The OpenSSH public key.
    #[serde(default)]
    pub key_data: String,
}

/// `networkProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkProfile {
    /// NIC references.
    #[serde(default)]
    pub network_interfaces: Vec<NicReference>,
}

/// A NIC reference of a VM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NicReference {
    /// The NIC's ARM ID.
    #[serde(default)]
    pub id: String,
    /// Primary / delete option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<NicReferenceProperties>,
}

/// Properties of a NIC reference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicReferenceProperties {
    /// Primary NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    /// `Delete` or `Detach` with the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_option: Option<String>,
}

/// `diagnosticsProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsProfile {
    /// Boot diagnostics.
    pub boot_diagnostics: BootDiagnostics,
}

/// `bootDiagnostics`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootDiagnostics {
    /// On.
    #[serde(default)]
    pub enabled: bool,
    /// Storage account URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_uri: Option<String>,
}

/// `securityProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityProfile {
    /// `TrustedLaunch` / `ConfidentialVM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_type: Option<String>,
    /// UEFI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uefi_settings: Option<UefiSettings>,
}

/// `uefiSettings`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UefiSettings {
    /// Secure boot.
    #[serde(
        default,
        rename = "secureBootEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub secure_boot_enabled: Option<bool>,
    /// vTPM.
    #[serde(
        default,
        rename = "vTpmEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub vtpm_enabled: Option<bool>,
}

/// `capacityReservation`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationProfile {
    /// The group.
    pub capacity_reservation_group: SubResource,
}
