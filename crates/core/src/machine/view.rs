//! The one model of a Machine in core (design: README.md, "One Machine model").
//!
//! [`MachineView`] is a plain snapshot of a Machine object plus the two facts
//! that are not in the object: the effective [`Settings`] (flags overridden by
//! the machine's spec and annotations) and, for the MachineSet controller, the
//! preserve annotation of the machine's Node. The Machine step machines
//! (creation, health, deletion, in-place, preservation) and the MachineSet /
//! MachineDeployment arithmetic (replicas, deletion order, auto-preservation,
//! status) all read this one struct; the runtime builds it with
//! [`MachineView::of`] and nowhere else.

use super::{elapsed, markers, parse_go_bool, parse_go_duration, split_conditions, Settings};
use crate::replicas::{controller_ref, keys, parse_rfc3339, ControllerRef};
use crate::time::from_k8s;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;
use mcm_api::{MachineOperationType as OpType, MachinePhase as Phase, MachineState as OpState};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the controllers know about one Machine.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MachineView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.creationTimestamp`; `None` only for hand-built objects (see
    /// [`MachineView::created_or`]).
    pub created: Option<DateTime<Utc>>,
    /// `metadata.deletionTimestamp` (see [`MachineView::is_deleting`]).
    pub deleting_since: Option<DateTime<Utc>>,
    /// The controller ownerReference (the owning MachineSet), if any.
    pub controller: Option<ControllerRef>,
    /// Whether the MCM finalizer is in `metadata.finalizers`.
    pub has_finalizer: bool,
    /// `spec.providerID` ("" when none).
    pub provider_id: String,
    /// The `node` label, when set and non-empty (the same value as in [`Self::labels`]).
    pub node: Option<String>,
    /// The `force-deletion` label parsed as a Go bool (invalid values are false).
    /// Preservation sets it on its own copy to plan a forced drain.
    pub force_deletion: bool,
    /// `status.currentStatus.phase` (empty when there is no status).
    pub phase: Phase,
    /// `status.currentStatus.lastUpdateTime`: since when the machine is in its phase.
    pub phase_since: Option<DateTime<Utc>>,
    /// `status.currentStatus.preserveExpiryTime`.
    pub preserve_expiry: Option<DateTime<Utc>>,
    /// `status.lastOperation` as (description, state, type); `None` when all
    /// three are empty.
    pub last_operation: Option<(String, OpState, OpType)>,
    /// `status.conditions` (the Node's conditions as last copied).
    pub conditions: Vec<NodeCondition>,
    /// Not in the object: the effective settings, from the `defaults` given to
    /// [`MachineView::of`] overridden by the machine's spec and annotations.
    /// Read by the Machine step machines; the set arithmetic does not use them.
    pub settings: Settings,
    /// Not in the object: the `preserve` annotation of the machine's Node
    /// (`Some("")` for a Node without one), filled in by the MachineSet
    /// controller from its Node cache. `None`: unknown (no target cluster,
    /// Node not cached, or a caller that does not look at Nodes).
    pub node_preserve: Option<String>,
}

impl MachineView {
    /// The snapshot of a Machine object, with its effective settings: the
    /// effective-creation-timeout annotation beats `spec.creationTimeout`,
    /// which beats `defaults`; the other timeouts and the health settings come
    /// from the spec, else from `defaults`. [`Self::node_preserve`] is left
    /// unknown.
    pub fn of(m: &mcm_api::Machine, defaults: &Settings) -> MachineView {
        use mcm_api::constants as c;
        let meta = &m.metadata;
        let labels = meta.labels.clone().unwrap_or_default();
        let annotations = meta.annotations.clone().unwrap_or_default();
        let status = m.status.as_ref();
        let op = status.map(|s| &s.last_operation);
        let last_operation = op
            .filter(|op| !(op.description.is_empty() && op.state.is_empty() && op.type_.is_empty()))
            .map(|op| (op.description.clone(), op.state.clone(), op.type_.clone()));
        MachineView {
            name: meta.name.clone().unwrap_or_default(),
            created: meta.creation_timestamp.as_ref().map(from_k8s),
            deleting_since: meta.deletion_timestamp.as_ref().map(from_k8s),
            controller: controller_ref(meta),
            has_finalizer: meta
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|x| x == c::MCM_FINALIZER)),
            provider_id: m.spec.provider_id.clone(),
            node: labels.get(c::NODE_LABEL).filter(|n| !n.is_empty()).cloned(),
            force_deletion: labels
                .get(c::FORCE_DELETION_LABEL)
                .is_some_and(|v| parse_go_bool(v)),
            phase: status
                .map(|s| s.current_status.phase.clone())
                .unwrap_or_default(),
            phase_since: status
                .and_then(|s| s.current_status.last_update_time.as_ref())
                .map(from_k8s),
            preserve_expiry: status
                .and_then(|s| s.current_status.preserve_expiry_time.as_ref())
                .map(from_k8s),
            last_operation,
            conditions: status.map(|s| s.conditions.clone()).unwrap_or_default(),
            settings: effective_settings(m, &annotations, defaults),
            node_preserve: None,
            labels,
            annotations,
        }
    }

    // --- metadata

    /// `metadata.creationTimestamp`, or `now` for an object without one (only
    /// hand-built objects): such a machine is taken as just created, so none
    /// of its timeouts has run.
    pub fn created_or(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.created.unwrap_or(now)
    }

    /// Has a deletion timestamp.
    pub fn is_deleting(&self) -> bool {
        self.deleting_since.is_some()
    }

    /// Terminating for replica counting: phase `Terminating` **or** a deletion
    /// timestamp. The reference looks at the phase only, so a machine whose
    /// DELETE went through but whose phase write failed keeps counting as a
    /// live replica and the set deletes another healthy machine; mcm-rs
    /// counts it as gone.
    pub fn is_terminating(&self) -> bool {
        self.is_deleting() || self.phase == Phase::Terminating
    }

    /// Whether the `machinepriority` annotation is present (any value).
    pub fn has_priority(&self) -> bool {
        self.annotations.contains_key(keys::MACHINE_PRIORITY)
    }

    /// The `machinepriority` annotation, default 3 when missing or unparsable.
    pub fn priority(&self) -> i64 {
        self.annotations
            .get(keys::MACHINE_PRIORITY)
            .filter(|v| !v.is_empty())
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(keys::DEFAULT_MACHINE_PRIORITY)
    }

    /// The parsed `marked-for-deletion-time` annotation.
    pub fn marked_for_deletion_time(&self) -> Option<DateTime<Utc>> {
        self.annotations
            .get(keys::MARKED_FOR_DELETION_TIME)
            .and_then(|v| parse_rfc3339(v))
    }

    /// Carries `preserve=auto-preserved`.
    pub fn is_auto_preserved(&self) -> bool {
        self.annotations.get(keys::PRESERVE).map(String::as_str) == Some(keys::PRESERVE_AUTO)
    }

    /// Carries `update-result=successful` (moved here by an in-place rollout).
    pub fn is_update_successful(&self) -> bool {
        self.labels.get(keys::UPDATE_RESULT).map(String::as_str)
            == Some(keys::UPDATE_RESULT_SUCCESSFUL)
    }

    // --- status

    /// Preserved: a preserve expiry time in the future.
    pub fn is_preserved(&self, now: DateTime<Utc>) -> bool {
        self.preserve_expiry.is_some_and(|t| t > now)
    }

    /// `status.lastOperation.state == "Failed"`.
    pub fn last_operation_failed(&self) -> bool {
        matches!(&self.last_operation, Some((_, OpState::Failed, _)))
    }

    /// Whether the last recorded operation is a failed InitializeMachine.
    pub fn initialization_failed(&self) -> bool {
        matches!(&self.last_operation,
            Some((d, OpState::Failed, OpType::Create)) if d.ends_with(markers::INSTANCE_INITIALIZATION))
    }

    /// Whether the creation flow must run: no providerID, no phase yet, or CrashLoopBackOff.
    /// Unlike the reference (design: machine.md, "Where mcm-rs differs from the
    /// reference", item 5), a `Failed` machine never re-enters the
    /// creation flow: it waits for its MachineSet to replace it, so no further VM is made.
    pub fn needs_creation_flow(&self) -> bool {
        if self.phase == Phase::Failed {
            return false;
        }
        self.provider_id.is_empty()
            || self.phase == Phase::Empty
            || self.phase == Phase::CrashLoopBackOff
    }

    /// Whether a reconcile runs the Node's sync, the startup-taint check,
    /// the health check and the in-place update's machine side: only with a
    /// target cluster, for a machine that has a `node` label and a phase
    /// (design: machine.md, "Health check"; the reference crashes without a
    /// target cluster, item 14).
    pub fn needs_health_check(&self, target_cluster: bool) -> bool {
        target_cluster && self.node.is_some() && !self.phase.is_empty()
    }

    /// Whether the creation timeout has passed.
    pub fn creation_timed_out(&self, now: DateTime<Utc>) -> bool {
        elapsed(self.created_or(now), now) > self.settings.creation_timeout
    }
}

/// The effective settings of a machine: the effective-creation-timeout
/// annotation > `spec.creationTimeout` > `defaults`; the rest spec > `defaults`.
fn effective_settings(
    m: &mcm_api::Machine,
    annotations: &BTreeMap<String, String>,
    defaults: &Settings,
) -> Settings {
    let cfg = &m.spec.configuration;
    let dur =
        |v: &Option<String>, d: Duration| v.as_deref().and_then(parse_go_duration).unwrap_or(d);
    let creation_timeout = annotations
        .get(keys::EFFECTIVE_CREATION_TIMEOUT)
        .and_then(|v| parse_go_duration(v))
        .unwrap_or_else(|| dur(&cfg.creation_timeout, defaults.creation_timeout));
    Settings {
        creation_timeout,
        health_timeout: dur(&cfg.health_timeout, defaults.health_timeout),
        drain_timeout: dur(&cfg.drain_timeout, defaults.drain_timeout),
        max_evict_retries: cfg.max_evict_retries.unwrap_or(defaults.max_evict_retries),
        node_conditions: cfg
            .node_conditions
            .as_deref()
            .map_or_else(|| defaults.node_conditions.clone(), split_conditions),
        disable_health_timeout: cfg.disable_health_timeout.unwrap_or(false),
    }
}

impl MachineView {
    /// The target cluster and the machine's Node, when both are known: what
    /// every step that acts on the Node carries.
    pub fn target_node<T: Clone>(&self, target: Option<&T>) -> Option<(T, String)> {
        Some((target?.clone(), self.node.clone()?))
    }
}

/// The one fixture builder of the core tests: a named machine in a phase,
/// everything else empty, refined by the chained setters below or by struct
/// update (`MachineView { provider_id: .., ..MachineView::test("m", phase) }`).
#[cfg(test)]
impl MachineView {
    /// A machine `name` in `phase`, with default settings and nothing else.
    pub(crate) fn test(name: &str, phase: Phase) -> MachineView {
        MachineView {
            name: name.to_string(),
            phase,
            ..Default::default()
        }
    }

    /// Created at `t`.
    pub(crate) fn created_at(mut self, t: DateTime<Utc>) -> MachineView {
        self.created = Some(t);
        self
    }

    /// In its phase since `t`.
    pub(crate) fn in_phase_since(mut self, t: DateTime<Utc>) -> MachineView {
        self.phase_since = Some(t);
        self
    }

    /// With annotation `k=v`.
    pub(crate) fn annotated(mut self, k: &str, v: &str) -> MachineView {
        self.annotations.insert(k.to_string(), v.to_string());
        self
    }

    /// With label `k=v`.
    pub(crate) fn labelled(mut self, k: &str, v: &str) -> MachineView {
        self.labels.insert(k.to_string(), v.to_string());
        self
    }

    /// Running on Node `n` (the `node` label and [`Self::node`]).
    pub(crate) fn on_node(mut self, n: &str) -> MachineView {
        self.node = Some(n.to_string());
        self.labelled(mcm_api::constants::NODE_LABEL, n)
    }

    /// With a last operation `(description, state, type)`.
    pub(crate) fn last_op(
        mut self,
        description: &str,
        state: OpState,
        kind: OpType,
    ) -> MachineView {
        self.last_operation = Some((description.to_string(), state, kind));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(v: serde_json::Value) -> mcm_api::Machine {
        serde_json::from_value(v).expect("a valid Machine")
    }

    #[test]
    fn one_constructor_fills_what_both_controllers_read() {
        let m = machine(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {
                "name": "m1",
                "labels": {"node": "n1", "force-deletion": "True"},
                "annotations": {"machinepriority.machine.sapcloud.io": "1",
                                "node.machine.sapcloud.io/effective-creation-timeout": "7m"},
                "finalizers": ["machine.sapcloud.io/machine-controller-manager"],
                "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1",
                    "kind": "MachineSet", "name": "s", "uid": "u", "controller": true}],
                "creationTimestamp": "2026-01-01T10:00:00Z",
                "deletionTimestamp": "2026-01-01T11:00:00Z"},
            "spec": {"class": {"kind": "MachineClass", "name": "c"}, "providerID": "p1",
                     "creationTimeout": "3m", "healthTimeout": "4m"},
            "status": {
                "currentStatus": {"phase": "Failed", "lastUpdateTime": "2026-01-01T10:30:00Z",
                                  "preserveExpiryTime": "2026-01-02T10:00:00Z"},
                "lastOperation": {"description": "x", "state": "Failed", "type": "Create"}},
        }));
        let v = MachineView::of(&m, &Settings::default());
        assert_eq!(v.name, "m1");
        assert_eq!(v.node.as_deref(), Some("n1"));
        assert!(v.force_deletion && v.has_finalizer && v.has_priority());
        assert_eq!(v.priority(), 1);
        assert_eq!(v.provider_id, "p1");
        assert_eq!(v.phase, Phase::Failed);
        assert!(v.is_deleting() && v.is_terminating());
        assert!(v.last_operation_failed());
        assert!(v.phase_since.is_some() && v.preserve_expiry.is_some());
        assert_eq!(v.controller.as_ref().map(|c| c.uid.as_str()), Some("u"));
        assert_eq!(v.settings.creation_timeout, Duration::from_secs(7 * 60));
        assert_eq!(v.settings.health_timeout, Duration::from_secs(4 * 60));
        assert_eq!(v.node_preserve, None);
    }

    #[test]
    fn a_machine_without_status_has_no_phase_and_no_operation() {
        let m = machine(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m1", "labels": {"node": ""}},
            "spec": {"class": {"kind": "MachineClass", "name": "c"}},
        }));
        let v = MachineView::of(&m, &Settings::default());
        assert_eq!(v.phase, Phase::Empty);
        assert_eq!(v.last_operation, None);
        assert!(!v.last_operation_failed() && !v.is_terminating());
        assert_eq!(v.node, None, "an empty node label names no node");
        assert!(v.needs_creation_flow());
    }

    #[test]
    fn a_machine_without_creation_timestamp_has_not_timed_out() {
        let v = MachineView::test("m", Phase::Pending);
        assert!(!v.creation_timed_out(Utc::now()));
    }
}
