//! The providerSpec of an `OpenStack` MachineClass and its validation.
//!
//! The spec is a typed object, exactly as Gardener's OpenStack provider reads it:
//! `apiVersion: openstack.machine.gardener.cloud/v1alpha1`,
//! `kind: MachineProviderConfig`, and the fields under `spec`. Validation
//! reports every finding at once, in the Kubernetes `field.ErrorList` form,
//! with the reference's field paths and messages.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// The provider name a MachineClass must carry (case-sensitive, as in the reference).
pub const PROVIDER_NAME: &str = "OpenStack";
/// The providerSpec's `apiVersion`.
pub const API_VERSION: &str = "openstack.machine.gardener.cloud/v1alpha1";
/// The providerSpec's `kind`.
pub const KIND: &str = "MachineProviderConfig";
/// Tag keys containing this mark the server's cluster.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io-cluster-";
/// Tag keys containing this mark the server's role.
pub const ROLE_TAG_PREFIX: &str = "kubernetes.io-role-";

/// The whole providerSpec object.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineProviderConfig {
    /// `openstack.machine.gardener.cloud/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `MachineProviderConfig`.
    #[serde(default)]
    pub kind: String,
    /// The machine settings.
    #[serde(default)]
    pub spec: OpenStackSpec,
}

/// The fields under `spec` (`pkg/apis/openstack/v1alpha1` of the reference).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackSpec {
    /// Image ID; wins over `imageName`.
    #[serde(default, rename = "imageID")]
    pub image_id: String,
    /// Image name, resolved to an ID through Nova's image list.
    #[serde(default)]
    pub image_name: String,
    /// Region: selects the catalog endpoints and goes into the provider ID.
    #[serde(default)]
    pub region: String,
    /// Availability zone of the server (and of its root volume).
    #[serde(default)]
    pub availability_zone: String,
    /// Flavor name.
    #[serde(default)]
    pub flavor_name: String,
    /// Nova key pair name.
    #[serde(default)]
    pub key_name: String,
    /// Security group names.
    #[serde(default)]
    pub security_groups: Vec<String>,
    /// Server metadata; must hold the cluster and role keys.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Network ID (exclusive with `networks`).
    #[serde(default, rename = "networkID")]
    pub network_id: String,
    /// Deprecated single subnet ID.
    #[serde(default, rename = "subnetID")]
    pub subnet_id: Option<String>,
    /// Subnet IDs: with `networkID`, the driver creates the machine's port on them.
    #[serde(default, rename = "subnetIDs")]
    pub subnet_ids: Vec<String>,
    /// Deprecated single pod CIDR.
    #[serde(default)]
    pub pod_network_cidr: String,
    /// Pod CIDRs, allowed as address pairs on the pod-network ports.
    #[serde(default, rename = "podNetworkCIDRs")]
    pub pod_network_cidrs: Vec<String>,
    /// Root disk size in GB; > 0 boots from a volume.
    #[serde(default)]
    pub root_disk_size: i64,
    /// Volume type: the driver then creates the root volume itself.
    #[serde(default)]
    pub root_disk_type: Option<String>,
    /// Config drive.
    #[serde(default)]
    pub use_config_drive: Option<bool>,
    /// Server group (scheduler hint `group`).
    #[serde(default, rename = "serverGroupID")]
    pub server_group_id: Option<String>,
    /// Networks by ID or name (exclusive with `networkID`).
    #[serde(default)]
    pub networks: Vec<OpenStackNetwork>,
}

/// One entry of `networks`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OpenStackNetwork {
    /// Network ID (wins over the name).
    #[serde(default)]
    pub id: String,
    /// Network name.
    #[serde(default)]
    pub name: String,
    /// Whether pod traffic flows over this network (allowed address pairs).
    #[serde(default)]
    pub pod_network: bool,
}

impl OpenStackSpec {
    /// The cluster and role metadata keys (the first of each, by key order).
    pub fn membership_keys(&self) -> Option<(&str, &str)> {
        let mut cluster = None;
        let mut role = None;
        for k in self.tags.keys() {
            if k.contains(CLUSTER_TAG_PREFIX) {
                cluster = cluster.or(Some(k.as_str()));
            } else if k.contains(ROLE_TAG_PREFIX) {
                role = role.or(Some(k.as_str()));
            }
        }
        Some((cluster?, role?))
    }

    /// `networkID` with subnets: the driver creates and cleans up the machine's port.
    pub fn is_user_managed_network(&self) -> bool {
        !self.network_id.trim().is_empty()
            && (self
                .subnet_id
                .as_deref()
                .is_some_and(|s| !s.trim().is_empty())
                || !self.subnet_ids.is_empty())
    }

    /// The port's subnets: `subnetID` and `subnetIDs`, deduplicated and sorted.
    pub fn port_subnets(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .subnet_id
            .iter()
            .chain(self.subnet_ids.iter())
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// All pod CIDRs (`podNetworkCIDRs` and `podNetworkCidr`), deduplicated and sorted.
    pub fn pod_cidrs(&self) -> Vec<String> {
        let mut all: Vec<String> = self.pod_network_cidrs.clone();
        if !self.pod_network_cidr.is_empty() {
            all.push(self.pod_network_cidr.clone());
        }
        all.sort();
        all.dedup();
        all
    }
}

/// Decodes a providerSpec: `apiVersion` and `kind` must be the reference's.
pub fn decode(raw: &serde_json::Value) -> Result<OpenStackSpec, String> {
    check_type_meta(raw)?;
    decode_warned(raw)
        .map(|d| d.value)
        .map_err(|e| format!("failed to decode provider spec: {e}"))
}

/// `apiVersion` and `kind` must be the reference's (spelled exactly, as the
/// reference's scheme reads them).
fn check_type_meta(raw: &serde_json::Value) -> Result<(), String> {
    let obj = raw
        .as_object()
        .ok_or_else(|| format!("failed to decode provider spec: expected an object, got {raw}"))?;
    let kind = obj.get("kind").and_then(|v| v.as_str()).unwrap_or_default();
    if kind.is_empty() {
        return Err(format!(
            "failed to decode provider spec: Object 'Kind' is missing in '{raw}'"
        ));
    }
    let version = obj
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    if version != API_VERSION || kind != KIND {
        return Err(format!(
            "failed to decode provider spec: no kind \"{kind}\" is registered for version \"{version}\" (expected apiVersion {API_VERSION}, kind {KIND})"
        ));
    }
    Ok(())
}

/// Decodes the whole providerSpec object with the drivers' shared decoder
/// (design: docs/design/driver.md, "Decoding"): keys in another case fill
/// their fields and unknown keys are ignored, each with a warning. The
/// reference decodes with apimachinery's strict, case-sensitive decoder and
/// refuses such classes; here they work and the warnings say what to fix.
pub fn decode_warned(
    raw: &serde_json::Value,
) -> Result<mcm_driver::spec_decode::Decoded<OpenStackSpec>, mcm_driver::spec_decode::DecodeError> {
    let d = mcm_driver::spec_decode::decode::<MachineProviderConfig>(raw, "providerSpec")?;
    Ok(mcm_driver::spec_decode::Decoded {
        value: d.value.spec,
        warnings: d.warnings,
    })
}

/// Decodes and validates a class and its Secret as CreateMachine does,
/// offline ([`mcm_driver::Driver::check_class`]). Messages never carry a
/// Secret value.
pub fn check_class(
    class: &mcm_api::MachineClass,
    secret: &k8s_openapi::api::core::v1::Secret,
) -> mcm_driver::ClassCheck {
    use mcm_driver::Finding;
    let mut check = mcm_driver::ClassCheck::default();
    if class.provider != PROVIDER_NAME {
        check.errors.push(Finding::new(
            "provider",
            format!("{:?}: this driver serves {PROVIDER_NAME:?}", class.provider),
        ));
    }
    if let Err(e) = check_type_meta(&class.provider_spec) {
        check.errors.push(Finding::new("providerSpec", e));
    }
    match decode_warned(&class.provider_spec) {
        Ok(d) => {
            check.warn(d.warnings);
            let spec = d.value;
            check.errors.extend(
                validate_spec(&spec)
                    .iter()
                    .map(|e| Finding::new(e.field.clone(), format!("{}: {}", e.kind, e.detail))),
            );
            if spec.membership_keys().is_none() {
                check
                    .errors
                    .push(Finding::new("spec.tags", "cluster/role tags are missing"));
            }
        }
        Err(e) => check.decode_failed(e),
    }
    check.errors.extend(
        crate::secret::validate_secret(secret)
            .iter()
            .map(|e| Finding::new(e.field.clone(), format!("{}: {}", e.kind, e.detail))),
    );
    check
}

/// One finding, printed like a Kubernetes `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.region` or `data[authURL]`.
    pub field: String,
    /// `Required value`, `Forbidden`, `Invalid value: "x"`.
    pub kind: String,
    /// Details.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.field, self.kind, self.detail)
    }
}

pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        kind: "Required value".into(),
        detail: detail.into(),
    }
}

pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        kind: "Forbidden".into(),
        detail: detail.into(),
    }
}

pub(crate) fn invalid(
    field: impl Into<String>,
    value: &str,
    detail: impl Into<String>,
) -> FieldError {
    FieldError {
        field: field.into(),
        kind: format!("Invalid value: {value:?}"),
        detail: detail.into(),
    }
}

/// Joins findings as Kubernetes aggregates them: one as is, several as `[a, b]`.
pub fn aggregate(errs: &[FieldError]) -> String {
    let mut seen = Vec::new();
    for e in errs {
        let s = e.to_string();
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    match seen.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Validates a spec (every finding, in the reference's order).
pub fn validate_spec(spec: &OpenStackSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.image_id.is_empty() && spec.image_name.is_empty() {
        errs.push(required(
            "spec.imageName",
            "ImageName is required if no ImageID is given",
        ));
    }
    if spec.region.is_empty() {
        errs.push(required("spec.region", "Region is required"));
    }
    if spec.flavor_name.is_empty() {
        errs.push(required("spec.flavorName", "Flavor is required"));
    }
    if spec.availability_zone.is_empty() {
        errs.push(required(
            "spec.availabilityZone",
            "AvailabilityZone name is required",
        ));
    }
    if spec.key_name.is_empty() {
        errs.push(required("spec.keyName", "KeyName is required"));
    }
    if !spec.network_id.is_empty() && !spec.networks.is_empty() {
        errs.push(forbidden(
            "spec.networks",
            "\"networks\" list should not be specified along with \"providerConfig.Spec.NetworkID\"",
        ));
    }
    if spec.network_id.is_empty() && spec.networks.is_empty() {
        errs.push(forbidden(
            "spec.networkID",
            "both \"networks\" and \"networkID\" should not be empty",
        ));
    }
    let no_pod_cidr = spec.pod_network_cidrs.is_empty() && spec.pod_network_cidr.is_empty();
    if no_pod_cidr {
        errs.push(required(
            "spec.PodNetworkCIDRs",
            "PodNetworkCIDRs is required",
        ));
    }
    if spec.root_disk_size < 0 {
        errs.push(required(
            "spec.rootDiskSize",
            "RootDiskSize can not be negative",
        ));
    }
    for (i, n) in spec.networks.iter().enumerate() {
        let f = format!("spec.networks[{i}]");
        if n.id.is_empty() && n.name.is_empty() {
            errs.push(required(
                f.clone(),
                "at least one of network \"id\" or \"name\" is required",
            ));
        }
        if !n.id.is_empty() && !n.name.is_empty() {
            errs.push(forbidden(
                f.clone(),
                "simultaneous use of network \"id\" and \"name\" is forbidden",
            ));
        }
        if no_pod_cidr && n.pod_network {
            errs.push(required(
                format!("{f}.podNetwork"),
                "\"podNetwork\" switch should not be used in absence of \"spec.podNetworkCidr\"",
            ));
        }
    }
    let has = |mark: &str| spec.tags.keys().any(|k| k.contains(mark));
    let has_cluster = has(CLUSTER_TAG_PREFIX);
    // A key is the cluster key or the role key, never both (as in the reference).
    let has_role = spec
        .tags
        .keys()
        .any(|k| !k.contains(CLUSTER_TAG_PREFIX) && k.contains(ROLE_TAG_PREFIX));
    if !has_cluster {
        errs.push(required(
            "spec.tags",
            format!("Tag required of the form {CLUSTER_TAG_PREFIX}****"),
        ));
    }
    if !has_role {
        errs.push(required(
            "spec.tags",
            format!("Tag required of the form {ROLE_TAG_PREFIX}****"),
        ));
    }
    errs
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
