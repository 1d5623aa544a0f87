//! The order in which a MachineSet deletes its machines.

use super::*;

/// Compares two machines in deletion order: `Less` means `a` is deleted before `b`.
///
/// 1. not preserved before preserved; among preserved, auto-preserved before
///    explicitly preserved, then the earlier preserve expiry first;
/// 2. lower `machinepriority` first (missing or unparsable = 3);
/// 3. a parseable `marked-for-deletion-time` before none; both: earlier first;
/// 4. phase rank ([`PhaseExt::deletion_rank`]);
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

/// Whether deleting this machine counts as a stale-machine removal
/// (`mcm_machine_stale_machines_total`): as in the reference's MachineSet
/// controller, a machine in phase `Failed` whose last operation is the
/// health check (it turned Failed by staying unhealthy too long), whatever
/// the reason the set deletes it.
pub fn is_stale_removal(m: &MachineView) -> bool {
    m.phase == MachinePhase::Failed
        && matches!(
            m.last_operation,
            Some((_, _, mcm_api::MachineOperationType::HealthCheck))
        )
}
