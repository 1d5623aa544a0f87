//! # MachineDeployment rollout arithmetic, without I/O
//!
//! The decisions of the MachineDeployment controller and of the overshoot
//! safety loop (design: sets-and-deployments.md) as pure functions:
//!
//! - strategy and fence-posts: [`resolve_strategy`], [`Strategy::max_surge`],
//!   [`Strategy::max_unavailable`] (maxSurge rounds up, maxUnavailable rounds
//!   down, both 0 → maxUnavailable 1);
//! - the new MachineSet: [`equal_ignore_hash`] (template equality without the
//!   `machine-template-hash` label and without the fields that are
//!   propagated in place), [`partition`], [`template_hash`], [`new_set_name`],
//!   [`new_set_annotations`], [`new_set_replicas`];
//! - revisions and rollback: [`revision`], [`max_revision`], [`next_revision`],
//!   [`last_revision`], [`rollback_decision`];
//! - scaling: [`is_scaling_event`], [`scale_targets`] (proportional scaling);
//! - strategies: [`rolling_scale_down`] (RollingUpdate), [`recreate_step`]
//!   (Recreate);
//! - status: [`deployment_status`], [`rollout_status`],
//!   [`status_update_required`], [`progress_requeue`], conditions
//!   ([`set_condition`]), [`paused_condition`];
//! - InPlaceUpdate: [`sets_to_disable_scale_up`], [`nodes_to_mark_candidate`],
//!   [`sync_sets`], [`new_set_step`], [`old_sets_step`] (module `inplace`);
//! - [`history_cleanup`]; the cluster-autoscaler annotations
//!   ([`normalize_trigger_deletion`], [`trigger_deletion_plan`],
//!   [`scale_down_disabled_change`] for nodes, used once a target cluster
//!   is wired in);
//! - the safety loop: [`overshoot_count`], [`overshoot_thresholds`],
//!   [`overshoot_decision`], [`deployment_should_be_frozen`], and a whole
//!   pass as a plan of actions, [`plan_overshoot`].
//!
//! ## Quirks of the reference: fixed or kept
//!
//! Numbered as in sets-and-deployments.md, "Where mcm-rs differs from the
//! reference".
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
//! - **15** (found while porting) the new set's `revision-history` got the current
//!   revision appended whenever MachineDeployment annotations were copied,
//!   even without a revision change; here only a real revision raise appends
//!   (`revision_history_grows_only_when_the_revision_is_raised`).
//! - **16** (found while porting) proportional scaling divided by a zero
//!   `max-replicas` fallback (Go: float division by zero); here such a set
//!   gets no proportional share (`proportional_scaling_survives_missing_max_replicas`).
//! - **17** (found while porting) machines with a deletion timestamp but a stale
//!   phase counted as live replicas (see
//!   [`crate::machine::MachineView::is_terminating`],
//!   `terminating_machines_do_not_count_as_replicas`).
//! - **18** (found while porting) a new set with more available machines than its
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

use crate::replicas::{controller_ref, labels_contain, normalize, ControllerRef};
use crate::time::{from_k8s, to_k8s};
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

mod autoscaler;
mod inplace;
mod overshoot;
mod overshoot_plan;
mod revisions;
mod rollback;
mod scaling;
mod sets;
mod status;
mod strategy;

pub use autoscaler::*;
pub use inplace::*;
pub use overshoot::*;
pub use overshoot_plan::*;
pub use revisions::*;
pub use rollback::*;
pub use scaling::*;
pub use sets::*;
pub use status::*;
pub use strategy::*;

#[cfg(test)]
mod tests;
