//! MachineSet and MachineDeployment metrics (the reference's `pkg/metrics`,
//! collected from the objects of the control namespace on every scrape, as
//! the reference collects them from its listers). Unlike the reference,
//! `mcm_machine_set_status_replicas` reports `status.replicas` (the reference
//! reports readyReplicas there), and a deleted object's series are gone.

use super::{condition_value, ConditionLabels, Described};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// `{name, namespace}` of a MachineSet or MachineDeployment.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SetGaugeLabels {
    /// Object name.
    pub(crate) name: String,
    /// Namespace.
    pub(crate) namespace: String,
}

/// `mcm_machine_set_info` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)] // `createdAt` is the reference's label name.
pub(crate) struct SetInfoLabels {
    /// Object name.
    pub(crate) name: String,
    /// Namespace.
    pub(crate) namespace: String,
    /// Creation time, Unix seconds.
    pub(crate) createdAt: String,
    /// `spec.machineClass.apiGroup`.
    pub(crate) spec_machine_class_api_group: String,
    /// `spec.machineClass.kind`.
    pub(crate) spec_machine_class_kind: String,
    /// `spec.machineClass.name`.
    pub(crate) spec_machine_class_name: String,
}

/// `mcm_machine_deployment_info` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)] // `createdAt` is the reference's label name.
pub(crate) struct DeploymentInfoLabels {
    /// Object name.
    pub(crate) name: String,
    /// Namespace.
    pub(crate) namespace: String,
    /// Creation time, Unix seconds.
    pub(crate) createdAt: String,
    /// `spec.strategy.type`.
    pub(crate) spec_strategy_type: String,
}

/// `..._failed_machines` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailedMachineLabels {
    /// The set or deployment.
    pub(crate) name: String,
    /// Namespace.
    pub(crate) namespace: String,
    /// The failed machine.
    pub(crate) failed_machine_name: String,
    /// Its providerID.
    pub(crate) failed_machine_provider_id: String,
    /// Its owning MachineSet.
    pub(crate) failed_machine_owner_ref: String,
    /// Its lastOperation.state.
    pub(crate) failed_machine_last_operation_state: String,
    /// Its lastOperation.type.
    pub(crate) failed_machine_last_operation_machine_operation_type: String,
}

type Per = Family<SetGaugeLabels, Gauge>;

/// MachineSet and MachineDeployment metrics.
#[derive(Default)]
pub struct SetMetrics {
    stale: Counter,
    set_items: Gauge,
    set_info: Family<SetInfoLabels, Gauge>,
    set_spec_replicas: Per,
    set_spec_min_ready: Per,
    set_conditions: Family<ConditionLabels, Gauge>,
    set_failed: Family<FailedMachineLabels, Gauge>,
    set_available: Per,
    set_fully_labelled: Per,
    set_ready: Per,
    set_replicas: Per,
    deployment_items: Gauge,
    deployment_info: Family<DeploymentInfoLabels, Gauge>,
    deployment_paused: Per,
    deployment_spec_replicas: Per,
    deployment_min_ready: Per,
    deployment_max_surge: Per,
    deployment_max_unavailable: Per,
    deployment_history_limit: Per,
    deployment_progress_deadline: Per,
    deployment_rollback_to: Per,
    deployment_conditions: Family<ConditionLabels, Gauge>,
    deployment_available: Per,
    deployment_unavailable: Per,
    deployment_ready: Per,
    deployment_updated: Per,
    deployment_collision_count: Per,
    deployment_replicas: Per,
    deployment_failed: Family<FailedMachineLabels, Gauge>,
}

fn failed_labels(owner: &str, ns: &str, m: &mcm_api::MachineSummary) -> FailedMachineLabels {
    FailedMachineLabels {
        name: owner.into(),
        namespace: ns.into(),
        failed_machine_name: m.name.clone(),
        failed_machine_provider_id: m.provider_id.clone(),
        failed_machine_owner_ref: m.owner_ref.clone(),
        failed_machine_last_operation_state: m.last_operation.state.to_string(),
        failed_machine_last_operation_machine_operation_type: m.last_operation.type_.to_string(),
    }
}

fn created(meta: &kube::api::ObjectMeta) -> String {
    meta.creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second().to_string())
        .unwrap_or_else(|| "0".into())
}

fn int_value(v: &Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>) -> i64 {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    // Go's IntOrString.IntValue(), which the reference's gauges read: a
    // string is strconv.Atoi'd, so a percentage ("25%") reads 0.
    match v {
        Some(IntOrString::Int(i)) => i64::from(*i),
        Some(IntOrString::String(s)) => go_atoi(s),
        None => 0,
    }
}

/// Go's `strconv.Atoi` value, errors ignored: an optional sign and decimal
/// digits (no blanks, no `_`), 0 for anything else; out of range clamps to
/// the 64-bit bound, as Go returns it with its range error.
fn go_atoi(s: &str) -> i64 {
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    let magnitude = digits.bytes().try_fold(0_i128, |acc, b| {
        let next = acc * 10 + i128::from(b - b'0');
        (next <= i128::from(i64::MAX) + 1).then_some(next)
    });
    match (magnitude, negative) {
        (Some(m), true) => i64::try_from(-m).unwrap_or(i64::MIN),
        (Some(m), false) => i64::try_from(m).unwrap_or(i64::MAX),
        (None, true) => i64::MIN,
        (None, false) => i64::MAX,
    }
}

impl SetMetrics {
    /// Creates and registers the set metrics.
    /// `stale` is the Context's count of stale machines the MachineSet
    /// controller deleted ([`crate::Context::stale_machines`]), served as
    /// `mcm_machine_stale_machines_total`.
    pub fn new(registry: &mut Registry, stale: Counter) -> Arc<Self> {
        let m = Arc::new(SetMetrics {
            stale,
            ..SetMetrics::default()
        });
        let r = registry.sub_registry_with_prefix("mcm");
        r.register(
            "machine_stale_machines",
            "Total count of stale machines flagged for termination that turned stale due to long unhealthiness",
            m.stale.clone(),
        );
        let gauges: [(&str, &str, &Per); 19] = [
            (
                "machine_set_info_spec_replicas",
                "Count of the machinesets' spec replicas.",
                &m.set_spec_replicas,
            ),
            (
                "machine_set_info_spec_min_ready_seconds",
                "Information of the machinesets' minReadySeconds.",
                &m.set_spec_min_ready,
            ),
            (
                "machine_set_status_available_replicas",
                "Information of the mcm managed Machinesets' status for available replicas.",
                &m.set_available,
            ),
            (
                "machine_set_status_fully_labelled_replicas",
                "Information of the mcm managed Machinesets' status for fully labelled replicas.",
                &m.set_fully_labelled,
            ),
            (
                "machine_set_status_ready_replicas",
                "Information of the mcm managed Machinesets' status for ready replicas.",
                &m.set_ready,
            ),
            (
                "machine_set_status_replicas",
                "Information of the mcm managed Machinesets' status for replicas.",
                &m.set_replicas,
            ),
            (
                "machine_deployment_info_spec_paused",
                "Information of the machinedeployments' paused status.",
                &m.deployment_paused,
            ),
            (
                "machine_deployment_info_spec_replicas",
                "Information of the machinedeployments' spec replicas.",
                &m.deployment_spec_replicas,
            ),
            (
                "machine_deployment_info_spec_min_ready_seconds",
                "Information of the machinedeployments' minReadySeconds.",
                &m.deployment_min_ready,
            ),
            (
                "machine_deployment_info_spec_rolling_update_max_surge",
                "Information of the machinedeployments' maxSurge.",
                &m.deployment_max_surge,
            ),
            (
                "machine_deployment_info_spec_rolling_update_max_unavailable",
                "Information of the machinedeployments' maxUnavailable.",
                &m.deployment_max_unavailable,
            ),
            (
                "machine_deployment_info_spec_revision_history_limit",
                "Information of the machinedeployments' revisionHistoryLimit.",
                &m.deployment_history_limit,
            ),
            (
                "machine_deployment_info_spec_progress_deadline_seconds",
                "Information of the machinedeployments' progressDeadlineSeconds.",
                &m.deployment_progress_deadline,
            ),
            (
                "machine_deployment_info_spec_rollback_to_revision",
                "Information of the machinedeployments' rollbackTo revision.",
                &m.deployment_rollback_to,
            ),
            (
                "machine_deployment_status_available_replicas",
                "Count of the mcm managed machinedeployments available replicas.",
                &m.deployment_available,
            ),
            (
                "machine_deployment_status_unavailable_replicas",
                "Count of the mcm managed machinedeployments unavailable replicas.",
                &m.deployment_unavailable,
            ),
            (
                "machine_deployment_status_ready_replicas",
                "Count of the mcm managed machinedeployments ready replicas.",
                &m.deployment_ready,
            ),
            (
                "machine_deployment_status_updated_replicas",
                "Count of the mcm managed machinedeployments updated replicas.",
                &m.deployment_updated,
            ),
            (
                "machine_deployment_status_collision_count",
                "Collision count of the mcm managed machinedeployments.",
                &m.deployment_collision_count,
            ),
        ];
        for (name, help, family) in gauges {
            r.register(name, help, Described(family.clone()));
        }
        r.register(
            "machine_deployment_status_replicas",
            "Count of the mcm managed machinedeployments replicas.",
            Described(m.deployment_replicas.clone()),
        );
        r.register(
            "machine_set_items_total",
            "Count of machinesets currently managed by the mcm.",
            m.set_items.clone(),
        );
        r.register(
            "machine_set_info",
            "Information of the machinesets currently managed by the mcm.",
            Described(m.set_info.clone()),
        );
        r.register(
            "machine_set_status_condition",
            "Information of the mcm managed Machinesets' status conditions.",
            Described(m.set_conditions.clone()),
        );
        r.register(
            "machine_set_failed_machines",
            "Information of the mcm managed Machinesets' failed machines.",
            Described(m.set_failed.clone()),
        );
        r.register(
            "machine_deployment_items_total",
            "Count of machinedeployments currently managed by the mcm.",
            m.deployment_items.clone(),
        );
        r.register(
            "machine_deployment_info",
            "Information of the machinedeployments currently managed by the mcm.",
            Described(m.deployment_info.clone()),
        );
        r.register(
            "machine_deployment_status_condition",
            "Information of the mcm managed Machinedeployments' status conditions.",
            Described(m.deployment_conditions.clone()),
        );
        r.register(
            "machine_deployment_failed_machines",
            "Information of the mcm managed Machinedeployments' failed machines.",
            Described(m.deployment_failed.clone()),
        );
        m
    }

    fn clear(&self) {
        for f in [
            &self.set_spec_replicas,
            &self.set_spec_min_ready,
            &self.set_available,
            &self.set_fully_labelled,
            &self.set_ready,
            &self.set_replicas,
            &self.deployment_paused,
            &self.deployment_spec_replicas,
            &self.deployment_min_ready,
            &self.deployment_max_surge,
            &self.deployment_max_unavailable,
            &self.deployment_history_limit,
            &self.deployment_progress_deadline,
            &self.deployment_rollback_to,
            &self.deployment_available,
            &self.deployment_unavailable,
            &self.deployment_ready,
            &self.deployment_updated,
            &self.deployment_collision_count,
            &self.deployment_replicas,
        ] {
            f.clear();
        }
        self.set_info.clear();
        self.set_conditions.clear();
        self.set_failed.clear();
        self.deployment_info.clear();
        self.deployment_conditions.clear();
        self.deployment_failed.clear();
    }

    /// Refills the series from the MachineSets and MachineDeployments of
    /// `namespace` (from the metrics caches, no API call).
    pub fn fill(
        &self,
        sets: &[std::sync::Arc<mcm_api::MachineSet>],
        deployments: &[std::sync::Arc<mcm_api::MachineDeployment>],
        namespace: &str,
    ) {
        use kube::ResourceExt;
        self.clear();
        let ns = namespace;
        let per = |name: &str| SetGaugeLabels {
            name: name.into(),
            namespace: ns.into(),
        };
        self.set_items.set(sets.len() as i64);
        for s in sets {
            let name = s.name_any();
            let l = per(&name);
            let status = s.status.clone().unwrap_or_default();
            let class = &s.spec.machine_class;
            self.set_info
                .get_or_create(&SetInfoLabels {
                    name: name.clone(),
                    namespace: ns.into(),
                    createdAt: created(&s.metadata),
                    spec_machine_class_api_group: class.api_group.clone(),
                    spec_machine_class_kind: class.kind.clone(),
                    spec_machine_class_name: class.name.clone(),
                })
                .set(1);
            self.set_spec_replicas
                .get_or_create(&l)
                .set(i64::from(s.spec.replicas));
            self.set_spec_min_ready
                .get_or_create(&l)
                .set(i64::from(s.spec.min_ready_seconds));
            self.set_available
                .get_or_create(&l)
                .set(i64::from(status.available_replicas));
            self.set_fully_labelled
                .get_or_create(&l)
                .set(i64::from(status.fully_labeled_replicas));
            self.set_ready
                .get_or_create(&l)
                .set(i64::from(status.ready_replicas));
            self.set_replicas
                .get_or_create(&l)
                .set(i64::from(status.replicas));
            for c in &status.conditions {
                self.set_conditions
                    .get_or_create(&ConditionLabels {
                        name: name.clone(),
                        namespace: ns.into(),
                        condition: c.type_.to_string(),
                    })
                    .set(condition_value(c.status.as_str()));
            }
            for f in status.failed_machines.iter().flatten() {
                self.set_failed
                    .get_or_create(&failed_labels(&name, ns, f))
                    .set(1);
            }
        }
        self.deployment_items.set(deployments.len() as i64);
        for d in deployments {
            let name = d.name_any();
            let l = per(&name);
            let spec = &d.spec;
            let status = d.status.clone().unwrap_or_default();
            self.deployment_info
                .get_or_create(&DeploymentInfoLabels {
                    name: name.clone(),
                    namespace: ns.into(),
                    createdAt: created(&d.metadata),
                    spec_strategy_type: spec.strategy.type_.to_string(),
                })
                .set(1);
            self.deployment_paused
                .get_or_create(&l)
                .set(i64::from(spec.paused));
            self.deployment_spec_replicas
                .get_or_create(&l)
                .set(i64::from(spec.replicas));
            self.deployment_min_ready
                .get_or_create(&l)
                .set(i64::from(spec.min_ready_seconds));
            if spec.strategy.type_.as_str() == "RollingUpdate" {
                let ru = spec.strategy.rolling_update.clone().unwrap_or_default();
                self.deployment_max_surge
                    .get_or_create(&l)
                    .set(int_value(&ru.max_surge));
                self.deployment_max_unavailable
                    .get_or_create(&l)
                    .set(int_value(&ru.max_unavailable));
            }
            if let Some(v) = spec.revision_history_limit {
                self.deployment_history_limit
                    .get_or_create(&l)
                    .set(i64::from(v));
            }
            if let Some(v) = spec.progress_deadline_seconds {
                self.deployment_progress_deadline
                    .get_or_create(&l)
                    .set(i64::from(v));
            }
            if let Some(r) = &spec.rollback_to {
                self.deployment_rollback_to
                    .get_or_create(&l)
                    .set(r.revision);
            }
            for c in &status.conditions {
                self.deployment_conditions
                    .get_or_create(&ConditionLabels {
                        name: name.clone(),
                        namespace: ns.into(),
                        condition: c.type_.to_string(),
                    })
                    .set(condition_value(c.status.as_str()));
            }
            for (family, v) in [
                (&self.deployment_available, status.available_replicas),
                (&self.deployment_unavailable, status.unavailable_replicas),
                (&self.deployment_ready, status.ready_replicas),
                (&self.deployment_updated, status.updated_replicas),
                (&self.deployment_replicas, status.replicas),
            ] {
                family.get_or_create(&l).set(i64::from(v));
            }
            if let Some(c) = status.collision_count {
                self.deployment_collision_count
                    .get_or_create(&l)
                    .set(i64::from(c));
            }
            for f in &status.failed_machines {
                self.deployment_failed
                    .get_or_create(&failed_labels(&name, ns, f))
                    .set(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn max_surge_and_max_unavailable_read_as_go_int_value_so_a_percentage_is_zero() {
        let read = |v: IntOrString| int_value(&Some(v));
        assert_eq!(read(IntOrString::Int(2)), 2);
        assert_eq!(read(IntOrString::String("3".into())), 3);
        assert_eq!(read(IntOrString::String("+4".into())), 4);
        assert_eq!(read(IntOrString::String("-1".into())), -1);
        assert_eq!(read(IntOrString::String("25%".into())), 0);
        assert_eq!(read(IntOrString::String("100%".into())), 0);
        assert_eq!(read(IntOrString::String(" 1".into())), 0);
        assert_eq!(read(IntOrString::String("".into())), 0);
        assert_eq!(
            read(IntOrString::String("99999999999999999999".into())),
            i64::MAX
        );
        assert_eq!(
            read(IntOrString::String("-99999999999999999999".into())),
            i64::MIN
        );
        assert_eq!(int_value(&None), 0);
    }

    #[test]
    fn stale_removals_counted_by_the_controller_are_served() {
        let mut registry = Registry::default();
        let stale = Counter::default();
        let _m = SetMetrics::new(&mut registry, stale.clone());
        stale.inc();
        stale.inc();
        let text = super::super::encode(&registry);
        assert!(
            text.contains("mcm_machine_stale_machines_total 2"),
            "{text}"
        );
    }
}
