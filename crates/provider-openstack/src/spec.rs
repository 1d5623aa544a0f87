//! The providerSpec of an `OpenStack` MachineClass and its validation.
//!
//! The spec is a typed object, exactly as Gardener's OpenStack provider reads it:
//! `apiVersion: openstack.machine.gardener.cloud/v1alpha1`,
//! `kind: MachineProviderConfig`, and the fields under `spec`. Validation
//! reports every finding at once, in the Kubernetes `field.ErrorList` form,
//! with the reference's field paths and messages.

use mcm_driver::provider_spec::{
    self, FieldError, Join, Messages, ProviderSpec, SecretData, SecretUse, ROOT,
};
use mcm_driver::spec_decode::{self, DecodeError, Decoded};
use serde::Deserialize;
use std::collections::BTreeMap;

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

/// Decodes a providerSpec ([`ProviderSpec::decode`]), refused with the
/// reference's words.
pub fn decode(raw: &serde_json::Value) -> Result<OpenStackSpec, String> {
    <OpenStackSpec as ProviderSpec>::decode(raw)
        .map(|d| d.value)
        .map_err(|e| OpenStackSpec::decode_failed(&e))
}

/// `apiVersion` and `kind` must be the reference's (spelled exactly, as the
/// reference's scheme reads them).
fn check_type_meta(raw: &serde_json::Value) -> Result<(), (&'static str, String)> {
    let obj = raw
        .as_object()
        .ok_or_else(|| ("providerSpec", format!("expected an object, got {raw}")))?;
    let kind = obj.get("kind").and_then(|v| v.as_str()).unwrap_or_default();
    if kind.is_empty() {
        return Err((
            "providerSpec.kind",
            format!("Object 'Kind' is missing in '{raw}'"),
        ));
    }
    let version = obj
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    if version != API_VERSION || kind != KIND {
        return Err((
            "providerSpec.kind",
            format!(
                "no kind \"{kind}\" is registered for version \"{version}\" (expected apiVersion {API_VERSION}, kind {KIND})"
            ),
        ));
    }
    Ok(())
}

/// The drivers' shared front half (docs/design/driver.md, "Provider
/// skeleton"): the whole providerSpec object decodes with the shared decoder
/// (design: docs/design/driver.md, "Decoding"), keys in another case fill
/// their fields and unknown keys are ignored, each with a warning; the
/// reference decodes with apimachinery's strict, case-sensitive decoder and
/// refuses such classes, here they work and the warnings say what to fix.
/// `apiVersion` and `kind` must be the reference's. Findings are joined as
/// Kubernetes aggregates them, spec and Secret in one list.
impl ProviderSpec for OpenStackSpec {
    const PROVIDER: &'static str = PROVIDER_NAME;
    const MESSAGES: Messages = Messages {
        join: Join::Aggregate,
        decode: "failed to decode provider spec: ",
        spec: "",
        secret: None,
    };

    fn decode(raw: &serde_json::Value) -> Result<Decoded<Self>, DecodeError> {
        let d = spec_decode::decode::<MachineProviderConfig>(raw, ROOT)?;
        if let Err((field, message)) = check_type_meta(raw) {
            return Err(DecodeError {
                field: field.into(),
                message,
                warnings: d.warnings,
            });
        }
        Ok(Decoded {
            value: d.value.spec,
            warnings: d.warnings,
        })
    }

    fn validate(&self) -> Vec<FieldError> {
        validate_spec(self)
    }

    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
        crate::secret::validate_secret(secret, purpose)
    }
}

/// Decodes and validates a class and its Secret as CreateMachine does,
/// offline ([`mcm_driver::Driver::check_class`]): the skeleton's check and
/// the cluster and role tags every call needs.
pub fn check_class(
    class: &mcm_api::MachineClass,
    secret: &k8s_openapi::api::core::v1::Secret,
) -> mcm_driver::ClassCheck {
    let mut check = provider_spec::check_class::<OpenStackSpec>(class, secret);
    if let Ok(d) = <OpenStackSpec as ProviderSpec>::decode(&class.provider_spec) {
        if d.value.membership_keys().is_none() {
            check.errors.push(mcm_driver::Finding::new(
                "spec.tags",
                "cluster/role tags are missing",
            ));
        }
    }
    check
}

/// Validates a spec (every finding, in the reference's order).
pub fn validate_spec(spec: &OpenStackSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.image_id.is_empty() && spec.image_name.is_empty() {
        errs.push(FieldError::required(
            "spec.imageName",
            "ImageName is required if no ImageID is given",
        ));
    }
    if spec.region.is_empty() {
        errs.push(FieldError::required("spec.region", "Region is required"));
    }
    if spec.flavor_name.is_empty() {
        errs.push(FieldError::required(
            "spec.flavorName",
            "Flavor is required",
        ));
    }
    if spec.availability_zone.is_empty() {
        errs.push(FieldError::required(
            "spec.availabilityZone",
            "AvailabilityZone name is required",
        ));
    }
    if spec.key_name.is_empty() {
        errs.push(FieldError::required("spec.keyName", "KeyName is required"));
    }
    if !spec.network_id.is_empty() && !spec.networks.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.networks",
            "\"networks\" list should not be specified along with \"providerConfig.Spec.NetworkID\"",
        ));
    }
    if spec.network_id.is_empty() && spec.networks.is_empty() {
        errs.push(FieldError::forbidden(
            "spec.networkID",
            "both \"networks\" and \"networkID\" should not be empty",
        ));
    }
    let no_pod_cidr = spec.pod_network_cidrs.is_empty() && spec.pod_network_cidr.is_empty();
    if no_pod_cidr {
        errs.push(FieldError::required(
            "spec.PodNetworkCIDRs",
            "PodNetworkCIDRs is required",
        ));
    }
    if spec.root_disk_size < 0 {
        errs.push(FieldError::required(
            "spec.rootDiskSize",
            "RootDiskSize can not be negative",
        ));
    }
    for (i, n) in spec.networks.iter().enumerate() {
        let f = format!("spec.networks[{i}]");
        if n.id.is_empty() && n.name.is_empty() {
            errs.push(FieldError::required(
                f.clone(),
                "at least one of network \"id\" or \"name\" is required",
            ));
        }
        if !n.id.is_empty() && !n.name.is_empty() {
            errs.push(FieldError::forbidden(
                f.clone(),
                "simultaneous use of network \"id\" and \"name\" is forbidden",
            ));
        }
        if no_pod_cidr && n.pod_network {
            errs.push(FieldError::required(
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
        errs.push(FieldError::required(
            "spec.tags",
            format!("Tag required of the form {CLUSTER_TAG_PREFIX}****"),
        ));
    }
    if !has_role {
        errs.push(FieldError::required(
            "spec.tags",
            format!("Tag required of the form {ROLE_TAG_PREFIX}****"),
        ));
    }
    errs
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
