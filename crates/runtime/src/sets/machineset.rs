//! The MachineSet controller (design: sets-and-deployments.md, "The MachineSet
//! pass"): keeps `spec.replicas` machines of the
//! set's template.
//!
//! One reconcile: re-read the set; validate it; ensure the finalizer; claim
//! machines (adopt matching orphans, release own machines that no longer
//! match); push nodeTemplate / machine configuration / class kind into the
//! claimed machines; auto-preservation bookkeeping; then, unless creations or
//! deletions of an earlier pass are not yet visible in the cache, create or
//! delete machines as [`mcm_core::replicas::manage_replicas`] decides; write
//! the status. A set being deleted deletes its machines and drops its
//! finalizer once none is left.

use super::{
    add_finalizer, adopt, has_finalizer, is_conflict, is_not_found, owner_reference, publish,
    release, remove_finalizer, requeue, Ctx, Error,
};
use crate::keys::{Kind, ObjectKey};
use crate::metadata::{version_of, MetaPatch};
use crate::status::machine::MachineStatusChange;
use crate::status::unless_gone;
use chrono::Utc;
use futures::future::join_all;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use mcm_api::constants as c;
use mcm_api::validation::validate_machine_set;
use mcm_api::{
    ConditionStatus, Machine, MachineSet, MachineSetCondition, MachineSetConditionType,
    MachineSpec, MachineSummary,
};
use mcm_core::machine::MachineView;
use mcm_core::replicas::{
    auto_preservation, claim, controller_ref, keys, machine_generate_name, manage_replicas,
    parse_rfc3339, propagate_template, replica_failure, selection, selector_is_empty, set_status,
    validate_selector, ClaimAction, Claimer, Deletion, ReplicaFailureChange, ReplicaInput,
    ReplicaPlan, Seen, Selection,
};
use mcm_core::time::to_k8s;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, instrument, warn};

/// How soon to look again while creations or deletions are not yet observed.
const EXPECTATIONS_RECHECK: Duration = Duration::from_secs(5);

/// Why a set cannot be acted upon, if it cannot.
pub(crate) fn invalid_set(ms: &MachineSet) -> Option<String> {
    let deleting = ms.meta().deletion_timestamp.is_some();
    if let Some(why) = super::blocking_errors(validate_machine_set(ms), deleting) {
        return Some(why);
    }
    let sel = ms.spec.selector.as_ref()?;
    if selector_is_empty(sel) {
        return Some(
            "spec.selector: selects every machine; a non-empty selector is required".into(),
        );
    }
    validate_selector(sel)
        .err()
        .map(|e| format!("spec.selector: {e}"))
}

/// Records why an invalid set is not acted upon: a `ReplicaFailure` condition
/// with reason `InvalidSpec` (kept once written, so repeated syncs write nothing).
async fn mark_invalid(api: &Api<MachineSet>, ms: &MachineSet, problem: &str) -> Result<(), Error> {
    let current = ms
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let condition = MachineSetCondition {
        type_: MachineSetConditionType::ReplicaFailure,
        status: ConditionStatus::True,
        last_transition_time: Some(to_k8s(Utc::now())),
        reason: INVALID_SPEC.to_string(),
        message: problem.to_string(),
    };
    let Some(conditions) = super::replace_failure_condition(
        current,
        |c| c.type_ == MachineSetConditionType::ReplicaFailure,
        |c| c.reason == condition.reason && c.message == condition.message,
        condition.clone(),
    ) else {
        return Ok(());
    };
    let write = crate::status::machine_set::write_conditions;
    unless_gone(write(api, &ms.name_any(), &conditions, None).await)?;
    Ok(())
}

/// The reason of the Event and condition of a set that is not acted upon.
pub(crate) const INVALID_SPEC: &str = "InvalidSpec";

/// The reconcile entry point.
#[instrument(skip_all, fields(machineset = %obj.name_any(), namespace = %ctx.config.namespace))]
pub(crate) async fn reconcile(obj: Arc<MachineSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = obj.name_any();
    let object_key = ctx.key(Kind::MachineSet, &name);
    let key = object_key.to_string();
    let _work = ctx.workqueues.work_on("machineset", &object_key);
    let action = reconcile_set(&name, &object_key, &key, &ctx).await?;
    ctx.reset_backoff(&object_key);
    Ok(action)
}

/// `key` is `object_key` as the expectations and the workqueue know it
/// (`namespace/name`).
async fn reconcile_set(
    name: &str,
    object_key: &ObjectKey,
    key: &str,
    ctx: &Ctx,
) -> Result<Action, Error> {
    let api = ctx.machine_sets();
    // From the shared cache, as the reference's lister: every write is
    // guarded by this copy's resourceVersion, so a stale copy costs a
    // conflict and a quick retry, never a lost update.
    let cached = ctx
        .caches
        .sets
        .get(&ObjectRef::new(name).within(&ctx.config.namespace));
    let Some(mut ms) = cached.map(|s| (*s).clone()) else {
        if let Ok(mut e) = ctx.sets.expectations.lock() {
            e.forget(key);
        }
        return Ok(Action::await_change());
    };
    if let Some(problem) = invalid_set(&ms) {
        warn!(problem = %problem, "invalid MachineSet, not acting on it");
        publish(
            &ctx.sets.set_recorder,
            &ms,
            EventType::Warning,
            "InvalidSpec",
            problem.clone(),
            "Validate",
        )
        .await;
        mark_invalid(&api, &ms, &problem).await?;
        return Ok(Action::await_change());
    }
    let deleting = ms.meta().deletion_timestamp.is_some();
    if !deleting && !has_finalizer(&ms) {
        ms = add_finalizer(&api, &ms).await?;
    }
    let claimed = claim_machines(ctx, &ms, deleting).await?;
    propagate(ctx, &ms, &claimed).await;

    let defaults = ctx.config.default_settings();
    let mut views: Vec<MachineView> = claimed
        .iter()
        .map(|m| {
            let mut v = MachineView::of(m, &defaults);
            v.node_preserve = node_preserve(ctx, &v);
            v
        })
        .collect();
    auto_preserve(ctx, &ms, &claimed, &mut views).await;

    let mut manage_error = None;
    let mut soon = None;
    if deleting {
        if claimed.is_empty() {
            if has_finalizer(&ms) {
                remove_finalizer(&api, &ms).await?;
                info!("all machines gone, finalizer removed");
            }
            if let Ok(mut e) = ctx.sets.expectations.lock() {
                e.forget(key);
            }
            return Ok(Action::await_change());
        }
        if has_finalizer(&ms) {
            let all: Vec<Deletion> = views
                .iter()
                .filter(|v| !v.is_deleting())
                .map(|v| Deletion {
                    name: v.name.clone(),
                    reason: mcm_core::replicas::DeleteReason::Surplus,
                })
                .collect();
            delete_machines(ctx, &ms, key, &claimed, &all).await;
        }
    } else if expectations_satisfied(ctx, key) {
        if let Err(e) = manage(ctx, &ms, key, &claimed, &views).await {
            manage_error = Some(e);
        }
    } else {
        debug!("waiting for earlier creations/deletions to show up in the cache");
        soon = Some(EXPECTATIONS_RECHECK);
    }
    let deferred = write_status(
        ctx,
        object_key,
        &ms,
        &claimed,
        &views,
        manage_error.as_deref(),
    )
    .await?;
    if let Some(e) = manage_error {
        return Err(Error::Replicas(e));
    }
    Ok(requeue(ctx, soon.into_iter().chain(deferred).min()))
}

fn expectations_satisfied(ctx: &Ctx, key: &str) -> bool {
    let store = &ctx.caches.machines;
    let ns = ctx.config.namespace.clone();
    let defaults = ctx.config.default_settings();
    let seen = |n: &str| match store.get(&ObjectRef::new(n).within(&ns)) {
        None => Seen::Absent,
        Some(m) => {
            let v = MachineView::of(&m, &defaults);
            if v.is_terminating() {
                Seen::Deleting
            } else {
                Seen::Present
            }
        }
    };
    match ctx.sets.expectations.lock() {
        Ok(mut e) => e.satisfied(key, seen, Instant::now()),
        Err(_) => true,
    }
}

/// Claims the machines of the cache for this set (design: sets-and-deployments.md, "Claiming").
async fn claim_machines(
    ctx: &Ctx,
    ms: &MachineSet,
    deleting: bool,
) -> Result<Vec<Arc<Machine>>, Error> {
    let uid = ms.uid().unwrap_or_default();
    let selector = ms.spec.selector.clone().unwrap_or_default();
    let claimer = Claimer {
        uid: &uid,
        deleting,
    };
    let api = ctx.machines();
    let mut claimed = Vec::new();
    let mut rechecked = false;
    let mut first_error: Option<Error> = None;
    for m in ctx.caches.machines.state() {
        let labels = m.metadata.labels.clone().unwrap_or_default();
        // A machine of ours that stopped matching only on a label the
        // controllers write is kept, never released and replaced (design:
        // sets-and-deployments.md, "Labels the controllers own").
        let selected = selection(&selector, &labels);
        if selected == Selection::SelectedButForControllerLabels {
            debug!(machine = %m.name_any(), "selected but for a label the controllers own");
        }
        let controller = controller_ref(&m.metadata);
        match claim(
            claimer,
            controller.as_ref(),
            selected,
            m.metadata.deletion_timestamp.is_some(),
        ) {
            ClaimAction::Keep => claimed.push(m),
            ClaimAction::Ignore => {}
            ClaimAction::Adopt => {
                if !rechecked {
                    recheck_owner(&ctx.machine_sets(), ms).await?;
                    rechecked = true;
                }
                match adopt(&api, &*m, ms).await {
                    Ok(updated) => {
                        info!(machine = %m.name_any(), "adopted machine");
                        claimed.push(Arc::new(updated));
                    }
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        warn!(machine = %m.name_any(), error = %e, "adoption failed");
                        first_error.get_or_insert(e.into());
                    }
                }
            }
            ClaimAction::Release => match release(&api, &*m, &uid).await {
                Ok(()) => {
                    info!(machine = %m.name_any(), "released machine that no longer matches the selector")
                }
                Err(e) => {
                    warn!(machine = %m.name_any(), error = %e, "release failed");
                    first_error.get_or_insert(e.into());
                }
            },
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(claimed),
    }
}

/// Before the first adoption of a pass: the set must still exist, with the
/// same UID and no deletion timestamp (`RecheckDeletionTimestamp`).
async fn recheck_owner(api: &Api<MachineSet>, ms: &MachineSet) -> Result<(), Error> {
    let name = ms.name_any();
    match api.get_opt(&name).await? {
        Some(fresh) if fresh.uid() == ms.uid() && fresh.meta().deletion_timestamp.is_none() => {
            Ok(())
        }
        _ => Err(Error::OwnerChanged(name)),
    }
}

/// Pushes in-place template fields into the claimed machines (design:
/// sets-and-deployments.md, "Template propagation").
async fn propagate(ctx: &Ctx, ms: &MachineSet, claimed: &[Arc<Machine>]) {
    let Ok(template) = serde_json::to_value(&ms.spec.template.spec) else {
        return;
    };
    let api = ctx.machines();
    let defaults = ctx.config.default_settings();
    for m in claimed {
        let Ok(current) = serde_json::to_value(&m.spec) else {
            continue;
        };
        let v = MachineView::of(m, &defaults);
        let Some(new_spec) = propagate_template(&template, &current, &v.phase, v.is_deleting())
        else {
            continue;
        };
        let spec: MachineSpec = match serde_json::from_value(new_spec) {
            Ok(s) => s,
            Err(e) => {
                warn!(machine = %v.name, error = %e, "cannot build the propagated spec");
                continue;
            }
        };
        let mut updated = (**m).clone();
        updated.spec = spec;
        match api.replace(&v.name, &PostParams::default(), &updated).await {
            Ok(_) => {
                info!(machine = %v.name, "pushed template changes (nodeTemplate / configuration / class kind) into machine")
            }
            Err(e) if is_conflict(&e) || is_not_found(&e) => {
                debug!(machine = %v.name, error = %e, "template push raced, retried next pass")
            }
            Err(e) => warn!(machine = %v.name, error = %e, "template push failed"),
        }
    }
}

/// The preserve annotation of the machine's Node, from the cache (`Some("")`
/// for a Node without one), so that a Failed machine preserved through its
/// Node is kept before the machine controller recorded the preservation.
/// `None` when the Node is not known: the machine's own annotation decides
/// (design: machine.md, "Preservation").
fn node_preserve(ctx: &Ctx, v: &MachineView) -> Option<String> {
    let node = ctx.nodes.get(&ObjectRef::new(v.node.as_deref()?))?;
    Some(
        node.annotations()
            .get(mcm_api::constants::PRESERVE_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    )
}

/// The auto-preservation annotations (design: sets-and-deployments.md,
/// "Auto-preservation"); the views follow the writes that succeeded.
async fn auto_preserve(
    ctx: &Ctx,
    ms: &MachineSet,
    claimed: &[Arc<Machine>],
    views: &mut [MachineView],
) {
    let current = ms
        .status
        .as_ref()
        .map_or(0, |s| s.auto_preserve_failed_machine_count);
    let mut plan = auto_preservation(ms.spec.auto_preserve_failed_machine_max, current, views);
    if plan.annotate.is_empty() && plan.unannotate.is_empty() {
        return;
    }
    let api = ctx.machines();
    let mut done = mcm_core::replicas::AutoPreservePlan::default();
    for (names, value, out) in [
        (
            std::mem::take(&mut plan.annotate),
            Some(keys::PRESERVE_AUTO),
            &mut done.annotate,
        ),
        (
            std::mem::take(&mut plan.unannotate),
            None,
            &mut done.unannotate,
        ),
    ] {
        for n in names {
            let Some(m) = claimed.iter().find(|m| m.name_any() == n) else {
                continue;
            };
            let write = MetaPatch::new()
                .guarded_by(version_of(&**m))
                .annotation_opt(keys::PRESERVE, value);
            match write.send(&api, &n).await {
                Ok(_) => {
                    info!(machine = %n, auto_preserved = value.is_some(), "auto-preservation annotation changed");
                    out.push(n);
                }
                Err(e) => {
                    warn!(machine = %n, error = %e, "auto-preservation annotation not changed")
                }
            }
        }
    }
    done.apply(views);
}

/// Creates or deletes machines as decided (design: sets-and-deployments.md, "Replica management").
async fn manage(
    ctx: &Ctx,
    ms: &MachineSet,
    key: &str,
    claimed: &[Arc<Machine>],
    views: &[MachineView],
) -> Result<(), String> {
    let labels = ms.labels();
    let input = ReplicaInput {
        desired: ms.spec.replicas,
        frozen: labels.get(keys::FREEZE_LABEL).map(String::as_str) == Some(keys::FREEZE_VALUE),
        scale_up_disabled: labels.contains_key(keys::SCALE_UP_DISABLED),
        scaler_change_time: ms
            .annotations()
            .get(keys::SCALER_CHANGE_TIME)
            .and_then(|t| parse_rfc3339(t)),
        machines: views,
        now: Utc::now(),
    };
    match manage_replicas(&input) {
        ReplicaPlan::Steady => Ok(()),
        ReplicaPlan::Frozen { missing } => {
            info!(missing, "MachineSet is frozen, not creating machines");
            Ok(())
        }
        ReplicaPlan::ScaleUpDisabled { missing } => {
            info!(
                missing,
                "MachineSet has scale-up disabled, not creating machines"
            );
            Ok(())
        }
        ReplicaPlan::AwaitingVms { missing, awaiting } => {
            debug!(
                missing,
                awaiting, "machines are waiting for their VM, not creating more yet"
            );
            Ok(())
        }
        ReplicaPlan::Create { count, batches } => {
            info!(
                count,
                desired = ms.spec.replicas,
                "too few machines, creating"
            );
            create_machines(ctx, ms, key, &batches).await
        }
        ReplicaPlan::Delete(list) => {
            info!(count = list.len(), desired = ms.spec.replicas, machines = ?list.iter().map(|d| &d.name).collect::<Vec<_>>(), "deleting machines");
            delete_machines(ctx, ms, key, claimed, &list).await;
            Ok(())
        }
    }
}

/// A Machine for the set's template (design: sets-and-deployments.md, "Creating and
/// deleting machines").
pub(crate) fn machine_from_template(ms: &MachineSet) -> Result<Machine, String> {
    let t = &ms.spec.template;
    let labels = t.metadata.labels.clone().unwrap_or_default();
    if labels.is_empty() {
        return Err("unable to create machines, no labels".into());
    }
    let mut annotations = t.metadata.annotations.clone().unwrap_or_default();
    let mut spec = t.spec.clone();
    if let Some(v) = ms
        .annotations()
        .get(c::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION)
    {
        annotations.insert(
            c::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION.to_string(),
            v.clone(),
        );
        match mcm_api::parse_duration(v) {
            Ok(_) => spec.configuration.creation_timeout = Some(v.clone()),
            Err(e) => warn!(value = %v, error = %e, "effective creation timeout not applied"),
        }
    }
    Ok(Machine {
        metadata: ObjectMeta {
            generate_name: Some(machine_generate_name(&ms.name_any())),
            namespace: ms.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: t.metadata.finalizers.clone(),
            owner_references: Some(vec![owner_reference(ms)]),
            ..Default::default()
        },
        spec,
        status: None,
    })
}

fn is_timeout(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 504 || s.reason == "Timeout")
}

/// Creates machines in slow-start batches; a failing batch stops the rest.
async fn create_machines(
    ctx: &Ctx,
    ms: &MachineSet,
    key: &str,
    batches: &[usize],
) -> Result<(), String> {
    let machine = machine_from_template(ms)?;
    let api = ctx.machines();
    let pp = PostParams::default();
    for &size in batches {
        let results = join_all((0..size).map(|_| api.create(&pp, &machine))).await;
        let mut created = Vec::new();
        let mut first_error = None;
        for r in results {
            match r {
                Ok(m) => created.push(m.name_any()),
                Err(e) if is_timeout(&e) => {
                    debug!(error = %e, "machine create timed out; the cache will show it if it was created")
                }
                Err(e) => {
                    warn!(error = %e, "machine creation failed");
                    publish(
                        &ctx.sets.set_recorder,
                        ms,
                        EventType::Warning,
                        "FailedCreate",
                        format!("Error creating: {e}"),
                        "Create",
                    )
                    .await;
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        for n in &created {
            info!(machine = %n, "created machine");
            publish(
                &ctx.sets.set_recorder,
                ms,
                EventType::Normal,
                "SuccessfulCreate",
                format!("Created Machine: {n}"),
                "Create",
            )
            .await;
        }
        if let Ok(mut e) = ctx.sets.expectations.lock() {
            e.expect_creations(key, created, Instant::now());
        }
        if let Some(e) = first_error {
            return Err(e);
        }
    }
    Ok(())
}

/// Deletes the listed machines in parallel (design: sets-and-deployments.md, "Creating
/// and deleting machines"); failures are reported, not returned.
async fn delete_machines(
    ctx: &Ctx,
    ms: &MachineSet,
    key: &str,
    claimed: &[Arc<Machine>],
    list: &[Deletion],
) {
    let targets: Vec<&Arc<Machine>> = list
        .iter()
        .filter_map(|d| claimed.iter().find(|m| m.name_any() == d.name))
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect();
    let results = join_all(targets.iter().map(|m| delete_one(ctx, ms, m))).await;
    let deleted: Vec<String> = targets
        .iter()
        .zip(results)
        .filter(|(_, ok)| *ok)
        .map(|(m, _)| m.name_any())
        .collect();
    if let Ok(mut e) = ctx.sets.expectations.lock() {
        e.expect_deletions(key, deleted, Instant::now());
    }
}

async fn delete_one(ctx: &Ctx, ms: &MachineSet, m: &Machine) -> bool {
    let api = ctx.machines();
    let name = m.name_any();
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            info!(machine = %name, phase = %m.phase(), "deleted machine");
            let view = MachineView::of(m, &ctx.config.default_settings());
            if mcm_core::replicas::is_stale_removal(&view) {
                ctx.sets.stale_machines.inc();
            }
            publish(
                &ctx.sets.set_recorder,
                ms,
                EventType::Normal,
                "SuccessfulDelete",
                format!("Deleted machine: {name}"),
                "Delete",
            )
            .await;
            mark_terminating(&api, &view).await;
            true
        }
        Err(e) if is_not_found(&e) => true,
        Err(e) => {
            warn!(machine = %name, error = %e, "machine deletion failed");
            publish(
                &ctx.sets.set_recorder,
                ms,
                EventType::Warning,
                "FailedDelete",
                format!("Error deleting: {e}"),
                "Delete",
            )
            .await;
            false
        }
    }
}

/// After the DELETE: phase Terminating, lastOperation Delete/Processing.
async fn mark_terminating(api: &Api<Machine>, m: &MachineView) {
    let Some(t) = mcm_core::machine::machine_set_terminating_mark(m) else {
        return;
    };
    let change = MachineStatusChange::of(&t);
    let write = crate::status::machine::write;
    if let Err(e) = unless_gone(write(api, &m.name, &change).await) {
        debug!(machine = %m.name, error = %e, "phase Terminating not written");
    }
}

/// Computes and writes the status (design: sets-and-deployments.md, "MachineSet
/// status") when something relevant changed. A change of its counts only,
/// within a second of the last write, waits (`mcm_core::status_pace`, "Status
/// writes"): the answer is then when to write it.
async fn write_status(
    ctx: &Ctx,
    key: &ObjectKey,
    ms: &MachineSet,
    claimed: &[Arc<Machine>],
    views: &[MachineView],
    manage_error: Option<&str>,
) -> Result<Option<Duration>, Error> {
    let template_labels: BTreeMap<String, String> =
        ms.spec.template.metadata.labels.clone().unwrap_or_default();
    let counts = set_status(&template_labels, views);
    let old = ms.status.clone().unwrap_or_default();
    let mut st = old.clone();
    st.replicas = counts.replicas;
    st.fully_labeled_replicas = counts.fully_labeled_replicas;
    st.ready_replicas = counts.ready_replicas;
    st.available_replicas = counts.available_replicas;
    st.preserved_failed_replicas = counts.preserved_failed_replicas;
    st.auto_preserve_failed_machine_count = counts.auto_preserve_failed_machine_count;
    let failed: Vec<MachineSummary> = counts
        .failed_machines
        .iter()
        .filter_map(|n| claimed.iter().find(|m| &m.name_any() == n))
        .map(|m| MachineSummary {
            name: m.name_any(),
            provider_id: m.spec.provider_id.clone(),
            last_operation: m
                .status
                .as_ref()
                .map(|s| s.last_operation.clone())
                .unwrap_or_default(),
            owner_ref: controller_ref(&m.metadata)
                .map(|c| c.name)
                .unwrap_or_default(),
        })
        .collect();
    st.failed_machines = (!failed.is_empty()).then_some(failed);
    let present = st
        .conditions
        .iter()
        .any(|c| c.type_ == MachineSetConditionType::ReplicaFailure);
    match replica_failure(manage_error, present, claimed.len(), ms.spec.replicas) {
        ReplicaFailureChange::Keep => {}
        ReplicaFailureChange::Remove => st
            .conditions
            .retain(|c| c.type_ != MachineSetConditionType::ReplicaFailure),
        ReplicaFailureChange::Add { reason, message } => st.conditions.push(MachineSetCondition {
            type_: MachineSetConditionType::ReplicaFailure,
            status: ConditionStatus::True,
            last_transition_time: Some(to_k8s(Utc::now())),
            reason,
            message,
        }),
    }
    let generation = ms.meta().generation.unwrap_or(0);
    let unchanged = st.replicas == old.replicas
        && st.fully_labeled_replicas == old.fully_labeled_replicas
        && st.ready_replicas == old.ready_replicas
        && st.available_replicas == old.available_replicas
        && st.preserved_failed_replicas == old.preserved_failed_replicas
        && st.auto_preserve_failed_machine_count == old.auto_preserve_failed_machine_count
        && st.conditions == old.conditions
        && st.failed_machines == old.failed_machines
        && generation == old.observed_generation;
    if unchanged {
        return Ok(None);
    }
    let counts_only =
        generation == old.observed_generation && mcm_core::status_pace::set_counts_only(&old, &st);
    if let Some(wait) = ctx.status_write_wait(key, counts_only) {
        debug!(
            ?wait,
            "MachineSet counts changed; writing them with the next ones"
        );
        return Ok(Some(wait));
    }
    st.observed_generation = generation;
    st.last_operation.last_update_time = Some(to_k8s(Utc::now()));
    debug!(
        replicas = st.replicas,
        ready = st.ready_replicas,
        available = st.available_replicas,
        desired = ms.spec.replicas,
        "writing MachineSet status"
    );
    unless_gone(crate::status::machine_set::replace(&ctx.machine_sets(), ms, st).await)?;
    Ok(None)
}
