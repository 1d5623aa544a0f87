use super::*;

pub(crate) use fixtures::{node, t0, view};

const CAND: &str = c::NODE_CANDIDATE_FOR_UPDATE_LABEL;
const SEL: &str = c::NODE_SELECTED_FOR_UPDATE_LABEL;

fn reason(step: Option<InPlaceCondition>) -> Option<&'static str> {
    step.map(|c| c.reason)
}

#[test]
fn the_node_labels_walk_the_condition_from_candidate_to_selected() {
    assert_eq!(reason(node_condition_step(&node(&[], None))), None);
    assert_eq!(
        reason(node_condition_step(&node(&[CAND], None))),
        Some(c::IN_PLACE_CANDIDATE_FOR_UPDATE)
    );
    assert_eq!(
        reason(node_condition_step(&node(
            &[CAND, SEL],
            Some(c::IN_PLACE_CANDIDATE_FOR_UPDATE)
        ))),
        Some(c::IN_PLACE_SELECTED_FOR_UPDATE)
    );
    // Selected, not yet drained: nothing more.
    assert_eq!(
        reason(node_condition_step(&node(
            &[CAND, SEL],
            Some(c::IN_PLACE_SELECTED_FOR_UPDATE)
        ))),
        None
    );
}

#[test]
fn the_update_result_label_sets_successful_or_failed_with_the_agents_reason() {
    let ok = format!("{}=successful", c::NODE_UPDATE_RESULT_LABEL);
    assert_eq!(
        reason(node_condition_step(&node(
            &[CAND, SEL, &ok],
            Some(c::IN_PLACE_READY_FOR_UPDATE)
        ))),
        Some(c::IN_PLACE_UPDATE_SUCCESSFUL)
    );
    let bad = format!("{}=failed", c::NODE_UPDATE_RESULT_LABEL);
    let mut n = node(&[CAND, SEL, &bad], Some(c::IN_PLACE_READY_FOR_UPDATE));
    n.annotations.insert(
        c::NODE_UPDATE_FAILED_REASON_ANNOTATION.into(),
        "disk full".into(),
    );
    let step = node_condition_step(&n);
    assert_eq!(
        step.as_ref().map(|c| c.reason),
        Some(c::IN_PLACE_UPDATE_FAILED)
    );
    assert_eq!(
        step.map(|c| c.message),
        Some("Node in-place update failed: disk full".to_string())
    );
}

#[test]
fn a_finished_update_starts_over_once_its_result_label_is_gone() {
    assert_eq!(
        reason(node_condition_step(&node(
            &[CAND],
            Some(c::IN_PLACE_UPDATE_SUCCESSFUL)
        ))),
        Some(c::IN_PLACE_CANDIDATE_FOR_UPDATE)
    );
}

#[test]
fn a_selected_node_is_drained_then_marked_ready_then_left_to_the_agent() {
    let m = view(Phase::Running);
    let now = t0() + chrono::Duration::minutes(1);
    let sel = node(&[CAND, SEL], Some(c::IN_PLACE_SELECTED_FOR_UPDATE));
    match in_place_action(&m, false, &sel, now) {
        InPlaceAction::Drain(plan) => assert!(!plan.force),
        other => panic!("expected a drain, got {other:?}"),
    }
    let drained = node(&[CAND, SEL], Some(c::IN_PLACE_DRAIN_SUCCESSFUL));
    assert_eq!(
        in_place_action(&m, false, &drained, now),
        InPlaceAction::MarkReady
    );
    let ready = node(&[CAND, SEL], Some(c::IN_PLACE_READY_FOR_UPDATE));
    assert_eq!(
        in_place_action(&m, false, &ready, now),
        InPlaceAction::WaitForAgent
    );
}

#[test]
fn the_drain_is_forced_by_the_label_or_after_the_drain_timeout() {
    let m = view(Phase::Running);
    let sel = node(&[CAND, SEL], Some(c::IN_PLACE_SELECTED_FOR_UPDATE));
    let soon = t0() + chrono::Duration::minutes(1);
    let forced = plan_in_place_drain(&m, true, &sel, soon);
    assert!(forced.force);
    assert_eq!(forced.timeout, Duration::from_secs(60));
    assert_eq!(forced.max_evict_retries, 1);
    let late = t0() + chrono::Duration::hours(3);
    assert!(plan_in_place_drain(&m, false, &sel, late).force);
    assert!(!plan_in_place_drain(&m, false, &sel, soon).force);
}

#[test]
fn a_successful_drain_makes_the_machine_in_place_updating() {
    let t = after_in_place_drain("m1", Ok(()));
    assert_eq!(t.phase, Some(Phase::InPlaceUpdating));
    assert_eq!(t.operation.kind, OpType::InPlaceUpdate);
    let f = after_in_place_drain("m1", Err("pod p: blocked".into()));
    assert_eq!(f.phase, None);
    assert_eq!(f.operation.kind, OpType::DrainNode);
    assert!(f.operation.description.ends_with(c::INITIATE_DRAIN));
}

#[test]
fn the_update_result_label_decides_the_phase() {
    let ok = format!("{}=successful", c::NODE_UPDATE_RESULT_LABEL);
    let bad = format!("{}=failed", c::NODE_UPDATE_RESULT_LABEL);
    let m = view(Phase::InPlaceUpdating);
    assert_eq!(
        in_place_result(&m, &node(&[&ok], None)).and_then(|t| t.phase),
        Some(Phase::InPlaceUpdateSuccessful)
    );
    assert_eq!(
        in_place_result(&m, &node(&[&bad], None)).and_then(|t| t.phase),
        Some(Phase::InPlaceUpdateFailed)
    );
    assert_eq!(in_place_result(&m, &node(&[], None)), None);
    assert_eq!(
        in_place_result(&view(Phase::Running), &node(&[&ok], None)),
        None
    );
}

#[test]
fn the_in_place_timeout_fails_a_machine_stuck_updating() {
    let m = view(Phase::InPlaceUpdating);
    let timeout = Duration::from_secs(120);
    assert!(matches!(
        in_place_timeout(&m, timeout, t0() + chrono::Duration::seconds(60)),
        Some(Err(_))
    ));
    let t = in_place_timeout(&m, timeout, t0() + chrono::Duration::seconds(121));
    match t {
        Some(Ok(t)) => {
            assert_eq!(t.phase, Some(Phase::InPlaceUpdateFailed));
            assert_eq!(
                t.operation.description,
                "Machine m1 failed to in-place update in 2m0s minutes."
            );
        }
        other => panic!("expected a transition, got {other:?}"),
    }
    assert_eq!(in_place_timeout(&view(Phase::Running), timeout, t0()), None);
}

#[test]
fn a_successful_update_rejoins_even_with_critical_components_not_ready() {
    let ready = vec![k8s_openapi::api::core::v1::NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Default::default()
    }];
    let node = super::super::NodeView {
        conditions: ready.clone(),
        critical_components_not_ready: true,
        startup_taint: None,
    };
    let mut m = view(Phase::InPlaceUpdateSuccessful);
    m.conditions = ready;
    let d = super::super::health(&m, Some(&node), t0() + chrono::Duration::minutes(1));
    assert_eq!(d.transition.and_then(|t| t.phase), Some(Phase::Running));
}

#[test]
fn a_failed_update_fails_the_machine_after_the_health_timeout() {
    let ready = vec![k8s_openapi::api::core::v1::NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Default::default()
    }];
    let node = super::super::NodeView {
        conditions: ready.clone(),
        critical_components_not_ready: false,
        startup_taint: None,
    };
    let mut m = view(Phase::InPlaceUpdateFailed);
    m.conditions = ready;
    let early = super::super::health(&m, Some(&node), t0() + chrono::Duration::minutes(5));
    assert_eq!(early.transition, None);
    let late = super::super::health(&m, Some(&node), t0() + chrono::Duration::minutes(11));
    assert!(
        late.rate_limited,
        "rate-limited per MachineDeployment like Unknown"
    );
    assert_eq!(late.transition.and_then(|t| t.phase), Some(Phase::Failed));
}
