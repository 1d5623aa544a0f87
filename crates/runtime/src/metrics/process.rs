//! The `process_*` series (as the reference's Prometheus client exports them
//! on Linux) and `mcm_misc_scrape_failure_total`.

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A counter set to an absolute value read elsewhere (CPU seconds, bytes).
#[derive(Debug, Clone, Default)]
pub(crate) struct ValueCounter(Arc<AtomicU64>);

impl ValueCounter {
    fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
}

impl EncodeMetric for ValueCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let v = f64::from_bits(self.0.load(Ordering::Relaxed));
        encoder.encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(&v, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// `process_*`, read from `/proc/self` on every scrape.
#[derive(Default)]
pub struct ProcessMetrics {
    cpu: ValueCounter,
    open_fds: Gauge,
    max_fds: Gauge,
    virtual_memory: Gauge,
    virtual_memory_max: Gauge,
    resident_memory: Gauge,
    start_time: FloatGauge,
    network_receive: ValueCounter,
    network_transmit: ValueCounter,
}

impl ProcessMetrics {
    /// Creates and registers the process metrics (the REST client series
    /// are the Context's: [`super::rest::RestMetrics::register`]).
    pub fn new(registry: &mut Registry) -> Self {
        let m = ProcessMetrics::default();
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            m.cpu.clone(),
        );
        registry.register(
            "process_open_fds",
            "Number of open file descriptors.",
            m.open_fds.clone(),
        );
        registry.register(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            m.max_fds.clone(),
        );
        registry.register(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            m.virtual_memory.clone(),
        );
        registry.register(
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            m.virtual_memory_max.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            m.resident_memory.clone(),
        );
        registry.register(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            m.start_time.clone(),
        );
        registry.register(
            "process_network_receive_bytes",
            "Number of bytes received by the process over the network.",
            m.network_receive.clone(),
        );
        registry.register(
            "process_network_transmit_bytes",
            "Number of bytes sent by the process over the network.",
            m.network_transmit.clone(),
        );
        m
    }

    /// Reads the current values (Linux; elsewhere the series stay 0).
    pub fn refresh(&self) {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(fds.count() as i64);
        }
        for line in read("/proc/self/limits").lines() {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let value = |i: usize| match cols.get(i).copied() {
                Some("unlimited") => -1,
                Some(v) => v.parse::<i64>().unwrap_or(0),
                None => 0,
            };
            if line.starts_with("Max open files") {
                self.max_fds.set(value(3));
            } else if line.starts_with("Max address space") {
                self.virtual_memory_max.set(value(3));
            }
        }
        let stat = read("/proc/self/stat");
        // Fields after the parenthesised command name; utime is field 14 (index 11 here).
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            let ticks = 100.0;
            self.cpu.set((num(11) + num(12)) / ticks);
            self.virtual_memory.set(num(20) as i64);
            self.resident_memory.set((num(21) * 4096.0) as i64);
            let boot = read("/proc/stat")
                .lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            self.start_time.set(boot + num(19) / ticks);
        }
        let (mut rx, mut tx) = (0.0, 0.0);
        for line in read("/proc/self/net/dev").lines().skip(2) {
            if let Some((_, data)) = line.split_once(':') {
                let f: Vec<f64> = data
                    .split_whitespace()
                    .map(|v| v.parse().unwrap_or(0.0))
                    .collect();
                rx += f.first().copied().unwrap_or(0.0);
                tx += f.get(8).copied().unwrap_or(0.0);
            }
        }
        self.network_receive.set(rx);
        self.network_transmit.set(tx);
    }
}

/// `{kind, binary}` of `mcm_misc_scrape_failure_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ScrapeFailureLabels {
    /// What could not be collected (`Machine-count`, `Machineset-count`, ...).
    pub(crate) kind: String,
    /// `machine-controller-manager` or `machine-controller-manager-provider`.
    pub(crate) binary: String,
}

/// `{code}` of `promhttp_metric_handler_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CodeLabels {
    /// HTTP status code of the scrape.
    pub(crate) code: String,
}

/// `mcm_misc_scrape_failure_total` and the scrape handler's own series
/// (`promhttp_metric_handler_requests_total`, `..._in_flight`).
#[derive(Default)]
pub struct ScrapeMetrics {
    requests: Family<CodeLabels, Counter>,
    in_flight: Gauge,
}

impl ScrapeMetrics {
    /// Creates and registers the scrape-failure counter (no collection of
    /// this process fails, so the family has no series) and the handler's
    /// series.
    pub fn new(registry: &mut Registry) -> Self {
        let m = ScrapeMetrics::default();
        registry.sub_registry_with_prefix("mcm").register(
            "misc_scrape_failure",
            "Total count of scrape failures.",
            super::Described(Family::<ScrapeFailureLabels, Counter>::default()),
        );
        registry.register(
            "promhttp_metric_handler_requests",
            "Total number of scrapes by HTTP status code.",
            m.requests.clone(),
        );
        registry.register(
            "promhttp_metric_handler_requests_in_flight",
            "Current number of scrapes being served.",
            m.in_flight.clone(),
        );
        for code in ["200", "500", "503"] {
            let _ = m.requests.get_or_create(&CodeLabels { code: code.into() });
        }
        m
    }

    /// A scrape starts.
    pub fn begin(&self) {
        self.in_flight.inc();
    }

    /// A scrape ends (counted before the next one reads the counters).
    pub fn end(&self, code: u16) {
        self.in_flight.dec();
        self.requests
            .get_or_create(&CodeLabels {
                code: code.to_string(),
            })
            .inc();
    }
}
