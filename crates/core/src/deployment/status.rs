//! MachineDeployment status and conditions.

use super::*;

/// A new condition with both times set to `now`.
pub fn new_condition(
    type_: MachineDeploymentConditionType,
    status: ConditionStatus,
    reason: &str,
    message: String,
    now: DateTime<Utc>,
) -> MachineDeploymentCondition {
    MachineDeploymentCondition {
        type_,
        status,
        last_update_time: Some(to_k8s(now)),
        last_transition_time: Some(to_k8s(now)),
        reason: reason.to_string(),
        message,
    }
}

/// Sets a condition (`SetMachineDeploymentCondition`): nothing when one of
/// the same type, status and reason exists; the transition time is kept
/// when only the reason changes.
pub fn set_condition(
    conditions: &mut Vec<MachineDeploymentCondition>,
    mut cond: MachineDeploymentCondition,
) {
    if let Some(cur) = conditions.iter().find(|c| c.type_ == cond.type_) {
        if cur.status == cond.status && cur.reason == cond.reason {
            return;
        }
        if cur.status == cond.status {
            cond.last_transition_time = cur.last_transition_time.clone();
        }
    }
    conditions.retain(|c| c.type_ != cond.type_);
    conditions.push(cond);
}

/// Removes the condition of that type.
pub fn remove_condition(
    conditions: &mut Vec<MachineDeploymentCondition>,
    type_: &MachineDeploymentConditionType,
) {
    conditions.retain(|c| &c.type_ != type_);
}

/// The condition of that type.
pub fn get_condition<'a>(
    conditions: &'a [MachineDeploymentCondition],
    type_: &MachineDeploymentConditionType,
) -> Option<&'a MachineDeploymentCondition> {
    conditions.iter().find(|c| &c.type_ == type_)
}

/// The deployment facts the status computation needs.
#[derive(Debug, Clone, Copy)]
pub struct DeploymentFacts<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.replicas`.
    pub replicas: i32,
    /// The resolved strategy.
    pub strategy: &'a Strategy,
    /// `spec.progressDeadlineSeconds`.
    pub progress_deadline_seconds: Option<i32>,
    /// The current status.
    pub status: &'a MachineDeploymentStatus,
}

/// The computed status (`calculateDeploymentStatus`): sums over the sets,
/// `updatedReplicas` from the new set, the current conditions with
/// `Available` recomputed.
pub fn deployment_status(
    d: &DeploymentFacts<'_>,
    sets: &[SetView],
    part: &Partition,
    now: DateTime<Utc>,
) -> MachineDeploymentStatus {
    let sum = |f: fn(&SetView) -> i32| sets.iter().map(f).fold(0i32, i32::saturating_add);
    let available = sum(|s| s.status.available_replicas);
    let spec_total = sum(|s| s.replicas);
    let preserved = sum(|s| s.status.preserved_failed_replicas);
    let mut status = MachineDeploymentStatus {
        observed_generation: d.generation,
        replicas: sum(|s| s.status.replicas),
        updated_replicas: part.new.map_or(0, |n| sets[n].status.replicas),
        ready_replicas: sum(|s| s.status.ready_replicas),
        available_replicas: available,
        preserved_failed_replicas: preserved,
        unavailable_replicas: (spec_total - available).max(0),
        conditions: d.status.conditions.clone(),
        collision_count: d.status.collision_count,
        failed_machines: sets
            .iter()
            .flat_map(|s| s.status.failed_machines.iter().cloned())
            .collect(),
    };
    let min_required = (d.replicas - d.strategy.max_unavailable(d.replicas) - preserved).max(0);
    set_condition(
        &mut status.conditions,
        availability_condition(available >= min_required, now),
    );
    status
}

/// The `Available` condition: whether the deployment has its minimum
/// availability (deployment_sync.go:657-660).
pub fn availability_condition(minimum: bool, now: DateTime<Utc>) -> MachineDeploymentCondition {
    if minimum {
        new_condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::True,
            c::MINIMUM_REPLICAS_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        new_condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::False,
            c::MINIMUM_REPLICAS_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    }
}

/// Whether the rollout is complete for this status (`MachineDeploymentComplete`).
pub fn is_complete(replicas: i32, generation: i64, status: &MachineDeploymentStatus) -> bool {
    status.updated_replicas == replicas
        && status.replicas == replicas
        && status.available_replicas == replicas
        && status.observed_generation >= generation
}

/// Whether the new status shows progress over the old one.
pub fn is_progressing(old: &MachineDeploymentStatus, new: &MachineDeploymentStatus) -> bool {
    let old_old = old.replicas - old.updated_replicas;
    let new_old = new.replicas - new.updated_replicas;
    new.updated_replicas > old.updated_replicas
        || new_old < old_old
        || new.ready_replicas > old.ready_replicas
        || new.available_replicas > old.available_replicas
}

/// Whether the progress deadline has passed for this status.
pub fn is_timed_out(
    progress_deadline_seconds: Option<i32>,
    status: &MachineDeploymentStatus,
    now: DateTime<Utc>,
) -> bool {
    let Some(deadline) = progress_deadline_seconds else {
        return false;
    };
    let Some(cond) = get_condition(
        &status.conditions,
        &MachineDeploymentConditionType::Progressing,
    ) else {
        return false;
    };
    if cond.reason == c::NEW_MACHINE_SET_AVAILABLE_REASON {
        return false;
    }
    if cond.reason == c::TIMED_OUT_REASON {
        return true;
    }
    let Some(from) = cond.last_update_time.as_ref().map(from_k8s) else {
        return false;
    };
    from + chrono::Duration::seconds(i64::from(deadline)) < now
}

/// The status a rollout pass writes (`syncRolloutStatus`): the computed
/// status plus the `Progressing` condition (complete → NewMachineSetAvailable;
/// progressing → MachineSetUpdated; deadline passed →
/// ProgressDeadlineExceeded) and the new set's (else any set's)
/// `ReplicaFailure` promoted.
pub fn rollout_status(
    d: &DeploymentFacts<'_>,
    sets: &[SetView],
    part: &Partition,
    now: DateTime<Utc>,
) -> MachineDeploymentStatus {
    let mut status = deployment_status(d, sets, part, now);
    let current = get_condition(
        &d.status.conditions,
        &MachineDeploymentConditionType::Progressing,
    );
    let already_complete = status.replicas == status.updated_replicas
        && current.is_some_and(|c| c.reason == c::NEW_MACHINE_SET_AVAILABLE_REASON);
    let new_set = part.new.map(|n| sets[n].name.as_str());
    if !already_complete {
        if is_complete(d.replicas, d.generation, &status) {
            set_condition(
                &mut status.conditions,
                new_condition(
                    MachineDeploymentConditionType::Progressing,
                    ConditionStatus::True,
                    c::NEW_MACHINE_SET_AVAILABLE_REASON,
                    progress_message(new_set, d.name, Progress::Complete),
                    now,
                ),
            );
        } else if is_progressing(d.status, &status) {
            let mut cond = new_condition(
                MachineDeploymentConditionType::Progressing,
                ConditionStatus::True,
                c::MACHINE_SET_UPDATED_REASON,
                progress_message(new_set, d.name, Progress::Progressing),
                now,
            );
            if let Some(cur) = current {
                if cur.status == ConditionStatus::True {
                    cond.last_transition_time = cur.last_transition_time.clone();
                }
                remove_condition(
                    &mut status.conditions,
                    &MachineDeploymentConditionType::Progressing,
                );
            }
            set_condition(&mut status.conditions, cond);
        } else if is_timed_out(d.progress_deadline_seconds, &status, now) {
            set_condition(
                &mut status.conditions,
                new_condition(
                    MachineDeploymentConditionType::Progressing,
                    ConditionStatus::False,
                    c::TIMED_OUT_REASON,
                    progress_message(new_set, d.name, Progress::TimedOut),
                    now,
                ),
            );
        }
    }
    let failure = part
        .new
        .and_then(|n| sets[n].status.replica_failure.clone())
        .or_else(|| sets.iter().find_map(|s| s.status.replica_failure.clone()));
    match failure {
        Some(f) => set_condition(
            &mut status.conditions,
            MachineDeploymentCondition {
                type_: MachineDeploymentConditionType::ReplicaFailure,
                status: f.status,
                last_update_time: f.last_transition_time.clone(),
                last_transition_time: f.last_transition_time,
                reason: f.reason,
                message: f.message,
            },
        ),
        None => remove_condition(
            &mut status.conditions,
            &MachineDeploymentConditionType::ReplicaFailure,
        ),
    }
    status
}

/// Whether a computed status differs enough to be written (`statusUpdateRequired`).
pub fn status_update_required(
    old: &MachineDeploymentStatus,
    new: &MachineDeploymentStatus,
) -> bool {
    let same = old.available_replicas == new.available_replicas
        && old.collision_count == new.collision_count
        && old.failed_machines.len() == new.failed_machines.len()
        && old.observed_generation == new.observed_generation
        && old.ready_replicas == new.ready_replicas
        && old.replicas == new.replicas
        && old.updated_replicas == new.updated_replicas
        && old.unavailable_replicas == new.unavailable_replicas
        && old.preserved_failed_replicas == new.preserved_failed_replicas
        && old.conditions == new.conditions;
    if !same {
        return true;
    }
    new.failed_machines.iter().any(|n| {
        !old.failed_machines.iter().any(|o| {
            o.name == n.name && o.last_operation.description == n.last_operation.description
        })
    })
}

/// When to look at a stuck rollout again for its progress deadline
/// (`requeueStuckMachineDeployment`): `None` without deadline, when complete
/// or already timed out; else the time until the deadline plus 1 s (at
/// least 1 s).
pub fn progress_requeue(
    d: &DeploymentFacts<'_>,
    new_status: &MachineDeploymentStatus,
    now: DateTime<Utc>,
) -> Option<Duration> {
    let deadline = d.progress_deadline_seconds?;
    let cond = get_condition(
        &d.status.conditions,
        &MachineDeploymentConditionType::Progressing,
    )?;
    if is_complete(d.replicas, d.generation, new_status) || cond.reason == c::TIMED_OUT_REASON {
        return None;
    }
    let from = from_k8s(cond.last_update_time.as_ref()?);
    let at = from + chrono::Duration::seconds(i64::from(deadline));
    let after = (at - now).to_std().unwrap_or(Duration::ZERO);
    Some(if after < Duration::from_secs(1) {
        Duration::from_secs(1)
    } else {
        after + Duration::from_secs(1)
    })
}

/// The Progressing condition to write for a pause change
/// (`checkPausedConditions`): `DeploymentPaused` when paused without that
/// condition, `DeploymentResumed` when resumed after a pause; never over a
/// `ProgressDeadlineExceeded`.
pub fn paused_condition(
    paused: bool,
    conditions: &[MachineDeploymentCondition],
    now: DateTime<Utc>,
) -> Option<MachineDeploymentCondition> {
    let cond = get_condition(conditions, &MachineDeploymentConditionType::Progressing);
    if cond.is_some_and(|c| c.reason == c::TIMED_OUT_REASON) {
        return None;
    }
    let paused_cond = cond.is_some_and(|c| c.reason == c::PAUSED_DEPLOYMENT_REASON);
    if paused && !paused_cond {
        Some(new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::Unknown,
            c::PAUSED_DEPLOYMENT_REASON,
            "Deployment is paused".into(),
            now,
        ))
    } else if !paused && paused_cond {
        Some(new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::Unknown,
            c::RESUMED_DEPLOYMENT_REASON,
            "Deployment is resumed".into(),
            now,
        ))
    } else {
        None
    }
}

/// Which `Progressing` message [`progress_message`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The rollout is complete (`NewMachineSetAvailable`).
    Complete,
    /// The rollout moved (`MachineSetUpdated`).
    Progressing,
    /// The progress deadline passed (`ProgressDeadlineExceeded`).
    TimedOut,
}

/// The `Progressing` condition's message of a rollout pass, about the new
/// set when there is one, else the deployment (deployment_progress.go:54-91).
pub fn progress_message(new_set: Option<&str>, deployment: &str, progress: Progress) -> String {
    let subject = match new_set {
        Some(set) => format!("MachineSet {set:?}"),
        None => format!("Machine Deployment {deployment:?}"),
    };
    let what = match progress {
        Progress::Complete => "has successfully progressed.",
        Progress::Progressing => "is progressing.",
        Progress::TimedOut => "has timed out progressing.",
    };
    format!("{subject} {what}")
}

/// What happened to the deployment's new MachineSet, for its `Progressing`
/// condition ([`new_set_condition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewSet<'a> {
    /// The new set exists already (`FoundNewMachineSet`).
    Found,
    /// The new set was created (`NewMachineSetCreated`).
    Created,
    /// Creating it failed with this error (`MachineSetCreateError`).
    CreateFailed(&'a str),
}

/// The `Progressing` condition about the new set `name` (deployment_sync.go:268,
/// 378, 394).
pub fn new_set_condition(
    name: &str,
    what: NewSet<'_>,
    now: DateTime<Utc>,
) -> MachineDeploymentCondition {
    let (status, reason, message) = match what {
        NewSet::Found => (
            ConditionStatus::True,
            c::FOUND_NEW_MACHINE_SET_REASON,
            format!("Found new machine set {name:?}"),
        ),
        NewSet::Created => (
            ConditionStatus::True,
            c::NEW_MACHINE_SET_REASON,
            format!("Created new machine set {name:?}"),
        ),
        NewSet::CreateFailed(err) => (
            ConditionStatus::False,
            c::FAILED_MACHINE_SET_CREATE_REASON,
            format!("Failed to create new machine set {name:?}: {err}"),
        ),
    };
    new_condition(
        MachineDeploymentConditionType::Progressing,
        status,
        reason,
        message,
        now,
    )
}
