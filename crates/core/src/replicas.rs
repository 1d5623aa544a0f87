//! # MachineSet replica management, without I/O
//!
//! The decisions of the MachineSet controller (spec `sets-deployments-safety.md`
//! §9) as pure functions of what the controller observed:
//!
//! - [`claim`]: adopt / keep / release / ignore a Machine (or a MachineSet, for
//!   the MachineDeployment controller) by selector and controller
//!   ownerReference (§9.3).
//! - [`manage_replicas`]: how many machines to create (in growing
//!   [`slow_start_batches`], capped by [`BURST_REPLICAS`]) or which ones to
//!   delete, in the deletion order of [`deletion_order`] (§9.5, §9.7),
//!   including Failed machines that are not preserved and machines the
//!   cluster-autoscaler marked; the `freeze` label and `scale-up-disabled`
//!   label block creations.
//! - [`auto_preservation`]: which Failed machines get or lose the
//!   `preserve=auto-preserved` annotation (§9.6).
//! - [`set_status`] / [`replica_failure`]: the MachineSet status (§9.9).
//! - [`Expectations`]: creations and deletions this controller has made and
//!   not yet seen in its cache (the reference records them but never looks,
//!   §19 quirk 11; mcm-rs waits for them, so a stale cache never doubles a
//!   scale-up).
//! - [`propagate_template`]: nodeTemplate / machine configuration /
//!   `class.kind` changes pushed into existing machines (§9.4).
//!
//! The runtime converts API objects into the small views of this module
//! ([`MachineView`]) and carries out the decisions.

use chrono::{DateTime, Utc};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Label and annotation keys and values used by the MachineSet logic (spec §6),
/// taken from [`mcm_api::constants`].
pub mod keys {
    use mcm_api::constants as c;
    /// Machine annotation: deletion priority, `"1"` is deleted first, default 3.
    pub const MACHINE_PRIORITY: &str = c::PRIORITY_ANNOTATION;
    /// The priority a machine has without (or with an unparsable) annotation.
    pub const DEFAULT_MACHINE_PRIORITY: i64 = 3;
    /// Machine annotation: RFC 3339 time at which a scaler marked the machine.
    pub const MARKED_FOR_DELETION_TIME: &str = c::MARKED_FOR_DELETION_TIME_ANNOTATION;
    /// MachineDeployment (copied to the new MachineSet) annotation: RFC 3339
    /// time of the last replica change made by a scaler.
    pub const SCALER_CHANGE_TIME: &str = c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION;
    /// MachineSet / MachineDeployment label set by the safety loop.
    pub const FREEZE_LABEL: &str = c::FREEZE_LABEL;
    /// Value of [`FREEZE_LABEL`] meaning "frozen".
    pub const FREEZE_VALUE: &str = c::FREEZE_LABEL_VALUE;
    /// MachineSet label (any value): never create machines (old sets of an in-place rollout).
    pub const SCALE_UP_DISABLED: &str = c::SCALE_UP_DISABLED_LABEL;
    /// Machine label of the in-place update protocol.
    pub const UPDATE_RESULT: &str = c::NODE_UPDATE_RESULT_LABEL;
    /// Value of [`UPDATE_RESULT`] for a machine updated in place.
    pub const UPDATE_RESULT_SUCCESSFUL: &str = c::NODE_UPDATE_RESULT_SUCCESSFUL;
    /// Machine / Node annotation asking for preservation.
    pub const PRESERVE: &str = c::PRESERVE_ANNOTATION;
    /// Machine annotation: the last node preserve value applied.
    pub const LAST_APPLIED_NODE_PRESERVE: &str = c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION;
    /// [`PRESERVE`] value: preserve now.
    pub const PRESERVE_NOW: &str = c::PRESERVE_VALUE_NOW;
    /// [`PRESERVE`] value: preserve once the machine fails.
    pub const PRESERVE_WHEN_FAILED: &str = c::PRESERVE_VALUE_WHEN_FAILED;
    /// [`PRESERVE`] value: preserved by the MachineSet's auto-preservation.
    pub const PRESERVE_AUTO: &str = c::PRESERVE_VALUE_AUTO_PRESERVED;
    /// [`PRESERVE`] value: do not preserve.
    pub const PRESERVE_FALSE: &str = c::PRESERVE_VALUE_FALSE;
    /// MachineSet annotation copied to new machines and overriding `creationTimeout`.
    pub const EFFECTIVE_CREATION_TIMEOUT: &str = c::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION;
    /// The template-hash label written by the MachineDeployment controller.
    pub const TEMPLATE_HASH: &str = c::TEMPLATE_HASH_LABEL;
}

/// At most this many machines are created or deleted in one pass (`BurstReplicas`).
pub const BURST_REPLICAS: usize = 100;
/// The first slow-start batch creates this many machines.
pub const SLOW_START_INITIAL_BATCH_SIZE: usize = 1;
/// How long a recorded expectation is trusted before it is dropped (the reference's 5 min).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// A machine phase (`status.currentStatus.phase`), parsed leniently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    /// No phase yet: creation not attempted or not finished.
    #[default]
    None,
    /// `Pending`.
    Pending,
    /// `Available` (created, no target cluster).
    Available,
    /// `Running`.
    Running,
    /// `Terminating`.
    Terminating,
    /// `Unknown`.
    Unknown,
    /// `Failed`.
    Failed,
    /// `CrashLoopBackOff`.
    CrashLoopBackOff,
    /// `InPlaceUpdating`.
    InPlaceUpdating,
    /// `InPlaceUpdateSuccessful`.
    InPlaceUpdateSuccessful,
    /// `InPlaceUpdateFailed`.
    InPlaceUpdateFailed,
    /// Any other string.
    Other,
}

impl Phase {
    /// Parses the phase string of a machine's status (`None` or `""` → [`Phase::None`]).
    pub fn parse(s: Option<&str>) -> Phase {
        match s.unwrap_or("") {
            "" => Phase::None,
            "Pending" => Phase::Pending,
            "Available" => Phase::Available,
            "Running" => Phase::Running,
            "Terminating" => Phase::Terminating,
            "Unknown" => Phase::Unknown,
            "Failed" => Phase::Failed,
            "CrashLoopBackOff" => Phase::CrashLoopBackOff,
            "InPlaceUpdating" => Phase::InPlaceUpdating,
            "InPlaceUpdateSuccessful" => Phase::InPlaceUpdateSuccessful,
            "InPlaceUpdateFailed" => Phase::InPlaceUpdateFailed,
            _ => Phase::Other,
        }
    }

    /// The rank in the deletion order: lower ranks are deleted first (§9.7).
    ///
    /// Phases the reference's map does not list (no phase, the in-place
    /// phases) rank 0 there (Go map zero value), i.e. like Terminating. That
    /// is kept: a machine that never got a phase is the cheapest to lose.
    pub fn deletion_rank(self) -> u8 {
        match self {
            Phase::Terminating => 0,
            Phase::Failed => 1,
            Phase::CrashLoopBackOff => 2,
            Phase::Unknown => 3,
            Phase::Pending => 4,
            Phase::Available => 5,
            Phase::Running => 6,
            Phase::None
            | Phase::InPlaceUpdating
            | Phase::InPlaceUpdateSuccessful
            | Phase::InPlaceUpdateFailed
            | Phase::Other => 0,
        }
    }

    /// `Available` or `Running`: counts as an available replica (§9.9).
    pub fn is_available(self) -> bool {
        matches!(self, Phase::Available | Phase::Running)
    }

    /// Neither Failed nor Terminating (`IsMachineActive`).
    pub fn is_active(self) -> bool {
        !matches!(self, Phase::Failed | Phase::Terminating)
    }
}

/// The controller ownerReference of an object, reduced to what claiming needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControllerRef {
    /// `kind` of the owner.
    pub kind: String,
    /// `name` of the owner.
    pub name: String,
    /// `uid` of the owner.
    pub uid: String,
}

/// What the MachineSet logic needs to know about one Machine.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MachineView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.creationTimestamp`.
    pub created: Option<DateTime<Utc>>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.currentStatus.phase`.
    pub phase: Phase,
    /// The controller ownerReference, if any.
    pub controller: Option<ControllerRef>,
    /// `status.currentStatus.preserveExpiryTime`.
    pub preserve_expiry: Option<DateTime<Utc>>,
    /// `status.lastOperation.state == "Failed"`.
    pub last_operation_failed: bool,
    /// The `preserve` annotation of the machine's Node, when the caller could
    /// look at the node (`None`: unknown, no target cluster).
    pub node_preserve: Option<String>,
}

impl MachineView {
    /// Terminating for replica counting: phase `Terminating` **or** a deletion
    /// timestamp. The reference looks at the phase only, so a machine whose
    /// DELETE went through but whose phase write failed keeps counting as a
    /// live replica and the set deletes another healthy machine; mcm-rs
    /// counts it as gone.
    pub fn is_terminating(&self) -> bool {
        self.deleting || self.phase == Phase::Terminating
    }

    /// The `machinepriority` annotation, default 3 when missing or unparsable.
    pub fn priority(&self) -> i64 {
        self.annotations
            .get(keys::MACHINE_PRIORITY)
            .filter(|v| !v.is_empty())
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(keys::DEFAULT_MACHINE_PRIORITY)
    }

    /// The parsed `marked-for-deletion-time` annotation.
    pub fn marked_for_deletion_time(&self) -> Option<DateTime<Utc>> {
        self.annotations
            .get(keys::MARKED_FOR_DELETION_TIME)
            .and_then(|v| parse_rfc3339(v))
    }

    /// Preserved: a preserve expiry time in the future.
    pub fn is_preserved(&self, now: DateTime<Utc>) -> bool {
        self.preserve_expiry.is_some_and(|t| t > now)
    }

    /// Carries `preserve=auto-preserved`.
    pub fn is_auto_preserved(&self) -> bool {
        self.annotations.get(keys::PRESERVE).map(String::as_str) == Some(keys::PRESERVE_AUTO)
    }

    /// Carries `update-result=successful` (moved here by an in-place rollout).
    pub fn is_update_successful(&self) -> bool {
        self.labels.get(keys::UPDATE_RESULT).map(String::as_str)
            == Some(keys::UPDATE_RESULT_SUCCESSFUL)
    }
}

impl MachineView {
    /// The view of an API Machine. `node_preserve` is left unknown.
    pub fn from_machine(m: &mcm_api::Machine) -> MachineView {
        let meta = &m.metadata;
        let status = m.status.as_ref();
        MachineView {
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            created: meta.creation_timestamp.as_ref().map(from_k8s_time),
            deleting: meta.deletion_timestamp.is_some(),
            phase: Phase::parse(status.map(|s| s.current_status.phase.as_str())),
            controller: controller_ref(meta),
            preserve_expiry: status
                .and_then(|s| s.current_status.preserve_expiry_time.as_ref())
                .map(from_k8s_time),
            last_operation_failed: status
                .is_some_and(|s| s.last_operation.state == mcm_api::MachineState::Failed),
            node_preserve: None,
        }
    }
}

/// The controller ownerReference of an object's metadata.
pub fn controller_ref(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<ControllerRef> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| ControllerRef {
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
}

/// A Kubernetes time as a chrono time (out-of-range values clamp to the epoch).
pub fn from_k8s_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    let ts = t.0;
    DateTime::from_timestamp(
        ts.as_second(),
        u32::try_from(ts.subsec_nanosecond()).unwrap_or(0),
    )
    .unwrap_or_default()
}

/// A chrono time as a Kubernetes time, truncated to whole seconds (the API
/// server stores seconds; truncating avoids status writes that only differ
/// in sub-second noise).
pub fn to_k8s_time(t: DateTime<Utc>) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let ts = k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts)
}

/// Parses an RFC 3339 time (the format of the scaler annotations).
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s.trim())
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

// ---------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------

pub use mcm_api::selector::{
    selector_is_empty, selector_matches, validate_selector, SelectorError,
};

/// Whether `labels` contains every entry of `required` (`fullyLabeledReplicas`,
/// the safety loop's "carries the template labels").
pub fn labels_contain(
    labels: &BTreeMap<String, String>,
    required: &BTreeMap<String, String>,
) -> bool {
    required.iter().all(|(k, v)| labels.get(k) == Some(v))
}

// ---------------------------------------------------------------------------
// Claiming (§9.3)
// ---------------------------------------------------------------------------

/// The owner that claims (a MachineSet claiming Machines, a MachineDeployment claiming MachineSets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimer<'a> {
    /// The owner's UID.
    pub uid: &'a str,
    /// The owner has a deletion timestamp.
    pub deleting: bool,
}

/// What to do with one candidate object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimAction {
    /// Already ours and matching: it is claimed, nothing to write.
    Keep,
    /// An orphan that matches: set our controller ownerReference, then it is claimed.
    Adopt,
    /// Ours but no longer matching: remove our ownerReference (for real: the
    /// reference's merge patch with `$patch: delete` leaves it in place, §19
    /// quirk 2). Not claimed.
    Release,
    /// Not ours to touch (another controller, or not matching, or being deleted).
    Ignore,
}

impl ClaimAction {
    /// Whether the object belongs to the claimer after the action succeeded.
    pub fn is_claimed(self) -> bool {
        matches!(self, ClaimAction::Keep | ClaimAction::Adopt)
    }
}

/// The claim decision for one object (`ClaimObject`).
///
/// `controller` is the object's controller ownerReference, `matches` whether
/// the claimer's selector matches the object's labels, `object_deleting`
/// whether the object has a deletion timestamp.
pub fn claim(
    claimer: Claimer<'_>,
    controller: Option<&ControllerRef>,
    matches: bool,
    object_deleting: bool,
) -> ClaimAction {
    match controller {
        Some(c) if c.uid != claimer.uid => ClaimAction::Ignore,
        Some(_) if matches => ClaimAction::Keep,
        Some(_) if claimer.deleting => ClaimAction::Ignore,
        Some(_) => ClaimAction::Release,
        None if claimer.deleting || !matches || object_deleting => ClaimAction::Ignore,
        None => ClaimAction::Adopt,
    }
}

// ---------------------------------------------------------------------------
// Deletion order (§9.7)
// ---------------------------------------------------------------------------

/// Compares two machines in deletion order: `Less` means `a` is deleted before `b`.
///
/// 1. not preserved before preserved; among preserved, auto-preserved before
///    explicitly preserved, then the earlier preserve expiry first;
/// 2. lower `machinepriority` first (missing or unparsable = 3);
/// 3. a parseable `marked-for-deletion-time` before none; both: earlier first;
/// 4. phase rank ([`Phase::deletion_rank`]);
/// 5. older creation timestamp first;
/// 6. (mcm-rs) name, so the order is total and deterministic.
pub fn deletion_order(a: &MachineView, b: &MachineView, now: DateTime<Utc>) -> Ordering {
    let (pa, pb) = (a.is_preserved(now), b.is_preserved(now));
    if pa != pb {
        return pa.cmp(&pb);
    }
    if pa {
        let (aa, ab) = (a.is_auto_preserved(), b.is_auto_preserved());
        if aa != ab {
            return ab.cmp(&aa);
        }
        if a.preserve_expiry != b.preserve_expiry {
            return a.preserve_expiry.cmp(&b.preserve_expiry);
        }
    }
    let prio = a.priority().cmp(&b.priority());
    if prio != Ordering::Equal {
        return prio;
    }
    match (a.marked_for_deletion_time(), b.marked_for_deletion_time()) {
        (Some(_), None) => return Ordering::Less,
        (None, Some(_)) => return Ordering::Greater,
        (Some(ta), Some(tb)) if ta != tb => return ta.cmp(&tb),
        _ => {}
    }
    let rank = a.phase.deletion_rank().cmp(&b.phase.deletion_rank());
    if rank != Ordering::Equal {
        return rank;
    }
    // A machine without creation timestamp (never the case for stored objects) sorts first.
    let age = a.created.cmp(&b.created);
    if age != Ordering::Equal {
        return age;
    }
    a.name.cmp(&b.name)
}

/// The first `count` machines of `candidates` in [`deletion_order`].
pub fn machines_to_delete<'a>(
    candidates: &[&'a MachineView],
    count: usize,
    now: DateTime<Utc>,
) -> Vec<&'a MachineView> {
    let mut sorted: Vec<&MachineView> = candidates.to_vec();
    if count < sorted.len() {
        sorted.sort_by(|a, b| deletion_order(a, b, now));
    }
    sorted.truncate(count);
    sorted
}

// ---------------------------------------------------------------------------
// Replica management (§9.5)
// ---------------------------------------------------------------------------

/// The batch sizes of a slow-start creation of `count` machines: `initial`,
/// `2·initial`, `4·initial`, …, the last one trimmed so that they add up to `count`.
pub fn slow_start_batches(count: usize, initial: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let mut remaining = count;
    let mut size = initial.max(1);
    while remaining > 0 {
        let b = size.min(remaining);
        batches.push(b);
        remaining -= b;
        size = size.saturating_mul(2);
    }
    batches
}

/// What the MachineSet's replica manager observed.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaInput<'a> {
    /// `spec.replicas`.
    pub desired: i32,
    /// The set carries `freeze=True` (and is not being deleted).
    pub frozen: bool,
    /// The set carries the `scale-up-disabled` label.
    pub scale_up_disabled: bool,
    /// The set's `last-deployment-replica-change-by-scaler-time` annotation, parsed.
    pub scaler_change_time: Option<DateTime<Utc>>,
    /// The claimed machines.
    pub machines: &'a [MachineView],
    /// The time of the decision.
    pub now: DateTime<Utc>,
}

/// Why a machine is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// The set has more machines than `spec.replicas`.
    Surplus,
    /// The cluster-autoscaler marked it (`machinepriority=1` and a
    /// marked-for-deletion time not after the scaler's replica change).
    MarkedByScaler,
    /// It is Failed and not preserved: it is replaced.
    Failed,
}

/// One machine to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// The machine's name.
    pub name: String,
    /// Why.
    pub reason: DeleteReason,
}

/// The replica manager's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaPlan {
    /// Nothing to do.
    Steady,
    /// Create `count` machines in the given slow-start batches.
    Create {
        /// How many machines (at most [`BURST_REPLICAS`]).
        count: usize,
        /// The batch sizes, in order.
        batches: Vec<usize>,
    },
    /// Machines are missing but the set is frozen: create nothing.
    Frozen {
        /// How many are missing.
        missing: usize,
    },
    /// Machines are missing but the set carries `scale-up-disabled`: create nothing.
    ScaleUpDisabled {
        /// How many are missing.
        missing: usize,
    },
    /// Delete these machines (at most [`BURST_REPLICAS`], surplus first in deletion order).
    Delete(Vec<Deletion>),
}

/// Whether a Failed machine is terminated (and replaced) rather than kept
/// (`shouldFailedMachineBeTerminated`).
///
/// A preserve expiry time decides alone: in the future keeps, in the past
/// terminates. Otherwise the effective preserve value decides: the node's
/// annotation when the node or the machine's last-applied annotation says
/// something, else the machine's annotation; `now`, `when-failed` and
/// `auto-preserved` keep. When the node could not be looked at
/// (`node_preserve == None`) the machine's annotation is used.
pub fn failed_machine_should_be_terminated(m: &MachineView, now: DateTime<Utc>) -> bool {
    if let Some(t) = m.preserve_expiry {
        return t <= now;
    }
    let machine_value = m
        .annotations
        .get(keys::PRESERVE)
        .cloned()
        .unwrap_or_default();
    let last_applied = m
        .annotations
        .get(keys::LAST_APPLIED_NODE_PRESERVE)
        .cloned()
        .unwrap_or_default();
    let effective = match &m.node_preserve {
        Some(node) if !node.is_empty() || !last_applied.is_empty() => node.clone(),
        _ => machine_value,
    };
    !matches!(
        effective.as_str(),
        keys::PRESERVE_NOW | keys::PRESERVE_WHEN_FAILED | keys::PRESERVE_AUTO
    )
}

/// Whether a machine was marked by the cluster-autoscaler before (or at) the
/// scaler's last replica change (`getMachinesMarkedForDeletion`).
pub fn marked_by_scaler(m: &MachineView, scaler_change_time: Option<DateTime<Utc>>) -> bool {
    let Some(limit) = scaler_change_time else {
        return false;
    };
    if m.annotations
        .get(keys::MACHINE_PRIORITY)
        .map(String::as_str)
        != Some("1")
    {
        return false;
    }
    m.marked_for_deletion_time().is_some_and(|t| t <= limit)
}

/// The replica decision of one MachineSet pass (`manageReplicas`).
///
/// Counting ignores terminating machines (see [`MachineView::is_terminating`]).
/// Machines labelled `update-result=successful` are never surplus (they were
/// just moved here by an in-place rollout). When machines are missing, the
/// plan creates them unless the set is frozen or scale-up-disabled, and
/// deletes nothing in the same pass; otherwise it deletes the surplus (in
/// [`deletion_order`]), the scaler-marked machines and the Failed machines
/// that are not preserved, each machine once.
pub fn manage_replicas(input: &ReplicaInput<'_>) -> ReplicaPlan {
    let desired = i64::from(input.desired.max(0));
    let live: Vec<&MachineView> = input
        .machines
        .iter()
        .filter(|m| !m.is_terminating())
        .collect();
    let candidates: Vec<&MachineView> = live
        .iter()
        .copied()
        .filter(|m| !m.is_update_successful())
        .collect();
    let create_diff = live.len() as i64 - desired;
    if create_diff < 0 {
        let missing = usize::try_from(-create_diff).unwrap_or(usize::MAX);
        if input.frozen {
            return ReplicaPlan::Frozen { missing };
        }
        if input.scale_up_disabled {
            return ReplicaPlan::ScaleUpDisabled { missing };
        }
        let count = missing.min(BURST_REPLICAS);
        return ReplicaPlan::Create {
            count,
            batches: slow_start_batches(count, SLOW_START_INITIAL_BATCH_SIZE),
        };
    }
    let mut out: Vec<Deletion> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut push = |m: &MachineView, reason: DeleteReason, out: &mut Vec<Deletion>| {
        if seen.insert(m.name.clone()) {
            out.push(Deletion {
                name: m.name.clone(),
                reason,
            });
        }
    };
    let delete_diff = candidates.len() as i64 - desired;
    if delete_diff > 0 {
        let n = usize::try_from(delete_diff)
            .unwrap_or(usize::MAX)
            .min(BURST_REPLICAS);
        for m in machines_to_delete(&candidates, n, input.now) {
            push(m, DeleteReason::Surplus, &mut out);
        }
    }
    for m in &candidates {
        if marked_by_scaler(m, input.scaler_change_time) {
            push(m, DeleteReason::MarkedByScaler, &mut out);
        }
    }
    for m in &candidates {
        if m.phase == Phase::Failed && failed_machine_should_be_terminated(m, input.now) {
            push(m, DeleteReason::Failed, &mut out);
        }
    }
    out.truncate(BURST_REPLICAS);
    if out.is_empty() {
        ReplicaPlan::Steady
    } else {
        ReplicaPlan::Delete(out)
    }
}

// ---------------------------------------------------------------------------
// Auto-preservation (§9.6)
// ---------------------------------------------------------------------------

/// Annotation changes of the auto-preservation bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoPreservePlan {
    /// Machines to annotate `preserve=auto-preserved`.
    pub annotate: Vec<String>,
    /// Machines whose `preserve=auto-preserved` annotation is removed.
    pub unannotate: Vec<String>,
}

/// Which machines get or lose `preserve=auto-preserved`
/// (`manageAutoPreservationOfFailedMachines`).
///
/// `max` is `spec.autoPreserveFailedMachineMax`, `current` the status's
/// `autoPreserveFailedMachineCount`. With capacity left, the newest Failed
/// machines without a recognised preserve value are annotated; over the
/// limit, the oldest auto-preserved machines lose the annotation. Explicitly
/// preserved machines are never touched.
pub fn auto_preservation(max: i32, current: i32, machines: &[MachineView]) -> AutoPreservePlan {
    let remaining = i64::from(max) - i64::from(current);
    let mut plan = AutoPreservePlan::default();
    if remaining == 0 {
        return plan;
    }
    if remaining < 0 {
        let mut auto: Vec<&MachineView> =
            machines.iter().filter(|m| m.is_auto_preserved()).collect();
        auto.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
        let n = usize::try_from(-remaining).unwrap_or(usize::MAX);
        plan.unannotate = auto.into_iter().take(n).map(|m| m.name.clone()).collect();
        return plan;
    }
    let allowed = [
        keys::PRESERVE_NOW,
        keys::PRESERVE_WHEN_FAILED,
        keys::PRESERVE_AUTO,
        keys::PRESERVE_FALSE,
    ];
    let mut candidates: Vec<&MachineView> = machines
        .iter()
        .filter(|m| {
            m.phase == Phase::Failed
                && !m.deleting
                && !allowed.contains(
                    &m.annotations
                        .get(keys::PRESERVE)
                        .map(String::as_str)
                        .unwrap_or(""),
                )
        })
        .collect();
    candidates.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| a.name.cmp(&b.name)));
    let n = usize::try_from(remaining).unwrap_or(usize::MAX);
    plan.annotate = candidates
        .into_iter()
        .take(n)
        .map(|m| m.name.clone())
        .collect();
    plan
}

impl AutoPreservePlan {
    /// Applies the plan to the views, as the writes will, so that the same
    /// pass's replica decision sees the new annotations.
    pub fn apply(&self, machines: &mut [MachineView]) {
        for m in machines.iter_mut() {
            if self.annotate.contains(&m.name) {
                m.annotations
                    .insert(keys::PRESERVE.to_string(), keys::PRESERVE_AUTO.to_string());
            }
            if self.unannotate.contains(&m.name) {
                m.annotations.remove(keys::PRESERVE);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Status (§9.9)
// ---------------------------------------------------------------------------

/// The counters of a MachineSet status computed from its claimed machines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetStatusCounts {
    /// All claimed machines, any phase (`replicas`).
    pub replicas: i32,
    /// Machines carrying every template label (`fullyLabeledReplicas`).
    pub fully_labeled_replicas: i32,
    /// Running machines (`readyReplicas`).
    pub ready_replicas: i32,
    /// Available or Running machines (`availableReplicas`).
    pub available_replicas: i32,
    /// Failed machines with a preserve expiry time (`preservedFailedReplicas`).
    pub preserved_failed_replicas: i32,
    /// Machines annotated `preserve=auto-preserved` (`autoPreserveFailedMachineCount`).
    pub auto_preserve_failed_machine_count: i32,
    /// Names of the machines whose last operation failed, preserved Failed
    /// machines excluded (`failedMachines`), in input order.
    pub failed_machines: Vec<String>,
}

fn count_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The MachineSet status counters (`calculateMachineSetStatus`).
///
/// Availability is phase-based only: `minReadySeconds` is not honoured (§19
/// quirk 3, kept: machines have no "ready since" time to measure it from,
/// and the MachineDeployment maths must agree with the reference's counts).
pub fn set_status(
    template_labels: &BTreeMap<String, String>,
    machines: &[MachineView],
) -> SetStatusCounts {
    let mut s = SetStatusCounts {
        replicas: count_i32(machines.len()),
        ..Default::default()
    };
    let mut fully = 0usize;
    let mut ready = 0usize;
    let mut available = 0usize;
    let mut preserved = 0usize;
    let mut auto = 0usize;
    for m in machines {
        if labels_contain(&m.labels, template_labels) {
            fully += 1;
        }
        if m.phase.is_available() {
            available += 1;
            if m.phase == Phase::Running {
                ready += 1;
            }
        }
        if m.phase == Phase::Failed && m.preserve_expiry.is_some() {
            preserved += 1;
        } else if m.last_operation_failed {
            s.failed_machines.push(m.name.clone());
        }
        if m.is_auto_preserved() {
            auto += 1;
        }
    }
    s.fully_labeled_replicas = count_i32(fully);
    s.ready_replicas = count_i32(ready);
    s.available_replicas = count_i32(available);
    s.preserved_failed_replicas = count_i32(preserved);
    s.auto_preserve_failed_machine_count = count_i32(auto);
    s
}

/// What happens to the `ReplicaFailure` condition of a MachineSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaFailureChange {
    /// Leave the conditions as they are.
    Keep,
    /// Add `ReplicaFailure=True` with this reason and message.
    Add {
        /// `FailedCreate`, `FailedDelete` or empty (as the reference when counts match).
        reason: String,
        /// The error.
        message: String,
    },
    /// Remove the condition.
    Remove,
}

/// The `ReplicaFailure` condition decision: added when the replica manager
/// failed and the condition is absent, removed when it succeeded.
pub fn replica_failure(
    manage_error: Option<&str>,
    condition_present: bool,
    claimed: usize,
    desired: i32,
) -> ReplicaFailureChange {
    match manage_error {
        Some(err) if !condition_present => {
            let diff = claimed as i64 - i64::from(desired);
            let reason = match diff.cmp(&0) {
                Ordering::Less => "FailedCreate",
                Ordering::Greater => "FailedDelete",
                Ordering::Equal => "",
            };
            ReplicaFailureChange::Add {
                reason: reason.to_string(),
                message: err.to_string(),
            }
        }
        None if condition_present => ReplicaFailureChange::Remove,
        _ => ReplicaFailureChange::Keep,
    }
}

// ---------------------------------------------------------------------------
// Expectations
// ---------------------------------------------------------------------------

/// How the cache currently shows a machine the controller created or deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not in the cache.
    Absent,
    /// In the cache, not being deleted.
    Present,
    /// In the cache with a deletion timestamp or phase Terminating.
    Deleting,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Expectation {
    creates: BTreeSet<String>,
    deletes: BTreeSet<String>,
    since: Option<DateTime<Utc>>,
}

/// Creations and deletions a controller made and has not yet observed in its
/// cache, per MachineSet key. Until they are observed (or
/// [`EXPECTATIONS_TIMEOUT`] passed) the set's replica count is not trusted,
/// so a lagging cache can never make the controller create the same
/// machines twice or delete one machine too many.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    entries: HashMap<String, Expectation>,
}

impl Expectations {
    /// A fresh, empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records machines created for `key`.
    pub fn expect_creations(
        &mut self,
        key: &str,
        names: impl IntoIterator<Item = String>,
        now: DateTime<Utc>,
    ) {
        let e = self.entries.entry(key.to_string()).or_default();
        e.creates.extend(names);
        e.since = Some(now);
    }

    /// Records machines deleted for `key`.
    pub fn expect_deletions(
        &mut self,
        key: &str,
        names: impl IntoIterator<Item = String>,
        now: DateTime<Utc>,
    ) {
        let e = self.entries.entry(key.to_string()).or_default();
        e.deletes.extend(names);
        e.since = Some(now);
    }

    /// Drops everything recorded for `key` (the set is gone).
    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Removes what the cache now shows and answers whether nothing is
    /// pending any more. An entry older than [`EXPECTATIONS_TIMEOUT`] is
    /// dropped (the cache may never show a machine someone else deleted).
    pub fn satisfied(
        &mut self,
        key: &str,
        seen: impl Fn(&str) -> Seen,
        now: DateTime<Utc>,
    ) -> bool {
        let Some(e) = self.entries.get_mut(key) else {
            return true;
        };
        e.creates.retain(|n| seen(n) == Seen::Absent);
        e.deletes.retain(|n| seen(n) == Seen::Present);
        let expired = e.since.is_none_or(|t| {
            now.signed_duration_since(t)
                .to_std()
                .is_ok_and(|d| d >= EXPECTATIONS_TIMEOUT)
        });
        if expired || (e.creates.is_empty() && e.deletes.is_empty()) {
            self.entries.remove(key);
            return true;
        }
        false
    }
}

// ---------------------------------------------------------------------------
// Template propagation (§9.4)
// ---------------------------------------------------------------------------

/// The inline `MachineConfiguration` fields of a MachineSpec (JSON names).
pub const MACHINE_CONFIGURATION_FIELDS: [&str; 8] = [
    "drainTimeout",
    "healthTimeout",
    "creationTimeout",
    "inPlaceUpdateTimeout",
    "machinePreserveTimeout",
    "disableHealthTimeout",
    "maxEvictRetries",
    "nodeConditions",
];

/// The machine spec after pushing the set template's in-place fields into it,
/// or `None` when nothing changes (§9.4).
///
/// `spec.nodeTemplate` is pushed into machines that are neither Failed nor
/// Terminating, the inline machine configuration likewise, `spec.class.kind`
/// into every machine. Both specs are the JSON form of a MachineSpec; the
/// comparison treats `null`, `{}` and `[]` as absent. The reference mutates
/// its informer cache while doing this (§19 quirk 10); here the caller gets a
/// fresh value and writes it with a resourceVersion precondition.
pub fn propagate_template(
    template_spec: &serde_json::Value,
    machine_spec: &serde_json::Value,
    phase: Phase,
    machine_deleting: bool,
) -> Option<serde_json::Value> {
    use serde_json::Value;
    let tpl = template_spec.as_object()?;
    let mut out = machine_spec.as_object().cloned().unwrap_or_default();
    let mut changed = false;
    let active = phase.is_active() && !machine_deleting;
    let mut sync_field = |key: &str, out: &mut serde_json::Map<String, Value>| {
        let want = tpl.get(key).map(normalize).filter(|v| !v.is_null());
        let have = out.get(key).map(normalize).filter(|v| !v.is_null());
        if want != have {
            match tpl.get(key) {
                Some(v) if want.is_some() => {
                    out.insert(key.to_string(), v.clone());
                }
                _ => {
                    out.remove(key);
                }
            }
            changed = true;
        }
    };
    if active {
        sync_field("nodeTemplate", &mut out);
        for key in MACHINE_CONFIGURATION_FIELDS {
            sync_field(key, &mut out);
        }
    }
    let want_kind = tpl
        .get("class")
        .and_then(|c| c.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let have_kind = out
        .get("class")
        .and_then(|c| c.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if want_kind != have_kind {
        let class = out
            .entry("class".to_string())
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(obj) = class.as_object_mut() {
            obj.insert("kind".to_string(), Value::String(want_kind.to_string()));
            changed = true;
        }
    }
    changed.then_some(Value::Object(out))
}

/// A JSON value with `null`, empty objects and empty arrays removed
/// recursively (Go's semantic equality treats nil and empty alike; an absent
/// value normalizes to `null`).
pub fn normalize(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let n = normalize(v);
                if !n.is_null() {
                    out.insert(k.clone(), n);
                }
            }
            if out.is_empty() {
                Value::Null
            } else {
                Value::Object(out)
            }
        }
        Value::Array(a) => {
            if a.is_empty() {
                Value::Null
            } else {
                Value::Array(a.iter().map(normalize).collect())
            }
        }
        other => other.clone(),
    }
}

/// The `generateName` of machines created for a set: `<set>-`, or `<set>`
/// when the dashed form would be too long to be a valid name prefix.
pub fn machine_generate_name(set_name: &str) -> String {
    // Kubernetes appends 5 random characters and names are at most 253 long.
    let dashed = format!("{set_name}-");
    if dashed.len() + 5 <= 253 {
        dashed
    } else {
        set_name.chars().take(248).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0)
            .single()
            .unwrap_or_default()
    }

    fn m(name: &str, phase: Phase, created: i64) -> MachineView {
        MachineView {
            name: name.to_string(),
            phase,
            created: Some(t(created)),
            ..Default::default()
        }
    }

    fn with_ann(mut mv: MachineView, k: &str, v: &str) -> MachineView {
        mv.annotations.insert(k.to_string(), v.to_string());
        mv
    }

    fn names(v: &[&MachineView]) -> Vec<String> {
        v.iter().map(|m| m.name.clone()).collect()
    }

    fn input(desired: i32, machines: &[MachineView]) -> ReplicaInput<'_> {
        ReplicaInput {
            desired,
            frozen: false,
            scale_up_disabled: false,
            scaler_change_time: None,
            machines,
            now: t(1000),
        }
    }

    fn deleted(plan: &ReplicaPlan) -> Vec<(String, DeleteReason)> {
        match plan {
            ReplicaPlan::Delete(d) => d.iter().map(|d| (d.name.clone(), d.reason)).collect(),
            _ => Vec::new(),
        }
    }

    // --- selectors ---

    #[test]
    fn selector_match_labels_must_all_be_present() {
        let sel = LabelSelector {
            match_labels: Some([("a".into(), "1".into()), ("b".into(), "2".into())].into()),
            ..Default::default()
        };
        let full: BTreeMap<String, String> = [
            ("a".into(), "1".into()),
            ("b".into(), "2".into()),
            ("c".into(), "3".into()),
        ]
        .into();
        let partial: BTreeMap<String, String> = [("a".into(), "1".into())].into();
        assert_eq!(selector_matches(&sel, &full), Ok(true));
        assert_eq!(selector_matches(&sel, &partial), Ok(false));
    }

    #[test]
    fn selector_match_expressions_follow_kubernetes_operators() {
        let req = |op: &str, vals: &[&str]| LabelSelectorRequirement {
            key: "k".into(),
            operator: op.into(),
            values: if vals.is_empty() {
                None
            } else {
                Some(vals.iter().map(|s| s.to_string()).collect())
            },
        };
        let sel = |r| LabelSelector {
            match_expressions: Some(vec![r]),
            ..Default::default()
        };
        let l: BTreeMap<String, String> = [("k".into(), "x".into())].into();
        let empty = BTreeMap::new();
        assert_eq!(selector_matches(&sel(req("In", &["x", "y"])), &l), Ok(true));
        assert_eq!(selector_matches(&sel(req("In", &["y"])), &l), Ok(false));
        assert_eq!(selector_matches(&sel(req("NotIn", &["y"])), &l), Ok(true));
        assert_eq!(
            selector_matches(&sel(req("NotIn", &["y"])), &empty),
            Ok(true)
        );
        assert_eq!(selector_matches(&sel(req("Exists", &[])), &l), Ok(true));
        assert_eq!(
            selector_matches(&sel(req("DoesNotExist", &[])), &l),
            Ok(false)
        );
        assert!(selector_matches(&sel(req("Bogus", &[])), &l).is_err());
        assert!(selector_matches(&sel(req("In", &[])), &l).is_err());
    }

    #[test]
    fn selector_validation_finds_a_bad_requirement_behind_a_false_one() {
        let sel = LabelSelector {
            match_labels: Some([("a".into(), "1".into())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "k".into(),
                    operator: "Exists".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "k".into(),
                    operator: "Near".into(),
                    values: None,
                },
            ]),
        };
        assert_eq!(selector_matches(&sel, &BTreeMap::new()), Ok(false));
        assert_eq!(
            validate_selector(&sel),
            Err(SelectorError::UnknownOperator("Near".into()))
        );
    }

    #[test]
    fn empty_selector_is_recognised() {
        assert!(selector_is_empty(&LabelSelector::default()));
        assert!(selector_is_empty(&LabelSelector {
            match_labels: Some(BTreeMap::new()),
            match_expressions: Some(vec![]),
        }));
        assert!(!selector_is_empty(&LabelSelector {
            match_labels: Some([("a".into(), "b".into())].into()),
            ..Default::default()
        }));
    }

    // --- claiming ---

    fn cref(uid: &str) -> ControllerRef {
        ControllerRef {
            kind: "MachineSet".into(),
            name: "ms".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn claim_ignores_objects_controlled_by_another_owner() {
        let me = Claimer {
            uid: "u1",
            deleting: false,
        };
        assert_eq!(
            claim(me, Some(&cref("u2")), true, false),
            ClaimAction::Ignore
        );
    }

    #[test]
    fn claim_keeps_own_matching_objects_even_while_the_owner_is_deleted() {
        let deleting = Claimer {
            uid: "u1",
            deleting: true,
        };
        assert_eq!(
            claim(deleting, Some(&cref("u1")), true, false),
            ClaimAction::Keep
        );
        assert!(ClaimAction::Keep.is_claimed());
    }

    #[test]
    fn claim_releases_own_objects_that_no_longer_match_unless_owner_deleting() {
        let me = Claimer {
            uid: "u1",
            deleting: false,
        };
        assert_eq!(
            claim(me, Some(&cref("u1")), false, false),
            ClaimAction::Release
        );
        let deleting = Claimer {
            uid: "u1",
            deleting: true,
        };
        assert_eq!(
            claim(deleting, Some(&cref("u1")), false, false),
            ClaimAction::Ignore
        );
        assert!(!ClaimAction::Release.is_claimed());
    }

    #[test]
    fn claim_adopts_matching_orphans_only_when_neither_side_is_deleting() {
        let me = Claimer {
            uid: "u1",
            deleting: false,
        };
        assert_eq!(claim(me, None, true, false), ClaimAction::Adopt);
        assert_eq!(claim(me, None, false, false), ClaimAction::Ignore);
        assert_eq!(claim(me, None, true, true), ClaimAction::Ignore);
        let deleting = Claimer {
            uid: "u1",
            deleting: true,
        };
        assert_eq!(claim(deleting, None, true, false), ClaimAction::Ignore);
    }

    // --- deletion order ---

    #[test]
    fn deletion_order_priority_one_goes_first_and_default_is_three() {
        let a = with_ann(m("a", Phase::Running, 0), keys::MACHINE_PRIORITY, "1");
        let b = m("b", Phase::Pending, 5); // default 3
        let c = with_ann(m("c", Phase::Failed, 9), keys::MACHINE_PRIORITY, "5");
        let bad = with_ann(m("d", Phase::Failed, 9), keys::MACHINE_PRIORITY, "x"); // = 3
        let all = [&c, &b, &a, &bad];
        let order = machines_to_delete(&all, 3, t(100));
        assert_eq!(names(&order), ["a", "d", "b"]);
    }

    #[test]
    fn deletion_order_marked_for_deletion_time_before_phase() {
        let marked_late = with_ann(
            m("late", Phase::Running, 0),
            keys::MARKED_FOR_DELETION_TIME,
            "2024-01-02T00:00:00Z",
        );
        let marked_early = with_ann(
            m("early", Phase::Running, 0),
            keys::MARKED_FOR_DELETION_TIME,
            "2024-01-01T00:00:00Z",
        );
        let unmarked_failed = m("failed", Phase::Failed, 0);
        let garbage = with_ann(
            m("garbage", Phase::Terminating, 0),
            keys::MARKED_FOR_DELETION_TIME,
            "yesterday",
        );
        let all = [&unmarked_failed, &marked_late, &garbage, &marked_early];
        let order = machines_to_delete(&all, 3, t(0));
        assert_eq!(names(&order), ["early", "late", "garbage"]);
    }

    #[test]
    fn deletion_order_phase_rank_then_age() {
        let running_old = m("running-old", Phase::Running, 0);
        let running_new = m("running-new", Phase::Running, 10);
        let pending = m("pending", Phase::Pending, 20);
        let unknown = m("unknown", Phase::Unknown, 20);
        let crash = m("crash", Phase::CrashLoopBackOff, 20);
        let failed = m("failed", Phase::Failed, 20);
        let term = m("term", Phase::Terminating, 20);
        let available = m("available", Phase::Available, 20);
        let all = [
            &running_new,
            &running_old,
            &available,
            &pending,
            &unknown,
            &crash,
            &failed,
            &term,
        ];
        let order = machines_to_delete(&all, 7, t(100));
        assert_eq!(
            names(&order),
            [
                "term",
                "failed",
                "crash",
                "unknown",
                "pending",
                "available",
                "running-old"
            ]
        );
    }

    #[test]
    fn deletion_order_machines_without_phase_rank_like_terminating() {
        let fresh = m("fresh", Phase::None, 50);
        let failed = m("failed", Phase::Failed, 0);
        let order = machines_to_delete(&[&failed, &fresh], 1, t(100));
        assert_eq!(names(&order), ["fresh"]);
    }

    #[test]
    fn deletion_order_preserved_machines_go_last_auto_preserved_before_explicit() {
        let mut explicit = with_ann(m("explicit", Phase::Failed, 0), keys::MACHINE_PRIORITY, "1");
        explicit.preserve_expiry = Some(t(500));
        let mut auto = with_ann(
            m("auto", Phase::Failed, 0),
            keys::PRESERVE,
            keys::PRESERVE_AUTO,
        );
        auto.preserve_expiry = Some(t(900));
        let mut expired = m("expired", Phase::Running, 0);
        expired.preserve_expiry = Some(t(10)); // in the past: not preserved
        let running = m("running", Phase::Running, 5);
        let all = [&explicit, &auto, &running, &expired];
        let order = machines_to_delete(&all, 3, t(100));
        assert_eq!(names(&order), ["expired", "running", "auto"]);
    }

    #[test]
    fn deletion_order_among_preserved_earlier_expiry_first() {
        let mut a = m("a", Phase::Failed, 0);
        a.preserve_expiry = Some(t(900));
        let mut b = m("b", Phase::Failed, 0);
        b.preserve_expiry = Some(t(500));
        assert_eq!(deletion_order(&b, &a, t(100)), Ordering::Less);
    }

    // --- slow start ---

    #[test]
    fn slow_start_batches_double_and_sum_to_count() {
        assert_eq!(slow_start_batches(0, 1), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1, 1), vec![1]);
        assert_eq!(slow_start_batches(6, 1), vec![1, 2, 3]);
        assert_eq!(slow_start_batches(7, 1), vec![1, 2, 4]);
        assert_eq!(slow_start_batches(100, 1), vec![1, 2, 4, 8, 16, 32, 37]);
        assert_eq!(slow_start_batches(5, 0), vec![1, 2, 2]);
    }

    // --- manage replicas ---

    #[test]
    fn missing_machines_are_created_in_slow_start_batches() {
        let machines = [m("a", Phase::Running, 0)];
        let plan = manage_replicas(&input(6, &machines));
        assert_eq!(
            plan,
            ReplicaPlan::Create {
                count: 5,
                batches: vec![1, 2, 2]
            }
        );
    }

    #[test]
    fn creation_is_capped_by_the_burst() {
        let plan = manage_replicas(&input(250, &[]));
        let ReplicaPlan::Create { count, batches } = plan else {
            panic!("expected Create")
        };
        assert_eq!(count, BURST_REPLICAS);
        assert_eq!(batches.iter().sum::<usize>(), BURST_REPLICAS);
    }

    #[test]
    fn frozen_set_creates_nothing_but_still_deletes() {
        let machines = [m("a", Phase::Running, 0)];
        let mut i = input(3, &machines);
        i.frozen = true;
        assert_eq!(manage_replicas(&i), ReplicaPlan::Frozen { missing: 2 });
        let many = [m("a", Phase::Running, 0), m("b", Phase::Running, 1)];
        let mut i = input(1, &many);
        i.frozen = true;
        assert_eq!(
            deleted(&manage_replicas(&i)),
            [("a".to_string(), DeleteReason::Surplus)]
        );
    }

    #[test]
    fn scale_up_disabled_set_creates_nothing() {
        let mut i = input(2, &[]);
        i.scale_up_disabled = true;
        assert_eq!(
            manage_replicas(&i),
            ReplicaPlan::ScaleUpDisabled { missing: 2 }
        );
    }

    #[test]
    fn terminating_machines_do_not_count_as_replicas() {
        let mut gone = m("gone", Phase::Running, 0);
        gone.deleting = true;
        let machines = [
            m("t", Phase::Terminating, 0),
            gone,
            m("a", Phase::Running, 0),
        ];
        assert_eq!(
            manage_replicas(&input(2, &machines)),
            ReplicaPlan::Create {
                count: 1,
                batches: vec![1]
            }
        );
    }

    #[test]
    fn surplus_is_deleted_in_deletion_order() {
        let machines = [
            m("old-running", Phase::Running, 0),
            m("new-running", Phase::Running, 10),
            m("pending", Phase::Pending, 5),
            with_ann(m("prio1", Phase::Running, 20), keys::MACHINE_PRIORITY, "1"),
        ];
        let plan = manage_replicas(&input(2, &machines));
        assert_eq!(
            deleted(&plan),
            [
                ("prio1".to_string(), DeleteReason::Surplus),
                ("pending".to_string(), DeleteReason::Surplus)
            ]
        );
    }

    #[test]
    fn scale_to_zero_deletes_every_live_machine() {
        let machines = [
            m("a", Phase::Running, 0),
            m("b", Phase::Pending, 1),
            m("c", Phase::Terminating, 1),
        ];
        let plan = manage_replicas(&input(0, &machines));
        let mut got: Vec<String> = deleted(&plan).into_iter().map(|d| d.0).collect();
        got.sort();
        assert_eq!(got, ["a", "b"]);
    }

    #[test]
    fn in_place_updated_machines_are_never_surplus() {
        let mut moved = m("moved", Phase::Running, 0);
        moved.labels.insert(
            keys::UPDATE_RESULT.into(),
            keys::UPDATE_RESULT_SUCCESSFUL.into(),
        );
        let machines = [moved, m("a", Phase::Running, 5)];
        // 2 machines for 1 replica, but only one candidate: nothing to delete.
        assert_eq!(manage_replicas(&input(1, &machines)), ReplicaPlan::Steady);
    }

    #[test]
    fn failed_machines_are_replaced_by_deleting_them() {
        let machines = [m("ok", Phase::Running, 0), m("bad", Phase::Failed, 0)];
        let plan = manage_replicas(&input(2, &machines));
        assert_eq!(deleted(&plan), [("bad".to_string(), DeleteReason::Failed)]);
        // The next pass, with "bad" terminating, creates the replacement.
        let next = [m("ok", Phase::Running, 0), m("bad", Phase::Terminating, 0)];
        assert!(matches!(
            manage_replicas(&input(2, &next)),
            ReplicaPlan::Create { count: 1, .. }
        ));
    }

    #[test]
    fn failed_machine_is_not_deleted_while_creation_is_pending() {
        // The reference's early return on scale-up: creation first, deletion next pass.
        let machines = [m("bad", Phase::Failed, 0)];
        assert!(matches!(
            manage_replicas(&input(2, &machines)),
            ReplicaPlan::Create { count: 1, .. }
        ));
    }

    #[test]
    fn preserved_failed_machines_are_kept() {
        let mut preserved = m("preserved", Phase::Failed, 0);
        preserved.preserve_expiry = Some(t(5000));
        let annotated = with_ann(
            m("when-failed", Phase::Failed, 0),
            keys::PRESERVE,
            keys::PRESERVE_WHEN_FAILED,
        );
        let auto = with_ann(
            m("auto", Phase::Failed, 0),
            keys::PRESERVE,
            keys::PRESERVE_AUTO,
        );
        let machines = [preserved, annotated, auto];
        assert_eq!(manage_replicas(&input(3, &machines)), ReplicaPlan::Steady);
    }

    #[test]
    fn failed_machine_with_expired_preservation_is_terminated() {
        let mut expired = with_ann(m("x", Phase::Failed, 0), keys::PRESERVE, keys::PRESERVE_NOW);
        expired.preserve_expiry = Some(t(10));
        assert!(failed_machine_should_be_terminated(&expired, t(1000)));
    }

    #[test]
    fn node_preserve_annotation_wins_when_present_or_last_applied() {
        let mut mv = with_ann(m("x", Phase::Failed, 0), keys::PRESERVE, keys::PRESERVE_NOW);
        mv.node_preserve = Some(keys::PRESERVE_FALSE.into());
        assert!(failed_machine_should_be_terminated(&mv, t(0)));
        // Node says nothing and the machine never had a node value: machine wins.
        mv.node_preserve = Some(String::new());
        assert!(!failed_machine_should_be_terminated(&mv, t(0)));
        // Node says nothing but a node value was applied before: node (empty) wins.
        let mv = with_ann(mv, keys::LAST_APPLIED_NODE_PRESERVE, keys::PRESERVE_NOW);
        assert!(failed_machine_should_be_terminated(&mv, t(0)));
        // Node unknown (no target cluster): machine value.
        let mut unknown = mv.clone();
        unknown.node_preserve = None;
        assert!(!failed_machine_should_be_terminated(&unknown, t(0)));
    }

    #[test]
    fn scaler_marked_machines_are_deleted_when_marked_before_the_scaler_change() {
        let marked = with_ann(
            with_ann(m("marked", Phase::Running, 0), keys::MACHINE_PRIORITY, "1"),
            keys::MARKED_FOR_DELETION_TIME,
            "2024-01-01T00:00:00Z",
        );
        let later = with_ann(
            with_ann(m("later", Phase::Running, 0), keys::MACHINE_PRIORITY, "1"),
            keys::MARKED_FOR_DELETION_TIME,
            "2024-01-03T00:00:00Z",
        );
        let machines = [marked, later, m("c", Phase::Running, 0)];
        let mut i = input(3, &machines);
        i.scaler_change_time = parse_rfc3339("2024-01-02T00:00:00Z");
        assert_eq!(
            deleted(&manage_replicas(&i)),
            [("marked".to_string(), DeleteReason::MarkedByScaler)]
        );
        // Without the set annotation the rule never fires.
        i.scaler_change_time = None;
        assert_eq!(manage_replicas(&i), ReplicaPlan::Steady);
    }

    #[test]
    fn a_machine_is_deleted_once_even_when_several_rules_pick_it() {
        let bad = with_ann(
            with_ann(m("bad", Phase::Failed, 0), keys::MACHINE_PRIORITY, "1"),
            keys::MARKED_FOR_DELETION_TIME,
            "2024-01-01T00:00:00Z",
        );
        let machines = [bad, m("ok", Phase::Running, 0)];
        let mut i = input(1, &machines);
        i.scaler_change_time = parse_rfc3339("2024-01-02T00:00:00Z");
        assert_eq!(
            deleted(&manage_replicas(&i)),
            [("bad".to_string(), DeleteReason::Surplus)]
        );
    }

    #[test]
    fn negative_desired_is_treated_as_zero() {
        let machines = [m("a", Phase::Running, 0)];
        assert_eq!(deleted(&manage_replicas(&input(-3, &machines))).len(), 1);
    }

    // --- auto preservation ---

    #[test]
    fn auto_preservation_annotates_newest_unannotated_failed_machines() {
        let machines = [
            m("old", Phase::Failed, 0),
            m("new", Phase::Failed, 10),
            with_ann(
                m("false", Phase::Failed, 20),
                keys::PRESERVE,
                keys::PRESERVE_FALSE,
            ),
            m("running", Phase::Running, 30),
        ];
        let plan = auto_preservation(1, 0, &machines);
        assert_eq!(plan.annotate, ["new"]);
        assert!(plan.unannotate.is_empty());
    }

    #[test]
    fn auto_preservation_over_limit_removes_oldest_auto_annotations() {
        let machines = [
            with_ann(
                m("a", Phase::Failed, 5),
                keys::PRESERVE,
                keys::PRESERVE_AUTO,
            ),
            with_ann(
                m("b", Phase::Failed, 1),
                keys::PRESERVE,
                keys::PRESERVE_AUTO,
            ),
            with_ann(
                m("manual", Phase::Failed, 0),
                keys::PRESERVE,
                keys::PRESERVE_NOW,
            ),
        ];
        let plan = auto_preservation(1, 2, &machines);
        assert_eq!(plan.unannotate, ["b"]);
        assert_eq!(
            auto_preservation(2, 2, &machines),
            AutoPreservePlan::default()
        );
    }

    #[test]
    fn auto_preserved_machine_is_kept_by_the_same_pass() {
        let mut machines = vec![m("ok", Phase::Running, 0), m("bad", Phase::Failed, 0)];
        let plan = auto_preservation(1, 0, &machines);
        plan.apply(&mut machines);
        assert_eq!(manage_replicas(&input(2, &machines)), ReplicaPlan::Steady);
    }

    // --- status ---

    #[test]
    fn status_counts_follow_phases_and_template_labels() {
        let tpl: BTreeMap<String, String> = [("app".into(), "x".into())].into();
        let mut running = m("running", Phase::Running, 0);
        running.labels = tpl.clone();
        let available = m("available", Phase::Available, 0);
        let mut failed = m("failed", Phase::Failed, 0);
        failed.last_operation_failed = true;
        let mut preserved = with_ann(
            m("preserved", Phase::Failed, 0),
            keys::PRESERVE,
            keys::PRESERVE_AUTO,
        );
        preserved.preserve_expiry = Some(t(10));
        preserved.last_operation_failed = true;
        let term = m("term", Phase::Terminating, 0);
        let s = set_status(&tpl, &[running, available, failed, preserved, term]);
        assert_eq!(
            s,
            SetStatusCounts {
                replicas: 5,
                fully_labeled_replicas: 1,
                ready_replicas: 1,
                available_replicas: 2,
                preserved_failed_replicas: 1,
                auto_preserve_failed_machine_count: 1,
                failed_machines: vec!["failed".into()],
            }
        );
    }

    #[test]
    fn replica_failure_condition_is_added_once_and_removed_on_success() {
        assert_eq!(
            replica_failure(Some("quota"), false, 1, 3),
            ReplicaFailureChange::Add {
                reason: "FailedCreate".into(),
                message: "quota".into()
            }
        );
        assert!(matches!(
            replica_failure(Some("x"), false, 4, 3),
            ReplicaFailureChange::Add { reason, .. } if reason == "FailedDelete"
        ));
        assert_eq!(
            replica_failure(Some("x"), true, 1, 3),
            ReplicaFailureChange::Keep
        );
        assert_eq!(
            replica_failure(None, true, 3, 3),
            ReplicaFailureChange::Remove
        );
        assert_eq!(
            replica_failure(None, false, 3, 3),
            ReplicaFailureChange::Keep
        );
    }

    // --- expectations ---

    #[test]
    fn expectations_hold_until_creations_and_deletions_are_observed() {
        let mut e = Expectations::new();
        e.expect_creations("ns/ms", ["a".to_string(), "b".to_string()], t(0));
        e.expect_deletions("ns/ms", ["old".to_string()], t(0));
        assert!(!e.satisfied(
            "ns/ms",
            |n| if n == "b" {
                Seen::Absent
            } else {
                Seen::Present
            },
            t(1)
        ));
        // "b" seen now, "old" still present.
        assert!(!e.satisfied("ns/ms", |_| Seen::Present, t(2)));
        assert!(e.satisfied(
            "ns/ms",
            |n| if n == "old" {
                Seen::Deleting
            } else {
                Seen::Present
            },
            t(3)
        ));
        assert!(e.satisfied("other", |_| Seen::Absent, t(3)));
    }

    #[test]
    fn expectations_expire_after_the_timeout() {
        let mut e = Expectations::new();
        e.expect_creations("k", ["a".to_string()], t(0));
        assert!(!e.satisfied("k", |_| Seen::Absent, t(299)));
        assert!(e.satisfied("k", |_| Seen::Absent, t(300)));
    }

    // --- propagation ---

    #[test]
    fn node_template_and_configuration_are_pushed_into_active_machines() {
        let tpl = serde_json::json!({
            "class": {"kind": "MachineClass", "name": "c2"},
            "nodeTemplate": {"metadata": {"labels": {"pool": "b"}}},
            "drainTimeout": "1h"
        });
        let machine = serde_json::json!({
            "class": {"kind": "MachineClass", "name": "c1"},
            "providerID": "aws:///x",
            "nodeTemplate": {"metadata": {"labels": {"pool": "a"}}},
            "healthTimeout": "10m"
        });
        let out = propagate_template(&tpl, &machine, Phase::Running, false);
        assert_eq!(
            out,
            Some(serde_json::json!({
                "class": {"kind": "MachineClass", "name": "c1"},
                "providerID": "aws:///x",
                "nodeTemplate": {"metadata": {"labels": {"pool": "b"}}},
                "drainTimeout": "1h"
            }))
        );
    }

    #[test]
    fn failed_machines_only_get_the_class_kind() {
        let tpl = serde_json::json!({"class": {"kind": "MachineClass"}, "nodeTemplate": {"spec": {"podCIDR": "x"}}});
        let machine = serde_json::json!({"class": {"kind": "AWSMachineClass", "name": "c"}});
        let out = propagate_template(&tpl, &machine, Phase::Failed, false);
        assert_eq!(
            out,
            Some(serde_json::json!({"class": {"kind": "MachineClass", "name": "c"}}))
        );
        let same = serde_json::json!({"class": {"kind": "MachineClass", "name": "c"}});
        assert_eq!(
            propagate_template(&tpl, &same, Phase::Terminating, false),
            None
        );
    }

    #[test]
    fn propagation_treats_empty_and_absent_alike() {
        let tpl = serde_json::json!({"class": {"kind": "MachineClass"}, "nodeTemplate": {"metadata": {}}});
        let machine = serde_json::json!({"class": {"kind": "MachineClass", "name": "c"}});
        assert_eq!(
            propagate_template(&tpl, &machine, Phase::Running, false),
            None
        );
    }

    // --- names ---

    #[test]
    fn generate_name_is_the_set_name_with_a_dash() {
        assert_eq!(machine_generate_name("pool-abcde"), "pool-abcde-");
        let long = "x".repeat(250);
        assert!(machine_generate_name(&long).len() <= 248);
    }
}
