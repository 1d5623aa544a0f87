//! The Azure providerSpec (the MachineClass `providerSpec` JSON) and its
//! validation, with the JSON keys and the validation messages of Gardener's
//! Azure provider. Unknown keys are ignored.

use crate::names::{CLUSTER_TAG_PREFIX, ROLE_TAG_PREFIX};
use mcm_driver::provider_spec::{
    FieldError, Join, Messages, ProviderSpec, SecretData, SecretUse, ROOT,
};
use mcm_driver::spec_decode::{self, DecodeError, Decoded};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The provider name a MachineClass must carry.
pub const PROVIDER_NAME: &str = "Azure";
/// The cloud names of `cloudConfiguration.name`.
pub const CLOUD_NAMES: [&str; 3] = ["AzurePublic", "AzureChina", "AzureGovernment"];
/// The accepted `properties.securityProfile.securityType` values.
pub const SECURITY_TYPES: [&str; 2] = ["ConfidentialVM", "TrustedLaunch"];
/// The accepted `storageProfile.diskControllerType` values.
pub const DISK_CONTROLLER_TYPES: [&str; 2] = ["NVMe", "SCSI"];
/// The accepted `osDisk.managedDisk.securityProfile.securityEncryptionType` values.
pub const SECURITY_ENCRYPTION_TYPES: [&str; 3] = [
    "DiskWithVMGuestState",
    "NonPersistedTPM",
    "VMGuestStateOnly",
];

/// `AzureProviderSpec`: what a MachineClass says about its VMs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AzureProviderSpec {
    /// The region; also the middle part of the provider ID.
    pub location: String,
    /// Tags of the VM, its NIC and its disks; must hold a cluster and a role tag key.
    pub tags: BTreeMap<String, String>,
    /// The VM's properties.
    pub properties: VmProperties,
    /// The resource group of every resource of the machine.
    pub resource_group: String,
    /// The existing subnet the NIC is placed in.
    pub subnet_info: SubnetInfo,
    /// Which Azure cloud (public, China, government).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_configuration: Option<CloudConfiguration>,
}

/// `cloudConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CloudConfiguration {
    /// `AzurePublic`, `AzureChina` or `AzureGovernment`.
    pub name: String,
}

/// `subnetInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubnetInfo {
    /// The virtual network.
    pub vnet_name: String,
    /// The virtual network's resource group, when not the machine's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vnet_resource_group: Option<String>,
    /// The subnet.
    pub subnet_name: String,
}

/// `properties`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VmProperties {
    /// `hardwareProfile.vmSize`.
    pub hardware_profile: HardwareProfile,
    /// Image, OS disk and data disks.
    pub storage_profile: StorageProfile,
    /// Admin user and SSH key.
    pub os_profile: OsProfile,
    /// Accelerated networking of the NIC.
    pub network_profile: NetworkProfile,
    /// An availability set the VM joins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_set: Option<SubResource>,
    /// A user-assigned managed identity.
    #[serde(rename = "identityID", skip_serializing_if = "Option::is_none")]
    pub identity_id: Option<String>,
    /// The availability zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<i64>,
    /// A flexible virtual machine scale set the VM joins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_machine_scale_set: Option<SubResource>,
    /// Boot diagnostics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostics_profile: Option<DiagnosticsProfile>,
    /// Deprecated: availability set or VMSS by `kind`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_set: Option<MachineSetConfig>,
    /// Trusted launch / confidential VM settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_profile: Option<SecurityProfile>,
    /// Capacity reservation group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<CapacityReservation>,
}

/// `hardwareProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HardwareProfile {
    /// The VM size, e.g. `Standard_D2s_v3`.
    pub vm_size: String,
}

/// `storageProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StorageProfile {
    /// The image.
    pub image_reference: ImageReference,
    /// `SCSI` or `NVMe`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub disk_controller_type: String,
    /// The OS disk.
    pub os_disk: OsDisk,
    /// Data disks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data_disks: Vec<DataDisk>,
}

/// `imageReference`: exactly one of `id`, `urn`, `communityGalleryImageID`, `sharedGalleryImageID`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ImageReference {
    /// An image resource ID.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// `publisher:offer:sku:version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub urn: Option<String>,
    /// Do not check or accept the marketplace terms.
    pub skip_marketplace_agreement: bool,
    /// A community gallery image.
    #[serde(
        rename = "communityGalleryImageID",
        skip_serializing_if = "Option::is_none"
    )]
    pub community_gallery_image_id: Option<String>,
    /// A shared gallery image.
    #[serde(
        rename = "sharedGalleryImageID",
        skip_serializing_if = "Option::is_none"
    )]
    pub shared_gallery_image_id: Option<String>,
}

impl ImageReference {
    pub(crate) fn urn_set(&self) -> bool {
        non_empty(&self.urn)
    }
}

/// `osDisk`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OsDisk {
    /// Unused (the disk is named `<vm>-os-disk`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Caching (`None`, `ReadOnly`, `ReadWrite`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub caching: String,
    /// Storage account type and security profile.
    pub managed_disk: ManagedDiskParameters,
    /// Size in GiB (> 0).
    #[serde(rename = "diskSizeGB")]
    pub disk_size_gb: i64,
    /// Usually `FromImage`.
    pub create_option: String,
}

/// `managedDisk`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedDiskParameters {
    /// Unused.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// e.g. `Premium_LRS`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub storage_account_type: String,
    /// Confidential VM disk encryption.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_profile: Option<DiskSecurityProfile>,
}

/// `managedDisk.securityProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiskSecurityProfile {
    /// One of [`SECURITY_ENCRYPTION_TYPES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_encryption_type: Option<String>,
}

/// A data disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DataDisk {
    /// Optional infix of the disk name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Logical unit number (unique, ≥ 0).
    pub lun: i64,
    /// Caching; `None` when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub caching: String,
    /// e.g. `StandardSSD_LRS`.
    pub storage_account_type: String,
    /// Size in GiB (> 0).
    #[serde(rename = "diskSizeGB")]
    pub disk_size_gb: i64,
    /// An image the disk is created from (then created before the VM and attached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<ImageReference>,
}

/// `osProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OsProfile {
    /// Ignored: the computer name is the VM name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub computer_name: String,
    /// The admin user. Required.
    pub admin_username: String,
    /// Never used.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub admin_password: String,
    /// Ignored: the secret's `userData` is sent.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub custom_data: String,
    /// SSH settings.
    pub linux_configuration: LinuxConfiguration,
}

/// `linuxConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LinuxConfiguration {
    /// Disable password login.
    pub disable_password_authentication: bool,
    /// The SSH key.
    pub ssh: SshConfiguration,
}

/// `ssh`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SshConfiguration {
    /// One public key.
    pub public_keys: SshPublicKey,
}

/// `publicKeys`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SshPublicKey {
    /// e.g. `/home/core/.ssh/authorized_keys`.
    pub path: String,
    /// The OpenSSH public key; a throw-away key is generated when empty.
    pub key_data: String,
}

/// `networkProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkProfile {
    /// Accelerated networking on the NIC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accelerated_networking: Option<bool>,
    /// `networkInterfaces`: one reference (`id`, `properties.primary`),
    /// deprecated and unused in the reference's API (its own sample writes
    /// `{}`). Decoded so such a class is read without a warning; not used:
    /// the driver makes the VM's NIC itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_interfaces: Option<NetworkInterfaceReference>,
}

/// The reference's `AzureNetworkInterfaceReference` (decoded, unused).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkInterfaceReference {
    /// `id`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// `properties`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub properties: Option<NetworkInterfaceReferenceProperties>,
}

/// `properties` of [`NetworkInterfaceReference`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkInterfaceReferenceProperties {
    /// `primary`.
    pub primary: bool,
}

/// A reference by ARM ID.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubResource {
    /// The ARM resource ID.
    pub id: String,
}

/// `diagnosticsProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiagnosticsProfile {
    /// Boot diagnostics on.
    pub enabled: bool,
    /// A storage account URI (managed storage when absent).
    #[serde(rename = "storageURI", skip_serializing_if = "Option::is_none")]
    pub storage_uri: Option<String>,
}

/// Deprecated `machineSet`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MachineSetConfig {
    /// The ARM ID of the availability set or VMSS.
    pub id: String,
    /// `availabilityset` or `vmo`.
    pub kind: String,
}

/// `securityProfile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecurityProfile {
    /// One of [`SECURITY_TYPES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_type: Option<String>,
    /// UEFI settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uefi_settings: Option<UefiSettings>,
}

/// `uefiSettings`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UefiSettings {
    /// vTPM.
    #[serde(rename = "vtpmEnabled", skip_serializing_if = "Option::is_none")]
    pub vtpm_enabled: Option<bool>,
    /// Secure boot.
    #[serde(rename = "secureBootEnabled", skip_serializing_if = "Option::is_none")]
    pub secure_boot_enabled: Option<bool>,
}

/// `capacityReservation`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CapacityReservation {
    /// The ARM ID of a capacity reservation group.
    #[serde(
        rename = "capacityReservationGroupID",
        skip_serializing_if = "Option::is_none"
    )]
    pub capacity_reservation_group_id: Option<String>,
}

pub(crate) fn blank(s: &str) -> bool {
    s.trim().is_empty()
}

pub(crate) fn non_empty(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|v| !blank(v))
}

impl AzureProviderSpec {
    /// The cluster and role tag keys ListMachines filters by (the first of each, sorted).
    pub fn membership_tag_keys(&self) -> Option<(&str, &str)> {
        let cluster = self
            .tags
            .keys()
            .find(|k| k.starts_with(CLUSTER_TAG_PREFIX))?;
        let role = self.tags.keys().find(|k| k.starts_with(ROLE_TAG_PREFIX))?;
        Some((cluster.as_str(), role.as_str()))
    }

    /// The zone as ARM wants it (`["1"]`).
    pub fn zones(&self) -> Vec<String> {
        self.properties
            .zone
            .map(|z| vec![z.to_string()])
            .unwrap_or_default()
    }

    /// The resource group of the virtual network.
    pub fn vnet_resource_group(&self) -> &str {
        match &self.subnet_info.vnet_resource_group {
            Some(rg) if !blank(rg) => rg,
            _ => &self.resource_group,
        }
    }
}

/// The field of the deprecated `machineSet`'s kind.
const MACHINE_SET_KIND: &str = "providerSpec.properties.machineSet.kind";

/// The drivers' shared front half (docs/design/driver.md, "Provider
/// skeleton") in the reference's words: findings joined as Go prints a
/// slice, the spec's reported before the Secret's.
impl ProviderSpec for AzureProviderSpec {
    const PROVIDER: &'static str = PROVIDER_NAME;
    const MESSAGES: Messages = Messages {
        join: Join::GoSlice,
        decode: "",
        spec: "error in validation of AzureProviderSpec: ",
        secret: Some("error in validating secret: "),
    };

    fn wrong_provider(found: &str) -> String {
        let e = FieldError::invalid(
            "provider",
            found,
            format!(
                "Request for provider {found} cannot be fulfilled. Only {PROVIDER_NAME} provider is supported."
            ),
        );
        format!("error validating provider {e}")
    }

    /// Decodes a providerSpec as the reference's `json.Unmarshal` does (keys
    /// matched case-insensitively, `machineSet.Kind`; design:
    /// docs/design/driver.md, "Decoding") and translates the deprecated
    /// `machineSet` into the availability set or scale set it names.
    fn decode(value: &serde_json::Value) -> Result<Decoded<Self>, DecodeError> {
        let mut d: Decoded<Self> = match value {
            serde_json::Value::Null => Decoded {
                value: AzureProviderSpec::default(),
                warnings: Vec::new(),
            },
            v => spec_decode::decode(v, ROOT)?,
        };
        let spec = &mut d.value;
        if let Some(ms) = spec.properties.machine_set.clone() {
            if ms.kind != "availabilityset" && ms.kind != "vmo" {
                let e = FieldError::invalid(
                    MACHINE_SET_KIND,
                    &ms.kind,
                    "must provide one of [availabilityset vmo]",
                );
                return Err(DecodeError {
                    field: e.field,
                    message: e.kind.to_string(),
                    warnings: d.warnings,
                });
            }
            let sub = Some(SubResource { id: ms.id.clone() });
            if ms.kind == "vmo" && spec.properties.virtual_machine_scale_set.is_none() {
                spec.properties.virtual_machine_scale_set = sub;
            } else if ms.kind == "availabilityset" && spec.properties.availability_set.is_none() {
                spec.properties.availability_set = sub;
            }
        }
        Ok(d)
    }

    fn decode_failed(e: &DecodeError) -> String {
        if e.field == MACHINE_SET_KIND {
            format!("error while validation providerSpec.Properties.MachineSet: [{e}]")
        } else {
            e.to_string()
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        validate(self)
    }

    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
        crate::secret::validate_secret(secret, purpose)
    }
}

mod validate;
pub use validate::validate;

#[cfg(test)]
mod tests;
