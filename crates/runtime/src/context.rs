//! What every reconcile shares: clients, caches, drivers, the event recorder,
//! metrics and per-machine backoff state.

use crate::bounded::Pruned;
use crate::events::Recorder;
use crate::{metrics::Metrics, Config};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, Store};
use kube::Client;
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

    /// The registered provider names.
    pub fn providers(&self) -> Vec<String> {
        let mut v: Vec<String> = self.drivers.keys().cloned().collect();
        v.sort();
        v
    }
}

/// Shared state of the machine controllers.
pub struct Context {
    /// The control cluster (Machines, MachineClasses, Secrets).
    pub client: Client,
    /// The target cluster (Nodes); `None` runs without a target cluster.
    pub target: Option<Client>,
    /// Settings.
    pub config: Config,
    /// The drivers.
    pub drivers: DriverRegistry,
    /// Publishes Events on Machines.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Cache of the target cluster's Nodes (filled by the machine controller).
    pub nodes: Store<Node>,
    node_writer: Mutex<Option<reflector::store::Writer<Node>>>,
    backoff: Backoff,
    failures: Mutex<Pruned<u32>>,
    creation_attempts: Mutex<Pruned<std::time::Instant>>,
    frozen: AtomicBool,
    machines: Mutex<Option<Store<mcm_api::Machine>>>,
    /// Serialises Unknown→Failed per MachineDeployment (at most one replacement at a time).
    pub failed_permits: tokio::sync::Mutex<()>,
    /// The running drains, at most one per machine (they hold no reconcile slot).
    pub drains: crate::drain::tasks::DrainTasks,
}

impl Context {
    /// Builds the context.
    pub fn new(
        client: Client,
        target: Option<Client>,
        config: Config,
        drivers: DriverRegistry,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "machine-controller".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let (nodes, writer) = reflector::store();
        let backoff = Backoff {
            min: config.short_retry,
            max: config.long_retry,
            ..Backoff::default()
        };
        Arc::new(Context {
            client,
            target,
            config,
            drivers,
            recorder,
            metrics,
            nodes,
            node_writer: Mutex::new(Some(writer)),
            backoff,
            failures: Mutex::new(Pruned::new()),
            creation_attempts: Mutex::new(Pruned::new()),
            frozen: AtomicBool::new(false),
            failed_permits: tokio::sync::Mutex::new(()),
            machines: Mutex::new(None),
            drains: crate::drain::tasks::DrainTasks::new(),
        })
    }

    /// Takes the node cache's writer (once, for the controller that fills it).
    pub(crate) fn take_node_writer(&self) -> Option<reflector::store::Writer<Node>> {
        self.node_writer.lock().ok().and_then(|mut w| w.take())
    }

    /// Records a failure for `key` and returns the delay before the next try.
    pub fn failure_delay(&self, key: &str, kind: FailureKind) -> Duration {
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
    pub fn reset_backoff(&self, key: &str) {
        if let Ok(mut map) = self.failures.lock() {
            map.remove(key);
        }
        if let Ok(mut map) = self.creation_attempts.lock() {
            map.remove(key);
        }
    }

    /// How long the creation flow of `key` must still wait: `Some(wait)` while its last
    /// attempt ended less than `short_retry` ago. A watch event (the controller's own
    /// finalizer, a label edit) therefore never makes the provider see a retry sooner
    /// than the minimum period, whatever the backoff had scheduled.
    pub fn creation_wait(&self, key: &str) -> Option<Duration> {
        let map = self.creation_attempts.lock().ok()?;
        let since = map.get(key)?.elapsed();
        let wait = self.config.short_retry.saturating_sub(since);
        (!wait.is_zero()).then_some(wait)
    }

    /// Records that a creation attempt of `key` ended now.
    pub fn creation_attempted(&self, key: &str) {
        let exists = self.machine_exists();
        if let Ok(mut map) = self.creation_attempts.lock() {
            *map.entry(key, std::time::Instant::now(), exists) = std::time::Instant::now();
        }
    }

    /// The number of consecutive failures recorded for `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures
            .lock()
            .map(|m| m.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Whether the machine of a bookkeeping key (`namespace/name`) still
    /// exists in the controller's cache (always `true` before the cache runs):
    /// what [`Pruned`] keeps.
    fn machine_exists(&self) -> impl Fn(&str) -> bool {
        let store = self.machine_store();
        move |key: &str| {
            let Some(store) = &store else { return true };
            let Some((ns, name)) = key.split_once('/') else {
                return false;
            };
            store
                .get(&reflector::ObjectRef::new(name).within(ns))
                .is_some()
        }
    }

    pub(crate) fn set_machine_store(&self, store: Store<mcm_api::Machine>) {
        if let Ok(mut s) = self.machines.lock() {
            *s = Some(store);
        }
    }

    /// The machine controller's cache of Machines, once it runs.
    pub(crate) fn machine_store(&self) -> Option<Store<mcm_api::Machine>> {
        self.machines.lock().ok().and_then(|s| s.clone())
    }

    /// How many machines the controller's cache holds.
    pub fn machine_count(&self) -> i64 {
        self.machines
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.state().len() as i64))
            .unwrap_or(0)
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
