//! Prometheus metrics with the reference's names, labels and label values, so
//! existing dashboards, ServiceMonitor keep-lists and alerts keep working.
//!
//! - this module: the machine controller's series (`pkg/util/provider/metrics`
//!   in the reference), per-machine series refilled on every scrape from a
//!   the process's shared Machine cache ([`crate::caches`]: one watch, kept
//!   while this replica leads, never a LIST per scrape);
//! - [`sets`]: the MachineSet / MachineDeployment series (`pkg/metrics`);
//! - [`process`]: `process_*` and `mcm_misc_scrape_failure_total`.
//!
//! Unlike the reference, duration series always carry their full label set (a
//! missing `nodeTemplate` gives empty labels instead of a panic) and a deleted
//! machine's series are removed. [`encode`] writes the Prometheus text format
//! (0.0.4) with the reference's sample names.

pub(crate) mod cloud;
pub(crate) mod driver;
pub(crate) mod durations;
pub(crate) mod process;
pub mod rest;
pub(crate) mod sets;
pub mod workqueue;

pub use process::{ProcessMetrics, ScrapeMetrics};
pub use sets::SetMetrics;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// A metric whose name and type are written even before it has a series
/// (the reference's dashboards and keep-lists look for the names).
#[derive(Debug, Clone)]
pub(crate) struct Described<M>(pub M);

impl<M: EncodeMetric> EncodeMetric for Described<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

/// A counter written without the `_total` suffix (`mcm_machine_num_failed_join`
/// has none in the reference).
#[derive(Debug, Clone, Default)]
pub(crate) struct PlainCounter(Gauge);

impl PlainCounter {
    /// Adds one; returns the previous value.
    pub(crate) fn inc(&self) -> i64 {
        self.0.inc()
    }
}

impl EncodeMetric for PlainCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

impl TypedMetric for PlainCounter {
    const TYPE: MetricType = MetricType::Counter;
}

/// Counter families whose samples carry no `_total` suffix.
const NO_TOTAL_SUFFIX: [&str; 1] = ["mcm_machine_num_failed_join"];

/// `{name, namespace}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MachineLabels {
    /// Machine name.
    pub(crate) name: String,
    /// Namespace.
    pub(crate) namespace: String,
}

/// `{name, namespace, condition}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ConditionLabels {
    /// Machine name.
    pub(crate) name: String,
    /// Namespace.
    pub(crate) namespace: String,
    /// Node condition type.
    pub(crate) condition: String,
}

/// `{namespace, machine_deployment, instance_type, zone}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DurationLabels {
    /// Namespace.
    pub(crate) namespace: String,
    /// The machine's `name` label (its MachineDeployment).
    pub(crate) machine_deployment: String,
    /// The class's `nodeTemplate.instanceType` ("" when none).
    pub(crate) instance_type: String,
    /// The machine's zone ("" when unknown).
    pub(crate) zone: String,
}

/// `{result}` of a hot-update step (design: hot-update.md).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct UpdateResultLabels {
    /// `updated`, `failed`, `needs_replacement` or `adopted`.
    pub(crate) result: String,
}

/// `{namespace, machine_deployment}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DrainLabels {
    /// Namespace.
    pub(crate) namespace: String,
    /// The machine's MachineDeployment.
    pub(crate) machine_deployment: String,
}

impl DrainLabels {
    /// A machine's labels: its namespace and the MachineDeployment its `name`
    /// label names ("" for a machine of no deployment).
    pub(crate) fn of(machine: &mcm_api::Machine) -> Self {
        use kube::ResourceExt;
        DrainLabels {
            namespace: machine.namespace().unwrap_or_default(),
            machine_deployment: machine.labels().get("name").cloned().unwrap_or_default(),
        }
    }
}

/// `{provider, operation}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DriverLabels {
    /// Provider name.
    pub(crate) provider: String,
    /// Driver operation.
    pub(crate) operation: String,
}

/// `{provider, operation, error_code}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DriverErrorLabels {
    /// Provider name.
    pub(crate) provider: String,
    /// Driver operation.
    pub(crate) operation: String,
    /// The machine error code's name.
    pub(crate) error_code: String,
}

/// `mcm_machine_info` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)] // `createdAt` is the reference's label name.
pub(crate) struct MachineInfoLabels {
    /// Machine name.
    pub(crate) name: String,
    /// Namespace.
    pub(crate) namespace: String,
    /// Creation time, Unix seconds.
    pub(crate) createdAt: String,
    /// `spec.providerID`.
    pub(crate) spec_provider_id: String,
    /// `spec.class.apiGroup`.
    pub(crate) spec_class_api_group: String,
    /// `spec.class.kind`.
    pub(crate) spec_class_kind: String,
    /// `spec.class.name`.
    pub(crate) spec_class_name: String,
    /// The machine's `node` label.
    pub(crate) node_name: String,
}

/// `{provider, service}` of the cloud API counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CloudApiLabels {
    /// Provider name (`aws`, `local`, ...).
    pub(crate) provider: String,
    /// Cloud service (e.g. `ec2`).
    pub(crate) service: String,
}

type Seconds = Gauge<f64, AtomicU64>;

/// All metrics of the machine controller.
pub struct Metrics {
    /// `mcm_machine_items_total`.
    pub(crate) items: Gauge,
    /// `mcm_machine_current_status_phase`.
    pub(crate) phase: Family<MachineLabels, Gauge>,
    /// `mcm_machine_info`.
    pub(crate) info: Family<MachineInfoLabels, Gauge>,
    /// `mcm_machine_controller_frozen`.
    pub(crate) frozen: Gauge,
    /// `mcm_machine_status_condition`.
    pub(crate) condition: Family<ConditionLabels, Gauge>,
    /// `mcm_machine_create_duration_seconds`.
    pub(crate) create_duration: Family<DurationLabels, Seconds>,
    /// `mcm_machine_initialize_duration_seconds`.
    pub(crate) initialize_duration: Family<DurationLabels, Seconds>,
    /// `mcm_machine_join_duration_seconds`.
    pub(crate) join_duration: Family<DurationLabels, Seconds>,
    /// `mcm_machine_delete_duration_seconds`.
    pub(crate) delete_duration: Family<DurationLabels, Seconds>,
    /// `mcm_machine_drain_duration_seconds`.
    pub(crate) drain_duration: Family<DrainLabels, Seconds>,
    /// `mcm_machine_num_failed_join` (a counter without `_total`, as in the reference).
    pub(crate) failed_join: Family<DurationLabels, PlainCounter>,
    /// mcm-rs `mcm_machine_startup_taint_removal_seconds`: from the Node's
    /// registration (creationTimestamp) to the startup taint's removal.
    pub(crate) startup_taint_removal: Family<DrainLabels, Histogram>,
    /// mcm-rs `mcm_machine_update_total{result}`: hot-update outcomes.
    pub(crate) update: Family<UpdateResultLabels, Counter>,
    /// `mcm_cloud_api_requests_total`.
    pub(crate) api_requests: Family<CloudApiLabels, Counter>,
    /// `mcm_cloud_api_requests_failed_total`.
    pub(crate) api_requests_failed: Family<CloudApiLabels, Counter>,
    /// `mcm_cloud_api_api_request_duration_seconds`.
    pub(crate) api_request_duration: Family<CloudApiLabels, Histogram>,
    /// `mcm_cloud_api_driver_request_duration_seconds`.
    pub(crate) driver_duration: Family<DriverLabels, Histogram>,
    /// `mcm_cloud_api_driver_requests_failed_total`.
    pub(crate) driver_failed: Family<DriverErrorLabels, Counter>,
}

/// Buckets of node start-up times: 5 s to 1 h.
fn startup_histogram() -> Histogram {
    Histogram::new([
        5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
    ])
}

fn histogram() -> Histogram {
    // The reference's (client_golang's) default buckets.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl Metrics {
    /// Creates the metrics and registers them (with the `mcm` prefix) in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let cloud = cloud::CloudApiFamilies::default();
        let m = Metrics {
            items: Gauge::default(),
            phase: Family::default(),
            info: Family::default(),
            frozen: Gauge::default(),
            condition: Family::default(),
            create_duration: Family::default(),
            initialize_duration: Family::default(),
            join_duration: Family::default(),
            delete_duration: Family::default(),
            drain_duration: Family::default(),
            failed_join: Family::default(),
            startup_taint_removal: Family::new_with_constructor(startup_histogram),
            update: Family::default(),
            api_requests: cloud.requests,
            api_requests_failed: cloud.failed,
            api_request_duration: cloud.duration,
            driver_duration: Family::new_with_constructor(histogram),
            driver_failed: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("mcm");
        r.register(
            "machine_items_total",
            "Count of machines currently managed by the mcm.",
            m.items.clone(),
        );
        r.register(
            "machine_current_status_phase",
            "Current status phase of the Machines currently managed by the mcm.",
            Described(m.phase.clone()),
        );
        r.register(
            "machine_info",
            "Information of the Machines currently managed by the mcm.",
            Described(m.info.clone()),
        );
        r.register(
            "machine_controller_frozen",
            "Frozen status of the machine controller manager.",
            m.frozen.clone(),
        );
        r.register(
            "machine_status_condition",
            "Information of the mcm managed Machines' status conditions.",
            Described(m.condition.clone()),
        );
        r.register(
            "machine_create_duration_seconds",
            "Duration in seconds to create a Machine of a MachineDeployment.",
            Described(m.create_duration.clone()),
        );
        r.register(
            "machine_initialize_duration_seconds",
            "Duration in seconds to initialize a Machine of a MachineDeployment.",
            Described(m.initialize_duration.clone()),
        );
        r.register(
            "machine_join_duration_seconds",
            "Duration in seconds for a Machine of a MachineDeployment to join the cluster",
            Described(m.join_duration.clone()),
        );
        r.register(
            "machine_delete_duration_seconds",
            "Duration in seconds to delete a Machine of a MachineDeployment.",
            Described(m.delete_duration.clone()),
        );
        r.register(
            "machine_drain_duration_seconds",
            "Duration in seconds to drain a Machine of a MachineDeployment.",
            Described(m.drain_duration.clone()),
        );
        r.register(
            "machine_num_failed_join",
            "Number of Machines of a MachineDeployment that failed to join the cluster.",
            Described(m.failed_join.clone()),
        );
        r.register(
            "machine_startup_taint_removal_seconds",
            "mcm-rs: seconds from a Node's registration to the removal of its startup taint, per MachineDeployment.",
            Described(m.startup_taint_removal.clone()),
        );
        r.register(
            "machine_update",
            "mcm-rs: hot updates of running machines by result (updated, failed, needs_replacement, adopted).",
            Described(m.update.clone()),
        );
        r.register(
            "cloud_api_requests",
            "Number of Cloud Service API requests, partitioned by provider, and service.",
            Described(m.api_requests.clone()),
        );
        r.register(
            "cloud_api_requests_failed",
            "Number of Failed Cloud Service API requests, partitioned by provider, and service.",
            Described(m.api_requests_failed.clone()),
        );
        r.register(
            "cloud_api_api_request_duration_seconds",
            "Time(in seconds) it takes for a provider API request to complete",
            Described(m.api_request_duration.clone()),
        );
        r.register(
            "cloud_api_driver_request_duration_seconds",
            "Total time (in seconds) taken for a driver API request to complete",
            Described(m.driver_duration.clone()),
        );
        r.register(
            "cloud_api_driver_requests_failed",
            "Number of failed Driver API requests, partitioned by provider, operation and error code",
            Described(m.driver_failed.clone()),
        );
        m
    }

    /// The observer that moves these metrics' cloud API series, for a
    /// driver's [`mcm_driver::cloud_api::CloudApi`] handle.
    pub(crate) fn cloud_api_observer(
        &self,
    ) -> std::sync::Arc<dyn mcm_driver::cloud_api::CloudApiObserver> {
        std::sync::Arc::new(cloud::CloudApiFamilies {
            requests: self.api_requests.clone(),
            failed: self.api_requests_failed.clone(),
            duration: self.api_request_duration.clone(),
        })
    }

    /// Refills the per-machine series (`items`, phase, info, conditions) from
    /// the Machines of `namespace` (from the shared cache, no API call):
    /// every machine has its series on every scrape, and a deleted machine's
    /// are gone.
    pub fn fill(&self, machines: &[std::sync::Arc<mcm_api::Machine>], namespace: &str) {
        use kube::ResourceExt;
        self.phase.clear();
        self.info.clear();
        self.condition.clear();
        self.items.set(machines.len() as i64);
        for m in machines {
            let name = m.name_any();
            let status = m.status.clone().unwrap_or_default();
            self.phase
                .get_or_create(&MachineLabels {
                    name: name.clone(),
                    namespace: namespace.into(),
                })
                .set(Self::phase_value(&status.current_status.phase));
            self.info
                .get_or_create(&MachineInfoLabels {
                    name: name.clone(),
                    namespace: namespace.into(),
                    createdAt: m
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_second().to_string())
                        .unwrap_or_else(|| "0".into()),
                    spec_provider_id: m.spec.provider_id.clone(),
                    spec_class_api_group: m.spec.class.api_group.clone(),
                    spec_class_kind: m.spec.class.kind.clone(),
                    spec_class_name: m.spec.class.name.clone(),
                    node_name: m
                        .labels()
                        .get(mcm_api::constants::NODE_LABEL)
                        .cloned()
                        .unwrap_or_default(),
                })
                .set(1);
            for c in &status.conditions {
                self.condition
                    .get_or_create(&ConditionLabels {
                        name: name.clone(),
                        namespace: namespace.into(),
                        condition: c.type_.clone(),
                    })
                    .set(condition_value(c.status.as_str()));
            }
        }
    }

    /// The numeric value the reference uses for a phase.
    pub(crate) fn phase_value(phase: &mcm_api::MachinePhase) -> i64 {
        use mcm_api::MachinePhase as P;
        match phase {
            P::Terminating => -4,
            P::Failed => -3,
            P::CrashLoopBackOff => -2,
            P::Unknown => -1,
            P::Running => 1,
            _ => 0,
        }
    }

    /// Removes a deleted machine's per-machine series.
    pub(crate) fn forget_machine(&self, namespace: &str, name: &str) {
        self.phase.remove(&MachineLabels {
            name: name.into(),
            namespace: namespace.into(),
        });
        for c in [
            "Ready",
            "KernelDeadlock",
            "ReadonlyFilesystem",
            "DiskPressure",
            "NetworkUnavailable",
            "MemoryPressure",
            "PIDPressure",
        ] {
            self.condition.remove(&ConditionLabels {
                name: name.into(),
                namespace: namespace.into(),
                condition: c.into(),
            });
        }
    }
}

/// The reference's `operation` label of a driver call: `CreateMachine` →
/// `create_machine`; `ListMachines` is `list_machine` in the reference's
/// providers (AWS, Azure, GCP).
pub(crate) fn operation_label(op: &str) -> String {
    if op == "ListMachines" {
        return "list_machine".into();
    }
    mcm_driver::cloud_api::snake_case(op)
}

/// The reference's `provider` label: the provider's name in lower case (`aws`).
pub(crate) fn provider_label(provider: &str) -> String {
    provider.to_ascii_lowercase()
}

/// The reference's `error_code` label: the numeric code (`13` for Internal).
pub(crate) fn error_code_label(code: mcm_driver::Code) -> String {
    code.value().to_string()
}

/// The reference's value of a condition status: 1 True, 0 False, 2 Unknown.
pub(crate) fn condition_value(status: &str) -> i64 {
    match status {
        "True" => 1,
        "False" => 0,
        _ => 2,
    }
}

/// Encodes a registry in the Prometheus text format (0.0.4, what the
/// reference serves): counter families are described under their sample
/// name (`..._total`), and there is no `# EOF`.
pub fn encode(registry: &Registry) -> String {
    let mut om = String::new();
    if prometheus_client::encoding::text::encode(&mut om, registry).is_err() {
        return String::new();
    }
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .filter(|n| !NO_TOTAL_SUFFIX.contains(n))
        .collect();
    let mut out = String::with_capacity(om.len() + counters.len() * 16);
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let described = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (*p, rest)));
        if let Some((prefix, rest)) = described {
            let name = rest.split(' ').next().unwrap_or_default();
            if counters.contains(name) {
                out.push_str(prefix);
                out.push_str(name);
                out.push_str("_total");
                out.push_str(&rest[name.len()..]);
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_labels_use_the_reference_values() {
        assert_eq!(operation_label("CreateMachine"), "create_machine");
        assert_eq!(operation_label("GetMachineStatus"), "get_machine_status");
        assert_eq!(operation_label("ListMachines"), "list_machine");
        assert_eq!(operation_label("GetVolumeIDs"), "get_volume_ids");
        assert_eq!(provider_label("AWS"), "aws");
        assert_eq!(error_code_label(mcm_driver::Code::Internal), "13");
    }

    #[test]
    fn text_format_names_counters_like_the_reference() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        let d = DurationLabels {
            namespace: "ns".into(),
            machine_deployment: "pool".into(),
            instance_type: String::new(),
            zone: String::new(),
        };
        m.failed_join.get_or_create(&d).inc();
        let text = encode(&registry);
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains("# TYPE mcm_machine_num_failed_join counter"),
            "{text}"
        );
        assert!(
            text.contains("mcm_machine_num_failed_join{namespace=\"ns\""),
            "{text}"
        );
        assert!(
            !text.contains("mcm_machine_num_failed_join_total"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE mcm_cloud_api_driver_requests_failed_total counter"),
            "families are described before their first series, counters by their sample name: {text}"
        );
        assert!(text.contains("# TYPE mcm_machine_info gauge"), "{text}");
    }

    #[test]
    fn exposes_the_reference_metric_names_and_labels() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        let labels = MachineLabels {
            name: "m1".into(),
            namespace: "ns".into(),
        };
        m.phase.get_or_create(&labels).set(Metrics::phase_value(
            &mcm_api::MachinePhase::CrashLoopBackOff,
        ));
        m.items.set(1);
        let d = DurationLabels {
            namespace: "ns".into(),
            machine_deployment: "pool".into(),
            instance_type: String::new(),
            zone: String::new(),
        };
        m.create_duration.get_or_create(&d).set(12.0);
        let text = encode(&registry);
        assert!(
            text.contains("mcm_machine_current_status_phase{name=\"m1\",namespace=\"ns\"} -2"),
            "{text}"
        );
        assert!(text.contains("mcm_machine_items_total 1"), "{text}");
        assert!(text.contains(
            "mcm_machine_create_duration_seconds{namespace=\"ns\",machine_deployment=\"pool\",instance_type=\"\",zone=\"\"} 12"
        ));
        m.forget_machine("ns", "m1");
        assert!(
            !encode(&registry).contains("name=\"m1\""),
            "a deleted machine's series are removed"
        );
    }
}
