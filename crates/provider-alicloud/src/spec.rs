//! The Alicloud providerSpec (the MachineClass `providerSpec` JSON), the
//! provider secret, and their validation.
//!
//! The JSON keys are the ones users already write for Gardener's Alicloud
//! provider (`imageID`, `vSwitchID`, `IoOptimized` with its capital I, ...).
//! Unknown keys are tolerated.

use k8s_openapi::api::core::v1::Secret;
use mcm_driver::provider_spec::{
    FieldError, Join, Messages, ProviderSpec, SecretData, SecretUse, ROOT,
};
use mcm_driver::spec_decode::{self, DecodeError, Decoded};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The provider name a MachineClass must carry.
pub const PROVIDER_NAME: &str = "Alicloud";
/// Substring that identifies the cluster tag key.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// Substring that identifies the role tag key.
pub const ROLE_TAG_PREFIX: &str = "kubernetes.io/role/";
/// Secret key of the access key ID.
pub const SECRET_ACCESS_KEY_ID: &str = "alicloudAccessKeyID";
/// Secret key of the access key secret.
pub const SECRET_ACCESS_KEY_SECRET: &str = "alicloudAccessKeySecret";
/// Alternative secret key of the access key ID.
pub const SECRET_ALT_ACCESS_KEY_ID: &str = "accessKeyID";
/// Alternative secret key of the access key secret.
pub const SECRET_ALT_ACCESS_KEY_SECRET: &str = "accessKeySecret";
/// Secret key of the user data.
pub const SECRET_USER_DATA: &str = "userData";
/// The disk category that cannot be kept after the instance (no `DeleteWithInstance`).
pub const EPHEMERAL_SSD: &str = "ephemeral_ssd";
/// The disk categories ECS accepts for system and data disks.
pub const DISK_CATEGORIES: [&str; 7] = [
    "cloud",
    "cloud_efficiency",
    "cloud_ssd",
    "cloud_essd",
    "cloud_auto",
    "cloud_essd_entry",
    EPHEMERAL_SSD,
];
/// The accepted spot strategies.
pub const SPOT_STRATEGIES: [&str; 3] = ["NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"];
/// The accepted instance charge types.
pub const INSTANCE_CHARGE_TYPES: [&str; 2] = ["PrePaid", "PostPaid"];
/// The accepted internet charge types.
pub const INTERNET_CHARGE_TYPES: [&str; 2] = ["PayByBandwidth", "PayByTraffic"];
/// The accepted I/O optimisation values.
pub const IO_OPTIMIZED: [&str; 2] = ["optimized", "none"];

/// `ProviderSpec` of Gardener's Alicloud provider: what a MachineClass says about its ECS instances.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AlicloudProviderSpec {
    /// Unused; kept for compatibility.
    #[serde(rename = "apiVersion", skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The image ID. Required.
    #[serde(rename = "imageID")]
    pub image_id: String,
    /// The ECS instance type, e.g. `ecs.g7.large`. Required.
    #[serde(rename = "instanceType")]
    pub instance_type: String,
    /// The region, also the first part of the provider ID. Required.
    pub region: String,
    /// The zone.
    #[serde(rename = "zoneID", skip_serializing_if = "String::is_empty")]
    pub zone_id: String,
    /// The security group. Required.
    #[serde(rename = "securityGroupID")]
    pub security_group_id: String,
    /// The vSwitch (subnet). Required.
    #[serde(rename = "vSwitchID")]
    pub v_switch_id: String,
    /// A fixed private IP address.
    #[serde(rename = "privateIPAddress", skip_serializing_if = "String::is_empty")]
    pub private_ip_address: String,
    /// The system disk.
    #[serde(rename = "systemDisk", skip_serializing_if = "Option::is_none")]
    pub system_disk: Option<SystemDisk>,
    /// Data disks.
    #[serde(rename = "dataDisks", skip_serializing_if = "Vec::is_empty")]
    pub data_disks: Vec<DataDisk>,
    /// `PrePaid` or `PostPaid`.
    #[serde(
        rename = "instanceChargeType",
        skip_serializing_if = "String::is_empty"
    )]
    pub instance_charge_type: String,
    /// `PayByBandwidth` or `PayByTraffic`.
    #[serde(
        rename = "internetChargeType",
        skip_serializing_if = "String::is_empty"
    )]
    pub internet_charge_type: String,
    /// Inbound public bandwidth (Mbit/s).
    #[serde(
        rename = "internetMaxBandwidthIn",
        skip_serializing_if = "Option::is_none"
    )]
    pub internet_max_bandwidth_in: Option<i64>,
    /// Outbound public bandwidth (Mbit/s); above 0 gives the instance a public IP.
    #[serde(
        rename = "internetMaxBandwidthOut",
        skip_serializing_if = "Option::is_none"
    )]
    pub internet_max_bandwidth_out: Option<i64>,
    /// `NoSpot`, `SpotWithPriceLimit` or `SpotAsPriceGo`.
    #[serde(rename = "spotStrategy", skip_serializing_if = "String::is_empty")]
    pub spot_strategy: String,
    /// `optimized` or `none` (JSON key `IoOptimized`, capital I, as the reference).
    #[serde(
        rename = "IoOptimized",
        alias = "ioOptimized",
        skip_serializing_if = "String::is_empty"
    )]
    pub io_optimized: String,
    /// Instance, disk and interface tags; must hold a cluster and a role tag key.
    pub tags: BTreeMap<String, String>,
    /// SSH key pair name.
    #[serde(rename = "keyPairName", skip_serializing_if = "String::is_empty")]
    pub key_pair_name: String,
}

/// The system disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SystemDisk {
    /// The disk category, e.g. `cloud_essd`.
    pub category: String,
    /// Size in GiB.
    pub size: i64,
}

/// A data disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DataDisk {
    /// Name; the ECS disk is named `<machine>-<name>-data-disk`. Required.
    pub name: String,
    /// The disk category.
    pub category: String,
    /// Description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Encrypt the disk.
    pub encrypted: bool,
    /// Release the disk with the instance (default true; never sent for `ephemeral_ssd`).
    #[serde(rename = "deleteWithInstance", skip_serializing_if = "Option::is_none")]
    pub delete_with_instance: Option<bool>,
    /// Size in GiB. Required.
    pub size: i64,
}

impl AlicloudProviderSpec {
    /// Decodes a providerSpec, keys matched as Go's `encoding/json` matches
    /// them ([`ProviderSpec::decode`]).
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        <Self as ProviderSpec>::decode(value)
            .map(|d| d.value)
            .map_err(|e| e.to_string())
    }

    /// The cluster tag key and value.
    pub fn cluster_tag(&self) -> Option<(&str, &str)> {
        self.tags
            .iter()
            .find(|(k, _)| k.contains(CLUSTER_TAG_PREFIX))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The role tag key and value.
    pub fn role_tag(&self) -> Option<(&str, &str)> {
        self.tags
            .iter()
            .find(|(k, _)| k.contains(ROLE_TAG_PREFIX))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

fn one_of(errs: &mut Vec<FieldError>, field: &str, value: &str, accepted: &[&str]) {
    if !value.is_empty() && !accepted.contains(&value) {
        errs.push(FieldError::not_supported(field, value, accepted));
    }
}

/// Every finding of a providerSpec (empty = valid).
pub fn validate_spec(spec: &AlicloudProviderSpec) -> Vec<FieldError> {
    let f = "providerSpec";
    let mut errs = Vec::new();
    for (value, key, what) in [
        (&spec.image_id, "imageID", "ImageID is required"),
        (
            &spec.instance_type,
            "instanceType",
            "InstanceType is required",
        ),
        (&spec.region, "region", "Region is required"),
        (&spec.v_switch_id, "vSwitchID", "VSwitchID is required"),
        (
            &spec.security_group_id,
            "securityGroupID",
            "SecurityGroupID is required",
        ),
    ] {
        if value.trim().is_empty() {
            errs.push(FieldError::required(format!("{f}.{key}"), what));
        }
    }
    if spec.region.contains('.') {
        errs.push(FieldError::invalid(
            format!("{f}.region"),
            &spec.region,
            "a region has no '.' (the provider ID is <region>.<instance-id>)",
        ));
    }
    if let Some(d) = &spec.system_disk {
        if d.category.is_empty() {
            errs.push(FieldError::required(
                format!("{f}.systemDisk.category"),
                "Category is required",
            ));
        }
        one_of(
            &mut errs,
            &format!("{f}.systemDisk.category"),
            &d.category,
            &DISK_CATEGORIES,
        );
        if d.size <= 0 {
            errs.push(FieldError::invalid(
                format!("{f}.systemDisk.size"),
                d.size,
                "Size must be positive",
            ));
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, d) in spec.data_disks.iter().enumerate() {
        let p = format!("{f}.dataDisks[{i}]");
        if d.name.trim().is_empty() {
            errs.push(FieldError::required(
                format!("{p}.name"),
                "Data disk name is required",
            ));
        } else if !names.insert(d.name.as_str()) {
            errs.push(FieldError::invalid(
                format!("{p}.name"),
                &d.name,
                "Data disk names must be unique",
            ));
        }
        if d.category.is_empty() {
            errs.push(FieldError::required(
                format!("{p}.category"),
                "Data disk category is required",
            ));
        }
        one_of(
            &mut errs,
            &format!("{p}.category"),
            &d.category,
            &DISK_CATEGORIES,
        );
        if d.size <= 0 {
            errs.push(FieldError::invalid(
                format!("{p}.size"),
                d.size,
                "Data disk size must be positive",
            ));
        }
    }
    one_of(
        &mut errs,
        &format!("{f}.spotStrategy"),
        &spec.spot_strategy,
        &SPOT_STRATEGIES,
    );
    one_of(
        &mut errs,
        &format!("{f}.instanceChargeType"),
        &spec.instance_charge_type,
        &INSTANCE_CHARGE_TYPES,
    );
    one_of(
        &mut errs,
        &format!("{f}.internetChargeType"),
        &spec.internet_charge_type,
        &INTERNET_CHARGE_TYPES,
    );
    one_of(
        &mut errs,
        &format!("{f}.IoOptimized"),
        &spec.io_optimized,
        &IO_OPTIMIZED,
    );
    for (key, v) in [
        ("internetMaxBandwidthIn", spec.internet_max_bandwidth_in),
        ("internetMaxBandwidthOut", spec.internet_max_bandwidth_out),
    ] {
        if let Some(v) = v.filter(|v| *v < 0) {
            errs.push(FieldError::invalid(
                format!("{f}.{key}"),
                v,
                "Bandwidth cannot be negative",
            ));
        }
    }
    if spec.cluster_tag().is_none() {
        errs.push(FieldError::required(
            format!("{f}.tags"),
            format!("Tag required of the form {CLUSTER_TAG_PREFIX}****"),
        ));
    }
    if spec.role_tag().is_none() {
        errs.push(FieldError::required(
            format!("{f}.tags"),
            format!("Tag required of the form {ROLE_TAG_PREFIX}****"),
        ));
    }
    if spec.tags.len() > 20 {
        errs.push(FieldError::invalid(
            format!("{f}.tags"),
            spec.tags.len(),
            "ECS accepts at most 20 tags",
        ));
    }
    errs
}

pub use mcm_driver::secret_bytes as secret_value;

/// An access key pair. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// The AccessKey ID.
    pub access_key_id: String,
    /// The AccessKey secret.
    pub access_key_secret: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("access_key_secret", &"<redacted>")
            .finish()
    }
}

/// The credentials of a secret (either spelling of each key, trimmed).
pub fn credentials(secret: &Secret) -> Credentials {
    let s = SecretData(secret);
    Credentials {
        access_key_id: s.first_text(&[SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID]),
        access_key_secret: s.first_text(&[SECRET_ACCESS_KEY_SECRET, SECRET_ALT_ACCESS_KEY_SECRET]),
    }
}

/// The drivers' shared front half (docs/design/driver.md, "Provider
/// skeleton"): decode with Go's key matching, the spec's rules and the
/// Secret's, refused in the reference's words.
impl ProviderSpec for AlicloudProviderSpec {
    const PROVIDER: &'static str = PROVIDER_NAME;
    const MESSAGES: Messages = Messages {
        join: Join::Aggregate,
        decode: "providerSpec: cannot decode the Alicloud providerSpec: ",
        spec: "error while validating ProviderSpec ",
        secret: None,
    };

    /// Decodes a providerSpec as the reference's `json.Unmarshal` does: keys
    /// matched case-insensitively, each key read under another spelling and
    /// each unknown key reported (design: docs/design/driver.md,
    /// "Decoding"). Anything but an object (also `null`) is refused.
    fn decode(value: &serde_json::Value) -> Result<Decoded<Self>, DecodeError> {
        if !value.is_object() {
            return Err(DecodeError {
                field: ROOT.into(),
                message: format!("expected a JSON object, got {value}"),
                warnings: Vec::new(),
            });
        }
        spec_decode::decode(value, ROOT)
    }

    fn validate(&self) -> Vec<FieldError> {
        validate_spec(self)
    }

    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
        validate_secret(secret, purpose)
    }
}

/// Findings of the secret: the access key pair (either spelling) and, for a
/// new VM, the user data.
pub fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
    let f = "secretRef";
    let mut errs = Vec::new();
    secret.require(
        &mut errs,
        format!("{f}.{SECRET_ACCESS_KEY_ID}"),
        &[SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID],
        format!("Mention atleast {SECRET_ACCESS_KEY_ID} or {SECRET_ALT_ACCESS_KEY_ID}"),
    );
    secret.require(
        &mut errs,
        format!("{f}.{SECRET_ACCESS_KEY_SECRET}"),
        &[SECRET_ACCESS_KEY_SECRET, SECRET_ALT_ACCESS_KEY_SECRET],
        format!("Mention atleast {SECRET_ACCESS_KEY_SECRET} or {SECRET_ALT_ACCESS_KEY_SECRET}"),
    );
    if purpose.needs_user_data() && !secret.is_set(SECRET_USER_DATA) {
        errs.push(FieldError::required(
            format!("{f}.{SECRET_USER_DATA}"),
            "Mention userData",
        ));
    }
    errs
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
