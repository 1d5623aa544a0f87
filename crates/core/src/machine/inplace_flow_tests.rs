//! One test per transition of [`InPlaceFlow`].

use super::*;
use crate::machine::inplace::InPlaceNodeView;
use crate::machine::Phase;
use mcm_api::constants as c;

const SHORT: Duration = Duration::from_secs(5);
const LONG: Duration = Duration::from_secs(600);

fn settings() -> InPlaceSettings {
    InPlaceSettings {
        timeout: Duration::from_secs(20 * 60),
        force_drain: false,
        short_retry: SHORT,
        long_retry: LONG,
    }
}

use crate::machine::inplace::fixtures::{node, t0, view};

/// The target cluster's stand-in: the steps that act on the Node carry it.
type Target = &'static str;
const TARGET: Target = "target-cluster";

const CAND: &str = c::NODE_CANDIDATE_FOR_UPDATE_LABEL;
const SEL: &str = c::NODE_SELECTED_FOR_UPDATE_LABEL;

/// Runs the flow from the Node read, answering every effect as done, and
/// returns the steps up to the one that ends the pass.
fn run(
    m: &MachineView,
    n: Option<InPlaceNodeView>,
    drain: InPlaceDrain,
) -> Vec<InPlaceStep<Target>> {
    let mut flow = InPlaceFlow::new(settings(), Some(TARGET));
    let mut steps = vec![flow.next(m, InPlaceOutcome::Start, t0())];
    let mut outcome = InPlaceOutcome::NodeRead(n);
    loop {
        let step = flow.next(m, outcome, t0());
        steps.push(step.clone());
        outcome = match step {
            InPlaceStep::Write(_) => InPlaceOutcome::Written,
            InPlaceStep::SetCondition { .. } => InPlaceOutcome::ConditionSet,
            InPlaceStep::ReadDrain => InPlaceOutcome::Drain(drain.clone()),
            InPlaceStep::StartDrain { .. } => InPlaceOutcome::DrainStarted,
            InPlaceStep::WarnDrainFailed(_) => InPlaceOutcome::Warned,
            InPlaceStep::ReadNode
            | InPlaceStep::Requeue(_)
            | InPlaceStep::RequeueWithBackoff
            | InPlaceStep::Continue(_) => return steps,
        };
    }
}

fn kinds(steps: &[InPlaceStep<Target>]) -> Vec<&'static str> {
    steps
        .iter()
        .map(|s| match s {
            InPlaceStep::ReadNode => "read-node",
            InPlaceStep::Write(_) => "write",
            InPlaceStep::SetCondition { .. } => "condition",
            InPlaceStep::ReadDrain => "read-drain",
            InPlaceStep::StartDrain { .. } => "start-drain",
            InPlaceStep::WarnDrainFailed(_) => "warn",
            InPlaceStep::Requeue(_) => "requeue",
            InPlaceStep::RequeueWithBackoff => "backoff",
            InPlaceStep::Continue(_) => "continue",
        })
        .collect()
}

#[test]
fn a_machine_without_a_node_skips_the_step() {
    let m = MachineView {
        node: None,
        ..view(Phase::Running)
    };
    let mut flow = InPlaceFlow::new(settings(), Some(TARGET));
    assert_eq!(
        flow.next(&m, InPlaceOutcome::Start, t0()),
        InPlaceStep::Continue(None)
    );
}

#[test]
fn a_node_that_cannot_be_read_goes_on() {
    let steps = run(&view(Phase::Running), None, InPlaceDrain::Idle);
    assert_eq!(kinds(&steps), ["read-node", "continue"]);
}

#[test]
fn a_node_outside_the_protocol_goes_on_with_nothing_written() {
    let steps = run(
        &view(Phase::Running),
        Some(node(&[], None)),
        InPlaceDrain::Idle,
    );
    assert_eq!(steps.last(), Some(&InPlaceStep::Continue(None)));
    assert_eq!(kinds(&steps), ["read-node", "continue"]);
}

#[test]
fn the_agents_result_is_written_with_the_nodes_condition_then_requeued() {
    let ok = format!("{}=successful", c::NODE_UPDATE_RESULT_LABEL);
    let steps = run(
        &view(Phase::InPlaceUpdating),
        Some(node(&[CAND, SEL, &ok], Some(c::IN_PLACE_READY_FOR_UPDATE))),
        InPlaceDrain::Idle,
    );
    assert_eq!(
        kinds(&steps),
        ["read-node", "write", "condition", "requeue"]
    );
    let InPlaceStep::Write(t) = &steps[1] else {
        panic!("{steps:?}")
    };
    assert_eq!(t.phase, Some(Phase::InPlaceUpdateSuccessful));
    assert_eq!(steps.last(), Some(&InPlaceStep::Requeue(SHORT)));
}

#[test]
fn an_update_past_its_timeout_is_written_failed_then_requeued() {
    let m = MachineView::test("m1", Phase::InPlaceUpdating)
        .created_at(t0())
        .in_phase_since(t0() - chrono::Duration::minutes(30))
        .on_node("m1");
    let steps = run(
        &m,
        Some(node(&[CAND, SEL], Some(c::IN_PLACE_READY_FOR_UPDATE))),
        InPlaceDrain::Idle,
    );
    assert_eq!(kinds(&steps), ["read-node", "write", "requeue"]);
    let InPlaceStep::Write(t) = &steps[1] else {
        panic!("{steps:?}")
    };
    assert_eq!(t.phase, Some(Phase::InPlaceUpdateFailed));
}

#[test]
fn a_candidate_node_gets_its_condition_then_requeues() {
    let steps = run(
        &view(Phase::Running),
        Some(node(&[CAND], None)),
        InPlaceDrain::Idle,
    );
    assert_eq!(kinds(&steps), ["read-node", "condition", "requeue"]);
    let InPlaceStep::SetCondition {
        condition: cond, ..
    } = &steps[1]
    else {
        panic!("{steps:?}")
    };
    assert_eq!(cond.reason, c::IN_PLACE_CANDIDATE_FOR_UPDATE);
}

#[test]
fn a_selected_node_without_a_drain_starts_one_and_looks_again_later() {
    let steps = run(
        &view(Phase::Running),
        Some(node(&[CAND, SEL], Some(c::IN_PLACE_SELECTED_FOR_UPDATE))),
        InPlaceDrain::Idle,
    );
    assert_eq!(
        kinds(&steps),
        ["read-node", "read-drain", "start-drain", "continue"]
    );
    assert_eq!(steps.last(), Some(&InPlaceStep::Continue(Some(LONG))));
}

#[test]
fn a_running_drain_is_left_alone() {
    let steps = run(
        &view(Phase::Running),
        Some(node(&[CAND, SEL], Some(c::IN_PLACE_SELECTED_FOR_UPDATE))),
        InPlaceDrain::Running,
    );
    assert_eq!(kinds(&steps), ["read-node", "read-drain", "continue"]);
}

#[test]
fn a_finished_drain_makes_the_machine_updating_and_marks_the_node_drained() {
    let steps = run(
        &view(Phase::Running),
        Some(node(&[CAND, SEL], Some(c::IN_PLACE_SELECTED_FOR_UPDATE))),
        InPlaceDrain::Finished(Ok(())),
    );
    assert_eq!(
        kinds(&steps),
        ["read-node", "read-drain", "write", "condition", "requeue"]
    );
    let InPlaceStep::SetCondition {
        condition: cond, ..
    } = &steps[3]
    else {
        panic!("{steps:?}")
    };
    assert_eq!(cond.reason, c::IN_PLACE_DRAIN_SUCCESSFUL);
}

#[test]
fn a_failed_drain_warns_records_and_backs_off() {
    let steps = run(
        &view(Phase::Running),
        Some(node(&[CAND, SEL], Some(c::IN_PLACE_SELECTED_FOR_UPDATE))),
        InPlaceDrain::Finished(Err("pod p: blocked".into())),
    );
    assert_eq!(
        kinds(&steps),
        ["read-node", "read-drain", "warn", "write", "backoff"]
    );
}

#[test]
fn a_drained_node_is_marked_ready_for_the_agent() {
    let steps = run(
        &view(Phase::InPlaceUpdating),
        Some(node(&[CAND, SEL], Some(c::IN_PLACE_DRAIN_SUCCESSFUL))),
        InPlaceDrain::Idle,
    );
    assert_eq!(kinds(&steps), ["read-node", "condition", "continue"]);
    assert_eq!(
        steps.last(),
        Some(&InPlaceStep::Continue(Some(AGENT_RECHECK)))
    );
}

#[test]
fn a_node_ready_for_update_waits_for_the_agent() {
    let steps = run(
        &view(Phase::InPlaceUpdating),
        Some(node(&[CAND, SEL], Some(c::IN_PLACE_READY_FOR_UPDATE))),
        InPlaceDrain::Idle,
    );
    assert_eq!(kinds(&steps), ["read-node", "continue"]);
    let InPlaceStep::Continue(Some(after)) = steps[1] else {
        panic!("{steps:?}")
    };
    assert!(after <= AGENT_RECHECK);
}

#[test]
fn without_a_target_cluster_the_in_place_step_reads_no_node_and_goes_on() {
    let mut flow: InPlaceFlow<Target> = InPlaceFlow::new(settings(), None);
    assert_eq!(
        flow.next(&view(Phase::Running), InPlaceOutcome::Start, t0()),
        InPlaceStep::Continue(None)
    );
}

#[test]
fn every_step_on_the_node_carries_the_target_cluster_and_the_machines_node() {
    let m = view(Phase::Running);
    let want = m.node.clone().unwrap_or_default();
    let mut seen = 0;
    let selected = Some(c::IN_PLACE_SELECTED_FOR_UPDATE);
    for (n, drain) in [
        (node(&[CAND], None), InPlaceDrain::Idle),
        (node(&[CAND, SEL], selected), InPlaceDrain::Idle),
        (node(&[CAND, SEL], selected), InPlaceDrain::Finished(Ok(()))),
    ] {
        for step in run(&m, Some(n), drain) {
            match step {
                InPlaceStep::SetCondition { node, target, .. }
                | InPlaceStep::StartDrain { node, target, .. } => {
                    assert_eq!((node.as_str(), target), (want.as_str(), TARGET));
                    seen += 1;
                }
                _ => {}
            }
        }
    }
    assert_eq!(seen, 3, "two conditions set and one drain started");
}
