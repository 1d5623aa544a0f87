use super::*;
use crate::machine::Settings;
use chrono::TimeZone;
use mcm_api::Machine;
use serde_json::json;

const HOUR: Duration = Duration::from_secs(3600);

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0)
        .single()
        .unwrap_or_default()
}

fn machine(phase: &str, annotations: serde_json::Value) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m", "annotations": annotations, "labels": {"node": "n"},
                     "creationTimestamp": "2026-01-01T10:00:00Z"},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}},
        "status": {"currentStatus": {"phase": phase, "lastUpdateTime": "2026-01-01T11:59:00Z"}},
    }))
    .unwrap_or_default()
}

fn input(m: &Machine, node: PreserveNode, expiry: Option<DateTime<Utc>>) -> PreserveInput {
    let view = MachineView::of(m, &Settings::default());
    let mut i = PreserveInput::of(&view, node, HOUR, now());
    i.expiry = expiry;
    i
}

fn node(annotation: Option<&str>) -> PreserveNode {
    PreserveNode::Found(PreserveNodeView {
        annotation: annotation.map(str::to_string),
        ..Default::default()
    })
}

fn preserved_node(annotation: Option<&str>, drained: bool) -> PreserveNode {
    let message = if drained {
        format!(
            "{} Machine preserved until x.",
            c::PRESERVED_NODE_DRAIN_SUCCESSFUL
        )
    } else {
        "Machine preserved until x.".to_string()
    };
    PreserveNode::Found(PreserveNodeView {
        annotation: annotation.map(str::to_string),
        condition: Some(NodeCondition {
            type_: c::NODE_PRESERVED_CONDITION.into(),
            status: "True".into(),
            message: Some(message),
            ..Default::default()
        }),
        tainted: drained,
        ca_scale_down_disabled: true,
        ca_scale_down_disabled_by_mcm: true,
    })
}

fn kinds(p: &PreservePlan) -> Vec<&'static str> {
    p.steps
        .iter()
        .map(|s| match s {
            PreserveStep::SetExpiry(_) => "SetExpiry",
            PreserveStep::AddScaleDownDisabled => "AddScaleDownDisabled",
            PreserveStep::Taint => "Taint",
            PreserveStep::Drain(_) => "Drain",
            PreserveStep::SetCondition(_) => "SetCondition",
            PreserveStep::Untaint => "Untaint",
            PreserveStep::StopCondition => "StopCondition",
            PreserveStep::RemoveNodeAnnotations { .. } => "RemoveNodeAnnotations",
            PreserveStep::RemoveMachineAnnotations { .. } => "RemoveMachineAnnotations",
            PreserveStep::ClearExpiry => "ClearExpiry",
            PreserveStep::RecordNodeValue(_) => "RecordNodeValue",
        })
        .collect()
}

#[test]
fn a_machine_without_any_preservation_marker_is_left_alone() {
    let m = machine("Running", json!({}));
    let p = plan_preservation(&input(&m, node(None), None));
    assert!(p.steps.is_empty());
    assert!(p.invalid.is_empty());
    assert_eq!(p.effective, None);
}

#[test]
fn preserve_now_on_a_running_machine_sets_the_expiry_and_the_condition_without_taint_or_drain() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "now"}));
    let p = plan_preservation(&input(&m, node(None), None));
    assert_eq!(
        kinds(&p),
        ["SetExpiry", "AddScaleDownDisabled", "SetCondition"]
    );
    let until = now() + chrono::Duration::hours(1);
    assert_eq!(p.steps[0], PreserveStep::SetExpiry(until));
    let PreserveStep::SetCondition(cond) = &p.steps[2] else {
        unreachable!()
    };
    assert_eq!(cond.status, "True");
    assert_eq!(cond.reason.as_deref(), Some(c::PRESERVED_BY_USER));
    assert_eq!(p.recheck_after, Some(HOUR));
}

#[test]
fn an_already_preserved_running_machine_needs_nothing_more() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "now"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, false), Some(until)));
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.recheck_after, Some(Duration::from_secs(1800)));
}

#[test]
fn when_failed_does_nothing_while_the_machine_runs() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "when-failed"}));
    let p = plan_preservation(&input(&m, node(None), None));
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.effective.as_deref(), Some("when-failed"));
}

#[test]
fn a_failed_machine_preserved_when_failed_is_tainted_and_drained() {
    let m = machine("Failed", json!({c::PRESERVE_ANNOTATION: "when-failed"}));
    let p = plan_preservation(&input(&m, node(None), None));
    assert_eq!(
        kinds(&p),
        ["SetExpiry", "AddScaleDownDisabled", "Taint", "Drain"]
    );
    let PreserveStep::Drain(plan) = &p.steps[3] else {
        unreachable!()
    };
    assert!(!plan.force, "failed a minute ago: a normal drain");
}

#[test]
fn the_force_drain_label_forces_the_drain_of_a_preserved_failed_machine() {
    let mut m = machine("Failed", json!({c::PRESERVE_ANNOTATION: "when-failed"}));
    m.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(c::FORCE_DRAIN_LABEL.into(), "True".into());
    let p = plan_preservation(&input(&m, node(None), None));
    assert!(p
        .steps
        .iter()
        .any(|s| matches!(s, PreserveStep::Drain(d) if d.force)));
}

#[test]
fn a_preserved_running_machine_that_fails_is_drained_although_its_condition_is_true() {
    let m = machine("Failed", json!({c::PRESERVE_ANNOTATION: "now"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, false), Some(until)));
    assert_eq!(kinds(&p), ["Taint", "Drain"]);
}

#[test]
fn a_drained_preserved_failed_machine_needs_nothing_more() {
    let m = machine("Failed", json!({c::PRESERVE_ANNOTATION: "when-failed"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, true), Some(until)));
    assert!(p.steps.is_empty(), "{:?}", p.steps);
}

#[test]
fn a_now_preserved_machine_that_recovers_to_running_loses_the_taint_but_stays_preserved() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "now"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, true), Some(until)));
    assert_eq!(kinds(&p), ["Untaint"]);
}

#[test]
fn a_recovered_when_failed_machine_stops_preservation_but_keeps_its_annotation() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "when-failed"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, true), Some(until)));
    assert_eq!(
        kinds(&p),
        [
            "StopCondition",
            "RemoveNodeAnnotations",
            "Untaint",
            "ClearExpiry"
        ]
    );
}

#[test]
fn a_recovered_auto_preserved_machine_also_loses_its_annotation() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "auto-preserved"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, true), Some(until)));
    assert!(p
        .steps
        .contains(&PreserveStep::RemoveMachineAnnotations { mark_false: false }));
    assert_eq!(p.steps.last(), Some(&PreserveStep::ClearExpiry));
}

#[test]
fn removing_the_annotation_stops_preservation_and_clears_the_expiry_last() {
    let m = machine("Failed", json!({}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, true), Some(until)));
    assert_eq!(
        kinds(&p),
        [
            "StopCondition",
            "RemoveNodeAnnotations",
            "Untaint",
            "ClearExpiry"
        ]
    );
    assert!(p.steps.contains(&PreserveStep::RemoveNodeAnnotations {
        ca: true,
        preserve: false
    }));
}

#[test]
fn preserve_false_stops_preservation() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "false"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, false), Some(until)));
    assert_eq!(p.summary, "stop");
    assert_eq!(p.steps.last(), Some(&PreserveStep::ClearExpiry));
}

#[test]
fn an_expired_failed_machine_is_marked_false_so_auto_preservation_cannot_pick_it_again() {
    let m = machine("Failed", json!({c::PRESERVE_ANNOTATION: "auto-preserved"}));
    let expired = now() - chrono::Duration::seconds(1);
    let p = plan_preservation(&input(&m, preserved_node(None, true), Some(expired)));
    assert!(p
        .steps
        .contains(&PreserveStep::RemoveMachineAnnotations { mark_false: true }));
    assert_eq!(p.steps.last(), Some(&PreserveStep::ClearExpiry));
}

#[test]
fn an_expired_running_machine_just_loses_its_annotations() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "now"}));
    let expired = now() - chrono::Duration::seconds(1);
    let p = plan_preservation(&input(&m, preserved_node(None, false), Some(expired)));
    assert!(p
        .steps
        .contains(&PreserveStep::RemoveMachineAnnotations { mark_false: false }));
    assert!(!p
        .steps
        .iter()
        .any(|s| matches!(s, PreserveStep::RecordNodeValue(_))));
}

#[test]
fn an_expired_node_annotation_is_removed_from_the_node() {
    let m = machine(
        "Failed",
        json!({c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION: "now"}),
    );
    let expired = now() - chrono::Duration::seconds(1);
    let p = plan_preservation(&input(&m, preserved_node(Some("now"), true), Some(expired)));
    assert!(p.steps.contains(&PreserveStep::RemoveNodeAnnotations {
        ca: true,
        preserve: true
    }));
}

#[test]
fn the_node_annotation_wins_and_is_recorded_on_the_machine() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "when-failed"}));
    let p = plan_preservation(&input(&m, node(Some("now")), None));
    assert_eq!(p.effective.as_deref(), Some("now"));
    assert_eq!(
        p.steps[0],
        PreserveStep::SetExpiry(now() + chrono::Duration::hours(1))
    );
    assert_eq!(
        p.steps.last(),
        Some(&PreserveStep::RecordNodeValue("now".into()))
    );
}

#[test]
fn the_machine_annotation_decides_when_the_node_has_none_and_none_was_applied() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "now"}));
    let p = plan_preservation(&input(&m, node(None), None));
    assert_eq!(p.effective.as_deref(), Some("now"));
    assert!(!p
        .steps
        .iter()
        .any(|s| matches!(s, PreserveStep::RecordNodeValue(_))));
}

#[test]
fn a_node_annotation_removed_after_it_was_applied_stops_preservation() {
    // The machine still says `now`, but the node's value was applied and is now gone.
    let m = machine(
        "Running",
        json!({c::PRESERVE_ANNOTATION: "now", c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION: "now"}),
    );
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, preserved_node(None, false), Some(until)));
    assert_eq!(p.effective, None);
    assert_eq!(p.summary, "stop");
    assert_eq!(
        p.steps.last(),
        Some(&PreserveStep::RecordNodeValue(String::new()))
    );
}

#[test]
fn without_its_node_the_machine_annotation_decides() {
    let m = machine(
        "Running",
        json!({c::PRESERVE_ANNOTATION: "now", c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION: "false"}),
    );
    let p = plan_preservation(&input(&m, PreserveNode::Missing, None));
    assert_eq!(p.effective.as_deref(), Some("now"));
    assert_eq!(kinds(&p)[0], "SetExpiry");
}

#[test]
fn an_invalid_machine_value_is_reported_and_ignored() {
    let m = machine("Failed", json!({c::PRESERVE_ANNOTATION: "yes"}));
    let p = plan_preservation(&input(&m, node(None), None));
    assert_eq!(p.invalid.len(), 1);
    assert!(p.invalid[0].contains("\"yes\""), "{}", p.invalid[0]);
    assert!(p.steps.is_empty());
}

#[test]
fn an_invalid_node_value_is_reported_and_changes_nothing() {
    let m = machine("Failed", json!({c::PRESERVE_ANNOTATION: "now"}));
    let until = now() + chrono::Duration::minutes(30);
    let p = plan_preservation(&input(&m, node(Some("always")), Some(until)));
    assert_eq!(p.invalid.len(), 1);
    assert!(p.invalid[0].starts_with("Node annotation"));
    assert!(p.steps.is_empty());
}

#[test]
fn a_huge_timeout_saturates_instead_of_overflowing() {
    let m = machine("Running", json!({c::PRESERVE_ANNOTATION: "now"}));
    let mut i = input(&m, PreserveNode::NoNode, None);
    i.timeout = Duration::from_secs(u64::MAX);
    let p = plan_preservation(&i);
    assert_eq!(kinds(&p), ["SetExpiry"]);
}

#[test]
fn the_drain_result_decides_the_condition_of_a_failed_machine() {
    let until = Some(now());
    let ok = preserved_condition(
        &Phase::Failed,
        "when-failed",
        Some(&Ok(())),
        None,
        until,
        now(),
    )
    .unwrap_or_default();
    assert_eq!(ok.status, "True");
    assert!(ok
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with(c::PRESERVED_NODE_DRAIN_SUCCESSFUL)));
    let failed = preserved_condition(
        &Phase::Failed,
        "auto-preserved",
        Some(&Err("blocked".into())),
        None,
        until,
        now(),
    )
    .unwrap_or_default();
    assert_eq!(failed.status, "False");
    assert_eq!(failed.reason.as_deref(), Some(c::PRESERVED_BY_MCM));
    // The same failure again changes nothing.
    assert_eq!(
        preserved_condition(
            &Phase::Failed,
            "auto-preserved",
            Some(&Err("again".into())),
            Some(&failed),
            until,
            now()
        ),
        None
    );
}
