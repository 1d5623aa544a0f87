//! Every `lastOperation.description`, condition message and phase-change text
//! mcm-rs writes where the reference writes one, next to the reference's text
//! (design: machine.md, "Texts").
//!
//! Each row: a name, the text our core function produces for a concrete
//! input, and the reference's text written out literally, with the place in
//! Gardener machine-controller-manager v0.62.1 that writes it (paths under
//! `pkg/util/provider/machinecontroller/` unless another directory is named;
//! `master` marks a text taken from upstream master after v0.62.1). A row
//! whose text differs on purpose asserts our text and names the document
//! that explains why ([`Row::deliberate`]).
//!
//! A row is added by calling the function that builds the text (never a copy
//! of the text) in the section of its controller, with the reference's text
//! copied from the Go source and the file:line in a comment.

use crate::deployment::{
    availability_condition, new_set_condition, overshoot_freeze_message, paused_condition,
    progress_message, NewSet, Progress, STATE_SYNC_FREEZE_MESSAGE,
};
use crate::machine::inplace::{
    after_in_place_drain, drain_successful_condition, in_place_result, in_place_timeout,
    node_condition_step, ready_for_update_condition, InPlaceNodeView,
};
use crate::machine::*;
use crate::replicas::{replica_failure, ReplicaFailureChange};
use crate::time::to_k8s;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;
use mcm_api::constants as c;
use mcm_api::{MachineOperationType as OpType, MachinePhase as Phase, MachineState as OpState};
use mcm_driver::{Code, GetMachineStatusResponse, Status};
use std::time::Duration;

/// One text: ours next to the reference's.
struct Row {
    name: &'static str,
    ours: String,
    reference: &'static str,
    /// Where a deliberate difference is documented; `reference` is then our
    /// own text, and the reference's is in the row's comment.
    deliberate: Option<&'static str>,
}

fn row(name: &'static str, ours: impl Into<String>, reference: &'static str) -> Row {
    Row {
        name,
        ours: ours.into(),
        reference,
        deliberate: None,
    }
}

impl Row {
    /// Marks a documented, deliberate difference (`doc`: file and section).
    fn deliberate(mut self, doc: &'static str) -> Row {
        self.deliberate = Some(doc);
        self
    }
}

// --- inputs

/// 2023-11-14 22:13:20 UTC.
fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
}

fn after(secs: u64) -> DateTime<Utc> {
    t0() + Duration::from_secs(secs)
}

fn machine(phase: Phase, last: Option<(&str, OpState, OpType)>) -> MachineView {
    MachineView {
        name: "m1".into(),
        has_finalizer: true,
        created: Some(t0()),
        phase_since: Some(t0()),
        node: Some("n1".into()),
        phase,
        last_operation: last.map(|(d, s, k)| (d.to_string(), s, k)),
        ..MachineView::default()
    }
}

fn ready(status: &str, reason: &str, message: &str) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(to_k8s(t0())),
        last_transition_time: Some(to_k8s(t0())),
    }
}

fn node(conditions: Vec<NodeCondition>) -> NodeView {
    NodeView {
        conditions,
        critical_components_not_ready: false,
        startup_taint: None,
    }
}

fn description(t: Option<Transition>) -> String {
    t.map(|t| t.operation.description).unwrap_or_default()
}

fn health_text(m: &MachineView, n: Option<&NodeView>, now: DateTime<Utc>) -> String {
    description(health(m, n, now).transition)
}

fn err(code: Code, message: &str) -> Status {
    Status::new(code, message)
}

fn in_place_node(labels: &[(&str, &str)], condition: Option<&str>) -> InPlaceNodeView {
    InPlaceNodeView {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: [(
            c::NODE_UPDATE_FAILED_REASON_ANNOTATION.to_string(),
            "disk full".to_string(),
        )]
        .into(),
        condition: condition.map(str::to_string),
        condition_since: None,
    }
}

fn message(c: Option<NodeCondition>) -> String {
    c.and_then(|c| c.message).unwrap_or_default()
}

// --- the rows

fn durations() -> Vec<Row> {
    let d = |secs| format_go_duration(Duration::from_secs(secs));
    vec![
        // Go's time.Duration.String(), e.g. the flags' defaults.
        row("duration 20m", d(20 * 60), "20m0s"),
        row("duration 10m", d(10 * 60), "10m0s"),
        row("duration 2h", d(2 * 3600), "2h0m0s"),
        row("duration 96h", d(96 * 3600), "96h0m0s"),
        row("duration 90s", d(90), "1m30s"),
        row("duration 5s", d(5), "5s"),
        row("duration 0", d(0), "0s"),
        row("duration 1h2m3s", d(3723), "1h2m3s"),
        // Go's time.Time.String() of a UTC time (a `%v` of a metav1.Time).
        row("time", go_time(t0()), "2023-11-14 22:13:20 +0000 UTC"),
        // Go's `%+v` of a []v1.NodeCondition (checked with Go 1.26 and k8s.io/api), an
        // unset time being Go's zero time.
        row(
            "node conditions",
            go_conditions(&[
                ready("False", "KubeletNotReady", "PLEG is not healthy"),
                NodeCondition {
                    type_: "DiskPressure".into(),
                    status: "False".into(),
                    ..NodeCondition::default()
                },
            ]),
            "[{Type:Ready Status:False LastHeartbeatTime:2023-11-14 22:13:20 +0000 UTC LastTransitionTime:2023-11-14 22:13:20 +0000 UTC Reason:KubeletNotReady Message:PLEG is not healthy} {Type:DiskPressure Status:False LastHeartbeatTime:0001-01-01 00:00:00 +0000 UTC LastTransitionTime:0001-01-01 00:00:00 +0000 UTC Reason: Message:}]",
        ),
    ]
}

fn creation() -> Vec<Row> {
    let m = machine(Phase::Pending, None);
    let boom = err(Code::Internal, "boom");
    vec![
        // machine.go:522
        row(
            "created, waiting for the node",
            description(Some(created(true))),
            "Creating machine on cloud provider",
        ),
        // machine.go:536
        row(
            "created without a target cluster",
            description(Some(created(false))),
            "Created machine on cloud provider",
        ),
        // machine_util.go:826
        row(
            "CreateMachine failed",
            description(Some(create_failed(&m, &boom, t0()))),
            "Cloud provider message - machine codes error: code = [Internal] message = [boom]",
        ),
        // machine.go:610
        row(
            "InitializeMachine failed",
            description(Some(initialize_failed(&m, &boom, t0()))),
            "Provider error: machine codes error: code = [Internal] message = [boom]. Initialize VM Instance",
        ),
        // machine.go:432
        row(
            "VM got a stale node's name",
            description(Some(stale_node())),
            "VM using old node obj",
        ),
    ]
}

fn health_texts() -> Vec<Row> {
    let creating = Some((
        "Creating machine on cloud provider",
        OpState::Processing,
        OpType::Create,
    ));
    let healthy = node(vec![ready(
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    )]);
    let not_ready = node(vec![ready(
        "False",
        "KubeletNotReady",
        "PLEG is not healthy",
    )]);
    let mut unknown = machine(Phase::Unknown, None);
    unknown.conditions = not_ready.conditions.clone();
    let mut running = machine(Phase::Running, None);
    running.conditions = healthy.conditions.clone();
    vec![
        // master machine_util.go:969 (#1104; v0.62.1:977 has no duration)
        row(
            "joined",
            health_text(
                &machine(Phase::Pending, creating.clone()),
                Some(&healthy),
                after(303),
            ),
            "Machine m1 successfully joined the cluster in 5m3s",
        ),
        // machine_util.go:987
        row(
            "re-joined",
            health_text(&unknown, Some(&healthy), after(60)),
            "Machine m1 successfully re-joined the cluster",
        ),
        // machine_util.go:987 (a Failed machine whose Node recovered before its
        // MachineSet replaced it)
        row(
            "re-joined after Failed",
            health_text(
                &machine(
                    Phase::Failed,
                    Some(("x", OpState::Failed, OpType::HealthCheck)),
                ),
                Some(&healthy),
                after(60),
            ),
            "Machine m1 successfully re-joined the cluster",
        ),
        // machine_util.go:1011 (`%+v` of the Node's conditions)
        row(
            "unhealthy",
            health_text(&running, Some(&not_ready), after(60)),
            "Machine m1 is unhealthy - changing MachinePhase to Unknown. Node conditions: [{Type:Ready Status:False LastHeartbeatTime:2023-11-14 22:13:20 +0000 UTC LastTransitionTime:2023-11-14 22:13:20 +0000 UTC Reason:KubeletNotReady Message:PLEG is not healthy}]",
        ),
        // machine_util.go:940
        row(
            "node went missing",
            health_text(&running, None, after(60)),
            "Node object went missing. Machine m1 is unhealthy - changing MachinePhase to Unknown",
        ),
        // machine_util.go:1130
        row(
            "did not join within the creation timeout",
            health_text(&machine(Phase::Pending, creating), None, after(20 * 60 + 1)),
            "Machine m1 failed to join the cluster in 20m0s minutes.",
        ),
        // machine_util.go:1096
        row(
            "unhealthy past the health timeout",
            health_text(&unknown, Some(&not_ready), after(10 * 60 + 1)),
            "Machine m1 health checks failing since last 10m0s minutes. Updating machine phase to Failed. Node Conditions: [{Type:Ready Status:False LastHeartbeatTime:2023-11-14 22:13:20 +0000 UTC LastTransitionTime:2023-11-14 22:13:20 +0000 UTC Reason:KubeletNotReady Message:PLEG is not healthy}]",
        ),
        // machine_safety.go:85
        row(
            "health timeout reset after an API server outage",
            description(reset_after_freeze(&unknown)),
            "Machine Health Timeout was reset due to APIServer being unreachable",
        ),
    ]
}

fn in_place() -> Vec<Row> {
    let updating = machine(Phase::InPlaceUpdating, None);
    let candidate = (c::NODE_CANDIDATE_FOR_UPDATE_LABEL, "true");
    let step = |labels: &[(&str, &str)], cond: Option<&str>| {
        node_condition_step(&in_place_node(labels, cond))
            .map(|c| c.message)
            .unwrap_or_default()
    };
    vec![
        // machine_util.go:442
        row(
            "in-place drain succeeded",
            description(Some(after_in_place_drain("m1", Ok(())))),
            "Machine m1 is undergoing an in-place update",
        ),
        // machine_util.go:1550
        row(
            "in-place drain failed",
            description(Some(after_in_place_drain("m1", Err("x".into())))),
            "Drain failed due to - x. Will retry in next sync. Initiate node drain",
        ),
        // machine_util.go:1037
        row(
            "in-place update successful",
            description(in_place_result(
                &updating,
                &in_place_node(
                    &[(
                        c::NODE_UPDATE_RESULT_LABEL,
                        c::NODE_UPDATE_RESULT_SUCCESSFUL,
                    )],
                    None,
                ),
            )),
            "Machine m1 successfully updated dependencies",
        ),
        // machine_util.go:1051
        row(
            "in-place update failed",
            description(in_place_result(
                &updating,
                &in_place_node(
                    &[(c::NODE_UPDATE_RESULT_LABEL, c::NODE_UPDATE_RESULT_FAILED)],
                    None,
                ),
            )),
            "Machine m1 failed to update dependencies: disk full",
        ),
        // machine_util.go:1109
        row(
            "in-place update timed out",
            description(
                in_place_timeout(&updating, Duration::from_secs(20 * 60), after(20 * 60 + 1))
                    .and_then(Result::ok),
            ),
            "Machine m1 failed to in-place update in 20m0s minutes.",
        ),
        // machine_util.go:304
        row(
            "node condition: candidate",
            step(&[candidate], None),
            "Node is a candidate for in-place update",
        ),
        // machine_util.go:317
        row(
            "node condition: selected",
            step(
                &[candidate, (c::NODE_SELECTED_FOR_UPDATE_LABEL, "true")],
                Some(c::IN_PLACE_CANDIDATE_FOR_UPDATE),
            ),
            "Node is selected for in-place update",
        ),
        // machine_util.go:337
        row(
            "node condition: update successful",
            step(
                &[
                    candidate,
                    (
                        c::NODE_UPDATE_RESULT_LABEL,
                        c::NODE_UPDATE_RESULT_SUCCESSFUL,
                    ),
                ],
                Some(c::IN_PLACE_READY_FOR_UPDATE),
            ),
            "Node in-place update successful",
        ),
        // machine_util.go:350
        row(
            "node condition: update failed",
            step(
                &[
                    candidate,
                    (c::NODE_UPDATE_RESULT_LABEL, c::NODE_UPDATE_RESULT_FAILED),
                ],
                Some(c::IN_PLACE_READY_FOR_UPDATE),
            ),
            "Node in-place update failed: disk full",
        ),
        // machine_util.go:479
        row(
            "node condition: drain successful",
            drain_successful_condition().message,
            "Node draining successful",
        ),
        // machine_util.go:405
        row(
            "node condition: ready for update",
            ready_for_update_condition().message,
            "Node is ready for in-place update",
        ),
    ]
}

fn deletion() -> Vec<Row> {
    let status = |r: Result<GetMachineStatusResponse, Status>| {
        description(Some(after_get_vm_status(
            true,
            false,
            Some(&r),
            VmRecord::HasVm,
        )))
    };
    let normal = DrainPlan {
        force: false,
        timeout: Duration::from_secs(7200),
        max_evict_retries: 360,
    };
    let forced = DrainPlan {
        force: true,
        timeout: Duration::from_secs(60),
        max_evict_retries: 1,
    };
    let drain = |plan: &DrainPlan, has_node, r: Result<(), String>| {
        description(Some(after_drain(plan, has_node, r)))
    };
    let vm = |r: Result<(), Status>, record| description(Some(after_delete_vm(&r, record)));
    let node = |o: NodeDeletion| description(Some(after_delete_node("m1", &o)));
    let volumes = |v| description(after_node_volumes("n1", v));
    let unavailable = err(Code::Unavailable, "x");
    let invalid = err(Code::InvalidArgument, "bad class");
    vec![
        // machine_util.go:1291 (machineutils/utils.go:25)
        row(
            "set Terminating",
            description(Some(set_terminating())),
            "Set machine status to termination. Now, getting VM Status",
        ),
        // machine_util.go:1333
        row(
            "GetVmStatus without target cluster",
            description(Some(after_get_vm_status(false, false, None, VmRecord::HasVm))),
            "Running without target cluster, skipping node drain and volume attachment deletion. Initiate VM deletion",
        ),
        // machine_util.go:1385
        row(
            "GetVmStatus with a node label",
            description(Some(after_get_vm_status(true, true, None, VmRecord::HasVm))),
            "Initiate node drain",
        ),
        // machine_util.go:1359
        row(
            "GetVmStatus Unimplemented",
            status(Err(err(Code::Unimplemented, "x"))),
            "Initiate node drain",
        ),
        // machine_util.go:1364
        row(
            "GetVmStatus NotFound",
            status(Err(err(Code::NotFound, "x"))),
            "VM was not found at provider. Moving forward to node drain. Initiate node drain",
        ),
        // machine_util.go:1368
        row(
            "GetVmStatus transient error",
            status(Err(unavailable.clone())),
            "Error occurred with decoding machine error status while getting VM status, aborting with retry. Set machine status to termination. Now, getting VM Status",
        ),
        // machine_util.go:1372
        row(
            "GetVmStatus Uninitialized",
            status(Err(err(Code::Uninitialized, "x"))),
            "VM instance was not initialized. Moving forward to node drain. Initiate node drain",
        ),
        // machine_util.go:1377: "Error occurred with decoding machine error status while
        // getting VM status, aborting without retry. machine code: <err> Set machine status
        // to termination. Now, getting VM Status" (and :1349, an error that is no status,
        // which a typed driver error cannot be).
        row(
            "GetVmStatus other error",
            status(Err(invalid.clone())),
            "Cannot tell whether the VM exists: getting its status failed: machine codes error: code = [InvalidArgument] message = [bad class]. Deletion is blocked because the machine has a providerID or node, so its VM may still exist; fix the MachineClass or its Secret so that the provider can look the VM up. Retrying with backoff. Set machine status to termination. Now, getting VM Status",
        )
        .deliberate("machine.md, \"Where mcm-rs differs from the reference\", item 24"),
        // No reference text: the reference cannot delete a machine whose VM was never made
        // while its provider refuses (it keeps the machine for ever).
        row(
            "GetVmStatus other error, no VM was ever created",
            description(Some(after_get_vm_status(
                true,
                false,
                Some(&Err(invalid.clone())),
                VmRecord::NeverCreated,
            ))),
            "No VM was ever created for this machine (CreateMachine was never called; the provider answered: machine codes error: code = [InvalidArgument] message = [bad class]). Skipping drain and VM deletion. Initiate node object deletion",
        )
        .deliberate("machine.md, \"Where mcm-rs differs from the reference\", item 24"),
        // machine_util.go:1590 with printLogInitError, :1421
        row(
            "drain skipped without a node",
            drain(&normal, false, Ok(())),
            "Skipping drain as nodeName is not a valid one for machine. Initiate VM deletion",
        ),
        // machine_util.go:1705
        row(
            "forced drain succeeded",
            drain(&forced, true, Ok(())),
            "Force Drain successful. Delete Volume Attachments",
        ),
        // machine_util.go:1707
        row(
            "drain succeeded",
            drain(&normal, true, Ok(())),
            "Drain successful. Initiate VM deletion",
        ),
        // machine_util.go:1717
        row(
            "forced drain failed",
            drain(&forced, true, Err("x".into())),
            "Drain failed due to - x. However, since it's a force deletion shall continue deletion of VM. Delete Volume Attachments",
        ),
        // machine_util.go:1722
        row(
            "drain failed",
            drain(&normal, true, Err("x".into())),
            "Drain failed due to - x. Will retry in next sync. Initiate node drain",
        ),
        // machine_util.go:2212 (the Node's Terminating condition; runtime: drain::cordon)
        row(
            "node condition: Terminating",
            message(Some(node_terminating_condition(t0()))),
            "Machine Controller is scaling down machine",
        ),
        // machine_util.go:2211 (machineutils/utils.go:82)
        row(
            "node condition: Terminating reason",
            node_terminating_condition(t0()).reason.unwrap_or_default(),
            "ScaleDown",
        ),
        // machine_util.go:1767 (the lister's NotFound error text)
        row(
            "volume attachments: node gone",
            volumes(NodeVolumes::NodeGone),
            "Skipping deleteNodeVolAttachments due to - node \"n1\" not found. Moving to VM Deletion. Initiate VM deletion",
        ),
        // machine_util.go:1771
        row(
            "volume attachments: none attached",
            volumes(NodeVolumes::NoneAttached),
            "Node Volumes for node: n1 are already detached. Moving to VM Deletion. Initiate VM deletion",
        ),
        // machine_util.go:1790
        row(
            "volume attachments: none live",
            description(Some(volume_attachments_gone("n1"))),
            "No Live VolumeAttachments for node: n1. Moving to VM Deletion. Initiate VM deletion",
        ),
        // machine_util.go:1853
        row(
            "VM deleted",
            vm(Ok(()), VmRecord::HasVm),
            "VM deletion was successful. Initiate node object deletion",
        ),
        // machine_util.go:1838
        row(
            "VM not found",
            vm(Err(err(Code::NotFound, "x")), VmRecord::HasVm),
            "VM not found. Continuing deletion flow. Initiate node object deletion",
        ),
        // machine_util.go:1834
        row(
            "VM deletion transient error",
            vm(Err(unavailable), VmRecord::HasVm),
            "VM deletion failed due to - machine codes error: code = [Unavailable] message = [x]. However, will re-try in the next resync. Initiate VM deletion",
        ),
        // machine_util.go:1842: "VM deletion failed due to - <err>. Aborting operation.
        // Initiate VM deletion" (and :1847, an error that is no status).
        row(
            "VM deletion other error",
            vm(Err(invalid.clone()), VmRecord::HasVm),
            "VM deletion failed due to - machine codes error: code = [InvalidArgument] message = [bad class]. Deletion is blocked because the machine has a providerID or node, so its VM may still exist; fix the MachineClass or its Secret (or remove the VM by hand). Retrying with backoff. Initiate VM deletion",
        )
        .deliberate("machine.md, \"Where mcm-rs differs from the reference\", item 24"),
        // machine_util.go:1899
        row(
            "node deletion: no node label",
            node(NodeDeletion::NoLabel),
            "Label \"node\" not present on machine \"m1\", continuing deletion flow. Initiate machine object finalizer removal",
        ),
        // machine_util.go:1914 and :1946
        row(
            "node deletion: node not found",
            node(NodeDeletion::NotFound("n1".into())),
            "No node object found for \"n1\", continuing deletion flow. Initiate machine object finalizer removal",
        ),
        // machine_util.go:1918
        row(
            "node deletion: reading the node failed",
            node(NodeDeletion::ReadFailed("n1".into(), "boom".into())),
            "Retrieval of Node Object \"n1\" failed due to error: boom, Retrying. Initiate node object deletion",
        ),
        // machine_util.go:1930
        row(
            "node deletion: removing its finalizers failed",
            node(NodeDeletion::FinalizerRemovalFailed("n1".into(), "boom".into())),
            "Removal of finalizers from Node Object \"n1\" failed due to error: boom, Retrying. Initiate node object deletion",
        ),
        // machine_util.go:1941
        row(
            "node deletion: deleted",
            node(NodeDeletion::Deleted("n1".into())),
            "Deletion of Node Object \"n1\" is successful. Initiate machine object finalizer removal",
        ),
        // machine_util.go:1950
        row(
            "node deletion: failed",
            node(NodeDeletion::Failed("n1".into(), "boom".into())),
            "Deletion of Node Object \"n1\" failed due to error: boom. Initiate node object deletion",
        ),
    ]
}

fn preservation() -> Vec<Row> {
    let expiry = Some(after(4 * 86400));
    let cond = |phase: Phase, value: &str, drain: Option<&Result<(), String>>| {
        preserved_condition(&phase, value, drain, None, expiry, t0())
    };
    let failed_drain: Result<(), String> = Err("x".into());
    vec![
        // machine_util.go:2526
        row(
            "preserved",
            message(cond(Phase::Running, c::PRESERVE_VALUE_NOW, None)),
            "Machine preserved until 2023-11-18 22:13:20 +0000 UTC.",
        ),
        // machine_util.go:2515
        row(
            "preserved and drained",
            message(cond(Phase::Failed, c::PRESERVE_VALUE_WHEN_FAILED, Some(&Ok(())))),
            "Preserved node drained successfully. Machine preserved until 2023-11-18 22:13:20 +0000 UTC.",
        ),
        // machine_util.go:2520
        row(
            "preserved, drain failed",
            message(cond(
                Phase::Failed,
                c::PRESERVE_VALUE_WHEN_FAILED,
                Some(&failed_drain),
            )),
            "Preserved node could not be drained. Machine preserved until 2023-11-18 22:13:20 +0000 UTC.",
        ),
        // machine_util.go:2532 (apis/machine/v1alpha1/machine_types.go:255)
        row(
            "preserved by user: reason",
            cond(Phase::Running, c::PRESERVE_VALUE_NOW, None)
                .and_then(|c| c.reason)
                .unwrap_or_default(),
            "Preserved by user.",
        ),
        // machine_util.go:2530 (machine_types.go:252)
        row(
            "auto-preserved: reason",
            cond(Phase::Failed, c::PRESERVE_VALUE_AUTO_PRESERVED, Some(&Ok(())))
                .and_then(|c| c.reason)
                .unwrap_or_default(),
            "Preserved by MCM.",
        ),
        // machine_util.go:2444 (machine_types.go:258)
        row(
            "preservation stopped: reason",
            stopped_condition(t0()).reason.unwrap_or_default(),
            "Preservation stopped.",
        ),
        // machine_util.go:2440-2445: no message
        row(
            "preservation stopped: message",
            message(Some(stopped_condition(t0()))),
            "",
        ),
    ]
}

fn sets_and_deployments() -> Vec<Row> {
    let failure = |claimed, desired| match replica_failure(Some("boom"), false, claimed, desired) {
        ReplicaFailureChange::Add { reason, message } => format!("{reason}: {message}"),
        other => format!("{other:?}"),
    };
    let progress = |set, p| progress_message(set, "d1", p);
    let new_set = |what| new_set_condition("s1", what, t0()).message;
    let paused = |p: bool, conditions: &[mcm_api::MachineDeploymentCondition]| {
        paused_condition(p, conditions, t0())
            .map(|c| c.message)
            .unwrap_or_default()
    };
    let paused_now = paused_condition(true, &[], t0())
        .into_iter()
        .collect::<Vec<_>>();
    vec![
        // deployment_machineset_util.go:157-162 (reason, then the error's text)
        row("ReplicaFailure, too few machines", failure(1, 3), "FailedCreate: boom"),
        row("ReplicaFailure, too many machines", failure(3, 1), "FailedDelete: boom"),
        // deployment_progress.go:56
        row(
            "Progressing: complete",
            progress(Some("s1"), Progress::Complete),
            "MachineSet \"s1\" has successfully progressed.",
        ),
        // deployment_progress.go:54
        row(
            "Progressing: complete, no new set",
            progress(None, Progress::Complete),
            "Machine Deployment \"d1\" has successfully progressed.",
        ),
        // deployment_progress.go:66
        row(
            "Progressing: progressing",
            progress(Some("s1"), Progress::Progressing),
            "MachineSet \"s1\" is progressing.",
        ),
        // deployment_progress.go:64
        row(
            "Progressing: progressing, no new set",
            progress(None, Progress::Progressing),
            "Machine Deployment \"d1\" is progressing.",
        ),
        // deployment_progress.go:91
        row(
            "Progressing: timed out",
            progress(Some("s1"), Progress::TimedOut),
            "MachineSet \"s1\" has timed out progressing.",
        ),
        // deployment_progress.go:89
        row(
            "Progressing: timed out, no new set",
            progress(None, Progress::TimedOut),
            "Machine Deployment \"d1\" has timed out progressing.",
        ),
        // deployment_sync.go:268
        row("new set found", new_set(NewSet::Found), "Found new machine set \"s1\""),
        // deployment_sync.go:394
        row("new set created", new_set(NewSet::Created), "Created new machine set \"s1\""),
        // deployment_sync.go:378
        row(
            "new set not created",
            new_set(NewSet::CreateFailed("boom")),
            "Failed to create new machine set \"s1\": boom",
        ),
        // deployment_sync.go:91
        row("paused", paused(true, &[]), "Deployment is paused"),
        // deployment_sync.go:95
        row("resumed", paused(false, &paused_now), "Deployment is resumed"),
        // deployment_sync.go:657
        row(
            "available",
            availability_condition(true, t0()).message,
            "Deployment has minimum availability.",
        ),
        // deployment_sync.go:660
        row(
            "not available",
            availability_condition(false, t0()).message,
            "Deployment does not have minimum availability.",
        ),
        // pkg/controller/machine_safety.go:269
        row(
            "frozen: overshooting",
            overshoot_freeze_message("s1", 7, 6),
            "The number of machines backing MachineSet: s1 is 7 >= 6 which is the Max-ScaleUp-Limit",
        ),
        // pkg/controller/machine_safety.go:175
        row(
            "frozen: deployment state sync",
            STATE_SYNC_FREEZE_MESSAGE,
            "MachineDeployment State was inconsistent, hence safety controller has fixed this and frozen it",
        ),
    ]
}

fn rows() -> Vec<Row> {
    [
        durations(),
        creation(),
        health_texts(),
        in_place(),
        deletion(),
        preservation(),
        sets_and_deployments(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[test]
fn every_text_is_the_references_or_a_documented_deliberate_difference() {
    let rows = rows();
    let mut names = std::collections::BTreeSet::new();
    let mut wrong = Vec::new();
    for r in &rows {
        assert!(names.insert(r.name), "two rows named {:?}", r.name);
        if r.ours != r.reference {
            wrong.push(format!(
                "{}{}:\n   ours: {:?}\n   want: {:?}",
                r.name,
                r.deliberate
                    .map(|d| format!(" (deliberate: {d})"))
                    .unwrap_or_default(),
                r.ours,
                r.reference
            ));
        }
    }
    assert!(wrong.is_empty(), "texts differ:\n{}", wrong.join("\n"));
}

#[test]
fn every_deliberate_difference_names_an_item_that_machine_md_lists() {
    let doc = include_str!("../../../docs/design/machine.md");
    assert!(doc.contains("## Where mcm-rs differs from the reference"));
    for r in rows() {
        let Some(place) = r.deliberate else { continue };
        let item = place
            .rsplit("item ")
            .next()
            .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
            .unwrap_or_else(|| panic!("{}: {place:?} names no item", r.name));
        assert!(
            doc.contains(&format!("| {item} |")),
            "{}: machine.md lists no item {item}",
            r.name
        );
    }
}
