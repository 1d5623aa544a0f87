//! The Machine state machine: creation, post-creation initialization, health
//! and deletion, as pure functions of a [`MachineView`] and the provider's answers.
//!
//! The runtime builds a [`MachineView`] (core's one Machine model, shared with
//! the set arithmetic of [`crate::replicas`]) with [`MachineView::of`], asks
//! these functions what to do, performs the I/O and feeds the results back;
//! what a step needs of the Node comes in as its own argument ([`NodeView`], ...).
//! Texts marked *contract* are the reference's `lastOperation.description`
//! strings that tools, dashboards and the deletion step machine rely on.

use crate::time::from_k8s;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;
use mcm_api::{MachineOperationType as OpType, MachinePhase as Phase, MachineState as OpState};
use std::time::Duration;

/// Deletion-step markers kept in `lastOperation.description` (contract), from the API crate.
pub mod markers {
    pub use mcm_api::constants::{
        DEL_VOLUMES_ATTACHMENTS as DELETE_VOLUME_ATTACHMENTS, GET_VM_STATUS, INITIATE_DRAIN,
        INITIATE_FINALIZER_REMOVAL, INITIATE_NODE_DELETION, INITIATE_VM_DELETION,
        INSTANCE_INITIALIZATION,
    };
}

/// How long a NotReady / ReadonlyFilesystem node must have been so before the drain is forced.
pub const FORCE_DRAIN_AFTER: Duration = Duration::from_secs(300);

/// A `lastOperation` to write. Built only by core's decisions
/// (`#[non_exhaustive]`): the runtime cannot record an operation core did
/// not decide.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Operation {
    /// The description (contract texts, see [`markers`]).
    pub description: String,
    /// The provider's error code name, for failed provider calls.
    pub error_code: Option<String>,
    /// Processing, Failed or Successful.
    pub state: OpState,
    /// Create, HealthCheck, Delete, ...
    pub kind: OpType,
}

impl Operation {
    fn new(description: impl Into<String>, state: OpState, kind: OpType) -> Self {
        Operation {
            description: description.into(),
            error_code: None,
            state,
            kind,
        }
    }
}

#[cfg(feature = "testing")]
impl Transition {
    /// A transition for the runtime's own unit tests of status writes
    /// (feature `testing`, a dev-dependency only).
    pub fn for_tests(
        phase: Option<Phase>,
        description: &str,
        state: OpState,
        kind: OpType,
    ) -> Self {
        Transition {
            phase,
            operation: Operation::new(description, state, kind),
            timeout_active: None,
        }
    }
}

/// A status change: the new phase (if any) and the operation to record.
/// Built only by core's decisions (`#[non_exhaustive]`): the runtime writes a
/// phase or a `lastOperation` only through a `Transition` core returned.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Transition {
    /// The new phase; `None` keeps the current one.
    pub phase: Option<Phase>,
    /// The operation to record.
    pub operation: Operation,
    /// `currentStatus.timeoutActive` to write, when set.
    pub timeout_active: Option<bool>,
}

/// The effective per-machine timeouts and settings (flags overridden by the
/// machine's spec and annotations).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Creation timeout (annotation > spec > flag; default 20m).
    pub creation_timeout: Duration,
    /// Health timeout (spec > flag; default 10m).
    pub health_timeout: Duration,
    /// Drain timeout (spec > flag; default 2h).
    pub drain_timeout: Duration,
    /// Max eviction retries (spec > flag; default 360).
    pub max_evict_retries: i32,
    /// Node condition types that make a machine unhealthy unless False.
    pub node_conditions: Vec<String>,
    /// Whether the health timeout is disabled for this machine.
    pub disable_health_timeout: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            creation_timeout: crate::defaults::CREATION_TIMEOUT.value,
            health_timeout: crate::defaults::HEALTH_TIMEOUT.value,
            drain_timeout: crate::defaults::DRAIN_TIMEOUT.value,
            max_evict_retries: crate::defaults::MAX_EVICT_RETRIES,
            node_conditions: split_conditions(crate::defaults::NODE_CONDITIONS),
            disable_health_timeout: false,
        }
    }
}

/// Splits a comma-separated condition list, trimming blanks (the reference does
/// not trim, so `"A, B"` silently ignored `B`; design: machine.md, "Where mcm-rs
/// differs from the reference", item 21).
pub fn split_conditions(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Parses a Go `time.Duration` string such as `20m`, `1h30m`, `90s`, `1.5h`, `500ms`
/// (negative or malformed values give `None`).
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    mcm_api::parse_duration(s.trim()).ok()
}

/// Formats a duration the way Go prints it (`20m0s`, `1h0m0s`).
pub fn format_go_duration(d: Duration) -> String {
    mcm_api::format_duration(Duration::from_secs(d.as_secs()))
}

/// Go's `strconv.ParseBool` truth values (invalid values are false).
pub fn parse_go_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

fn elapsed(since: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (now - since).to_std().unwrap_or(Duration::ZERO)
}

mod view;
pub use view::*;
mod creation;
pub use creation::*;
mod deletion;
pub use deletion::*;
pub mod inplace;
mod inplace_flow;
pub use inplace_flow::*;
pub mod pdb;
mod preserve;
mod preserve_flow;
pub use preserve_flow::*;
pub mod volumes;
pub use preserve::*;
mod health_flow;
pub mod startup_taint;
pub mod update;
pub use health_flow::*;
mod inputs;
pub use inputs::*;
mod phase_event;
pub use phase_event::*;

// ---------------------------------------------------------------------------
// Health

/// What the health check sees of the machine's Node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// The node's conditions.
    pub conditions: Vec<NodeCondition>,
    /// Whether it carries `node.gardener.cloud/critical-components-not-ready:NoSchedule`.
    pub critical_components_not_ready: bool,
    /// `Some(description)` while the Node carries the startup taint and the
    /// taint holds the machine ([`startup_taint::StartupTaint::holds_machine`]):
    /// the machine is not promoted to Running, and a Pending machine records
    /// the description ([`startup_taint::held_description`]) in `lastOperation`.
    pub startup_taint: Option<String>,
}

/// The health check's decision.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HealthDecision {
    /// New `status.conditions`, when they differ from the node's.
    pub conditions: Option<Vec<NodeCondition>>,
    /// A phase change to write.
    pub transition: Option<Transition>,
    /// The transition to Failed must go through the per-MachineDeployment limiter.
    pub rate_limited: bool,
    /// The machine joined for the first time (delete its bootstrap token, record join time).
    pub joined: bool,
    /// Re-check after this long (timeouts not yet reached).
    pub recheck_after: Option<Duration>,
    /// The node is Ready but the machine stays out of Running because its
    /// initialization has not succeeded (an Event says so).
    pub held_for_initialization: bool,
    /// The node is Ready but carries the startup taint: the machine is not
    /// promoted to Running (design: startup-taint.md).
    pub held_for_startup_taint: bool,
}

fn conditions_differ(a: &[NodeCondition], b: &[NodeCondition]) -> bool {
    if a.len() != b.len() {
        return true;
    }
    a.iter().any(|x| {
        !b.iter()
            .any(|y| y.type_ == x.type_ && y.status == x.status && y.reason == x.reason)
    })
}

/// Whether node conditions are healthy: `Ready` (when present) is True, and no
/// listed condition is anything but False. No conditions at all is unhealthy.
pub fn is_healthy(conditions: &[NodeCondition], watched: &[String]) -> bool {
    if conditions.is_empty() {
        return false;
    }
    conditions.iter().all(|c| {
        if c.type_ == "Ready" {
            c.status == "True"
        } else if watched.contains(&c.type_) {
            c.status == "False"
        } else {
            true
        }
    })
}

/// Node conditions as the reference prints them into a description (Go's
/// `%+v` of a `[]v1.NodeCondition`):
/// `[{Type:Ready Status:False LastHeartbeatTime:<t> LastTransitionTime:<t> Reason:<r> Message:<m>}]`.
pub fn go_conditions(conditions: &[NodeCondition]) -> String {
    let time = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.map_or_else(
            || "0001-01-01 00:00:00 +0000 UTC".to_string(),
            |t| go_time(from_k8s(t)),
        )
    };
    let parts: Vec<String> = conditions
        .iter()
        .map(|c| {
            format!(
                "{{Type:{} Status:{} LastHeartbeatTime:{} LastTransitionTime:{} Reason:{} Message:{}}}",
                c.type_,
                c.status,
                time(c.last_heartbeat_time.as_ref()),
                time(c.last_transition_time.as_ref()),
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    format!("[{}]", parts.join(" "))
}

/// A time as the reference prints it (Go's `time.Time.String()` of a UTC
/// time, the zone of the reference's container): `2006-01-02 15:04:05 +0000 UTC`,
/// with a fraction of a second only when there is one.
pub fn go_time(t: DateTime<Utc>) -> String {
    let nanos = t.timestamp_subsec_nanos();
    let fraction = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_string()
    };
    format!("{}{fraction} +0000 UTC", t.format("%Y-%m-%d %H:%M:%S"))
}

/// The health check (design: machine.md, "Health check") for a machine that has a
/// node label and a phase.
///
/// Departures from the reference: a machine in CrashLoopBackOff or Failed is never
/// promoted to Running by its node turning Ready (design: machine.md, "Where mcm-rs
/// differs from the reference", item 2): a CrashLoopBackOff
/// machine whose initialization has not succeeded is held, with
/// `held_for_initialization` set so the runtime records why.
pub fn health(m: &MachineView, node: Option<&NodeView>, now: DateTime<Utc>) -> HealthDecision {
    let mut d = HealthDecision::default();
    let Some(node) = node else {
        if m.phase == Phase::Running && !m.conditions.is_empty() {
            d.transition = Some(Transition {
                phase: Some(Phase::Unknown),
                operation: Operation::new(
                    format!(
                        "Node object went missing. Machine {} is unhealthy - changing MachinePhase to Unknown",
                        m.name
                    ),
                    OpState::Processing,
                    OpType::HealthCheck,
                ),
                timeout_active: None,
            });
            return d;
        }
        return timeouts(m, d, now);
    };
    // The controller's own conditions (the hot-update one) are not the
    // Node's: compared without them and kept when the Node's are copied.
    let (own, copied): (Vec<NodeCondition>, Vec<NodeCondition>) = m
        .conditions
        .iter()
        .cloned()
        .partition(|x| x.type_ == mcm_api::constants::HOT_UPDATE_CONDITION);
    if conditions_differ(&node.conditions, &copied) {
        let mut next = node.conditions.clone();
        next.extend(own);
        d.conditions = Some(next);
    }
    let healthy = is_healthy(&node.conditions, &m.settings.node_conditions);
    match (&m.phase, healthy) {
        // A failed InitializeMachine is never promoted by a Ready Node
        // (design: machine.md, "Where mcm-rs differs from the reference", item 2).
        (Phase::CrashLoopBackOff, true) => {
            d.held_for_initialization = m.initialization_failed();
        }
        (Phase::Failed, true) if m.initialization_failed() => {
            d.held_for_initialization = true;
        }
        (Phase::Running, true) => {}
        (Phase::Pending, true) if node.critical_components_not_ready => {}
        // Not Running while the Node carries the startup taint (design: startup-taint.md).
        (Phase::Pending | Phase::Unknown | Phase::InPlaceUpdateSuccessful, true)
            if node.startup_taint.is_some() =>
        {
            d.held_for_startup_taint = true;
            let description = node.startup_taint.clone().unwrap_or_default();
            let recorded = m
                .last_operation
                .as_ref()
                .is_some_and(|(desc, _, _)| *desc == description);
            if m.phase == Phase::Pending && !recorded {
                d.transition = Some(Transition {
                    phase: None,
                    operation: Operation::new(description, OpState::Processing, OpType::Create),
                    timeout_active: None,
                });
            }
        }
        // In-place: a successful update re-joins (design: machine.md, "In-place updates").
        // A `Failed` machine whose Node recovers before its MachineSet
        // replaced it re-joins, as in the reference.
        (
            Phase::Pending | Phase::Unknown | Phase::InPlaceUpdateSuccessful | Phase::Failed,
            true,
        ) => {
            let first_join = matches!(&m.last_operation,
                Some((_, state, OpType::Create)) if *state != OpState::Successful);
            let (description, kind) = if first_join {
                d.joined = true;
                (
                    format!(
                        "Machine {} successfully joined the cluster in {}",
                        m.name,
                        format_go_duration(elapsed(m.created_or(now), now))
                    ),
                    OpType::Create,
                )
            } else {
                (
                    format!("Machine {} successfully re-joined the cluster", m.name),
                    OpType::HealthCheck,
                )
            };
            d.transition = Some(Transition {
                phase: Some(Phase::Running),
                operation: Operation::new(description, OpState::Successful, kind),
                timeout_active: Some(false),
            });
        }
        (Phase::Running, false) => {
            d.transition = Some(Transition {
                phase: Some(Phase::Unknown),
                operation: Operation::new(
                    format!(
                        "Machine {} is unhealthy - changing MachinePhase to Unknown. Node conditions: {}",
                        m.name,
                        go_conditions(&node.conditions)
                    ),
                    OpState::Processing,
                    OpType::HealthCheck,
                ),
                timeout_active: None,
            });
        }
        _ => {}
    }
    if d.transition.is_some() || d.conditions.is_some() {
        return d;
    }
    timeouts(m, d, now)
}

fn timeouts(m: &MachineView, mut d: HealthDecision, now: DateTime<Utc>) -> HealthDecision {
    let (timeout, since) = match m.phase {
        Phase::Pending => (m.settings.creation_timeout, m.created_or(now)),
        Phase::Unknown | Phase::InPlaceUpdateFailed if !m.settings.disable_health_timeout => (
            m.settings.health_timeout,
            m.phase_since.unwrap_or(m.created_or(now)),
        ),
        _ => return d,
    };
    let gone = elapsed(since, now);
    if gone <= timeout {
        d.recheck_after =
            Some((timeout - gone).min(Duration::from_secs(60)) + Duration::from_secs(1));
        return d;
    }
    // Go's `%s` of the timeout (`20m0s minutes`), as the reference.
    let minutes = format_go_duration(timeout);
    let prev_kind = m
        .last_operation
        .as_ref()
        .map_or(OpType::HealthCheck, |(_, _, k)| k.clone());
    d.transition = Some(if m.phase == Phase::Pending {
        Transition {
            phase: Some(Phase::Failed),
            operation: Operation::new(
                format!(
                    "Machine {} failed to join the cluster in {minutes} minutes.",
                    m.name
                ),
                OpState::Failed,
                prev_kind,
            ),
            timeout_active: Some(false),
        }
    } else {
        d.rate_limited = true;
        Transition {
            phase: Some(Phase::Failed),
            operation: Operation::new(
                format!(
                    "Machine {} health checks failing since last {minutes} minutes. Updating machine phase to Failed. Node Conditions: {}",
                    m.name,
                    go_conditions(&m.conditions)
                ),
                OpState::Failed,
                prev_kind,
            ),
            timeout_active: Some(false),
        }
    });
    d
}

/// Whether one more machine of a MachineDeployment may be marked Failed, given
/// the phases of its machines: at most one replacement in progress (phases other
/// than Running/Unknown count, Terminating twice).
pub fn may_mark_failed<'a>(sibling_phases: impl IntoIterator<Item = &'a Phase>) -> bool {
    let in_progress: usize = sibling_phases
        .into_iter()
        .map(|p| match p {
            Phase::Running | Phase::Unknown => 0,
            Phase::Terminating => 2,
            _ => 1,
        })
        .sum();
    in_progress < 1
}

/// The Failed marks granted by [`FailedMarks::grant`] whose writes a
/// listing may not show yet, per MachineDeployment (the machines' `name`
/// label). Several machines of one deployment may reach their health
/// timeout in one recheck; each decision must see the ones granted before
/// it, or all of them are marked Failed and replaced at once.
#[derive(Debug, Default)]
pub struct FailedMarks {
    granted: std::collections::HashMap<String, std::collections::HashMap<String, DateTime<Utc>>>,
}

impl FailedMarks {
    /// How long a grant counts without the listing showing its write (a
    /// write that was lost without [`FailedMarks::release`]).
    pub const PENDING: Duration = Duration::from_secs(300);

    /// Whether machine `me` of `group` may be marked Failed now, given the
    /// listed `(name, phase)` of the group's machines (`me` among them or
    /// not); if so, the grant is recorded and counts as a replacement in
    /// progress for the next decision until the listing shows `me` in a
    /// phase that counts itself, `me` is gone, or [`FailedMarks::PENDING`]
    /// passed.
    pub fn grant(
        &mut self,
        group: &str,
        me: &str,
        listed: &[(String, Phase)],
        now: DateTime<Utc>,
    ) -> bool {
        let grants = self.granted.entry(group.to_string()).or_default();
        grants.retain(|name, at| {
            let pending = listed
                .iter()
                .any(|(n, p)| n == name && matches!(p, Phase::Running | Phase::Unknown));
            let young = (now - *at).to_std().is_ok_and(|age| age < Self::PENDING);
            pending && young
        });
        let failed = Phase::Failed;
        let phases = listed.iter().filter(|(n, _)| n != me).map(|(n, p)| {
            if grants.contains_key(n) {
                &failed
            } else {
                p
            }
        });
        let ok = may_mark_failed(phases);
        if ok {
            grants.insert(me.to_string(), now);
        } else if grants.is_empty() {
            self.granted.remove(group);
        }
        ok
    }

    /// Withdraws `me`'s grant (its Failed write did not happen).
    pub fn release(&mut self, group: &str, me: &str) {
        if let Some(grants) = self.granted.get_mut(group) {
            grants.remove(me);
            if grants.is_empty() {
                self.granted.remove(group);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Deletion

/// The deletion step, decided from the phase and the marker in the description
/// (design: machine.md, "Deletion").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionStage {
    /// The finalizer is gone: nothing to do.
    MissingFinalizer,
    /// Set phase Terminating.
    SetTerminating,
    /// Find the node name (GetMachineStatus when no node label).
    GetVmStatus,
    /// Cordon and drain the node.
    Drain,
    /// Delete the node's VolumeAttachments (after a forced drain).
    DeleteVolumeAttachments,
    /// DeleteMachine.
    DeleteVm,
    /// Delete the Node object.
    DeleteNode,
    /// Remove the MCM finalizer.
    RemoveFinalizer,
}

/// The current deletion step. Unknown descriptions restart at SetTerminating.
///
/// Every deletion description ends with its step's marker (here and in the
/// reference); text before it can be anyone's (a drain or provider error
/// quoting a pod, a class kind, a provider string). So only the end is
/// matched: a marker quoted in the middle cannot send the flow to another
/// step, which a plain "contains" (the reference's check) would allow.
pub fn deletion_stage(m: &MachineView) -> DeletionStage {
    if !m.has_finalizer {
        return DeletionStage::MissingFinalizer;
    }
    if m.phase != Phase::Terminating {
        return DeletionStage::SetTerminating;
    }
    let d = m.last_operation.as_ref().map_or("", |(d, _, _)| d.as_str());
    let order = [
        (markers::GET_VM_STATUS, DeletionStage::GetVmStatus),
        (markers::INITIATE_DRAIN, DeletionStage::Drain),
        (
            markers::DELETE_VOLUME_ATTACHMENTS,
            DeletionStage::DeleteVolumeAttachments,
        ),
        (markers::INITIATE_VM_DELETION, DeletionStage::DeleteVm),
        (markers::INITIATE_NODE_DELETION, DeletionStage::DeleteNode),
        (
            markers::INITIATE_FINALIZER_REMOVAL,
            DeletionStage::RemoveFinalizer,
        ),
    ];
    let d = d.trim_end();
    order
        .iter()
        .find(|(marker, _)| d.ends_with(marker))
        .map_or(DeletionStage::SetTerminating, |(_, s)| *s)
}

fn delete_op(description: String, state: OpState) -> Transition {
    Transition {
        phase: None,
        operation: Operation::new(description, state, OpType::Delete),
        timeout_active: None,
    }
}

/// Step SetTerminating.
pub fn set_terminating() -> Transition {
    Transition {
        phase: Some(Phase::Terminating),
        operation: Operation::new(markers::GET_VM_STATUS, OpState::Processing, OpType::Delete),
        timeout_active: None,
    }
}

/// The drain mode for a machine being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPlan {
    /// Delete pods (grace 0) instead of evicting, and don't wait for volumes.
    pub force: bool,
    /// The drain's deadline from now.
    pub timeout: Duration,
    /// How many times an eviction blocked by a PDB is retried.
    pub max_evict_retries: i32,
}

/// Plans the drain (design: machine.md, "Drain"): forced when the `force-deletion` label is set,
/// when the drain timeout (from the deletion time) has passed, or when the node
/// has been NotReady or ReadonlyFilesystem for more than 5 minutes.
pub fn plan_drain(m: &MachineView, now: DateTime<Utc>) -> DrainPlan {
    let bad_for_long = |ty: &str, healthy: &str| {
        m.conditions.iter().any(|c| {
            c.type_ == ty
                && c.status != healthy
                && c.last_transition_time
                    .as_ref()
                    .is_some_and(|t| elapsed(from_k8s(t), now) > FORCE_DRAIN_AFTER)
        })
    };
    let unhealthy = bad_for_long("Ready", "True") || bad_for_long("ReadonlyFilesystem", "False");
    let timed_out = m
        .deleting_since
        .is_some_and(|t| elapsed(t, now) > m.settings.drain_timeout);
    if m.force_deletion || timed_out || unhealthy {
        return DrainPlan {
            force: true,
            timeout: Duration::from_secs(60),
            max_evict_retries: 1,
        };
    }
    let by_timeout = (m.settings.drain_timeout.as_secs() / 20).min(i32::MAX as u64) as i32;
    let remaining = m.deleting_since.map_or(m.settings.drain_timeout, |t| {
        m.settings.drain_timeout.saturating_sub(elapsed(t, now))
    });
    DrainPlan {
        force: false,
        timeout: remaining,
        max_evict_retries: m.settings.max_evict_retries.min(by_timeout).max(1),
    }
}

/// The Node condition `Terminating` the drain sets before it evicts
/// (`UpdateNodeTerminationCondition`): reason `ScaleDown`, message `Machine
/// Controller is scaling down machine`. The reference chooses the reason by
/// the phase, but only ever calls it for a `Terminating` machine, so it is
/// always this one (design: machine.md, "Where mcm-rs differs from the
/// reference", item 6).
pub fn node_terminating_condition(now: DateTime<Utc>) -> NodeCondition {
    NodeCondition {
        type_: mcm_api::constants::NODE_TERMINATING_CONDITION.into(),
        status: "True".into(),
        reason: Some(mcm_api::constants::NODE_TERMINATING_REASON_SCALE_DOWN.into()),
        message: Some("Machine Controller is scaling down machine".into()),
        last_heartbeat_time: Some(crate::time::to_k8s(now)),
        last_transition_time: Some(crate::time::to_k8s(now)),
    }
}

/// Step Drain: the next operation from the drain's outcome.
pub fn after_drain(plan: &DrainPlan, has_node: bool, result: Result<(), String>) -> Transition {
    use markers::*;
    if !has_node {
        return delete_op(
            format!(
                "Skipping drain as nodeName is not a valid one for machine. {INITIATE_VM_DELETION}"
            ),
            OpState::Processing,
        );
    }
    match (result, plan.force) {
        (Ok(()), true) => delete_op(
            format!("Force Drain successful. {DELETE_VOLUME_ATTACHMENTS}"),
            OpState::Processing,
        ),
        (Ok(()), false) => delete_op(
            format!("Drain successful. {INITIATE_VM_DELETION}"),
            OpState::Processing,
        ),
        (Err(e), true) => delete_op(
            format!("Drain failed due to - {e}. However, since it's a force deletion shall continue deletion of VM. {DELETE_VOLUME_ATTACHMENTS}"),
            OpState::Processing,
        ),
        (Err(e), false) => delete_op(
            format!("Drain failed due to - {e}. Will retry in next sync. {INITIATE_DRAIN}"),
            OpState::Failed,
        ),
    }
}

/// Step DeleteVolumeAttachments, when none remain.
pub fn volume_attachments_gone(node: &str) -> Transition {
    delete_op(
        format!(
            "No Live VolumeAttachments for node: {node}. Moving to VM Deletion. {}",
            markers::INITIATE_VM_DELETION
        ),
        OpState::Processing,
    )
}

/// What the Node cache says about the machine's Node at the
/// DeleteVolumeAttachments step (`deleteNodeVolAttachments`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeVolumes {
    /// The Node is not in the cache.
    NodeGone,
    /// The Node's `status.volumesAttached` is empty.
    NoneAttached,
    /// The Node reports attached volumes: its VolumeAttachments are listed.
    Attached,
}

impl NodeVolumes {
    /// What the machine's Node, as read (`None`: no such Node), says about
    /// its volumes: only a non-empty `status.volumesAttached` sends the
    /// flow to the VolumeAttachments.
    pub fn of(node: Option<&k8s_openapi::api::core::v1::Node>) -> NodeVolumes {
        match node {
            None => NodeVolumes::NodeGone,
            Some(n)
                if n.status
                    .as_ref()
                    .and_then(|s| s.volumes_attached.as_ref())
                    .is_none_or(Vec::is_empty) =>
            {
                NodeVolumes::NoneAttached
            }
            Some(_) => NodeVolumes::Attached,
        }
    }
}

/// Step DeleteVolumeAttachments, when the Node's own status already says
/// there is nothing to detach (`None` for [`NodeVolumes::Attached`]: the
/// VolumeAttachments decide). The reference's texts; the missing Node's
/// error is its lister's NotFound text.
pub fn after_node_volumes(node: &str, volumes: NodeVolumes) -> Option<Transition> {
    use markers::*;
    let description = match volumes {
        NodeVolumes::NodeGone => format!(
            "Skipping deleteNodeVolAttachments due to - node \"{node}\" not found. Moving to VM Deletion. {INITIATE_VM_DELETION}"
        ),
        NodeVolumes::NoneAttached => format!(
            "Node Volumes for node: {node} are already detached. Moving to VM Deletion. {INITIATE_VM_DELETION}"
        ),
        NodeVolumes::Attached => return None,
    };
    Some(delete_op(description, OpState::Processing))
}

/// Outcome of the node-deletion step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeDeletion {
    /// The machine has no node label.
    NoLabel,
    /// The Node did not exist.
    NotFound(String),
    /// The Node was deleted.
    Deleted(String),
    /// Reading the Node failed (node, error).
    ReadFailed(String, String),
    /// Removing the Node's finalizer failed (node, error).
    FinalizerRemovalFailed(String, String),
    /// Deleting failed (node, error).
    Failed(String, String),
}

impl NodeDeletion {
    /// Whether the step failed (it is written at once and retried with backoff).
    pub fn failed(&self) -> bool {
        matches!(
            self,
            NodeDeletion::ReadFailed(..)
                | NodeDeletion::FinalizerRemovalFailed(..)
                | NodeDeletion::Failed(..)
        )
    }
}

/// Step DeleteNode: the next operation.
pub fn after_delete_node(machine: &str, outcome: &NodeDeletion) -> Transition {
    use markers::*;
    match outcome {
        NodeDeletion::NoLabel => delete_op(
            format!("Label \"node\" not present on machine \"{machine}\", continuing deletion flow. {INITIATE_FINALIZER_REMOVAL}"),
            OpState::Processing,
        ),
        NodeDeletion::NotFound(n) => delete_op(
            format!("No node object found for \"{n}\", continuing deletion flow. {INITIATE_FINALIZER_REMOVAL}"),
            OpState::Processing,
        ),
        NodeDeletion::Deleted(n) => delete_op(
            format!("Deletion of Node Object \"{n}\" is successful. {INITIATE_FINALIZER_REMOVAL}"),
            OpState::Processing,
        ),
        NodeDeletion::ReadFailed(n, e) => delete_op(
            format!("Retrieval of Node Object \"{n}\" failed due to error: {e}, Retrying. {INITIATE_NODE_DELETION}"),
            OpState::Failed,
        ),
        NodeDeletion::FinalizerRemovalFailed(n, e) => delete_op(
            format!("Removal of finalizers from Node Object \"{n}\" failed due to error: {e}, Retrying. {INITIATE_NODE_DELETION}"),
            OpState::Failed,
        ),
        NodeDeletion::Failed(n, e) => delete_op(
            format!("Deletion of Node Object \"{n}\" failed due to error: {e}. {INITIATE_NODE_DELETION}"),
            OpState::Failed,
        ),
    }
}

// ---------------------------------------------------------------------------
// Userdata

/// Errors of userdata preparation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    /// The merged secret has no `userData` key.
    #[error("userdata field not found in secret for machine {0:?}")]
    Missing(String),
}

/// Replaces `<<MACHINE_NAME>>` and (when given) `<<BOOTSTRAP_TOKEN>>` in userdata,
/// raw or URL-query-escaped, as the reference does. The userdata is bytes
/// and stays bytes: it need not be UTF-8 (gzip-compressed cloud-init is
/// not), and every byte outside a placeholder is kept as it is, as the
/// reference's byte-string replacement keeps it.
pub fn substitute_userdata(userdata: &[u8], machine: &str, token: Option<&str>) -> Vec<u8> {
    fn replace(s: Vec<u8>, placeholder: &str, escaped_placeholder: &str, value: &str) -> Vec<u8> {
        if contains(&s, placeholder.as_bytes()) {
            replace_all(&s, placeholder.as_bytes(), value.as_bytes())
        } else if contains(&s, escaped_placeholder.as_bytes()) {
            replace_all(
                &s,
                escaped_placeholder.as_bytes(),
                query_escape(value).as_bytes(),
            )
        } else {
            s
        }
    }
    let mut out = userdata.to_vec();
    if let Some(token) = token {
        out = replace(
            out,
            "<<BOOTSTRAP_TOKEN>>",
            "%3C%3CBOOTSTRAP_TOKEN%3E%3E",
            token,
        );
    }
    replace(out, "<<MACHINE_NAME>>", "%3C%3CMACHINE_NAME%3E%3E", machine)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// `haystack` with every non-overlapping `needle` (not empty) replaced by `with`.
fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if !needle.is_empty() && haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The bootstrap token ID for a machine: 6 lowercase hex characters.
///
/// The reference derives it from three bytes of the name (collisions between
/// machines, and a panic for names shorter than 5 bytes; design: machine.md,
/// "Where mcm-rs differs from the reference", item 10). mcm-rs hashes
/// the whole name and the machine's UID (FNV-1a), so IDs are stable for a machine
/// and differ between machines with similar names.
pub fn bootstrap_token_id(machine_name: &str, uid: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in machine_name.bytes().chain([0u8]).chain(uid.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:06x}", h & 0xff_ffff)
}

#[cfg(test)]
mod tests;
