//! The machine activity durations of upstream #1104 (the reference's
//! `UpdateMetricsForMachineDurations` and `IncrementNumFailedToJoin`):
//!
//! - gauges of the last value, in whole seconds (Go's `Round(time.Second)`):
//!   `mcm_machine_create_duration_seconds` (from the Machine's creation to a
//!   successful CreateMachine), `…_initialize_duration_seconds` (the
//!   InitializeMachine call), `…_join_duration_seconds` (from the Machine's
//!   creation to its Node Ready), `…_delete_duration_seconds` (from the
//!   deletion timestamp to a successful DeleteMachine) with the labels
//!   `namespace`, `machine_deployment`, `instance_type` (the class's
//!   `nodeTemplate.instanceType`) and `zone` (the Machine's node template
//!   label `topology.kubernetes.io/zone`); `…_drain_duration_seconds` with
//!   `namespace`, `machine_deployment` only;
//! - the counter `mcm_machine_num_failed_join`.
//!
//! A machine without the `name` label (no MachineDeployment) writes none of
//! them, as in the reference. Unlike the reference, a class without a
//! `nodeTemplate` gives empty placement labels instead of an inconsistent
//! label set (docs/design/process-contract.md, "Metrics").

use super::{DrainLabels, DurationLabels, Metrics};
use kube::ResourceExt;
use mcm_api::{Machine, MachineClass};
use std::time::Duration;

/// The zone label of a machine's node template.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Which duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activity {
    /// From the Machine's creation to a successful CreateMachine.
    Create,
    /// The InitializeMachine call.
    Initialize,
    /// From the Machine's creation to its Node Ready.
    Join,
    /// From the deletion timestamp to a successful DeleteMachine.
    Delete,
}

impl DurationLabels {
    /// The labels of a machine of a MachineDeployment; `None` for a machine
    /// without the `name` label. `class`: its MachineClass, when known.
    pub(crate) fn of(machine: &Machine, class: Option<&MachineClass>) -> Option<DurationLabels> {
        let machine_deployment = machine.labels().get("name").cloned()?;
        Some(DurationLabels {
            namespace: machine.namespace().unwrap_or_default(),
            machine_deployment,
            instance_type: class
                .and_then(|c| c.node_template.as_ref())
                .map(|t| t.instance_type.clone())
                .unwrap_or_default(),
            zone: machine
                .spec
                .node_template
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ZONE_LABEL).cloned())
                .unwrap_or_default(),
        })
    }
}

/// Whole seconds, halves away from zero (Go's `Duration.Round(time.Second)`).
pub(crate) fn whole_seconds(d: Duration) -> f64 {
    d.as_secs_f64().round()
}

/// The time since `since` (zero when it is in the future or unknown).
pub(crate) fn since(
    since: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> Duration {
    since
        .and_then(|t| {
            (chrono::Utc::now() - mcm_core::time::from_k8s(t))
                .to_std()
                .ok()
        })
        .unwrap_or_default()
}

impl Metrics {
    /// Sets the gauge of `activity` for the machine's deployment to `took`
    /// (a zero duration is not written, as in the reference).
    pub(crate) fn machine_duration(
        &self,
        activity: Activity,
        machine: &Machine,
        class: Option<&MachineClass>,
        took: Duration,
    ) {
        let Some(labels) = DurationLabels::of(machine, class) else {
            return;
        };
        if took.is_zero() {
            return;
        }
        let family = match activity {
            Activity::Create => &self.create_duration,
            Activity::Initialize => &self.initialize_duration,
            Activity::Join => &self.join_duration,
            Activity::Delete => &self.delete_duration,
        };
        family.get_or_create(&labels).set(whole_seconds(took));
    }

    /// Sets the drain gauge of the machine's deployment.
    pub(crate) fn machine_drain_duration(&self, machine: &Machine, took: Duration) {
        if machine.labels().get("name").is_none() || took.is_zero() {
            return;
        }
        self.drain_duration
            .get_or_create(&DrainLabels::of(machine))
            .set(whole_seconds(took));
    }

    /// Counts a machine of a deployment that failed to join.
    pub(crate) fn machine_failed_join(&self, machine: &Machine, class: Option<&MachineClass>) {
        if let Some(labels) = DurationLabels::of(machine, class) {
            self.failed_join.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::encode;
    use prometheus_client::registry::Registry;
    use serde_json::json;

    fn machine(with_deployment: bool) -> Machine {
        let mut labels = json!({});
        if with_deployment {
            labels = json!({"name": "pool-a"});
        }
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m-1", "namespace": "shoot", "labels": labels},
            "spec": {
                "class": {"kind": "MachineClass", "name": "c"},
                "nodeTemplate": {"metadata": {"labels": {"topology.kubernetes.io/zone": "eu-1a"}}}
            }
        }))
        .expect("machine")
    }

    fn class(instance_type: Option<&str>) -> MachineClass {
        let mut v = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "c", "namespace": "shoot"},
            "provider": "local", "providerSpec": {}
        });
        if let Some(t) = instance_type {
            v["nodeTemplate"] = json!({
                "capacity": {"cpu": "2", "memory": "4Gi", "gpu": "0"},
                "instanceType": t, "region": "eu-1", "zone": "eu-1a"
            });
        }
        serde_json::from_value(v).expect("class")
    }

    #[test]
    fn labels_take_the_instance_type_from_the_class_and_the_zone_from_the_machine() {
        let l = DurationLabels::of(&machine(true), Some(&class(Some("m5.large")))).expect("labels");
        assert_eq!(l.namespace, "shoot");
        assert_eq!(l.machine_deployment, "pool-a");
        assert_eq!(l.instance_type, "m5.large");
        assert_eq!(l.zone, "eu-1a");
        let l = DurationLabels::of(&machine(true), Some(&class(None))).expect("labels");
        assert_eq!(l.instance_type, "", "no nodeTemplate: empty");
        assert!(DurationLabels::of(&machine(false), None).is_none());
    }

    #[test]
    fn durations_are_whole_seconds_of_the_last_value_and_only_for_deployments() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        let c = class(Some("small"));
        m.machine_duration(
            Activity::Create,
            &machine(true),
            Some(&c),
            Duration::from_millis(41_600),
        );
        m.machine_duration(
            Activity::Create,
            &machine(true),
            Some(&c),
            Duration::from_millis(12_499),
        );
        m.machine_duration(
            Activity::Initialize,
            &machine(true),
            Some(&c),
            Duration::ZERO,
        );
        m.machine_duration(
            Activity::Delete,
            &machine(false),
            Some(&c),
            Duration::from_secs(3),
        );
        m.machine_drain_duration(&machine(true), Duration::from_millis(2_500));
        m.machine_failed_join(&machine(true), Some(&c));
        m.machine_failed_join(&machine(true), Some(&c));
        let text = encode(&registry);
        let labels = "namespace=\"shoot\",machine_deployment=\"pool-a\",instance_type=\"small\",zone=\"eu-1a\"";
        assert!(
            text.contains(&format!(
                "mcm_machine_create_duration_seconds{{{labels}}} 12.0\n"
            )),
            "{text}"
        );
        assert!(
            !text.contains("mcm_machine_initialize_duration_seconds{"),
            "a zero duration is not written: {text}"
        );
        assert!(
            !text.contains("mcm_machine_delete_duration_seconds{"),
            "a machine of no deployment writes nothing: {text}"
        );
        assert!(
            text.contains(
                "mcm_machine_drain_duration_seconds{namespace=\"shoot\",machine_deployment=\"pool-a\"} 3.0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("mcm_machine_num_failed_join{{{labels}}} 2\n")),
            "{text}"
        );
    }
}
