//! The per-machine timeouts and counts (`MachineConfiguration`, inlined in a Machine's spec and
//! in the machine templates of MachineSets and MachineDeployments), the
//! `node.machine.sapcloud.io/effective-creation-timeout` annotation, and the MachineDeployment's
//! own periods.
//!
//! The reference decodes these durations as `metav1.Duration`, so a malformed one makes the
//! whole object undecodable, and a machine with `creationTimeout: 0s` is declared Failed as
//! soon as it exists and replaced, forever. mcm-rs rejects them instead, naming the field:
//! * every duration must be a Go duration (`"20m"`, `"1h30m"`) and not negative;
//! * `creationTimeout` and `healthTimeout` (and the annotation) must be greater than zero;
//!   `0s` is not "unset" but invalid, so the user sees it instead of a create/delete loop;
//! * `maxEvictRetries`, `minReadySeconds`, `progressDeadlineSeconds` and
//!   `revisionHistoryLimit` must not be negative (Kubernetes Deployments' rules).

use std::collections::BTreeMap;

use super::FieldError;
use crate::constants::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION;
use crate::duration::{parse_duration, DurationError};
use crate::machine::MachineConfiguration;

/// Whether an error is about a timeout or period (this module's rules) rather than the
/// object's structure: an object being deleted needs none of them, so its deletion goes on.
pub fn is_timeout_error(error: &FieldError) -> bool {
    const FIELDS: [&str; 9] = [
        ".creationTimeout",
        ".healthTimeout",
        ".drainTimeout",
        ".inPlaceUpdateTimeout",
        ".machinePreserveTimeout",
        ".maxEvictRetries",
        "spec.minReadySeconds",
        "spec.progressDeadlineSeconds",
        "spec.revisionHistoryLimit",
    ];
    FIELDS.iter().any(|f| error.field.ends_with(f))
        || error.field == format!("metadata.annotations[{EFFECTIVE_CREATION_TIMEOUT_ANNOTATION}]")
}

/// Checks one optional duration field; `positive` also rejects zero.
fn check_duration(
    field: String,
    value: Option<&String>,
    positive: bool,
    errors: &mut Vec<FieldError>,
) {
    let Some(value) = value else {
        return;
    };
    match parse_duration(value) {
        Ok(duration) if positive && duration.is_zero() => errors.push(FieldError::invalid(
            field,
            value,
            "must be greater than zero (a zero timeout fails every machine at once, which then is replaced in a loop)",
        )),
        Ok(_) => {}
        Err(DurationError::Negative(_)) => {
            errors.push(FieldError::invalid(field, value, "must not be negative"))
        }
        Err(DurationError::Overflow(_)) => errors.push(FieldError::invalid(
            field,
            value,
            "is out of range (at most about 292 years)",
        )),
        Err(_) => errors.push(FieldError::invalid(
            field,
            value,
            "must be a duration such as \"20m\", \"1h30m\" or \"90s\"",
        )),
    }
}

fn check_non_negative(field: String, value: Option<i32>, errors: &mut Vec<FieldError>) {
    if let Some(value) = value.filter(|v| *v < 0) {
        errors.push(FieldError::invalid(field, value, "must not be negative"));
    }
}

/// The inline `MachineConfiguration` of a machine spec at `path` (`spec` for a Machine,
/// `spec.template.spec` for a template).
pub(super) fn validate_machine_configuration(
    configuration: &MachineConfiguration,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for (name, value, positive) in [
        ("creationTimeout", &configuration.creation_timeout, true),
        ("healthTimeout", &configuration.health_timeout, true),
        ("drainTimeout", &configuration.drain_timeout, false),
        (
            "inPlaceUpdateTimeout",
            &configuration.in_place_update_timeout,
            false,
        ),
        (
            "machinePreserveTimeout",
            &configuration.machine_preserve_timeout,
            false,
        ),
    ] {
        check_duration(format!("{path}.{name}"), value.as_ref(), positive, errors);
    }
    check_non_negative(
        format!("{path}.maxEvictRetries"),
        configuration.max_evict_retries,
        errors,
    );
}

/// The effective-creation-timeout annotation of an object, when present.
pub(super) fn validate_effective_creation_timeout(
    annotations: Option<&BTreeMap<String, String>>,
    errors: &mut Vec<FieldError>,
) {
    let value = annotations.and_then(|a| a.get(EFFECTIVE_CREATION_TIMEOUT_ANNOTATION));
    check_duration(
        format!("metadata.annotations[{EFFECTIVE_CREATION_TIMEOUT_ANNOTATION}]"),
        value,
        true,
        errors,
    );
}

/// A MachineDeployment's `minReadySeconds`, `progressDeadlineSeconds` and
/// `revisionHistoryLimit`.
pub(super) fn validate_deployment_periods(
    spec: &crate::machine_deployment::MachineDeploymentSpec,
    errors: &mut Vec<FieldError>,
) {
    check_non_negative(
        "spec.minReadySeconds".into(),
        Some(spec.min_ready_seconds),
        errors,
    );
    check_non_negative(
        "spec.progressDeadlineSeconds".into(),
        spec.progress_deadline_seconds,
        errors,
    );
    check_non_negative(
        "spec.revisionHistoryLimit".into(),
        spec.revision_history_limit,
        errors,
    );
}
