//! Machine preservation decisions (design: machine.md, "Preservation").
//!
//! The `node.machine.sapcloud.io/preserve` annotation on a Machine or on its
//! Node asks the machine controller to keep the machine (and its VM) for the
//! preserve timeout: `now` whatever the phase, `when-failed` and
//! `auto-preserved` (written by the MachineSet) only while it is Failed,
//! `false` (or removing the annotation) stops. [`plan_preservation`] turns
//! what the Machine and its Node say into the ordered [`PreserveStep`]s of
//! one reconcile; every step is idempotent, so a crash between two steps is
//! picked up by the next reconcile, which plans again from the objects.
//!
//! Which annotation wins (the reference's `getEffectivePreservationAnnotations`):
//! the Node's, once the Node carries one or the machine records a value it
//! applied from the Node (`last-applied-node-preserve-value`); the Machine's
//! otherwise, and when the Node cannot be found. A Node value taken over is
//! recorded on the Machine and the Machine's own annotation dropped.
//!
//! Unlike the reference, a Failed machine whose preservation *expired* is
//! annotated `preserve=false` when its annotations are cleared: otherwise its
//! MachineSet's auto-preservation would annotate it `auto-preserved` again in
//! the next pass and the machine would be preserved for ever, one timeout
//! after the other.

use super::{elapsed, plan_drain, DrainPlan, MachineView, Phase};
use crate::time::to_k8s;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use mcm_api::constants as c;
use std::time::Duration;

/// A valid value of the preserve annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreserveValue {
    /// `now`: preserve whatever the phase.
    Now,
    /// `when-failed`: preserve while the machine is Failed.
    WhenFailed,
    /// `auto-preserved`: like `when-failed`, written by the MachineSet.
    AutoPreserved,
    /// `false`: do not preserve.
    False,
}

impl PreserveValue {
    /// Parses an annotation value; `None` for anything else (also `""`).
    pub fn parse(v: &str) -> Option<PreserveValue> {
        match v {
            c::PRESERVE_VALUE_NOW => Some(PreserveValue::Now),
            c::PRESERVE_VALUE_WHEN_FAILED => Some(PreserveValue::WhenFailed),
            c::PRESERVE_VALUE_AUTO_PRESERVED => Some(PreserveValue::AutoPreserved),
            c::PRESERVE_VALUE_FALSE => Some(PreserveValue::False),
            _ => None,
        }
    }

    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            PreserveValue::Now => c::PRESERVE_VALUE_NOW,
            PreserveValue::WhenFailed => c::PRESERVE_VALUE_WHEN_FAILED,
            PreserveValue::AutoPreserved => c::PRESERVE_VALUE_AUTO_PRESERVED,
            PreserveValue::False => c::PRESERVE_VALUE_FALSE,
        }
    }
}

/// What preservation reads of the machine's Node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreserveNodeView {
    /// The Node's preserve annotation, raw.
    pub annotation: Option<String>,
    /// The Node's `Preserved` condition.
    pub condition: Option<NodeCondition>,
    /// The Node carries the `preserved:NoSchedule` taint.
    pub tainted: bool,
    /// The Node carries `cluster-autoscaler.kubernetes.io/scale-down-disabled=true`.
    pub ca_scale_down_disabled: bool,
    /// ... and the marker that MCM set it.
    pub ca_scale_down_disabled_by_mcm: bool,
}

impl PreserveNodeView {
    /// The view of a Node object.
    pub fn of(n: &Node) -> PreserveNodeView {
        let annotations = n.metadata.annotations.clone().unwrap_or_default();
        let is_true = |k: &str| {
            annotations.get(k).map(String::as_str) == Some(c::CA_SCALE_DOWN_DISABLED_VALUE)
        };
        PreserveNodeView {
            annotation: annotations.get(c::PRESERVE_ANNOTATION).cloned(),
            condition: n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == c::NODE_PRESERVED_CONDITION))
                .cloned(),
            tainted: n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| {
                    ts.iter()
                        .any(|t| t.key == c::PRESERVED_TAINT && t.effect == "NoSchedule")
                }),
            ca_scale_down_disabled: is_true(c::CA_SCALE_DOWN_DISABLED_ANNOTATION),
            ca_scale_down_disabled_by_mcm: is_true(c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION),
        }
    }
}

/// The machine's Node, as far as the controller could look.
#[derive(Debug, Clone, PartialEq)]
pub enum PreserveNode {
    /// The machine has no `node` label (no Node, e.g. without a target cluster).
    NoNode,
    /// The machine names a Node that does not exist (any more).
    Missing,
    /// The Node.
    Found(PreserveNodeView),
}

/// Everything one preservation decision reads.
#[derive(Debug, Clone, PartialEq)]
pub struct PreserveInput {
    /// The Machine's preserve annotation, raw.
    pub machine_annotation: Option<String>,
    /// The Machine's `last-applied-node-preserve-value` annotation ("" when absent).
    pub last_applied: String,
    /// The Node.
    pub node: PreserveNode,
    /// The machine (phase, phase time, conditions, drain settings).
    pub machine: MachineView,
    /// `status.currentStatus.preserveExpiryTime`.
    pub expiry: Option<DateTime<Utc>>,
    /// The effective preserve timeout (spec `machinePreserveTimeout` > flag).
    pub timeout: Duration,
    /// The Machine carries `force-drain=True`.
    pub force_drain: bool,
    /// The time of the decision.
    pub now: DateTime<Utc>,
}

impl PreserveInput {
    /// The input for a machine (its view) and what was found of its Node.
    pub fn of(
        view: &MachineView,
        node: PreserveNode,
        timeout: Duration,
        now: DateTime<Utc>,
    ) -> PreserveInput {
        PreserveInput {
            machine_annotation: view.annotations.get(c::PRESERVE_ANNOTATION).cloned(),
            last_applied: view
                .annotations
                .get(c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION)
                .cloned()
                .unwrap_or_default(),
            node,
            machine: view.clone(),
            expiry: view.preserve_expiry,
            timeout,
            force_drain: view
                .labels
                .get(c::FORCE_DRAIN_LABEL)
                .is_some_and(|v| v == c::FORCE_DRAIN_LABEL_VALUE),
            now,
        }
    }
}

/// One effect of a preservation pass, in the order they are to be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum PreserveStep {
    /// Write `preserveExpiryTime` (status).
    SetExpiry(DateTime<Utc>),
    /// Node: add `scale-down-disabled=true` and its `...-by-mcm` marker.
    AddScaleDownDisabled,
    /// Node: add the `preserved:NoSchedule` taint (instead of a cordon, so a
    /// user's own cordon is never undone).
    Taint,
    /// Drain the Node (no cordon), then write the condition that
    /// [`preserved_condition`] computes from the drain's result.
    Drain(DrainPlan),
    /// Node: write this `Preserved` condition.
    SetCondition(NodeCondition),
    /// Node: remove the `preserved:NoSchedule` taint.
    Untaint,
    /// Node: condition `Preserved=False`, reason `Preservation stopped.`.
    StopCondition,
    /// Node: remove the scale-down-disabled annotations MCM set (`ca`) and the
    /// preserve annotation (`preserve`).
    RemoveNodeAnnotations {
        /// The scale-down-disabled annotation and its marker.
        ca: bool,
        /// The preserve annotation.
        preserve: bool,
    },
    /// Machine: remove the preserve and last-applied annotations; with
    /// `mark_false`, set `preserve=false` instead of removing it.
    RemoveMachineAnnotations {
        /// Write `preserve=false` (an expired, Failed machine).
        mark_false: bool,
    },
    /// Clear `preserveExpiryTime` (status): the last step of a stop.
    ClearExpiry,
    /// Machine: record the Node's value as `last-applied-node-preserve-value`
    /// and drop the Machine's own preserve annotation.
    RecordNodeValue(String),
}

/// The decision of one preservation pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreservePlan {
    /// Invalid annotation values, one message each (for a Warning Event).
    pub invalid: Vec<String>,
    /// The effective value, when the machine is preservation-bound.
    pub effective: Option<String>,
    /// The effects, in order.
    pub steps: Vec<PreserveStep>,
    /// Reconcile again after this long (the expiry).
    pub recheck_after: Option<Duration>,
    /// Short description for the log ("preserve", "stop", ...).
    pub summary: &'static str,
}

/// The drain of a preserved Failed machine: forced with the `force-drain`
/// label, once the drain timeout has passed since the machine failed
/// (`lastUpdateTime`), or when its node has been NotReady/ReadonlyFilesystem
/// for more than 5 minutes (design: machine.md, "Drain").
pub fn preserve_drain_plan(input: &PreserveInput) -> DrainPlan {
    let mut v = input.machine.clone();
    v.deleting_since = Some(v.phase_since.unwrap_or(input.now));
    v.force_deletion = input.force_drain;
    plan_drain(&v, input.now)
}

/// Whether the preserved machine's Node still needs a drain: it is Failed
/// and no successful drain is recorded in the `Preserved` condition.
fn drain_required(phase: &Phase, condition: Option<&NodeCondition>) -> bool {
    *phase == Phase::Failed
        && !condition.is_some_and(|c| {
            c.message
                .as_deref()
                .is_some_and(|m| m.contains(c::PRESERVED_NODE_DRAIN_SUCCESSFUL))
        })
}

/// The `Preserved` condition to write, or `None` when `existing` already says
/// it (`computeNewNodePreservedCondition`). For a Failed machine the drain's
/// result (`drain`) decides: True / "Preserved node drained successfully." or
/// False / "Preserved node could not be drained."; otherwise True. The reason
/// is `Preserved by MCM.` for `auto-preserved`, else `Preserved by user.`.
pub fn preserved_condition(
    phase: &Phase,
    value: &str,
    drain: Option<&Result<(), String>>,
    existing: Option<&NodeCondition>,
    expiry: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<NodeCondition> {
    // Go's `%v` of the `*metav1.Time` (machine_util.go:2515-2526).
    let until = expiry.map_or_else(|| "<nil>".to_string(), crate::machine::go_time);
    let mut cond = existing.cloned().unwrap_or_else(|| NodeCondition {
        type_: c::NODE_PRESERVED_CONDITION.into(),
        status: "False".into(),
        ..Default::default()
    });
    let mut changed = existing.is_none();
    let old_message = cond.message.clone().unwrap_or_default();
    let (status, message) = if *phase == Phase::Failed {
        match drain {
            Some(Ok(())) if !old_message.contains(c::PRESERVED_NODE_DRAIN_SUCCESSFUL) => (
                "True",
                Some(format!(
                    "{} Machine preserved until {until}.",
                    c::PRESERVED_NODE_DRAIN_SUCCESSFUL
                )),
            ),
            Some(Err(_)) if !old_message.contains(c::PRESERVED_NODE_DRAIN_UNSUCCESSFUL) => (
                "False",
                Some(format!(
                    "{} Machine preserved until {until}.",
                    c::PRESERVED_NODE_DRAIN_UNSUCCESSFUL
                )),
            ),
            _ => (cond.status.as_str(), None),
        }
    } else if cond.status != "True" {
        ("True", Some(format!("Machine preserved until {until}.")))
    } else {
        ("True", None)
    };
    let status = status.to_string();
    if let Some(msg) = message {
        cond.message = Some(msg);
        changed = true;
    }
    if cond.status != status || existing.is_none() {
        cond.last_transition_time = Some(to_k8s(now));
        cond.status = status;
        changed = true;
    }
    let reason = if value == c::PRESERVE_VALUE_AUTO_PRESERVED {
        c::PRESERVED_BY_MCM
    } else {
        c::PRESERVED_BY_USER
    };
    cond.reason = Some(reason.into());
    changed.then_some(cond)
}

/// The `Preserved` condition of a stopped preservation: reason
/// `Preservation stopped.` and, as the reference, no message (an empty one,
/// so that the merge patch clears the previous "preserved until" text).
pub fn stopped_condition(now: DateTime<Utc>) -> NodeCondition {
    NodeCondition {
        type_: c::NODE_PRESERVED_CONDITION.into(),
        status: "False".into(),
        reason: Some(c::PRESERVATION_STOPPED.into()),
        message: Some(String::new()),
        last_transition_time: Some(to_k8s(now)),
        ..Default::default()
    }
}

/// Plans one preservation pass (`manageMachinePreservation`); see the module
/// documentation for the rules.
pub fn plan_preservation(input: &PreserveInput) -> PreservePlan {
    let mut plan = PreservePlan::default();
    let now = input.now;
    let mut machine_value = input.machine_annotation.clone();
    if let Some(v) = &machine_value {
        if PreserveValue::parse(v).is_none() {
            plan.invalid.push(invalid_message("Machine", v));
            machine_value = None;
        }
    }
    let node_value = match &input.node {
        PreserveNode::Found(n) => n.annotation.clone(),
        _ => None,
    };
    if let Some(v) = &node_value {
        if PreserveValue::parse(v).is_none() {
            plan.invalid.push(invalid_message("Node", v));
            plan.summary = "invalid node value";
            return plan;
        }
    }
    let bound = input.expiry.is_some()
        || machine_value.is_some()
        || node_value.is_some()
        || !input.last_applied.is_empty();
    if !bound {
        plan.summary = "not preservation-bound";
        return plan;
    }
    let effective = match &input.node {
        PreserveNode::Missing => machine_value.clone(),
        _ if node_value.is_none() && input.last_applied.is_empty() => machine_value.clone(),
        _ => node_value.clone(),
    };
    plan.effective = effective.clone();
    let failed = input.machine.phase == Phase::Failed;
    let expired = input.expiry.is_some_and(|t| t <= now);
    let value = effective.as_deref().and_then(PreserveValue::parse);
    // (preserve?, remove annotations when stopping)
    let (preserve, remove) = match value {
        None | Some(PreserveValue::False) => (false, false),
        Some(PreserveValue::Now) => (!expired, expired),
        Some(PreserveValue::WhenFailed) => (failed && !expired, expired),
        Some(PreserveValue::AutoPreserved) => (failed && !expired, !failed || expired),
    };
    let mut expiry = input.expiry;
    if preserve {
        plan.summary = "preserve";
        if expiry.is_none() {
            let until = chrono::Duration::from_std(input.timeout)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            plan.steps.push(PreserveStep::SetExpiry(until));
            expiry = Some(until);
        }
        if let PreserveNode::Found(n) = &input.node {
            let drain = drain_required(&input.machine.phase, n.condition.as_ref());
            let complete = n.condition.as_ref().is_some_and(|c| c.status == "True") && !drain;
            if !complete {
                if !n.ca_scale_down_disabled {
                    plan.steps.push(PreserveStep::AddScaleDownDisabled);
                }
                if drain {
                    plan.steps.push(PreserveStep::Taint);
                    plan.steps
                        .push(PreserveStep::Drain(preserve_drain_plan(input)));
                } else if let Some(cond) = preserved_condition(
                    &input.machine.phase,
                    effective.as_deref().unwrap_or_default(),
                    None,
                    n.condition.as_ref(),
                    expiry,
                    now,
                ) {
                    plan.steps.push(PreserveStep::SetCondition(cond));
                }
            }
            // A `now`-preserved machine that recovered to Running is schedulable again.
            if input.machine.phase == Phase::Running && n.tainted {
                plan.steps.push(PreserveStep::Untaint);
            }
        }
        plan.recheck_after = expiry.map(|t| elapsed(now, t).max(Duration::from_secs(1)));
    } else if input.expiry.is_some() {
        plan.summary = "stop";
        if let PreserveNode::Found(n) = &input.node {
            plan.steps.push(PreserveStep::StopCondition);
            let preserve_annotation =
                remove && n.annotation.as_deref().is_some_and(|v| !v.is_empty());
            if n.ca_scale_down_disabled_by_mcm || preserve_annotation {
                plan.steps.push(PreserveStep::RemoveNodeAnnotations {
                    ca: n.ca_scale_down_disabled_by_mcm,
                    preserve: preserve_annotation,
                });
            }
        }
        if remove {
            plan.steps.push(PreserveStep::RemoveMachineAnnotations {
                mark_false: failed && expired,
            });
        }
        if matches!(&input.node, PreserveNode::Found(n) if n.tainted) {
            plan.steps.push(PreserveStep::Untaint);
        }
        plan.steps.push(PreserveStep::ClearExpiry);
    } else {
        plan.summary = "not preserved";
    }
    // Take over the Node's value (not after the annotations were cleared).
    let stopped_with_removal = !preserve && remove && input.expiry.is_some();
    let node_in_control = node_value.is_some() || !input.last_applied.is_empty();
    let node_str = node_value.clone().unwrap_or_default();
    if !stopped_with_removal
        && node_in_control
        && (node_str != input.last_applied || machine_value.is_some())
    {
        plan.steps.push(PreserveStep::RecordNodeValue(node_str));
    }
    plan
}

fn invalid_message(on: &str, value: &str) -> String {
    format!(
        "{on} annotation {}={value:?} is not one of {}; it is ignored",
        c::PRESERVE_ANNOTATION,
        c::PRESERVE_VALUES.join(", ")
    )
}

#[cfg(test)]
#[path = "preserve_tests.rs"]
mod tests;
