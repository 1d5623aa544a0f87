//! Tests of the timeout rules ([`super::timeouts`]) and of the fence-post edge values.

use super::tests::{fields, valid_deployment, valid_set};
use super::*;
use crate::constants::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION;
use crate::machine::MachineSpec;

fn machine_with(configure: impl FnOnce(&mut crate::machine::MachineConfiguration)) -> Machine {
    let mut machine = Machine::new(
        "m",
        MachineSpec {
            class: ClassSpec {
                kind: "MachineClass".into(),
                name: "class".into(),
                ..ClassSpec::default()
            },
            ..MachineSpec::default()
        },
    );
    configure(&mut machine.spec.configuration);
    machine
}

#[test]
fn malformed_negative_and_zero_creation_timeouts_are_rejected_with_the_field_named() {
    for (value, detail) in [
        ("banana", "must be a duration such as"),
        ("20", "must be a duration such as"),
        ("5 m", "must be a duration such as"),
        ("-5m", "must not be negative"),
        ("0s", "must be greater than zero"),
        ("0", "must be greater than zero"),
        ("9999999h", "out of range"),
    ] {
        let mut deployment = valid_deployment();
        deployment.spec.template.spec.configuration.creation_timeout = Some(value.into());
        let errors = validate_machine_deployment(&deployment).unwrap_err();
        assert_eq!(errors.len(), 1, "{value}: {errors:?}");
        let text = errors[0].to_string();
        assert!(
            text.starts_with(&format!(
                "spec.template.spec.creationTimeout: Invalid value: \"{value}\": "
            )),
            "{text}"
        );
        assert!(text.contains(detail), "{value}: {text}");
    }
}

#[test]
fn every_machine_configuration_duration_is_checked_in_sets_deployments_and_machines() {
    let mut set = valid_set();
    let cfg = &mut set.spec.template.spec.configuration;
    cfg.drain_timeout = Some("banana".into());
    cfg.health_timeout = Some("0s".into());
    cfg.in_place_update_timeout = Some("-1h".into());
    cfg.machine_preserve_timeout = Some("1x".into());
    cfg.max_evict_retries = Some(-1);
    assert_eq!(
        fields(validate_machine_set(&set)),
        [
            "spec.template.spec.healthTimeout",
            "spec.template.spec.drainTimeout",
            "spec.template.spec.inPlaceUpdateTimeout",
            "spec.template.spec.machinePreserveTimeout",
            "spec.template.spec.maxEvictRetries",
        ]
    );
    let machine = machine_with(|cfg| cfg.creation_timeout = Some("banana".into()));
    assert_eq!(fields(validate_machine(&machine)), ["spec.creationTimeout"]);
    assert_eq!(
        fields(validate_machine_timeouts(&machine)),
        ["spec.creationTimeout"]
    );
}

#[test]
fn valid_and_zero_drain_durations_are_accepted() {
    let machine = machine_with(|cfg| {
        cfg.creation_timeout = Some("20m".into());
        cfg.health_timeout = Some("1h30m".into());
        cfg.drain_timeout = Some("0s".into());
        cfg.in_place_update_timeout = Some("1.5h".into());
        cfg.machine_preserve_timeout = Some("0".into());
        cfg.max_evict_retries = Some(0);
    });
    assert_eq!(validate_machine(&machine), Ok(()));
}

#[test]
fn the_effective_creation_timeout_annotation_is_checked_like_creation_timeout() {
    let annotate = |value: &str| {
        Some(
            [(
                EFFECTIVE_CREATION_TIMEOUT_ANNOTATION.to_string(),
                value.to_string(),
            )]
            .into(),
        )
    };
    let mut deployment = valid_deployment();
    deployment.metadata.annotations = annotate("0s");
    let errors = validate_machine_deployment(&deployment).unwrap_err();
    assert_eq!(
        errors[0].field,
        format!("metadata.annotations[{EFFECTIVE_CREATION_TIMEOUT_ANNOTATION}]")
    );
    let mut set = valid_set();
    set.metadata.annotations = annotate("banana");
    assert_eq!(validate_machine_set(&set).unwrap_err().len(), 1);
    let mut machine = machine_with(|_| {});
    machine.metadata.annotations = annotate("-5m");
    assert_eq!(validate_machine_timeouts(&machine).unwrap_err().len(), 1);
    machine.metadata.annotations = annotate("30m");
    assert_eq!(validate_machine_timeouts(&machine), Ok(()));
}

#[test]
fn timeout_errors_are_told_apart_from_structural_ones() {
    let mut deployment = valid_deployment();
    deployment.spec.replicas = -1;
    deployment.spec.template.spec.configuration.creation_timeout = Some("banana".into());
    deployment.spec.progress_deadline_seconds = Some(-1);
    deployment.metadata.annotations = Some(
        [(
            EFFECTIVE_CREATION_TIMEOUT_ANNOTATION.to_string(),
            "0s".to_string(),
        )]
        .into(),
    );
    let errors = validate_machine_deployment(&deployment).unwrap_err();
    let timeouts: Vec<&str> = errors
        .iter()
        .filter(|e| is_timeout_error(e))
        .map(|e| e.field.as_str())
        .collect();
    assert_eq!(timeouts.len(), 3, "{timeouts:?}");
    assert!(errors
        .iter()
        .any(|e| e.field == "spec.replicas" && !is_timeout_error(e)));
}

#[test]
fn negative_deployment_periods_are_rejected() {
    let mut deployment = valid_deployment();
    deployment.spec.min_ready_seconds = -1;
    deployment.spec.progress_deadline_seconds = Some(-5);
    deployment.spec.revision_history_limit = Some(-2);
    assert_eq!(
        fields(validate_machine_deployment(&deployment)),
        [
            "spec.minReadySeconds",
            "spec.progressDeadlineSeconds",
            "spec.revisionHistoryLimit"
        ]
    );
    deployment.spec.min_ready_seconds = 0;
    deployment.spec.progress_deadline_seconds = Some(0);
    deployment.spec.revision_history_limit = Some(0);
    assert_eq!(validate_machine_deployment(&deployment), Ok(()));
    let mut set = valid_set();
    set.spec.min_ready_seconds = -1;
    assert_eq!(fields(validate_machine_set(&set)), ["spec.minReadySeconds"]);
}

#[test]
fn fencepost_edge_values_are_resolved_or_rejected_never_a_panic() {
    let with = |surge: IntOrString, unavailable: IntOrString| {
        let mut deployment = valid_deployment();
        deployment.spec.strategy.rolling_update = Some(UpdateConfiguration {
            max_surge: Some(surge),
            max_unavailable: Some(unavailable),
        });
        validate_machine_deployment(&deployment)
    };
    let s = |v: &str| IntOrString::String(v.into());
    // 150% is more than the replicas, which the reference allows: 3 → surge 5 (rounded up),
    // unavailable 4 (rounded down).
    assert_eq!(with(s("150%"), s("150%")), Ok(()));
    assert_eq!(
        resolve_fenceposts(Some(&s("150%")), Some(&s("150%")), 3),
        Ok((5, 4))
    );
    // 0/0 is accepted like the reference does and resolved to one unavailable at runtime.
    assert_eq!(with(IntOrString::Int(0), s("0%")), Ok(()));
    assert_eq!(
        resolve_fenceposts(Some(&IntOrString::Int(0)), Some(&s("0%")), 3),
        Ok((0, 1))
    );
    // Garbage, negatives and values beyond int32 are rejected.
    for (surge, unavailable) in [
        (s("abc"), IntOrString::Int(1)),
        (IntOrString::Int(-1), IntOrString::Int(1)),
        (IntOrString::Int(1), s("-10%")),
        (s("99999999999%"), IntOrString::Int(1)),
    ] {
        assert!(
            with(surge.clone(), unavailable.clone()).is_err(),
            "{surge:?} {unavailable:?}"
        );
    }
    let mut huge = valid_deployment();
    huge.spec.replicas = i32::MAX;
    huge.spec.strategy.rolling_update = Some(UpdateConfiguration {
        max_surge: Some(s("100%")),
        max_unavailable: Some(s("100%")),
    });
    assert_eq!(validate_machine_deployment(&huge), Ok(()));
}
