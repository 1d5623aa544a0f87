//! Which changes cause a Machine reconcile: the hashes the watch streams are
//! filtered by (kube-runtime predicates). A change that leaves the hash alone
//! is not an event for the controller; scheduled requeues still run.
//!
//! - A Machine: its generation (spec), labels, annotations, finalizers and
//!   deletion timestamp; NOT its status, which only the controller writes.
//!   Before this filter a failed create's status write re-triggered the
//!   reconcile at once, so throttled machines retried in a storm and their
//!   backoff was defeated.
//! - A MachineClass: its generation (providerSpec, secret references, node
//!   template) — not the finalizer the controller adds.
//! - A Node: what the health check and the node sync read (the Ready and
//!   configured conditions' type and status, the `InPlaceUpdate`
//!   condition's reason, labels, annotations, taints, deletion), not the
//!   kubelet's heartbeat timestamps.
//!
//! See `docs/design/machine.md`, "Triggers".

use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use mcm_api::{Machine, MachineClass};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

fn finish(h: DefaultHasher) -> Option<u64> {
    Some(h.finish())
}

fn hash_meta<K: Resource>(obj: &K, h: &mut DefaultHasher) {
    let meta = obj.meta();
    meta.labels.hash(h);
    meta.annotations.hash(h);
    meta.finalizers.hash(h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(h);
}

/// The trigger hash of a Machine.
pub(crate) fn machine(m: &Machine) -> Option<u64> {
    let mut h = DefaultHasher::new();
    m.meta().generation.hash(&mut h);
    // Objects of a server without generations (or tests) fall back to the spec.
    if m.meta().generation.is_none() {
        serde_json::to_string(&m.spec).ok().hash(&mut h);
    }
    // The controller's own record of a create attempt is not a trigger: it is
    // written just before CreateMachine, and a re-trigger would cut a failed
    // create's backoff short.
    let mut meta = m.meta().clone();
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(mcm_core::machine::CLOUD_CREATE_ANNOTATION);
    }
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    finish(h)
}

/// The trigger hash of a MachineClass.
pub(crate) fn class(c: &MachineClass) -> Option<u64> {
    let mut h = DefaultHasher::new();
    c.meta().generation.hash(&mut h);
    if c.meta().generation.is_none() {
        serde_json::to_string(c).ok().hash(&mut h);
    }
    c.meta()
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    finish(h)
}

/// The trigger hash of a Node.
pub(crate) fn node(n: &Node) -> Option<u64> {
    let mut h = DefaultHasher::new();
    hash_meta(n, &mut h);
    if let Some(spec) = &n.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.value, &t.effect).hash(&mut h);
        }
        spec.provider_id.hash(&mut h);
    }
    if let Some(status) = &n.status {
        for c in status.conditions.iter().flatten() {
            (&c.type_, &c.status).hash(&mut h);
            // The in-place protocol moves on by reason (design: machine.md, "In-place updates").
            if c.type_ == mcm_api::constants::NODE_IN_PLACE_UPDATE_CONDITION {
                c.reason.hash(&mut h);
            }
        }
        for a in status.addresses.iter().flatten() {
            (&a.type_, &a.address).hash(&mut h);
        }
    }
    finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_machine_status_write_is_not_a_trigger() {
        let mut m = Machine::new("m", Default::default());
        m.metadata.generation = Some(1);
        let before = machine(&m);
        let mut st = m.status.clone().unwrap_or_default();
        st.current_status.phase = mcm_api::MachinePhase::CrashLoopBackOff;
        st.last_operation.description = "Cloud provider message - throttled".into();
        m.status = Some(st);
        assert_eq!(machine(&m), before);
    }

    #[test]
    fn spec_labels_annotations_and_deletion_are_triggers() {
        let mut m = Machine::new("m", Default::default());
        m.metadata.generation = Some(1);
        let base = machine(&m);
        let mut spec = m.clone();
        spec.metadata.generation = Some(2);
        assert_ne!(machine(&spec), base);
        let mut labelled = m.clone();
        labelled.metadata.labels = Some([("node".to_string(), "n".to_string())].into());
        assert_ne!(machine(&labelled), base);
        let mut annotated = m.clone();
        annotated.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        assert_ne!(machine(&annotated), base);
        let mut deleting = m.clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_ne!(machine(&deleting), base);
    }

    #[test]
    fn a_kubelet_heartbeat_is_not_a_trigger_but_a_condition_change_is() {
        let cond = |status: &str, beat: i64| NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_heartbeat_time: k8s_openapi::jiff::Timestamp::from_second(beat)
                .ok()
                .map(Time),
            ..Default::default()
        };
        let node_with = |c: NodeCondition| Node {
            status: Some(NodeStatus {
                conditions: Some(vec![c]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = node(&node_with(cond("True", 100)));
        assert_eq!(node(&node_with(cond("True", 200))), a);
        assert_ne!(node(&node_with(cond("Unknown", 200))), a);
    }

    #[test]
    fn an_in_place_update_reason_change_is_a_trigger_but_a_ready_reason_is_not() {
        let node_with = |ty: &str, reason: &str| Node {
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: ty.into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_ne!(
            node(&node_with("InPlaceUpdate", "SelectedForUpdate")),
            node(&node_with("InPlaceUpdate", "DrainSuccessful"))
        );
        assert_eq!(
            node(&node_with("Ready", "KubeletReady")),
            node(&node_with("Ready", "Other"))
        );
    }

    #[test]
    fn the_class_finalizer_is_not_a_trigger_but_a_spec_change_is() {
        let mut c = MachineClass::default();
        c.metadata.generation = Some(3);
        let base = class(&c);
        let mut with_finalizer = c.clone();
        with_finalizer.metadata.finalizers =
            Some(vec!["machine.sapcloud.io/machine-controller-manager".into()]);
        assert_eq!(class(&with_finalizer), base);
        let mut changed = c.clone();
        changed.metadata.generation = Some(4);
        assert_ne!(class(&changed), base);
    }
}
