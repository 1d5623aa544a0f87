//! # MachineSet and MachineDeployment controllers, and the overshoot safety loop
//!
//! The provider-independent half of machine-controller-manager (design:
//! sets-and-deployments.md) on kube-rs. All decisions are
//! made by [`mcm_core::replicas`] and [`mcm_core::deployment`]; this module
//! reads the world and carries them out:
//!
//! - [`machineset`]: keeps `spec.replicas` machines per MachineSet (claim,
//!   adopt, release, create in slow-start batches, delete in deletion order,
//!   replace Failed machines, propagate in-place template fields, status).
//! - [`deployment`]: rolls MachineSets out (RollingUpdate, Recreate),
//!   scales them (proportionally during a rollout), rolls back, pauses,
//!   cleans up revision history, maintains status and conditions, and
//!   applies the cluster-autoscaler's deletion annotation.
//! - [`safety`]: the overshoot freeze: sets with too many machines get the
//!   `freeze` label and a `Frozen` condition (no more creations) until the
//!   count drops or the unfreeze annotation is set.
//!
//! One watch per kind (Machines, MachineSets, MachineDeployments) fills the
//! shared caches; each controller's [`crate::routing::Route`] maps every
//! change (deletions included) to the keys it concerns: a Machine to its
//! MachineSet (orphans to every set whose selector matches) and to that
//! set's MachineDeployment; a MachineSet to its deployment. Every reconcile
//! reads its object from the cache; every
//! write of a computed value carries a resourceVersion precondition, and a
//! MachineSet does not act on its machine count while creations or
//! deletions it made are not yet visible in the cache.
//!
//! Without a target cluster this module never touches Nodes: the
//! prefer-no-schedule taints and cluster-autoscaler node annotations of a
//! rollout, the node `preserve` annotation and the InPlaceUpdate strategy
//! (which needs the node agent protocol) are not available here.

pub(crate) mod deployment;
pub(crate) mod machineset;
pub(crate) mod overshoot;
pub(crate) mod rollout_nodes;

use crate::caches::{Change, Triggers};
use crate::events::Recorder;
use crate::keys::{Kind, ObjectKey};
use crate::metadata::{finalizer, version_of, MetaPatch};
use crate::routing::{error_policy, key_of, Route};
use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use mcm_api::{Machine, MachineDeployment, MachineSet};
use mcm_core::replicas::{controller_ref, selector_is_empty, selector_matches, Expectations};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tracing::{debug, info};

/// Settings of the MachineSet / MachineDeployment controllers and the safety
/// loop ([`crate::Config::sets`]; the concurrency and the retry periods are
/// the process's, in [`crate::Config`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SetsConfig {
    /// Extra machines above the limit before a set is frozen (`--safety-up`, default 2).
    pub safety_up: i32,
    /// How far below the freeze limit the count must fall to unfreeze (`--safety-down`, default 1).
    pub safety_down: i32,
    /// Period of the overshoot check (`--machine-safety-overshooting-period`, default 1 min).
    pub overshooting_period: Duration,
    /// Periodic re-reconcile of every set and deployment (reference: 10 min).
    pub resync_period: Duration,
    /// `reportingInstance` of the Events (e.g. the pod name).
    pub reporting_instance: Option<String>,
    /// Cluster-autoscaler scale-down-disabled annotations on the Nodes during a
    /// rollout (`--autoscaler-scaledown-annotation-during-rollout`, default true;
    /// needs a target cluster, see [`run_with_target`]).
    pub autoscaler_scaledown_annotation_during_rollout: bool,
}

impl Default for SetsConfig {
    fn default() -> Self {
        SetsConfig {
            safety_up: mcm_core::defaults::SAFETY_UP,
            safety_down: mcm_core::defaults::SAFETY_DOWN,
            overshooting_period: mcm_core::defaults::OVERSHOOTING_PERIOD.value,
            resync_period: mcm_core::defaults::RESYNC_PERIOD.value,
            reporting_instance: None,
            autoscaler_scaledown_annotation_during_rollout: true,
        }
    }
}

/// The errors of the set controllers: the runtime's one error type.
pub(crate) use crate::Error;

pub(crate) use crate::{is_conflict, is_not_found};

/// The set controllers run on the process's one [`crate::Context`].
pub(crate) type Ctx = crate::Context;

/// What the set controllers keep between reconciles, in the [`crate::Context`].
pub(crate) struct SetsState {
    /// Machine creations and deletions, on the MachineSet: the reference's
    /// `machineset-controller` component.
    pub(crate) set_recorder: Recorder,
    /// MachineDeployment and safety Events: the reference writes them with
    /// its process recorder, component `machine-controller-manager`.
    pub(crate) manager_recorder: Recorder,
    /// Stale machines deleted (`mcm_machine_stale_machines_total`, served
    /// by the half's `SetMetrics`).
    pub(crate) stale_machines: prometheus_client::metrics::counter::Counter,
    /// When this process last wrote each set's and deployment's status
    /// (`Context::status_write_wait`).
    pub(crate) status_written: Mutex<crate::pruned::Pruned<crate::keys::ObjectKey, Instant>>,
    pub(crate) expectations: Mutex<Expectations>,
    pub(crate) safety_wakeup: Notify,
}

impl SetsState {
    pub(crate) fn new(client: &Client, config: &SetsConfig) -> Self {
        let reporter = |controller: &str| Reporter {
            controller: controller.to_string(),
            instance: config.reporting_instance.clone(),
        };
        SetsState {
            set_recorder: Recorder::new(client.clone(), reporter("machineset-controller")),
            manager_recorder: Recorder::new(client.clone(), reporter("machine-controller-manager")),
            stale_machines: Default::default(),
            status_written: Mutex::new(crate::pruned::Pruned::new()),
            expectations: Mutex::new(Expectations::new()),
            safety_wakeup: Notify::new(),
        }
    }
}

/// Waits until the caches the set controllers read hold a full list.
async fn caches_ready(ctx: &Ctx) {
    ctx.caches.machines.synced().await;
    ctx.caches.sets.synced().await;
    ctx.caches.deployments.synced().await;
    if let Some(nodes) = &ctx.caches.nodes {
        nodes.synced().await;
    }
}

/// Publishes an Event, logging (not failing) when that is impossible.
pub(crate) async fn publish<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
    action: &str,
) {
    recorder.note(obj, type_, reason, note, action).await;
}

/// The conditions with the failure condition replaced by `new`, or `None`
/// when an equal one (`same`) is already there, so repeated syncs write nothing.
pub(crate) fn replace_failure_condition<C: Clone>(
    current: &[C],
    is_failure: impl Fn(&C) -> bool,
    same: impl Fn(&C) -> bool,
    new: C,
) -> Option<Vec<C>> {
    if current.iter().any(|c| is_failure(c) && same(c)) {
        return None;
    }
    let mut out: Vec<C> = current.iter().filter(|c| !is_failure(c)).cloned().collect();
    out.push(new);
    Some(out)
}

/// The validation errors that keep an object from being acted upon, as one
/// message, or `None`. An object being deleted needs no timeouts: a bad one
/// must not keep its finalizer (its deletion only deletes what it owns). Nor
/// does a label key the controllers own keep it: the claim keeps what the
/// object created whatever such a label says now
/// ([`mcm_core::replicas::selection`]), so its deletion finds them.
pub(crate) fn blocking_errors(
    validation: Result<(), Vec<mcm_api::validation::FieldError>>,
    deleting: bool,
) -> Option<String> {
    use mcm_api::validation::{is_controller_label_error, is_timeout_error};
    let errs: Vec<_> = validation
        .err()?
        .into_iter()
        .filter(|e| !(deleting && (is_timeout_error(e) || is_controller_label_error(e))))
        .collect();
    (!errs.is_empty()).then(|| mcm_api::validation::aggregate(&errs))
}

/// The controller ownerReference pointing at `owner`.
pub(crate) fn owner_reference<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether the object carries the MCM finalizer.
pub(crate) fn has_finalizer<K: Resource>(obj: &K) -> bool {
    finalizer::has(obj, mcm_api::constants::MCM_FINALIZER)
}

/// Adds the MCM finalizer (resourceVersion-guarded merge patch).
pub(crate) async fn add_finalizer<K>(api: &Api<K>, obj: &K) -> Result<K, Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let updated = finalizer::add(api, obj, mcm_api::constants::MCM_FINALIZER).await?;
    Ok(updated.unwrap_or_else(|| obj.clone()))
}

/// Removes the MCM finalizer (resourceVersion-guarded merge patch).
pub(crate) async fn remove_finalizer<K>(api: &Api<K>, obj: &K) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    finalizer::remove(api, obj, mcm_api::constants::MCM_FINALIZER).await?;
    Ok(())
}

/// Makes `owner` the controller of `obj`, keeping its other (non-controller)
/// owners; guarded by `obj`'s resourceVersion.
pub(crate) async fn adopt<K, O>(api: &Api<K>, obj: &K, owner: &O) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    O: Resource<DynamicType = ()>,
{
    let mut refs: Vec<OwnerReference> = obj
        .meta()
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.controller != Some(true))
        .collect();
    refs.push(owner_reference(owner));
    MetaPatch::new()
        .owner_references(refs)
        .guarded_by(version_of(obj))
        .send(api, &obj.name_any())
        .await
}

/// Removes the ownerReference with `owner_uid` from `obj` (for real: the
/// reference's `$patch: delete` inside a merge patch is a no-op; design:
/// sets-and-deployments.md, "Where mcm-rs differs from the reference", item 2).
pub(crate) async fn release<K>(api: &Api<K>, obj: &K, owner_uid: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let refs: Vec<OwnerReference> = obj
        .meta()
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.uid != owner_uid)
        .collect();
    MetaPatch::new()
        .owner_references(refs)
        .guarded_by(version_of(obj))
        .send_unless_gone(api, &obj.name_any())
        .await?;
    Ok(())
}

/// The MachineSets a Machine change concerns: its controller (kind
/// MachineSet), or for an orphan every set whose non-empty selector matches.
fn sets_for_machine(m: &Machine, sets: &Store<MachineSet>, ns: &str) -> Vec<ObjectKey> {
    match controller_ref(&m.metadata) {
        Some(c) if c.kind == "MachineSet" => vec![ObjectKey::new(Kind::MachineSet, ns, &c.name)],
        Some(_) => Vec::new(),
        None => {
            let labels = m.metadata.labels.clone().unwrap_or_default();
            sets.state()
                .iter()
                .filter(|s| {
                    s.spec.selector.as_ref().is_some_and(|sel| {
                        !selector_is_empty(sel) && selector_matches(sel, &labels).unwrap_or(false)
                    })
                })
                .map(|s| key_of(&**s))
                .collect()
        }
    }
}

/// The MachineDeployments a MachineSet change concerns: its controller, or
/// for an orphan every deployment whose non-empty selector matches.
fn deployments_for_set(
    s: &MachineSet,
    deployments: &Store<MachineDeployment>,
    ns: &str,
) -> Vec<ObjectKey> {
    match controller_ref(&s.metadata) {
        Some(c) if c.kind == "MachineDeployment" => {
            vec![ObjectKey::new(Kind::MachineDeployment, ns, &c.name)]
        }
        Some(_) => Vec::new(),
        None => {
            let labels = s.metadata.labels.clone().unwrap_or_default();
            deployments
                .state()
                .iter()
                .filter(|d| {
                    d.spec.selector.as_ref().is_some_and(|sel| {
                        !selector_is_empty(sel) && selector_matches(sel, &labels).unwrap_or(false)
                    })
                })
                .map(|d| key_of(&**d))
                .collect()
        }
    }
}

/// The deployment of a machine's set (machine → set → deployment by controller refs).
fn deployments_for_machine(m: &Machine, sets: &Store<MachineSet>, ns: &str) -> Vec<ObjectKey> {
    let Some(c) = controller_ref(&m.metadata).filter(|c| c.kind == "MachineSet") else {
        return Vec::new();
    };
    sets.get(&ObjectRef::new(&c.name).within(ns))
        .and_then(|s| controller_ref(&s.metadata))
        .filter(|d| d.kind == "MachineDeployment")
        .map(|d| vec![ObjectKey::new(Kind::MachineDeployment, ns, &d.name)])
        .unwrap_or_default()
}

/// The MachineSet controller's work: its sets' changes, and the sets each
/// Machine change concerns.
fn set_controller(ctx: &Arc<Ctx>) -> kube::runtime::Controller<MachineSet> {
    let route = Route::new(ctx, (*ctx.caches.sets).clone());
    let own = route.own(ctx.caches.sets.subscribe(), route.applied_or_all());
    let (sets, ns) = ((*ctx.caches.sets).clone(), ctx.config.namespace.clone());
    let machines = route.mapped_or_all(ctx.caches.machines.subscribe(), move |m| {
        sets_for_machine(m, &sets, &ns)
    });
    route
        .controller(own, ctx.config.concurrent_syncs)
        .reconcile_on(machines)
}

/// The MachineDeployment controller's work: its deployments' changes, the
/// deployment of each changed MachineSet and of each changed Machine's set.
fn deployment_controller(ctx: &Arc<Ctx>) -> kube::runtime::Controller<MachineDeployment> {
    let route = Route::new(ctx, (*ctx.caches.deployments).clone());
    let own = route.own(ctx.caches.deployments.subscribe(), route.applied_or_all());
    let (deployments, ns) = (
        (*ctx.caches.deployments).clone(),
        ctx.config.namespace.clone(),
    );
    let sets = route.mapped_or_all(ctx.caches.sets.subscribe(), move |s| {
        deployments_for_set(s, &deployments, &ns)
    });
    let (set_store, ns) = ((*ctx.caches.sets).clone(), ctx.config.namespace.clone());
    let machines = route.mapped_or_all(ctx.caches.machines.subscribe(), move |m| {
        deployments_for_machine(m, &set_store, &ns)
    });
    route
        .controller(own, ctx.config.concurrent_syncs)
        .reconcile_on(sets)
        .reconcile_on(machines)
}

/// Wakes the overshoot safety loop on every Machine change, every
/// MachineDeployment applied (it counts machines per set and deployment),
/// and every MachineSet change of what a pass reads of the set
/// ([`overshoot::wakes_the_pass`]), its deletion or a re-list: a set's
/// unfreeze annotation is acted on at once, not a period later.
async fn wake_safety(ctx: Arc<Ctx>) {
    let machines = ctx.caches.machines.subscribe().map(|_| ());
    let deployments = ctx
        .caches
        .deployments
        .subscribe()
        .flat_map(|c| futures::stream::iter(matches!(c, Change::Applied(_)).then_some(())));
    let (store, mut read_by_pass) = (
        (*ctx.caches.sets).clone(),
        Triggers::new(overshoot::wakes_the_pass),
    );
    let sets = ctx.caches.sets.subscribe().flat_map(move |c| {
        let applied = matches!(c, Change::Applied(_));
        let moved = !read_by_pass.filter(c, &store).is_empty();
        futures::stream::iter((moved || !applied).then_some(()))
    });
    let mut changes = futures::stream::select(futures::stream::select(machines, deployments), sets);
    while changes.next().await.is_some() {
        ctx.sets.safety_wakeup.notify_one();
    }
}

/// Runs the MachineSet and MachineDeployment controllers and the safety loop
/// in `namespace` until `shutdown` completes (reconciles in flight finish, no
/// new ones start).
pub async fn run_until(
    client: Client,
    namespace: String,
    config: SetsConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    run_with_target(client, None, namespace, config, shutdown).await;
}

/// Like [`run_until`], with the target cluster's client: rollouts then taint
/// and annotate the Nodes of their machines (prefer-no-schedule,
/// cluster-autoscaler scale-down-disabled). Builds a [`crate::Context`] of
/// its own with the default process settings; [`run_with`] runs on one that
/// is shared with the machine controllers.
pub async fn run_with_target(
    client: Client,
    target: Option<Client>,
    namespace: String,
    config: SetsConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let config = crate::Config {
        namespace,
        concurrent_syncs: 10,
        sets: config,
        ..crate::Config::default()
    };
    let ctx = crate::Context::new(
        client,
        target,
        config,
        crate::DriverRegistry::new(),
        Arc::new(crate::metrics::Metrics::new(
            &mut prometheus_client::registry::Registry::default(),
        )),
    );
    run_with(ctx, shutdown).await;
}

/// Runs the MachineSet and MachineDeployment controllers and the safety loop
/// on the process's [`crate::Context`] until `shutdown` completes
/// (reconciles in flight finish, no new ones start). `--concurrent-syncs`
/// and the retry periods come from its [`crate::Config`].
pub async fn run_with(ctx: Arc<Ctx>, shutdown: impl Future<Output = ()> + Send + 'static) {
    ctx.workqueues
        .declare(&crate::metrics::workqueue::MANAGER_QUEUES);
    let shutdown = shutdown.boxed().shared();
    let namespace = ctx.config.namespace.clone();
    info!(namespace = %namespace, "starting MachineSet and MachineDeployment controllers");
    let set_controller = set_controller(&ctx)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            machineset::reconcile,
            error_policy::<MachineSet>,
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "machineset reconcile");
            }
        });
    let deployment_controller = deployment_controller(&ctx)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            deployment::reconcile,
            error_policy::<MachineDeployment>,
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "machinedeployment reconcile");
            }
        });
    let safety_loop = overshoot::run(ctx.clone(), shutdown.clone());
    let ready = ctx.clone();
    let work = async move {
        tokio::select! {
            _ = caches_ready(&ready) => {},
            _ = shutdown.clone() => return,
        }
        info!("caches filled, controllers running");
        futures::future::join3(set_controller, deployment_controller, safety_loop).await;
    };
    tokio::select! {
        _ = work => {}
        _ = wake_safety(ctx.clone()) => {}
    }
    info!(namespace = %namespace, "MachineSet and MachineDeployment controllers stopped");
}

/// The periodic re-reconcile, shortened to `soon` when something is pending.
pub(crate) fn requeue(ctx: &Ctx, soon: Option<Duration>) -> Action {
    match soon {
        Some(d) if d < ctx.config.sets.resync_period => Action::requeue(d),
        _ => Action::requeue(ctx.config.sets.resync_period),
    }
}
