//! Prometheus metrics with the reference's names and labels, so existing
//! dashboards keep working. Unlike the reference, duration series always carry
//! their full label set (a missing `nodeTemplate` gives empty labels instead of a
//! panic, §13 item 8) and a deleted machine's series are removed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// `{name, namespace}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MachineLabels {
    /// Machine name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

/// `{name, namespace, condition}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// Machine name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Node condition type.
    pub condition: String,
}

/// `{namespace, machine_deployment, instance_type, zone}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    /// Namespace.
    pub namespace: String,
    /// The machine's `name` label (its MachineDeployment).
    pub machine_deployment: String,
    /// The class's `nodeTemplate.instanceType` ("" when none).
    pub instance_type: String,
    /// The machine's zone ("" when unknown).
    pub zone: String,
}

/// `{namespace, machine_deployment}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainLabels {
    /// Namespace.
    pub namespace: String,
    /// The machine's MachineDeployment.
    pub machine_deployment: String,
}

/// `{provider, operation}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriverLabels {
    /// Provider name.
    pub provider: String,
    /// Driver operation.
    pub operation: String,
}

/// `{provider, operation, error_code}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriverErrorLabels {
    /// Provider name.
    pub provider: String,
    /// Driver operation.
    pub operation: String,
    /// The machine error code's name.
    pub error_code: String,
}

/// All metrics of the machine controller.
pub struct Metrics {
    /// `mcm_machine_items_total`.
    pub items: Gauge,
    /// `mcm_machine_current_status_phase`.
    pub phase: Family<MachineLabels, Gauge>,
    /// `mcm_machine_controller_frozen`.
    pub frozen: Gauge,
    /// `mcm_machine_status_condition`.
    pub condition: Family<ConditionLabels, Gauge>,
    /// `mcm_machine_create_duration_seconds`.
    pub create_duration: Family<DurationLabels, Gauge<f64, AtomicU64>>,
    /// `mcm_machine_initialize_duration_seconds`.
    pub initialize_duration: Family<DurationLabels, Gauge<f64, AtomicU64>>,
    /// `mcm_machine_join_duration_seconds`.
    pub join_duration: Family<DurationLabels, Gauge<f64, AtomicU64>>,
    /// `mcm_machine_delete_duration_seconds`.
    pub delete_duration: Family<DurationLabels, Gauge<f64, AtomicU64>>,
    /// `mcm_machine_drain_duration_seconds`.
    pub drain_duration: Family<DrainLabels, Gauge<f64, AtomicU64>>,
    /// `mcm_machine_num_failed_join`.
    pub failed_join: Family<DurationLabels, Counter>,
    /// `mcm_cloud_api_driver_request_duration_seconds`.
    pub driver_duration: Family<DriverLabels, Histogram>,
    /// `mcm_cloud_api_driver_requests_failed_total`.
    pub driver_failed: Family<DriverErrorLabels, Counter>,
}

impl Metrics {
    /// Creates the metrics and registers them (with the `mcm` prefix) in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Metrics {
            items: Gauge::default(),
            phase: Family::default(),
            frozen: Gauge::default(),
            condition: Family::default(),
            create_duration: Family::default(),
            initialize_duration: Family::default(),
            join_duration: Family::default(),
            delete_duration: Family::default(),
            drain_duration: Family::default(),
            failed_join: Family::default(),
            driver_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            driver_failed: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("mcm");
        r.register(
            "machine_items_total",
            "Count of machines currently managed",
            m.items.clone(),
        );
        r.register(
            "machine_current_status_phase",
            "Current phase of the machine (Terminating -4, Failed -3, CrashLoopBackOff -2, Unknown -1, Pending 0, Running 1)",
            m.phase.clone(),
        );
        r.register(
            "machine_controller_frozen",
            "Whether the machine controller is frozen",
            m.frozen.clone(),
        );
        r.register(
            "machine_status_condition",
            "Node condition of the machine (1 True, 0 False, 2 Unknown)",
            m.condition.clone(),
        );
        r.register(
            "machine_create_duration_seconds",
            "Time to create the VM",
            m.create_duration.clone(),
        );
        r.register(
            "machine_initialize_duration_seconds",
            "Time until the VM was initialized",
            m.initialize_duration.clone(),
        );
        r.register(
            "machine_join_duration_seconds",
            "Time until the node joined",
            m.join_duration.clone(),
        );
        r.register(
            "machine_delete_duration_seconds",
            "Time to delete the VM",
            m.delete_duration.clone(),
        );
        r.register(
            "machine_drain_duration_seconds",
            "Time to drain the node",
            m.drain_duration.clone(),
        );
        r.register(
            "machine_num_failed_join",
            "Machines that failed to join",
            m.failed_join.clone(),
        );
        r.register(
            "cloud_api_driver_request_duration_seconds",
            "Duration of driver calls",
            m.driver_duration.clone(),
        );
        r.register(
            "cloud_api_driver_requests_failed",
            "Failed driver calls",
            m.driver_failed.clone(),
        );
        m
    }

    /// The numeric value the reference uses for a phase.
    pub fn phase_value(phase: &mcm_api::MachinePhase) -> i64 {
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
    pub fn forget_machine(&self, namespace: &str, name: &str) {
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

/// MachineSet and MachineDeployment metrics, refilled from the API on every
/// scrape (the reference collects them from its listers the same way). Unlike
/// the reference, `mcm_machine_set_status_replicas` reports `status.replicas`
/// (it reported readyReplicas).
#[derive(Default)]
pub struct SetMetrics {
    set_items: Gauge,
    set_gauges: Family<SetGaugeLabels, Gauge>,
    set_conditions: Family<ConditionLabels, Gauge>,
    deployment_items: Gauge,
    deployment_gauges: Family<SetGaugeLabels, Gauge>,
    deployment_conditions: Family<ConditionLabels, Gauge>,
}

/// `{name, namespace}` plus the series name inside a family of gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SetGaugeLabels {
    /// Object name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

fn condition_value(status: &str) -> i64 {
    match status {
        "True" => 1,
        "False" => 0,
        _ => 2,
    }
}

impl SetMetrics {
    /// Creates and registers the set metrics.
    pub fn new(registry: &mut Registry) -> std::sync::Arc<Self> {
        let m = std::sync::Arc::new(SetMetrics::default());
        let r = registry.sub_registry_with_prefix("mcm");
        r.register(
            "machine_set_items_total",
            "Count of MachineSets",
            m.set_items.clone(),
        );
        r.register(
            "machine_set_status_replicas",
            "status.replicas of each MachineSet",
            m.set_gauges.clone(),
        );
        r.register(
            "machine_set_status_condition",
            "Conditions of each MachineSet (1 True, 0 False, 2 Unknown)",
            m.set_conditions.clone(),
        );
        r.register(
            "machine_deployment_items_total",
            "Count of MachineDeployments",
            m.deployment_items.clone(),
        );
        r.register(
            "machine_deployment_status_replicas",
            "status.replicas of each MachineDeployment",
            m.deployment_gauges.clone(),
        );
        r.register(
            "machine_deployment_status_condition",
            "Conditions of each MachineDeployment (1 True, 0 False, 2 Unknown)",
            m.deployment_conditions.clone(),
        );
        m
    }

    /// Refills the series from the MachineSets and MachineDeployments of `namespace`.
    pub async fn refresh(&self, client: &kube::Client, namespace: &str) -> Result<(), kube::Error> {
        use kube::api::{Api, ListParams};
        use kube::ResourceExt;
        let sets: Api<mcm_api::MachineSet> = Api::namespaced(client.clone(), namespace);
        let deployments: Api<mcm_api::MachineDeployment> =
            Api::namespaced(client.clone(), namespace);
        let sets = sets.list(&ListParams::default()).await?.items;
        let deployments = deployments.list(&ListParams::default()).await?.items;
        self.set_gauges.clear();
        self.set_conditions.clear();
        self.deployment_gauges.clear();
        self.deployment_conditions.clear();
        self.set_items.set(sets.len() as i64);
        for s in &sets {
            let status = s.status.clone().unwrap_or_default();
            let l = SetGaugeLabels {
                name: s.name_any(),
                namespace: namespace.into(),
            };
            self.set_gauges
                .get_or_create(&l)
                .set(i64::from(status.replicas));
            for c in &status.conditions {
                let cl = ConditionLabels {
                    name: s.name_any(),
                    namespace: namespace.into(),
                    condition: c.type_.to_string(),
                };
                self.set_conditions
                    .get_or_create(&cl)
                    .set(condition_value(c.status.as_str()));
            }
        }
        self.deployment_items.set(deployments.len() as i64);
        for d in &deployments {
            let status = d.status.clone().unwrap_or_default();
            let l = SetGaugeLabels {
                name: d.name_any(),
                namespace: namespace.into(),
            };
            self.deployment_gauges
                .get_or_create(&l)
                .set(i64::from(status.replicas));
            for c in &status.conditions {
                let cl = ConditionLabels {
                    name: d.name_any(),
                    namespace: namespace.into(),
                    condition: c.type_.to_string(),
                };
                self.deployment_conditions
                    .get_or_create(&cl)
                    .set(condition_value(c.status.as_str()));
            }
        }
        Ok(())
    }
}

/// Encodes a registry in the Prometheus text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
