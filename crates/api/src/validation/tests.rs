//! Tests of the validation rules.

use super::*;
use crate::machine::{MachineSpec, MachineTemplateSpec};
use crate::machine_deployment::{InPlaceUpdateMachineDeployment, MachineDeploymentStrategy};
use crate::MachineSetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
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

pub(super) fn valid_deployment() -> MachineDeployment {
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

pub(super) fn valid_set() -> MachineSet {
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

pub(super) fn fields(result: Result<(), Vec<FieldError>>) -> Vec<String> {
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
    assert_eq!(aggregate::<FieldError>(&[]), "");
    assert_eq!(
        aggregate(std::slice::from_ref(&invalid)),
        invalid.to_string()
    );
    assert_eq!(
        aggregate(&[required.clone(), invalid.clone()]),
        format!("[{required}, {invalid}]")
    );
    assert_eq!(
        aggregate(&[invalid.clone(), required.clone(), invalid.clone()]),
        format!("[{invalid}, {required}]"),
        "a repeated message once, as ToAggregate"
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

// ---- Label keys the controllers own (finding 1) ----------------------------------------

fn requirement(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn controller_label_errors(result: Result<(), Vec<FieldError>>) -> Vec<String> {
    result
        .err()
        .unwrap_or_default()
        .into_iter()
        .filter(is_controller_label_error)
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn a_machine_set_selecting_on_the_node_label_is_invalid_and_names_the_key() {
    // The runaway: `node: pool-a` in selector and template; the machine
    // controller writes the real Node name into `node` after CreateMachine.
    let mut set = valid_set();
    set.spec.selector = selector(&[("app", "a"), ("node", "pool-a")]);
    set.spec.template = template(&[("app", "a"), ("node", "pool-a")]);
    let errors = controller_label_errors(validate_machine_set(&set));
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("spec.selector.matchLabels[node]: Invalid value: \"node\": the controllers write this label key"), "{errors:?}");
    assert!(
        errors[1].starts_with("spec.template.metadata.labels[node]: Invalid value: \"node\""),
        "{errors:?}"
    );
}

#[test]
fn every_controller_owned_key_is_refused_in_match_labels_every_operator_and_the_template() {
    for key in crate::constants::CONTROLLER_OWNED_LABELS {
        // matchLabels (and the template label it needs).
        let mut set = valid_set();
        set.spec.selector = selector(&[("app", "a"), (key, "v")]);
        set.spec.template = template(&[("app", "a"), (key, "v")]);
        // (A set may carry the hash as its deployment gives it, equal in both.)
        let want = if key == crate::constants::TEMPLATE_HASH_LABEL {
            0
        } else {
            2
        };
        assert_eq!(
            controller_label_errors(validate_machine_set(&set)).len(),
            want,
            "{key}"
        );
        let mut d = valid_deployment();
        d.spec.selector = set.spec.selector.clone();
        d.spec.template = template(&[("app", "a"), (key, "v")]);
        assert_eq!(
            controller_label_errors(validate_machine_deployment(&d)).len(),
            2,
            "{key}"
        );
        // Every operator of matchExpressions, whether or not it selects the template.
        for (op, values) in [
            ("In", &["v"][..]),
            ("NotIn", &["w"][..]),
            ("Exists", &[][..]),
            ("DoesNotExist", &[][..]),
        ] {
            let mut sel = selector(&[("app", "a")]).unwrap_or_default();
            sel.match_expressions = Some(vec![requirement(key, op, values)]);
            let mut set = valid_set();
            set.spec.selector = Some(sel.clone());
            let errors = controller_label_errors(validate_machine_set(&set));
            assert_eq!(errors.len(), 1, "{key} {op}: {errors:?}");
            assert!(
                errors[0].starts_with(&format!(
                    "spec.selector.matchExpressions[0].key: Invalid value: {key:?}"
                )),
                "{errors:?}"
            );
            let mut d = valid_deployment();
            d.spec.selector = Some(sel);
            assert_eq!(
                controller_label_errors(validate_machine_deployment(&d)).len(),
                1,
                "{key} {op}"
            );
        }
        // The template alone.
        let mut d = valid_deployment();
        d.spec.template = template(&[("app", "a"), (key, "v")]);
        assert_eq!(
            controller_label_errors(validate_machine_deployment(&d)).len(),
            1,
            "{key}"
        );
    }
}

#[test]
fn a_deployment_with_does_not_exist_on_the_template_hash_is_invalid() {
    let mut d = valid_deployment();
    let mut sel = selector(&[("app", "a")]).unwrap_or_default();
    sel.match_expressions = Some(vec![requirement(
        "machine-template-hash",
        "DoesNotExist",
        &[],
    )]);
    d.spec.selector = Some(sel);
    // It selects its own template (which has no hash), so only the new rule refuses it.
    let errors = validate_machine_deployment(&d).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(is_controller_label_error(&errors[0]));
    assert_eq!(errors[0].field, "spec.selector.matchExpressions[0].key");
}

#[test]
fn a_machine_set_a_deployment_created_keeps_its_template_hash() {
    // What a MachineDeployment creates: hash in selector and template, equal
    // (also once the deployment is gone, e.g. deleted with --cascade=orphan).
    let mut set = valid_set();
    set.spec.selector = selector(&[("app", "a"), ("machine-template-hash", "123")]);
    set.spec.template = template(&[("app", "a"), ("machine-template-hash", "123")]);
    assert_eq!(validate_machine_set(&set), Ok(()));
    // The hash only in the template (no selector on it) is fine too.
    set.spec.selector = selector(&[("app", "a")]);
    assert_eq!(validate_machine_set(&set), Ok(()));
    // A selector value other than the template's is refused (and does not select it).
    set.spec.selector = selector(&[("app", "a"), ("machine-template-hash", "9")]);
    assert_eq!(controller_label_errors(validate_machine_set(&set)).len(), 1);
    // An expression on it, or another controller-owned key, is refused.
    let mut sel = selector(&[("app", "a"), ("machine-template-hash", "123")]).unwrap_or_default();
    sel.match_expressions = Some(vec![requirement("machine-template-hash", "NotIn", &["9"])]);
    set.spec.selector = Some(sel);
    assert_eq!(controller_label_errors(validate_machine_set(&set)).len(), 1);
    set.spec.selector = selector(&[
        ("app", "a"),
        ("machine-template-hash", "123"),
        ("node", "n"),
    ]);
    set.spec.template = template(&[
        ("app", "a"),
        ("machine-template-hash", "123"),
        ("node", "n"),
    ]);
    assert_eq!(controller_label_errors(validate_machine_set(&set)).len(), 2);
}

#[test]
fn controller_owned_key_errors_are_told_apart_from_selector_mismatches() {
    let mut set = valid_set();
    set.spec.selector = selector(&[("app", "b")]);
    let errors = validate_machine_set(&set).unwrap_err();
    assert!(!errors.iter().any(is_controller_label_error));
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
