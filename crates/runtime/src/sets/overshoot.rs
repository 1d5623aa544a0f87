//! The overshoot safety loop (design: sets-and-deployments.md, "Overshoot safety").
//!
//! Every `overshooting_period`, and soon after any Machine, MachineSet or
//! MachineDeployment change, each MachineSet's machines are counted (machines
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

use super::{publish, Ctx};
use crate::metadata::MetaPatch;
use chrono::Utc;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{
    ConditionStatus, MachineDeployment, MachineDeploymentCondition, MachineDeploymentConditionType,
    MachineSet, MachineSetCondition, MachineSetConditionType,
};
use mcm_core::deployment::{
    deployment_should_be_frozen, overshoot_count, overshoot_decision, overshoot_freeze_message,
    overshoot_thresholds, safety_surge, OvershootDecision, STATE_SYNC_FREEZE_MESSAGE,
};
use mcm_core::replicas::{controller_ref, selector_is_empty, selector_matches};
use mcm_core::time::to_k8s;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Bursts of changes are handled by one pass after this pause.
const COALESCE: Duration = Duration::from_millis(200);

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

fn set_is_frozen(ms: &MachineSet) -> bool {
    ms.labels().get(c::FREEZE_LABEL).map(String::as_str) == Some(c::FREEZE_LABEL_VALUE)
        || ms.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == MachineSetConditionType::Frozen)
        })
}

fn deployment_is_frozen(d: &MachineDeployment) -> bool {
    d.labels().get(c::FREEZE_LABEL).map(String::as_str) == Some(c::FREEZE_LABEL_VALUE)
        || d.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == MachineDeploymentConditionType::Frozen)
        })
}

/// The deployment a set belongs to: its controller, else the first deployment
/// whose non-empty selector matches the set's labels.
fn parent_of<'a>(
    ms: &MachineSet,
    deployments: &'a [Arc<MachineDeployment>],
) -> Option<&'a Arc<MachineDeployment>> {
    if let Some(cr) = controller_ref(&ms.metadata).filter(|c| c.kind == "MachineDeployment") {
        if let Some(d) = deployments
            .iter()
            .find(|d| d.uid().as_deref() == Some(cr.uid.as_str()))
        {
            return Some(d);
        }
    }
    let labels = ms.metadata.labels.clone().unwrap_or_default();
    deployments.iter().find(|d| {
        d.spec
            .selector
            .as_ref()
            .is_some_and(|s| !selector_is_empty(s) && selector_matches(s, &labels).unwrap_or(false))
    })
}

/// One pass of the loop.
pub(crate) async fn pass(ctx: &Ctx) {
    let _work = ctx.workqueues.work("machinesafetyovershooting");
    let sets = ctx.caches.sets.state();
    let machines = ctx.caches.machines.state();
    let deployments = ctx.caches.deployments.state();
    let mut set_frozen: HashMap<String, bool> = sets
        .iter()
        .map(|s| (s.name_any(), set_is_frozen(s)))
        .collect();
    let mut dep_frozen: HashMap<String, bool> = deployments
        .iter()
        .map(|d| (d.name_any(), deployment_is_frozen(d)))
        .collect();
    let owner_names: Vec<(BTreeMap<String, String>, Vec<String>)> = machines
        .iter()
        .map(|m| {
            (
                m.metadata.labels.clone().unwrap_or_default(),
                m.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .map(|o| o.name.clone())
                    .collect(),
            )
        })
        .collect();

    // 1. Overshoot per set.
    for ms in &sets {
        let name = ms.name_any();
        let template_labels = ms.spec.template.metadata.labels.clone().unwrap_or_default();
        let count = overshoot_count(
            &name,
            &template_labels,
            owner_names.iter().map(|(l, o)| (l, o.as_slice())),
        );
        let parent = parent_of(ms, &deployments);
        let thresholds = overshoot_thresholds(
            ms.spec.replicas,
            parent.map(|d| (d.spec.replicas, safety_surge(&d.spec))),
            ctx.config.sets.safety_up,
            ctx.config.sets.safety_down,
        );
        let frozen = set_frozen.get(&name).copied().unwrap_or(false);
        match overshoot_decision(frozen, count, thresholds) {
            OvershootDecision::Nothing => {}
            OvershootDecision::Freeze => {
                let msg = overshoot_freeze_message(&name, count, thresholds.0);
                warn!(machineset = %name, count, limit = thresholds.0, "overshooting replica count, freezing");
                if set_state(ctx, ms, true, c::OVERSHOOTING_REPLICA_COUNT, &msg).await {
                    set_frozen.insert(name.clone(), true);
                    if let Some(d) = parent {
                        if deployment_state(ctx, d, true, c::OVERSHOOTING_REPLICA_COUNT, &msg).await
                        {
                            dep_frozen.insert(d.name_any(), true);
                        }
                    }
                    publish(
                        &ctx.sets.manager_recorder,
                        &**ms,
                        EventType::Normal,
                        c::MACHINE_SET_FREEZE_EVENT,
                        msg,
                        "Freeze",
                    )
                    .await;
                }
            }
            OvershootDecision::Unfreeze => {
                let msg = format!(
                    "The number of machines backing MachineSet {name} is {count}, at or below {}",
                    thresholds.1
                );
                info!(machineset = %name, count, limit = thresholds.1, "replica count back under the limit, unfreezing");
                if let Some(d) = parent {
                    if deployment_state(ctx, d, false, c::UNDERSHOOTING_REPLICA_COUNT, &msg).await {
                        dep_frozen.insert(d.name_any(), false);
                    }
                }
                if set_state(ctx, ms, false, c::UNDERSHOOTING_REPLICA_COUNT, &msg).await {
                    set_frozen.insert(name.clone(), false);
                    unfreeze_event(ctx, ms, msg).await;
                }
            }
        }
    }

    // 2. Unfreeze annotations: deployments (and their sets), then sets.
    for d in &deployments {
        if !d.annotations().contains_key(c::UNFREEZE_ANNOTATION) {
            continue;
        }
        let msg = format!(
            "MachineDeployment {} unfrozen by the {} annotation",
            d.name_any(),
            c::UNFREEZE_ANNOTATION
        );
        if deployment_state(ctx, d, false, c::UNFREEZE_ANNOTATION_REASON, &msg).await {
            dep_frozen.insert(d.name_any(), false);
        }
        for ms in sets
            .iter()
            .filter(|s| controller_ref(&s.metadata).is_some_and(|cr| Some(cr.uid) == d.uid()))
        {
            if set_frozen.get(&ms.name_any()).copied().unwrap_or(false)
                && set_state(ctx, ms, false, c::UNFREEZE_ANNOTATION_REASON, &msg).await
            {
                set_frozen.insert(ms.name_any(), false);
                unfreeze_event(ctx, ms, msg.clone()).await;
            }
        }
    }
    for ms in &sets {
        if !ms.annotations().contains_key(c::UNFREEZE_ANNOTATION) {
            continue;
        }
        let msg = format!(
            "MachineSet {} unfrozen by the {} annotation",
            ms.name_any(),
            c::UNFREEZE_ANNOTATION
        );
        let was_frozen = set_frozen.get(&ms.name_any()).copied().unwrap_or(false);
        if set_state(ctx, ms, false, c::UNFREEZE_ANNOTATION_REASON, &msg).await {
            set_frozen.insert(ms.name_any(), false);
            if was_frozen {
                unfreeze_event(ctx, ms, msg).await;
            }
        }
    }

    // 3. Deployments follow their sets.
    for d in &deployments {
        let uid = d.uid();
        let any_set_frozen = sets
            .iter()
            .filter(|s| controller_ref(&s.metadata).is_some_and(|cr| Some(cr.uid) == uid))
            .any(|s| set_frozen.get(&s.name_any()).copied().unwrap_or(false));
        let frozen = dep_frozen.get(&d.name_any()).copied().unwrap_or(false);
        if let Some(want) = deployment_should_be_frozen(frozen, any_set_frozen) {
            let msg = if want {
                STATE_SYNC_FREEZE_MESSAGE.to_string()
            } else {
                format!(
                    "MachineDeployment {} has no frozen MachineSet",
                    d.name_any()
                )
            };
            debug!(machinedeployment = %d.name_any(), frozen = want, "syncing the deployment's freeze state with its sets");
            if deployment_state(ctx, d, want, c::MACHINE_DEPLOYMENT_STATE_SYNC, &msg).await {
                dep_frozen.insert(d.name_any(), want);
            }
        }
    }
}

/// Freezes or unfreezes a set: the `Frozen` condition, the `freeze` label
/// and (on unfreeze) the unfreeze annotation. Answers whether it worked.
async fn set_state(ctx: &Ctx, ms: &MachineSet, frozen: bool, reason: &str, message: &str) -> bool {
    let api = ctx.machine_sets();
    let name = ms.name_any();
    let mut conditions = ms.status.clone().unwrap_or_default().conditions;
    let had = conditions
        .iter()
        .any(|c| c.type_ == MachineSetConditionType::Frozen);
    if frozen && !had {
        conditions.push(MachineSetCondition {
            type_: MachineSetConditionType::Frozen,
            status: ConditionStatus::True,
            last_transition_time: Some(to_k8s(Utc::now())),
            reason: reason.to_string(),
            message: message.to_string(),
        });
    } else if !frozen {
        conditions.retain(|c| c.type_ != MachineSetConditionType::Frozen);
    }
    if frozen != had {
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

/// The Normal Event of a MachineSet the pass unfroze.
async fn unfreeze_event(ctx: &Ctx, ms: &MachineSet, msg: String) {
    publish(
        &ctx.sets.manager_recorder,
        ms,
        EventType::Normal,
        c::MACHINE_SET_UNFREEZE_EVENT,
        msg,
        "Unfreeze",
    )
    .await;
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
    let mut conditions = d.status.clone().unwrap_or_default().conditions;
    let had = conditions
        .iter()
        .any(|c| c.type_ == MachineDeploymentConditionType::Frozen);
    if frozen && !had {
        let now = to_k8s(Utc::now());
        conditions.push(MachineDeploymentCondition {
            type_: MachineDeploymentConditionType::Frozen,
            status: ConditionStatus::True,
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
            reason: reason.to_string(),
            message: message.to_string(),
        });
    } else if !frozen {
        conditions.retain(|c| c.type_ != MachineDeploymentConditionType::Frozen);
    }
    if frozen != had {
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
