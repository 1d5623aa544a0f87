//! Revisions and the annotations copied to MachineSets.

use super::*;

/// The revision of an object: its `deployment.kubernetes.io/revision`
/// annotation, 0 when missing, `None` when unparsable.
pub fn revision(annotations: &BTreeMap<String, String>) -> Option<i64> {
    match annotations.get(c::REVISION_ANNOTATION) {
        None => Some(0),
        Some(v) => v.trim().parse().ok(),
    }
}

/// The highest revision among the sets (unparsable ones skipped).
pub fn max_revision<'a>(sets: impl IntoIterator<Item = &'a SetView>) -> i64 {
    sets.into_iter()
        .filter_map(|s| revision(&s.annotations))
        .max()
        .unwrap_or(0)
        .max(0)
}

/// The revision of a new MachineSet: one above [`max_revision`], saturating
/// at `i64::MAX`. Revisions come from an annotation anyone may write, so the
/// highest may already be `i64::MAX`; `+ 1` would overflow (and panic in a
/// debug build).
pub fn next_revision<'a>(sets: impl IntoIterator<Item = &'a SetView>) -> i64 {
    max_revision(sets).saturating_add(1)
}

/// The second highest revision among the given revisions (`LastRevision`).
pub fn last_revision(revisions: impl IntoIterator<Item = i64>) -> i64 {
    let (mut max, mut second) = (0i64, 0i64);
    for v in revisions {
        if v >= max {
            second = max;
            max = v;
        } else if v > second {
            second = v;
        }
    }
    second
}

/// MachineDeployment annotations that are never copied to MachineSets (and
/// kept on the deployment when a rollback replaces its annotations).
pub const ANNOTATIONS_NOT_COPIED: [&str; 8] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    c::REVISION_ANNOTATION,
    c::REVISION_HISTORY_ANNOTATION,
    c::DESIRED_REPLICAS_ANNOTATION,
    c::MAX_REPLICAS_ANNOTATION,
    c::PREFER_NO_SCHEDULE_KEY,
    c::UNFREEZE_ANNOTATION,
    c::TRIGGER_DELETION_BY_MCM_ANNOTATION,
];

pub(super) fn skip_copy(key: &str) -> bool {
    ANNOTATIONS_NOT_COPIED.contains(&key)
}

/// The annotations of the new MachineSet (`SetNewMachineSetAnnotations`):
/// the deployment's copyable annotations, the revision raised to
/// `new_revision` when lower (the previous one appended to
/// `revision-history` when the set already had one, i.e. on a rollback), and
/// for a set about to be created the `desired-replicas` / `max-replicas`
/// annotations.
pub fn new_set_annotations(
    deployment_annotations: &BTreeMap<String, String>,
    set_annotations: &BTreeMap<String, String>,
    new_revision: i64,
    exists: bool,
    desired_replicas: i32,
    max_replicas: i32,
) -> BTreeMap<String, String> {
    let mut out = set_annotations.clone();
    for (k, v) in deployment_annotations {
        if !skip_copy(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    let old = set_annotations.get(c::REVISION_ANNOTATION).cloned();
    let old_value = match old.as_deref() {
        None | Some("") => Some(0),
        Some(v) => v.trim().parse::<i64>().ok(),
    };
    // An unparsable revision is left alone (as the reference does).
    if let Some(old_value) = old_value {
        if old_value < new_revision {
            out.insert(c::REVISION_ANNOTATION.to_string(), new_revision.to_string());
            if let Some(old) = old.filter(|o| !o.is_empty()) {
                let history = out
                    .get(c::REVISION_HISTORY_ANNOTATION)
                    .filter(|h| !h.is_empty())
                    .map(|h| format!("{h},{old}"))
                    .unwrap_or(old);
                out.insert(c::REVISION_HISTORY_ANNOTATION.to_string(), history);
            }
        }
    }
    if !exists {
        set_replicas_annotations(&mut out, desired_replicas, max_replicas);
    }
    out
}

/// Writes `desired-replicas` and `max-replicas`; answers whether anything changed.
pub fn set_replicas_annotations(
    annotations: &mut BTreeMap<String, String>,
    desired: i32,
    max: i32,
) -> bool {
    let mut changed = false;
    for (k, v) in [
        (c::DESIRED_REPLICAS_ANNOTATION, desired.to_string()),
        (c::MAX_REPLICAS_ANNOTATION, max.to_string()),
    ] {
        if annotations.get(k) != Some(&v) {
            annotations.insert(k.to_string(), v);
            changed = true;
        }
    }
    changed
}

/// The deployment's annotations after a rollback to a set
/// (`SetMachineDeploymentAnnotationsTo`): the never-copied keys of the
/// deployment are kept, everything else is replaced by the set's annotations.
pub fn rollback_annotations(
    deployment_annotations: &BTreeMap<String, String>,
    set_annotations: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = deployment_annotations
        .iter()
        .filter(|(k, _)| skip_copy(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in set_annotations {
        if !skip_copy(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}
