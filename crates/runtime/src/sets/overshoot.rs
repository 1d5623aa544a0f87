//! The overshoot safety loop (design: sets-and-deployments.md, "Overshoot safety").
//!
//! Every `overshooting_period`, and soon after any Machine or
//! MachineDeployment change and any MachineSet change of what a pass reads
//! ([`wakes_the_pass`]), each MachineSet's machines are counted (machines
//! with the set's template labels and any ownerReference named like the set,
//! terminating ones included). A set at or above its limit is frozen (label
//! `freeze=True` and condition `Frozen`, on the set and its deployment): it
//! creates no more machines. It is unfrozen when the count falls to the
//! limit minus `safety_down`, or when the annotation
//! `safety.machine.sapcloud.io/unfreeze` is put on it or its deployment.
//! Deployments follow their sets: frozen while one of their sets is.
//!
//! Unlike the reference, every set is checked in every pass (the reference
//! stops after the first freeze or unfreeze), and a deployment without any
//! maxSurge counts as surge 0 instead of aborting the pass (design:
//! sets-and-deployments.md, "Where mcm-rs differs from the reference", item 6).
//!
//! Every decision is core's ([`mcm_core::deployment::plan_overshoot`]): a
//! pass reads the caches, asks for the plan, and performs its actions in
//! order, skipping an action whose prerequisite failed.

use super::{publish, Ctx};
use crate::metadata::MetaPatch;
use chrono::Utc;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{MachineDeployment, MachineSet};
use mcm_core::deployment::{
    deployment_conditions_after_freeze, plan_overshoot, set_conditions_after_freeze, FreezeTarget,
    OvershootAction, OvershootInput, SetEvent,
};
use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Bursts of changes are handled by one pass after this pause.
const COALESCE: Duration = Duration::from_millis(200);

/// The fingerprint of what a pass reads of a MachineSet besides its
/// machines: its labels (the freeze label), annotations (the unfreeze
/// annotation), replicas and template labels (the limit and the count). A
/// set whose fingerprint moved wakes the pass; its status writes do not.
pub(crate) fn wakes_the_pass(s: &MachineSet) -> Option<u64> {
    let mut h = DefaultHasher::new();
    s.metadata.labels.hash(&mut h);
    s.metadata.annotations.hash(&mut h);
    s.spec.replicas.hash(&mut h);
    s.spec.template.metadata.labels.hash(&mut h);
    Some(h.finish())
}

/// Runs the loop until `shutdown` completes (the caches must be filled).
pub(crate) async fn run(ctx: Arc<Ctx>, shutdown: impl Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        pass(&ctx).await;
        tokio::select! {
            _ = tokio::time::sleep(ctx.config.sets.overshooting_period) => {}
            _ = ctx.sets.safety_wakeup.notified() => tokio::time::sleep(COALESCE).await,
            _ = &mut shutdown => return,
        }
    }
}

/// One pass of the loop: the plan core makes from the caches, performed in
/// order.
pub(crate) async fn pass(ctx: &Ctx) {
    let _work = ctx.workqueues.work("machinesafetyovershooting");
    let sets = ctx.caches.sets.state();
    let machines = ctx.caches.machines.state();
    let deployments = ctx.caches.deployments.state();
    let plan = plan_overshoot(&OvershootInput {
        sets: &sets,
        deployments: &deployments,
        machines: &machines,
        safety_up: ctx.config.sets.safety_up,
        safety_down: ctx.config.sets.safety_down,
    });
    let mut done: Vec<bool> = Vec::with_capacity(plan.len());
    for planned in plan {
        let ready = planned
            .after
            .is_none_or(|i| done.get(i).copied().unwrap_or(false));
        let ok = ready && perform(ctx, &sets, &deployments, planned.action).await;
        done.push(ok);
    }
}

/// Performs one action of the plan on the objects the pass read; answers
/// whether it worked.
async fn perform(
    ctx: &Ctx,
    sets: &[Arc<MachineSet>],
    deployments: &[Arc<MachineDeployment>],
    action: OvershootAction,
) -> bool {
    match action {
        OvershootAction::Freeze {
            target: FreezeTarget::Set(name),
            frozen,
            reason,
            message,
        } => match sets.iter().find(|s| s.name_any() == name) {
            Some(ms) => {
                if frozen {
                    warn!(machineset = %name, reason, %message, "freezing");
                } else {
                    info!(machineset = %name, reason, %message, "unfreezing");
                }
                set_state(ctx, ms, frozen, reason, &message).await
            }
            None => false,
        },
        OvershootAction::Freeze {
            target: FreezeTarget::Deployment(name),
            frozen,
            reason,
            message,
        } => match deployments.iter().find(|d| d.name_any() == name) {
            Some(d) => deployment_state(ctx, d, frozen, reason, &message).await,
            None => false,
        },
        OvershootAction::Event(SetEvent {
            set,
            reason,
            action,
            note,
        }) => match sets.iter().find(|s| s.name_any() == set) {
            Some(ms) => {
                publish(
                    &ctx.sets.manager_recorder,
                    &**ms,
                    EventType::Normal,
                    reason,
                    note,
                    action,
                )
                .await;
                true
            }
            None => false,
        },
    }
}

/// Freezes or unfreezes a set: the `Frozen` condition, the `freeze` label
/// and (on unfreeze) the unfreeze annotation. Answers whether it worked.
async fn set_state(ctx: &Ctx, ms: &MachineSet, frozen: bool, reason: &str, message: &str) -> bool {
    let api = ctx.machine_sets();
    let name = ms.name_any();
    let conditions = ms.status.clone().unwrap_or_default().conditions;
    if let Some(conditions) =
        set_conditions_after_freeze(&conditions, frozen, reason, message, Utc::now())
    {
        let rv = ms.resource_version();
        let write = crate::status::machine_set::write_conditions;
        if let Err(e) = write(&api, &name, &conditions, rv.as_deref()).await {
            debug!(machineset = %name, error = %e, "Frozen condition not written; next pass");
            return false;
        }
    }
    match write_freeze_label(&api, &name, frozen).await {
        Ok(_) => true,
        Err(e) => {
            warn!(machineset = %name, error = %e, frozen, "freeze label not written");
            false
        }
    }
}

/// Sets (`frozen`) or removes the freeze label of a set or deployment; an
/// unfreeze also drops the unfreeze annotation that asked for it.
async fn write_freeze_label<K>(
    api: &kube::Api<K>,
    name: &str,
    frozen: bool,
) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut write =
        MetaPatch::new().label_opt(c::FREEZE_LABEL, frozen.then_some(c::FREEZE_LABEL_VALUE));
    if !frozen {
        write = write.remove_annotation(c::UNFREEZE_ANNOTATION);
    }
    write.send(api, name).await
}

/// Freezes or unfreezes a deployment (condition, label, unfreeze annotation).
async fn deployment_state(
    ctx: &Ctx,
    d: &MachineDeployment,
    frozen: bool,
    reason: &str,
    message: &str,
) -> bool {
    let api = ctx.machine_deployments();
    let name = d.name_any();
    let conditions = d.status.clone().unwrap_or_default().conditions;
    if let Some(conditions) =
        deployment_conditions_after_freeze(&conditions, frozen, reason, message, Utc::now())
    {
        let rv = d.resource_version();
        let write = crate::status::machine_deployment::write_conditions;
        if let Err(e) = write(&api, &name, &conditions, rv.as_deref()).await {
            debug!(machinedeployment = %name, error = %e, "Frozen condition not written; next pass");
            return false;
        }
    }
    match write_freeze_label(&api, &name, frozen).await {
        Ok(_) => {
            info!(machinedeployment = %name, frozen, reason, "deployment freeze state changed");
            true
        }
        Err(e) => {
            warn!(machinedeployment = %name, error = %e, frozen, "freeze label not written");
            false
        }
    }
}

#[cfg(test)]
#[path = "overshoot_tests.rs"]
mod tests;
