//! Validation of the providerSpec and the Secret, with the reference
//! provider's messages (Kubernetes field-error wording, its field paths
//! included, even where they name the wrong parent: an empty interface list
//! is reported at `spec.networkInterfaces.networkInterfaces` and a metadata
//! item at `spec.networkInterfaces[i].key`, as the reference does).

use crate::spec::{
    GcpDisk, GcpGpu, GcpMetadata, GcpNetworkInterface, GcpProviderSpec, GcpScheduling,
    DISK_INTERFACE_NVME, DISK_INTERFACE_SCSI, DISK_TYPE_SCRATCH, PROVIDER_NAME,
};
use k8s_openapi::api::core::v1::Secret;
use mcm_driver::provider_spec::{
    self, FieldError, Join, Messages, ProviderSpec, SecretData, SecretUse, Stage,
};

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

/// The drivers' shared front half (docs/design/driver.md, "Provider
/// skeleton") in the reference's words: findings joined as Go prints a
/// slice, the spec's reported before the Secret's.
impl ProviderSpec for GcpProviderSpec {
    const PROVIDER: &'static str = PROVIDER_NAME;
    const MESSAGES: Messages = Messages {
        join: Join::GoSlice,
        decode: "providerSpec: ",
        spec: "error while validating ProviderSpec ",
        secret: Some("error while validating Secret "),
    };

    fn validate(&self) -> Vec<FieldError> {
        validate_spec(self)
    }

    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
        validate_secret(secret, purpose)
    }
}

/// The reference's name of the step that refused (`<ctx> failed on <step>`).
pub fn reference_step(stage: Stage) -> &'static str {
    match stage {
        Stage::Provider => "validateProvider",
        Stage::Decode => "decodeProviderSpec",
        Stage::Spec => "validateProviderSpec",
        Stage::Secret => "validateSecret",
    }
}

/// Validates a providerSpec; empty = valid.
pub fn validate_spec(spec: &GcpProviderSpec) -> Vec<FieldError> {
    let mut errs = validate_disks(&spec.disks);
    if spec.machine_type.is_empty() {
        errs.push(FieldError::required(
            "spec.machineType",
            "machineType is required",
        ));
    }
    if spec.region.is_empty() {
        errs.push(FieldError::required("spec.region", "region is required"));
    }
    if spec.zone.is_empty() {
        errs.push(FieldError::required("spec.zone", "zone is required"));
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
        errs.push(FieldError::required(
            "spec.disks",
            "at least one disk is required",
        ));
    }
    for (i, d) in disks.iter().enumerate() {
        let p = format!("spec.disks[{i}]");
        if d.type_ == DISK_TYPE_SCRATCH
            && d.interface != DISK_INTERFACE_NVME
            && d.interface != DISK_INTERFACE_SCSI
        {
            errs.push(FieldError::not_supported(
                format!("{p}.interface"),
                &d.interface,
                &[DISK_INTERFACE_NVME, DISK_INTERFACE_SCSI],
            ));
        }
        if d.boot && d.image.is_empty() {
            errs.push(FieldError::required(
                format!("{p}.image"),
                "image is required for boot disk",
            ));
        }
        if let Some(e) = &d.encryption {
            if e.kms_key_name.trim().is_empty() {
                errs.push(FieldError::required(
                    format!("{p}.kmsKeyName"),
                    "kmsKeyName is required to be specified",
                ));
            }
            if !e.kms_key_service_account.is_empty() && e.kms_key_service_account.trim().is_empty()
            {
                errs.push(FieldError::required(
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
        errs.push(FieldError::required(
            "spec.networkInterfaces.networkInterfaces",
            "at least one network interface is required",
        ));
    }
    for (i, n) in nics.iter().enumerate() {
        let p = format!("spec.networkInterfaces[{i}]");
        if n.network.is_empty() && n.subnetwork.is_empty() {
            errs.push(FieldError::required(
                p.clone(),
                "either network or subnetwork or both is required",
            ));
        }
        if !matches!(n.stack_type.as_str(), "" | "IPV4_IPV6" | "IPV4_ONLY") {
            errs.push(FieldError::invalid(
                format!("{p}.stackType"),
                &n.stack_type,
                "must be either IPV4_IPV6 or IPV4_ONLY",
            ));
        }
        if !matches!(n.ipv6_access_type.as_str(), "" | "EXTERNAL" | "INTERNAL") {
            errs.push(FieldError::invalid(
                format!("{p}.ipv6AccessType"),
                &n.ipv6_access_type,
                "must be either EXTERNAL or INTERNAL",
            ));
        }
        if !n.ip_cidr_range.is_empty() {
            if let Err(detail) = check_cidr_range(&n.ip_cidr_range) {
                errs.push(FieldError::invalid(
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
            FieldError::forbidden(
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
        errs.push(FieldError::not_supported(
            p,
            &s.on_host_maintenance,
            &["MIGRATE", "TERMINATE"],
        ));
    }
    if gpu.is_some() && s.on_host_maintenance != "TERMINATE" {
        errs.push(FieldError::forbidden(
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
            errs.push(FieldError::required(
                "spec.gpu.acceleratorType",
                "accelerator type needs to be provided",
            ));
        }
        if g.count == 0 {
            errs.push(FieldError::forbidden(
                "spec.gpu.count",
                "gpu count must be > 0",
            ));
        }
    }
    errs
}

/// The Secret's findings for a call of `purpose`: credentials under one of
/// the three keys and, for a new VM, a `userData` key (present, as the
/// reference checks it; worded as the reference words them).
pub fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if ![
        SECRET_SERVICE_ACCOUNT_JSON,
        SECRET_SERVICE_ACCOUNT_JSON_ALT,
        SECRET_CREDENTIALS_CONFIG,
    ]
    .iter()
    .any(|k| secret.has(k))
    {
        errs.push(FieldError::unworded(
            "secretRef",
            format!("secret {SECRET_SERVICE_ACCOUNT_JSON}, {SECRET_SERVICE_ACCOUNT_JSON_ALT} or {SECRET_CREDENTIALS_CONFIG} is required field"),
        ));
    }
    if purpose.needs_user_data() && !secret.has(SECRET_USER_DATA) {
        errs.push(FieldError::unworded(
            format!("secretRef.{SECRET_USER_DATA}"),
            "secret userData is required field",
        ));
    }
    errs
}

/// Decodes and validates a class and its Secret as CreateMachine does,
/// offline ([`mcm_driver::Driver::check_class`]): the skeleton's check
/// ([`provider_spec::check_class`]) and, when the Secret has credentials,
/// what reading them finds. Messages never carry a Secret value.
pub fn check_class(class: &mcm_api::MachineClass, secret: &Secret) -> mcm_driver::ClassCheck {
    let mut check = provider_spec::check_class::<GcpProviderSpec>(class, secret);
    let credentials_missing = validate_secret(SecretData(secret), SecretUse::Existing)
        .iter()
        .any(|e| e.field == "secretRef");
    if !credentials_missing {
        match crate::credentials::from_secret(secret) {
            Ok(c) => check.warn(c.warnings),
            Err(e) => check
                .errors
                .push(mcm_driver::Finding::new("secretRef", e.to_string())),
        }
    }
    check
}

#[cfg(test)]
mod tests;
