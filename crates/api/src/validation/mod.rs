//! Validation of the four kinds, as the reference controllers run it on every reconcile
//! (there is no admission webhook and no defaulting), plus int-or-string resolution.
//!
//! Rules (reference `pkg/apis/machine/validation`):
//! * Machine: `spec.class.kind` and `spec.class.name` are required.
//! * MachineSet: `replicas >= 0`; a selector is required (mcm-rs: the reference dereferences a
//!   nil selector and panics); every `selector.matchLabels` entry must equal the template label
//!   of the same key, and the whole selector (`matchExpressions` included) must select the
//!   template labels; template class kind and name are required.
//! * MachineSet and MachineDeployment (mcm-rs only): no selector (`matchLabels` or
//!   `matchExpressions`) and no template label uses a key the controllers write
//!   ([`crate::constants::CONTROLLER_OWNED_LABELS`]), except `machine-template-hash` in a
//!   MachineSet's template and, with the same value, in its `matchLabels`, as a
//!   MachineDeployment creates its sets (see [`validate_controller_owned_keys`]).
//! * MachineDeployment: as MachineSet, plus `strategy.type` must be one of InPlaceUpdate,
//!   Recreate, RollingUpdate; RollingUpdate needs `rollingUpdate`, InPlaceUpdate needs
//!   `inPlaceUpdate` (with `orchestrationType` Auto or Manual); their `maxSurge` and
//!   `maxUnavailable` must both be set and resolve to an int32 against `replicas`.
//! * Machine, MachineSet, MachineDeployment (mcm-rs only, see [`timeouts`]): the inline
//!   `MachineConfiguration` durations parse and are not negative, `creationTimeout` and
//!   `healthTimeout` are greater than zero, `maxEvictRetries` is not negative, and so is the
//!   `effective-creation-timeout` annotation; a MachineDeployment's `minReadySeconds`,
//!   `progressDeadlineSeconds` and `revisionHistoryLimit` are not negative.
//! * MachineClass (mcm-rs only; the reference has no class validation): `providerSpec` must be
//!   present and a JSON object. [`validate_node_template`] is the separate check the machine
//!   controller applies before reconciling a machine of a class (capacity cpu/gpu/memory,
//!   instanceType, region, zone).
//!
//! Deliberate differences from the reference, all stricter and documented here:
//! * a missing selector is an error instead of a panic;
//! * a selector that does not select its own template is rejected: the reference reads a
//!   template label missing for a `matchLabels` entry as `""` and never checks
//!   `matchExpressions`, so `matchLabels: {x: ""}` passed validation and then created Machines
//!   it immediately released, forever;
//! * a selector or template label on a key the controllers write (`node`,
//!   `machine-template-hash`, the in-place labels, `freeze`, `scale-up-disabled`) is
//!   rejected: the reference accepts `node: pool-a` in selector and template, and then
//!   releases and replaces every machine once the machine controller writes the real Node
//!   name into its `node` label, without bound;
//! * a negative `maxSurge` / `maxUnavailable` (integer or percentage) is rejected, as
//!   Kubernetes Deployments do; the reference accepts it and computes nonsense at runtime;
//! * malformed, negative or (for the creation and health timeouts) zero durations are
//!   rejected: the reference cannot decode the object at all, or with `creationTimeout: 0s`
//!   creates and deletes machines in a loop;
//! * a string fence-post must be a percentage (`"25%"`) both in validation and at runtime; the
//!   reference's runtime helper silently reads `"25"` as 25%.
//!
//! Error strings follow Kubernetes' `field.Error`: `<path>: Required value: <detail>` or
//! `<path>: Invalid value: "<value>": <detail>`.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::enums::{MachineDeploymentStrategyType, OrchestrationType};
use crate::machine::ClassSpec;
use crate::machine_deployment::{MachineDeploymentSpec, UpdateConfiguration};
use crate::{Machine, MachineClass, MachineDeployment, MachineSet};

mod timeouts;
pub use timeouts::is_timeout_error;
use timeouts::{
    validate_deployment_periods, validate_effective_creation_timeout,
    validate_machine_configuration,
};

/// The kind of a [`FieldError`] (a subset of Kubernetes' `field.ErrorType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldErrorType {
    /// A required value is missing (`Required value`).
    Required,
    /// A value is present but not acceptable (`Invalid value`).
    Invalid,
}

impl FieldErrorType {
    /// The Kubernetes wording: `Required value` / `Invalid value`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FieldErrorType::Required => "Required value",
            FieldErrorType::Invalid => "Invalid value",
        }
    }
}

impl fmt::Display for FieldErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validation failure: which field, what kind of problem, and a human readable detail.
///
/// Displays like Kubernetes' `field.Error`, e.g.
/// `spec.strategy.rollingUpdate.maxSurge: Required value: unable to convert maxSurge to int32`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {}", self.body())]
pub struct FieldError {
    /// Kind of problem.
    pub error_type: FieldErrorType,
    /// JSON path of the field, e.g. `spec.strategy.type`.
    pub field: String,
    /// The offending value, rendered as a quoted string for `Invalid` errors.
    pub bad_value: Option<String>,
    /// Human readable explanation.
    pub detail: String,
}

impl FieldError {
    /// A `Required value` error.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            error_type: FieldErrorType::Required,
            field: field.into(),
            bad_value: None,
            detail: detail.into(),
        }
    }

    /// An `Invalid value` error; `value` is shown quoted.
    pub fn invalid(
        field: impl Into<String>,
        value: impl fmt::Display,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            error_type: FieldErrorType::Invalid,
            field: field.into(),
            bad_value: Some(format!("{:?}", value.to_string())),
            detail: detail.into(),
        }
    }

    /// Everything after `<field>: `.
    fn body(&self) -> String {
        let mut body = self.error_type.as_str().to_owned();
        if let Some(value) = &self.bad_value {
            body.push_str(": ");
            body.push_str(value);
        }
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

/// All errors of one object as a single line, like Go's `ErrorList.ToAggregate()`:
/// `[a, b]` for several errors, the error itself for one, a repeated message
/// once. Generic over the error type, so providers with field errors of their
/// own (`mcm_driver::provider_spec::Join::Aggregate`) aggregate the same way.
pub fn aggregate<E: fmt::Display>(errors: &[E]) -> String {
    let mut texts: Vec<String> = Vec::with_capacity(errors.len());
    for text in errors.iter().map(ToString::to_string) {
        if !texts.contains(&text) {
            texts.push(text);
        }
    }
    match texts.as_slice() {
        [] => String::new(),
        [single] => single.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn into_result(errors: Vec<FieldError>) -> Result<(), Vec<FieldError>> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Validates a MachineClass: `providerSpec` must be present (not null) and a JSON object.
pub fn validate_machine_class(class: &MachineClass) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    match &class.provider_spec {
        serde_json::Value::Object(_) => {}
        serde_json::Value::Null => errors.push(FieldError::required(
            "providerSpec",
            "providerSpec is required",
        )),
        other => errors.push(FieldError::invalid(
            "providerSpec",
            json_type_name(other),
            "providerSpec must be a JSON object",
        )),
    }
    // Secrets are read only from the class's own (the control) namespace: a
    // reference into another namespace would let whoever writes MachineClasses
    // make the controller read, and put finalizers on, any Secret it can reach.
    let own = class.metadata.namespace.as_deref().unwrap_or_default();
    for (field, reference) in [
        ("secretRef", &class.secret_ref),
        ("credentialsSecretRef", &class.credentials_secret_ref),
    ] {
        let Some(ns) = reference.as_ref().and_then(|r| r.namespace.as_deref()) else {
            continue;
        };
        if !ns.is_empty() && ns != own {
            errors.push(FieldError::invalid(
                format!("{field}.namespace"),
                ns,
                format!("must be the MachineClass's own namespace {own:?}: Secrets in other namespaces are not read"),
            ));
        }
    }
    into_result(errors)
}

/// Validates the optional `nodeTemplate` of a MachineClass the way the machine controller
/// does before it reconciles a machine of that class: `capacity` must contain `cpu`, `gpu`
/// and `memory`, and `instanceType`, `region` and `zone` must not be empty. A class without
/// node template is fine.
pub fn validate_node_template(class: &MachineClass) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let Some(template) = class.node_template.as_ref() else {
        return Ok(());
    };
    for resource in ["cpu", "gpu", "memory"] {
        if !template.capacity.contains_key(resource) {
            errors.push(FieldError::required(
                format!("nodeTemplate.capacity.{resource}"),
                "MachineClass NodeTemplate Capacity should mandatorily have CPU, GPU and Memory configured",
            ));
        }
    }
    for (name, value) in [
        ("instanceType", &template.instance_type),
        ("region", &template.region),
        ("zone", &template.zone),
    ] {
        if value.is_empty() {
            errors.push(FieldError::required(
                format!("nodeTemplate.{name}"),
                "MachineClass NodeTemplate Instance Type, region and zone cannot be empty",
            ));
        }
    }
    into_result(errors)
}

fn json_type_name(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Validates a Machine: `spec.class.kind` and `spec.class.name` are required, and
/// [`validate_machine_timeouts`].
pub fn validate_machine(machine: &Machine) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    validate_class_reference(&machine.spec.class, "spec.class", &mut errors);
    errors.extend(validate_machine_timeouts(machine).err().unwrap_or_default());
    into_result(errors)
}

/// Validates a Machine's timeouts: the inline `MachineConfiguration` and the
/// effective-creation-timeout annotation (see [`timeouts`]).
pub fn validate_machine_timeouts(machine: &Machine) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    validate_machine_configuration(&machine.spec.configuration, "spec", &mut errors);
    validate_effective_creation_timeout(machine.metadata.annotations.as_ref(), &mut errors);
    into_result(errors)
}

/// What a MachineSet and a MachineDeployment share: a selector that selects
/// the template's labels, the template's class reference and machine
/// configuration, and the `effective-creation-timeout` annotation.
fn validate_selected_template(
    selector: Option<&LabelSelector>,
    template: &crate::machine::MachineTemplateSpec,
    annotations: Option<&BTreeMap<String, String>>,
    template_hash_allowed: bool,
    errors: &mut Vec<FieldError>,
) {
    validate_selector(selector, template.metadata.labels.as_ref(), errors);
    validate_controller_owned_keys(
        selector,
        template.metadata.labels.as_ref(),
        template_hash_allowed,
        errors,
    );
    validate_class_reference(&template.spec.class, "spec.template.spec.class", errors);
    validate_machine_configuration(&template.spec.configuration, "spec.template.spec", errors);
    validate_effective_creation_timeout(annotations, errors);
}

/// Validates a MachineSet: non-negative replicas, a selector matching the template labels,
/// and a template class reference.
pub fn validate_machine_set(set: &MachineSet) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = &set.spec;
    validate_replicas(spec.replicas, &mut errors);
    validate_selected_template(
        spec.selector.as_ref(),
        &spec.template,
        set.metadata.annotations.as_ref(),
        true,
        &mut errors,
    );
    if spec.min_ready_seconds < 0 {
        errors.push(FieldError::invalid(
            "spec.minReadySeconds",
            spec.min_ready_seconds,
            "must not be negative",
        ));
    }
    into_result(errors)
}

/// Validates a MachineDeployment: non-negative replicas, the update strategy and its
/// fence-posts, a selector matching the template labels, and a template class reference.
pub fn validate_machine_deployment(deployment: &MachineDeployment) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = &deployment.spec;
    validate_replicas(spec.replicas, &mut errors);
    validate_update_strategy(spec, &mut errors);
    validate_selected_template(
        spec.selector.as_ref(),
        &spec.template,
        deployment.metadata.annotations.as_ref(),
        false,
        &mut errors,
    );
    validate_deployment_periods(spec, &mut errors);
    into_result(errors)
}

fn validate_replicas(replicas: i32, errors: &mut Vec<FieldError>) {
    if replicas < 0 {
        errors.push(FieldError::required(
            "spec.replicas",
            "Replicas has to be a whole number",
        ));
    }
}

fn validate_class_reference(class: &ClassSpec, path: &str, errors: &mut Vec<FieldError>) {
    if class.kind.is_empty() {
        errors.push(FieldError::required(
            format!("{path}.kind"),
            "Kind is required",
        ));
    }
    if class.name.is_empty() {
        errors.push(FieldError::required(
            format!("{path}.name"),
            "Name is required",
        ));
    }
}

fn validate_selector(
    selector: Option<&LabelSelector>,
    template_labels: Option<&BTreeMap<String, String>>,
    errors: &mut Vec<FieldError>,
) {
    let Some(selector) = selector else {
        errors.push(FieldError::required(
            "spec.selector",
            "selector is required",
        ));
        return;
    };
    // The selector must select the template's own labels, evaluated exactly as
    // the controllers evaluate it at run time (a missing label never matches,
    // `matchExpressions` count too). Otherwise every Machine the set creates is
    // released at once and replaced on the next sync: runaway creation.
    let empty = BTreeMap::new();
    let labels = template_labels.unwrap_or(&empty);
    if let Err(e) = crate::selector::validate_selector(selector) {
        errors.push(FieldError::invalid(
            "spec.selector.matchExpressions",
            "",
            e.to_string(),
        ));
        return;
    }
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    if !labels_match {
        errors.push(FieldError::required(
            "spec.selector.matchLabels",
            "is not matching with spec.template.metadata.labels",
        ));
        return;
    }
    if !crate::selector::selector_matches(selector, labels).unwrap_or(false) {
        errors.push(FieldError::invalid(
            "spec.selector.matchExpressions",
            "",
            "`selector` does not match template `labels`",
        ));
    }
}

/// The detail of every error about a label key the controllers own (see
/// [`is_controller_label_error`]).
const CONTROLLER_LABEL_DETAIL: &str = "the controllers write this label key themselves: \
a selector or template label on it stops selecting the set's own objects once they do, and \
each would be released and replaced without bound";

/// Whether `error` is about a label key the controllers own
/// ([`crate::constants::CONTROLLER_OWNED_LABELS`]). Like a bad timeout, it does not keep an
/// object that is being deleted from being deleted: its controller keeps the objects it
/// created whatever such a label says (`mcm_core::replicas::selection`), so its deletion
/// still finds them.
pub fn is_controller_label_error(error: &FieldError) -> bool {
    error.detail == CONTROLLER_LABEL_DETAIL
}

/// Selectors (`matchLabels` and `matchExpressions`, every operator) and template labels must
/// not use a key the controllers write ([`crate::constants::CONTROLLER_OWNED_LABELS`]).
///
/// The one exception, `template_hash_allowed` (MachineSets): `machine-template-hash` in the
/// template labels and, with the same value, in `matchLabels`, as a MachineDeployment (ours
/// or the reference's) creates its sets. No controller falsifies that: the hash on a
/// machine changes only when an in-place update moves the machine to another set, in the
/// same write that makes the other set its controller. The set need not be controlled by a
/// deployment (one deleted with `--cascade=orphan` leaves such sets behind, and they keep
/// working). An expression on the hash is refused on a set too, and on a deployment any use
/// of the key (every set it creates carries the hash: a `DoesNotExist` or `NotIn` on it
/// would release each set it creates and create another, without bound).
fn validate_controller_owned_keys(
    selector: Option<&LabelSelector>,
    template_labels: Option<&BTreeMap<String, String>>,
    template_hash_allowed: bool,
    errors: &mut Vec<FieldError>,
) {
    use crate::constants::{is_controller_owned_label, TEMPLATE_HASH_LABEL};
    let hash = TEMPLATE_HASH_LABEL;
    let template_hash = template_labels.and_then(|l| l.get(hash));
    let refused =
        |field: String, key: &str| FieldError::invalid(field, key, CONTROLLER_LABEL_DETAIL);
    if let Some(selector) = selector {
        for (key, value) in selector.match_labels.iter().flatten() {
            let allowed = key == hash && template_hash_allowed && template_hash == Some(value);
            if is_controller_owned_label(key) && !allowed {
                errors.push(refused(format!("spec.selector.matchLabels[{key}]"), key));
            }
        }
        for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
            if is_controller_owned_label(&requirement.key) {
                errors.push(refused(
                    format!("spec.selector.matchExpressions[{i}].key"),
                    &requirement.key,
                ));
            }
        }
    }
    for key in template_labels.into_iter().flat_map(BTreeMap::keys) {
        let allowed = key == hash && template_hash_allowed;
        if is_controller_owned_label(key) && !allowed {
            errors.push(refused(
                format!("spec.template.metadata.labels[{key}]"),
                key,
            ));
        }
    }
}

fn validate_update_strategy(spec: &MachineDeploymentSpec, errors: &mut Vec<FieldError>) {
    let strategy = &spec.strategy;
    match &strategy.type_ {
        MachineDeploymentStrategyType::RollingUpdate => match &strategy.rolling_update {
            None => errors.push(FieldError::required(
                "spec.strategy.rollingUpdate",
                "RollingUpdate parameter cannot be nil for rolling update strategy",
            )),
            Some(config) => validate_update_configuration(
                config,
                spec.replicas,
                "spec.strategy.rollingUpdate",
                errors,
            ),
        },
        MachineDeploymentStrategyType::InPlaceUpdate => match &strategy.in_place_update {
            None => errors.push(FieldError::required(
                "spec.strategy.inPlaceUpdate",
                "InPlaceUpdate parameter cannot be nil for in-place update strategy",
            )),
            Some(in_place) => {
                validate_update_configuration(
                    &in_place.update_configuration,
                    spec.replicas,
                    "spec.strategy.inPlaceUpdate",
                    errors,
                );
                if !matches!(
                    in_place.orchestration_type,
                    OrchestrationType::Auto | OrchestrationType::Manual
                ) {
                    errors.push(FieldError::invalid(
                        "spec.strategy.inPlaceUpdate.orchestrationType",
                        &in_place.orchestration_type,
                        "orchestrationType must be either Auto or Manual",
                    ));
                }
            }
        },
        MachineDeploymentStrategyType::Recreate => {}
        other => errors.push(FieldError::invalid(
            "spec.strategy.type",
            other,
            "strategy type must be one of [InPlaceUpdate Recreate RollingUpdate]",
        )),
    }
}

fn validate_update_configuration(
    config: &UpdateConfiguration,
    replicas: i32,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for (name, value, round_up) in [
        ("maxUnavailable", config.max_unavailable.as_ref(), false),
        ("maxSurge", config.max_surge.as_ref(), true),
    ] {
        match scaled_value_from_int_or_percent(value, replicas, round_up) {
            Ok(_) => {}
            Err(IntOrStringError::Missing) => errors.push(FieldError::required(
                format!("{path}.{name}"),
                format!("unable to convert {name} to int32"),
            )),
            Err(error) => errors.push(FieldError::invalid(
                format!("{path}.{name}"),
                int_or_string_display(value),
                format!("unable to convert {name} to int32: {error}"),
            )),
        }
    }
}

fn int_or_string_display(value: Option<&IntOrString>) -> String {
    match value {
        Some(IntOrString::Int(number)) => number.to_string(),
        Some(IntOrString::String(text)) => text.clone(),
        None => String::new(),
    }
}

/// Why an int-or-string fence-post could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IntOrStringError {
    /// The value is not set.
    #[error("nil value for IntOrString")]
    Missing,
    /// A string that is not `<integer>%`.
    #[error("invalid value {0:?}: must be an integer or a percentage such as \"25%\"")]
    NotAPercentage(String),
    /// A negative integer or percentage.
    #[error("invalid value {0:?}: must not be negative")]
    Negative(String),
    /// The resolved value does not fit into an int32.
    #[error("value {0:?} is out of the int32 range")]
    OutOfRange(String),
}

/// Resolves an int-or-string against `total`: an integer is taken as is, `"<n>%"` is
/// `n * total / 100` rounded up (`round_up`) or down. Strings must end in `%`; negative
/// values and values outside the int32 range are rejected; `None` is
/// [`IntOrStringError::Missing`].
pub fn scaled_value_from_int_or_percent(
    value: Option<&IntOrString>,
    total: i32,
    round_up: bool,
) -> Result<i32, IntOrStringError> {
    let value = value.ok_or(IntOrStringError::Missing)?;
    let resolved: i64 = match value {
        IntOrString::Int(number) => {
            if *number < 0 {
                return Err(IntOrStringError::Negative(number.to_string()));
            }
            i64::from(*number)
        }
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .and_then(|digits| digits.parse().ok())
                .ok_or_else(|| IntOrStringError::NotAPercentage(text.clone()))?;
            if percent < 0 {
                return Err(IntOrStringError::Negative(text.clone()));
            }
            let total = i64::from(total.max(0));
            let product = percent
                .checked_mul(total)
                .ok_or_else(|| IntOrStringError::OutOfRange(text.clone()))?;
            // Both factors are non-negative here.
            if round_up {
                (product / 100) + i64::from(product % 100 != 0)
            } else {
                product / 100
            }
        }
    };
    i32::try_from(resolved)
        .map_err(|_| IntOrStringError::OutOfRange(int_or_string_display(Some(value))))
}

/// Resolves `maxSurge` (rounded up) and `maxUnavailable` (rounded down) against the desired
/// replicas, returning `(surge, unavailable)`. When both resolve to 0, unavailable becomes 1
/// so that a rollout can always progress (like the reference's `ResolveFenceposts`).
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), IntOrStringError> {
    let surge = scaled_value_from_int_or_percent(max_surge, desired, true)?;
    let unavailable = scaled_value_from_int_or_percent(max_unavailable, desired, false)?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_timeouts;
