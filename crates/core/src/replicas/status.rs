//! The MachineSet status.

use super::*;

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

pub(super) fn count_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The MachineSet status counters (`calculateMachineSetStatus`).
///
/// Availability is phase-based only: `minReadySeconds` is not honoured (kept on
/// purpose, design: sets-and-deployments.md, "Where mcm-rs differs from the
/// reference", item 3: machines have no "ready since" time to measure it from,
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
            if m.phase == MachinePhase::Running {
                ready += 1;
            }
        }
        if m.phase == MachinePhase::Failed && m.preserve_expiry.is_some() {
            preserved += 1;
        } else if m.last_operation_failed() {
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
