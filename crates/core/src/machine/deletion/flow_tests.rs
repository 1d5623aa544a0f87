//! One test per transition of [`DeletionFlow::next`].

use super::*;
use crate::machine::markers::*;
use mcm_api::{MachineOperationType as OpType, MachinePhase as Phase};
use mcm_driver::MachineIdentity;

fn at(marker: &str) -> MachineView {
    MachineView {
        name: "m1".into(),
        has_finalizer: true,
        phase: Phase::Terminating,
        node: Some("n1".into()),
        last_operation: Some((marker.into(), OpState::Processing, OpType::Delete)),
        ..MachineView::default()
    }
}

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
}

/// A flow with usable inputs and a VM that may exist; `target`: whether
/// there is a target cluster.
fn new_flow(target: bool) -> DeletionFlow {
    DeletionFlow::new(target.then_some(()), Inputs::Usable(()), VmRecord::Unknown)
}

/// Starts `flow` over with usable inputs and this record.
fn start(flow: &mut DeletionFlow, m: &MachineView, record: VmRecord) -> DeletionStep {
    *flow = DeletionFlow::new(flow.target, Inputs::Usable(()), record);
    flow.next(m, DeletionOutcome::Start, now())
}

/// A flow with these inputs and this record, and its first step.
fn started(
    target: bool,
    m: &MachineView,
    inputs: Inputs,
    record: VmRecord,
) -> (DeletionFlow, DeletionStep) {
    let mut flow = DeletionFlow::new(target.then_some(()), inputs, record);
    let step = flow.next(m, DeletionOutcome::Start, now());
    (flow, step)
}

fn unusable() -> Inputs {
    Inputs::Unusable {
        retry_after: Duration::from_secs(7),
    }
}

fn recorded(step: &DeletionStep) -> &DeletionRecord {
    match step {
        DeletionStep::Record(r) => r,
        other => panic!("expected a record, got {other:?}"),
    }
}

fn ends_with(step: &DeletionStep, marker: &str) -> bool {
    recorded(step)
        .transition
        .operation
        .description
        .ends_with(marker)
}

// --- vm_deletion: whether DeleteMachine runs

#[test]
fn delete_machine_runs_when_the_provider_is_usable_and_answers() {
    for record in [VmRecord::HasVm, VmRecord::NeverCreated, VmRecord::Unknown] {
        assert_eq!(
            vm_deletion(record, &Inputs::Usable(()), None),
            VmDeletion::Runs(record)
        );
        let nf = Err(Status::not_found("x"));
        assert_eq!(
            vm_deletion(record, &Inputs::Usable(()), Some(&nf)),
            VmDeletion::Runs(record)
        );
    }
}

#[test]
fn delete_machine_is_skipped_only_for_a_machine_that_never_had_a_vm() {
    assert_eq!(
        vm_deletion(VmRecord::NeverCreated, &unusable(), None),
        VmDeletion::SkippedInputsUnusable
    );
    let refused = Err(Status::invalid_argument("cannot decode"));
    assert_eq!(
        vm_deletion(VmRecord::NeverCreated, &Inputs::Usable(()), Some(&refused)),
        VmDeletion::SkippedProviderRefused
    );
    for record in [
        VmRecord::HasVm,
        VmRecord::CreateAttempted,
        VmRecord::Unknown,
    ] {
        assert_eq!(
            vm_deletion(record, &unusable(), None),
            VmDeletion::Blocked(record)
        );
        assert_eq!(
            vm_deletion(record, &Inputs::Usable(()), Some(&refused)),
            VmDeletion::Blocked(record)
        );
    }
}

// --- Start

#[test]
fn unusable_inputs_with_a_possible_vm_wait_for_the_input_check() {
    let (_, step) = started(true, &at(GET_VM_STATUS), unusable(), VmRecord::Unknown);
    assert_eq!(
        step,
        DeletionStep::Wait(Retry::After(Duration::from_secs(7)))
    );
}

#[test]
fn unusable_inputs_without_a_vm_skip_the_provider_steps_with_a_written_note() {
    for marker in [
        GET_VM_STATUS,
        INITIATE_DRAIN,
        DELETE_VOLUME_ATTACHMENTS,
        INITIATE_VM_DELETION,
    ] {
        let (_, step) = started(true, &at(marker), unusable(), VmRecord::NeverCreated);
        let r = recorded(&step);
        assert_eq!(r.write, Write::Now, "{marker}");
        assert!(ends_with(&step, INITIATE_NODE_DELETION), "{marker}");
        assert_eq!(r.event.as_ref().map(|e| e.reason), Some("NoVmToDelete"));
    }
}

#[test]
fn a_machine_not_yet_terminating_is_set_terminating_first() {
    let mut flow = new_flow(true);
    let m = MachineView {
        phase: Phase::Running,
        ..at("")
    };
    let step = start(&mut flow, &m, VmRecord::HasVm);
    assert_eq!(recorded(&step).transition, set_terminating());
    assert_eq!(recorded(&step).write, Write::Stage);
    // Without a usable provider the write is immediate.
    let (_, step) = started(true, &m, unusable(), VmRecord::NeverCreated);
    assert_eq!(recorded(&step).write, Write::Now);
}

#[test]
fn a_terminating_machine_without_the_finalizer_is_requeued() {
    // Upstream #1157: no reconcile of a terminating machine ends without a requeue.
    let mut flow = new_flow(true);
    let m = MachineView {
        has_finalizer: false,
        ..at(INITIATE_DRAIN)
    };
    assert_eq!(
        start(&mut flow, &m, VmRecord::HasVm),
        DeletionStep::Wait(Retry::Long)
    );
}

#[test]
fn a_recorded_step_goes_on_with_the_stage_the_view_shows() {
    let mut flow = new_flow(true);
    assert_eq!(
        flow.next(&at(INITIATE_VM_DELETION), DeletionOutcome::Recorded, now()),
        DeletionStep::DeleteVm(())
    );
    assert_eq!(
        flow.next(
            &at(INITIATE_NODE_DELETION),
            DeletionOutcome::Recorded,
            now()
        ),
        DeletionStep::DeleteNode {
            node: "n1".into(),
            target: ()
        }
    );
    assert_eq!(
        flow.next(
            &at(INITIATE_FINALIZER_REMOVAL),
            DeletionOutcome::Recorded,
            now()
        ),
        DeletionStep::RemoveFinalizer
    );
}

#[test]
fn a_flow_that_does_not_advance_stops_with_a_short_requeue() {
    let mut flow = new_flow(true);
    let m = at(GET_VM_STATUS);
    let mut last = start(&mut flow, &m, VmRecord::HasVm);
    for _ in 0..MAX_STAGES {
        last = flow.next(&m, DeletionOutcome::Recorded, now());
    }
    assert_eq!(last, DeletionStep::Wait(Retry::Short));
}

// --- GetVmStatus: cache, probe or skip

#[test]
fn get_vm_status_with_a_node_label_goes_to_the_drain_without_a_call() {
    let mut flow = new_flow(true);
    let step = start(&mut flow, &at(GET_VM_STATUS), VmRecord::HasVm);
    assert!(ends_with(&step, INITIATE_DRAIN));
    assert_eq!(recorded(&step).write, Write::Stage);
}

#[test]
fn get_vm_status_without_a_target_cluster_goes_to_vm_deletion() {
    let mut flow = new_flow(false);
    let step = start(&mut flow, &at(GET_VM_STATUS), VmRecord::HasVm);
    assert!(ends_with(&step, INITIATE_VM_DELETION));
}

#[test]
fn get_vm_status_without_a_node_label_looks_in_the_node_cache_first() {
    let mut flow = new_flow(true);
    let m = MachineView {
        node: None,
        ..at(GET_VM_STATUS)
    };
    assert_eq!(
        start(&mut flow, &m, VmRecord::HasVm),
        DeletionStep::FindNode
    );
    assert_eq!(
        flow.next(&m, DeletionOutcome::NodeFound(Some("n9".into())), now()),
        DeletionStep::LabelNode("n9".into())
    );
    let step = flow.next(&m, DeletionOutcome::NodeLabelled, now());
    assert!(ends_with(&step, INITIATE_DRAIN));
}

#[test]
fn get_vm_status_probes_when_no_node_names_the_machine() {
    let mut flow = new_flow(true);
    let m = MachineView {
        node: None,
        ..at(GET_VM_STATUS)
    };
    start(&mut flow, &m, VmRecord::HasVm);
    assert_eq!(
        flow.next(&m, DeletionOutcome::NodeFound(None), now()),
        DeletionStep::Probe(())
    );
    let answer = GetMachineStatusResponse {
        provider_id: "p".into(),
        node_name: "n2".into(),
        ..Default::default()
    };
    assert_eq!(
        flow.next(&m, DeletionOutcome::Probed(Ok(answer)), now()),
        DeletionStep::LabelNode("n2".into())
    );
}

#[test]
fn an_uninitialized_vm_names_its_node_and_the_flow_drains_it() {
    let mut flow = new_flow(true);
    let m = MachineView {
        node: None,
        ..at(GET_VM_STATUS)
    };
    start(&mut flow, &m, VmRecord::Unknown);
    flow.next(&m, DeletionOutcome::NodeFound(None), now());
    let mut e = Status::new(Code::Uninitialized, "x");
    e.machine = Some(Box::new(MachineIdentity {
        provider_id: "p".into(),
        node_name: "n3".into(),
        addresses: Vec::new(),
    }));
    assert_eq!(
        flow.next(&m, DeletionOutcome::Probed(Err(e)), now()),
        DeletionStep::LabelNode("n3".into())
    );
    let step = flow.next(&m, DeletionOutcome::NodeLabelled, now());
    assert!(ends_with(&step, INITIATE_DRAIN));
    assert_eq!(recorded(&step).write, Write::Stage);
}

#[test]
fn a_vm_not_found_goes_on_to_the_drain() {
    let mut flow = new_flow(true);
    let m = MachineView {
        node: None,
        ..at(GET_VM_STATUS)
    };
    start(&mut flow, &m, VmRecord::HasVm);
    let step = flow.next(
        &m,
        DeletionOutcome::Probed(Err(Status::not_found("gone"))),
        now(),
    );
    assert!(ends_with(&step, INITIATE_DRAIN));
}

#[test]
fn a_probe_refused_for_a_possible_vm_is_written_now_and_backs_off() {
    let mut flow = new_flow(true);
    let m = MachineView {
        node: None,
        ..at(GET_VM_STATUS)
    };
    start(&mut flow, &m, VmRecord::CreateAttempted);
    let step = flow.next(
        &m,
        DeletionOutcome::Probed(Err(Status::invalid_argument("cannot decode"))),
        now(),
    );
    let r = recorded(&step);
    assert_eq!(r.write, Write::Now);
    assert_eq!(r.transition.operation.state, OpState::Failed);
    assert_eq!(r.event.as_ref().map(|e| e.reason), Some("DeletionBlocked"));
    assert_eq!(
        flow.next(&m, DeletionOutcome::Recorded, now()),
        DeletionStep::Wait(Retry::Backoff(RetryClass::Normal))
    );
}

#[test]
fn a_probe_refused_for_a_never_created_machine_skips_to_the_node() {
    let mut flow = new_flow(true);
    let m = MachineView {
        node: None,
        ..at(GET_VM_STATUS)
    };
    start(&mut flow, &m, VmRecord::NeverCreated);
    let step = flow.next(
        &m,
        DeletionOutcome::Probed(Err(Status::invalid_argument("cannot decode"))),
        now(),
    );
    assert!(ends_with(&step, INITIATE_NODE_DELETION));
    assert_eq!(recorded(&step).write, Write::Stage);
}

// --- Drain

#[test]
fn the_drain_stage_asks_for_the_drain_task_and_starts_one_when_idle() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_DRAIN);
    assert_eq!(
        start(&mut flow, &m, VmRecord::HasVm),
        DeletionStep::CheckDrain
    );
    let step = flow.next(&m, DeletionOutcome::Drain(DrainProgress::Idle), now());
    assert_eq!(
        step,
        DeletionStep::StartDrain {
            plan: plan_drain(&m, now()),
            node: "n1".into(),
            target: (),
            provider: ()
        }
    );
    assert_eq!(
        flow.next(&m, DeletionOutcome::DrainStarted, now()),
        DeletionStep::Wait(Retry::Long)
    );
}

#[test]
fn a_running_drain_is_waited_for() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_DRAIN);
    start(&mut flow, &m, VmRecord::HasVm);
    assert_eq!(
        flow.next(
            &m,
            DeletionOutcome::Drain(DrainProgress::Running { force: false }),
            now()
        ),
        DeletionStep::Wait(Retry::Long)
    );
}

#[test]
fn a_forced_drain_supersedes_a_running_normal_one() {
    let mut flow = new_flow(true);
    let m = MachineView {
        force_deletion: true,
        ..at(INITIATE_DRAIN)
    };
    start(&mut flow, &m, VmRecord::HasVm);
    let step = flow.next(
        &m,
        DeletionOutcome::Drain(DrainProgress::Running { force: false }),
        now(),
    );
    assert!(matches!(step, DeletionStep::StartDrain { plan, .. } if plan.force));
}

#[test]
fn a_finished_drain_is_staged_and_the_flow_goes_on() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_DRAIN);
    start(&mut flow, &m, VmRecord::HasVm);
    let plan = plan_drain(&m, now());
    let step = flow.next(
        &m,
        DeletionOutcome::Drain(DrainProgress::Finished {
            plan,
            result: Ok(()),
        }),
        now(),
    );
    assert!(ends_with(&step, INITIATE_VM_DELETION));
    assert_eq!(recorded(&step).write, Write::Stage);
    assert_eq!(recorded(&step).event, None);
}

#[test]
fn a_failed_normal_drain_is_written_now_and_backs_off() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_DRAIN);
    start(&mut flow, &m, VmRecord::HasVm);
    let plan = plan_drain(&m, now());
    let step = flow.next(
        &m,
        DeletionOutcome::Drain(DrainProgress::Finished {
            plan,
            result: Err("pdb".into()),
        }),
        now(),
    );
    assert_eq!(recorded(&step).write, Write::Now);
    assert_eq!(
        recorded(&step).event.as_ref().map(|e| e.reason),
        Some("DrainFailed")
    );
    assert_eq!(
        flow.next(&m, DeletionOutcome::Recorded, now()),
        DeletionStep::Wait(Retry::Backoff(RetryClass::Normal))
    );
}

#[test]
fn a_failed_forced_drain_goes_on_to_the_volume_attachments() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_DRAIN);
    start(&mut flow, &m, VmRecord::HasVm);
    let plan = DrainPlan {
        force: true,
        timeout: Duration::from_secs(60),
        max_evict_retries: 1,
    };
    let step = flow.next(
        &m,
        DeletionOutcome::Drain(DrainProgress::Finished {
            plan,
            result: Err("x".into()),
        }),
        now(),
    );
    assert!(ends_with(&step, DELETE_VOLUME_ATTACHMENTS));
    assert_eq!(recorded(&step).write, Write::Stage);
    assert!(recorded(&step).event.is_some());
}

#[test]
fn a_machine_without_a_node_skips_the_drain_with_a_written_note() {
    let mut flow = new_flow(true);
    let m = MachineView {
        node: None,
        ..at(INITIATE_DRAIN)
    };
    let step = start(&mut flow, &m, VmRecord::HasVm);
    assert!(ends_with(&step, INITIATE_VM_DELETION));
    assert_eq!(recorded(&step).write, Write::Now);
}

// --- VolumeAttachments

#[test]
fn live_attachments_are_those_on_the_node_and_not_being_deleted() {
    let va = |name: &str, node: &str, deleting| AttachmentView {
        name: name.into(),
        node_name: node.into(),
        deleting,
    };
    let all = [
        va("a", "n1", false),
        va("b", "n1", true),
        va("c", "n2", false),
    ];
    assert_eq!(live_attachments("n1", &all), vec!["a".to_string()]);
}

#[test]
fn only_a_node_reporting_attached_volumes_sends_the_flow_to_the_attachments() {
    use k8s_openapi::api::core::v1::{AttachedVolume, Node, NodeStatus};
    let with = |volumes: Option<Vec<AttachedVolume>>| Node {
        status: Some(NodeStatus {
            volumes_attached: volumes,
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    assert_eq!(NodeVolumes::of(None), NodeVolumes::NodeGone);
    assert_eq!(
        NodeVolumes::of(Some(&Node::default())),
        NodeVolumes::NoneAttached
    );
    assert_eq!(
        NodeVolumes::of(Some(&with(Some(vec![])))),
        NodeVolumes::NoneAttached
    );
    let attached = AttachedVolume {
        name: "kubernetes.io/csi/pv-1".into(),
        device_path: String::new(),
    };
    assert_eq!(
        NodeVolumes::of(Some(&with(Some(vec![attached])))),
        NodeVolumes::Attached
    );
}

#[test]
fn an_attachment_being_deleted_is_seen_as_such() {
    use k8s_openapi::api::storage::v1::{VolumeAttachment, VolumeAttachmentSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let v = VolumeAttachment {
        metadata: ObjectMeta {
            name: Some("va-1".into()),
            deletion_timestamp: Some(crate::time::to_k8s(now())),
            ..ObjectMeta::default()
        },
        spec: VolumeAttachmentSpec {
            node_name: "n1".into(),
            ..VolumeAttachmentSpec::default()
        },
        status: None,
    };
    assert_eq!(
        AttachmentView::of(&v),
        AttachmentView {
            name: "va-1".into(),
            node_name: "n1".into(),
            deleting: true,
        }
    );
}

#[test]
fn live_attachments_are_deleted_and_the_machine_requeued_soon() {
    let mut flow = new_flow(true);
    let m = at(DELETE_VOLUME_ATTACHMENTS);
    assert_eq!(
        start(&mut flow, &m, VmRecord::HasVm),
        DeletionStep::CheckNodeVolumes {
            node: "n1".into(),
            target: ()
        }
    );
    assert_eq!(
        flow.next(
            &m,
            DeletionOutcome::NodeVolumes(NodeVolumes::Attached),
            now()
        ),
        DeletionStep::ListAttachments(())
    );
    let listed = vec![AttachmentView {
        name: "a".into(),
        node_name: "n1".into(),
        deleting: false,
    }];
    assert_eq!(
        flow.next(&m, DeletionOutcome::Attachments(listed), now()),
        DeletionStep::DeleteAttachments {
            names: vec!["a".into()],
            target: ()
        }
    );
    // Without error and without progress: requeued all the same (#1157).
    assert_eq!(
        flow.next(&m, DeletionOutcome::AttachmentsDeleted, now()),
        DeletionStep::Wait(Retry::Short)
    );
}

#[test]
fn no_live_attachments_go_on_to_vm_deletion() {
    let mut flow = new_flow(true);
    let m = at(DELETE_VOLUME_ATTACHMENTS);
    start(&mut flow, &m, VmRecord::HasVm);
    let step = flow.next(&m, DeletionOutcome::Attachments(Vec::new()), now());
    assert!(ends_with(&step, INITIATE_VM_DELETION));
    assert_eq!(recorded(&step).write, Write::Stage);
    // Without a target cluster there is nothing to list.
    let mut without = new_flow(false);
    let step = start(&mut without, &m, VmRecord::HasVm);
    assert!(ends_with(&step, INITIATE_VM_DELETION));
}

#[test]
fn a_node_gone_or_without_attached_volumes_goes_on_to_vm_deletion_without_listing() {
    for volumes in [NodeVolumes::NodeGone, NodeVolumes::NoneAttached] {
        let mut flow = new_flow(true);
        let m = at(DELETE_VOLUME_ATTACHMENTS);
        assert_eq!(
            start(&mut flow, &m, VmRecord::HasVm),
            DeletionStep::CheckNodeVolumes {
                node: "n1".into(),
                target: ()
            }
        );
        let step = flow.next(&m, DeletionOutcome::NodeVolumes(volumes), now());
        assert!(ends_with(&step, INITIATE_VM_DELETION), "{volumes:?}");
        assert_eq!(recorded(&step).write, Write::Stage);
        assert_eq!(
            recorded(&step).transition.operation.state,
            OpState::Processing
        );
    }
}

// --- DeleteVm

#[test]
fn a_paced_vm_deletion_waits_for_its_turn_keeping_what_it_staged() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_VM_DELETION);
    start(&mut flow, &m, VmRecord::HasVm);
    let step = flow.next(
        &m,
        DeletionOutcome::NotYourTurn(Duration::from_secs(3)),
        now(),
    );
    assert_eq!(
        step,
        DeletionStep::Wait(Retry::Turn(Duration::from_secs(3)))
    );
    let DeletionStep::Wait(retry) = step else {
        unreachable!()
    };
    assert!(
        retry.keeps_staged(false),
        "a turn's wait carries the staged records"
    );
    assert!(
        !retry.keeps_staged(true),
        "but writes them when they change the phase"
    );
}

#[test]
fn every_other_wait_writes_what_was_staged() {
    for r in [
        Retry::Short,
        Retry::Long,
        Retry::Backoff(RetryClass::Normal),
        Retry::After(Duration::from_secs(1)),
    ] {
        assert!(!r.keeps_staged(false), "{r:?}");
    }
}

#[test]
fn a_deleted_vm_is_staged_with_its_last_known_state() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_VM_DELETION);
    start(&mut flow, &m, VmRecord::HasVm);
    let step = flow.next(
        &m,
        DeletionOutcome::VmDeleted(Ok(DeleteMachineResponse {
            last_known_state: "s".into(),
        })),
        now(),
    );
    let r = recorded(&step);
    assert_eq!(r.write, Write::Stage);
    assert_eq!(r.last_known_state.as_deref(), Some("s"));
    assert!(ends_with(&step, INITIATE_NODE_DELETION));
    assert_eq!(
        flow.next(
            &at(INITIATE_NODE_DELETION),
            DeletionOutcome::Recorded,
            now()
        ),
        DeletionStep::DeleteNode {
            node: "n1".into(),
            target: ()
        }
    );
}

#[test]
fn a_failed_vm_deletion_backs_off_by_the_error_class() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_VM_DELETION);
    start(&mut flow, &m, VmRecord::HasVm);
    let step = flow.next(
        &m,
        DeletionOutcome::VmDeleted(Err(Status::new(Code::ResourceExhausted, "slow down"))),
        now(),
    );
    assert_eq!(
        recorded(&step).event.as_ref().map(|e| e.reason),
        Some("DeleteMachineFailed")
    );
    assert_eq!(
        flow.next(&m, DeletionOutcome::Recorded, now()),
        DeletionStep::Wait(Retry::Backoff(RetryClass::Throttled))
    );
}

#[test]
fn a_vm_deletion_refused_for_a_never_created_machine_goes_on() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_VM_DELETION);
    start(&mut flow, &m, VmRecord::NeverCreated);
    let step = flow.next(
        &m,
        DeletionOutcome::VmDeleted(Err(Status::invalid_argument("x"))),
        now(),
    );
    assert!(ends_with(&step, INITIATE_NODE_DELETION));
    assert_eq!(recorded(&step).event, None);
}

// --- Node and finalizer

#[test]
fn a_deleted_node_is_staged_and_the_finalizer_removed_next() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_NODE_DELETION);
    assert_eq!(
        start(&mut flow, &m, VmRecord::HasVm),
        DeletionStep::DeleteNode {
            node: "n1".into(),
            target: ()
        }
    );
    let step = flow.next(
        &m,
        DeletionOutcome::NodeDeleted(NodeDeletion::Deleted("n1".into())),
        now(),
    );
    assert_eq!(recorded(&step).write, Write::Stage);
    assert!(ends_with(&step, INITIATE_FINALIZER_REMOVAL));
}

#[test]
fn a_failed_node_read_finalizer_removal_or_deletion_is_written_now_and_backs_off() {
    for failure in [
        NodeDeletion::ReadFailed("n1".into(), "e".into()),
        NodeDeletion::FinalizerRemovalFailed("n1".into(), "e".into()),
        NodeDeletion::Failed("n1".into(), "e".into()),
    ] {
        let mut flow = new_flow(true);
        let m = at(INITIATE_NODE_DELETION);
        start(&mut flow, &m, VmRecord::HasVm);
        let step = flow.next(&m, DeletionOutcome::NodeDeleted(failure.clone()), now());
        assert_eq!(recorded(&step).write, Write::Now, "{failure:?}");
        assert!(ends_with(&step, INITIATE_NODE_DELETION), "{failure:?}");
        assert_eq!(
            flow.next(&m, DeletionOutcome::Recorded, now()),
            DeletionStep::Wait(Retry::Backoff(RetryClass::Normal))
        );
    }
}

#[test]
fn only_a_removed_finalizer_ends_the_flow_without_a_requeue() {
    let mut flow = new_flow(true);
    let m = at(INITIATE_FINALIZER_REMOVAL);
    assert_eq!(
        start(&mut flow, &m, VmRecord::HasVm),
        DeletionStep::RemoveFinalizer
    );
    assert_eq!(
        flow.next(&m, DeletionOutcome::FinalizerRemoved, now()),
        DeletionStep::Done
    );
}

/// Upstream #1157: whatever a step answers, a reconcile of a terminating
/// machine ends in `Wait` (a requeue) unless the finalizer was removed. The
/// flow is driven to its end from every stage with every answer that makes
/// no progress.
#[test]
fn a_terminating_machine_is_always_requeued_unless_its_finalizer_is_gone() {
    let stuck = [
        DeletionOutcome::NodeFound(None),
        DeletionOutcome::Probed(Err(Status::new(Code::Unavailable, "x"))),
        DeletionOutcome::Drain(DrainProgress::Running { force: true }),
        DeletionOutcome::DrainStarted,
        DeletionOutcome::AttachmentsDeleted,
        DeletionOutcome::NotYourTurn(Duration::ZERO),
        DeletionOutcome::VmDeleted(Err(Status::new(Code::Unavailable, "x"))),
        DeletionOutcome::NodeDeleted(NodeDeletion::Failed("n1".into(), "e".into())),
    ];
    for marker in [
        "",
        GET_VM_STATUS,
        INITIATE_DRAIN,
        DELETE_VOLUME_ATTACHMENTS,
        INITIATE_VM_DELETION,
        INITIATE_NODE_DELETION,
    ] {
        for answer in &stuck {
            let m = at(marker);
            let mut flow = new_flow(true);
            let mut step = start(&mut flow, &m, VmRecord::HasVm);
            // The first effect answers without progress; every record after it
            // is recorded without moving the view.
            let mut outcome = answer.clone();
            for _ in 0..64 {
                step = match step {
                    DeletionStep::Wait(_) | DeletionStep::Done => break,
                    DeletionStep::Record(_) => flow.next(&m, DeletionOutcome::Recorded, now()),
                    _ => {
                        let o = std::mem::replace(&mut outcome, DeletionOutcome::Recorded);
                        flow.next(&m, o, now())
                    }
                };
            }
            assert!(
                matches!(step, DeletionStep::Wait(_)),
                "{marker:?} / {answer:?} ended in {step:?}"
            );
        }
    }
}

// --- The means of each effect

/// A target cluster handle only this test can make: the flow can hand one
/// out only from the one it was given.
#[derive(Debug, Clone, PartialEq)]
struct Cluster;

/// A provider handle only this test can make.
#[derive(Debug, Clone, PartialEq)]
struct Provider;

/// What a step needs that the flow may lack.
fn needs(step: &DeletionStep<Provider, Cluster>) -> (bool, Option<&str>, bool) {
    // (target cluster, node, provider)
    match step {
        DeletionStep::FindNode | DeletionStep::CheckDrain => (true, None, false),
        DeletionStep::Probe(_) | DeletionStep::DeleteVm(_) => (false, None, true),
        DeletionStep::StartDrain { node, .. } => (true, Some(node), true),
        DeletionStep::CheckNodeVolumes { node, .. } | DeletionStep::DeleteNode { node, .. } => {
            (true, Some(node), false)
        }
        DeletionStep::ListAttachments(_) | DeletionStep::DeleteAttachments { .. } => {
            (true, None, false)
        }
        _ => (false, None, false),
    }
}

/// An answer to each effect that lets the flow go on.
fn answer(step: &DeletionStep<Provider, Cluster>) -> DeletionOutcome {
    match step {
        DeletionStep::FindNode => DeletionOutcome::NodeFound(None),
        DeletionStep::Probe(_) => DeletionOutcome::Probed(Err(Status::not_found("gone"))),
        DeletionStep::LabelNode(_) => DeletionOutcome::NodeLabelled,
        DeletionStep::CheckDrain => DeletionOutcome::Drain(DrainProgress::Idle),
        DeletionStep::StartDrain { .. } => DeletionOutcome::DrainStarted,
        DeletionStep::CheckNodeVolumes { .. } => {
            DeletionOutcome::NodeVolumes(NodeVolumes::Attached)
        }
        DeletionStep::ListAttachments(_) => DeletionOutcome::Attachments(vec![AttachmentView {
            name: "a".into(),
            node_name: "n1".into(),
            deleting: false,
        }]),
        DeletionStep::DeleteAttachments { .. } => DeletionOutcome::AttachmentsDeleted,
        DeletionStep::DeleteVm(_) => {
            DeletionOutcome::VmDeleted(Ok(DeleteMachineResponse::default()))
        }
        DeletionStep::DeleteNode { node, .. } => {
            DeletionOutcome::NodeDeleted(NodeDeletion::Deleted(node.clone()))
        }
        DeletionStep::RemoveFinalizer => DeletionOutcome::FinalizerRemoved,
        DeletionStep::Record(_) | DeletionStep::Wait(_) | DeletionStep::Done => {
            DeletionOutcome::Recorded
        }
    }
}

/// From every stage, with or without a target cluster, a node label and
/// usable inputs, and whatever the machine records about its VM, the flow
/// asks only for effects it has the means for: the target cluster's and
/// the provider's handles it was given, and the Node the machine names. So
/// the runtime performs every step it is given, without a fallback.
#[test]
fn the_flow_never_asks_for_an_effect_it_lacks_the_means_for() {
    let markers = [
        "",
        GET_VM_STATUS,
        INITIATE_DRAIN,
        DELETE_VOLUME_ATTACHMENTS,
        INITIATE_VM_DELETION,
        INITIATE_NODE_DELETION,
        INITIATE_FINALIZER_REMOVAL,
    ];
    let records = [
        VmRecord::HasVm,
        VmRecord::CreateAttempted,
        VmRecord::NeverCreated,
        VmRecord::Unknown,
    ];
    for marker in markers {
        for target in [Some(Cluster), None] {
            for node in [Some("n1".to_string()), None] {
                for usable in [true, false] {
                    for record in records {
                        let m = MachineView {
                            node: node.clone(),
                            ..at(marker)
                        };
                        let inputs = if usable {
                            Inputs::Usable(Provider)
                        } else {
                            Inputs::Unusable {
                                retry_after: Duration::from_secs(7),
                            }
                        };
                        let mut flow = DeletionFlow::new(target.clone(), inputs, record);
                        let mut outcome = DeletionOutcome::Start;
                        let case = format!(
                            "{marker:?} target={} node={node:?} usable={usable} {record:?}",
                            target.is_some()
                        );
                        for _ in 0..32 {
                            let step = flow.next(&m, outcome, now());
                            let (cluster, on_node, provider) = needs(&step);
                            assert!(!cluster || target.is_some(), "{case}: {step:?}");
                            assert!(!provider || usable, "{case}: {step:?}");
                            if let Some(n) = on_node {
                                assert_eq!(Some(n), node.as_deref(), "{case}: {step:?}");
                            }
                            if matches!(step, DeletionStep::CheckDrain) {
                                assert!(node.is_some(), "{case}");
                            }
                            if matches!(step, DeletionStep::Wait(_) | DeletionStep::Done) {
                                break;
                            }
                            outcome = answer(&step);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn volume_attachments_of_a_machine_without_a_node_go_on_with_the_references_not_found_text() {
    // The reference looks up the Node named "" and goes on with its
    // lister's NotFound; the flow never asks to look up a Node it cannot name.
    let m = MachineView {
        node: None,
        ..at(DELETE_VOLUME_ATTACHMENTS)
    };
    let (_, step) = started(true, &m, Inputs::Usable(()), VmRecord::HasVm);
    let r = recorded(&step);
    assert_eq!(
        r.transition.operation.description,
        format!("Skipping deleteNodeVolAttachments due to - node \"\" not found. Moving to VM Deletion. {INITIATE_VM_DELETION}")
    );
    assert_eq!(r.write, Write::Stage);
}

#[test]
fn the_node_step_without_a_target_cluster_or_node_label_records_the_missing_label() {
    for (target, node) in [(true, None), (false, Some("n1".to_string()))] {
        let m = MachineView {
            node,
            ..at(INITIATE_NODE_DELETION)
        };
        let (_, step) = started(target, &m, Inputs::Usable(()), VmRecord::HasVm);
        assert_eq!(
            recorded(&step).transition,
            after_delete_node("m1", &NodeDeletion::NoLabel)
        );
        assert!(ends_with(&step, INITIATE_FINALIZER_REMOVAL));
        assert_eq!(recorded(&step).write, Write::Stage);
    }
}

#[test]
fn unusable_inputs_never_ask_for_the_provider_even_after_the_node_cache() {
    // A flow without a provider that is handed a Node-cache miss does not
    // ask for the probe: it skips the provider steps as its stage does.
    let m = MachineView {
        node: None,
        ..at(GET_VM_STATUS)
    };
    let mut flow: DeletionFlow = DeletionFlow::new(Some(()), unusable(), VmRecord::NeverCreated);
    let step = flow.next(&m, DeletionOutcome::NodeFound(None), now());
    assert!(ends_with(&step, INITIATE_NODE_DELETION));
    assert_eq!(
        recorded(&step).event.as_ref().map(|e| e.reason),
        Some("NoVmToDelete")
    );
}
