//! Deletion as a step machine, in the shape of [`CreationFlow`](crate::machine::CreationFlow):
//! Terminating → GetVmStatus → Drain → VolumeAttachments → DeleteMachine →
//! Node → finalizer, with every decision made here and every effect done by
//! the runtime, one per step.
//!
//! The runtime keeps a [`DeletionFlow`] for one reconcile, asks it for the
//! next [`DeletionStep`], performs exactly that effect, and feeds the result
//! back as a [`DeletionOutcome`]. Where the flow stands between reconciles is
//! the [`DeletionStage`], read once from the status the previous step wrote
//! (the reference's contract: the marker at the end of
//! `lastOperation.description`). Whether DeleteMachine runs, and why, is
//! answered by [`vm_deletion`] alone. A reconcile of a terminating machine
//! always ends in [`DeletionStep::Wait`] unless the finalizer was removed
//! (upstream #1157). See `docs/design/machine.md`, "Deletion".
//!
//! A step carries what its effect needs: the provider handle `P` of usable
//! [`Inputs`] (for GetMachineStatus, DeleteMachine and the drain), the
//! target cluster's handle `T` and the Node's name. The flow holds them from
//! [`DeletionFlow::new`] on and asks for no effect it lacks the means for,
//! so the runtime's match over [`DeletionStep`] has no fallback.

use super::super::{
    after_delete_node, after_delete_vm, after_drain, after_get_vm_status, after_node_volumes,
    deletion_stage, plan_drain, set_terminating, volume_attachments_gone, DeletionStage, DrainPlan,
    MachineView, NodeDeletion, NodeVolumes, RetryClass, Transition,
};
use super::{no_vm_ever_created, VmRecord};
use chrono::{DateTime, Utc};
use mcm_api::MachineState as OpState;
use mcm_driver::{Code, DeleteMachineResponse, GetMachineStatusResponse, Status};
use std::time::Duration;

/// Whether the machine's class, Secret and driver are usable for this
/// reconcile; `P` is the runtime's handle to call the provider with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inputs<P = ()> {
    /// The provider can be called, with this.
    Usable(P),
    /// They are not (the problem is recorded already); the input check asks
    /// to look again after `retry_after`.
    Unusable {
        /// The input check's retry delay.
        retry_after: Duration,
    },
}

impl<P> Inputs<P> {
    /// The provider handle, when the inputs are usable.
    pub fn usable(&self) -> Option<&P> {
        match self {
            Inputs::Usable(p) => Some(p),
            Inputs::Unusable { .. } => None,
        }
    }
}

/// Why DeleteMachine runs for a machine being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmDeletion {
    /// DeleteMachine runs once the flow reaches [`DeletionStage::DeleteVm`]:
    /// the VM may exist, for the reason the record gives.
    Runs(VmRecord),
    /// Skipped: no VM was ever created for the machine and the provider
    /// cannot be called (class, Secret or driver unusable).
    SkippedInputsUnusable,
    /// Skipped: no VM was ever created for the machine and GetMachineStatus
    /// answered with an error that is not NotFound / Unimplemented /
    /// Uninitialized.
    SkippedProviderRefused,
    /// Blocked: the VM may exist but the provider cannot be called or cannot
    /// look the VM up; the deletion waits and retries (the finalizer stays).
    Blocked(VmRecord),
}

impl VmDeletion {
    /// A short text for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            VmDeletion::Runs(_) => "the VM may exist: DeleteMachine runs",
            VmDeletion::SkippedInputsUnusable => {
                "no VM was ever created and the provider is unusable: DeleteMachine is skipped"
            }
            VmDeletion::SkippedProviderRefused => {
                "no VM was ever created and the provider refused to look: DeleteMachine is skipped"
            }
            VmDeletion::Blocked(_) => {
                "the VM may exist but the provider cannot be used: the deletion waits"
            }
        }
    }
}

/// Whether DeleteMachine runs for a machine being deleted, and why: the one
/// place that answers it (as [`initialization_reason`](crate::machine::initialization_reason)
/// does for InitializeMachine). `probe` is the GetMachineStatus answer of
/// the GetVmStatus step when one was made.
pub fn vm_deletion<P>(
    record: VmRecord,
    inputs: &Inputs<P>,
    probe: Option<&Result<GetMachineStatusResponse, Status>>,
) -> VmDeletion {
    let refused = match probe {
        Some(Err(e)) => !matches!(
            e.code,
            Code::NotFound | Code::Unimplemented | Code::Uninitialized
        ),
        _ => false,
    };
    match (inputs, refused, record.no_vm_possible()) {
        (Inputs::Unusable { .. }, _, true) => VmDeletion::SkippedInputsUnusable,
        (Inputs::Unusable { .. }, _, false) => VmDeletion::Blocked(record),
        (Inputs::Usable(_), true, true) => VmDeletion::SkippedProviderRefused,
        (Inputs::Usable(_), true, false) => VmDeletion::Blocked(record),
        (Inputs::Usable(_), false, _) => VmDeletion::Runs(record),
    }
}

/// How long to wait before the next reconcile of the terminating machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The short retry period (progress is expected soon).
    Short,
    /// The long retry period (a drain task runs; its end wakes the machine).
    Long,
    /// The per-machine backoff for a failure of this class.
    Backoff(RetryClass),
    /// Exactly this long (the input check's delay).
    After(Duration),
    /// The cloud pacer's turn comes after this long. What this reconcile
    /// staged is not written but carried, in memory, to the machine's next
    /// reconcile ([`Retry::keeps_staged`]).
    Turn(Duration),
}

impl Retry {
    /// Whether the reconcile stopping here keeps its staged records in
    /// memory for the next reconcile instead of writing them;
    /// `changes_phase`: they change the phase the API server shows.
    ///
    /// Only a wait for the cloud pacer's turn does, and only when the phase
    /// stays: the phase is what users and replica counts look at, so a
    /// machine never waits for its turn still showing `Running`. The records
    /// carried follow a drain outcome that lives in memory too, so a restart
    /// loses both together and the flow resumes from the written status
    /// (every step is idempotent). Every other stop writes them: its wait
    /// may be long, and the status must show where the deletion is.
    pub fn keeps_staged(&self, changes_phase: bool) -> bool {
        matches!(self, Retry::Turn(_)) && !changes_phase
    }
}

/// How a [`DeletionRecord`] reaches the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Staged: applied to the in-memory Machine and written once when the
    /// reconcile stops (or never, when the finalizer is removed).
    Stage,
    /// Written now, with what was staged before (a failed step, whose text
    /// must be seen even if the next step crashes).
    Now,
}

/// An Event to publish with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionEvent {
    /// Warning (else Normal).
    pub warning: bool,
    /// The Event's reason.
    pub reason: &'static str,
    /// The Event's note.
    pub note: String,
}

/// A status change of the deletion flow.
#[derive(Debug, Clone, PartialEq)]
pub struct DeletionRecord {
    /// The status to record.
    pub transition: Transition,
    /// Stage it or write it now.
    pub write: Write,
    /// `status.lastKnownState` to write with it, when set.
    pub last_known_state: Option<String>,
    /// An Event to publish after it.
    pub event: Option<DeletionEvent>,
}

/// What the drain task of this machine is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum DrainProgress {
    /// No drain runs and none finished unconsumed.
    Idle,
    /// A drain runs.
    Running {
        /// Whether it is a forced drain.
        force: bool,
    },
    /// A drain finished; its outcome is consumed now.
    Finished {
        /// The plan it ran with.
        plan: DrainPlan,
        /// Its result.
        result: Result<(), String>,
    },
}

/// A VolumeAttachment as the deletion flow sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentView {
    /// Its name.
    pub name: String,
    /// `spec.nodeName`.
    pub node_name: String,
    /// Whether it has a deletion timestamp.
    pub deleting: bool,
}

impl AttachmentView {
    /// What the flow reads of a listed VolumeAttachment.
    pub fn of(v: &k8s_openapi::api::storage::v1::VolumeAttachment) -> AttachmentView {
        AttachmentView {
            name: v.metadata.name.clone().unwrap_or_default(),
            node_name: v.spec.node_name.clone(),
            deleting: v.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// The VolumeAttachments that still hold `node`: on it and not being deleted.
pub fn live_attachments(node: &str, all: &[AttachmentView]) -> Vec<String> {
    all.iter()
        .filter(|v| v.node_name == node && !v.deleting)
        .map(|v| v.name.clone())
        .collect()
}

/// The next effect of the deletion flow: `P` is the provider handle of
/// usable [`Inputs`], `T` the target cluster's handle; a step that needs one
/// carries it, and the Node's name where it acts on the Node.
#[derive(Debug, Clone, PartialEq)]
pub enum DeletionStep<P = (), T = ()> {
    /// Record a status change (and its Event).
    Record(Box<DeletionRecord>),
    /// Find, in the Node cache, a Node labelled with this machine's name.
    FindNode,
    /// Call GetMachineStatus with this provider (no Node names the machine).
    Probe(P),
    /// Set the machine's `node` label to this Node name.
    LabelNode(String),
    /// Report what the machine's drain task is doing.
    CheckDrain,
    /// Start a drain task of this Node with this plan.
    StartDrain {
        /// The drain's plan.
        plan: DrainPlan,
        /// The machine's Node.
        node: String,
        /// The target cluster the Node is in.
        target: T,
        /// The provider (for the volume IDs of the drained pods).
        provider: P,
    },
    /// Look this Node up (the Node cache first): does it report attached
    /// volumes ([`NodeVolumes`])?
    CheckNodeVolumes {
        /// The machine's Node.
        node: String,
        /// The target cluster the Node is in.
        target: T,
    },
    /// List the target cluster's VolumeAttachments (report them all;
    /// [`live_attachments`] filters).
    ListAttachments(T),
    /// Delete these VolumeAttachments of the target cluster.
    DeleteAttachments {
        /// Their names.
        names: Vec<String>,
        /// The target cluster they are in.
        target: T,
    },
    /// Call DeleteMachine with this provider (after the cloud pacer's turn).
    DeleteVm(P),
    /// Delete the machine's Node.
    DeleteNode {
        /// The machine's Node.
        node: String,
        /// The target cluster the Node is in.
        target: T,
    },
    /// Remove the MCM finalizer: the machine is gone.
    RemoveFinalizer,
    /// Stop this reconcile and reconcile the machine again after this.
    Wait(Retry),
    /// The finalizer is removed: nothing more to do.
    Done,
}

/// The result of the previous step's effect.
#[derive(Debug, Clone, PartialEq)]
pub enum DeletionOutcome {
    /// Nothing ran yet.
    Start,
    /// The record is staged or written (the view shows it).
    Recorded,
    /// The Node cache lookup: the name of a Node labelled with the machine's name.
    NodeFound(Option<String>),
    /// GetMachineStatus answered.
    Probed(Result<GetMachineStatusResponse, Status>),
    /// The `node` label is written.
    NodeLabelled,
    /// The drain task's state.
    Drain(DrainProgress),
    /// A drain task started.
    DrainStarted,
    /// What the Node cache says about the Node's volumes.
    NodeVolumes(NodeVolumes),
    /// The VolumeAttachments listed.
    Attachments(Vec<AttachmentView>),
    /// Their deletion was requested.
    AttachmentsDeleted,
    /// The cloud pacer gave no turn: try again after this.
    NotYourTurn(Duration),
    /// DeleteMachine answered.
    VmDeleted(Result<DeleteMachineResponse, Status>),
    /// The Node deletion's outcome.
    NodeDeleted(NodeDeletion),
    /// The finalizer is removed.
    FinalizerRemoved,
}

/// How many stages one reconcile may pass (each stage at most once, and
/// GetVmStatus may restart once): a bound, never reached by a sound flow.
const MAX_STAGES: u8 = 12;

/// One reconcile's deletion flow: the means it was given and what it
/// learned so far.
#[derive(Debug, Clone, PartialEq)]
pub struct DeletionFlow<P = (), T = ()> {
    /// The target cluster; `None` in the mode without Nodes.
    target: Option<T>,
    inputs: Inputs<P>,
    record: VmRecord,
    /// The GetMachineStatus answer kept while the node label is written.
    probe: Option<Result<GetMachineStatusResponse, Status>>,
    /// Where the flow goes once the pending record is done; `None`: on to
    /// the stage the view shows.
    after_record: Option<Retry>,
    stages: u8,
}

impl<P: Clone, T: Clone> DeletionFlow<P, T> {
    /// A new flow: the target cluster (`None` in the mode without Nodes),
    /// whether the provider can be called, and what the machine records
    /// about its VM.
    pub fn new(target: Option<T>, inputs: Inputs<P>, record: VmRecord) -> Self {
        DeletionFlow {
            target,
            inputs,
            record,
            probe: None,
            after_record: None,
            stages: 0,
        }
    }

    /// The next step, from the machine as it is now and the last step's outcome.
    pub fn next(
        &mut self,
        m: &MachineView,
        outcome: DeletionOutcome,
        now: DateTime<Utc>,
    ) -> DeletionStep<P, T> {
        match outcome {
            DeletionOutcome::Start => {
                let blocked = vm_deletion(self.record, &self.inputs, None);
                if let (Inputs::Unusable { retry_after }, VmDeletion::Blocked(_)) =
                    (&self.inputs, blocked)
                {
                    return DeletionStep::Wait(Retry::After(*retry_after));
                }
                self.stage(m, now)
            }
            DeletionOutcome::Recorded => match self.after_record.take() {
                Some(retry) => DeletionStep::Wait(retry),
                None => self.stage(m, now),
            },
            DeletionOutcome::NodeFound(Some(node)) => DeletionStep::LabelNode(node),
            DeletionOutcome::NodeFound(None) => match self.inputs.usable() {
                Some(p) => DeletionStep::Probe(p.clone()),
                None => skip_without_provider(),
            },
            DeletionOutcome::Probed(result) => {
                let node = match &result {
                    Ok(resp) => Some(resp.node_name.clone()),
                    Err(e) => e.machine.as_ref().map(|id| id.node_name.clone()),
                }
                .filter(|n| !n.is_empty());
                self.probe = Some(result);
                match node {
                    Some(node) => DeletionStep::LabelNode(node),
                    None => self.vm_status_known(),
                }
            }
            DeletionOutcome::NodeLabelled => {
                // A node label records that a VM was made for the machine.
                self.record = VmRecord::HasVm;
                self.vm_status_known()
            }
            DeletionOutcome::Drain(progress) => self.drain(m, progress, now),
            DeletionOutcome::DrainStarted => DeletionStep::Wait(Retry::Long),
            DeletionOutcome::NodeVolumes(volumes) => {
                match (
                    after_node_volumes(node_text(m), volumes),
                    self.target.clone(),
                ) {
                    (Some(t), _) => record(t, Write::Stage),
                    (None, Some(target)) => DeletionStep::ListAttachments(target),
                    (None, None) => self.without_attachment_lookup(m),
                }
            }
            DeletionOutcome::Attachments(all) => {
                let node = node_text(m);
                let live = live_attachments(node, &all);
                match self.target.clone() {
                    Some(target) if !live.is_empty() => DeletionStep::DeleteAttachments {
                        names: live,
                        target,
                    },
                    _ => record(volume_attachments_gone(node), Write::Stage),
                }
            }
            DeletionOutcome::AttachmentsDeleted => DeletionStep::Wait(Retry::Short),
            DeletionOutcome::NotYourTurn(wait) => DeletionStep::Wait(Retry::Turn(wait)),
            DeletionOutcome::VmDeleted(result) => {
                let t = after_delete_vm(&result, self.record);
                let state = result
                    .as_ref()
                    .map(|r| r.last_known_state.clone())
                    .unwrap_or_default();
                let event = match &result {
                    Err(e) if t.operation.state == OpState::Failed => {
                        self.after_record = Some(Retry::Backoff(RetryClass::of(e)));
                        Some(DeletionEvent {
                            warning: true,
                            reason: "DeleteMachineFailed",
                            note: e.to_string(),
                        })
                    }
                    _ => None,
                };
                DeletionStep::Record(Box::new(DeletionRecord {
                    transition: t,
                    write: Write::Stage,
                    last_known_state: Some(state),
                    event,
                }))
            }
            DeletionOutcome::NodeDeleted(outcome) => {
                let t = after_delete_node(&m.name, &outcome);
                if outcome.failed() {
                    self.after_record = Some(Retry::Backoff(RetryClass::Normal));
                    record(t, Write::Now)
                } else {
                    record(t, Write::Stage)
                }
            }
            DeletionOutcome::FinalizerRemoved => DeletionStep::Done,
        }
    }

    /// The effect of the stage the machine is in.
    fn stage(&mut self, m: &MachineView, now: DateTime<Utc>) -> DeletionStep<P, T> {
        self.stages += 1;
        if self.stages > MAX_STAGES {
            return DeletionStep::Wait(Retry::Short);
        }
        let provider = self.inputs.usable().cloned();
        match (deletion_stage(m), provider) {
            // Upstream #1157: a terminating machine is always reconciled again.
            (DeletionStage::MissingFinalizer, _) => DeletionStep::Wait(Retry::Long),
            (DeletionStage::SetTerminating, p) => record(
                set_terminating(),
                if p.is_some() {
                    Write::Stage
                } else {
                    Write::Now
                },
            ),
            (
                DeletionStage::GetVmStatus
                | DeletionStage::Drain
                | DeletionStage::DeleteVolumeAttachments
                | DeletionStage::DeleteVm,
                None,
            ) => skip_without_provider(),
            (DeletionStage::GetVmStatus, Some(_)) => {
                self.probe = None;
                let target_cluster = self.target.is_some();
                if !target_cluster || m.node.is_some() {
                    record(
                        after_get_vm_status(target_cluster, m.node.is_some(), None, self.record),
                        Write::Stage,
                    )
                } else {
                    DeletionStep::FindNode
                }
            }
            (DeletionStage::Drain, Some(_)) => match self.cluster_node(m) {
                Some(_) => DeletionStep::CheckDrain,
                None => drain_skipped(m, now),
            },
            (DeletionStage::DeleteVolumeAttachments, Some(_)) => match self.cluster_node(m) {
                Some((target, node)) => DeletionStep::CheckNodeVolumes { node, target },
                None => self.without_attachment_lookup(m),
            },
            (DeletionStage::DeleteVm, Some(p)) => DeletionStep::DeleteVm(p),
            (DeletionStage::DeleteNode, _) => match self.cluster_node(m) {
                Some((target, node)) => DeletionStep::DeleteNode { node, target },
                // Without a target cluster or a node label there is no Node
                // to delete: the reference's text for a missing label.
                None => record(
                    after_delete_node(&m.name, &NodeDeletion::NoLabel),
                    Write::Stage,
                ),
            },
            (DeletionStage::RemoveFinalizer, _) => DeletionStep::RemoveFinalizer,
        }
    }

    /// The target cluster and the machine's Node, when both are known: what
    /// every step on the Node needs.
    fn cluster_node(&self, m: &MachineView) -> Option<(T, String)> {
        m.target_node(self.target.as_ref())
    }

    /// The DeleteVolumeAttachments stage when the Node cannot be looked up.
    /// Without a target cluster there is nothing to list; with one but no
    /// node label, the reference looks up the Node named "" and goes on with
    /// its lister's NotFound text.
    fn without_attachment_lookup(&self, m: &MachineView) -> DeletionStep<P, T> {
        let node = node_text(m);
        let t = match self.target {
            None => volume_attachments_gone(node),
            Some(_) => after_node_volumes(node, NodeVolumes::NodeGone)
                .unwrap_or_else(|| volume_attachments_gone(node)),
        };
        record(t, Write::Stage)
    }

    /// GetVmStatus learned what it could: record where the flow goes next.
    fn vm_status_known(&mut self) -> DeletionStep<P, T> {
        let probe = self.probe.take();
        let t = after_get_vm_status(true, false, probe.as_ref(), self.record);
        if t.operation.state != OpState::Failed {
            return record(t, Write::Stage);
        }
        self.after_record = Some(Retry::Backoff(RetryClass::Normal));
        record_told(t, true, "DeletionBlocked")
    }

    /// The Drain stage, from what the machine's drain task is doing. A
    /// forced drain supersedes a normal one still waiting on a budget; a
    /// failed normal drain is written now and retried with backoff; a forced
    /// one goes on.
    fn drain(
        &mut self,
        m: &MachineView,
        progress: DrainProgress,
        now: DateTime<Utc>,
    ) -> DeletionStep<P, T> {
        let plan = plan_drain(m, now);
        match progress {
            DrainProgress::Finished { plan, result } => {
                let event = result.as_ref().err().map(|e| DeletionEvent {
                    warning: true,
                    reason: "DrainFailed",
                    note: e.clone(),
                });
                let goes_on = result.is_ok() || plan.force;
                let t = after_drain(&plan, true, result);
                let write = if goes_on {
                    Write::Stage
                } else {
                    self.after_record = Some(Retry::Backoff(RetryClass::Normal));
                    Write::Now
                };
                record_with(t, write, event)
            }
            DrainProgress::Running { force } if force || !plan.force => {
                DeletionStep::Wait(Retry::Long)
            }
            DrainProgress::Running { .. } | DrainProgress::Idle => {
                match (self.cluster_node(m), self.inputs.usable()) {
                    (Some((target, node)), Some(p)) => DeletionStep::StartDrain {
                        plan,
                        node,
                        target,
                        provider: p.clone(),
                    },
                    (None, _) => drain_skipped(m, now),
                    (Some(_), None) => skip_without_provider(),
                }
            }
        }
    }
}

/// The machine's node label for the texts that name it ("" without one,
/// as the reference's empty label).
fn node_text(m: &MachineView) -> &str {
    m.node.as_deref().unwrap_or_default()
}

/// The Drain stage without a target cluster or a node: skipped, with a
/// written note.
fn drain_skipped<P, T>(m: &MachineView, now: DateTime<Utc>) -> DeletionStep<P, T> {
    record(after_drain(&plan_drain(m, now), false, Ok(())), Write::Now)
}

/// A machine that never had a VM and whose inputs are unusable skips the
/// provider steps.
fn skip_without_provider<P, T>() -> DeletionStep<P, T> {
    let t =
        no_vm_ever_created("the machine's class, secret or provider is unusable, see the events");
    record_told(t, false, "NoVmToDelete")
}

/// Records `transition` without an Event.
fn record<P, T>(transition: Transition, write: Write) -> DeletionStep<P, T> {
    record_with(transition, write, None)
}

/// Records `transition` with `event`, when there is one.
fn record_with<P, T>(
    transition: Transition,
    write: Write,
    event: Option<DeletionEvent>,
) -> DeletionStep<P, T> {
    DeletionStep::Record(Box::new(DeletionRecord {
        transition,
        write,
        last_known_state: None,
        event,
    }))
}

/// Writes `transition` now and tells it in an Event whose note is its
/// description.
fn record_told<P, T>(
    transition: Transition,
    warning: bool,
    reason: &'static str,
) -> DeletionStep<P, T> {
    let note = transition.operation.description.clone();
    let event = DeletionEvent {
        warning,
        reason,
        note,
    };
    record_with(transition, Write::Now, Some(event))
}

#[cfg(test)]
#[path = "flow_tests.rs"]
mod tests;
