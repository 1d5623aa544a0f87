//! What every controller shares: clients, caches, drivers, the event
//! recorders, metrics and per-object backoff state.

use crate::caches::Caches;
use crate::events::Recorder;
use crate::keys::{Kind, ObjectKey};
use crate::pruned::Pruned;
use crate::status::machine::MachineStatusChange;
use crate::{metrics::Metrics, Config};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, Store};
use kube::{Api, Client};
use mcm_core::backoff::{Backoff, FailureKind};
use mcm_driver::Driver;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The compiled-in drivers, selected by a MachineClass's `provider` field
/// (case-insensitive).
#[derive(Clone, Default)]
pub struct DriverRegistry {
    drivers: HashMap<String, Arc<dyn Driver>>,
    default: Option<String>,
}

impl DriverRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a driver for a provider name. The first one registered is also
    /// used for classes without a `provider` field.
    pub fn register(&mut self, provider: &str, driver: Arc<dyn Driver>) -> &mut Self {
        let key = provider.to_ascii_lowercase();
        if self.default.is_none() {
            self.default = Some(key.clone());
        }
        self.drivers.insert(key, driver);
        self
    }

    /// The driver for a class's `provider` field.
    pub fn get(&self, provider: Option<&str>) -> Option<Arc<dyn Driver>> {
        let key = match provider {
            Some(p) if !p.is_empty() => p.to_ascii_lowercase(),
            _ => self.default.clone()?,
        };
        self.drivers.get(&key).cloned()
    }

    /// Every registered driver.
    pub(crate) fn drivers(&self) -> impl Iterator<Item = &Arc<dyn Driver>> {
        self.drivers.values()
    }

    /// The registered provider names.
    pub fn providers(&self) -> Vec<String> {
        let mut v: Vec<String> = self.drivers.keys().cloned().collect();
        v.sort();
        v
    }
}

/// The kube clients of a process. The reference builds one clientset per
/// role (the control cluster's Machine API, its core API, the target
/// cluster), and client-go gives each clientset its own `--kube-api-qps` /
/// `--kube-api-burst` budget; `mcm run` builds one client per role the same
/// way, so a burst of Machine writes never delays an Event or a Node request
/// (design: docs/design/runtime.md, "Clients and their budgets").
#[derive(Clone)]
pub struct Clients {
    /// The control cluster: Machines, sets, classes, Secrets.
    pub control: Client,
    /// The control cluster, for Events.
    pub events: Client,
    /// The target cluster (Nodes, Pods, VolumeAttachments, bootstrap
    /// tokens); `None` runs without a target cluster.
    pub target: Option<Client>,
    /// The API-server status check's own clients (`None`: the control and
    /// target clients above), so a busy control client never makes a
    /// healthy API server look unreachable.
    pub probes: Option<ProbeClients>,
    /// The REST client series the clients' layer writes (`rest_client_*`),
    /// owned by the Context built on them (default: a fresh, unserved set).
    pub rest: crate::metrics::rest::RestMetrics,
}

/// The clients of the API-server status check
/// (`--machine-safety-apiserver-statuscheck-*`), each with a budget of its
/// own.
#[derive(Clone)]
pub struct ProbeClients {
    /// The control cluster.
    pub control: Client,
    /// The target cluster (`None` without one).
    pub target: Option<Client>,
}

/// What every controller of the process shares (design:
/// docs/design/runtime.md): the clients, the caches (one watch per kind),
/// the settings, the drivers, the Event recorders, the metrics and one
/// per-object backoff. The Machine and class controllers, the set
/// controllers and the safety loops all run on one `Arc<Context>`.
pub struct Context {
    /// The control cluster (Machines, MachineClasses, Secrets).
    pub(crate) client: Client,
    /// The target cluster (Nodes); `None` runs without a target cluster.
    pub(crate) target: Option<Client>,
    /// Settings.
    pub(crate) config: Config,
    /// The drivers.
    pub drivers: DriverRegistry,
    /// Publishes Events on Machines.
    pub(crate) recorder: Recorder,
    /// Metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// The shared caches: one watch per kind for every controller.
    pub caches: Caches,
    /// The target cluster's Nodes (the shared cache's store; empty without a
    /// target cluster).
    pub(crate) nodes: Store<Node>,
    /// What the set controllers keep between reconciles.
    pub(crate) sets: crate::sets::SetsState,
    backoff: Backoff,
    failures: Mutex<Pruned<ObjectKey, u32>>,
    /// Per machine: when its creation flow may start again.
    creation_attempts: Mutex<Pruned<ObjectKey, std::time::Instant>>,
    /// Machines whose finalizer this process removed (key → UID), until the
    /// cache drops them.
    released: Mutex<Pruned<ObjectKey, String>>,
    frozen: AtomicBool,
    /// Serialises Unknown→Failed per MachineDeployment and remembers the
    /// marks granted but not yet listed (at most one replacement at a time).
    pub(crate) failed_marks: tokio::sync::Mutex<mcm_core::machine::FailedMarks>,
    /// The running drains, at most one per machine (they hold no reconcile slot).
    pub drains: crate::drain::tasks::DrainTasks,
    /// The machines' queue in front of the cloud budget.
    pub pacer: crate::pacing::Pacer,
    /// The machine half's tenure: every mutating cloud call
    /// (`Context::observed_driver`) and every drain request checks it first
    /// (design: docs/design/leader-election.md, "One tenure deadline").
    /// Unbounded unless the process runs the half under leader election.
    pub tenure: crate::leader::TenureGate,
    /// The API-server status check's clients.
    pub(crate) probes: ProbeClients,
    /// The REST client series of the clients (`rest_client_*`), which the
    /// process registers with `RestMetrics::register`.
    pub rest: crate::metrics::rest::RestMetrics,
    /// The work queues' series (`mcm_workqueue_*`), which the process
    /// registers with `metrics::workqueue::register`.
    pub workqueues: Arc<crate::metrics::workqueue::WorkQueues>,
    /// The bootstrap-token Secrets this process issued, per machine, until
    /// the machine joined (`Context::take_issued_token`).
    issued_tokens: Mutex<Pruned<ObjectKey, crate::class::TokenSecret>>,
    /// Status changes a deletion reconcile staged and carried while it
    /// waited for the cloud's turn, by machine (with its UID and the phase
    /// the API server last saw): `Context::carry_stage`.
    carried_stages: Mutex<Pruned<ObjectKey, CarriedStage>>,
    /// The machine controller's own last writes, for reconciles that start
    /// from a cached copy those writes superseded (`Context::machine_to_reconcile`).
    own_writes: crate::own_writes::OwnWrites,
    /// The providerSpec warnings published per class (class/spec_warnings.rs).
    pub(crate) spec_warnings: crate::class::spec_warnings::Published,
}

impl Context {
    /// Builds the context with caches of its own.
    pub fn new(
        client: Client,
        target: Option<Client>,
        config: Config,
        drivers: DriverRegistry,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let caches = Caches::new(&client, target.as_ref(), &config.namespace);
        Self::with_caches(client, target, config, drivers, metrics, caches)
    }

    /// Builds the context on caches that already exist, with one client
    /// for the control cluster's Machine API and its Events.
    pub(crate) fn with_caches(
        client: Client,
        target: Option<Client>,
        config: Config,
        drivers: DriverRegistry,
        metrics: Arc<Metrics>,
        caches: Caches,
    ) -> Arc<Self> {
        let clients = Clients {
            events: client.clone(),
            control: client,
            target,
            probes: None,
            rest: Default::default(),
        };
        Self::with_clients(clients, config, drivers, metrics, caches)
    }

    /// Builds the context on caches that already exist, each client with
    /// its own request budget (see [`Clients`]).
    pub fn with_clients(
        clients: Clients,
        config: Config,
        drivers: DriverRegistry,
        metrics: Arc<Metrics>,
        caches: Caches,
    ) -> Arc<Self> {
        let Clients {
            control: client,
            events,
            target,
            probes,
            rest,
        } = clients;
        let probes = probes.unwrap_or_else(|| ProbeClients {
            control: client.clone(),
            target: target.clone(),
        });
        let recorder = Recorder::new(
            events.clone(),
            Reporter {
                controller: "machine-controller".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let backoff = Backoff {
            min: config.short_retry,
            max: config.long_retry,
            ..Backoff::default()
        };
        let nodes = match &caches.nodes {
            Some(n) => (**n).clone(),
            None => reflector::store().0,
        };
        let sets = crate::sets::SetsState::new(&events, &config.sets);
        // The drivers' cloud API calls move this Context's series (no
        // process-wide registry: two Contexts share none).
        for api in drivers.drivers().filter_map(|d| d.cloud_api()) {
            api.add_observer(metrics.cloud_api_observer());
        }
        Arc::new(Context {
            client,
            target,
            config,
            drivers,
            recorder,
            metrics,
            caches,
            nodes,
            sets,
            backoff,
            failures: Mutex::new(Pruned::new()),
            creation_attempts: Mutex::new(Pruned::new()),
            released: Mutex::new(Pruned::new()),
            frozen: AtomicBool::new(false),
            failed_marks: tokio::sync::Mutex::new(Default::default()),
            drains: crate::drain::tasks::DrainTasks::new(),
            pacer: crate::pacing::Pacer::new(),
            tenure: crate::leader::TenureGate::unbounded(),
            probes,
            rest,
            spec_warnings: Default::default(),
            issued_tokens: Mutex::new(Pruned::new()),
            carried_stages: Mutex::new(Pruned::new()),
            own_writes: crate::own_writes::OwnWrites::default(),
            workqueues: Default::default(),
        })
    }

    /// The count of stale machines the MachineSet controller deleted, for
    /// the half's `SetMetrics`.
    pub fn stale_machines(&self) -> prometheus_client::metrics::counter::Counter {
        self.sets.stale_machines.clone()
    }

    /// The key of the object `name` of `kind` in the control namespace.
    pub(crate) fn key(&self, kind: Kind, name: &str) -> ObjectKey {
        ObjectKey::new(kind, &self.config.namespace, name)
    }

    /// How long a status write of the set or deployment `key` must wait
    /// (`mcm_core::status_pace`); `None`: write now, recorded as written.
    pub(crate) fn status_write_wait(&self, key: &ObjectKey, counts_only: bool) -> Option<Duration> {
        let exists = self.machine_exists();
        let mut map = self.sets.status_written.lock().ok()?;
        let now = std::time::Instant::now();
        let since = map.get(key).map(|t| now.saturating_duration_since(*t));
        if let Some(wait) = mcm_core::status_pace::write_wait(counts_only, since) {
            return Some(wait);
        }
        *map.entry(key, now, exists) = now;
        None
    }

    /// Remembers the bootstrap-token Secret issued to machine `key`.
    pub(crate) fn issued_token(&self, key: &ObjectKey, secret: crate::class::TokenSecret) {
        let exists = self.machine_exists();
        if let Ok(mut map) = self.issued_tokens.lock() {
            let kept = secret.clone();
            *map.entry(key, secret, exists) = kept;
        }
    }

    /// The bootstrap-token Secret this process issued to machine `key`, forgotten.
    pub(crate) fn take_issued_token(&self, key: &ObjectKey) -> Option<crate::class::TokenSecret> {
        self.issued_tokens.lock().ok()?.remove(key)
    }

    /// Keeps machine `key`'s unwritten status change for its next reconcile.
    pub(crate) fn carry_stage(
        &self,
        key: &ObjectKey,
        uid: String,
        change: MachineStatusChange,
        written_phase: mcm_api::MachinePhase,
    ) {
        let exists = self.machine_exists();
        if let Ok(mut map) = self.carried_stages.lock() {
            *map.entry(key, CarriedStage::default(), exists) = CarriedStage {
                uid,
                change,
                written_phase,
            };
        }
    }

    /// Machine `key`'s carried status change, forgotten; `None` when there is
    /// none or it was carried for another object of that name (`uid`).
    pub(crate) fn take_carried_stage(
        &self,
        key: &ObjectKey,
        uid: &str,
    ) -> Option<(MachineStatusChange, mcm_api::MachinePhase)> {
        let carried = self.carried_stages.lock().ok()?.remove(key)?;
        (carried.uid == uid).then_some((carried.change, carried.written_phase))
    }

    /// Records a write of machine `key`: it superseded the copies at
    /// `superseded`, and the API server answered `answer`.
    pub(crate) fn wrote_machine(
        &self,
        key: &ObjectKey,
        superseded: &[String],
        answer: &mcm_api::Machine,
    ) {
        self.own_writes
            .wrote(key, superseded, answer, self.machine_exists());
    }

    /// The copy of machine `key` a reconcile starts from: the answer to this
    /// process's last write when `cached` is a copy it superseded.
    pub(crate) fn machine_to_reconcile(
        &self,
        key: &ObjectKey,
        cached: Arc<mcm_api::Machine>,
    ) -> Arc<mcm_api::Machine> {
        self.own_writes.newest(key, cached)
    }

    /// Machines of the control namespace.
    pub(crate) fn machines(&self) -> Api<mcm_api::Machine> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    /// MachineSets of the control namespace.
    pub(crate) fn machine_sets(&self) -> Api<mcm_api::MachineSet> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    /// MachineDeployments of the control namespace.
    pub(crate) fn machine_deployments(&self) -> Api<mcm_api::MachineDeployment> {
        Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    /// The delay before retrying `key` after `err`: a conflict (someone
    /// wrote first) is retried soon, everything else with the backoff.
    pub(crate) fn error_delay(&self, key: &ObjectKey, err: &crate::Error) -> Duration {
        if err.is_conflict() {
            return mcm_core::backoff::periods::CONFLICT;
        }
        self.failure_delay(key, FailureKind::Normal)
    }

    /// The one error policy of every controller: counts the retry on
    /// `queue`, logs, and requeues `key`. A conflict (someone wrote first;
    /// the cache will show it) is expected and retried soon at debug level;
    /// anything else is a warning and backs off per key.
    pub(crate) fn requeue_after_error(
        &self,
        queue: &'static str,
        key: &ObjectKey,
        err: &crate::Error,
    ) -> kube::runtime::controller::Action {
        self.workqueues.retry(queue);
        if err.is_conflict() {
            tracing::debug!(queue, %key, error = %err, "reconcile met a write conflict; retrying soon");
        } else {
            tracing::warn!(queue, %key, error = %err, "reconcile failed");
        }
        kube::runtime::controller::Action::requeue(self.error_delay(key, err))
    }

    /// Records a failure for `key` and returns the delay before the next try.
    pub(crate) fn failure_delay(&self, key: &ObjectKey, kind: FailureKind) -> Duration {
        let exists = self.machine_exists();
        let n = match self.failures.lock() {
            Ok(mut map) => {
                let n = map.entry(key, 0, exists);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        self.backoff.delay(n, kind, rand::random::<f64>())
    }

    /// Forgets the failures of `key` (after a success).
    pub(crate) fn reset_backoff(&self, key: &ObjectKey) {
        if let Ok(mut map) = self.failures.lock() {
            map.remove(key);
        }
        if let Ok(mut map) = self.creation_attempts.lock() {
            map.remove(key);
        }
    }

    /// The driver of a class's `provider`, its calls writing the driver
    /// series and its mutating calls refused once this half's tenure ended
    /// (`metrics::driver::Observed`): the one way a controller gets a
    /// driver to call the cloud with.
    pub(crate) fn observed_driver(&self, provider: &str) -> Option<Arc<dyn Driver>> {
        let driver = self.drivers.get(Some(provider))?;
        Some(crate::metrics::driver::Observed::wrap(
            driver,
            self.metrics.clone(),
            provider,
            self.tenure.clone(),
        ))
    }

    /// Records that this process removed the finalizer of the Machine `key`
    /// with `uid`: the object is gone, whatever the cache still shows.
    pub(crate) fn released(&self, key: &ObjectKey, uid: &str) {
        let exists = self.machine_exists();
        if let Ok(mut map) = self.released.lock() {
            *map.entry(key, String::new(), exists) = uid.to_string();
        }
    }

    /// Whether the Machine `key` with `uid` had its finalizer removed here. A
    /// reconcile of such a copy (the cache lags the removal; a Node deletion
    /// or a drain wake-up may still route to it) has nothing left to do, and
    /// acting on it would repeat the deletion from its last written step.
    pub(crate) fn was_released(&self, key: &ObjectKey, uid: &str) -> bool {
        self.released
            .lock()
            .is_ok_and(|m| m.get(key).is_some_and(|u| !uid.is_empty() && u == uid))
    }

    /// How long the creation flow of `key` must still wait: `Some(wait)` while its last
    /// attempt ended less than `short_retry` ago, or a hold ([`Context::hold_creation`],
    /// `--resource-exhausted-retry`) has not passed. A watch event (the controller's own
    /// finalizer, a label edit) therefore never makes the provider see a retry sooner
    /// than that, whatever the backoff had scheduled.
    pub(crate) fn creation_wait(&self, key: &ObjectKey) -> Option<Duration> {
        let map = self.creation_attempts.lock().ok()?;
        let wait = map
            .get(key)?
            .saturating_duration_since(std::time::Instant::now());
        (!wait.is_zero()).then_some(wait)
    }

    /// Records that a creation attempt of `key` ended now: the next one
    /// starts `short_retry` later at the earliest.
    pub(crate) fn creation_attempted(&self, key: &ObjectKey) {
        self.hold_creation(key, self.config.short_retry);
    }

    /// The creation flow of `key` starts again `hold` from now at the
    /// earliest (a longer hold already set stays).
    pub(crate) fn hold_creation(&self, key: &ObjectKey, hold: Duration) {
        let exists = self.machine_exists();
        let until = std::time::Instant::now() + hold;
        if let Ok(mut map) = self.creation_attempts.lock() {
            let not_before = map.entry(key, until, exists);
            *not_before = (*not_before).max(until);
        }
    }

    /// The shortest delay [`Context::failure_delay`] gives after the
    /// failures recorded for `key` (at least one): how long a failed step
    /// waits before its retry even when something else wakes the object up.
    pub(crate) fn failure_floor(&self, key: &ObjectKey) -> Duration {
        self.backoff
            .delay(self.failures(key).max(1), FailureKind::Normal, 0.0)
    }

    /// The number of consecutive failures recorded for `key`.
    pub(crate) fn failures(&self, key: &ObjectKey) -> u32 {
        self.failures
            .lock()
            .map(|m| m.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Whether the object of a bookkeeping key still exists (for maps of
    /// per-object state outside the context).
    pub(crate) fn machine_key_exists(&self) -> impl Fn(&ObjectKey) -> bool {
        self.machine_exists()
    }

    /// Whether the object of a bookkeeping key still exists in the caches
    /// (always `true` before they are filled): what [`Pruned`] keeps.
    fn machine_exists(&self) -> impl Fn(&ObjectKey) -> bool {
        let caches = self.caches.clone();
        move |key: &ObjectKey| {
            let (ns, name) = (key.namespace.as_str(), key.name.as_str());
            match key.kind {
                Kind::MachineSet => caches.sets.may_hold(ns, name),
                Kind::MachineDeployment => caches.deployments.may_hold(ns, name),
                Kind::Machine => caches.machines.may_hold(ns, name),
                Kind::MachineClass => caches.classes.may_hold(ns, name),
            }
        }
    }

    /// The shared cache of Machines, once it is filled.
    pub(crate) fn machine_store(&self) -> Option<Store<mcm_api::Machine>> {
        self.caches
            .machines
            .is_synced()
            .then(|| (*self.caches.machines).clone())
    }

    /// How many machines the cache holds.
    pub(crate) fn machine_count(&self) -> i64 {
        self.caches.machines.state().len() as i64
    }

    /// Whether machine reconciliation is frozen (API servers unreachable).
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    /// Freezes or unfreezes machine reconciliation.
    pub fn set_frozen(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::Relaxed);
        self.metrics.frozen.set(i64::from(frozen));
    }
}

/// A status change carried from one deletion reconcile to the next
/// ([`Context::carry_stage`]).
#[derive(Default)]
struct CarriedStage {
    uid: String,
    change: MachineStatusChange,
    written_phase: mcm_api::MachinePhase,
}
