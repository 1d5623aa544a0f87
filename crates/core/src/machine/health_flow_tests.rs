//! One test per transition of [`HealthFlow::next`].

use super::*;
use crate::machine::tests::{t0, view};

fn cond(ty: &str, status: &str) -> NodeCondition {
    NodeCondition {
        type_: ty.into(),
        status: status.into(),
        ..Default::default()
    }
}

fn node(ready: &str) -> HealthNode {
    HealthNode {
        deleting: false,
        view: NodeView {
            conditions: vec![cond("Ready", ready)],
            critical_components_not_ready: false,
            startup_taint: None,
        },
    }
}

fn with_node(m: MachineView) -> MachineView {
    MachineView {
        node: Some("n1".into()),
        conditions: vec![cond("Ready", "True")],
        ..m
    }
}

fn at(minutes: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::minutes(minutes)
}

#[test]
fn the_health_check_starts_by_reading_the_node() {
    let mut f = HealthFlow::new();
    assert_eq!(
        f.next(&view(Phase::Running), HealthOutcome::Start, t0()),
        HealthStep::ReadNode
    );
}

#[test]
fn a_node_being_deleted_deletes_its_machine_and_requeues() {
    let m = with_node(view(Phase::Running));
    let mut f = HealthFlow::new();
    let deleting = HealthNode {
        deleting: true,
        ..node("True")
    };
    assert_eq!(
        f.next(&m, HealthOutcome::NodeRead(Some(deleting)), t0()),
        HealthStep::DeleteMachine
    );
    assert_eq!(
        f.next(&m, HealthOutcome::MachineDeleted, t0()),
        HealthStep::Requeue
    );
}

#[test]
fn a_healthy_running_machine_continues_without_a_write() {
    let m = with_node(view(Phase::Running));
    let mut f = HealthFlow::new();
    assert_eq!(
        f.next(&m, HealthOutcome::NodeRead(Some(node("True"))), t0()),
        HealthStep::Continue(None)
    );
}

#[test]
fn changed_conditions_alone_are_written_and_the_check_continues() {
    let m = MachineView {
        conditions: vec![cond("Ready", "True"), cond("DiskPressure", "False")],
        ..with_node(view(Phase::Running))
    };
    let mut f = HealthFlow::new();
    let step = f.next(&m, HealthOutcome::NodeRead(Some(node("True"))), t0());
    assert_eq!(
        step,
        HealthStep::WriteConditions(vec![cond("Ready", "True")])
    );
    assert_eq!(
        f.next(&m, HealthOutcome::Written, t0()),
        HealthStep::Continue(None)
    );
}

#[test]
fn an_unhealthy_running_machine_is_written_unknown_and_requeued() {
    let m = with_node(view(Phase::Running));
    let mut f = HealthFlow::new();
    let step = f.next(&m, HealthOutcome::NodeRead(Some(node("False"))), t0());
    let HealthStep::Write {
        transition,
        conditions,
        release_mark,
    } = step
    else {
        panic!("expected a write, got {step:?}");
    };
    assert_eq!(transition.phase, Some(Phase::Unknown));
    assert_eq!(conditions, Some(vec![cond("Ready", "False")]));
    assert!(!release_mark);
    assert_eq!(
        f.next(&m, HealthOutcome::Written, t0()),
        HealthStep::Requeue
    );
}

#[test]
fn a_first_join_is_written_then_recorded() {
    let m = MachineView {
        last_operation: Some(("Creating".into(), OpState::Processing, OpType::Create)),
        ..with_node(view(Phase::Pending))
    };
    let mut f = HealthFlow::new();
    let step = f.next(&m, HealthOutcome::NodeRead(Some(node("True"))), t0());
    assert!(
        matches!(&step, HealthStep::Write { transition, .. } if transition.phase == Some(Phase::Running))
    );
    assert_eq!(f.next(&m, HealthOutcome::Written, t0()), HealthStep::Joined);
    assert_eq!(
        f.next(&m, HealthOutcome::JoinRecorded, t0()),
        HealthStep::Requeue
    );
}

#[test]
fn a_pending_machine_past_its_creation_timeout_fails_and_is_counted() {
    let m = MachineView {
        node: Some("n1".into()),
        ..view(Phase::Pending)
    };
    let mut f = HealthFlow::new();
    let step = f.next(&m, HealthOutcome::NodeRead(None), at(21));
    assert!(
        matches!(&step, HealthStep::Write { transition, release_mark: false, .. } if transition.phase == Some(Phase::Failed))
    );
    assert_eq!(
        f.next(&m, HealthOutcome::Written, at(21)),
        HealthStep::CountFailedJoin
    );
    assert_eq!(
        f.next(&m, HealthOutcome::Counted, at(21)),
        HealthStep::Requeue
    );
}

#[test]
fn an_unknown_machine_past_its_health_timeout_asks_the_limiter_first() {
    let m = with_node(view(Phase::Unknown));
    let mut f = HealthFlow::new();
    assert_eq!(
        f.next(&m, HealthOutcome::NodeRead(Some(node("False"))), at(11)),
        HealthStep::WriteConditions(vec![cond("Ready", "False")])
    );
    // With the conditions already copied, the timeout decides.
    let m = MachineView {
        conditions: vec![cond("Ready", "False")],
        ..m
    };
    let mut f = HealthFlow::new();
    assert_eq!(
        f.next(&m, HealthOutcome::NodeRead(Some(node("False"))), at(11)),
        HealthStep::AskFailedMark
    );
    let step = f.next(&m, HealthOutcome::FailedMark(true), at(11));
    assert!(
        matches!(&step, HealthStep::Write { transition, release_mark: true, .. } if transition.phase == Some(Phase::Failed))
    );
    assert_eq!(
        f.next(&m, HealthOutcome::Written, at(11)),
        HealthStep::Requeue
    );
}

#[test]
fn a_refused_failed_mark_keeps_the_machine_unknown_and_requeues() {
    let m = MachineView {
        conditions: vec![cond("Ready", "False")],
        ..with_node(view(Phase::Unknown))
    };
    let mut f = HealthFlow::new();
    f.next(&m, HealthOutcome::NodeRead(Some(node("False"))), at(11));
    assert_eq!(
        f.next(&m, HealthOutcome::FailedMark(false), at(11)),
        HealthStep::Requeue
    );
}

#[test]
fn a_timeout_not_reached_yet_continues_with_a_recheck() {
    let m = MachineView {
        conditions: vec![cond("Ready", "False")],
        ..with_node(view(Phase::Unknown))
    };
    let mut f = HealthFlow::new();
    let step = f.next(&m, HealthOutcome::NodeRead(Some(node("False"))), at(5));
    assert!(matches!(step, HealthStep::Continue(Some(_))), "{step:?}");
}

#[test]
fn a_machine_held_for_its_initialization_warns_once_then_continues() {
    let m = MachineView {
        last_operation: Some((
            format!("Provider error: x. {}", markers::INSTANCE_INITIALIZATION),
            OpState::Failed,
            OpType::Create,
        )),
        ..with_node(view(Phase::CrashLoopBackOff))
    };
    let mut f = HealthFlow::new();
    let step = f.next(&m, HealthOutcome::NodeRead(Some(node("True"))), t0());
    assert!(
        matches!(&step, HealthStep::Warn { reason: "InitializationPending", note } if note.contains("n1")),
        "{step:?}"
    );
    assert_eq!(
        f.next(&m, HealthOutcome::Warned, t0()),
        HealthStep::Continue(None)
    );
}

#[test]
fn the_failure_limiter_does_not_count_preserved_siblings() {
    let preserved = MachineView {
        name: "p".into(),
        preserve_expiry: Some(t0()),
        ..view(Phase::Failed)
    };
    let other = MachineView {
        name: "o".into(),
        ..view(Phase::Running)
    };
    assert_eq!(
        limiter_siblings(&[preserved, other]),
        vec![("o".to_string(), Phase::Running)]
    );
}

#[test]
fn after_a_freeze_only_unknown_machines_are_reset_to_running() {
    let t = reset_after_freeze(&view(Phase::Unknown));
    assert_eq!(
        t.as_ref().and_then(|t| t.phase.clone()),
        Some(Phase::Running)
    );
    assert_eq!(t.map(|t| t.operation.state), Some(OpState::Successful));
    for phase in [
        Phase::Running,
        Phase::Pending,
        Phase::Failed,
        Phase::Terminating,
    ] {
        assert_eq!(reset_after_freeze(&view(phase.clone())), None, "{phase:?}");
    }
}

#[test]
fn a_node_being_deleted_with_the_critical_taint_is_read_as_such() {
    use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use mcm_api::constants as c;
    let taint = |effect: &str| Taint {
        key: c::CRITICAL_COMPONENTS_NOT_READY_TAINT.into(),
        effect: effect.into(),
        ..Taint::default()
    };
    let n = Node {
        metadata: ObjectMeta {
            deletion_timestamp: Some(crate::time::to_k8s(t0())),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![taint("NoSchedule")]),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![cond("Ready", "True")]),
            ..NodeStatus::default()
        }),
    };
    let read = HealthNode::of(&n, Some("held".into()));
    assert!(read.deleting);
    assert!(read.view.critical_components_not_ready);
    assert_eq!(read.view.conditions, vec![cond("Ready", "True")]);
    assert_eq!(read.view.startup_taint.as_deref(), Some("held"));
    let other_effect = Node {
        metadata: ObjectMeta::default(),
        spec: Some(NodeSpec {
            taints: Some(vec![taint("NoExecute")]),
            ..NodeSpec::default()
        }),
        ..n
    };
    let read = HealthNode::of(&other_effect, None);
    assert!(!read.deleting);
    assert!(!read.view.critical_components_not_ready);
}

#[test]
fn the_limiter_groups_machines_by_their_deployments_name_label() {
    let mut m = view(Phase::Unknown);
    assert_eq!(limiter_group(&m), None);
    m.labels.insert("name".into(), "d1".into());
    assert_eq!(limiter_group(&m), Some("d1"));
}
