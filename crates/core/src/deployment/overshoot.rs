//! The overshoot safety loop's arithmetic.

use super::*;

/// The number of machines that count for a set's overshoot check: machines
/// carrying all the set's template labels and any ownerReference with the
/// set's name (any kind, any UID: machines created behind the controller's
/// back count too). Terminating machines count.
pub fn overshoot_count<'a>(
    set_name: &str,
    template_labels: &BTreeMap<String, String>,
    machines: impl IntoIterator<Item = (&'a BTreeMap<String, String>, &'a [String])>,
) -> usize {
    machines
        .into_iter()
        .filter(|(labels, owners)| {
            labels_contain(labels, template_labels) && owners.iter().any(|o| o == set_name)
        })
        .count()
}

/// The maxSurge the safety loop uses for a parent deployment: rollingUpdate's,
/// else inPlaceUpdate's, rounded up; none at all (e.g. Recreate) counts as 0
/// (the reference errors out and skips the rest of its pass; design:
/// sets-and-deployments.md, "Where mcm-rs differs from the reference", item 6).
pub fn safety_surge(spec: &MachineDeploymentSpec) -> i32 {
    let v = spec
        .strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.max_surge.as_ref())
        .or_else(|| {
            spec.strategy
                .in_place_update
                .as_ref()
                .and_then(|i| i.update_configuration.max_surge.as_ref())
        });
    match v {
        None => 0,
        Some(v) => scaled_value_from_int_or_percent(Some(v), spec.replicas, true).unwrap_or(0),
    }
}

/// The freeze (`high`) and unfreeze (`low`) machine counts of a set: without
/// a parent deployment `2·replicas + safetyUp`; with one
/// `deployment replicas + surge + safetyUp`; `low = high − safetyDown`.
pub fn overshoot_thresholds(
    set_replicas: i32,
    parent: Option<(i32, i32)>,
    safety_up: i32,
    safety_down: i32,
) -> (i64, i64) {
    let high = match parent {
        None => 2 * i64::from(set_replicas) + i64::from(safety_up),
        Some((replicas, surge)) => i64::from(replicas) + i64::from(surge) + i64::from(safety_up),
    };
    (high, high - i64::from(safety_down))
}

/// What the safety loop does with one set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OvershootDecision {
    /// Freeze the set (and its deployment): `OverShootingReplicaCount`.
    Freeze,
    /// Unfreeze the set (and its deployment): `UnderShootingReplicaCount`.
    Unfreeze,
    /// Leave it.
    Nothing,
}

/// Freeze when not frozen and `count ≥ high`; unfreeze when frozen and `count ≤ low`.
pub fn overshoot_decision(frozen: bool, count: usize, thresholds: (i64, i64)) -> OvershootDecision {
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let (high, low) = thresholds;
    if !frozen && count >= high {
        OvershootDecision::Freeze
    } else if frozen && count <= low {
        OvershootDecision::Unfreeze
    } else {
        OvershootDecision::Nothing
    }
}

/// The freeze state a deployment must have (`syncMachineDeploymentFreezeState`):
/// `Some(true)` to freeze it (`MachineDeploymentStateSync`), `Some(false)` to
/// unfreeze it, `None` when it already agrees with its sets.
pub fn deployment_should_be_frozen(deployment_frozen: bool, any_set_frozen: bool) -> Option<bool> {
    (deployment_frozen != any_set_frozen).then_some(any_set_frozen)
}

/// The `Frozen` condition's message when a set overshoots (the reference's
/// text, machine_safety.go:269): `count` machines back `set`, `limit` is the
/// upper threshold of [`overshoot_thresholds`].
pub fn overshoot_freeze_message(set: &str, count: usize, limit: i64) -> String {
    format!("The number of machines backing MachineSet: {set} is {count} >= {limit} which is the Max-ScaleUp-Limit")
}

/// The `Frozen` condition's message when a deployment is frozen because one of
/// its sets is ([`deployment_should_be_frozen`]; machine_safety.go:175).
pub const STATE_SYNC_FREEZE_MESSAGE: &str =
    "MachineDeployment State was inconsistent, hence safety controller has fixed this and frozen it";
