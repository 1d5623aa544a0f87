//! The AWS providerSpec (the MachineClass `providerSpec` JSON), the provider
//! secret, and their validation.
//!
//! The JSON keys are the ones users already write for Gardener's AWS provider
//! (`ami`, `blockDevices`, `networkInterfaces`, `srcAndDstChecksEnabled`, ...).
//! Unknown keys are tolerated so that classes written for newer provider
//! versions still decode.

use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

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

impl AwsProviderSpec {
    /// Decodes a providerSpec JSON value. `null` decodes as an empty spec (which
    /// validation then rejects field by field).
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        if value.is_null() {
            return Ok(Self::default());
        }
        serde_json::from_value(value.clone()).map_err(|e| e.to_string())
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

/// One validation finding, printed like a Kubernetes `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `providerSpec.ami`.
    pub field: String,
    /// `Required value`, `Invalid value: "x"`, `Unsupported value: "x"`.
    pub kind: String,
    /// Details.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.field, self.kind, self.detail)
    }
}

fn required(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        kind: "Required value".into(),
        detail: detail.into(),
    }
}

fn invalid(
    field: impl Into<String>,
    value: impl fmt::Debug,
    detail: impl Into<String>,
) -> FieldError {
    FieldError {
        field: field.into(),
        kind: format!("Invalid value: {value:?}"),
        detail: detail.into(),
    }
}

fn one_of(errs: &mut Vec<FieldError>, field: String, value: &str, accepted: &[&str]) {
    if !accepted.contains(&value) {
        errs.push(FieldError {
            field,
            kind: format!("Unsupported value: {value:?}"),
            detail: format!("supported values: {}", accepted.join(", ")),
        });
    }
}

/// Joins findings the way Kubernetes aggregates errors: one error as is, several as `[a, b]`
/// (the shared `mcm_api::validation::aggregate`).
pub fn aggregate(errs: &[FieldError]) -> String {
    mcm_api::validation::aggregate(errs)
}

fn is_data_device_name(name: &str) -> bool {
    // ^/dev/(sd[a-z]|xvd[a-c][a-z]?)$
    let lower = |c: u8| c.is_ascii_lowercase();
    if let Some(rest) = name.strip_prefix("/dev/sd") {
        let b = rest.as_bytes();
        return matches!(b, [c] if lower(*c));
    }
    if let Some(rest) = name.strip_prefix("/dev/xvd") {
        let b = rest.as_bytes();
        return match b {
            [a] => (b'a'..=b'c').contains(a),
            [a, z] => (b'a'..=b'c').contains(a) && lower(*z),
            _ => false,
        };
    }
    false
}

/// Validates a providerSpec (all findings, not just the first).
pub fn validate_spec(spec: &AwsProviderSpec) -> Vec<FieldError> {
    let p = "providerSpec";
    let mut errs = Vec::new();
    if spec.ami.is_empty() {
        errs.push(required(format!("{p}.ami"), "AMI is required"));
    }
    if spec.region.is_empty() {
        errs.push(required(format!("{p}.region"), "Region is required"));
    }
    if spec.machine_type.is_empty() {
        errs.push(required(
            format!("{p}.machineType"),
            "MachineType is required",
        ));
    }
    if spec.iam.name.is_empty() == spec.iam.arn.is_empty() {
        errs.push(invalid(
            format!("{p}.iam"),
            &spec.iam,
            "either IAM Name or ARN must be set",
        ));
    }
    validate_tags(spec, &mut errs);
    validate_block_devices(&spec.block_devices, &mut errs);
    if let Some(cr) = &spec.capacity_reservation {
        let f = format!("{p}.capacityReservation");
        if !cr.capacity_reservation_preference.is_empty() {
            if cr.capacity_reservation_id.is_some()
                || cr.capacity_reservation_resource_group_arn.is_some()
            {
                errs.push(required(
                    f,
                    "CapacityReservationPreference cannot be set when also providing a CapacityReservationID or CapacityReservationResourceGroupArn",
                ));
            }
        } else if cr.capacity_reservation_id.is_some()
            && cr.capacity_reservation_resource_group_arn.is_some()
        {
            errs.push(required(
                f,
                "CapacityReservationResourceGroupArn or CapacityReservationId are optional but only one should be used",
            ));
        }
    }
    validate_network_interfaces(&spec.network_interfaces, &mut errs);
    if let Some(md) = &spec.instance_metadata_options {
        let f = format!("{p}.instanceMetadataOptions");
        if let Some(h) = md.http_put_response_hop_limit {
            if !(0..=64).contains(&h) {
                errs.push(invalid(
                    format!("{f}.httpPutResponseHopLimit"),
                    h,
                    "Only values between 0 and 64, both included, are accepted",
                ));
            }
        }
        if !md.http_endpoint.is_empty() {
            one_of(
                &mut errs,
                format!("{f}.httpEndpoint"),
                &md.http_endpoint,
                &["enabled", "disabled"],
            );
        }
        if !md.http_tokens.is_empty() {
            one_of(
                &mut errs,
                format!("{f}.httpTokens"),
                &md.http_tokens,
                &["required", "optional"],
            );
        }
        if !md.http_protocol_ipv6.is_empty() {
            one_of(
                &mut errs,
                format!("{f}.httpProtocolIpv6"),
                &md.http_protocol_ipv6,
                &["enabled", "disabled"],
            );
        }
    }
    if let Some(cpu) = &spec.cpu_options {
        let f = format!("{p}.cpuOptions");
        if let Some(a) = &cpu.amd_sev_snp {
            one_of(
                &mut errs,
                format!("{f}.amdSevSnp"),
                a,
                &["enabled", "disabled"],
            );
        }
        match (cpu.core_count, cpu.threads_per_core) {
            (Some(_), None) => errs.push(required(
                format!("{f}.threadsPerCore"),
                "ThreadsPerCore is required together with CoreCount",
            )),
            (None, Some(_)) => errs.push(required(
                format!("{f}.coreCount"),
                "CoreCount is required together with ThreadsPerCore",
            )),
            _ => {}
        }
        if let Some(t) = cpu.threads_per_core {
            if !(1..=2).contains(&t) {
                errs.push(invalid(
                    format!("{f}.threadsPerCore"),
                    t,
                    "ThreadsPerCore must be either '1' or '2'",
                ));
            }
        }
        if let Some(c) = cpu.core_count {
            if c < 1 {
                errs.push(invalid(
                    format!("{f}.coreCount"),
                    c,
                    "CoreCount must be positive",
                ));
            }
        }
    }
    if let Some(pl) = &spec.placement {
        let f = format!("{p}.placement");
        if let Some(t) = &pl.tenancy {
            one_of(
                &mut errs,
                format!("{f}.tenancy"),
                t,
                &["default", "dedicated", "host"],
            );
        }
        if let Some(a) = &pl.affinity {
            one_of(&mut errs, format!("{f}.affinity"), a, &["default", "host"]);
        }
        if pl.host_id.as_deref().is_some_and(|h| !h.is_empty())
            && pl.tenancy.as_deref() != Some("host")
        {
            errs.push(invalid(
                format!("{f}.hostId"),
                pl.host_id.as_deref().unwrap_or_default(),
                "hostId can only be set when tenancy is 'host'",
            ));
        }
        if let Some(n) = pl.partition_number {
            if n < 1 {
                errs.push(invalid(
                    format!("{f}.partitionNumber"),
                    n,
                    "partitionNumber must be at least 1",
                ));
            }
        }
    }
    if let Some(m) = &spec.instance_market_options {
        one_of(
            &mut errs,
            format!("{p}.instanceMarketOptions.marketType"),
            &m.market_type,
            &VALID_MARKET_TYPES,
        );
    }
    errs
}

fn validate_tags(spec: &AwsProviderSpec, errs: &mut Vec<FieldError>) {
    if spec.cluster_tag_key().is_none() {
        errs.push(required(
            "providerSpec.tags",
            format!("Tag required of the form {CLUSTER_TAG_PREFIX}****"),
        ));
    }
    if spec.role_tag_key().is_none() {
        errs.push(required(
            "providerSpec.tags",
            format!("Tag required of the form {ROLE_TAG_PREFIX}****"),
        ));
    }
}

fn validate_block_devices(disks: &[BlockDevice], errs: &mut Vec<FieldError>) {
    let f = "providerSpec.blockDevices";
    let mut roots = 0;
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, disk) in disks.iter().enumerate() {
        let idx = format!("{f}[{i}]");
        if disk.device_name == ROOT_DEVICE_NAME {
            roots += 1;
        } else if disks.len() > 1 && !is_data_device_name(&disk.device_name) {
            errs.push(invalid(
                format!("{idx}.deviceName"),
                &disk.device_name,
                format!(
                    "Device name given: {} does not match the expected pattern ^/dev/(sd[a-z]|xvd[a-c][a-z]?)$",
                    disk.device_name
                ),
            ));
        }
        *names.entry(disk.device_name.as_str()).or_default() += 1;
        if !VALID_VOLUME_TYPES.contains(&disk.ebs.volume_type.as_str()) {
            errs.push(required(
                format!("{idx}.ebs.volumeType"),
                format!("Please mention a valid EBS volume type: {VALID_VOLUME_TYPES:?}"),
            ));
        }
        if disk.ebs.volume_size <= 0 {
            errs.push(required(
                format!("{idx}.ebs.volumeSize"),
                "Please mention a valid EBS volume size",
            ));
        }
        if disk.ebs.iops < 0 || (disk.ebs.volume_type == "io1" && disk.ebs.iops == 0) {
            errs.push(required(
                format!("{idx}.ebs.iops"),
                "Please mention a valid EBS volume iops",
            ));
        }
        if let Some(t) = disk.ebs.throughput {
            if t <= 0 {
                errs.push(invalid(
                    format!("{idx}.ebs.throughput"),
                    t,
                    "Throughput should be a positive value",
                ));
            }
        }
    }
    if roots > 1 || (roots == 0 && disks.len() > 1) {
        errs.push(required(f, "Only one device can be specified as root"));
    }
    for (name, n) in names {
        if n > 1 {
            errs.push(required(
                f,
                format!("Device name '{name}' duplicated {n} times, DeviceName must be unique"),
            ));
        }
    }
}

fn validate_network_interfaces(nis: &[NetworkInterface], errs: &mut Vec<FieldError>) {
    let f = "providerSpec.networkInterfaces";
    if nis.is_empty() {
        errs.push(required(f, "Mention at least one NetworkInterface"));
        return;
    }
    for (i, ni) in nis.iter().enumerate() {
        let idx = format!("{f}[{i}]");
        if ni.subnet_id.is_empty() {
            errs.push(required(format!("{idx}.subnetID"), "SubnetID is required"));
        }
        if ni.security_group_ids.is_empty() {
            errs.push(required(
                format!("{idx}.securityGroupIDs"),
                "Mention at least one securityGroupID",
            ));
        }
        for (j, sg) in ni.security_group_ids.iter().enumerate() {
            if sg.trim().is_empty() {
                errs.push(required(
                    format!("{idx}.securityGroupIDs[{j}]"),
                    format!("securityGroupIDs cannot be blank for networkInterface:{i} securityGroupID:{j}"),
                ));
            }
        }
        if let Some(t) = &ni.interface_type {
            one_of(
                errs,
                format!("{idx}.interfaceType"),
                t,
                &["", "interface", "efa", "efa-only"],
            );
        }
        if let Some(d) = ni.device_index {
            if d < 0 {
                errs.push(invalid(
                    format!("{idx}.deviceIndex"),
                    d,
                    "deviceIndex must not be negative",
                ));
            }
        }
        if let Some(n) = ni.network_card_index {
            if n < 0 {
                errs.push(invalid(
                    format!("{idx}.networkCardIndex"),
                    n,
                    "networkCardIndex must not be negative",
                ));
            }
        }
        for (name, v) in [
            ("ipv6AddressCount", ni.ipv6_address_count),
            ("ipv6PrefixCount", ni.ipv6_prefix_count),
        ] {
            if let Some(v) = v {
                if v < 0 {
                    errs.push(invalid(format!("{idx}.{name}"), v, "must not be negative"));
                }
            }
        }
    }
}

/// The credentials a secret carries.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// Static access keys.
    Static {
        /// Access key ID.
        access_key_id: String,
        /// Secret access key.
        secret_access_key: String,
    },
    /// AssumeRoleWithWebIdentity with a projected token file.
    WebIdentity {
        /// Path of the token file.
        token_file: String,
        /// Role to assume.
        role_arn: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret key.
        match self {
            Credentials::Static { access_key_id, .. } => f
                .debug_struct("Static")
                .field("access_key_id", access_key_id)
                .finish_non_exhaustive(),
            Credentials::WebIdentity { role_arn, .. } => f
                .debug_struct("WebIdentity")
                .field("role_arn", role_arn)
                .finish_non_exhaustive(),
        }
    }
}

/// The value of a secret key (`data` first, then `stringData`), if present.
pub fn secret_value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return Some(v.0.clone());
    }
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|s| s.as_bytes().to_vec())
}

fn secret_string(secret: &Secret, key: &str) -> String {
    secret_value(secret, key)
        .map(|v| String::from_utf8_lossy(&v).trim().to_string())
        .unwrap_or_default()
}

/// Validates the provider secret (credentials and userData).
pub fn validate_secret(secret: &Secret) -> Vec<FieldError> {
    let f = "secretRef";
    let mut errs = Vec::new();
    let user_data_missing = secret_value(secret, SECRET_USER_DATA).is_none_or(|v| v.is_empty());
    if secret_value(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE).is_some() {
        if secret_string(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE).is_empty() {
            errs.push(required(
                format!("{f}.workloadIdentityTokenFile"),
                "Workload identity token file is required",
            ));
        }
        if secret_string(secret, SECRET_ROLE_ARN).is_empty() {
            errs.push(required(
                format!("{f}.roleARN"),
                "Role ARN is required when workload identity is used",
            ));
        }
    } else {
        if secret_string(secret, SECRET_ACCESS_KEY_ID).is_empty()
            && secret_string(secret, SECRET_ALT_ACCESS_KEY_ID).is_empty()
        {
            errs.push(required(
                format!("{f}.AWSAccessKeyID"),
                format!("Mention atleast {SECRET_ACCESS_KEY_ID} or {SECRET_ALT_ACCESS_KEY_ID}"),
            ));
        }
        if secret_string(secret, SECRET_SECRET_ACCESS_KEY).is_empty()
            && secret_string(secret, SECRET_ALT_SECRET_ACCESS_KEY).is_empty()
        {
            errs.push(required(
                format!("{f}.AWSSecretAccessKey"),
                format!(
                    "Mention atleast {SECRET_SECRET_ACCESS_KEY} or {SECRET_ALT_SECRET_ACCESS_KEY}"
                ),
            ));
        }
    }
    if user_data_missing {
        errs.push(required(format!("{f}.userData"), "Mention userData"));
    }
    errs
}

/// The credentials of a (validated) secret.
pub fn credentials(secret: &Secret) -> Credentials {
    if secret_value(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE).is_some() {
        return Credentials::WebIdentity {
            token_file: secret_string(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE),
            role_arn: secret_string(secret, SECRET_ROLE_ARN),
        };
    }
    let first = |a: &str, b: &str| {
        let v = secret_string(secret, a);
        if v.is_empty() {
            secret_string(secret, b)
        } else {
            v
        }
    };
    Credentials::Static {
        access_key_id: first(SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID),
        secret_access_key: first(SECRET_SECRET_ACCESS_KEY, SECRET_ALT_SECRET_ACCESS_KEY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    pub(crate) fn valid_json() -> serde_json::Value {
        json!({
            "ami": "ami-123456789",
            "blockDevices": [{"ebs": {"volumeSize": 50, "volumeType": "gp2"}}],
            "iam": {"name": "test-iam"},
            "keyName": "test-ssh-key",
            "machineType": "m4.large",
            "networkInterfaces": [{"securityGroupIDs": ["sg-1"], "subnetID": "subnet-1"}],
            "region": "eu-west-1",
            "tags": {"kubernetes.io/cluster/shoot--test": "1", "kubernetes.io/role/test": "1"},
            "someFutureField": {"x": 1}
        })
    }

    fn spec(v: serde_json::Value) -> AwsProviderSpec {
        AwsProviderSpec::from_json(&v).expect("decodes")
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_valid_spec_has_no_findings_and_tolerates_unknown_fields() {
        let s = spec(valid_json());
        assert!(validate_spec(&s).is_empty(), "{:?}", validate_spec(&s));
        assert_eq!(
            s.cluster_tag_key(),
            Some("kubernetes.io/cluster/shoot--test")
        );
        assert_eq!(s.role_tag_key(), Some("kubernetes.io/role/test"));
    }

    #[test]
    fn the_gardener_example_class_decodes() {
        let v = json!({
          "ami": "ami-123456",
          "blockDevices": [
            {"deviceName": "/root", "ebs": {"volumeSize": 50, "volumeType": "gp2", "encrypted": false, "deleteOnTermination": true}},
            {"deviceName": "/dev/sdb", "ebs": {"volumeSize": 50, "volumeType": "gp2", "encrypted": true, "deleteOnTermination": true}}
          ],
          "iam": {"name": "iam-name"},
          "keyName": "key-value-pair-name",
          "machineType": "t2.large",
          "networkInterfaces": [{"subnetID": "subnet-acbd1234", "securityGroupIDs": ["sg-xyz12345"]}],
          "region": "eu-east-1",
          "spotPrice": "",
          "tags": {"Name": "sample-machine-name", "kubernetes.io/cluster/YOUR_CLUSTER_NAME": "1",
                   "kubernetes.io/role/YOUR_ROLE_NAME": "1", "tag1": "tag1-value"},
          "instanceMetadataOptions": {"httpEndpoint": "enabled", "httpPutResponseHopLimit": 1,
                                      "httpTokens": "optional", "httpProtocolIpv6": "disabled"}
        });
        let s = spec(v);
        assert!(validate_spec(&s).is_empty(), "{:?}", validate_spec(&s));
        assert_eq!(s.spot_price.as_deref(), Some(""));
        assert!(s.block_devices[1].ebs.encrypted);
        assert_eq!(
            s.instance_metadata_options
                .as_ref()
                .and_then(|m| m.http_put_response_hop_limit),
            Some(1)
        );
    }

    #[test]
    fn missing_required_fields_are_all_reported() {
        let s = spec(json!({}));
        let m = messages(&validate_spec(&s));
        assert!(
            m.contains(&"providerSpec.ami: Required value: AMI is required".to_string()),
            "{m:?}"
        );
        assert!(m
            .iter()
            .any(|e| e.starts_with("providerSpec.region: Required value")));
        assert!(m
            .iter()
            .any(|e| e.starts_with("providerSpec.machineType: Required value")));
        assert!(m
            .iter()
            .any(|e| e.starts_with("providerSpec.iam: Invalid value")));
        assert!(m.contains(&"providerSpec.tags: Required value: Tag required of the form kubernetes.io/cluster/****".to_string()));
        assert!(m.contains(
            &"providerSpec.tags: Required value: Tag required of the form kubernetes.io/role/****"
                .to_string()
        ));
        assert!(m
            .iter()
            .any(|e| e.starts_with("providerSpec.networkInterfaces: Required value")));
    }

    #[test]
    fn block_device_rules() {
        let mut v = valid_json();
        v["blockDevices"] = json!([
            {"deviceName": "/root", "ebs": {"volumeSize": 50, "volumeType": "io1"}},
            {"deviceName": "/root", "ebs": {"volumeSize": 0, "volumeType": "io2", "throughput": 0, "iops": -1}},
            {"deviceName": "/dev/bogus", "ebs": {"volumeSize": 1, "volumeType": "gp3"}},
            {"deviceName": "/dev/xvdba", "ebs": {"volumeSize": 1, "volumeType": "gp3"}},
            {"deviceName": "/dev/xvdba", "ebs": {"volumeSize": 1, "volumeType": "gp3"}}
        ]);
        let m = messages(&validate_spec(&spec(v)));
        let has = |p: &str| m.iter().any(|e| e.starts_with(p));
        assert!(
            has("providerSpec.blockDevices[0].ebs.iops: Required value"),
            "{m:?}"
        );
        assert!(has(
            "providerSpec.blockDevices[1].ebs.volumeType: Required value"
        ));
        assert!(has(
            "providerSpec.blockDevices[1].ebs.volumeSize: Required value"
        ));
        assert!(has("providerSpec.blockDevices[1].ebs.iops: Required value"));
        assert!(has(
            "providerSpec.blockDevices[1].ebs.throughput: Invalid value: 0"
        ));
        assert!(has(
            "providerSpec.blockDevices[2].deviceName: Invalid value"
        ));
        assert!(!has("providerSpec.blockDevices[3].deviceName"));
        assert!(m.contains(
            &"providerSpec.blockDevices: Required value: Only one device can be specified as root"
                .to_string()
        ));
        assert!(m
            .iter()
            .any(|e| e.contains("Device name '/dev/xvdba' duplicated 2 times")));
        assert!(m
            .iter()
            .any(|e| e.contains("Device name '/root' duplicated 2 times")));
    }

    #[test]
    fn data_device_names() {
        for ok in ["/dev/sda", "/dev/sdz", "/dev/xvda", "/dev/xvdcz"] {
            assert!(is_data_device_name(ok), "{ok}");
        }
        for bad in [
            "/dev/sdaa",
            "/dev/xvdd",
            "/dev/xvdaA",
            "/dev/nvme0n1",
            "sdb",
            "",
        ] {
            assert!(!is_data_device_name(bad), "{bad}");
        }
    }

    #[test]
    fn option_rules() {
        let mut v = valid_json();
        v["iam"] = json!({"name": "a", "arn": "b"});
        v["capacityReservation"] =
            json!({"capacityReservationPreference": "open", "capacityReservationId": "cr-1"});
        v["networkInterfaces"] = json!([{"securityGroupIDs": [" "], "interfaceType": "bogus", "deviceIndex": -1, "networkCardIndex": -2}]);
        v["instanceMetadataOptions"] = json!({"httpPutResponseHopLimit": 65, "httpEndpoint": "x", "httpTokens": "y", "httpProtocolIpv6": "z"});
        v["cpuOptions"] = json!({"coreCount": 2, "threadsPerCore": 3, "amdSevSnp": "maybe"});
        v["placement"] =
            json!({"tenancy": "dedicated", "hostId": "h-1", "affinity": "x", "partitionNumber": 0});
        v["instanceMarketOptions"] = json!({"marketType": "free"});
        let m = messages(&validate_spec(&spec(v)));
        for p in [
            "providerSpec.iam: Invalid value",
            "providerSpec.capacityReservation: Required value",
            "providerSpec.networkInterfaces[0].subnetID: Required value",
            "providerSpec.networkInterfaces[0].securityGroupIDs[0]: Required value",
            "providerSpec.networkInterfaces[0].interfaceType: Unsupported value: \"bogus\"",
            "providerSpec.networkInterfaces[0].deviceIndex: Invalid value: -1",
            "providerSpec.networkInterfaces[0].networkCardIndex: Invalid value: -2",
            "providerSpec.instanceMetadataOptions.httpPutResponseHopLimit: Invalid value: 65",
            "providerSpec.instanceMetadataOptions.httpEndpoint: Unsupported value",
            "providerSpec.instanceMetadataOptions.httpTokens: Unsupported value",
            "providerSpec.instanceMetadataOptions.httpProtocolIpv6: Unsupported value",
            "providerSpec.cpuOptions.threadsPerCore: Invalid value: 3",
            "providerSpec.cpuOptions.amdSevSnp: Unsupported value",
            "providerSpec.placement.affinity: Unsupported value",
            "providerSpec.placement.hostId: Invalid value",
            "providerSpec.placement.partitionNumber: Invalid value: 0",
            "providerSpec.instanceMarketOptions.marketType: Unsupported value: \"free\"",
        ] {
            assert!(m.iter().any(|e| e.starts_with(p)), "missing {p} in {m:?}");
        }
        let mut v = valid_json();
        v["cpuOptions"] = json!({"coreCount": 2});
        let m = messages(&validate_spec(&spec(v)));
        assert!(m
            .iter()
            .any(|e| e.starts_with("providerSpec.cpuOptions.threadsPerCore: Required value")));
    }

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn secret_rules_and_both_key_spellings() {
        let m = messages(&validate_secret(&secret(&[])));
        assert_eq!(
            m,
            vec![
                "secretRef.AWSAccessKeyID: Required value: Mention atleast providerAccessKeyId or accessKeyID",
                "secretRef.AWSSecretAccessKey: Required value: Mention atleast providerSecretAccessKey or secretAccessKey",
                "secretRef.userData: Required value: Mention userData",
            ]
        );
        let s = secret(&[
            ("accessKeyID", " AK "),
            ("secretAccessKey", "SK"),
            ("userData", "x"),
        ]);
        assert!(validate_secret(&s).is_empty());
        assert_eq!(
            credentials(&s),
            Credentials::Static {
                access_key_id: "AK".into(),
                secret_access_key: "SK".into()
            }
        );
        let s = secret(&[
            ("providerAccessKeyId", "A1"),
            ("accessKeyID", "A2"),
            ("providerSecretAccessKey", "S1"),
            ("userData", "x"),
        ]);
        assert_eq!(
            credentials(&s),
            Credentials::Static {
                access_key_id: "A1".into(),
                secret_access_key: "S1".into()
            }
        );
        assert!(
            !format!("{:?}", credentials(&s)).contains("S1"),
            "Debug must hide the secret"
        );
        let s = secret(&[("workloadIdentityTokenFile", ""), ("userData", "")]);
        assert_eq!(validate_secret(&s).len(), 3);
    }

    #[test]
    fn aggregate_formats_like_kubernetes() {
        let a = required("a", "x");
        let b = required("b", "y");
        assert_eq!(aggregate(std::slice::from_ref(&a)), "a: Required value: x");
        assert_eq!(
            aggregate(&[a, b]),
            "[a: Required value: x, b: Required value: y]"
        );
    }
}
