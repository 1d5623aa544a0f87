//! One test per transition of [`PreserveFlow`].

use super::*;
use crate::machine::{PreserveNodeView, Settings};
use chrono::TimeZone;
use k8s_openapi::api::core::v1::NodeCondition;
use mcm_api::constants as c;
use mcm_api::Machine;
use serde_json::json;

const HOUR: Duration = Duration::from_secs(3600);
const LONG: Duration = Duration::from_secs(600);

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0)
        .single()
        .unwrap_or_default()
}

fn view(phase: &str, annotations: serde_json::Value) -> MachineView {
    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m", "annotations": annotations, "labels": {"node": "n"},
                     "creationTimestamp": "2026-01-01T10:00:00Z"},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}},
        "status": {"currentStatus": {"phase": phase, "lastUpdateTime": "2026-01-01T11:59:00Z"}},
    }))
    .unwrap_or_default();
    MachineView::of(&m, &Settings::default())
}

/// The target cluster's stand-in: the drain's start carries it.
type Target = &'static str;
const TARGET: Target = "target-cluster";

fn flow_on(target: Option<Target>) -> PreserveFlow<Target> {
    PreserveFlow::new(
        PreserveSettings {
            timeout: HOUR,
            long_retry: LONG,
        },
        target,
    )
}

fn flow() -> PreserveFlow<Target> {
    flow_on(Some(TARGET))
}

fn plain_node() -> PreserveNode {
    PreserveNode::Found(PreserveNodeView::default())
}

/// A Failed machine preserved when failed, whose Node was not drained yet.
fn failed_when_failed() -> MachineView {
    view(
        "Failed",
        json!({c::PRESERVE_ANNOTATION: c::PRESERVE_VALUE_WHEN_FAILED}),
    )
}

/// Runs the flow, answering every effect as done and the drain with
/// `drain`, and returns the steps up to the one that ends the pass.
fn run(m: &MachineView, node: PreserveNode, drain: PreserveDrain) -> Vec<PreserveFlowStep<Target>> {
    run_with(flow(), m, node, drain)
}

/// [`run`] with this flow.
fn run_with(
    mut f: PreserveFlow<Target>,
    m: &MachineView,
    node: PreserveNode,
    drain: PreserveDrain,
) -> Vec<PreserveFlowStep<Target>> {
    let mut steps = vec![f.next(m, PreserveOutcome::Start, now())];
    let mut outcome = PreserveOutcome::NodeRead(node);
    loop {
        let step = f.next(m, outcome, now());
        steps.push(step.clone());
        outcome = match step {
            PreserveFlowStep::ReadDrain => PreserveOutcome::Drain(drain.clone()),
            PreserveFlowStep::WarnInvalid(_)
            | PreserveFlowStep::Apply(_)
            | PreserveFlowStep::StartDrain { .. }
            | PreserveFlowStep::WarnDrainFailed(_) => PreserveOutcome::Done,
            PreserveFlowStep::ReadNode
            | PreserveFlowStep::Requeue(_)
            | PreserveFlowStep::RequeueWithBackoff
            | PreserveFlowStep::Continue(_) => return steps,
        };
    }
}

fn kinds(steps: &[PreserveFlowStep<Target>]) -> Vec<&'static str> {
    steps
        .iter()
        .map(|s| match s {
            PreserveFlowStep::ReadNode => "read-node",
            PreserveFlowStep::WarnInvalid(_) => "warn-invalid",
            PreserveFlowStep::Apply(PreserveStep::SetExpiry(_)) => "set-expiry",
            PreserveFlowStep::Apply(PreserveStep::SetCondition(_)) => "condition",
            PreserveFlowStep::Apply(PreserveStep::AddScaleDownDisabled) => "ca",
            PreserveFlowStep::Apply(PreserveStep::Taint) => "taint",
            PreserveFlowStep::Apply(PreserveStep::ClearExpiry) => "clear-expiry",
            PreserveFlowStep::Apply(_) => "apply",
            PreserveFlowStep::ReadDrain => "read-drain",
            PreserveFlowStep::StartDrain { .. } => "start-drain",
            PreserveFlowStep::WarnDrainFailed(_) => "warn-drain",
            PreserveFlowStep::Requeue(_) => "requeue",
            PreserveFlowStep::RequeueWithBackoff => "backoff",
            PreserveFlowStep::Continue(_) => "continue",
        })
        .collect()
}

#[test]
fn the_pass_starts_by_reading_the_node() {
    assert_eq!(
        flow().next(&view("Running", json!({})), PreserveOutcome::Start, now()),
        PreserveFlowStep::ReadNode
    );
}

#[test]
fn a_machine_without_preservation_goes_on_with_nothing_done() {
    let steps = run(
        &view("Running", json!({})),
        plain_node(),
        PreserveDrain::Idle,
    );
    assert_eq!(kinds(&steps), ["read-node", "continue"]);
}

#[test]
fn an_invalid_value_is_warned_about_first() {
    let steps = run(
        &view("Running", json!({c::PRESERVE_ANNOTATION: "sometimes"})),
        plain_node(),
        PreserveDrain::Idle,
    );
    assert_eq!(kinds(&steps), ["read-node", "warn-invalid", "continue"]);
}

#[test]
fn preserve_now_applies_the_plan_and_rechecks_at_the_expiry() {
    let steps = run(
        &view(
            "Running",
            json!({c::PRESERVE_ANNOTATION: c::PRESERVE_VALUE_NOW}),
        ),
        plain_node(),
        PreserveDrain::Idle,
    );
    assert_eq!(
        kinds(&steps),
        ["read-node", "set-expiry", "ca", "condition", "continue"]
    );
    assert_eq!(steps.last(), Some(&PreserveFlowStep::Continue(Some(HOUR))));
}

#[test]
fn a_failed_machine_without_a_drain_starts_one_and_stops_the_pass() {
    let steps = run(&failed_when_failed(), plain_node(), PreserveDrain::Idle);
    assert_eq!(
        kinds(&steps),
        [
            "read-node",
            "set-expiry",
            "ca",
            "taint",
            "read-drain",
            "start-drain",
            "requeue"
        ]
    );
    assert_eq!(steps.last(), Some(&PreserveFlowStep::Requeue(LONG)));
}

#[test]
fn a_running_drain_ends_the_pass_until_it_finishes() {
    let steps = run(
        &failed_when_failed(),
        plain_node(),
        PreserveDrain::Running { force: false },
    );
    assert_eq!(
        kinds(&steps),
        [
            "read-node",
            "set-expiry",
            "ca",
            "taint",
            "read-drain",
            "requeue"
        ]
    );
}

#[test]
fn a_normal_drain_running_where_a_forced_one_is_due_is_restarted_forced() {
    let m = view(
        "Failed",
        json!({c::PRESERVE_ANNOTATION: c::PRESERVE_VALUE_WHEN_FAILED}),
    );
    let m = MachineView {
        labels: [(
            c::FORCE_DRAIN_LABEL.to_string(),
            c::FORCE_DRAIN_LABEL_VALUE.to_string(),
        )]
        .into_iter()
        .collect(),
        ..m
    };
    let steps = run(&m, plain_node(), PreserveDrain::Running { force: false });
    let Some(PreserveFlowStep::StartDrain { plan, node, target }) = steps
        .iter()
        .find(|s| matches!(s, PreserveFlowStep::StartDrain { .. }))
    else {
        panic!("{steps:?}")
    };
    assert!(plan.force);
    assert_eq!((node.as_str(), *target), ("n", TARGET));
}

#[test]
fn a_finished_drain_writes_the_drained_condition_and_goes_on() {
    let steps = run(
        &failed_when_failed(),
        plain_node(),
        PreserveDrain::Finished(Ok(())),
    );
    assert_eq!(
        kinds(&steps),
        [
            "read-node",
            "set-expiry",
            "ca",
            "taint",
            "read-drain",
            "condition",
            "continue"
        ]
    );
    let Some(PreserveFlowStep::Apply(PreserveStep::SetCondition(cond))) = steps.get(5) else {
        panic!("{steps:?}")
    };
    assert_eq!(cond.status, "True");
    assert!(cond
        .message
        .as_deref()
        .is_some_and(|m| m.contains(c::PRESERVED_NODE_DRAIN_SUCCESSFUL)));
}

#[test]
fn a_failed_drain_writes_its_condition_warns_and_backs_off() {
    let steps = run(
        &failed_when_failed(),
        plain_node(),
        PreserveDrain::Finished(Err("pod p: blocked".into())),
    );
    assert_eq!(
        kinds(&steps),
        [
            "read-node",
            "set-expiry",
            "ca",
            "taint",
            "read-drain",
            "condition",
            "warn-drain",
            "backoff"
        ]
    );
}

#[test]
fn without_a_target_cluster_the_drain_is_neither_asked_about_nor_started() {
    let steps = run_with(
        flow_on(None),
        &failed_when_failed(),
        plain_node(),
        PreserveDrain::Idle,
    );
    assert_eq!(steps.last(), Some(&PreserveFlowStep::Continue(Some(HOUR))));
    assert!(!kinds(&steps).contains(&"read-drain"));
    assert!(!kinds(&steps).contains(&"start-drain"));
}

#[test]
fn without_a_node_name_the_drain_is_neither_asked_about_nor_started() {
    let m = MachineView {
        node: None,
        ..failed_when_failed()
    };
    let steps = run(&m, plain_node(), PreserveDrain::Idle);
    assert!(!kinds(&steps).contains(&"read-drain"));
    assert!(!kinds(&steps).contains(&"start-drain"));
}

#[test]
fn the_drains_start_carries_the_target_cluster_and_the_machines_node() {
    let steps = run(&failed_when_failed(), plain_node(), PreserveDrain::Idle);
    let starts: Vec<(String, Target)> = steps
        .into_iter()
        .filter_map(|s| match s {
            PreserveFlowStep::StartDrain { node, target, .. } => Some((node, target)),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [("n".to_string(), TARGET)]);
}

#[test]
fn stopping_clears_the_expiry_last() {
    let m = view("Running", json!({}));
    let m = MachineView {
        preserve_expiry: Some(now() + chrono::Duration::hours(1)),
        ..m
    };
    let node = PreserveNode::Found(PreserveNodeView {
        condition: Some(NodeCondition {
            type_: c::NODE_PRESERVED_CONDITION.into(),
            status: "True".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let steps = run(&m, node, PreserveDrain::Idle);
    let k = kinds(&steps);
    assert_eq!(k.last(), Some(&"continue"));
    assert_eq!(k[k.len() - 2], "clear-expiry");
}
