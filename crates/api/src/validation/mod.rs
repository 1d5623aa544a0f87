//! Validation of the four kinds, as the reference controllers run it on every reconcile
//! (there is no admission webhook and no defaulting), plus int-or-string resolution.
//!
//! Rules (reference `pkg/apis/machine/validation`):
//! * Machine: `spec.class.kind` and `spec.class.name` are required.
//! * MachineSet: `replicas >= 0`; a selector is required (mcm-rs: the reference dereferences a
//!   nil selector and panics); every `selector.matchLabels` entry must equal the template label
//!   of the same key, and the whole selector (`matchExpressions` included) must select the
//!   template labels; template class kind and name are required.
//! * MachineDeployment: as MachineSet, plus `strategy.type` must be one of InPlaceUpdate,
//!   Recreate, RollingUpdate; RollingUpdate needs `rollingUpdate`, InPlaceUpdate needs
//!   `inPlaceUpdate` (with `orchestrationType` Auto or Manual); their `maxSurge` and
//!   `maxUnavailable` must both be set and resolve to an int32 against `replicas`.
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
//! * a negative `maxSurge` / `maxUnavailable` (integer or percentage) is rejected, as
//!   Kubernetes Deployments do; the reference accepts it and computes nonsense at runtime;
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
/// `[a, b]` for several errors, the error itself for one.
pub fn aggregate(errors: &[FieldError]) -> String {
    match errors {
        [] => String::new(),
        [single] => single.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
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

/// Validates a Machine: `spec.class.kind` and `spec.class.name` are required.
pub fn validate_machine(machine: &Machine) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    validate_class_reference(&machine.spec.class, "spec.class", &mut errors);
    into_result(errors)
}

/// Validates a MachineSet: non-negative replicas, a selector matching the template labels,
/// and a template class reference.
pub fn validate_machine_set(set: &MachineSet) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = &set.spec;
    validate_replicas(spec.replicas, &mut errors);
    validate_selector(
        spec.selector.as_ref(),
        spec.template.metadata.labels.as_ref(),
        &mut errors,
    );
    validate_class_reference(
        &spec.template.spec.class,
        "spec.template.spec.class",
        &mut errors,
    );
    into_result(errors)
}

/// Validates a MachineDeployment: non-negative replicas, the update strategy and its
/// fence-posts, a selector matching the template labels, and a template class reference.
pub fn validate_machine_deployment(deployment: &MachineDeployment) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = &deployment.spec;
    validate_replicas(spec.replicas, &mut errors);
    validate_update_strategy(spec, &mut errors);
    validate_selector(
        spec.selector.as_ref(),
        spec.template.metadata.labels.as_ref(),
        &mut errors,
    );
    validate_class_reference(
        &spec.template.spec.class,
        "spec.template.spec.class",
        &mut errors,
    );
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
mod tests {
    use super::*;
    use crate::machine::{MachineSpec, MachineTemplateSpec};
    use crate::machine_deployment::{InPlaceUpdateMachineDeployment, MachineDeploymentStrategy};
    use crate::MachineSetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn template(pairs: &[(&str, &str)]) -> MachineTemplateSpec {
        MachineTemplateSpec {
            metadata: ObjectMeta {
                labels: Some(labels(pairs)),
                ..ObjectMeta::default()
            },
            spec: MachineSpec {
                class: ClassSpec {
                    kind: "MachineClass".into(),
                    name: "class".into(),
                    ..ClassSpec::default()
                },
                ..MachineSpec::default()
            },
        }
    }

    fn selector(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some(labels(pairs)),
            ..LabelSelector::default()
        })
    }

    fn int(value: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(value))
    }

    fn string(value: &str) -> Option<IntOrString> {
        Some(IntOrString::String(value.into()))
    }

    fn valid_deployment() -> MachineDeployment {
        MachineDeployment::new(
            "md",
            MachineDeploymentSpec {
                replicas: 3,
                selector: selector(&[("app", "a")]),
                template: template(&[("app", "a"), ("extra", "x")]),
                strategy: MachineDeploymentStrategy {
                    type_: MachineDeploymentStrategyType::RollingUpdate,
                    rolling_update: Some(UpdateConfiguration {
                        max_surge: int(1),
                        max_unavailable: int(0),
                    }),
                    in_place_update: None,
                },
                ..MachineDeploymentSpec::default()
            },
        )
    }

    fn valid_set() -> MachineSet {
        MachineSet::new(
            "ms",
            MachineSetSpec {
                replicas: 2,
                selector: selector(&[("app", "a")]),
                template: template(&[("app", "a")]),
                ..MachineSetSpec::default()
            },
        )
    }

    fn fields(result: Result<(), Vec<FieldError>>) -> Vec<String> {
        result
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|error| error.field)
            .collect()
    }

    #[test]
    fn field_error_display_matches_kubernetes() {
        let required = FieldError::required(
            "spec.strategy.rollingUpdate.maxSurge",
            "unable to convert maxSurge to int32",
        );
        assert_eq!(
            required.to_string(),
            "spec.strategy.rollingUpdate.maxSurge: Required value: unable to convert maxSurge to int32"
        );
        let invalid = FieldError::invalid("spec.strategy.type", "Foo", "bad");
        assert_eq!(
            invalid.to_string(),
            "spec.strategy.type: Invalid value: \"Foo\": bad"
        );
        assert_eq!(aggregate(&[]), "");
        assert_eq!(
            aggregate(std::slice::from_ref(&invalid)),
            invalid.to_string()
        );
        assert_eq!(
            aggregate(&[required.clone(), invalid.clone()]),
            format!("[{required}, {invalid}]")
        );
    }

    // ---- Machine -------------------------------------------------------------------------

    #[test]
    fn machine_requires_class_kind_and_name() {
        let mut machine = Machine::new("m", template(&[]).spec);
        assert_eq!(validate_machine(&machine), Ok(()));
        machine.spec.class = ClassSpec::default();
        let errors = validate_machine(&machine).unwrap_err();
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "spec.class.kind: Required value: Kind is required",
                "spec.class.name: Required value: Name is required"
            ]
        );
    }

    // ---- MachineClass --------------------------------------------------------------------

    #[test]
    fn machine_class_requires_object_provider_spec() {
        let class = MachineClass::new("c", json!({"image": "x"}));
        assert_eq!(validate_machine_class(&class), Ok(()));
        let empty_object = MachineClass::new("c", json!({}));
        assert_eq!(validate_machine_class(&empty_object), Ok(()));

        let missing = MachineClass::new("c", serde_json::Value::Null);
        let errors = validate_machine_class(&missing).unwrap_err();
        assert_eq!(errors[0].error_type, FieldErrorType::Required);
        assert_eq!(errors[0].field, "providerSpec");

        for value in [json!("text"), json!([1]), json!(3), json!(true)] {
            let errors = validate_machine_class(&MachineClass::new("c", value)).unwrap_err();
            assert_eq!(errors[0].error_type, FieldErrorType::Invalid);
            assert!(errors[0]
                .to_string()
                .starts_with("providerSpec: Invalid value:"));
        }
    }

    #[test]
    fn machine_class_without_provider_spec_parses_and_is_rejected() {
        let class: MachineClass = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": "c"},
            "provider": "local"
        }))
        .unwrap();
        assert!(validate_machine_class(&class).is_err());
    }

    #[test]
    fn node_template_requires_capacity_keys_and_placement() {
        use crate::NodeTemplate;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

        let mut class = MachineClass::new("c", json!({}));
        assert_eq!(
            validate_node_template(&class),
            Ok(()),
            "no node template is fine"
        );

        let capacity = ["cpu", "gpu", "memory"]
            .into_iter()
            .map(|key| (key.to_owned(), Quantity("1".into())))
            .collect();
        class.node_template = Some(NodeTemplate {
            capacity,
            instance_type: "small".into(),
            region: "local".into(),
            zone: "local-a".into(),
            ..NodeTemplate::default()
        });
        assert_eq!(validate_node_template(&class), Ok(()));

        if let Some(template) = class.node_template.as_mut() {
            template.capacity.remove("gpu");
            template.zone.clear();
        }
        let errors = validate_node_template(&class).unwrap_err();
        assert_eq!(
            errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            ["nodeTemplate.capacity.gpu", "nodeTemplate.zone"]
        );
        assert!(errors[0].to_string().contains("CPU, GPU and Memory"));
    }

    // ---- MachineSet ----------------------------------------------------------------------

    #[test]
    fn machine_set_valid() {
        assert_eq!(validate_machine_set(&valid_set()), Ok(()));
    }

    #[test]
    fn machine_set_rejects_negative_replicas() {
        let mut set = valid_set();
        set.spec.replicas = -1;
        let errors = validate_machine_set(&set).unwrap_err();
        assert_eq!(
            errors[0].to_string(),
            "spec.replicas: Required value: Replicas has to be a whole number"
        );
    }

    #[test]
    fn machine_set_rejects_missing_selector() {
        let mut set = valid_set();
        set.spec.selector = None;
        assert_eq!(fields(validate_machine_set(&set)), ["spec.selector"]);
    }

    #[test]
    fn machine_set_rejects_selector_not_matching_template() {
        let mut set = valid_set();
        set.spec.selector = selector(&[("app", "b")]);
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchLabels"]
        );
        set.spec.selector = selector(&[("other", "a")]);
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchLabels"]
        );
        set.spec.template.metadata.labels = None;
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchLabels"]
        );
        // Only one error even with several mismatching keys.
        set.spec.selector = selector(&[("a", "1"), ("b", "2")]);
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchLabels"]
        );
    }

    #[test]
    fn machine_set_accepts_empty_selector_and_expressions_only() {
        let mut set = valid_set();
        set.spec.selector = Some(LabelSelector::default());
        assert_eq!(validate_machine_set(&set), Ok(()));
    }

    #[test]
    fn machine_set_rejects_empty_string_selector_value_for_a_missing_template_label() {
        // The runaway-creation case: `x: ""` must not match a template without `x`.
        let mut set = valid_set();
        set.spec.selector = selector(&[("app", "a"), ("x", "")]);
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchLabels"]
        );
    }

    #[test]
    fn machine_set_rejects_match_expressions_that_do_not_select_the_template() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let mut set = valid_set();
        let mut sel = selector(&[("app", "a")]).unwrap_or_default();
        sel.match_expressions = Some(vec![req("tier", "In", &["web"])]);
        set.spec.selector = Some(sel.clone());
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchExpressions"]
        );
        sel.match_expressions = Some(vec![req("app", "NotIn", &["a"])]);
        set.spec.selector = Some(sel.clone());
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchExpressions"]
        );
        sel.match_expressions = Some(vec![req("app", "Near", &[])]);
        set.spec.selector = Some(sel.clone());
        assert_eq!(
            fields(validate_machine_set(&set)),
            ["spec.selector.matchExpressions"]
        );
        // An expression that does select the template is fine.
        sel.match_expressions = Some(vec![req("app", "In", &["a", "b"])]);
        set.spec.selector = Some(sel);
        assert_eq!(validate_machine_set(&set), Ok(()));
    }

    #[test]
    fn machine_deployment_rejects_a_selector_that_does_not_select_its_template() {
        let mut deployment = valid_deployment();
        let mut sel = deployment.spec.selector.clone().unwrap_or_default();
        sel.match_labels
            .get_or_insert_with(Default::default)
            .insert("x".into(), String::new());
        deployment.spec.selector = Some(sel);
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            ["spec.selector.matchLabels"]
        );
    }

    #[test]
    fn machine_set_requires_template_class() {
        let mut set = valid_set();
        set.spec.template.spec.class = ClassSpec::default();
        assert_eq!(
            fields(validate_machine_set(&set)),
            [
                "spec.template.spec.class.kind",
                "spec.template.spec.class.name"
            ]
        );
    }

    #[test]
    fn machine_class_refuses_secret_references_into_other_namespaces() {
        let class: MachineClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "c", "namespace": "shoot--a"},
            "providerSpec": {},
            "secretRef": {"name": "s", "namespace": "shoot--a"},
            "credentialsSecretRef": {"name": "token", "namespace": "kube-system"}
        }))
        .unwrap_or_default();
        assert_eq!(
            fields(validate_machine_class(&class)),
            ["credentialsSecretRef.namespace"]
        );
        let mut same = class.clone();
        if let Some(r) = same.credentials_secret_ref.as_mut() {
            r.namespace = None;
        }
        assert_eq!(validate_machine_class(&same), Ok(()));
    }

    // ---- MachineDeployment ---------------------------------------------------------------

    #[test]
    fn machine_deployment_valid() {
        assert_eq!(validate_machine_deployment(&valid_deployment()), Ok(()));
        let mut recreate = valid_deployment();
        recreate.spec.strategy = MachineDeploymentStrategy {
            type_: MachineDeploymentStrategyType::Recreate,
            ..MachineDeploymentStrategy::default()
        };
        assert_eq!(validate_machine_deployment(&recreate), Ok(()));
    }

    #[test]
    fn machine_deployment_rejects_negative_replicas() {
        let mut deployment = valid_deployment();
        deployment.spec.replicas = -3;
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            ["spec.replicas"]
        );
    }

    #[test]
    fn machine_deployment_rejects_unknown_or_missing_strategy_type() {
        for type_ in ["", "Foo", "rollingupdate"] {
            let mut deployment = valid_deployment();
            deployment.spec.strategy.type_ = type_.into();
            let errors = validate_machine_deployment(&deployment).unwrap_err();
            assert_eq!(errors.len(), 1);
            assert_eq!(
                errors[0].to_string(),
                format!(
                    "spec.strategy.type: Invalid value: {type_:?}: strategy type must be one of [InPlaceUpdate Recreate RollingUpdate]"
                )
            );
        }
    }

    #[test]
    fn machine_deployment_rolling_update_requires_parameters() {
        let mut deployment = valid_deployment();
        deployment.spec.strategy.rolling_update = None;
        let errors = validate_machine_deployment(&deployment).unwrap_err();
        assert_eq!(
            errors[0].to_string(),
            "spec.strategy.rollingUpdate: Required value: RollingUpdate parameter cannot be nil for rolling update strategy"
        );
    }

    #[test]
    fn machine_deployment_rolling_update_requires_both_fenceposts() {
        let mut deployment = valid_deployment();
        deployment.spec.strategy.rolling_update = Some(UpdateConfiguration {
            max_surge: None,
            max_unavailable: int(1),
        });
        let errors = validate_machine_deployment(&deployment).unwrap_err();
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["spec.strategy.rollingUpdate.maxSurge: Required value: unable to convert maxSurge to int32"]
        );

        deployment.spec.strategy.rolling_update = Some(UpdateConfiguration::default());
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            [
                "spec.strategy.rollingUpdate.maxUnavailable",
                "spec.strategy.rollingUpdate.maxSurge"
            ]
        );
    }

    #[test]
    fn machine_deployment_rejects_bad_fencepost_values() {
        for bad in [
            string("25"),
            string("abc"),
            string("%"),
            int(-1),
            string("-5%"),
        ] {
            let mut deployment = valid_deployment();
            deployment.spec.strategy.rolling_update = Some(UpdateConfiguration {
                max_surge: bad.clone(),
                max_unavailable: int(0),
            });
            let errors = validate_machine_deployment(&deployment).unwrap_err();
            assert_eq!(errors.len(), 1, "{bad:?}");
            assert_eq!(errors[0].field, "spec.strategy.rollingUpdate.maxSurge");
            assert_eq!(errors[0].error_type, FieldErrorType::Invalid);
        }
        // Percentages and zero for both are accepted (zero/zero is fixed up at runtime).
        let mut deployment = valid_deployment();
        deployment.spec.strategy.rolling_update = Some(UpdateConfiguration {
            max_surge: string("25%"),
            max_unavailable: int(0),
        });
        assert_eq!(validate_machine_deployment(&deployment), Ok(()));
        deployment.spec.strategy.rolling_update = Some(UpdateConfiguration {
            max_surge: int(0),
            max_unavailable: int(0),
        });
        assert_eq!(validate_machine_deployment(&deployment), Ok(()));
    }

    #[test]
    fn machine_deployment_rejects_fencepost_out_of_int32_range() {
        let mut deployment = valid_deployment();
        deployment.spec.replicas = i32::MAX;
        deployment.spec.strategy.rolling_update = Some(UpdateConfiguration {
            max_surge: string("200%"),
            max_unavailable: int(0),
        });
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            ["spec.strategy.rollingUpdate.maxSurge"]
        );
    }

    #[test]
    fn machine_deployment_in_place_update_rules() {
        let mut deployment = valid_deployment();
        deployment.spec.strategy = MachineDeploymentStrategy {
            type_: MachineDeploymentStrategyType::InPlaceUpdate,
            rolling_update: None,
            in_place_update: None,
        };
        let errors = validate_machine_deployment(&deployment).unwrap_err();
        assert_eq!(
            errors[0].to_string(),
            "spec.strategy.inPlaceUpdate: Required value: InPlaceUpdate parameter cannot be nil for in-place update strategy"
        );

        deployment.spec.strategy.in_place_update = Some(InPlaceUpdateMachineDeployment {
            update_configuration: UpdateConfiguration {
                max_surge: int(1),
                max_unavailable: int(0),
            },
            orchestration_type: OrchestrationType::Auto,
        });
        assert_eq!(validate_machine_deployment(&deployment), Ok(()));
        if let Some(in_place) = deployment.spec.strategy.in_place_update.as_mut() {
            in_place.orchestration_type = OrchestrationType::Manual;
        }
        assert_eq!(validate_machine_deployment(&deployment), Ok(()));

        for orchestration in ["", "auto", "Other"] {
            if let Some(in_place) = deployment.spec.strategy.in_place_update.as_mut() {
                in_place.orchestration_type = orchestration.into();
            }
            let errors = validate_machine_deployment(&deployment).unwrap_err();
            assert_eq!(
                errors[0].to_string(),
                format!("spec.strategy.inPlaceUpdate.orchestrationType: Invalid value: {orchestration:?}: orchestrationType must be either Auto or Manual")
            );
        }

        if let Some(in_place) = deployment.spec.strategy.in_place_update.as_mut() {
            in_place.orchestration_type = OrchestrationType::Auto;
            in_place.update_configuration.max_surge = None;
        }
        let errors = validate_machine_deployment(&deployment).unwrap_err();
        assert_eq!(
            errors[0].to_string(),
            "spec.strategy.inPlaceUpdate.maxSurge: Required value: unable to convert maxSurge to int32"
        );
    }

    #[test]
    fn machine_deployment_selector_and_class_rules() {
        let mut deployment = valid_deployment();
        deployment.spec.selector = None;
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            ["spec.selector"]
        );

        let mut deployment = valid_deployment();
        deployment.spec.selector = selector(&[("app", "other")]);
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            ["spec.selector.matchLabels"]
        );

        let mut deployment = valid_deployment();
        deployment.spec.template.spec.class.name.clear();
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            ["spec.template.spec.class.name"]
        );
    }

    #[test]
    fn machine_deployment_collects_all_errors() {
        let mut deployment = valid_deployment();
        deployment.spec.replicas = -1;
        deployment.spec.strategy.type_ = "Foo".into();
        deployment.spec.selector = None;
        deployment.spec.template = MachineTemplateSpec::default();
        assert_eq!(
            fields(validate_machine_deployment(&deployment)),
            [
                "spec.replicas",
                "spec.strategy.type",
                "spec.selector",
                "spec.template.spec.class.kind",
                "spec.template.spec.class.name"
            ]
        );
    }

    // ---- int-or-string -------------------------------------------------------------------

    #[test]
    fn scaled_values() {
        assert_eq!(
            scaled_value_from_int_or_percent(int(5).as_ref(), 10, true),
            Ok(5)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("25%").as_ref(), 10, true),
            Ok(3)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("25%").as_ref(), 10, false),
            Ok(2)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("100%").as_ref(), 7, false),
            Ok(7)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("+10%").as_ref(), 10, false),
            Ok(1)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("0%").as_ref(), 10, true),
            Ok(0)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("50%").as_ref(), 0, true),
            Ok(0)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(None, 10, true),
            Err(IntOrStringError::Missing)
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("25").as_ref(), 10, true),
            Err(IntOrStringError::NotAPercentage("25".into()))
        );
        assert_eq!(
            scaled_value_from_int_or_percent(string("2.5%").as_ref(), 10, true),
            Err(IntOrStringError::NotAPercentage("2.5%".into()))
        );
        assert_eq!(
            scaled_value_from_int_or_percent(int(-1).as_ref(), 10, true),
            Err(IntOrStringError::Negative("-1".into()))
        );
        assert!(matches!(
            scaled_value_from_int_or_percent(string("99999999999999999999%").as_ref(), 10, true),
            Err(IntOrStringError::NotAPercentage(_))
        ));
        assert!(matches!(
            scaled_value_from_int_or_percent(string("1000%").as_ref(), i32::MAX, true),
            Err(IntOrStringError::OutOfRange(_))
        ));
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        // The reference's documented examples.
        assert_eq!(
            resolve_fenceposts(string("0%").as_ref(), string("1%").as_ref(), 2),
            Ok((0, 1))
        );
        assert_eq!(
            resolve_fenceposts(string("1%").as_ref(), string("25%").as_ref(), 2),
            Ok((1, 0))
        );
        assert_eq!(
            resolve_fenceposts(string("1%").as_ref(), string("0%").as_ref(), 1),
            Ok((1, 0))
        );
        assert_eq!(
            resolve_fenceposts(string("30%").as_ref(), string("30%").as_ref(), 10),
            Ok((3, 3))
        );
        assert_eq!(
            resolve_fenceposts(string("25%").as_ref(), string("25%").as_ref(), 3),
            Ok((1, 0))
        );
        assert_eq!(
            resolve_fenceposts(int(1).as_ref(), int(0).as_ref(), 3),
            Ok((1, 0))
        );
        assert_eq!(
            resolve_fenceposts(int(2).as_ref(), int(3).as_ref(), 3),
            Ok((2, 3))
        );
    }

    #[test]
    fn fenceposts_both_zero_forces_one_unavailable() {
        assert_eq!(
            resolve_fenceposts(int(0).as_ref(), int(0).as_ref(), 5),
            Ok((0, 1))
        );
        assert_eq!(
            resolve_fenceposts(string("0%").as_ref(), string("10%").as_ref(), 5),
            Ok((0, 1))
        );
    }

    #[test]
    fn fenceposts_errors() {
        assert_eq!(
            resolve_fenceposts(None, int(1).as_ref(), 3),
            Err(IntOrStringError::Missing)
        );
        assert_eq!(
            resolve_fenceposts(int(1).as_ref(), None, 3),
            Err(IntOrStringError::Missing)
        );
        assert_eq!(
            resolve_fenceposts(string("1").as_ref(), int(1).as_ref(), 3),
            Err(IntOrStringError::NotAPercentage("1".into()))
        );
    }
}
