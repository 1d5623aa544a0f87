//! # MachineDeployment rollout arithmetic, without I/O
//!
//! The decisions of the MachineDeployment controller (spec
//! `sets-deployments-safety.md` §10) and of the overshoot safety loop (§11) as
//! pure functions:
//!
//! - strategy and fence-posts: [`resolve_strategy`], [`Strategy::max_surge`],
//!   [`Strategy::max_unavailable`] (maxSurge rounds up, maxUnavailable rounds
//!   down, both 0 → maxUnavailable 1);
//! - the new MachineSet: [`equal_ignore_hash`] (template equality without the
//!   `machine-template-hash` label and without the fields that are
//!   propagated in place), [`partition`], [`template_hash`], [`new_set_name`],
//!   [`new_set_annotations`], [`new_set_replicas`];
//! - revisions and rollback: [`revision`], [`max_revision`],
//!   [`last_revision`], [`rollback_decision`];
//! - scaling: [`is_scaling_event`], [`scale_targets`] (proportional scaling);
//! - strategies: [`rolling_scale_down`] (RollingUpdate), [`recreate_step`]
//!   (Recreate);
//! - status: [`deployment_status`], [`rollout_status`],
//!   [`status_update_required`], [`progress_requeue`], conditions
//!   ([`set_condition`]), [`paused_condition`];
//! - [`history_cleanup`]; the cluster-autoscaler annotations
//!   ([`normalize_trigger_deletion`], [`trigger_deletion_plan`],
//!   [`scale_down_disabled_change`] for nodes, used once a target cluster
//!   is wired in);
//! - the safety loop: [`overshoot_count`], [`overshoot_thresholds`],
//!   [`overshoot_decision`], [`deployment_should_be_frozen`].
//!
//! ## Quirks of the reference (§19): fixed or kept
//!
//! Fixed, each with a test:
//! - **2** (release by merge patch is a no-op): [`crate::replicas::claim`]
//!   answers `Release` and the runtime writes the ownerReferences without
//!   ours (resourceVersion-guarded)
//!   (`claim_releases_own_objects_that_no_longer_match_unless_owner_deleting`,
//!   runtime test `relabelled_machine_is_released_and_replaced`).
//! - **5** (RollingUpdate sizes the new set from `status.replicas` only, so a
//!   lagging status lets it surge again and again): [`new_set_replicas`]
//!   counts every set as `max(spec.replicas, status.replicas)`
//!   (`new_set_does_not_surge_again_while_status_lags`).
//! - **6** (overshoot check stops after the first action of a pass and
//!   errors for a MachineDeployment without any maxSurge): every set is
//!   checked in every pass and a missing maxSurge counts as 0
//!   (`overshoot_threshold_without_any_max_surge_uses_zero_surge`,
//!   `overshoot_decisions_are_independent_per_set`).
//! - **7** (`machineSetsScaledToZero` calls a set "scaled" as soon as any of
//!   five counters is 0): [`sets_scaled_to_zero`] looks at `spec.replicas`
//!   and `status.replicas` (`scaled_to_zero_needs_no_spec_and_no_machines`).
//! - **8** (recursive retries without back-off): there are no retry loops;
//!   a failed write returns an error to the controller, which requeues with
//!   the exponential backoff of [`crate::backoff`] (conflicts: after the
//!   short conflict period); every write of a computed value carries a
//!   resourceVersion precondition (runtime test
//!   `settled_deployment_causes_no_further_writes` guards against loops).
//! - **10** (propagation mutates the informer cache):
//!   [`crate::replicas::propagate_template`] returns a new spec
//!   (`node_template_and_configuration_are_pushed_into_active_machines`).
//! - **11** (expectations recorded but never consulted):
//!   [`crate::replicas::Expectations`] gates the replica manager
//!   (`expectations_hold_until_creations_and_deletions_are_observed`,
//!   runtime test `deployment_scales_0_1_6_2_with_exact_machine_counts`).
//! - (found while porting) the new set's `revision-history` got the current
//!   revision appended whenever MachineDeployment annotations were copied,
//!   even without a revision change; here only a real revision raise appends
//!   (`revision_history_grows_only_when_the_revision_is_raised`).
//! - (found while porting) proportional scaling divided by a zero
//!   `max-replicas` fallback (Go: float division by zero); here such a set
//!   gets no proportional share (`proportional_scaling_survives_missing_max_replicas`).
//! - (found while porting) machines with a deletion timestamp but a stale
//!   phase counted as live replicas (see
//!   [`crate::replicas::MachineView::is_terminating`],
//!   `terminating_machines_do_not_count_as_replicas`).
//! - (found while porting) a new set with more available machines than its
//!   spec (being scaled down) gave old sets a negative "unavailable" and so
//!   extra scale-down budget; it is clamped at 0
//!   (`old_sets_keep_their_machines_while_the_new_set_sheds_surplus`).
//!
//! Kept on purpose:
//! - **1** (no defaulting; strategy type and both fence-posts mandatory):
//!   manifests must behave as with the Go controller. Invalid objects are
//!   still not acted upon, but no longer silently: the runtime logs and
//!   emits a Warning event `InvalidSpec` (runtime test
//!   `invalid_machineset_is_reported_and_left_alone`). An empty selector,
//!   which would select every machine of the namespace, is refused for
//!   MachineSets too (the reference only refuses it for deployments).
//! - **3** (`minReadySeconds` ignored for availability): machines carry no
//!   "ready since" time, and MachineDeployment maths must agree with objects
//!   written by the Go controller.
//! - **4** (MaxSurge is 0 for InPlaceUpdate in the `max-replicas` annotation
//!   and proportional scaling): proportional scaling only runs for
//!   RollingUpdate, so the value is only written, never used; keeping it
//!   keeps annotations identical to the reference.
//! - **12** (`last-deployment-replica-change-by-scaler-time` only reaches the
//!   new set): copying it to old sets would make an old set delete a marked
//!   machine without lowering its replicas, i.e. replace it instead of
//!   removing it; marked machines still sort first on every scale-down.
//! - **14** (the MachineDeployment `freeze` label blocks nothing; a set's
//!   label blocks only creations): a frozen set must still be able to shrink
//!   (that is what ends an overshoot).
//!
//! Not in this module: **9** (a metric) and **13** (orphan-VM period of the
//! machine controller).

use crate::replicas::{
    controller_ref, from_k8s_time, labels_contain, normalize, to_k8s_time, ControllerRef,
};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::constants as c;
use mcm_api::validation::{resolve_fenceposts, scaled_value_from_int_or_percent, IntOrStringError};
use mcm_api::{
    ConditionStatus, MachineDeploymentCondition, MachineDeploymentConditionType,
    MachineDeploymentSpec, MachineDeploymentStatus, MachineDeploymentStrategyType, MachineSet,
    MachineSetCondition, MachineSetConditionType, MachineSummary, MachineTemplateSpec,
    OrchestrationType,
};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

// ---------------------------------------------------------------------------
// Strategy and fence-posts
// ---------------------------------------------------------------------------

/// The update strategy with its fence-posts resolved against `spec.replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Scale all old sets to 0, then the new one up.
    Recreate,
    /// Surge new machines and remove old ones within the bounds.
    RollingUpdate {
        /// maxSurge, rounded up.
        max_surge: i32,
        /// maxUnavailable, rounded down (1 when both are 0).
        max_unavailable: i32,
    },
    /// Update machines in place (needs a target cluster).
    InPlaceUpdate {
        /// maxSurge as written (rounded up).
        max_surge: i32,
        /// maxUnavailable (1 when both are 0; surge counts as 0 for Manual).
        max_unavailable: i32,
        /// `orchestrationType: Manual`.
        manual: bool,
    },
}

/// Why the strategy could not be resolved (validation reports the same).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    /// `strategy.type` is not one of the three.
    #[error("unexpected deployment strategy type {0:?}")]
    UnknownType(String),
    /// The parameters block of the strategy is missing.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A fence-post does not resolve.
    #[error("{0}")]
    FencePost(#[from] IntOrStringError),
}

/// Resolves the strategy of a MachineDeployment spec.
pub fn resolve_strategy(spec: &MachineDeploymentSpec) -> Result<Strategy, StrategyError> {
    let replicas = spec.replicas;
    match &spec.strategy.type_ {
        MachineDeploymentStrategyType::Recreate => Ok(Strategy::Recreate),
        MachineDeploymentStrategyType::RollingUpdate => {
            let ru = spec
                .strategy
                .rolling_update
                .as_ref()
                .ok_or(StrategyError::Missing("spec.strategy.rollingUpdate"))?;
            let (max_surge, max_unavailable) =
                resolve_fenceposts(ru.max_surge.as_ref(), ru.max_unavailable.as_ref(), replicas)?;
            Ok(Strategy::RollingUpdate {
                max_surge,
                max_unavailable,
            })
        }
        MachineDeploymentStrategyType::InPlaceUpdate => {
            let ip = spec
                .strategy
                .in_place_update
                .as_ref()
                .ok_or(StrategyError::Missing("spec.strategy.inPlaceUpdate"))?;
            let manual = ip.orchestration_type == OrchestrationType::Manual;
            let cfg = &ip.update_configuration;
            let max_surge =
                scaled_value_from_int_or_percent(cfg.max_surge.as_ref(), replicas, true)?;
            let zero = IntOrString::Int(0);
            let surge_for_unavailable = if manual {
                Some(&zero)
            } else {
                cfg.max_surge.as_ref()
            };
            let (_, max_unavailable) = resolve_fenceposts(
                surge_for_unavailable,
                cfg.max_unavailable.as_ref(),
                replicas,
            )?;
            Ok(Strategy::InPlaceUpdate {
                max_surge,
                max_unavailable,
                manual,
            })
        }
        other => Err(StrategyError::UnknownType(other.as_str().to_string())),
    }
}

impl Strategy {
    /// `MaxSurge()`: the surge of a RollingUpdate, 0 for the other strategies
    /// (used for the `max-replicas` annotation and proportional scaling).
    pub fn max_surge(&self) -> i32 {
        match self {
            Strategy::RollingUpdate { max_surge, .. } => *max_surge,
            _ => 0,
        }
    }

    /// `MaxUnavailable()`: 0 for Recreate or 0 replicas, else the resolved
    /// value capped at `replicas`.
    pub fn max_unavailable(&self, replicas: i32) -> i32 {
        if replicas <= 0 {
            return 0;
        }
        match self {
            Strategy::Recreate => 0,
            Strategy::RollingUpdate {
                max_unavailable, ..
            }
            | Strategy::InPlaceUpdate {
                max_unavailable, ..
            } => (*max_unavailable).min(replicas),
        }
    }

    /// Whether this is a RollingUpdate.
    pub fn is_rolling(&self) -> bool {
        matches!(self, Strategy::RollingUpdate { .. })
    }
}

// ---------------------------------------------------------------------------
// Templates, hash, names
// ---------------------------------------------------------------------------

/// A copy of the template without the `machine-template-hash` label.
pub fn template_without_hash(t: &MachineTemplateSpec) -> MachineTemplateSpec {
    let mut out = t.clone();
    if let Some(labels) = out.metadata.labels.as_mut() {
        labels.remove(c::TEMPLATE_HASH_LABEL);
        if labels.is_empty() {
            out.metadata.labels = None;
        }
    }
    out
}

/// The part of a template whose change starts a rollout, as normalized JSON:
/// everything except the hash label, `spec.nodeTemplate`, the inline machine
/// configuration and `spec.class.kind` (those are propagated in place, §9.4).
fn rollout_relevant(t: &MachineTemplateSpec) -> serde_json::Value {
    let mut t = template_without_hash(t);
    t.spec.node_template = Default::default();
    t.spec.configuration = Default::default();
    t.spec.class.kind = String::new();
    normalize(&serde_json::to_value(&t).unwrap_or(serde_json::Value::Null))
}

/// Template equality as the rollout sees it (`EqualIgnoreHash`): changes of
/// the hash label, the node template, the machine configuration or the class
/// kind do not make templates different. `nil` and empty values are equal.
pub fn equal_ignore_hash(a: &MachineTemplateSpec, b: &MachineTemplateSpec) -> bool {
    rollout_relevant(a) == rollout_relevant(b)
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(v) = m.get(k) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn fnv1a32(bytes: &[u8], mut h: u32) -> u32 {
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The template hash (`ComputeHash`): FNV-1a 32 of the canonical JSON of the
/// template without the hash label, followed, when a collision count is set,
/// by that count as 8 little-endian bytes (only the low 4 set).
///
/// The Go reference hashes a go-spew dump, so the numbers differ from Go's;
/// that only affects names of newly created sets, because the new set is
/// found by template equality, never by hash (§10.3).
pub fn template_hash(t: &MachineTemplateSpec, collision_count: Option<i32>) -> u32 {
    let mut s = String::new();
    let v = serde_json::to_value(template_without_hash(t)).unwrap_or(serde_json::Value::Null);
    write_canonical(&v, &mut s);
    let mut h = fnv1a32(s.as_bytes(), 0x811c_9dc5);
    if let Some(cc) = collision_count {
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(cc as u32).to_le_bytes());
        h = fnv1a32(&buf, h);
    }
    h
}

/// Kubernetes' `rand.SafeEncodeString` alphabet (no vowels, no confusable digits).
const SAFE_ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

/// The MachineSet name suffix of a hash: the decimal hash string encoded
/// character-wise into the safe alphabet, first 5 characters.
pub fn hash_suffix(hash: u32) -> String {
    hash.to_string()
        .bytes()
        .take(5)
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

/// The name of a new MachineSet: `<deployment>-<hash suffix>`.
pub fn new_set_name(deployment: &str, hash: u32) -> String {
    format!("{deployment}-{}", hash_suffix(hash))
}

// ---------------------------------------------------------------------------
// MachineSet views
// ---------------------------------------------------------------------------

/// The status numbers of a MachineSet the rollout looks at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetStatusView {
    /// `status.replicas` (machines that exist, any phase).
    pub replicas: i32,
    /// `status.fullyLabeledReplicas`.
    pub fully_labeled_replicas: i32,
    /// `status.readyReplicas`.
    pub ready_replicas: i32,
    /// `status.availableReplicas`.
    pub available_replicas: i32,
    /// `status.preservedFailedReplicas`.
    pub preserved_failed_replicas: i32,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// The set's `ReplicaFailure` condition, if any.
    pub replica_failure: Option<MachineSetCondition>,
    /// The set's `failedMachines`.
    pub failed_machines: Vec<MachineSummary>,
}

/// What the rollout needs to know about one MachineSet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp`.
    pub created: Option<DateTime<Utc>>,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// `metadata.generation`.
    pub generation: i64,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The controller ownerReference.
    pub controller: Option<ControllerRef>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.template`.
    pub template: MachineTemplateSpec,
    /// The status numbers.
    pub status: SetStatusView,
}

impl SetView {
    /// The view of an API MachineSet.
    pub fn from_set(ms: &MachineSet) -> SetView {
        let meta = &ms.metadata;
        let st = ms.status.clone().unwrap_or_default();
        SetView {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            created: meta.creation_timestamp.as_ref().map(from_k8s_time),
            deleting: meta.deletion_timestamp.is_some(),
            generation: meta.generation.unwrap_or(0),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            controller: controller_ref(meta),
            replicas: ms.spec.replicas,
            template: ms.spec.template.clone(),
            status: SetStatusView {
                replicas: st.replicas,
                fully_labeled_replicas: st.fully_labeled_replicas,
                ready_replicas: st.ready_replicas,
                available_replicas: st.available_replicas,
                preserved_failed_replicas: st.preserved_failed_replicas,
                observed_generation: st.observed_generation,
                replica_failure: st
                    .conditions
                    .iter()
                    .find(|c| c.type_ == MachineSetConditionType::ReplicaFailure)
                    .cloned(),
                failed_machines: st.failed_machines.unwrap_or_default(),
            },
        }
    }

    fn is_active(&self) -> bool {
        self.replicas > 0
    }

    fn int_annotation(&self, key: &str) -> Option<i32> {
        self.annotations
            .get(key)
            .and_then(|v| v.trim().parse().ok())
    }
}

/// Creation order: older first, then by name.
fn by_creation(a: &SetView, b: &SetView) -> Ordering {
    a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name))
}

/// The owned sets split into the new one (if any) and the old ones (indexes
/// into the input slice; old ones oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partition {
    /// The oldest set whose template equals the deployment's (`FindNewMachineSet`).
    pub new: Option<usize>,
    /// All other sets, oldest first.
    pub old: Vec<usize>,
}

/// Splits the owned sets into new and old (§10.3).
pub fn partition(template: &MachineTemplateSpec, sets: &[SetView]) -> Partition {
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.sort_by(|&a, &b| by_creation(&sets[a], &sets[b]));
    let new = order
        .iter()
        .copied()
        .find(|&i| equal_ignore_hash(&sets[i].template, template));
    let old = order.into_iter().filter(|&i| Some(i) != new).collect();
    Partition { new, old }
}

// ---------------------------------------------------------------------------
// Revisions and annotations (§10.4)
// ---------------------------------------------------------------------------

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

fn skip_copy(key: &str) -> bool {
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

// ---------------------------------------------------------------------------
// Scaling (§10.4, §10.5)
// ---------------------------------------------------------------------------

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

/// Round half away from zero, like Kubernetes' `integer.RoundToInt32`.
fn round_i32(x: f64) -> i32 {
    let r = x.round();
    if r >= f64::from(i32::MAX) {
        i32::MAX
    } else if r <= f64::from(i32::MIN) {
        i32::MIN
    } else {
        r as i32
    }
}

fn set_fraction(set: &SetView, replicas: i32, max_surge: i32, status_replicas: i32) -> i32 {
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

fn proportion(
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

/// The sizes the scaling path writes (`scale`, §10.5), as `(set index, size)`.
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
    let total: i32 = active.iter().map(|&i| sets[i].replicas).sum();
    let allowed = if replicas > 0 {
        replicas.saturating_add(surge)
    } else {
        0
    };
    let to_add = allowed - total;
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
            sizes.insert(i, sets[i].replicas + p);
            sum += p;
        }
        sum
    };
    if to_add != 0 {
        if let Some(&first) = order.first() {
            let leftover = to_add - added;
            let v = sizes.get(&first).copied().unwrap_or(0);
            sizes.insert(first, (v + leftover).max(0));
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
/// lags behind its spec, every pass surges again (§19 quirk 5, fixed).
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
    let up = (max_total - current).min(replicas - new.replicas);
    new.replicas + up.max(0)
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
    let old_count: i32 = old.iter().map(|&i| sets[i].replicas).sum();
    if old_count == 0 {
        return Vec::new();
    }
    let all_count: i32 = old_count + new.replicas;
    let min_available = replicas - max_unavailable;
    // Clamped at 0: a new set with more available machines than spec (it is
    // being scaled down) must not enlarge the old sets' budget.
    let new_unavailable = (new.replicas - new.status.available_replicas).max(0);
    let max_scaled_down = all_count - min_available - new_unavailable;
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
        let unhealthy = s.replicas - s.status.available_replicas;
        if unhealthy <= 0 {
            continue;
        }
        let n = (max_scaled_down - cleaned).min(unhealthy);
        sizes.insert(i, s.replicas - n);
        cleaned += n;
    }
    // Scale down by the available surplus.
    let available: i32 = new.status.available_replicas
        + old
            .iter()
            .map(|&i| sets[i].status.available_replicas)
            .sum::<i32>();
    if available > min_available {
        let total = available - min_available;
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

/// One step of a Recreate rollout (§10.7).
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
    let old_status: i32 = part.old.iter().map(|&i| sets[i].status.replicas).sum();
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
/// five counters is 0 (§19 quirk 7, fixed).
pub fn sets_scaled_to_zero<'a>(sets: impl IntoIterator<Item = &'a SetView>) -> bool {
    sets.into_iter()
        .all(|s| s.replicas == 0 && s.status.replicas == 0)
}

/// Old sets to delete by the revision-history limit (§10.12): oldest first,
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

// ---------------------------------------------------------------------------
// Rollback (§10.9)
// ---------------------------------------------------------------------------

/// What a rollback does.
#[derive(Debug, Clone, PartialEq)]
pub enum RollbackDecision {
    /// No set has the revision: warn (`DeploymentRollbackRevisionNotFound`)
    /// and clear `rollbackTo`.
    RevisionNotFound(String),
    /// The set of that revision has the current template: warn
    /// (`DeploymentRollbackTemplateUnchanged`) and clear `rollbackTo`.
    TemplateUnchanged {
        /// The revision.
        revision: i64,
    },
    /// Copy the set's template (without hash label) and annotations into the
    /// deployment and clear `rollbackTo` (`DeploymentRollback`).
    RollBack {
        /// The revision rolled back to.
        revision: i64,
        /// The index of the set.
        set: usize,
        /// The new deployment template.
        template: Box<MachineTemplateSpec>,
        /// The new deployment annotations.
        annotations: BTreeMap<String, String>,
    },
}

/// The rollback decision for `spec.rollbackTo.revision` (0 = the previous
/// revision). When the current template has no set yet, its revision counts
/// as `max + 1`, so "previous" is the newest existing set (what the
/// reference gets by creating the set first; mcm-rs does not create a set
/// for a template it is about to leave).
pub fn rollback_decision(
    to_revision: i64,
    template: &MachineTemplateSpec,
    deployment_annotations: &BTreeMap<String, String>,
    sets: &[SetView],
    part: &Partition,
) -> RollbackDecision {
    let mut target = to_revision;
    if target == 0 {
        let mut revs: Vec<i64> = sets
            .iter()
            .filter_map(|s| revision(&s.annotations))
            .collect();
        if part.new.is_none() {
            revs.push(max_revision(sets) + 1);
        }
        target = last_revision(revs);
        if target == 0 {
            return RollbackDecision::RevisionNotFound("Unable to find last revision.".into());
        }
    }
    let Some(i) = sets
        .iter()
        .position(|s| revision(&s.annotations) == Some(target))
    else {
        return RollbackDecision::RevisionNotFound(
            "Unable to find the revision to rollback to.".into(),
        );
    };
    if equal_ignore_hash(&sets[i].template, template) {
        return RollbackDecision::TemplateUnchanged { revision: target };
    }
    RollbackDecision::RollBack {
        revision: target,
        set: i,
        template: Box::new(template_without_hash(&sets[i].template)),
        annotations: rollback_annotations(deployment_annotations, &sets[i].annotations),
    }
}

// ---------------------------------------------------------------------------
// Status and conditions (§10.11)
// ---------------------------------------------------------------------------

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
        last_update_time: Some(to_k8s_time(now)),
        last_transition_time: Some(to_k8s_time(now)),
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
    let cond = if available >= min_required {
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
    };
    set_condition(&mut status.conditions, cond);
    status
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
    let Some(from) = cond.last_update_time.as_ref().map(from_k8s_time) else {
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
    let subject = match part.new {
        Some(n) => format!("MachineSet {:?}", sets[n].name),
        None => format!("Machine Deployment {:?}", d.name),
    };
    if !already_complete {
        if is_complete(d.replicas, d.generation, &status) {
            set_condition(
                &mut status.conditions,
                new_condition(
                    MachineDeploymentConditionType::Progressing,
                    ConditionStatus::True,
                    c::NEW_MACHINE_SET_AVAILABLE_REASON,
                    format!("{subject} has successfully progressed."),
                    now,
                ),
            );
        } else if is_progressing(d.status, &status) {
            let mut cond = new_condition(
                MachineDeploymentConditionType::Progressing,
                ConditionStatus::True,
                c::MACHINE_SET_UPDATED_REASON,
                format!("{subject} is progressing."),
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
                    format!("{subject} has timed out progressing."),
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
    let from = from_k8s_time(cond.last_update_time.as_ref()?);
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

// ---------------------------------------------------------------------------
// Cluster-autoscaler integration (§10.14)
// ---------------------------------------------------------------------------

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
/// `-by-mcm` marker, §10.6 steps 3 and 6).
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

// ---------------------------------------------------------------------------
// Overshoot safety (§11)
// ---------------------------------------------------------------------------

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
/// (the reference errors out and skips the rest of its pass, §19 quirk 6).
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use mcm_api::{ClassSpec, MachineDeploymentStrategy, MachineSpec, UpdateConfiguration};

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0)
            .single()
            .unwrap_or_default()
    }

    fn tpl(class: &str) -> MachineTemplateSpec {
        MachineTemplateSpec {
            metadata: ObjectMeta {
                labels: Some([("app".to_string(), "x".to_string())].into()),
                ..Default::default()
            },
            spec: MachineSpec {
                class: ClassSpec {
                    kind: "MachineClass".into(),
                    name: class.into(),
                    ..Default::default()
                },
                ..Default::default()
            },
        }
    }

    fn set(name: &str, created: i64, replicas: i32, status: i32, available: i32) -> SetView {
        SetView {
            name: name.into(),
            uid: format!("uid-{name}"),
            created: Some(t(created)),
            replicas,
            template: tpl(name),
            status: SetStatusView {
                replicas: status,
                available_replicas: available,
                ready_replicas: available,
                fully_labeled_replicas: status,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn with_ann(mut s: SetView, k: &str, v: &str) -> SetView {
        s.annotations.insert(k.into(), v.into());
        s
    }

    fn rolling(surge: i32, unavailable: i32) -> Strategy {
        Strategy::RollingUpdate {
            max_surge: surge,
            max_unavailable: unavailable,
        }
    }

    fn spec_with(
        type_: &str,
        ru: Option<(IntOrString, IntOrString)>,
        replicas: i32,
    ) -> MachineDeploymentSpec {
        MachineDeploymentSpec {
            replicas,
            strategy: MachineDeploymentStrategy {
                type_: type_.into(),
                rolling_update: ru.map(|(s, u)| UpdateConfiguration {
                    max_surge: Some(s),
                    max_unavailable: Some(u),
                }),
                in_place_update: None,
            },
            ..Default::default()
        }
    }

    fn by_name(sets: &[SetView], v: Vec<(usize, i32)>) -> Vec<(String, i32)> {
        v.into_iter()
            .map(|(i, r)| (sets[i].name.clone(), r))
            .collect()
    }

    // --- strategy ---

    #[test]
    fn max_surge_rounds_up_and_max_unavailable_rounds_down() {
        let spec = spec_with(
            "RollingUpdate",
            Some((
                IntOrString::String("25%".into()),
                IntOrString::String("25%".into()),
            )),
            10,
        );
        assert_eq!(resolve_strategy(&spec), Ok(rolling(3, 2)));
    }

    #[test]
    fn both_fence_posts_zero_means_one_unavailable() {
        let spec = spec_with(
            "RollingUpdate",
            Some((IntOrString::Int(0), IntOrString::Int(0))),
            3,
        );
        let s = resolve_strategy(&spec).unwrap_or(Strategy::Recreate);
        assert_eq!(s, rolling(0, 1));
        assert_eq!(s.max_unavailable(3), 1);
    }

    #[test]
    fn max_unavailable_is_capped_by_replicas_and_zero_for_recreate() {
        assert_eq!(rolling(1, 5).max_unavailable(3), 3);
        assert_eq!(rolling(1, 5).max_unavailable(0), 0);
        assert_eq!(Strategy::Recreate.max_unavailable(3), 0);
        assert_eq!(Strategy::Recreate.max_surge(), 0);
    }

    #[test]
    fn in_place_surge_counts_zero_for_max_surge_and_manual_unavailable() {
        let mut spec = spec_with("InPlaceUpdate", None, 4);
        spec.strategy.in_place_update = Some(mcm_api::InPlaceUpdateMachineDeployment {
            update_configuration: UpdateConfiguration {
                max_surge: Some(IntOrString::Int(1)),
                max_unavailable: Some(IntOrString::Int(0)),
            },
            orchestration_type: OrchestrationType::Manual,
        });
        let s = resolve_strategy(&spec).unwrap_or(Strategy::Recreate);
        assert_eq!(
            s,
            Strategy::InPlaceUpdate {
                max_surge: 1,
                max_unavailable: 1,
                manual: true
            }
        );
        assert_eq!(s.max_surge(), 0);
    }

    #[test]
    fn unknown_strategy_or_missing_block_is_an_error() {
        assert!(matches!(
            resolve_strategy(&spec_with("Blue", None, 1)),
            Err(StrategyError::UnknownType(_))
        ));
        assert!(matches!(
            resolve_strategy(&spec_with("RollingUpdate", None, 1)),
            Err(StrategyError::Missing(_))
        ));
    }

    // --- templates ---

    #[test]
    fn template_equality_ignores_hash_label_node_template_configuration_and_class_kind() {
        let a = tpl("c1");
        let mut b = a.clone();
        b.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(c::TEMPLATE_HASH_LABEL.into(), "123".into());
        b.spec.node_template.metadata.labels = Some([("pool".to_string(), "p".to_string())].into());
        b.spec.configuration.drain_timeout = Some("1h".into());
        b.spec.class.kind = "AWSMachineClass".into();
        assert!(equal_ignore_hash(&a, &b));
    }

    #[test]
    fn template_equality_sees_class_name_labels_and_annotations() {
        let a = tpl("c1");
        assert!(!equal_ignore_hash(&a, &tpl("c2")));
        let mut b = a.clone();
        b.metadata.annotations = Some([("x".to_string(), "y".to_string())].into());
        assert!(!equal_ignore_hash(&a, &b));
        let mut l = a.clone();
        l.metadata.labels = Some([("app".to_string(), "z".to_string())].into());
        assert!(!equal_ignore_hash(&a, &l));
    }

    #[test]
    fn template_equality_treats_empty_and_missing_maps_alike() {
        let a = tpl("c1");
        let mut b = a.clone();
        b.metadata.annotations = Some(BTreeMap::new());
        assert!(equal_ignore_hash(&a, &b));
    }

    #[test]
    fn template_hash_is_stable_ignores_hash_label_and_changes_with_collisions() {
        let a = tpl("c1");
        let mut labelled = a.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(c::TEMPLATE_HASH_LABEL.into(), "1".into());
        assert_eq!(template_hash(&a, None), template_hash(&labelled, None));
        assert_ne!(template_hash(&a, None), template_hash(&tpl("c2"), None));
        assert_ne!(template_hash(&a, None), template_hash(&a, Some(1)));
        assert_ne!(template_hash(&a, Some(1)), template_hash(&a, Some(2)));
    }

    #[test]
    fn set_name_suffix_uses_the_safe_alphabet_like_the_reference() {
        // §20: hash 2817305596 → suffix 6d5c7.
        assert_eq!(hash_suffix(2_817_305_596), "6d5c7");
        assert_eq!(new_set_name("pool", 2_817_305_596), "pool-6d5c7");
        assert_eq!(hash_suffix(7), "c");
    }

    #[test]
    fn new_set_is_the_oldest_set_with_an_equal_template() {
        let template = tpl("c2");
        let mut a = set("a", 10, 1, 1, 1);
        a.template = template.clone();
        let mut b = set("b", 5, 1, 1, 1);
        b.template = template.clone();
        let old = set("old", 0, 1, 1, 1);
        let sets = vec![a, b, old];
        let part = partition(&template, &sets);
        assert_eq!(part.new, Some(1));
        assert_eq!(part.old, vec![2, 0]);
    }

    // --- revisions ---

    #[test]
    fn revisions_parse_with_missing_as_zero_and_garbage_skipped() {
        let sets = vec![
            with_ann(set("a", 0, 0, 0, 0), c::REVISION_ANNOTATION, "3"),
            with_ann(set("b", 0, 0, 0, 0), c::REVISION_ANNOTATION, "x"),
            set("c", 0, 0, 0, 0),
        ];
        assert_eq!(max_revision(&sets), 3);
        assert_eq!(revision(&sets[1].annotations), None);
        assert_eq!(revision(&sets[2].annotations), Some(0));
        assert_eq!(last_revision([1, 5, 3]), 3);
        assert_eq!(last_revision([5]), 0);
    }

    #[test]
    fn new_set_annotations_copy_deployment_annotations_except_the_skip_list() {
        let d: BTreeMap<String, String> = [
            ("team".to_string(), "a".to_string()),
            (c::REVISION_ANNOTATION.to_string(), "9".to_string()),
            (
                c::TRIGGER_DELETION_BY_MCM_ANNOTATION.to_string(),
                "m~t".to_string(),
            ),
            (
                c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION.to_string(),
                "2024-01-01T00:00:00Z".to_string(),
            ),
        ]
        .into();
        let out = new_set_annotations(&d, &BTreeMap::new(), 2, false, 3, 4);
        assert_eq!(out.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            out.get(c::REVISION_ANNOTATION).map(String::as_str),
            Some("2")
        );
        assert!(!out.contains_key(c::TRIGGER_DELETION_BY_MCM_ANNOTATION));
        assert!(out.contains_key(c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION));
        assert_eq!(
            out.get(c::DESIRED_REPLICAS_ANNOTATION).map(String::as_str),
            Some("3")
        );
        assert_eq!(
            out.get(c::MAX_REPLICAS_ANNOTATION).map(String::as_str),
            Some("4")
        );
        assert!(!out.contains_key(c::REVISION_HISTORY_ANNOTATION));
    }

    #[test]
    fn revision_history_grows_only_when_the_revision_is_raised() {
        let set_ann: BTreeMap<String, String> = [
            (c::REVISION_ANNOTATION.to_string(), "1".to_string()),
            (c::REVISION_HISTORY_ANNOTATION.to_string(), "0".to_string()),
        ]
        .into();
        let d: BTreeMap<String, String> = [("team".to_string(), "b".to_string())].into();
        // Same revision, annotations copied: no history entry (the reference appends "1").
        let same = new_set_annotations(&d, &set_ann, 1, true, 3, 4);
        assert_eq!(
            same.get(c::REVISION_HISTORY_ANNOTATION).map(String::as_str),
            Some("0")
        );
        assert!(!same.contains_key(c::DESIRED_REPLICAS_ANNOTATION));
        // Rollback to this set: revision 1 → 3, history "0,1".
        let raised = new_set_annotations(&d, &set_ann, 3, true, 3, 4);
        assert_eq!(
            raised.get(c::REVISION_ANNOTATION).map(String::as_str),
            Some("3")
        );
        assert_eq!(
            raised
                .get(c::REVISION_HISTORY_ANNOTATION)
                .map(String::as_str),
            Some("0,1")
        );
        // Never lowered.
        let lower = new_set_annotations(&d, &raised, 2, true, 3, 4);
        assert_eq!(
            lower.get(c::REVISION_ANNOTATION).map(String::as_str),
            Some("3")
        );
    }

    #[test]
    fn rollback_annotations_replace_all_but_the_skip_list() {
        let d: BTreeMap<String, String> = [
            ("a".to_string(), "1".to_string()),
            (c::REVISION_ANNOTATION.to_string(), "4".to_string()),
        ]
        .into();
        let s: BTreeMap<String, String> = [
            ("b".to_string(), "2".to_string()),
            (c::REVISION_ANNOTATION.to_string(), "1".to_string()),
        ]
        .into();
        let out = rollback_annotations(&d, &s);
        assert_eq!(
            out,
            [
                ("b".to_string(), "2".to_string()),
                (c::REVISION_ANNOTATION.to_string(), "4".to_string())
            ]
            .into()
        );
    }

    // --- rollback ---

    fn rev_set(name: &str, created: i64, rev: &str, class: &str) -> SetView {
        let mut s = with_ann(set(name, created, 0, 0, 0), c::REVISION_ANNOTATION, rev);
        s.template = tpl(class);
        s.template
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(c::TEMPLATE_HASH_LABEL.into(), "h".into());
        s
    }

    #[test]
    fn rollback_to_zero_means_the_previous_revision() {
        let sets = vec![rev_set("v1", 0, "1", "c1"), rev_set("v2", 1, "2", "c2")];
        let current = tpl("c2");
        let part = partition(&current, &sets);
        let d = rollback_decision(0, &current, &BTreeMap::new(), &sets, &part);
        let RollbackDecision::RollBack {
            revision,
            set,
            template,
            ..
        } = d
        else {
            panic!("expected RollBack, got {d:?}")
        };
        assert_eq!((revision, set), (1, 0));
        assert_eq!(*template, tpl("c1"));
        assert!(!template
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(c::TEMPLATE_HASH_LABEL));
    }

    #[test]
    fn rollback_counts_an_unrolled_template_as_the_next_revision() {
        // Template changed to c3 (no set yet) together with rollbackTo 0:
        // "previous" is revision 2, not 1.
        let sets = vec![rev_set("v1", 0, "1", "c1"), rev_set("v2", 1, "2", "c2")];
        let current = tpl("c3");
        let part = partition(&current, &sets);
        let d = rollback_decision(0, &current, &BTreeMap::new(), &sets, &part);
        assert!(matches!(d, RollbackDecision::RollBack { revision: 2, .. }));
    }

    #[test]
    fn rollback_to_a_missing_revision_or_the_same_template_only_warns() {
        let sets = vec![rev_set("v1", 0, "1", "c1"), rev_set("v2", 1, "2", "c2")];
        let current = tpl("c2");
        let part = partition(&current, &sets);
        assert!(matches!(
            rollback_decision(7, &current, &BTreeMap::new(), &sets, &part),
            RollbackDecision::RevisionNotFound(_)
        ));
        assert_eq!(
            rollback_decision(2, &current, &BTreeMap::new(), &sets, &part),
            RollbackDecision::TemplateUnchanged { revision: 2 }
        );
        let only = vec![rev_set("v1", 0, "1", "c1")];
        let p1 = partition(&tpl("c1"), &only);
        assert!(matches!(
            rollback_decision(0, &tpl("c1"), &BTreeMap::new(), &only, &p1),
            RollbackDecision::RevisionNotFound(_)
        ));
    }

    // --- scaling ---

    fn two_sets_new_first() -> (Vec<SetView>, Partition) {
        let mut new = set("new", 10, 2, 2, 2);
        new.template = tpl("cur");
        let old = set("old", 0, 3, 3, 3);
        let sets = vec![old, new];
        let part = partition(&tpl("cur"), &sets);
        (sets, part)
    }

    #[test]
    fn scaling_event_needs_a_new_set_and_a_changed_desired_annotation() {
        let (mut sets, part) = two_sets_new_first();
        assert!(!is_scaling_event(5, &sets, &part)); // no annotation anywhere
        sets[1] = with_ann(sets[1].clone(), c::DESIRED_REPLICAS_ANNOTATION, "5");
        assert!(!is_scaling_event(5, &sets, &part));
        assert!(is_scaling_event(6, &sets, &part));
        let no_new = Partition {
            new: None,
            old: vec![0, 1],
        };
        assert!(!is_scaling_event(6, &sets, &no_new));
    }

    #[test]
    fn scaling_from_zero_is_a_scaling_event() {
        let mut s = set("new", 0, 0, 0, 0);
        s.template = tpl("cur");
        let sets = vec![s];
        let part = partition(&tpl("cur"), &sets);
        assert!(is_scaling_event(1, &sets, &part));
        assert!(!is_scaling_event(0, &sets, &part));
    }

    #[test]
    fn single_active_set_gets_all_replicas() {
        let mut new = set("new", 10, 0, 0, 0);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 3, 3, 3), new];
        let part = partition(&tpl("cur"), &sets);
        assert_eq!(
            by_name(&sets, scale_targets(6, &rolling(1, 0), 3, &sets, &part)),
            [("old".to_string(), 6)]
        );
        // Nothing active: the new set.
        let mut none = sets.clone();
        none[0].replicas = 0;
        assert_eq!(
            by_name(&none, scale_targets(2, &rolling(1, 0), 0, &none, &part)),
            [("new".to_string(), 2)]
        );
    }

    #[test]
    fn saturated_new_set_scales_old_sets_to_zero() {
        let (mut sets, part) = two_sets_new_first();
        sets[1] = with_ann(set("new", 10, 5, 5, 5), c::DESIRED_REPLICAS_ANNOTATION, "5");
        sets[1].template = tpl("cur");
        assert_eq!(
            by_name(&sets, scale_targets(5, &rolling(1, 0), 8, &sets, &part)),
            [("old".to_string(), 0)]
        );
    }

    #[test]
    fn scale_out_during_rollout_goes_to_the_new_set_only() {
        let (sets, part) = two_sets_new_first();
        // replicas 5→8, surge 1: allowed 9, total 5 → +4 to new.
        let out = by_name(&sets, scale_targets(8, &rolling(1, 0), 5, &sets, &part));
        assert!(out.contains(&("new".to_string(), 6)));
        assert!(out.contains(&("old".to_string(), 3)));
    }

    #[test]
    fn scale_in_during_rollout_is_proportional_largest_first() {
        // old 6, new 4 (10 replicas + surge 0 before) → 5 replicas: allowed 5, remove 5.
        let mut new = with_ann(set("new", 10, 4, 4, 4), c::MAX_REPLICAS_ANNOTATION, "10");
        new.template = tpl("cur");
        let old = with_ann(set("old", 0, 6, 6, 6), c::MAX_REPLICAS_ANNOTATION, "10");
        let sets = vec![old, new];
        let part = partition(&tpl("cur"), &sets);
        let out = by_name(&sets, scale_targets(5, &rolling(0, 1), 10, &sets, &part));
        assert_eq!(out, [("old".to_string(), 3), ("new".to_string(), 2)]);
    }

    #[test]
    fn scale_to_zero_during_rollout_empties_every_set() {
        let (sets, part) = two_sets_new_first();
        let out = by_name(&sets, scale_targets(0, &rolling(1, 0), 5, &sets, &part));
        assert_eq!(out, [("old".to_string(), 0), ("new".to_string(), 0)]);
    }

    #[test]
    fn proportional_scaling_survives_missing_max_replicas() {
        let (sets, part) = two_sets_new_first();
        // No max-replicas annotation and deployment status.replicas 0: no share, leftovers to the largest.
        let out = by_name(&sets, scale_targets(3, &rolling(0, 1), 0, &sets, &part));
        assert_eq!(out, [("old".to_string(), 1), ("new".to_string(), 2)]);
    }

    #[test]
    fn recreate_does_not_scale_proportionally() {
        let (sets, part) = two_sets_new_first();
        assert!(scale_targets(3, &Strategy::Recreate, 5, &sets, &part).is_empty());
    }

    // --- rolling update ---

    #[test]
    fn new_set_grows_by_the_surge_and_not_beyond_replicas() {
        let mut new = set("new", 10, 0, 0, 0);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 3, 3, 3), new.clone()];
        assert_eq!(new_set_replicas(&rolling(1, 0), 3, &sets, &new), 1);
        assert_eq!(new_set_replicas(&rolling(5, 0), 3, &sets, &new), 3);
        assert_eq!(new_set_replicas(&Strategy::Recreate, 3, &sets, &new), 3);
    }

    #[test]
    fn new_set_does_not_surge_again_while_status_lags() {
        // The new set was raised to 1 but has no machine yet (status 0).
        let mut new = set("new", 10, 1, 0, 0);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 3, 3, 3), new.clone()];
        // Reference: current = 3 + 0 = 3 < 4 → raises to 2. mcm-rs: current = 3 + 1 = 4.
        assert_eq!(rolling_new_set_target(&rolling(1, 0), 3, &sets, &new), None);
    }

    #[test]
    fn new_set_waits_for_terminating_old_machines() {
        // Old set scaled 3→2 but its third machine still exists.
        let mut new = set("new", 10, 1, 1, 1);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 2, 3, 2), new.clone()];
        assert_eq!(rolling_new_set_target(&rolling(1, 0), 3, &sets, &new), None);
    }

    #[test]
    fn new_set_above_replicas_is_scaled_down() {
        let mut new = set("new", 10, 5, 5, 5);
        new.template = tpl("cur");
        let sets = vec![new.clone()];
        assert_eq!(
            rolling_new_set_target(&rolling(1, 0), 3, &sets, &new),
            Some(3)
        );
    }

    #[test]
    fn old_sets_shrink_only_by_available_surplus_with_max_unavailable_zero() {
        // replicas 3, surge 1, unavailable 0: new has 1 available → old may lose 1.
        let mut new = set("new", 10, 1, 1, 1);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 3, 3, 3), new];
        let part = partition(&tpl("cur"), &sets);
        assert_eq!(
            by_name(&sets, rolling_scale_down(3, 0, &sets, &part)),
            [("old".to_string(), 2)]
        );
    }

    #[test]
    fn old_sets_do_not_shrink_while_the_new_machine_is_unavailable() {
        let mut new = set("new", 10, 1, 1, 0);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 3, 3, 3), new];
        let part = partition(&tpl("cur"), &sets);
        assert!(rolling_scale_down(3, 0, &sets, &part).is_empty());
    }

    #[test]
    fn old_scale_down_is_not_repeated_before_status_catches_up() {
        // Old already scaled 3→2 (spec) while its status still shows 3 available.
        let mut new = set("new", 10, 1, 1, 1);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 2, 3, 3), new];
        let part = partition(&tpl("cur"), &sets);
        assert!(rolling_scale_down(3, 0, &sets, &part).is_empty());
    }

    #[test]
    fn old_sets_keep_their_machines_while_the_new_set_sheds_surplus() {
        // The new set was scaled down to 1 but still has 3 available machines.
        let mut new = set("new", 10, 1, 3, 3);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 2, 2, 2), new];
        let part = partition(&tpl("cur"), &sets);
        // Reference: unavailable = 1 - 3 = -2 → budget 2 → old 2 → 0, leaving 1 machine.
        assert!(rolling_scale_down(3, 0, &sets, &part).is_empty());
    }

    #[test]
    fn unhealthy_old_replicas_are_cleaned_up_first_oldest_set_first() {
        // replicas 4, unavailable 1 → min available 3. Old1 has 2 spec/1 available, old2 2/2, new 1/0.
        let mut new = set("new", 10, 1, 1, 0);
        new.template = tpl("cur");
        let sets = vec![set("old1", 0, 2, 2, 1), set("old2", 5, 2, 2, 2), new];
        let part = partition(&tpl("cur"), &sets);
        // maxScaledDown = 5 - 3 - 1 = 1 → cleanup removes old1's unhealthy one; available 3 = min → no more.
        assert_eq!(
            by_name(&sets, rolling_scale_down(4, 1, &sets, &part)),
            [("old1".to_string(), 1)]
        );
    }

    #[test]
    fn recreate_scales_old_down_then_waits_then_creates() {
        let old = set("old", 0, 2, 2, 2);
        let sets = vec![old];
        let part = partition(&tpl("cur"), &sets);
        assert_eq!(
            recreate_step(3, &sets, &part, true),
            RecreateStep::ScaleDownOld(vec![0])
        );
        let mut drained = sets.clone();
        drained[0].replicas = 0;
        assert_eq!(
            recreate_step(3, &drained, &part, true),
            RecreateStep::WaitForOldMachines
        );
        drained[0].status.replicas = 0;
        assert_eq!(
            recreate_step(3, &drained, &part, false),
            RecreateStep::CreateNew
        );
        let mut new = set("new", 10, 0, 0, 0);
        new.template = tpl("cur");
        drained.push(new);
        let part = partition(&tpl("cur"), &drained);
        assert_eq!(
            recreate_step(3, &drained, &part, false),
            RecreateStep::ScaleNew(3)
        );
        drained[1].replicas = 3;
        assert_eq!(
            recreate_step(3, &drained, &part, false),
            RecreateStep::Steady
        );
    }

    #[test]
    fn scaled_to_zero_needs_no_spec_and_no_machines() {
        // The reference calls this set "scaled to zero" because readyReplicas is 0.
        let not_ready = set("a", 0, 2, 2, 0);
        assert!(!sets_scaled_to_zero([&not_ready]));
        let draining = set("b", 0, 0, 1, 1);
        assert!(!sets_scaled_to_zero([&draining]));
        let empty = set("c", 0, 0, 0, 0);
        assert!(sets_scaled_to_zero([&empty]));
    }

    #[test]
    fn history_cleanup_deletes_oldest_empty_sets_beyond_the_limit() {
        let mut busy = set("busy", 0, 0, 1, 0);
        busy.template = tpl("x");
        let mut unobserved = set("unobserved", 1, 0, 0, 0);
        unobserved.generation = 2;
        let empty_old = set("empty-old", 2, 0, 0, 0);
        let empty_new = set("empty-new", 3, 0, 0, 0);
        let mut cur = set("cur", 4, 1, 1, 1);
        cur.template = tpl("cur");
        let sets = vec![empty_new, busy, cur, empty_old, unobserved];
        let part = partition(&tpl("cur"), &sets);
        let names: Vec<&str> = history_cleanup(Some(1), &sets, &part)
            .into_iter()
            .map(|i| sets[i].name.as_str())
            .collect();
        // 4 old sets, limit 1 → the 3 oldest are candidates; busy and unobserved are kept.
        assert_eq!(names, ["empty-old"]);
        assert!(history_cleanup(None, &sets, &part).is_empty());
    }

    // --- status ---

    fn facts<'a>(
        status: &'a MachineDeploymentStatus,
        strategy: &'a Strategy,
        replicas: i32,
    ) -> DeploymentFacts<'a> {
        DeploymentFacts {
            name: "d",
            generation: 2,
            replicas,
            strategy,
            progress_deadline_seconds: Some(60),
            status,
        }
    }

    #[test]
    fn status_sums_sets_and_counts_unavailable_from_spec() {
        let (sets, part) = two_sets_new_first();
        let st = MachineDeploymentStatus::default();
        let s = rolling(1, 0);
        let status = deployment_status(&facts(&st, &s, 5), &sets, &part, t(0));
        assert_eq!(status.replicas, 5);
        assert_eq!(status.updated_replicas, 2);
        assert_eq!(status.available_replicas, 5);
        assert_eq!(status.unavailable_replicas, 0);
        assert_eq!(status.observed_generation, 2);
        let avail = get_condition(
            &status.conditions,
            &MachineDeploymentConditionType::Available,
        );
        assert_eq!(
            avail.map(|c| c.reason.as_str()),
            Some(c::MINIMUM_REPLICAS_AVAILABLE)
        );
    }

    #[test]
    fn availability_condition_subtracts_max_unavailable_and_preserved_failed() {
        let mut s1 = set("new", 10, 4, 4, 2);
        s1.template = tpl("cur");
        s1.status.preserved_failed_replicas = 1;
        let sets = vec![s1];
        let part = partition(&tpl("cur"), &sets);
        let st = MachineDeploymentStatus::default();
        let s = rolling(1, 1);
        // min = 4 - 1 - 1 = 2 ≤ 2 → available.
        let ok = deployment_status(&facts(&st, &s, 4), &sets, &part, t(0));
        assert_eq!(
            get_condition(&ok.conditions, &MachineDeploymentConditionType::Available)
                .map(|c| c.status.clone()),
            Some(ConditionStatus::True)
        );
        let r = Strategy::Recreate;
        let bad = deployment_status(&facts(&st, &r, 4), &sets, &part, t(0));
        assert_eq!(
            get_condition(&bad.conditions, &MachineDeploymentConditionType::Available)
                .map(|c| c.reason.clone()),
            Some(c::MINIMUM_REPLICAS_UNAVAILABLE.to_string())
        );
    }

    #[test]
    fn complete_rollout_sets_new_machine_set_available() {
        let mut new = set("new", 10, 3, 3, 3);
        new.template = tpl("cur");
        let sets = vec![new];
        let part = partition(&tpl("cur"), &sets);
        let st = MachineDeploymentStatus::default();
        let s = rolling(1, 0);
        let status = rollout_status(&facts(&st, &s, 3), &sets, &part, t(0));
        let p = get_condition(
            &status.conditions,
            &MachineDeploymentConditionType::Progressing,
        );
        assert_eq!(
            p.map(|c| c.reason.as_str()),
            Some(c::NEW_MACHINE_SET_AVAILABLE_REASON)
        );
        assert_eq!(status.conditions.len(), 2);
    }

    #[test]
    fn progress_refreshes_machine_set_updated_keeping_transition_time() {
        let (sets, part) = two_sets_new_first();
        let mut st = MachineDeploymentStatus {
            replicas: 5,
            updated_replicas: 1,
            ..Default::default()
        };
        set_condition(
            &mut st.conditions,
            new_condition(
                MachineDeploymentConditionType::Progressing,
                ConditionStatus::True,
                c::MACHINE_SET_UPDATED_REASON,
                "x".into(),
                t(0),
            ),
        );
        let s = rolling(1, 0);
        let status = rollout_status(&facts(&st, &s, 3), &sets, &part, t(30));
        let p = get_condition(
            &status.conditions,
            &MachineDeploymentConditionType::Progressing,
        );
        assert_eq!(
            p.and_then(|c| c.last_update_time.clone()),
            Some(to_k8s_time(t(30)))
        );
        assert_eq!(
            p.and_then(|c| c.last_transition_time.clone()),
            Some(to_k8s_time(t(0)))
        );
    }

    #[test]
    fn stuck_rollout_times_out_after_the_progress_deadline() {
        let mut new = set("new", 10, 1, 1, 0);
        new.template = tpl("cur");
        let sets = vec![set("old", 0, 3, 3, 3), new];
        let part = partition(&tpl("cur"), &sets);
        let mut st = deployment_status(
            &facts(&MachineDeploymentStatus::default(), &rolling(1, 0), 3),
            &sets,
            &part,
            t(0),
        );
        set_condition(
            &mut st.conditions,
            new_condition(
                MachineDeploymentConditionType::Progressing,
                ConditionStatus::True,
                c::MACHINE_SET_UPDATED_REASON,
                "x".into(),
                t(0),
            ),
        );
        let s = rolling(1, 0);
        let f = facts(&st, &s, 3);
        let early = rollout_status(&f, &sets, &part, t(30));
        assert_eq!(
            get_condition(
                &early.conditions,
                &MachineDeploymentConditionType::Progressing
            )
            .map(|c| c.reason.as_str()),
            Some(c::MACHINE_SET_UPDATED_REASON)
        );
        assert_eq!(
            progress_requeue(&f, &early, t(30)),
            Some(Duration::from_secs(31))
        );
        let late = rollout_status(&f, &sets, &part, t(61));
        let p = get_condition(
            &late.conditions,
            &MachineDeploymentConditionType::Progressing,
        );
        assert_eq!(p.map(|c| c.reason.as_str()), Some(c::TIMED_OUT_REASON));
        assert_eq!(p.map(|c| c.status.clone()), Some(ConditionStatus::False));
    }

    #[test]
    fn replica_failure_of_a_set_is_promoted_and_removed_again() {
        let mut new = set("new", 10, 3, 1, 1);
        new.template = tpl("cur");
        new.status.replica_failure = Some(MachineSetCondition {
            type_: MachineSetConditionType::ReplicaFailure,
            status: ConditionStatus::True,
            reason: "FailedCreate".into(),
            message: "quota".into(),
            last_transition_time: None,
        });
        let mut sets = vec![new];
        let part = partition(&tpl("cur"), &sets);
        let st = MachineDeploymentStatus::default();
        let s = rolling(1, 0);
        let with = rollout_status(&facts(&st, &s, 3), &sets, &part, t(0));
        let rf = get_condition(
            &with.conditions,
            &MachineDeploymentConditionType::ReplicaFailure,
        );
        assert_eq!(rf.map(|c| c.message.as_str()), Some("quota"));
        sets[0].status.replica_failure = None;
        let without = rollout_status(&facts(&with, &s, 3), &sets, &part, t(1));
        assert!(get_condition(
            &without.conditions,
            &MachineDeploymentConditionType::ReplicaFailure
        )
        .is_none());
    }

    #[test]
    fn status_update_is_skipped_when_nothing_relevant_changed() {
        let a = MachineDeploymentStatus {
            replicas: 3,
            ..Default::default()
        };
        assert!(!status_update_required(&a, &a.clone()));
        let mut b = a.clone();
        b.available_replicas = 1;
        assert!(status_update_required(&a, &b));
        let mut f1 = a.clone();
        f1.failed_machines = vec![MachineSummary {
            name: "m".into(),
            ..Default::default()
        }];
        let mut f2 = f1.clone();
        f2.failed_machines[0].last_operation.description = "new error".into();
        assert!(status_update_required(&f1, &f2));
    }

    #[test]
    fn condition_setter_keeps_transition_time_when_status_is_unchanged() {
        let mut conds = Vec::new();
        set_condition(
            &mut conds,
            new_condition(
                MachineDeploymentConditionType::Available,
                ConditionStatus::True,
                "A",
                "m".into(),
                t(0),
            ),
        );
        // Same status and reason: untouched.
        set_condition(
            &mut conds,
            new_condition(
                MachineDeploymentConditionType::Available,
                ConditionStatus::True,
                "A",
                "other".into(),
                t(5),
            ),
        );
        assert_eq!(conds[0].message, "m");
        set_condition(
            &mut conds,
            new_condition(
                MachineDeploymentConditionType::Available,
                ConditionStatus::True,
                "B",
                "m".into(),
                t(9),
            ),
        );
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time, Some(to_k8s_time(t(0))));
        assert_eq!(conds[0].last_update_time, Some(to_k8s_time(t(9))));
    }

    #[test]
    fn pause_and_resume_set_progressing_unknown_but_never_over_a_timeout() {
        let p = paused_condition(true, &[], t(0));
        assert_eq!(
            p.as_ref().map(|c| c.reason.as_str()),
            Some(c::PAUSED_DEPLOYMENT_REASON)
        );
        let conds = vec![p.unwrap_or_default()];
        assert_eq!(paused_condition(true, &conds, t(1)), None);
        let r = paused_condition(false, &conds, t(2));
        assert_eq!(
            r.map(|c| c.reason),
            Some(c::RESUMED_DEPLOYMENT_REASON.to_string())
        );
        let timed_out = vec![new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::False,
            c::TIMED_OUT_REASON,
            String::new(),
            t(0),
        )];
        assert_eq!(paused_condition(true, &timed_out, t(1)), None);
    }

    // --- autoscaler ---

    #[test]
    fn legacy_trigger_deletion_entries_get_the_scaler_time() {
        assert_eq!(
            normalize_trigger_deletion("m1,m2~2024-01-01T00:00:00Z,,a~b~c", "2024-02-02T00:00:00Z"),
            "m1~2024-02-02T00:00:00Z,m2~2024-01-01T00:00:00Z"
        );
    }

    #[test]
    fn trigger_deletion_marks_live_machines_and_drops_the_rest() {
        let value = "live~2024-01-01T00:00:00Z,marked~2024-01-01T00:00:00Z,gone~2024-01-01T00:00:00Z,failed~2024-01-01T00:00:00Z,bad~yesterday,junk";
        let plan = trigger_deletion_plan(value, |n| match n {
            "live" => TriggerTarget::Live { marked: false },
            "marked" => TriggerTarget::Live { marked: true },
            "failed" => TriggerTarget::FailedOrTerminating,
            _ => TriggerTarget::NotFound,
        });
        assert_eq!(
            plan.new_value.as_deref(),
            Some("live~2024-01-01T00:00:00Z,marked~2024-01-01T00:00:00Z")
        );
        assert_eq!(
            plan.mark,
            [("live".to_string(), "2024-01-01T00:00:00Z".to_string())]
        );
        let empty = trigger_deletion_plan("gone~2024-01-01T00:00:00Z", |_| TriggerTarget::NotFound);
        assert_eq!(empty.new_value.as_deref(), Some(""));
        let same = trigger_deletion_plan("live~2024-01-01T00:00:00Z", |_| TriggerTarget::Live {
            marked: true,
        });
        assert_eq!(same, TriggerPlan::default());
    }

    #[test]
    fn scale_down_is_disabled_on_nodes_during_a_rollout_and_reenabled_after() {
        let none = BTreeMap::new();
        let by_mcm: BTreeMap<String, String> = [
            (
                c::CA_SCALE_DOWN_DISABLED_ANNOTATION.to_string(),
                "true".to_string(),
            ),
            (
                c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION.to_string(),
                "true".to_string(),
            ),
        ]
        .into();
        let by_user: BTreeMap<String, String> = [(
            c::CA_SCALE_DOWN_DISABLED_ANNOTATION.to_string(),
            "true".to_string(),
        )]
        .into();
        assert_eq!(
            scale_down_disabled_change(true, false, &none, false),
            ScaleDownDisabledChange::Add
        );
        assert_eq!(
            scale_down_disabled_change(true, false, &by_mcm, false),
            ScaleDownDisabledChange::Keep
        );
        assert_eq!(
            scale_down_disabled_change(false, true, &by_mcm, false),
            ScaleDownDisabledChange::Remove
        );
        // Not ours, or a preserved machine, or not complete: left alone.
        assert_eq!(
            scale_down_disabled_change(false, true, &by_user, false),
            ScaleDownDisabledChange::Keep
        );
        assert_eq!(
            scale_down_disabled_change(false, true, &by_mcm, true),
            ScaleDownDisabledChange::Keep
        );
        assert_eq!(
            scale_down_disabled_change(false, false, &by_mcm, false),
            ScaleDownDisabledChange::Keep
        );
    }

    // --- safety ---

    #[test]
    fn overshoot_count_needs_template_labels_and_an_owner_named_like_the_set() {
        let tl: BTreeMap<String, String> = [("app".to_string(), "x".to_string())].into();
        let other: BTreeMap<String, String> = [("app".to_string(), "y".to_string())].into();
        let owners_ms = vec!["ms".to_string()];
        let owners_other = vec!["other".to_string()];
        let machines = vec![
            (&tl, owners_ms.as_slice()),
            (&tl, owners_other.as_slice()),
            (&other, owners_ms.as_slice()),
            (&tl, owners_ms.as_slice()),
        ];
        assert_eq!(overshoot_count("ms", &tl, machines), 2);
    }

    #[test]
    fn overshoot_thresholds_with_and_without_a_parent_deployment() {
        assert_eq!(overshoot_thresholds(3, None, 2, 1), (8, 7));
        assert_eq!(overshoot_thresholds(3, Some((2, 2)), 2, 1), (6, 5));
    }

    #[test]
    fn overshoot_threshold_without_any_max_surge_uses_zero_surge() {
        let recreate = spec_with("Recreate", None, 4);
        assert_eq!(safety_surge(&recreate), 0);
        let ru = spec_with(
            "RollingUpdate",
            Some((IntOrString::String("50%".into()), IntOrString::Int(0))),
            3,
        );
        assert_eq!(safety_surge(&ru), 2);
    }

    #[test]
    fn overshoot_freezes_at_high_and_unfreezes_at_low() {
        let th = (6, 5);
        assert_eq!(overshoot_decision(false, 5, th), OvershootDecision::Nothing);
        assert_eq!(overshoot_decision(false, 6, th), OvershootDecision::Freeze);
        assert_eq!(overshoot_decision(true, 6, th), OvershootDecision::Nothing);
        assert_eq!(overshoot_decision(true, 5, th), OvershootDecision::Unfreeze);
    }

    #[test]
    fn overshoot_decisions_are_independent_per_set() {
        // Two sets in one pass: the reference stops after the first action.
        let decisions: Vec<OvershootDecision> = [(false, 9usize), (true, 0usize)]
            .into_iter()
            .map(|(frozen, count)| {
                overshoot_decision(frozen, count, overshoot_thresholds(3, None, 2, 1))
            })
            .collect();
        assert_eq!(
            decisions,
            [OvershootDecision::Freeze, OvershootDecision::Unfreeze]
        );
    }

    #[test]
    fn deployment_freeze_follows_its_sets() {
        assert_eq!(deployment_should_be_frozen(false, true), Some(true));
        assert_eq!(deployment_should_be_frozen(true, false), Some(false));
        assert_eq!(deployment_should_be_frozen(true, true), None);
    }
}
