//! Validation of the providerSpec and the Secret, with the reference
//! provider's messages (Kubernetes field-error wording, its field paths
//! included, even where they name the wrong parent: an empty interface list
//! is reported at `spec.networkInterfaces.networkInterfaces` and a metadata
//! item at `spec.networkInterfaces[i].key`, as the reference does).

use crate::spec::{
    GcpDisk, GcpGpu, GcpMetadata, GcpNetworkInterface, GcpProviderSpec, GcpScheduling,
    DISK_INTERFACE_NVME, DISK_INTERFACE_SCSI, DISK_TYPE_SCRATCH,
};
use k8s_openapi::api::core::v1::Secret;
use std::fmt;

/// Secret key of the service-account JSON.
pub const SECRET_SERVICE_ACCOUNT_JSON: &str = "serviceAccountJSON";
/// Alternative secret key of the service-account JSON.
pub const SECRET_SERVICE_ACCOUNT_JSON_ALT: &str = "serviceaccount.json";
/// Secret key of a credentials configuration (service account or workload identity).
pub const SECRET_CREDENTIALS_CONFIG: &str = "credentialsConfig";
/// Secret key of the project, when the credentials JSON has no `project_id`.
pub const SECRET_PROJECT_ID: &str = "projectID";
/// Secret key of the user data.
pub const SECRET_USER_DATA: &str = "userData";

/// One validation finding, printed as Kubernetes prints field errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldError {
    /// `<path>: Required value: <detail>`
    Required {
        /// Field path.
        path: String,
        /// Detail.
        detail: String,
    },
    /// `<path>: Invalid value: "<value>": <detail>`
    Invalid {
        /// Field path.
        path: String,
        /// The rejected value.
        value: String,
        /// Detail.
        detail: String,
    },
    /// `<path>: Unsupported value: "<value>": supported values: "a", "b"`
    NotSupported {
        /// Field path.
        path: String,
        /// The rejected value.
        value: String,
        /// The accepted values.
        supported: Vec<&'static str>,
    },
    /// `<path>: Forbidden: <detail>`
    Forbidden {
        /// Field path.
        path: String,
        /// Detail.
        detail: String,
    },
    /// A finding without a field path (the Secret's).
    Plain(String),
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldError::Required { path, detail } => write!(f, "{path}: Required value: {detail}"),
            FieldError::Invalid {
                path,
                value,
                detail,
            } => write!(f, "{path}: Invalid value: {value:?}: {detail}"),
            FieldError::NotSupported {
                path,
                value,
                supported,
            } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "{path}: Unsupported value: {value:?}: supported values: {}",
                    list.join(", ")
                )
            }
            FieldError::Forbidden { path, detail } => write!(f, "{path}: Forbidden: {detail}"),
            FieldError::Plain(m) => f.write_str(m),
        }
    }
}

fn required(path: impl Into<String>, detail: &str) -> FieldError {
    FieldError::Required {
        path: path.into(),
        detail: detail.into(),
    }
}

fn forbidden(path: impl Into<String>, detail: &str) -> FieldError {
    FieldError::Forbidden {
        path: path.into(),
        detail: detail.into(),
    }
}

fn invalid(path: String, value: &str, detail: &str) -> FieldError {
    FieldError::Invalid {
        path,
        value: value.into(),
        detail: detail.into(),
    }
}

/// Findings joined as Go prints a slice of errors: `[a b c]`.
pub fn go_list(errs: &[FieldError]) -> String {
    let parts: Vec<String> = errs.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(" "))
}

/// Validates a providerSpec; empty = valid.
pub fn validate_spec(spec: &GcpProviderSpec) -> Vec<FieldError> {
    let mut errs = validate_disks(&spec.disks);
    if spec.machine_type.is_empty() {
        errs.push(required("spec.machineType", "machineType is required"));
    }
    if spec.region.is_empty() {
        errs.push(required("spec.region", "region is required"));
    }
    if spec.zone.is_empty() {
        errs.push(required("spec.zone", "zone is required"));
    }
    errs.extend(validate_network_interfaces(&spec.network_interfaces));
    errs.extend(validate_metadata(&spec.metadata));
    errs.extend(validate_gpu(spec.gpu.as_ref()));
    errs.extend(validate_scheduling(&spec.scheduling, spec.gpu.as_ref()));
    errs
}

fn validate_disks(disks: &[GcpDisk]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if disks.is_empty() {
        errs.push(required("spec.disks", "at least one disk is required"));
    }
    for (i, d) in disks.iter().enumerate() {
        let p = format!("spec.disks[{i}]");
        if d.type_ == DISK_TYPE_SCRATCH
            && d.interface != DISK_INTERFACE_NVME
            && d.interface != DISK_INTERFACE_SCSI
        {
            errs.push(FieldError::NotSupported {
                path: format!("{p}.interface"),
                value: d.interface.clone(),
                supported: vec![DISK_INTERFACE_NVME, DISK_INTERFACE_SCSI],
            });
        }
        if d.boot && d.image.is_empty() {
            errs.push(required(
                format!("{p}.image"),
                "image is required for boot disk",
            ));
        }
        if let Some(e) = &d.encryption {
            if e.kms_key_name.trim().is_empty() {
                errs.push(required(
                    format!("{p}.kmsKeyName"),
                    "kmsKeyName is required to be specified",
                ));
            }
            if !e.kms_key_service_account.is_empty() && e.kms_key_service_account.trim().is_empty()
            {
                errs.push(required(
                    format!("{p}.kmsKeyServiceAccount"),
                    "kmsKeyServiceAccount should either be explicitly specified without spaces or left un-specified to default to the Compute Service Agent",
                ));
            }
        }
    }
    errs
}

fn validate_network_interfaces(nics: &[GcpNetworkInterface]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if nics.is_empty() {
        errs.push(required(
            "spec.networkInterfaces.networkInterfaces",
            "at least one network interface is required",
        ));
    }
    for (i, n) in nics.iter().enumerate() {
        let p = format!("spec.networkInterfaces[{i}]");
        if n.network.is_empty() && n.subnetwork.is_empty() {
            errs.push(required(
                p.clone(),
                "either network or subnetwork or both is required",
            ));
        }
        if !matches!(n.stack_type.as_str(), "" | "IPV4_IPV6" | "IPV4_ONLY") {
            errs.push(invalid(
                format!("{p}.stackType"),
                &n.stack_type,
                "must be either IPV4_IPV6 or IPV4_ONLY",
            ));
        }
        if !matches!(n.ipv6_access_type.as_str(), "" | "EXTERNAL" | "INTERNAL") {
            errs.push(invalid(
                format!("{p}.ipv6AccessType"),
                &n.ipv6_access_type,
                "must be either EXTERNAL or INTERNAL",
            ));
        }
        if !n.ip_cidr_range.is_empty() {
            if let Err(detail) = check_cidr_range(&n.ip_cidr_range) {
                errs.push(invalid(
                    format!("{p}.ipCidrRange"),
                    &n.ip_cidr_range,
                    &detail,
                ));
            }
        }
    }
    errs
}

/// An alias range is a bare mask `/0` … `/32`.
fn check_cidr_range(r: &str) -> Result<(), String> {
    let Some(mask) = r.strip_prefix('/') else {
        return Err("CIDR range must start with '/'".into());
    };
    let size: i64 = mask
        .parse()
        .map_err(|_| format!("invalid CIDR mask size: {mask}"))?;
    if !(0..=32).contains(&size) {
        return Err("CIDR mask size must be between 0 and 32".into());
    }
    Ok(())
}

fn validate_metadata(items: &[GcpMetadata]) -> Vec<FieldError> {
    items
        .iter()
        .enumerate()
        .filter(|(_, m)| m.key == "user-data")
        .map(|(i, _)| {
            forbidden(
                format!("spec.networkInterfaces[{i}].key"),
                "user-data key is forbidden in metadata",
            )
        })
        .collect()
}

fn validate_scheduling(s: &GcpScheduling, gpu: Option<&GcpGpu>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let p = "spec.scheduling.onHostMaintenance";
    if s.on_host_maintenance != "MIGRATE" && s.on_host_maintenance != "TERMINATE" {
        errs.push(FieldError::NotSupported {
            path: p.into(),
            value: s.on_host_maintenance.clone(),
            supported: vec!["MIGRATE", "TERMINATE"],
        });
    }
    if gpu.is_some() && s.on_host_maintenance != "TERMINATE" {
        errs.push(forbidden(
            p,
            "liveMigration is not allowed for VMs with gpu attached, use \"TERMINATE\" instead",
        ));
    }
    errs
}

fn validate_gpu(gpu: Option<&GcpGpu>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(g) = gpu {
        if g.accelerator_type.is_empty() {
            errs.push(required(
                "spec.gpu.acceleratorType",
                "accelerator type needs to be provided",
            ));
        }
        if g.count == 0 {
            errs.push(forbidden("spec.gpu.count", "gpu count must be > 0"));
        }
    }
    errs
}

/// Whether the Secret has a key (in `data` or `stringData`).
pub fn has_key(secret: &Secret, key: &str) -> bool {
    secret.data.as_ref().is_some_and(|d| d.contains_key(key))
        || secret
            .string_data
            .as_ref()
            .is_some_and(|d| d.contains_key(key))
}

/// Validates the Secret: credentials under one of the three keys, and a `userData` key.
pub fn validate_secret(secret: &Secret) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if ![
        SECRET_SERVICE_ACCOUNT_JSON,
        SECRET_SERVICE_ACCOUNT_JSON_ALT,
        SECRET_CREDENTIALS_CONFIG,
    ]
    .iter()
    .any(|k| has_key(secret, k))
    {
        errs.push(FieldError::Plain(format!(
            "secret {SECRET_SERVICE_ACCOUNT_JSON}, {SECRET_SERVICE_ACCOUNT_JSON_ALT} or {SECRET_CREDENTIALS_CONFIG} is required field"
        )));
    }
    if !has_key(secret, SECRET_USER_DATA) {
        errs.push(FieldError::Plain(
            "secret userData is required field".into(),
        ));
    }
    errs
}

/// The decoder's warnings about a providerSpec, as sentences.
pub fn spec_warnings(provider_spec: &serde_json::Value) -> Vec<String> {
    match crate::spec::decode(provider_spec) {
        Ok(d) => d.warnings.iter().map(ToString::to_string).collect(),
        Err(e) => e.warnings.iter().map(ToString::to_string).collect(),
    }
}

/// Decodes and validates a class and its Secret as CreateMachine does,
/// offline ([`mcm_driver::Driver::check_class`]). Messages never carry a
/// Secret value.
pub fn check_class(class: &mcm_api::MachineClass, secret: &Secret) -> mcm_driver::ClassCheck {
    use mcm_driver::Finding;
    let mut check = mcm_driver::ClassCheck::default();
    if class.provider != crate::spec::PROVIDER_NAME {
        check.errors.push(Finding::new(
            "provider",
            format!(
                "{:?}: this driver serves {:?}",
                class.provider,
                crate::spec::PROVIDER_NAME
            ),
        ));
    }
    match crate::spec::decode(&class.provider_spec) {
        Ok(d) => {
            check.warn(d.warnings);
            check.errors.extend(
                validate_spec(&d.value)
                    .iter()
                    .map(|e| Finding::from_field_error(&e.to_string(), "providerSpec")),
            );
        }
        Err(e) => check.decode_failed(e),
    }
    let secret_errors = validate_secret(secret);
    let credentials_present = !secret_errors
        .iter()
        .any(|e| e.to_string().contains(SECRET_CREDENTIALS_CONFIG));
    check.errors.extend(
        secret_errors
            .iter()
            .map(|e| Finding::new("secretRef", e.to_string())),
    );
    if credentials_present {
        match crate::credentials::from_secret(secret) {
            Ok(c) => check.warn(c.warnings),
            Err(e) => check.errors.push(Finding::new("secretRef", e.to_string())),
        }
    }
    check
}

#[cfg(test)]
mod tests;
