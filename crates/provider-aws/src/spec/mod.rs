//! The AWS providerSpec (the MachineClass `providerSpec` JSON), the provider
//! secret, and their validation.
//!
//! The JSON keys are the ones users already write for Gardener's AWS provider
//! (`ami`, `blockDevices`, `networkInterfaces`, `srcAndDstChecksEnabled`, ...).
//! Unknown keys are tolerated (with a warning) so that classes written for
//! newer provider versions still decode.
//!
//! Files: the types here, `decode` (key matching as Go's `encoding/json`
//! does it), `validate` (the spec's rules) and `secret` (credentials and
//! user data).

mod decode;
mod secret;
#[cfg(test)]
mod tests;
mod validate;

pub use decode::canonical_keys;
pub use mcm_driver::provider_spec::FieldError;
pub use secret::{credentials, secret_value, validate_secret, Credentials};
pub use validate::validate_spec;

use mcm_driver::provider_spec::{Join, Messages, ProviderSpec, SecretData, SecretUse};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The provider name a MachineClass must carry.
pub const PROVIDER_NAME: &str = "AWS";
/// Substring that identifies the cluster tag key.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// Substring that identifies the role tag key.
pub const ROLE_TAG_PREFIX: &str = "kubernetes.io/role/";
/// The block device name that stands for "the AMI's root device".
pub const ROOT_DEVICE_NAME: &str = "/root";
/// The accepted EBS volume types.
pub const VALID_VOLUME_TYPES: [&str; 6] = ["gp2", "gp3", "io1", "st1", "sc1", "standard"];

/// Secret key of the access key ID.
pub const SECRET_ACCESS_KEY_ID: &str = "providerAccessKeyId";
/// Secret key of the secret access key.
pub const SECRET_SECRET_ACCESS_KEY: &str = "providerSecretAccessKey";
/// Alternative secret key of the access key ID.
pub const SECRET_ALT_ACCESS_KEY_ID: &str = "accessKeyID";
/// Alternative secret key of the secret access key.
pub const SECRET_ALT_SECRET_ACCESS_KEY: &str = "secretAccessKey";
/// Secret key of the workload identity token file path.
pub const SECRET_WORKLOAD_IDENTITY_TOKEN_FILE: &str = "workloadIdentityTokenFile";
/// Secret key of the role to assume with the workload identity token.
pub const SECRET_ROLE_ARN: &str = "roleARN";
/// Secret key of the user data.
pub const SECRET_USER_DATA: &str = "userData";

/// `AWSProviderSpec`: what a MachineClass says about its EC2 instances.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AwsProviderSpec {
    /// Unused; kept for compatibility.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The image (AMI) ID. Required.
    pub ami: String,
    /// Block device mappings; the entry named `/root` (or the only entry) is the root disk.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub block_devices: Vec<BlockDevice>,
    /// Capacity reservation targeting.
    #[serde(
        rename = "capacityReservation",
        skip_serializing_if = "Option::is_none"
    )]
    pub capacity_reservation: Option<CapacityReservation>,
    /// EBS-optimized instance.
    pub ebs_optimized: bool,
    /// The instance profile (exactly one of name/ARN).
    pub iam: IamProfile,
    /// The EC2 instance type. Required.
    pub machine_type: String,
    /// SSH key pair name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
    /// Detailed monitoring.
    pub monitoring: bool,
    /// Network interfaces (at least one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    /// The region, also the middle part of the provider ID. Required.
    pub region: String,
    /// Deprecated spot switch: `""` = spot without max price, else the max price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spot_price: Option<String>,
    /// `false` disables the source/destination check on every non-EFA interface
    /// (done by InitializeMachine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_and_dst_checks_enabled: Option<bool>,
    /// Tags of instances, volumes and interfaces; must hold a cluster and a role tag key.
    pub tags: BTreeMap<String, String>,
    /// Instance metadata service (IMDS) options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_metadata_options: Option<InstanceMetadataOptions>,
    /// CPU options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
    /// Placement (placement group, tenancy, dedicated host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
    /// Market options (spot, capacity blocks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_market_options: Option<InstanceMarketOptions>,
}

/// A block device mapping.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BlockDevice {
    /// `/root` for the root disk, else `/dev/sd[a-z]` or `/dev/xvd..`.
    pub device_name: String,
    /// The EBS volume.
    pub ebs: EbsVolume,
    /// Suppresses an AMI device (sent as `NoDevice` when non-empty).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub no_device: String,
    /// Instance-store name (`ephemeralN`), sent when non-empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub virtual_name: String,
}

/// An EBS volume of a block device mapping.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EbsVolume {
    /// Deleted with the instance unless `false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Encrypt the volume.
    pub encrypted: bool,
    /// Provisioned IOPS (sent when > 0; io1 requires it).
    pub iops: i32,
    /// Throughput in MiB/s (gp3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i32>,
    /// Customer managed KMS key (implies encryption).
    #[serde(rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Snapshot to create the volume from.
    #[serde(rename = "snapshotID", skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Size in GiB.
    pub volume_size: i32,
    /// One of [`VALID_VOLUME_TYPES`].
    pub volume_type: String,
}

/// Capacity reservation targeting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CapacityReservation {
    /// `open` or `none`; excludes ID and ARN.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub capacity_reservation_preference: String,
    /// A specific reservation.
    #[serde(
        rename = "capacityReservationId",
        skip_serializing_if = "Option::is_none"
    )]
    pub capacity_reservation_id: Option<String>,
    /// A resource group of reservations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_resource_group_arn: Option<String>,
    /// The reservation is an ML capacity block (market type `capacity-block`).
    #[serde(rename = "isMLCapacityBlock", skip_serializing_if = "Option::is_none")]
    pub is_ml_capacity_block: Option<bool>,
}

/// The instance profile: exactly one of `name` and `arn`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IamProfile {
    /// Instance profile ARN.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub arn: String,
    /// Instance profile name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A network interface created at launch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkInterface {
    /// Public IPv4 address on this interface.
    #[serde(
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// IPv6 addresses wanted on the interface (at launch, topped up by InitializeMachine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_address_count: Option<i32>,
    /// IPv6 delegated prefixes wanted on the interface (InitializeMachine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix_count: Option<i32>,
    /// Deleted with the instance unless `false`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Interface description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Security groups (at least one).
    #[serde(rename = "securityGroupIDs", skip_serializing_if = "Vec::is_empty")]
    pub security_group_ids: Vec<String>,
    /// Subnet. Required.
    #[serde(rename = "subnetID")]
    pub subnet_id: String,
    /// `interface` (default), `efa` or `efa-only`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_type: Option<String>,
    /// Network card index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_card_index: Option<i32>,
    /// Device index; defaults to the position in the list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_index: Option<i32>,
    /// Make the first IPv6 address the primary one (default true when IPv6 addresses are wanted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_ipv6: Option<bool>,
}

impl NetworkInterface {
    /// Whether this is an EFA interface (no source/destination check to manage).
    pub fn is_efa(&self) -> bool {
        is_efa_type(self.interface_type.as_deref())
    }
}

/// Whether an interface type is `efa` or `efa-only`.
pub fn is_efa_type(t: Option<&str>) -> bool {
    matches!(t, Some("efa") | Some("efa-only"))
}

/// IMDS options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceMetadataOptions {
    /// `enabled` or `disabled`.
    #[serde(rename = "httpEndpoint", skip_serializing_if = "String::is_empty")]
    pub http_endpoint: String,
    /// 0..=64.
    #[serde(
        rename = "httpPutResponseHopLimit",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_put_response_hop_limit: Option<i32>,
    /// `required` or `optional`.
    #[serde(rename = "httpTokens", skip_serializing_if = "String::is_empty")]
    pub http_tokens: String,
    /// `enabled` or `disabled`.
    #[serde(rename = "httpProtocolIpv6", skip_serializing_if = "String::is_empty")]
    pub http_protocol_ipv6: String,
}

/// CPU options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CpuOptions {
    /// Cores (together with `threadsPerCore`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_count: Option<i32>,
    /// 1 or 2 (together with `coreCount`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads_per_core: Option<i32>,
    /// `enabled` or `disabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amd_sev_snp: Option<String>,
}

/// Placement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PlacementSpec {
    /// Placement group ID.
    #[serde(rename = "groupId", skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// `default`, `dedicated` or `host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenancy: Option<String>,
    /// Dedicated host (tenancy `host` only).
    #[serde(rename = "hostId", skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// Partition number (>= 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_number: Option<i32>,
    /// `default` or `host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
}

/// Market options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct InstanceMarketOptions {
    /// `spot`, `capacity-block` or `interruptible-capacity-reservation`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub market_type: String,
}

/// The accepted market types.
pub const VALID_MARKET_TYPES: [&str; 3] = [
    "spot",
    "capacity-block",
    "interruptible-capacity-reservation",
];

/// The drivers' shared front half (docs/design/driver.md, "Provider
/// skeleton"): decode with Go's key matching, the spec's rules and the
/// Secret's, refused in the reference's words.
impl ProviderSpec for AwsProviderSpec {
    const PROVIDER: &'static str = PROVIDER_NAME;
    const MESSAGES: Messages = Messages {
        join: Join::Aggregate,
        decode: "providerSpec: cannot decode the AWS providerSpec: ",
        spec: "error while validating ProviderSpec ",
        secret: None,
    };

    fn validate(&self) -> Vec<FieldError> {
        validate_spec(self)
    }

    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
        validate_secret(secret, purpose)
    }
}

impl AwsProviderSpec {
    /// Decodes a providerSpec JSON value. `null` decodes as an empty spec (which
    /// validation then rejects field by field). Keys are matched as Go's
    /// `encoding/json` matches them: exactly, else case-insensitively
    /// ([`ProviderSpec::decode`], which also gives the warnings about such keys).
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        <Self as ProviderSpec>::decode(value)
            .map(|d| d.value)
            .map_err(|e| e.to_string())
    }

    /// The cluster tag key (the first key containing `kubernetes.io/cluster/`).
    pub fn cluster_tag_key(&self) -> Option<&str> {
        self.tags
            .keys()
            .map(String::as_str)
            .find(|k| k.contains(CLUSTER_TAG_PREFIX))
    }

    /// The role tag key (the first key containing `kubernetes.io/role/`, that is not the cluster key).
    pub fn role_tag_key(&self) -> Option<&str> {
        self.tags
            .keys()
            .map(String::as_str)
            .find(|k| k.contains(ROLE_TAG_PREFIX) && !k.contains(CLUSTER_TAG_PREFIX))
    }

    /// The spec interface that serves a device index (explicit `deviceIndex`, else list position).
    pub fn interface_for_device_index(&self, device_index: i32) -> Option<&NetworkInterface> {
        self.network_interfaces
            .iter()
            .enumerate()
            .find(|(i, ni)| ni.device_index.unwrap_or(*i as i32) == device_index)
            .map(|(_, ni)| ni)
    }

    /// Whether the spec asks for interfaces or volumes that survive the instance.
    pub fn keeps_resources_after_termination(&self) -> bool {
        self.block_devices
            .iter()
            .any(|b| b.ebs.delete_on_termination == Some(false))
            || self
                .network_interfaces
                .iter()
                .any(|n| n.delete_on_termination == Some(false))
    }

    /// Whether InitializeMachine has anything to do for this spec.
    pub fn needs_initialization(&self) -> bool {
        self.src_and_dst_checks_enabled == Some(false)
            || self.network_interfaces.iter().any(|n| {
                n.ipv6_prefix_count.unwrap_or(0) > 0 || n.ipv6_address_count.unwrap_or(0) > 0
            })
    }
}
