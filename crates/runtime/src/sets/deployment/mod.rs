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
//!
//! This file holds the entry point, the error policy and the `Pass` with
//! its write helpers; each step lives beside it: `claiming`,
//! `autoscaler`, `new_set`, `scaling`, `revisions`, `rollout`
//! (RollingUpdate, Recreate), `inplace` (InPlaceUpdate), `deletion` and
//! `status`.

use super::{
    add_finalizer, adopt, has_finalizer, is_conflict, is_not_found, owner_reference, publish,
    release, remove_finalizer, requeue, Ctx, Error,
};
use crate::keys::Kind;
use crate::metadata::{version_of, MetaPatch};
use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
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
    self as plan, history_cleanup, is_complete, is_scaling_event, new_set_annotations,
    new_set_name, new_set_replicas, next_revision, partition, paused_condition, progress_requeue,
    recreate_step, resolve_strategy, rolling_new_set_target, rolling_scale_down, rollout_status,
    scale_targets, set_condition, set_replicas_annotations, status_update_required, template_hash,
    DeploymentFacts, Partition, RecreateStep, RollbackDecision, SetView, Strategy, TriggerTarget,
};
use mcm_core::machine::MachineView;
use mcm_core::replicas::{
    claim, controller_ref, normalize, selection, selector_is_empty, validate_selector, ClaimAction,
    Claimer, Selection,
};
use mcm_core::time::to_k8s;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, instrument, warn};

mod autoscaler;
mod claiming;
mod deletion;
mod inplace;
mod new_set;
mod revisions;
mod rollout;
mod scaling;
mod status;

use claiming::claim_sets;
use status::mark_invalid;

/// How soon to look again after a write whose watch event may be missed.
const SHORTLY: Duration = Duration::from_secs(2);

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
    let name = obj.name_any();
    let key = ctx.key(Kind::MachineDeployment, &name);
    let _work = ctx.workqueues.work_on("machinedeployment", &key);
    let action = reconcile_deployment(&name, &ctx).await?;
    ctx.reset_backoff(&key);
    Ok(action)
}

async fn reconcile_deployment(name: &str, ctx: &Ctx) -> Result<Action, Error> {
    let deferred = Arc::new(std::sync::Mutex::new(None));
    let action = reconcile_pass(name, ctx, &deferred).await?;
    // A deferred counts-only status write comes back within a second: a
    // reconcile sooner than otherwise planned only recomputes.
    let wait = deferred.lock().ok().and_then(|d| *d);
    Ok(match wait {
        Some(wait) => requeue(ctx, Some(wait)),
        None => action,
    })
}

async fn reconcile_pass(
    name: &str,
    ctx: &Ctx,
    deferred: &Arc<std::sync::Mutex<Option<Duration>>>,
) -> Result<Action, Error> {
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
            &ctx.sets.manager_recorder,
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
            &ctx.sets.manager_recorder,
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
            crate::status::machine_deployment::replace(&api, &d, st).await?;
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
            selection(&selector, &labels) != Selection::NotSelected
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
        deferred: deferred.clone(),
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
    /// A counts-only status write this pass left for later, and when.
    deferred: Arc<std::sync::Mutex<Option<Duration>>>,
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
            &self.ctx.sets.manager_recorder,
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

    /// Writes the whole status (PUT on /status, resourceVersion-guarded). A
    /// change of the counts only, within a second of the last write, waits
    /// for the next pass (`mcm_core::status_pace`; recorded in `deferred`).
    async fn write_status(&mut self, status: MachineDeploymentStatus) -> Result<(), Error> {
        let old = self.status();
        let counts_only = mcm_core::status_pace::deployment_counts_only(&old, &status);
        let key = self.ctx.key(Kind::MachineDeployment, &self.name());
        if let Some(wait) = self.ctx.status_write_wait(&key, counts_only) {
            debug!(
                ?wait,
                "MachineDeployment counts changed; writing them with the next ones"
            );
            if let Ok(mut d) = self.deferred.lock() {
                *d = Some(d.map_or(wait, |d| d.min(wait)));
            }
            return Ok(());
        }
        self.d = crate::status::machine_deployment::replace(&self.api, &self.d, status).await?;
        Ok(())
    }
}
