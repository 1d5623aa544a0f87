//! The reference's workqueue series (`mcm_workqueue_*{name}`, its
//! `pkg/util/workqueue/prometheus`, which both of its binaries import),
//! approximated from kube-runtime's controllers, whose queue is not visible:
//!
//! - `mcm_workqueue_adds_total`: reconciles started ([`work`]);
//! - `mcm_workqueue_retries_total`: reconciles that failed and were requeued
//!   with backoff (the error policies call [`retry`]);
//! - `mcm_workqueue_work_duration_seconds`: how long each reconcile took;
//! - `mcm_workqueue_depth`: the items waiting, as client-go counts them
//!   (added and not yet handed to a worker): those triggered ([`queued`])
//!   whose reconcile has not started ([`work_on`]); an item whose object is
//!   deleted before its reconcile leaves the count ([`forget`]). Delayed
//!   requeues are not in it until they fire, as in client-go;
//! - `mcm_workqueue_unfinished_work_seconds`,
//!   `mcm_workqueue_longest_running_processor_seconds`: from the reconciles
//!   in flight at the scrape;
//! - `mcm_workqueue_queue_duration_seconds`: the wait from a trigger (a
//!   watched change routed to the item, [`queued`]) to the start of its
//!   reconcile ([`work_on`]); repeated triggers of a waiting item keep the
//!   first one, as client-go's queue does. Requeues after a delay are not
//!   triggers (kube-runtime keeps them to itself).
//!
//! The reference keeps the queues in package-level collectors; here they are
//! the Context's [`WorkQueues`] (`Context::workqueues`): [`register`] adds a
//! collector of them to the process's registry, and [`WorkQueues::declare`]
//! creates a queue's series before its first item, as the reference does
//! when it builds the queue (the machine controller declares
//! [`CONTROLLER_QUEUES`] when it starts, the set controllers
//! [`MANAGER_QUEUES`]). Queue names are the reference's
//! (`machine`, `machineclass`, `machineset`, ...).

use crate::keys::ObjectKey;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// The queues of the reference's machine-controller (port 10259).
pub(crate) const CONTROLLER_QUEUES: [&str; 7] = [
    "secret",
    "node",
    "machineclass",
    "machine",
    "machinetermination",
    "machinesafetyorphanvms",
    "machinesafetyapiserver",
];

/// The queues of the reference's machine-controller-manager (port 10258).
pub(crate) const MANAGER_QUEUES: [&str; 5] = [
    "node",
    "machine",
    "machineset",
    "machinedeployment",
    "machinesafetyovershooting",
];

#[derive(Debug)]
struct Queue {
    adds: Counter,
    retries: Counter,
    work: Histogram,
    waited: Histogram,
    running: Mutex<HashMap<u64, Instant>>,
    /// Items triggered and not yet started, with their first trigger.
    pending: Mutex<HashMap<ObjectKey, Instant>>,
}

/// The most items remembered as waiting per queue (an item whose object is
/// gone before its reconcile is never started; past this, all are dropped).
const MAX_PENDING: usize = 10_000;

impl Queue {
    fn new() -> Self {
        // The reference's buckets: ExponentialBuckets(10e-9, 10, 10).
        let buckets = || Histogram::new(exponential_buckets(1e-8, 10.0, 10));
        Queue {
            adds: Counter::default(),
            retries: Counter::default(),
            work: buckets(),
            waited: buckets(),
            running: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The items waiting: triggered and not yet started.
    fn waiting(&self) -> i64 {
        self.pending
            .lock()
            .map(|p| i64::try_from(p.len()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    /// (in flight, their summed seconds, the longest one's seconds).
    fn in_flight(&self) -> (i64, f64, f64) {
        let now = Instant::now();
        let Ok(running) = self.running.lock() else {
            return (0, 0.0, 0.0);
        };
        let ages = running
            .values()
            .map(|s| now.saturating_duration_since(*s).as_secs_f64());
        let (sum, max) = ages.fold((0.0, 0.0_f64), |(s, m), a| (s + a, m.max(a)));
        (i64::try_from(running.len()).unwrap_or(i64::MAX), sum, max)
    }
}

/// The work queues of a process: one per reference queue name.
#[derive(Debug, Default)]
pub struct WorkQueues {
    queues: RwLock<BTreeMap<&'static str, Arc<Queue>>>,
    next: AtomicU64,
}

impl WorkQueues {
    fn queue(&self, name: &'static str) -> Option<Arc<Queue>> {
        if let Some(q) = self.queues.read().ok()?.get(name) {
            return Some(q.clone());
        }
        let mut queues = self.queues.write().ok()?;
        Some(
            queues
                .entry(name)
                .or_insert_with(|| Arc::new(Queue::new()))
                .clone(),
        )
    }

    /// Creates the series of `names` (zero until their first item).
    pub(crate) fn declare(&self, names: &[&'static str]) {
        for name in names {
            let _ = self.queue(name);
        }
    }

    /// Starts one item of queue `name` (one reconcile): counted as an add and
    /// in flight until the returned guard is dropped.
    pub(crate) fn work(&self, name: &'static str) -> Work {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let queue = self.queue(name);
        if let Some(q) = &queue {
            q.adds.inc();
            if let Ok(mut running) = q.running.lock() {
                running.insert(id, start);
            }
        }
        Work { queue, id, start }
    }

    /// Records that item `key` of queue `name` was triggered now (a watched
    /// change routed to it); its reconcile's start observes the wait.
    pub(crate) fn queued(&self, name: &'static str, key: &ObjectKey) {
        if let Some(q) = self.queue(name) {
            if let Ok(mut pending) = q.pending.lock() {
                if pending.len() >= MAX_PENDING && !pending.contains_key(key) {
                    pending.clear();
                }
                pending.entry(key.clone()).or_insert_with(Instant::now);
            }
        }
    }

    /// Like [`Self::work`] for item `key`: a trigger recorded by [`Self::queued`] is
    /// observed as the item's queue duration.
    pub(crate) fn work_on(&self, name: &'static str, key: &ObjectKey) -> Work {
        let w = self.work(name);
        if let Some(q) = &w.queue {
            let since = q.pending.lock().ok().and_then(|mut p| p.remove(key));
            if let Some(since) = since {
                q.waited
                    .observe(w.start.saturating_duration_since(since).as_secs_f64());
            }
        }
        w
    }

    /// Item `key` of queue `name` will not be reconciled (its object is gone):
    /// it no longer counts as waiting.
    pub(crate) fn forget(&self, name: &'static str, key: &ObjectKey) {
        if let Some(q) = self.queue(name) {
            if let Ok(mut pending) = q.pending.lock() {
                pending.remove(key);
            }
        }
    }

    /// Counts a failed item of queue `name` requeued with backoff.
    pub(crate) fn retry(&self, name: &'static str) {
        if let Some(q) = self.queue(name) {
            q.retries.inc();
        }
    }
}

/// One item being worked on; dropping it ends the work (its duration is observed).
#[must_use = "the work ends when this is dropped"]
pub(crate) struct Work {
    queue: Option<Arc<Queue>>,
    id: u64,
    start: Instant,
}

impl Drop for Work {
    fn drop(&mut self) {
        if let Some(q) = &self.queue {
            if let Ok(mut running) = q.running.lock() {
                running.remove(&self.id);
            }
            q.work.observe(self.start.elapsed().as_secs_f64());
        }
    }
}

/// Adds the workqueue families of `queues` to `registry`.
pub fn register(registry: &mut Registry, queues: Arc<WorkQueues>) {
    registry.register_collector(Box::new(Collected(queues)));
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabel {
    name: String,
}

#[derive(Debug)]
struct Collected(Arc<WorkQueues>);

/// A family's name, help and type.
type Descriptor = (&'static str, &'static str, MetricType);

/// How a family reads one queue.
type SampleOf = fn(&Queue) -> Sample;

/// One queue's sample of a family, taken at the scrape.
enum Sample {
    Gauge(i64),
    Seconds(f64),
    Counter(Counter),
    Histogram(Histogram),
}

impl Sample {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        match self {
            Sample::Gauge(v) => encoder.encode_gauge(v),
            Sample::Seconds(v) => encoder.encode_gauge(v),
            Sample::Counter(c) => c.encode(encoder),
            Sample::Histogram(h) => h.encode(encoder),
        }
    }
}

impl Collected {
    fn family(
        encoder: &mut DescriptorEncoder,
        queues: &[(&'static str, Arc<Queue>)],
        (name, help, metric_type): Descriptor,
        sample: SampleOf,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
        for (queue, q) in queues {
            let labels = NameLabel {
                name: (*queue).to_string(),
            };
            sample(q).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

impl Collector for Collected {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let queues: Vec<(&'static str, Arc<Queue>)> = match self.0.queues.read() {
            Ok(q) => q.iter().map(|(k, v)| (*k, v.clone())).collect(),
            Err(_) => return Ok(()),
        };
        let families: [(Descriptor, SampleOf); 7] = [
            (
                ("mcm_workqueue_depth", "Current depth of workqueue", MetricType::Gauge),
                |q| Sample::Gauge(q.waiting()),
            ),
            (
                (
                    "mcm_workqueue_adds",
                    "Total number of adds handled by workqueue",
                    MetricType::Counter,
                ),
                |q| Sample::Counter(q.adds.clone()),
            ),
            (
                (
                    "mcm_workqueue_queue_duration_seconds",
                    "How long in seconds an item stays in workqueue before being requested.",
                    MetricType::Histogram,
                ),
                |q| Sample::Histogram(q.waited.clone()),
            ),
            (
                (
                    "mcm_workqueue_work_duration_seconds",
                    "How long in seconds processing an item from workqueue takes.",
                    MetricType::Histogram,
                ),
                |q| Sample::Histogram(q.work.clone()),
            ),
            (
                (
                    "mcm_workqueue_unfinished_work_seconds",
                    "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                    MetricType::Gauge,
                ),
                |q| Sample::Seconds(q.in_flight().1),
            ),
            (
                (
                    "mcm_workqueue_longest_running_processor_seconds",
                    "How many seconds has the longest running processor for workqueue been running.",
                    MetricType::Gauge,
                ),
                |q| Sample::Seconds(q.in_flight().2),
            ),
            (
                (
                    "mcm_workqueue_retries",
                    "Total number of retries handled by workqueue",
                    MetricType::Counter,
                ),
                |q| Sample::Counter(q.retries.clone()),
            ),
        ];
        for (descriptor, sample) in families {
            Self::family(&mut encoder, &queues, descriptor, sample)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Kind;

    fn key(namespaced: &str) -> ObjectKey {
        let (ns, name) = namespaced.split_once('/').expect("ns/name");
        ObjectKey::new(Kind::Machine, ns, name)
    }

    fn scrape(queues: &Arc<WorkQueues>) -> String {
        let mut registry = Registry::default();
        register(&mut registry, queues.clone());
        super::super::encode(&registry)
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN)
    }

    #[test]
    fn declared_queues_have_every_series_of_the_reference_before_their_first_item() {
        let q = Arc::new(WorkQueues::default());
        q.declare(&["wq-declared"]);
        let text = scrape(&q);
        for family in [
            "mcm_workqueue_depth",
            "mcm_workqueue_adds_total",
            "mcm_workqueue_queue_duration_seconds",
            "mcm_workqueue_work_duration_seconds",
            "mcm_workqueue_unfinished_work_seconds",
            "mcm_workqueue_longest_running_processor_seconds",
            "mcm_workqueue_retries_total",
        ] {
            let kind = if family.ends_with("_seconds") && family.contains("duration") {
                "histogram"
            } else if family.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            assert!(
                text.contains(&format!("# TYPE {family} {kind}\n")),
                "{family}: {text}"
            );
        }
        assert_eq!(
            value(&text, "mcm_workqueue_adds_total{name=\"wq-declared\"}"),
            0.0
        );
    }

    #[test]
    fn the_wait_from_the_first_trigger_to_the_reconcile_is_the_queue_duration() {
        let q = Arc::new(WorkQueues::default());
        q.queued("wq-wait", &key("ns/a"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        // A second trigger while waiting keeps the first one's time.
        q.queued("wq-wait", &key("ns/a"));
        drop(q.work_on("wq-wait", &key("ns/a")));
        // A reconcile without a trigger (a requeue) observes nothing.
        drop(q.work_on("wq-wait", &key("ns/b")));
        let text = scrape(&q);
        assert_eq!(
            value(
                &text,
                "mcm_workqueue_queue_duration_seconds_count{name=\"wq-wait\"}"
            ),
            1.0
        );
        assert!(
            value(
                &text,
                "mcm_workqueue_queue_duration_seconds_sum{name=\"wq-wait\"}"
            ) >= 0.02,
            "{text}"
        );
    }

    #[test]
    fn items_in_flight_are_unfinished_work_and_finished_ones_adds_work_and_retries() {
        let q = Arc::new(WorkQueues::default());
        let first = q.work("wq-flight");
        let second = q.work("wq-flight");
        let text = scrape(&q);
        // Being worked on is not waiting.
        assert_eq!(value(&text, "mcm_workqueue_depth{name=\"wq-flight\"}"), 0.0);
        assert!(
            value(
                &text,
                "mcm_workqueue_longest_running_processor_seconds{name=\"wq-flight\"}"
            ) >= 0.0
        );
        drop(first);
        q.retry("wq-flight");
        drop(second);
        let text = scrape(&q);
        assert_eq!(
            value(&text, "mcm_workqueue_adds_total{name=\"wq-flight\"}"),
            2.0
        );
        assert_eq!(
            value(&text, "mcm_workqueue_retries_total{name=\"wq-flight\"}"),
            1.0
        );
        assert_eq!(
            value(
                &text,
                "mcm_workqueue_work_duration_seconds_count{name=\"wq-flight\"}"
            ),
            2.0
        );
        assert_eq!(
            value(
                &text,
                "mcm_workqueue_unfinished_work_seconds{name=\"wq-flight\"}"
            ),
            0.0
        );
    }

    #[test]
    fn depth_counts_items_waiting_for_their_reconcile_not_those_running_or_forgotten() {
        let q = Arc::new(WorkQueues::default());
        q.queued("wq-depth", &key("ns/a"));
        q.queued("wq-depth", &key("ns/a"));
        q.queued("wq-depth", &key("ns/b"));
        q.queued("wq-depth", &key("ns/c"));
        // Triggered three items (one twice): three wait.
        assert_eq!(
            value(&scrape(&q), "mcm_workqueue_depth{name=\"wq-depth\"}"),
            3.0
        );
        let running = q.work_on("wq-depth", &key("ns/a"));
        assert_eq!(
            value(&scrape(&q), "mcm_workqueue_depth{name=\"wq-depth\"}"),
            2.0
        );
        // ns/c's object was deleted before its reconcile.
        q.forget("wq-depth", &key("ns/c"));
        assert_eq!(
            value(&scrape(&q), "mcm_workqueue_depth{name=\"wq-depth\"}"),
            1.0
        );
        drop(running);
        drop(q.work_on("wq-depth", &key("ns/b")));
        assert_eq!(
            value(&scrape(&q), "mcm_workqueue_depth{name=\"wq-depth\"}"),
            0.0
        );
    }
}
