//! Scaling: proportional shares, the new set's size, RollingUpdate and Recreate steps, history cleanup.

use super::*;

/// Whether the deployment's replica count changed since the sets were last
/// scaled (`isScalingEvent`): only with a new set; true when nothing is
/// active but replicas > 0, or an active set's `desired-replicas` differs.
pub fn is_scaling_event(replicas: i32, sets: &[SetView], part: &Partition) -> bool {
    if part.new.is_none() {
        return false;
    }
    let active: Vec<&SetView> = sets.iter().filter(|s| s.is_active()).collect();
    if active.is_empty() && replicas > 0 {
        return true;
    }
    active.iter().any(|s| {
        s.int_annotation(c::DESIRED_REPLICAS_ANNOTATION)
            .is_some_and(|d| d != replicas)
    })
}

/// Whether the new set is saturated: spec, `desired-replicas` and available
/// replicas all equal the deployment's replicas.
pub fn is_saturated(replicas: i32, new: &SetView) -> bool {
    new.replicas == replicas
        && new.int_annotation(c::DESIRED_REPLICAS_ANNOTATION) == Some(replicas)
        && new.status.available_replicas == replicas
}

/// The sum of replica counts, saturating at the i32 bounds (a plain `sum`
/// panics in debug builds and wraps in release ones on overflow).
pub(super) fn saturating_sum(values: impl Iterator<Item = i32>) -> i32 {
    values.fold(0i32, i32::saturating_add)
}

/// An i64 intermediate clamped into i32.
pub(super) fn clamp_i32(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}

/// Round half away from zero, like Kubernetes' `integer.RoundToInt32`.
pub(super) fn round_i32(x: f64) -> i32 {
    let r = x.round();
    if r >= f64::from(i32::MAX) {
        i32::MAX
    } else if r <= f64::from(i32::MIN) {
        i32::MIN
    } else {
        r as i32
    }
}

pub(super) fn set_fraction(
    set: &SetView,
    replicas: i32,
    max_surge: i32,
    status_replicas: i32,
) -> i32 {
    if replicas == 0 {
        return -set.replicas;
    }
    let deployment_replicas = replicas.saturating_add(max_surge);
    let annotated = set
        .int_annotation(c::MAX_REPLICAS_ANNOTATION)
        .unwrap_or(status_replicas);
    if annotated <= 0 {
        return 0;
    }
    let size =
        round_i32(f64::from(set.replicas) * f64::from(deployment_replicas) / f64::from(annotated));
    size.saturating_sub(set.replicas)
}

pub(super) fn proportion(
    set: &SetView,
    replicas: i32,
    max_surge: i32,
    status_replicas: i32,
    to_add: i32,
    added: i32,
) -> i32 {
    if set.replicas == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = set_fraction(set, replicas, max_surge, status_replicas);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// The sizes the scaling path writes (`scale`; design: sets-and-deployments.md,
/// "Proportional scaling"), as `(set index, size)`.
///
/// Every listed set is written (the size and the replica annotations),
/// unchanged sizes included, so that stale `desired-replicas` annotations are
/// refreshed.
/// 1. At most one active set (or none: the new set, else the newest old
///    one): it gets `replicas`.
/// 2. Several active sets and a saturated new set: the active old sets go to 0.
/// 3. Otherwise, only for RollingUpdate: a scale-out goes to the new set only;
///    a scale-in is spread over the active sets proportionally to their size
///    (largest first, older first on ties), the rest to the largest.
pub fn scale_targets(
    replicas: i32,
    strategy: &Strategy,
    status_replicas: i32,
    sets: &[SetView],
    part: &Partition,
) -> Vec<(usize, i32)> {
    // Old sets newest first, then the new set.
    let mut old_desc: Vec<usize> = part.old.clone();
    old_desc.sort_by(|&a, &b| by_creation(&sets[b], &sets[a]));
    let mut candidates = old_desc.clone();
    candidates.extend(part.new);
    let active: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| sets[i].is_active())
        .collect();
    match active.len() {
        0 => {
            if let Some(target) = part.new.or_else(|| old_desc.first().copied()) {
                return vec![(target, replicas)];
            }
            return Vec::new();
        }
        1 => return vec![(active[0], replicas)],
        _ => {}
    }
    if let Some(n) = part.new {
        if is_saturated(replicas, &sets[n]) {
            return active
                .iter()
                .copied()
                .filter(|&i| Some(i) != part.new && sets[i].replicas != 0)
                .map(|i| (i, 0))
                .collect();
        }
    }
    if !strategy.is_rolling() {
        return Vec::new();
    }
    let surge = strategy.max_surge();
    let total = saturating_sum(active.iter().map(|&i| sets[i].replicas));
    let allowed = if replicas > 0 {
        replicas.saturating_add(surge)
    } else {
        0
    };
    let to_add = allowed.saturating_sub(total);
    let mut sizes: BTreeMap<usize, i32> = active.iter().map(|&i| (i, sets[i].replicas)).collect();
    let mut order = active.clone();
    let added = if to_add >= 0 {
        if let Some(n) = part.new {
            sizes.insert(n, sets[n].replicas.saturating_add(to_add));
        }
        to_add
    } else {
        order.sort_by(|&a, &b| {
            sets[b]
                .replicas
                .cmp(&sets[a].replicas)
                .then_with(|| by_creation(&sets[a], &sets[b]))
        });
        let mut sum = 0;
        for &i in &order {
            let p = proportion(&sets[i], replicas, surge, status_replicas, to_add, sum);
            sizes.insert(i, sets[i].replicas.saturating_add(p));
            sum = i32::saturating_add(sum, p);
        }
        sum
    };
    if to_add != 0 {
        if let Some(&first) = order.first() {
            let leftover = to_add.saturating_sub(added);
            let v = sizes.get(&first).copied().unwrap_or(0);
            sizes.insert(first, v.saturating_add(leftover).max(0));
        }
    }
    order
        .iter()
        .map(|&i| (i, sizes.get(&i).copied().unwrap_or(0)))
        .collect()
}

/// The size of the new set when created or grown by a rollout (`NewISNewReplicas`).
///
/// RollingUpdate (and InPlaceUpdate with Auto orchestration): grow by at
/// most `replicas + maxSurge − current`, and not beyond `replicas`, where
/// `current` counts each set as `max(spec.replicas, status.replicas)`: the
/// reference counts `status.replicas` only, so while the new set's status
/// lags behind its spec, every pass surges again (fixed; design:
/// sets-and-deployments.md, "Where mcm-rs differs from the reference", item 5).
/// Recreate: `replicas`. InPlaceUpdate Manual: 0.
pub fn new_set_replicas(
    strategy: &Strategy,
    replicas: i32,
    sets: &[SetView],
    new: &SetView,
) -> i32 {
    let surge = match strategy {
        Strategy::Recreate => return replicas,
        Strategy::InPlaceUpdate { manual: true, .. } => return 0,
        Strategy::RollingUpdate { max_surge, .. } | Strategy::InPlaceUpdate { max_surge, .. } => {
            *max_surge
        }
    };
    let current: i32 = sets
        .iter()
        .map(|s| s.replicas.max(s.status.replicas))
        .fold(0i32, i32::saturating_add);
    let max_total = replicas.saturating_add(surge);
    if current >= max_total {
        return new.replicas;
    }
    let up = max_total
        .saturating_sub(current)
        .min(replicas.saturating_sub(new.replicas));
    new.replicas.saturating_add(up.max(0))
}

/// The new set's target in a RollingUpdate pass (`reconcileNewMachineSet`):
/// `None` when it already has `replicas`; down to `replicas` when above;
/// else [`new_set_replicas`].
pub fn rolling_new_set_target(
    strategy: &Strategy,
    replicas: i32,
    sets: &[SetView],
    new: &SetView,
) -> Option<i32> {
    match new.replicas.cmp(&replicas) {
        Ordering::Equal => None,
        Ordering::Greater => Some(replicas),
        Ordering::Less => {
            let t = new_set_replicas(strategy, replicas, sets, new);
            (t != new.replicas).then_some(t)
        }
    }
}

/// The old sets' new sizes in a RollingUpdate pass (`reconcileOldMachineSets`),
/// as `(set index, size)` for the sets that change.
///
/// Nothing happens unless `Σ spec − (replicas − maxUnavailable) − (new.spec −
/// new.available)` is positive. Then, oldest first, unhealthy replicas
/// (spec − available) are removed within that bound, then old sets shrink by
/// the number of available machines above `replicas − maxUnavailable`.
/// Gating on spec (not status) means a scale-down that the status does not
/// show yet is never repeated.
pub fn rolling_scale_down(
    replicas: i32,
    max_unavailable: i32,
    sets: &[SetView],
    part: &Partition,
) -> Vec<(usize, i32)> {
    let Some(n) = part.new else {
        return Vec::new();
    };
    let new = &sets[n];
    let mut old: Vec<usize> = part
        .old
        .iter()
        .copied()
        .filter(|&i| sets[i].is_active())
        .collect();
    old.sort_by(|&a, &b| by_creation(&sets[a], &sets[b]));
    let old_count = saturating_sum(old.iter().map(|&i| sets[i].replicas));
    if old_count == 0 {
        return Vec::new();
    }
    // In i64 like the reference's int arithmetic would need: with a 150%
    // maxUnavailable `min_available` is negative, and near i32::MAX the sums
    // would overflow. The results are clamped back into i32.
    let all_count = i64::from(old_count) + i64::from(new.replicas);
    let min_available = i64::from(replicas) - i64::from(max_unavailable);
    // Clamped at 0: a new set with more available machines than spec (it is
    // being scaled down) must not enlarge the old sets' budget.
    let new_unavailable =
        (i64::from(new.replicas) - i64::from(new.status.available_replicas)).max(0);
    let max_scaled_down = clamp_i32(all_count - min_available - new_unavailable);
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    let mut sizes: BTreeMap<usize, i32> = old.iter().map(|&i| (i, sets[i].replicas)).collect();
    // Cleanup of unhealthy replicas.
    let mut cleaned = 0;
    for &i in &old {
        if cleaned >= max_scaled_down {
            break;
        }
        let s = &sets[i];
        let unhealthy = s.replicas.saturating_sub(s.status.available_replicas);
        if unhealthy <= 0 {
            continue;
        }
        let n = (max_scaled_down - cleaned).min(unhealthy);
        sizes.insert(i, s.replicas - n);
        cleaned += n;
    }
    // Scale down by the available surplus.
    let available = i64::from(new.status.available_replicas)
        + i64::from(saturating_sum(
            old.iter().map(|&i| sets[i].status.available_replicas),
        ));
    if available > min_available {
        let total = clamp_i32(available - min_available);
        let mut scaled = 0;
        for &i in &old {
            if scaled >= total {
                break;
            }
            let size = sizes.get(&i).copied().unwrap_or(0);
            if size == 0 {
                continue;
            }
            let n = size.min(total - scaled);
            sizes.insert(i, size - n);
            scaled += n;
        }
    }
    old.into_iter()
        .filter_map(|i| {
            let size = sizes.get(&i).copied().unwrap_or(sets[i].replicas);
            (size != sets[i].replicas).then_some((i, size))
        })
        .collect()
}

/// One step of a Recreate rollout (design: sets-and-deployments.md, "MachineDeployment
/// rollouts").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecreateStep {
    /// Scale these active old sets to 0.
    ScaleDownOld(Vec<usize>),
    /// Old machines still exist: wait.
    WaitForOldMachines,
    /// Create the new set with `replicas`.
    CreateNew,
    /// Scale the new set to `replicas`.
    ScaleNew(i32),
    /// Nothing to change.
    Steady,
}

/// The next Recreate step. `old_machines_exist` tells whether any machine
/// matching the deployment is still controlled by a set other than the new one.
pub fn recreate_step(
    replicas: i32,
    sets: &[SetView],
    part: &Partition,
    old_machines_exist: bool,
) -> RecreateStep {
    let active_old: Vec<usize> = part
        .old
        .iter()
        .copied()
        .filter(|&i| sets[i].is_active())
        .collect();
    if !active_old.is_empty() {
        return RecreateStep::ScaleDownOld(active_old);
    }
    let old_status = saturating_sum(part.old.iter().map(|&i| sets[i].status.replicas));
    if old_status > 0 || old_machines_exist {
        return RecreateStep::WaitForOldMachines;
    }
    match part.new {
        None => RecreateStep::CreateNew,
        Some(n) if sets[n].replicas != replicas => RecreateStep::ScaleNew(replicas),
        Some(_) => RecreateStep::Steady,
    }
}

/// Whether every old set is scaled to zero: no replicas asked and no machine
/// left. The reference calls a set "scaled to zero" as soon as any one of
/// five counters is 0 (fixed; design: sets-and-deployments.md, "Where mcm-rs
/// differs from the reference", item 7).
pub fn sets_scaled_to_zero<'a>(sets: impl IntoIterator<Item = &'a SetView>) -> bool {
    sets.into_iter()
        .all(|s| s.replicas == 0 && s.status.replicas == 0)
}

/// Old sets to delete by the revision-history limit (design: sets-and-deployments.md,
/// "Revisions, rollback and history cleanup"): oldest first,
/// at most `count − limit`, skipping sets that still have replicas (spec or
/// status), an unobserved generation or a deletion timestamp.
pub fn history_cleanup(limit: Option<i32>, sets: &[SetView], part: &Partition) -> Vec<usize> {
    let Some(limit) = limit else {
        return Vec::new();
    };
    let mut alive: Vec<usize> = part
        .old
        .iter()
        .copied()
        .filter(|&i| !sets[i].deleting)
        .collect();
    let diff = alive.len() as i64 - i64::from(limit.max(0));
    if diff <= 0 {
        return Vec::new();
    }
    alive.sort_by(|&a, &b| by_creation(&sets[a], &sets[b]));
    alive
        .into_iter()
        .take(usize::try_from(diff).unwrap_or(0))
        .filter(|&i| {
            let s = &sets[i];
            s.status.replicas == 0
                && s.replicas == 0
                && s.generation <= s.status.observed_generation
        })
        .collect()
}

#[cfg(test)]
mod overflow_tests {
    //! Replica sums near `i32::MAX` (chaos inputs): no panic, results clamped.
    use super::*;

    fn set(name: &str, replicas: i32, status: i32, available: i32) -> SetView {
        SetView {
            name: name.into(),
            uid: format!("uid-{name}"),
            replicas,
            status: crate::deployment::SetStatusView {
                replicas: status,
                available_replicas: available,
                ready_replicas: available,
                fully_labeled_replicas: status,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    const BIG: i32 = i32::MAX - 1;

    #[test]
    fn huge_replica_counts_saturate_instead_of_overflowing() {
        let sets = vec![
            set("old-a", BIG, BIG, BIG),
            set("old-b", BIG, BIG, BIG),
            set("new", BIG, 0, 0),
        ];
        let part = Partition {
            new: Some(2),
            old: vec![0, 1],
        };
        let rolling = Strategy::RollingUpdate {
            max_surge: BIG,
            max_unavailable: BIG,
        };
        // Proportional scaling with a total far beyond i32.
        let targets = scale_targets(BIG, &rolling, BIG, &sets, &part);
        assert!(targets.iter().all(|(_, size)| *size >= 0), "{targets:?}");
        // Old-set scale-down: all_count − min_available − new_unavailable exceeds i32.
        let down = rolling_scale_down(BIG, BIG, &sets, &part);
        assert!(down.iter().all(|(_, size)| *size >= 0), "{down:?}");
        assert!(!down.is_empty(), "the surplus is scaled down");
        assert_eq!(new_set_replicas(&rolling, BIG, &sets, &sets[2]), BIG);
        assert_eq!(
            recreate_step(BIG, &sets, &part, false),
            RecreateStep::ScaleDownOld(vec![0, 1])
        );
        assert_eq!(saturating_sum([BIG, BIG, 5].into_iter()), i32::MAX);
        assert_eq!(clamp_i32(i64::MIN), i32::MIN);
    }

    #[test]
    fn a_max_unavailable_above_replicas_scales_old_sets_down_without_underflow() {
        // 150% of 2 replicas: maxUnavailable 3, so min_available is −1.
        let sets = vec![set("old", 2, 2, 2), set("new", 2, 2, 0)];
        let part = Partition {
            new: Some(1),
            old: vec![0],
        };
        assert_eq!(rolling_scale_down(2, 3, &sets, &part), vec![(0, 0)]);
    }
}
