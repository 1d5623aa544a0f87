//! Cluster-autoscaler integration: deletion triggers and scale-down-disabled annotations.

use super::*;

/// Rewrites legacy `trigger-deletion-by-mcm` entries without a time
/// (`name`) as `name~<scaler time>`; entries with more than one `~` and
/// empty entries are dropped.
pub fn normalize_trigger_deletion(value: &str, scaler_time: &str) -> String {
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .filter_map(|e| match e.split('~').count() {
            1 => Some(format!("{e}~{scaler_time}")),
            2 => Some(e.to_string()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// How a machine named in `trigger-deletion-by-mcm` looks now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerTarget {
    /// No such machine.
    NotFound,
    /// Failed, or being deleted: nothing more to do for it.
    FailedOrTerminating,
    /// A live machine; `marked` when it already has priority 1 and a
    /// marked-for-deletion time.
    Live {
        /// Already marked.
        marked: bool,
    },
}

/// What to do about the `trigger-deletion-by-mcm` annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerPlan {
    /// The annotation's new value when it changes (`Some("")`: remove it).
    pub new_value: Option<String>,
    /// Machines to mark `machinepriority=1` (and `marked-for-deletion-time`
    /// when absent), with the time to write.
    pub mark: Vec<(String, String)>,
}

/// The processing of `trigger-deletion-by-mcm` (`computeMachineTriggerDeletionData`):
/// malformed entries, bad times, unknown machines and Failed or terminating
/// machines are dropped from the annotation; the rest are marked.
pub fn trigger_deletion_plan(value: &str, lookup: impl Fn(&str) -> TriggerTarget) -> TriggerPlan {
    let mut keep = Vec::new();
    let mut plan = TriggerPlan::default();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let parts: Vec<&str> = entry.split('~').collect();
        let [name, time] = parts.as_slice() else {
            continue;
        };
        if crate::replicas::parse_rfc3339(time).is_none() {
            continue;
        }
        match lookup(name) {
            TriggerTarget::NotFound | TriggerTarget::FailedOrTerminating => continue,
            TriggerTarget::Live { marked } => {
                keep.push(entry.to_string());
                if !marked {
                    plan.mark.push(((*name).to_string(), (*time).to_string()));
                }
            }
        }
    }
    let new_value = keep.join(",");
    if new_value != value {
        plan.new_value = Some(new_value);
    }
    plan
}

/// What a rollout does with the cluster-autoscaler scale-down annotations of
/// one Node (`cluster-autoscaler.kubernetes.io/scale-down-disabled` and its
/// `-by-mcm` marker; design: sets-and-deployments.md, "Cluster-autoscaler
/// annotations").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleDownDisabledChange {
    /// Put both annotations on the node.
    Add,
    /// Remove both annotations from the node.
    Remove,
    /// Leave the node alone.
    Keep,
}

/// The scale-down annotation decision for the node of one machine of the
/// deployment: while a rollout is under way (some old set not scaled to
/// zero, see [`sets_scaled_to_zero`]) every node gets both annotations; once
/// the rollout is complete they are removed, but only where the `-by-mcm`
/// marker shows that mcm put them there, and never from a preserved machine
/// (preservation keeps the node out of scale-down itself).
pub fn scale_down_disabled_change(
    rollout_ongoing: bool,
    complete: bool,
    node_annotations: &BTreeMap<String, String>,
    machine_preserved: bool,
) -> ScaleDownDisabledChange {
    let has = |k: &str| {
        node_annotations.get(k).map(String::as_str) == Some(c::CA_SCALE_DOWN_DISABLED_VALUE)
    };
    if rollout_ongoing {
        if has(c::CA_SCALE_DOWN_DISABLED_ANNOTATION)
            && has(c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION)
        {
            return ScaleDownDisabledChange::Keep;
        }
        return ScaleDownDisabledChange::Add;
    }
    if complete && !machine_preserved && has(c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION) {
        return ScaleDownDisabledChange::Remove;
    }
    ScaleDownDisabledChange::Keep
}
