//! The Machine controller: creation with post-creation initialization,
//! health, and the deletion step machine, on kube-rs.
//!
//! Each reconcile reads the Machine (and from caches its Node), asks
//! [`mcm_core::machine`] what to do, calls the provider driver, and persists the
//! result. Steps that succeed run on in the same reconcile; every step's
//! outcome is persisted before the next, so a crash resumes where it stopped.
//! Failures are retried with per-machine exponential backoff and jitter.
//!
//! - [`create`]: the creation flow's effects (decisions in `mcm_core::machine::CreationFlow`);
//! - [`health`]: the health check and the Node sync;
//! - [`delete`]: the deletion step machine's effects;
//! - [`drain_step`]: its Drain step, run as a task that holds no reconcile slot;
//! - [`preserve`]: preservation's effects (decisions in `mcm_core::machine::plan_preservation`);
//! - [`update`]: hot update of a Running (or Available) machine's VM when its class changes
//!   (decisions in `mcm_core::machine::update`; design: hot-update.md);
//! - [`triggers`]: which changes of Machines, classes and Nodes cause a reconcile.
//!
//! See `docs/design/machine.md`.

mod create;
mod delete;
mod drain_step;
mod health;
mod inplace;
mod preserve;
mod staged;
mod startup_taint;
pub(crate) mod triggers;
mod update;

pub(crate) use delete::delete_orphan;

use crate::caches::Triggers;
use crate::keys::{Kind, ObjectKey};
use crate::metadata::{finalizer, MetaPatch};
use crate::routing::{error_policy, Route};
use crate::status::machine::MachineStatusChange;
use crate::{drain, Context, Error};
use chrono::Utc;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachinePhase as Phase};
use mcm_core::backoff::FailureKind;
use mcm_core::machine::{self as decide, MachineView, NodeDeletion, RetryClass, VmRecord};
use mcm_driver::{Driver, MachineRequest, Status};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, instrument, warn};

/// The target cluster's client, as the creation and deletion flows carry it
/// in their steps (they only hand out the one they were given).
#[derive(Clone)]
struct Cluster(kube::Client);

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("target cluster")
    }
}

/// Runs the Machine controller until `shutdown` completes.
///
/// A Machine is reconciled when something the controller acts on changes
/// ([`triggers`]): not on its own status writes, so a failed call's backoff is
/// not cut short by the status the failure wrote.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    ctx.workqueues
        .declare(&crate::metrics::workqueue::CONTROLLER_QUEUES);
    let caches = ctx.caches.clone();
    let ns = ctx.config.namespace.clone();
    // Changes of Machines (filtered by their trigger hash), of classes (to
    // their machines) and of Nodes (to their machine), all from the
    // process's shared caches (design: runtime.md, "Routing events to controllers").
    let store = (*caches.machines).clone();
    let route = Route::new(&ctx, store.clone());
    let mut machine_triggers = Triggers::new(triggers::machine);
    let machine_store = store.clone();
    let own = route.own(caches.machines.subscribe(), move |change| {
        machine_triggers.filter(change, &machine_store)
    });
    let class_store = (*caches.classes).clone();
    let mut class_triggers = Triggers::new(triggers::class);
    let users = store.clone();
    let class_events = route.mapped(caches.classes.subscribe(), move |change| {
        let changed = class_triggers.filter(change, &class_store);
        users
            .state()
            .iter()
            .filter(|m| changed.iter().any(|c| c.name_any() == m.spec.class.name))
            .map(|m| ObjectKey::machine(m))
            .collect()
    });
    let mut controller = route
        .controller(own, ctx.config.concurrent_syncs)
        .reconcile_on(class_events);
    if let Some(nodes) = &caches.nodes {
        let node_store = (**nodes).clone();
        let mut node_triggers = Triggers::new(triggers::node);
        let node_events = route.mapped(nodes.subscribe(), move |change| {
            node_triggers
                .filter(change, &node_store)
                .iter()
                .filter_map(|node| {
                    let m = node.labels().get(c::MACHINE_NAME_NODE_LABEL)?;
                    Some(ObjectKey::new(Kind::Machine, &ns, m))
                })
                .collect()
        });
        controller = controller.reconcile_on(node_events);
    }
    if let Some(drained) = ctx.drains.take_wakeups() {
        controller = controller.reconcile_on(route.keys(drained));
    }
    // Drains end with the controller (shutdown, or this future dropped when leadership is lost).
    let _abort_drains = AbortDrains(ctx.clone());
    // Reconciles read classes, Secrets and Nodes from the caches: start once
    // every cache holds a full list, so that nothing is judged missing early.
    let shutdown = shutdown.boxed().shared();
    tokio::select! {
        _ = caches_ready(&caches) => {},
        _ = shutdown.clone() => return,
    }
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy::<Machine>, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "machine reconcile error");
            }
        })
        .await;
}

/// Waits until the caches the machine controller reads hold a full list.
async fn caches_ready(caches: &crate::caches::Caches) {
    caches.machines.synced().await;
    caches.classes.synced().await;
    caches.secrets.synced().await;
    if let Some(nodes) = &caches.nodes {
        nodes.synced().await;
    }
}

/// Aborts the context's running drains when dropped.
struct AbortDrains(Arc<Context>);

impl Drop for AbortDrains {
    fn drop(&mut self) {
        self.0.drains.abort_all();
    }
}

/// The reconcile entry point.
#[instrument(skip_all, fields(machine = %m.name_any(), namespace = %m.namespace().unwrap_or_default()))]
pub(crate) async fn reconcile(m: Arc<Machine>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = ObjectKey::machine(&m);
    let _work = ctx.workqueues.work_on("machine", &key);
    if ctx.was_released(&key, &m.uid().unwrap_or_default()) {
        debug!("finalizer already removed here; waiting for the cache to drop the machine");
        return Ok(Action::await_change());
    }
    // A copy our own last write superseded is read as that write's answer
    // (runtime.md, "Reading our own writes").
    let m = ctx.machine_to_reconcile(&key, m);
    let mut r = Reconciler::new(&m, &ctx);
    let action = if m.meta().deletion_timestamp.is_some() {
        r.delete().await?
    } else {
        r.reconcile().await?
    };
    ctx.metrics.items.set(ctx.machine_count());
    debug!(?action, "reconciled");
    Ok(action)
}

struct Reconciler<'a> {
    ctx: &'a Context,
    machine: Machine,
    api: Api<Machine>,
    key: ObjectKey,
    /// The flow stopped to wait for its turn at the cloud budget (no call
    /// was made, so no creation attempt is recorded).
    paced: std::sync::atomic::AtomicBool,
    /// Status transitions applied locally but not yet written ([`staged`]).
    staged: Option<staged::Staged>,
    /// The resourceVersion of the copy this reconcile started from.
    started_from: String,
    /// What this reconcile did that the next phase-change Event tells
    /// besides the phase (the startup taint's removal): one Event, not two.
    phase_note: Option<String>,
}

/// A step's result: `Ok(Err(d))` when the reconcile stops there and
/// requeues after `d`.
type Step<T> = Result<Result<T, Duration>, Error>;

impl<'a> Reconciler<'a> {
    fn new(m: &Machine, ctx: &'a Context) -> Self {
        let ns = m
            .namespace()
            .unwrap_or_else(|| ctx.config.namespace.clone());
        Reconciler {
            ctx,
            machine: m.clone(),
            api: Api::namespaced(ctx.client.clone(), &ns),
            key: ObjectKey::machine(m),
            paced: std::sync::atomic::AtomicBool::new(false),
            staged: None,
            phase_note: None,
            started_from: m.resource_version().unwrap_or_default(),
        }
    }

    fn name(&self) -> String {
        self.machine.name_any()
    }

    fn view(&self) -> MachineView {
        MachineView::of(&self.machine, &self.ctx.config.default_settings())
    }

    fn target(&self) -> bool {
        self.ctx.target.is_some()
    }

    /// The target cluster's handle for the flows, which hand it back in
    /// the steps that act on Nodes (`None` in the mode without Nodes).
    fn cluster(&self) -> Option<Cluster> {
        self.ctx.target.clone().map(Cluster)
    }

    // ------------------------------------------------------------------
    // Events and status

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        self.ctx
            .recorder
            .note(&self.machine, type_, reason, note, reason)
            .await;
    }

    /// Writes a status change and emits an Event on a phase change.
    /// What was staged before goes in the same request.
    async fn write(&mut self, change: MachineStatusChange) -> Result<(), Error> {
        self.stage(change);
        self.flush().await
    }

    /// The phase metric and, on a phase change from `old_phase`, the Event
    /// of a written change.
    async fn announce(&mut self, change: &MachineStatusChange, old_phase: &Phase) {
        let Some(phase) = change.phase() else {
            return;
        };
        let description = change.description();
        self.ctx
            .metrics
            .phase
            .get_or_create(&crate::metrics::MachineLabels {
                name: self.name(),
                namespace: self.machine.namespace().unwrap_or_default(),
            })
            .set(crate::metrics::Metrics::phase_value(phase));
        if phase != old_phase {
            info!(from = %old_phase, to = %phase, %description, "phase changed");
            let Some(kind) = decide::phase_event(phase) else {
                return;
            };
            let warn = kind == decide::PhaseEvent::Warning;
            // One Event per announced phase change (`phase_event`), none for
            // the creation and initialization before it: the VM is named
            // here instead (design: machine.md, "Requests per machine").
            let id = &self.machine.spec.provider_id;
            let mut vm = if id.is_empty() {
                String::new()
            } else {
                format!(" (VM {id})")
            };
            if let Some(note) = self.phase_note.take() {
                vm = format!("{vm}; {note}");
            }
            self.event(
                if warn {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                phase.as_str(),
                format!(
                    "{} -> {}: {}{vm}",
                    display_phase(old_phase),
                    phase,
                    description
                ),
            )
            .await;
        }
    }

    /// Records a problem with the machine's inputs (class, secret, driver) in
    /// status and as a Warning Event, without changing the phase.
    async fn input_problem(&mut self, problem: decide::InputProblem) -> Result<Duration, Error> {
        let (reason, message) = (problem.reason(), problem.to_string());
        if let Some(t) = decide::input_problem(&self.view(), &message) {
            warn!(reason, %message, "machine cannot be reconciled");
            self.write(MachineStatusChange::of(&t)).await?;
            self.event(EventType::Warning, reason, message).await;
        }
        Ok(self.ctx.failure_delay(&self.key, FailureKind::Normal))
    }

    async fn provider_failure(&self, op: &str, err: &Status) {
        // The failure is counted where the call is made (`timed`).
        self.event(EventType::Warning, &format!("{op}Failed"), err.to_string())
            .await;
    }

    /// The next retry's delay for a failure of that class (and counts the failure).
    fn retry_after(&self, class: RetryClass) -> Duration {
        let kind = match class {
            RetryClass::Throttled => FailureKind::Throttled,
            RetryClass::Normal => FailureKind::Normal,
        };
        self.ctx.failure_delay(&self.key, kind)
    }

    // ------------------------------------------------------------------
    // Inputs: finalizers, class, secret, driver

    async fn ensure_finalizer(&mut self) -> Result<(), Error> {
        if decide::record_never_created(&self.machine) {
            // A fresh machine: record, with its finalizer, that no VM was
            // created for it yet, so that its deletion can finish without the
            // provider if its creation never reaches the cloud.
            let never = MetaPatch::new()
                .annotation(decide::CLOUD_CREATE_ANNOTATION, decide::CLOUD_CREATE_NEVER);
            let added = finalizer::add_with(&self.api, &self.machine, c::MCM_FINALIZER, never);
            if let Some(m) = added.await? {
                self.machine = m;
            }
            return Ok(());
        }
        if let Some(m) = finalizer::add(&self.api, &self.machine, c::MCM_FINALIZER).await? {
            self.machine = m;
        }
        Ok(())
    }

    /// The class, the merged secret and the driver, or the reason they are unusable.
    async fn inputs(&mut self) -> Step<(MachineClass, Secret, Arc<dyn Driver>)> {
        let ns = self.machine.namespace().unwrap_or_default();
        let class_spec = &self.machine.spec.class;
        if let Some(problem) = decide::class_reference_problem(&class_spec.kind, &class_spec.name) {
            let stop = self.input_problem(problem).await?;
            return Ok(Err(stop));
        }
        let Some(class) = self.ctx.caches.class(&ns, &class_spec.name) else {
            let problem = decide::InputProblem::ClassNotFound {
                namespace: ns,
                name: class_spec.name.clone(),
            };
            let stop = self.input_problem(problem).await?;
            return Ok(Err(stop));
        };
        if let Err(errs) = mcm_api::validation::validate_machine_class(&class) {
            let problem = decide::InputProblem::InvalidClass {
                class: class_spec.name.clone(),
                errors: errs.iter().map(ToString::to_string).collect(),
            };
            let stop = self.input_problem(problem).await?;
            return Ok(Err(stop));
        }
        let class = (*class).clone();
        if self.machine.meta().deletion_timestamp.is_none() {
            crate::class::ensure_class_finalizer(self.ctx, &class).await?;
        }
        let secret = match crate::class::merged_secret(&self.ctx.caches, &class) {
            Ok(s) => s,
            Err(missing) => {
                let problem = decide::InputProblem::SecretNotFound {
                    secret: missing,
                    class: class_spec.name.clone(),
                };
                let stop = self.input_problem(problem).await?;
                return Ok(Err(stop));
            }
        };
        // Every call of this reconcile, and of the drains it starts, writes
        // the driver series.
        let Some(driver) = self.ctx.observed_driver(&class.provider) else {
            let problem = decide::InputProblem::UnknownProvider {
                provider: class.provider.clone(),
                class: class_spec.name.clone(),
                compiled_in: self.ctx.drivers.providers(),
            };
            let stop = self.input_problem(problem).await?;
            return Ok(Err(stop));
        };
        Ok(Ok((class, secret, driver)))
    }

    // ------------------------------------------------------------------
    // Main path

    async fn reconcile(&mut self) -> Result<Action, Error> {
        // A replica paused past its renew deadline may run a reconcile before
        // its renewal task notices: it does nothing (design:
        // leader-election.md, "One tenure deadline").
        if let Err(e) = self.ctx.tenure.check() {
            warn!(reason = %e, "not reconciling: this replica no longer leads");
            return Ok(Action::requeue(self.ctx.config.short_retry));
        }
        self.ensure_finalizer().await?;
        if self.ctx.is_frozen() {
            info!("machine controller is frozen (API server unreachable); not reconciling");
            return Ok(Action::requeue(self.ctx.config.long_retry));
        }
        // Malformed, negative or zero timeouts are reported, never replaced by
        // the defaults (a `creationTimeout: 0s` would fail every new machine).
        if let Err(errs) = mcm_api::validation::validate_machine_timeouts(&self.machine) {
            let problem =
                decide::InputProblem::InvalidMachine(mcm_api::validation::aggregate(&errs));
            let d = self.input_problem(problem).await?;
            return Ok(Action::requeue(d));
        }
        let (class, secret, driver) = match self.inputs().await? {
            Ok(x) => x,
            Err(d) => return Ok(Action::requeue(d)),
        };
        let view = self.view();
        let mut recheck = None;
        if view.needs_health_check(self.target()) {
            // Never fails, so it never holds up the health check.
            // The startup taint goes in node sync's own write when only the
            // template still holds it (design: startup-taint.md, "Removal").
            let with_sync = self.startup_taint_with_sync(&class);
            let fresh = crate::node_sync::sync_and_report(
                self.ctx,
                &self.machine,
                &class,
                with_sync.as_deref(),
            )
            .await;
            // After node sync, before the health check (design: startup-taint.md).
            let taint = self.startup_taint(&class, fresh, with_sync.is_some()).await;
            recheck = min_some(recheck, taint.retry);
            let health = self.health(&view, taint.held).await?;
            // The removal rides on the Running Event when the health check
            // wrote one; otherwise it gets its own.
            if let Some(note) = self.phase_note.take() {
                self.event(EventType::Normal, "StartupTaintRemoved", note)
                    .await;
            }
            match health {
                Ok(r) => recheck = min_some(recheck, r),
                Err(d) => return Ok(Action::requeue(d)),
            }
            match self.in_place(&self.view(), &driver).await? {
                Ok(Some(r)) => recheck = Some(recheck.map_or(r, |x| x.min(r))),
                Ok(None) => {}
                Err(d) => return Ok(Action::requeue(d)),
            }
        }
        // After the health check: only a machine that is (still) Running, or
        // Available without a target cluster, is updated in place (design:
        // hot-update.md).
        match self.hot_update(&class, &secret, &driver).await? {
            Ok(r) => recheck = min_some(recheck, r),
            Err(d) => return Ok(Action::requeue(d)),
        }
        match self.preserve(&driver).await? {
            Ok(r) => recheck = min_some(recheck, r),
            Err(d) => return Ok(Action::requeue(d)),
        }
        if self.view().needs_creation_flow() {
            if let Some(wait) = self.ctx.creation_wait(&self.key) {
                debug!(
                    ?wait,
                    "creation attempted less than the minimum retry period ago"
                );
                return Ok(Action::requeue(wait));
            }
            let action = self.create(class, secret, driver).await;
            if !self.paced.load(std::sync::atomic::Ordering::Relaxed) {
                self.ctx.creation_attempted(&self.key);
            }
            return action;
        }
        Ok(Action::requeue(
            recheck.unwrap_or(self.ctx.config.long_retry),
        ))
    }
}

/// The earlier of two optional recheck delays.
fn min_some(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn display_phase(p: &Phase) -> &str {
    if p.is_empty() {
        "(none)"
    } else {
        p.as_str()
    }
}
