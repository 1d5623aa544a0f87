//! Replica management: how many machines to create, which to delete.

use super::*;

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
    /// Machines are missing but [`BURST_REPLICAS`] of the set's machines are
    /// still waiting for their VM: create nothing until the cloud catches up.
    AwaitingVms {
        /// How many are missing.
        missing: usize,
        /// How many machines wait for their VM.
        awaiting: usize,
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

/// Whether a machine still waits for its VM: no providerID yet and a phase
/// of the creation flow (none, `Pending`, `CrashLoopBackOff`).
fn awaits_vm(m: &MachineView) -> bool {
    m.provider_id.is_empty()
        && matches!(
            m.phase,
            MachinePhase::Empty | MachinePhase::Pending | MachinePhase::CrashLoopBackOff
        )
}

/// The replica decision of one MachineSet pass (`manageReplicas`).
///
/// Counting ignores terminating machines (see [`MachineView::is_terminating`]).
/// Machines labelled `update-result=successful` are never surplus (they were
/// just moved here by an in-place rollout). When machines are missing, the
/// plan creates them unless the set is frozen or scale-up-disabled, and
/// deletes nothing in the same pass. Creation is bounded twice: at most
/// [`BURST_REPLICAS`] per pass (as the reference), and never more than
/// [`BURST_REPLICAS`] of the set's machines waiting for their VM at once
/// (mcm-rs only: a huge `replicas` grows the set at the cloud's pace instead
/// of filling etcd with Machines; design: sets-and-deployments.md,
/// "Creating and deleting machines"); otherwise it deletes the surplus (in
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
        let awaiting = live.iter().filter(|m| awaits_vm(m)).count();
        let room = BURST_REPLICAS.saturating_sub(awaiting);
        if room == 0 {
            return ReplicaPlan::AwaitingVms { missing, awaiting };
        }
        let count = missing.min(room);
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
        if m.phase == MachinePhase::Failed && failed_machine_should_be_terminated(m, input.now) {
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
