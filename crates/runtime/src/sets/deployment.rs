//! The MachineDeployment controller (design: sets-and-deployments.md, "The
//! MachineDeployment pass"): rolls MachineSets out.
//!
//! One reconcile: re-read the deployment; validate; ensure the finalizer;
//! claim MachineSets; on deletion delete them and drop the finalizer once
//! they are gone; pause bookkeeping; the cluster-autoscaler's
//! `trigger-deletion-by-mcm` annotation; refresh the new set (annotations,
//! revision, in-place template fields); then one of: scaling (paused, or a
//! replica change), rollback (`spec.rollbackTo`), or a rollout step of the
//! strategy (RollingUpdate, Recreate). Every step makes its writes and
//! returns; the watch events of those writes bring the next step.

use super::{
    add_finalizer, adopt, has_finalizer, is_conflict, is_not_found, owner_reference, publish,
    release, remove_finalizer, requeue, Ctx, Error,
};
use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use mcm_api::constants as c;
use mcm_api::validation::validate_machine_deployment;
use mcm_api::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentConditionType,
    MachineDeploymentStatus, MachineSet, MachineSetSpec,
};
use mcm_core::deployment::{
    self as plan, history_cleanup, is_complete, is_scaling_event, max_revision, new_condition,
    new_set_annotations, new_set_name, new_set_replicas, partition, paused_condition,
    progress_requeue, recreate_step, resolve_strategy, rolling_new_set_target, rolling_scale_down,
    rollout_status, scale_targets, set_condition, set_replicas_annotations, status_update_required,
    template_hash, DeploymentFacts, Partition, RecreateStep, RollbackDecision, SetView, Strategy,
    TriggerTarget,
};
use mcm_core::replicas::{
    claim, controller_ref, normalize, selector_is_empty, selector_matches, validate_selector,
    ClaimAction, Claimer, MachineView,
};
use mcm_core::time::to_k8s;
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, instrument, warn};

#[path = "inplace.rs"]
mod inplace;

/// How soon to look again after a write whose watch event may be missed.
const SHORTLY: Duration = Duration::from_secs(2);

fn key_of(ctx: &Ctx, name: &str) -> String {
    format!("{}/{}", ctx.config.namespace, name)
}

/// The controller's error policy: conflicts retry soon, other errors back off per deployment.
pub(crate) fn error_policy(d: Arc<MachineDeployment>, err: &Error, ctx: Arc<Ctx>) -> Action {
    crate::metrics::workqueue::retry("machinedeployment");
    let name = d.name_any();
    warn!(machinedeployment = %name, namespace = %ctx.config.namespace, error = %err, "machinedeployment reconcile failed");
    Action::requeue(ctx.error_delay(&format!("mcd/{}", key_of(&ctx, &name)), err))
}

/// Why a deployment cannot be acted upon, if it cannot.
pub(crate) fn invalid_deployment(d: &MachineDeployment) -> Option<String> {
    let deleting = d.meta().deletion_timestamp.is_some();
    if let Some(why) = super::blocking_errors(validate_machine_deployment(d), deleting) {
        return Some(why);
    }
    let sel = d.spec.selector.as_ref()?;
    validate_selector(sel)
        .err()
        .map(|e| format!("spec.selector: {e}"))
}

/// The reconcile entry point.
#[instrument(skip_all, fields(machinedeployment = %obj.name_any(), namespace = %ctx.config.namespace))]
pub(crate) async fn reconcile(obj: Arc<MachineDeployment>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let _work = crate::metrics::workqueue::work("machinedeployment");
    let name = obj.name_any();
    let action = reconcile_deployment(&name, &ctx).await?;
    ctx.reset_backoff(&format!("mcd/{}", key_of(&ctx, &name)));
    Ok(action)
}

/// Records why an invalid deployment is not acted upon: a `ReplicaFailure`
/// condition with reason `InvalidSpec` (written once per distinct problem).
async fn mark_invalid(
    api: &Api<MachineDeployment>,
    d: &MachineDeployment,
    problem: &str,
) -> Result<(), Error> {
    use mcm_api::MachineDeploymentCondition;
    let current = d
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let now = to_k8s(Utc::now());
    let condition = MachineDeploymentCondition {
        type_: MachineDeploymentConditionType::ReplicaFailure,
        status: ConditionStatus::True,
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
        reason: super::machineset::INVALID_SPEC.to_string(),
        message: problem.to_string(),
    };
    let Some(conditions) = super::replace_failure_condition(
        current,
        |c| c.type_ == MachineDeploymentConditionType::ReplicaFailure,
        |c| c.reason == condition.reason && c.message == condition.message,
        condition.clone(),
    ) else {
        return Ok(());
    };
    super::patch_status(api, &d.name_any(), json!({ "conditions": conditions })).await
}

async fn reconcile_deployment(name: &str, ctx: &Ctx) -> Result<Action, Error> {
    let api = ctx.machine_deployments();
    // From the shared cache, as the reference's lister: every write is
    // guarded by this copy's resourceVersion, so a stale copy costs a
    // conflict and a quick retry, never a lost update.
    let cached = ctx
        .caches
        .deployments
        .get(&ObjectRef::new(name).within(&ctx.config.namespace));
    let Some(mut d) = cached.map(|d| (*d).clone()) else {
        return Ok(Action::await_change());
    };
    if d.labels().get(c::FREEZE_LABEL).map(String::as_str) == Some(c::FREEZE_LABEL_VALUE) {
        debug!("MachineDeployment is frozen; it is still processed (only its sets' creations are blocked)");
    }
    if let Some(problem) = invalid_deployment(&d) {
        warn!(problem = %problem, "invalid MachineDeployment, not acting on it");
        publish(
            &ctx.sets.deployment_recorder,
            &d,
            EventType::Warning,
            super::machineset::INVALID_SPEC,
            problem.clone(),
            "Validate",
        )
        .await;
        mark_invalid(&api, &d, &problem).await?;
        return Ok(Action::await_change());
    }
    let deleting = d.meta().deletion_timestamp.is_some();
    if !deleting && !has_finalizer(&d) {
        d = add_finalizer(&api, &d).await?;
    }
    let selector = d.spec.selector.clone().unwrap_or_default();
    if selector_is_empty(&selector) {
        publish(
            &ctx.sets.deployment_recorder,
            &d,
            EventType::Warning,
            "SelectingAll",
            "This deployment is selecting all machines. A non-empty selector is required.".into(),
            "Validate",
        )
        .await;
        let generation = d.meta().generation.unwrap_or(0);
        let mut st = d.status.clone().unwrap_or_default();
        if st.observed_generation < generation {
            st.observed_generation = generation;
            let mut obj = d.clone();
            obj.status = Some(st);
            api.replace_status(name, &PostParams::default(), &obj)
                .await?;
        }
        return Ok(Action::await_change());
    }
    let sets = claim_sets(ctx, &d, deleting).await?;
    let set_uids: HashSet<String> = sets.iter().filter_map(|s| s.uid()).collect();
    let machines: Vec<Arc<Machine>> = ctx
        .caches
        .machines
        .state()
        .into_iter()
        .filter(|m| {
            let labels = m.metadata.labels.clone().unwrap_or_default();
            selector_matches(&selector, &labels).unwrap_or(false)
                && controller_ref(&m.metadata).is_some_and(|c| set_uids.contains(&c.uid))
        })
        .collect();
    let views: Vec<SetView> = sets.iter().map(|s| SetView::from_set(s)).collect();
    let part = partition(&d.spec.template, &views);
    let strategy = resolve_strategy(&d.spec).map_err(|e| Error::Invalid(e.to_string()))?;
    let mut pass = Pass {
        ctx,
        api,
        d,
        sets,
        views,
        part,
        strategy,
        machines,
        now: Utc::now(),
    };
    if deleting {
        return pass.delete().await;
    }
    pass.paused_conditions().await?;
    if pass.autoscaler_annotations().await? {
        // Scale only once the marks are visible in the machine cache, which
        // the MachineSet controller shares: it then deletes the marked
        // machines and not others.
        return Ok(requeue(ctx, Some(SHORTLY)));
    }
    pass.sync_new_set().await?;
    if pass.d.spec.paused {
        return pass.sync().await;
    }
    if pass.d.spec.rollback_to.is_some() {
        return pass.rollback().await;
    }
    if is_scaling_event(pass.d.spec.replicas, &pass.views, &pass.part) {
        info!(replicas = pass.d.spec.replicas, "scaling event");
        return pass.sync().await;
    }
    super::rollout_nodes::reconcile(
        ctx,
        super::rollout_nodes::RolloutView {
            d: &pass.d,
            sets: &pass.sets,
            views: &pass.views,
            part: &pass.part,
            strategy: &pass.strategy,
            machines: &pass.machines,
        },
    )
    .await;
    match pass.strategy {
        Strategy::RollingUpdate { .. } => pass.rolling().await,
        Strategy::Recreate => pass.recreate().await,
        Strategy::InPlaceUpdate { .. } => pass.in_place().await,
    }
}

/// Claims the MachineSets of the cache for this deployment (design:
/// sets-and-deployments.md, "Claiming").
async fn claim_sets(
    ctx: &Ctx,
    d: &MachineDeployment,
    deleting: bool,
) -> Result<Vec<Arc<MachineSet>>, Error> {
    let uid = d.uid().unwrap_or_default();
    let selector = d.spec.selector.clone().unwrap_or_default();
    let claimer = Claimer {
        uid: &uid,
        deleting,
    };
    let api = ctx.machine_sets();
    let mut claimed = Vec::new();
    let mut rechecked = false;
    let mut first_error: Option<Error> = None;
    for s in ctx.caches.sets.state() {
        let labels = s.metadata.labels.clone().unwrap_or_default();
        let matches = selector_matches(&selector, &labels).unwrap_or(false);
        match claim(
            claimer,
            controller_ref(&s.metadata).as_ref(),
            matches,
            s.metadata.deletion_timestamp.is_some(),
        ) {
            ClaimAction::Keep => claimed.push(s),
            ClaimAction::Ignore => {}
            ClaimAction::Adopt => {
                if !rechecked {
                    let fresh = ctx.machine_deployments().get_opt(&d.name_any()).await?;
                    if !fresh.is_some_and(|f| {
                        f.uid() == d.uid() && f.meta().deletion_timestamp.is_none()
                    }) {
                        return Err(Error::OwnerChanged(d.name_any()));
                    }
                    rechecked = true;
                }
                match adopt(&api, &*s, d).await {
                    Ok(updated) => {
                        info!(machineset = %s.name_any(), "adopted MachineSet");
                        claimed.push(Arc::new(updated));
                    }
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        first_error.get_or_insert(e.into());
                    }
                }
            }
            ClaimAction::Release => match release(&api, &*s, &uid).await {
                Ok(()) => {
                    info!(machineset = %s.name_any(), "released MachineSet that no longer matches the selector")
                }
                Err(e) => {
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

/// One reconcile pass over a deployment and its sets.
struct Pass<'a> {
    ctx: &'a Ctx,
    api: Api<MachineDeployment>,
    d: MachineDeployment,
    sets: Vec<Arc<MachineSet>>,
    views: Vec<SetView>,
    part: Partition,
    strategy: Strategy,
    machines: Vec<Arc<Machine>>,
    now: DateTime<Utc>,
}

impl Pass<'_> {
    fn name(&self) -> String {
        self.d.name_any()
    }

    fn replicas(&self) -> i32 {
        self.d.spec.replicas
    }

    fn status(&self) -> MachineDeploymentStatus {
        self.d.status.clone().unwrap_or_default()
    }

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        publish(
            &self.ctx.sets.deployment_recorder,
            &self.d,
            type_,
            reason,
            note,
            "Rollout",
        )
        .await;
    }

    /// Writes the deployment's metadata/spec (PUT, resourceVersion-guarded).
    async fn update(&mut self, change: impl FnOnce(&mut MachineDeployment)) -> Result<(), Error> {
        let mut obj = self.d.clone();
        change(&mut obj);
        self.d = self
            .api
            .replace(&self.name(), &PostParams::default(), &obj)
            .await?;
        Ok(())
    }

    /// Writes the whole status (PUT on /status, resourceVersion-guarded).
    async fn write_status(&mut self, status: MachineDeploymentStatus) -> Result<(), Error> {
        let mut obj = self.d.clone();
        obj.status = Some(status);
        self.d = self
            .api
            .replace_status(&self.name(), &PostParams::default(), &obj)
            .await?;
        Ok(())
    }

    fn facts_status(&self) -> (MachineDeploymentStatus, i64) {
        (self.status(), self.d.meta().generation.unwrap_or(0))
    }

    /// The plain status write of the scaling path (`syncMachineDeploymentStatus`).
    async fn sync_status(&mut self) -> Result<(), Error> {
        let (current, generation) = self.facts_status();
        let name = self.name();
        let facts = DeploymentFacts {
            name: &name,
            generation,
            replicas: self.replicas(),
            strategy: &self.strategy,
            progress_deadline_seconds: self.d.spec.progress_deadline_seconds,
            status: &current,
        };
        let new = plan::deployment_status(&facts, &self.views, &self.part, self.now);
        if new != current {
            self.write_status(new).await?;
        }
        Ok(())
    }

    /// The rollout status write (`syncRolloutStatus`), with the requeue for the progress deadline.
    async fn sync_rollout_status(&mut self) -> Result<Action, Error> {
        let (current, generation) = self.facts_status();
        let name = self.name();
        let facts = DeploymentFacts {
            name: &name,
            generation,
            replicas: self.replicas(),
            strategy: &self.strategy,
            progress_deadline_seconds: self.d.spec.progress_deadline_seconds,
            status: &current,
        };
        let new = rollout_status(&facts, &self.views, &self.part, self.now);
        if status_update_required(&current, &new) {
            self.write_status(new).await?;
            return Ok(requeue(self.ctx, None));
        }
        Ok(requeue(self.ctx, progress_requeue(&facts, &new, self.now)))
    }

    /// Sets a set's size and replica annotations; answers whether the size changed.
    async fn scale_set(&self, i: usize, size: i32) -> Result<bool, Error> {
        let Some(s) = self.sets.get(i) else {
            return Ok(false);
        };
        let mut annotations = s.annotations().clone();
        let max = self.replicas().saturating_add(self.strategy.max_surge());
        let annotations_changed = set_replicas_annotations(&mut annotations, self.replicas(), max);
        let from = s.spec.replicas;
        if from == size && !annotations_changed {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": s.resource_version(),
                "annotations": {
                    c::DESIRED_REPLICAS_ANNOTATION: self.replicas().to_string(),
                    c::MAX_REPLICAS_ANNOTATION: max.to_string(),
                }
            },
            "spec": { "replicas": size }
        });
        self.ctx
            .machine_sets()
            .patch(
                &s.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        if from != size {
            let direction = if from < size { "up" } else { "down" };
            info!(machineset = %s.name_any(), from, to = size, "scaled MachineSet");
            self.event(
                EventType::Normal,
                "ScalingMachineSet",
                format!("Scaled {direction} machine set {} to {size}", s.name_any()),
            )
            .await;
        }
        Ok(from != size)
    }

    /// Deletion: delete the sets, drop the finalizer once they are gone (design:
    /// sets-and-deployments.md, "Deleting sets and deployments").
    async fn delete(mut self) -> Result<Action, Error> {
        if !has_finalizer(&self.d) {
            return Ok(Action::await_change());
        }
        if self.sets.is_empty() {
            remove_finalizer(&self.api, &self.d).await?;
            info!("all MachineSets gone, finalizer removed");
            return Ok(Action::await_change());
        }
        let api = self.ctx.machine_sets();
        for s in self
            .sets
            .iter()
            .filter(|s| s.meta().deletion_timestamp.is_none())
        {
            match api.delete(&s.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    info!(machineset = %s.name_any(), "deleted MachineSet of deleted MachineDeployment")
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    warn!(machineset = %s.name_any(), error = %e, "MachineSet deletion failed")
                }
            }
        }
        self.sync_status().await?;
        Ok(requeue(self.ctx, Some(SHORTLY)))
    }

    /// `checkPausedConditions` (design: sets-and-deployments.md, "Pause").
    async fn paused_conditions(&mut self) -> Result<(), Error> {
        let mut st = self.status();
        if let Some(cond) = paused_condition(self.d.spec.paused, &st.conditions, self.now) {
            set_condition(&mut st.conditions, cond);
            self.write_status(st).await?;
        }
        Ok(())
    }

    /// The cluster-autoscaler's `trigger-deletion-by-mcm` annotation (design:
    /// sets-and-deployments.md, "Cluster-autoscaler annotations");
    /// answers whether machines were marked in this pass.
    async fn autoscaler_annotations(&mut self) -> Result<bool, Error> {
        let value = self
            .d
            .annotations()
            .get(c::TRIGGER_DELETION_BY_MCM_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if value.is_empty() {
            return Ok(false);
        }
        let scaler_time = self
            .d
            .annotations()
            .get(c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION)
            .filter(|t| !t.is_empty())
            .cloned();
        let time = scaler_time
            .clone()
            .unwrap_or_else(|| self.now.to_rfc3339_opts(SecondsFormat::Secs, true));
        let normalized = plan::normalize_trigger_deletion(&value, &time);
        if normalized != value || scaler_time.is_none() {
            self.update(|d| {
                let a = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
                a.insert(
                    c::TRIGGER_DELETION_BY_MCM_ANNOTATION.into(),
                    normalized.clone(),
                );
                a.insert(
                    c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION.into(),
                    time.clone(),
                );
            })
            .await?;
        }
        let store = &self.ctx.caches.machines;
        let ns = self.ctx.config.namespace.clone();
        let decision = plan::trigger_deletion_plan(&normalized, |n| {
            match store.get(&ObjectRef::new(n).within(&ns)) {
                None => TriggerTarget::NotFound,
                Some(m) => {
                    let v = MachineView::from_machine(&m);
                    if v.phase == mcm_api::MachinePhase::Failed || v.deleting {
                        TriggerTarget::FailedOrTerminating
                    } else {
                        TriggerTarget::Live {
                            marked: v
                                .annotations
                                .get(c::PRIORITY_ANNOTATION)
                                .map(String::as_str)
                                == Some("1")
                                && v.annotations
                                    .get(c::MARKED_FOR_DELETION_TIME_ANNOTATION)
                                    .is_some_and(|t| !t.is_empty()),
                        }
                    }
                }
            }
        });
        if let Some(new_value) = decision.new_value.clone() {
            self.update(|d| {
                let a = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
                if new_value.is_empty() {
                    a.remove(c::TRIGGER_DELETION_BY_MCM_ANNOTATION);
                } else {
                    a.insert(
                        c::TRIGGER_DELETION_BY_MCM_ANNOTATION.into(),
                        new_value.clone(),
                    );
                }
            })
            .await?;
        }
        let machines = self.ctx.machines();
        let marked = !decision.mark.is_empty();
        for (name, time) in decision.mark {
            let Some(m) = store.get(&ObjectRef::new(&name).within(&ns)) else {
                continue;
            };
            let mut annotations = json!({ c::PRIORITY_ANNOTATION: "1" });
            if m.annotations()
                .get(c::MARKED_FOR_DELETION_TIME_ANNOTATION)
                .is_none_or(|t| t.is_empty())
            {
                annotations[c::MARKED_FOR_DELETION_TIME_ANNOTATION] = json!(time);
            }
            let patch = json!({"metadata": {"resourceVersion": m.resource_version(), "annotations": annotations}});
            machines
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            info!(machine = %name, "machine marked for deletion by the cluster-autoscaler");
        }
        Ok(marked)
    }

    /// Refreshes the existing new set (design: sets-and-deployments.md, "New and
    /// old MachineSets").
    async fn sync_new_set(&mut self) -> Result<(), Error> {
        let Some(n) = self.part.new else {
            return Ok(());
        };
        let s = self.sets[n].clone();
        let new_revision = max_revision(self.part.old.iter().map(|&i| &self.views[i])) + 1;
        let annotations = new_set_annotations(
            self.d.annotations(),
            s.annotations(),
            new_revision,
            true,
            0,
            0,
        );
        let dt = &self.d.spec.template.spec;
        let mut upd = (*s).clone();
        let mut changed = Vec::new();
        if &annotations != s.annotations() {
            upd.metadata.annotations = Some(annotations);
            changed.push("annotations");
        }
        let same_node_template = normalize(&serde_json::to_value(&dt.node_template)?)
            == normalize(&serde_json::to_value(
                &upd.spec.template.spec.node_template,
            )?);
        if !same_node_template {
            upd.spec.template.spec.node_template = dt.node_template.clone();
            changed.push("nodeTemplate");
        }
        if dt.configuration != upd.spec.template.spec.configuration {
            upd.spec.template.spec.configuration = dt.configuration.clone();
            changed.push("machineConfiguration");
        }
        if dt.class.kind != upd.spec.template.spec.class.kind {
            upd.spec.template.spec.class.kind = dt.class.kind.clone();
            changed.push("class.kind");
        }
        if self.d.spec.min_ready_seconds != upd.spec.min_ready_seconds {
            upd.spec.min_ready_seconds = self.d.spec.min_ready_seconds;
            changed.push("minReadySeconds");
        }
        if self.d.spec.auto_preserve_failed_machine_max != upd.spec.auto_preserve_failed_machine_max
        {
            upd.spec.auto_preserve_failed_machine_max =
                self.d.spec.auto_preserve_failed_machine_max;
            changed.push("autoPreserveFailedMachineMax");
        }
        if !changed.is_empty() {
            let updated = self
                .ctx
                .machine_sets()
                .replace(&s.name_any(), &PostParams::default(), &upd)
                .await?;
            info!(machineset = %s.name_any(), changed = ?changed, "updated new MachineSet");
            self.views[n] = SetView::from_set(&updated);
            self.sets[n] = Arc::new(updated);
            return Ok(());
        }
        let set_revision = s
            .annotations()
            .get(c::REVISION_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if !set_revision.is_empty()
            && self.d.annotations().get(c::REVISION_ANNOTATION) != Some(&set_revision)
        {
            self.update(|d| {
                d.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(c::REVISION_ANNOTATION.into(), set_revision.clone());
            })
            .await?;
        }
        let mut st = self.status();
        if plan::get_condition(&st.conditions, &MachineDeploymentConditionType::Progressing)
            .is_none()
        {
            set_condition(
                &mut st.conditions,
                new_condition(
                    MachineDeploymentConditionType::Progressing,
                    ConditionStatus::True,
                    c::FOUND_NEW_MACHINE_SET_REASON,
                    format!("Found new machine set {:?}", s.name_any()),
                    self.now,
                ),
            );
            self.write_status(st).await?;
        }
        Ok(())
    }

    /// Creates the new MachineSet (design: sets-and-deployments.md, "New and old
    /// MachineSets"); answers the created set's name.
    async fn create_new_set(&mut self) -> Result<(), Error> {
        let st = self.status();
        let hash = template_hash(&self.d.spec.template, st.collision_count);
        let hash_value = hash.to_string();
        let name = new_set_name(&self.name(), hash);
        let mut template = self.d.spec.template.clone();
        template
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(c::TEMPLATE_HASH_LABEL.into(), hash_value.clone());
        let mut selector = self.d.spec.selector.clone().unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(c::TEMPLATE_HASH_LABEL.into(), hash_value.clone());
        let new_revision = max_revision(&self.views) + 1;
        let probe = SetView {
            name: name.clone(),
            ..Default::default()
        };
        let mut all = self.views.clone();
        all.push(probe.clone());
        let replicas = new_set_replicas(&self.strategy, self.replicas(), &all, &probe);
        let max = self.replicas().saturating_add(self.strategy.max_surge());
        let annotations = new_set_annotations(
            self.d.annotations(),
            &BTreeMap::new(),
            new_revision,
            false,
            self.replicas(),
            max,
        );
        let ms = MachineSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.ctx.config.namespace.clone()),
                labels: template.metadata.labels.clone(),
                annotations: Some(annotations),
                owner_references: Some(vec![owner_reference(&self.d)]),
                ..Default::default()
            },
            spec: MachineSetSpec {
                replicas,
                selector: Some(selector),
                min_ready_seconds: self.d.spec.min_ready_seconds,
                auto_preserve_failed_machine_max: self.d.spec.auto_preserve_failed_machine_max,
                template,
                ..Default::default()
            },
            status: None,
        };
        match self
            .ctx
            .machine_sets()
            .create(&PostParams::default(), &ms)
            .await
        {
            Ok(created) => {
                info!(machineset = %name, replicas, revision = new_revision, "created new MachineSet");
                if replicas > 0 {
                    self.event(
                        EventType::Normal,
                        "ScalingMachineSet",
                        format!("Scaled up machine set {name} to {replicas}"),
                    )
                    .await;
                }
                let revision = new_revision.to_string();
                if self.d.annotations().get(c::REVISION_ANNOTATION) != Some(&revision) {
                    self.update(|d| {
                        d.metadata
                            .annotations
                            .get_or_insert_with(BTreeMap::new)
                            .insert(c::REVISION_ANNOTATION.into(), revision.clone());
                    })
                    .await?;
                }
                let mut st = self.status();
                set_condition(
                    &mut st.conditions,
                    new_condition(
                        MachineDeploymentConditionType::Progressing,
                        ConditionStatus::True,
                        c::NEW_MACHINE_SET_REASON,
                        format!("Created new machine set {:?}", created.name_any()),
                        self.now,
                    ),
                );
                self.write_status(st).await?;
                Ok(())
            }
            Err(e) if is_conflict(&e) => {
                // AlreadyExists: ours (a cache that lags) or a hash collision.
                let existing = self.ctx.machine_sets().get_opt(&name).await?;
                let ours = existing.as_ref().is_some_and(|s| {
                    controller_ref(&s.metadata).is_some_and(|c| Some(c.uid) == self.d.uid())
                        && plan::equal_ignore_hash(&s.spec.template, &self.d.spec.template)
                });
                if ours {
                    return Ok(());
                }
                let mut st = self.status();
                st.collision_count = Some(st.collision_count.unwrap_or(0).saturating_add(1));
                warn!(machineset = %name, collision_count = ?st.collision_count, "hash collision for the new MachineSet");
                self.write_status(st).await?;
                Err(Error::Collision(name))
            }
            Err(e) => {
                let msg = format!("Failed to create new machine set {name:?}: {e}");
                let mut st = self.status();
                set_condition(
                    &mut st.conditions,
                    new_condition(
                        MachineDeploymentConditionType::Progressing,
                        ConditionStatus::False,
                        c::FAILED_MACHINE_SET_CREATE_REASON,
                        msg.clone(),
                        self.now,
                    ),
                );
                let _ = self.write_status(st).await;
                self.event(EventType::Warning, c::FAILED_MACHINE_SET_CREATE_REASON, msg)
                    .await;
                Err(e.into())
            }
        }
    }

    /// Old sets beyond `revisionHistoryLimit` (design: sets-and-deployments.md,
    /// "Revisions, rollback and history cleanup").
    async fn cleanup(&self) -> Result<(), Error> {
        let api = self.ctx.machine_sets();
        for i in history_cleanup(self.d.spec.revision_history_limit, &self.views, &self.part) {
            let name = self.views[i].name.clone();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    info!(machineset = %name, "deleted old MachineSet beyond the revision history limit")
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The scaling / paused path (`sync`; design: sets-and-deployments.md,
    /// "Proportional scaling" and "Pause").
    async fn sync(mut self) -> Result<Action, Error> {
        let targets = scale_targets(
            self.replicas(),
            &self.strategy,
            self.status().replicas,
            &self.views,
            &self.part,
        );
        for (i, size) in targets {
            self.scale_set(i, size).await?;
        }
        if self.d.spec.paused && self.d.spec.rollback_to.is_none() {
            self.cleanup().await?;
        }
        self.sync_status().await?;
        Ok(requeue(self.ctx, None))
    }

    /// Rollback to `spec.rollbackTo.revision` (design: sets-and-deployments.md,
    /// "Revisions, rollback and history cleanup").
    async fn rollback(mut self) -> Result<Action, Error> {
        let to = self.d.spec.rollback_to.as_ref().map_or(0, |r| r.revision);
        let decision = plan::rollback_decision(
            to,
            &self.d.spec.template,
            self.d.annotations(),
            &self.views,
            &self.part,
        );
        let name = self.name();
        match decision {
            RollbackDecision::RevisionNotFound(msg) => {
                self.event(EventType::Warning, c::ROLLBACK_REVISION_NOT_FOUND, msg)
                    .await;
                self.update(|d| d.spec.rollback_to = None).await?;
            }
            RollbackDecision::TemplateUnchanged { revision } => {
                self.event(
                    EventType::Warning,
                    c::ROLLBACK_TEMPLATE_UNCHANGED,
                    format!("The rollback revision contains the same template as current deployment {name:?}"),
                )
                .await;
                info!(revision, "rollback target has the current template");
                self.update(|d| d.spec.rollback_to = None).await?;
            }
            RollbackDecision::RollBack {
                revision,
                template,
                annotations,
                ..
            } => {
                self.update(|d| {
                    d.spec.template = *template;
                    d.metadata.annotations = Some(annotations);
                    d.spec.rollback_to = None;
                })
                .await?;
                info!(revision, "rolled back");
                self.event(
                    EventType::Normal,
                    c::ROLLBACK_DONE,
                    format!("Rolled back deployment {name:?} to revision {revision}"),
                )
                .await;
            }
        }
        Ok(requeue(self.ctx, Some(SHORTLY)))
    }

    /// One RollingUpdate step (design: sets-and-deployments.md, "MachineDeployment rollouts").
    async fn rolling(mut self) -> Result<Action, Error> {
        let Some(n) = self.part.new else {
            self.create_new_set().await?;
            return Ok(requeue(self.ctx, Some(SHORTLY)));
        };
        let replicas = self.replicas();
        if let Some(target) =
            rolling_new_set_target(&self.strategy, replicas, &self.views, &self.views[n])
        {
            self.scale_set(n, target).await?;
            return self.sync_rollout_status().await;
        }
        let downs = rolling_scale_down(
            replicas,
            self.strategy.max_unavailable(replicas),
            &self.views,
            &self.part,
        );
        let mut scaled = false;
        for (i, size) in downs {
            match self.scale_set(i, size).await {
                Ok(changed) => scaled |= changed,
                Err(e) => warn!(error = %e, "scaling down an old MachineSet failed"),
            }
        }
        if scaled {
            return self.sync_rollout_status().await;
        }
        let generation = self.d.meta().generation.unwrap_or(0);
        if is_complete(replicas, generation, &self.status()) {
            self.cleanup().await?;
        }
        self.sync_rollout_status().await
    }

    /// One Recreate step (design: sets-and-deployments.md, "MachineDeployment rollouts").
    async fn recreate(mut self) -> Result<Action, Error> {
        let new_uid = self.part.new.map(|n| self.views[n].uid.clone());
        let old_machines_exist = self
            .machines
            .iter()
            .any(|m| controller_ref(&m.metadata).map(|c| c.uid) != new_uid);
        let replicas = self.replicas();
        match recreate_step(replicas, &self.views, &self.part, old_machines_exist) {
            RecreateStep::ScaleDownOld(list) => {
                for i in list {
                    self.scale_set(i, 0).await?;
                }
                self.sync_rollout_status().await
            }
            RecreateStep::WaitForOldMachines => {
                debug!("waiting for the old machines to be gone");
                self.sync_rollout_status().await
            }
            RecreateStep::CreateNew => {
                self.create_new_set().await?;
                Ok(requeue(self.ctx, Some(SHORTLY)))
            }
            RecreateStep::ScaleNew(size) => {
                if let Some(n) = self.part.new {
                    self.scale_set(n, size).await?;
                }
                self.sync_rollout_status().await
            }
            RecreateStep::Steady => {
                let generation = self.d.meta().generation.unwrap_or(0);
                if is_complete(replicas, generation, &self.status()) {
                    self.cleanup().await?;
                }
                self.sync_rollout_status().await
            }
        }
    }

    /// Without a target cluster there is no node agent protocol: InPlaceUpdate is refused.
    async fn in_place_unsupported(mut self) -> Result<Action, Error> {
        self.event(
            EventType::Warning,
            "InPlaceUpdateUnsupported",
            "The InPlaceUpdate strategy needs a target cluster; this controller does not roll it out".into(),
        )
        .await;
        self.sync_status().await?;
        Ok(requeue(self.ctx, None))
    }
}
