//! The GCP `providerSpec` of a MachineClass, field for field as Gardener's
//! GCP provider reads it (keys matched case-insensitively, unknown keys
//! ignored with a warning, missing ones take their zero value).

use mcm_driver::provider_spec::ProviderSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The MachineClass `provider` value this driver serves.
pub const PROVIDER_NAME: &str = "GCP";
/// Disk type of a local SSD.
pub const DISK_TYPE_SCRATCH: &str = "SCRATCH";
/// Disk type of a persistent disk (on the wire).
pub const DISK_TYPE_PERSISTENT: &str = "PERSISTENT";
/// Disk interface NVME (scratch disks).
pub const DISK_INTERFACE_NVME: &str = "NVME";
/// Disk interface SCSI (scratch disks).
pub const DISK_INTERFACE_SCSI: &str = "SCSI";
/// The network-tag marker of the cluster a VM belongs to.
pub const CLUSTER_TAG_MARKER: &str = "kubernetes-io-cluster-";
/// The network-tag marker of the VM's role.
pub const ROLE_TAG_MARKER: &str = "kubernetes-io-role-";

/// The GCP providerSpec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GcpProviderSpec {
    /// `APIVersion`: the reference's field has no JSON tag, so its key is
    /// `APIVersion` (any case, e.g. `apiVersion`). Decoded so a class
    /// carrying it gets no unknown-key warning; used by neither provider.
    #[serde(rename = "APIVersion", skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Whether the VM may send and receive packets with foreign addresses.
    pub can_ip_forward: bool,
    /// Whether the VM is protected against deletion.
    pub deletion_protection: bool,
    /// The VM's description.
    pub description: Option<String>,
    /// Disks; the boot disk has `boot: true`.
    pub disks: Vec<GcpDisk>,
    /// One accelerator type attached to the VM.
    pub gpu: Option<GcpGpu>,
    /// Labels of the VM.
    pub labels: BTreeMap<String, String>,
    /// The bare machine type name, e.g. `n1-standard-2`.
    pub machine_type: String,
    /// Extra metadata items (`user-data` is forbidden: it comes from the Secret).
    pub metadata: Vec<GcpMetadata>,
    /// Minimum CPU platform, e.g. `Intel Skylake`.
    #[serde(rename = "minCpuPlatform")]
    pub min_cpu_platform: String,
    /// Network interfaces.
    pub network_interfaces: Vec<GcpNetworkInterface>,
    /// The region (for subnetwork URLs).
    pub region: String,
    /// Scheduling options.
    pub scheduling: GcpScheduling,
    /// Service accounts of the VM.
    pub service_accounts: Vec<GcpServiceAccount>,
    /// Network tags; must contain `kubernetes-io-cluster-…` and `kubernetes-io-role-…`.
    pub tags: Vec<String>,
    /// The zone the VM runs in.
    pub zone: String,
    /// Shielded VM options.
    pub shielded_instance_configuration: Option<ShieldedInstanceConfiguration>,
    /// Advanced machine features.
    pub advanced_machine_features: Option<AdvancedMachineFeatures>,
}

/// Shielded VM options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ShieldedInstanceConfiguration {
    /// Integrity monitoring.
    pub integrity_monitoring: Option<bool>,
    /// Secure boot.
    pub secure_boot: Option<bool>,
    /// Virtual TPM.
    pub vtpm: Option<bool>,
}

/// Advanced machine features.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AdvancedMachineFeatures {
    /// Nested virtualization.
    pub enable_nested_virtualization: bool,
}

/// A disk of the VM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GcpDisk {
    /// Delete the disk with the VM (default true).
    pub auto_delete: Option<bool>,
    /// The boot disk.
    pub boot: bool,
    /// Size in GB.
    pub size_gb: i64,
    /// `SCRATCH` (local SSD) or a persistent disk type such as `pd-ssd`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `NVME` or `SCSI` (scratch disks).
    pub interface: String,
    /// Source image (boot disks).
    pub image: String,
    /// Customer-managed encryption key.
    pub encryption: Option<GcpDiskEncryption>,
    /// Labels of the disk.
    pub labels: BTreeMap<String, String>,
    /// Provisioned IOPS.
    pub provisioned_iops: i64,
    /// Provisioned throughput (MB/s).
    pub provisioned_throughput: i64,
    /// Storage pool.
    pub storage_pool: Option<String>,
}

/// A disk's customer-managed encryption key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GcpDiskEncryption {
    /// The KMS key.
    pub kms_key_name: String,
    /// The service account that uses the key (empty = the Compute Service Agent).
    pub kms_key_service_account: String,
}

/// A metadata item.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GcpMetadata {
    /// Key.
    pub key: String,
    /// Value (may be null).
    pub value: Option<String>,
}

/// A network interface.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GcpNetworkInterface {
    /// No external IPv4 address.
    #[serde(rename = "disableExternalIP")]
    pub disable_external_ip: bool,
    /// Network name.
    pub network: String,
    /// Subnetwork name.
    pub subnetwork: String,
    /// `""`, `IPV4_IPV6` or `IPV4_ONLY`.
    pub stack_type: String,
    /// `""`, `EXTERNAL` or `INTERNAL`.
    #[serde(rename = "ipv6accessType", alias = "ipv6AccessType")]
    pub ipv6_access_type: String,
    /// Set one alias IP range.
    #[serde(rename = "useAliasIPs")]
    pub use_alias_ips: bool,
    /// The alias range, `/0` … `/32`.
    pub ip_cidr_range: String,
    /// The secondary range of the subnetwork the alias range comes from.
    pub subnetwork_range_name: String,
}

/// Scheduling options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GcpScheduling {
    /// Restart after a crash or maintenance.
    pub automatic_restart: bool,
    /// `MIGRATE` or `TERMINATE`.
    pub on_host_maintenance: String,
    /// A preemptible VM.
    pub preemptible: bool,
}

/// A service account of the VM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GcpServiceAccount {
    /// Email of the account.
    pub email: String,
    /// OAuth scopes.
    pub scopes: Vec<String>,
}

/// An accelerator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GcpGpu {
    /// The accelerator type name, e.g. `nvidia-tesla-t4`.
    pub accelerator_type: String,
    /// How many.
    pub count: i64,
}

impl GcpProviderSpec {
    /// Decodes a providerSpec (null = all zero values), keys matched as Go's
    /// `encoding/json` matches them ([`ProviderSpec::decode`]: `sizeGB`,
    /// `minCPUPlatform`, `canIPForward`, each key read under another
    /// spelling and each unknown key reported; design: docs/design/driver.md,
    /// "Decoding").
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        <Self as ProviderSpec>::decode(value)
            .map(|d| d.value)
            .map_err(|e| e.to_string())
    }

    /// The network tags that mark the VM's cluster and role (the last tag
    /// containing each marker, as the reference picks them).
    pub fn membership_tags(&self) -> (Option<&str>, Option<&str>) {
        membership(self.tags.iter().map(String::as_str))
    }
}

/// The cluster and role tags among `tags` (the last tag containing each marker).
pub fn membership<'a>(
    tags: impl IntoIterator<Item = &'a str>,
) -> (Option<&'a str>, Option<&'a str>) {
    let mut cluster = None;
    let mut role = None;
    for t in tags {
        if t.contains(CLUSTER_TAG_MARKER) {
            cluster = Some(t);
        } else if t.contains(ROLE_TAG_MARKER) {
            role = Some(t);
        }
    }
    (cluster, role)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_gardener_example_decodes() {
        let spec = GcpProviderSpec::from_json(&json!({
            "canIpForward": true,
            "disks": [{"autoDelete": true, "boot": true, "sizeGb": 50, "type": "pd-standard",
                       "image": "projects/x/global/images/y", "labels": {"name": "mc"}}],
            "labels": {"name": "mc"},
            "machineType": "n1-standard-2",
            "metadata": [{"key": "ash", "value": "my-value"}],
            "networkInterfaces": [{"network": "n", "subnetwork": "s", "stackType": "IPV4_IPV6",
                                   "ipv6accessType": "EXTERNAL", "ipCidrRange": "/24",
                                   "subnetworkRangeName": "r", "disableExternalIP": true}],
            "scheduling": {"automaticRestart": true, "onHostMaintenance": "MIGRATE"},
            "serviceAccounts": [{"email": "a@b", "scopes": ["s"]}],
            "tags": ["kubernetes-io-cluster-c", "kubernetes-io-role-node", "x"],
            "region": "europe-west1",
            "zone": "europe-west1-b",
            "unknownKey": 1
        }))
        .unwrap();
        assert_eq!(spec.disks[0].size_gb, 50);
        assert_eq!(spec.disks[0].type_, "pd-standard");
        assert_eq!(spec.network_interfaces[0].ipv6_access_type, "EXTERNAL");
        assert!(spec.network_interfaces[0].disable_external_ip);
        assert_eq!(spec.metadata[0].value.as_deref(), Some("my-value"));
        assert_eq!(
            spec.membership_tags(),
            (
                Some("kubernetes-io-cluster-c"),
                Some("kubernetes-io-role-node")
            )
        );
    }

    #[test]
    fn the_references_untagged_api_version_is_read_in_any_case_and_not_unknown() {
        for key in ["APIVersion", "apiVersion"] {
            let d = <GcpProviderSpec as ProviderSpec>::decode(
                &json!({key: "mcm.gardener.cloud/v1alpha1", "zone": "z"}),
            )
            .unwrap();
            assert_eq!(d.value.api_version, "mcm.gardener.cloud/v1alpha1");
            assert!(
                d.warnings.iter().all(|w| !w.message.contains("unknown")),
                "{:?}",
                d.warnings
            );
        }
    }

    #[test]
    fn garbage_does_not_decode_and_null_is_empty() {
        assert!(GcpProviderSpec::from_json(&json!({"disks": "many"})).is_err());
        assert!(GcpProviderSpec::from_json(&json!("text")).is_err());
        assert_eq!(
            GcpProviderSpec::from_json(&serde_json::Value::Null).unwrap(),
            GcpProviderSpec::default()
        );
    }
}
