//! How often a MachineSet's or MachineDeployment's status may be written
//! when a write only moves its counts (design: sets-and-deployments.md,
//! "Status writes").
//!
//! During a scale-up every machine that is created, becomes ready or becomes
//! available changes its set's and its deployment's counts, so a write per
//! change costs about three status writes per machine and set. A write that
//! only moves counts waits until [`COUNTS_INTERVAL`] has passed since the
//! object's last status write and then carries every change of that second;
//! a write that changes anything else (a condition, the observed generation,
//! the failed machines) goes at once.

use mcm_api::{MachineDeploymentCondition, MachineDeploymentStatus, MachineSetStatus};
use std::time::Duration;

/// The shortest time between two counts-only status writes of one object.
pub const COUNTS_INTERVAL: Duration = Duration::from_secs(1);

/// How long a status write must wait: `None` writes now. `since_last` is the
/// time since this process last wrote the object's status (`None`: never).
pub fn write_wait(counts_only: bool, since_last: Option<Duration>) -> Option<Duration> {
    let since = since_last?;
    (counts_only && since < COUNTS_INTERVAL).then(|| COUNTS_INTERVAL.saturating_sub(since))
}

/// Whether `new` differs from `old` in the replica counts only.
pub fn set_counts_only(old: &MachineSetStatus, new: &MachineSetStatus) -> bool {
    old.observed_generation == new.observed_generation
        && old.conditions == new.conditions
        && old.failed_machines == new.failed_machines
        && old.preserved_failed_replicas == new.preserved_failed_replicas
        && old.auto_preserve_failed_machine_count == new.auto_preserve_failed_machine_count
}

/// Whether `new` differs from `old` in the replica counts (and the
/// conditions' update times) only.
pub fn deployment_counts_only(
    old: &MachineDeploymentStatus,
    new: &MachineDeploymentStatus,
) -> bool {
    let untimed = |c: &[MachineDeploymentCondition]| -> Vec<MachineDeploymentCondition> {
        c.iter()
            .map(|c| MachineDeploymentCondition {
                last_update_time: None,
                ..c.clone()
            })
            .collect()
    };
    old.observed_generation == new.observed_generation
        && old.collision_count == new.collision_count
        && old.failed_machines == new.failed_machines
        && old.preserved_failed_replicas == new.preserved_failed_replicas
        && untimed(&old.conditions) == untimed(&new.conditions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_api::{ConditionStatus, MachineDeploymentConditionType};

    #[test]
    fn a_first_write_or_one_that_changes_more_than_counts_goes_at_once() {
        assert_eq!(write_wait(true, None), None);
        assert_eq!(write_wait(false, Some(Duration::from_millis(10))), None);
    }

    #[test]
    fn a_counts_only_write_waits_for_the_rest_of_the_interval() {
        assert_eq!(
            write_wait(true, Some(Duration::from_millis(300))),
            Some(Duration::from_millis(700))
        );
        assert_eq!(write_wait(true, Some(COUNTS_INTERVAL)), None);
    }

    #[test]
    fn set_counts_only_ignores_the_counts_and_nothing_else() {
        let old = MachineSetStatus::default();
        let more = MachineSetStatus {
            replicas: 3,
            ready_replicas: 2,
            available_replicas: 1,
            fully_labeled_replicas: 3,
            ..old.clone()
        };
        assert!(set_counts_only(&old, &more));
        let regenerated = MachineSetStatus {
            observed_generation: 2,
            ..more
        };
        assert!(!set_counts_only(&old, &regenerated));
    }

    #[test]
    fn deployment_counts_only_ignores_condition_update_times_but_not_their_status() {
        let cond = |status: ConditionStatus, t: Option<&str>| MachineDeploymentCondition {
            type_: MachineDeploymentConditionType::Progressing,
            status,
            last_update_time: t.map(|t| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.parse().unwrap_or_default())
            }),
            last_transition_time: None,
            reason: "MachineSetUpdated".into(),
            message: String::new(),
        };
        let old = MachineDeploymentStatus {
            conditions: vec![cond(ConditionStatus::True, Some("2026-01-01T00:00:00Z"))],
            ..Default::default()
        };
        let moved = MachineDeploymentStatus {
            replicas: 5,
            conditions: vec![cond(ConditionStatus::True, Some("2026-01-01T00:00:05Z"))],
            ..old.clone()
        };
        assert!(deployment_counts_only(&old, &moved));
        let flipped = MachineDeploymentStatus {
            conditions: vec![cond(ConditionStatus::False, Some("2026-01-01T00:00:05Z"))],
            ..old.clone()
        };
        assert!(!deployment_counts_only(&old, &flipped));
    }
}
