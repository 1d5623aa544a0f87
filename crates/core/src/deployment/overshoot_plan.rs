//! One pass of the overshoot safety loop as a plan (design:
//! sets-and-deployments.md, "Overshoot safety"): from the MachineSets,
//! MachineDeployments and Machines the pass reads, the ordered list of
//! freezes, unfreezes and Events to perform. The runtime
//! (`sets/overshoot.rs`) reads the caches, asks [`plan_overshoot`], and
//! performs the actions in order; it decides nothing.
//!
//! The plan assumes that its writes succeed. An action that only makes
//! sense after another (a set's freeze carries its deployment's freeze and
//! its Event; a set's unfreeze its Event) names it in
//! [`PlannedAction::after`], and the runtime skips it when that one failed.
//! A failed write is otherwise corrected by the next pass, which plans again
//! from the objects (a pass runs every `--machine-safety-overshooting-period`
//! and soon after any change).

use super::*;
use mcm_api::{Machine, MachineDeployment};
use std::collections::HashMap;
use std::sync::Arc;

/// What one pass reads (the shared caches' contents) and the flags it uses.
#[derive(Debug, Clone, Copy)]
pub struct OvershootInput<'a> {
    /// The namespace's MachineSets.
    pub sets: &'a [Arc<MachineSet>],
    /// The namespace's MachineDeployments.
    pub deployments: &'a [Arc<MachineDeployment>],
    /// The namespace's Machines.
    pub machines: &'a [Arc<Machine>],
    /// `--safety-up`.
    pub safety_up: i32,
    /// `--safety-down`.
    pub safety_down: i32,
}

/// The object a freeze or unfreeze writes, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreezeTarget {
    /// A MachineSet.
    Set(String),
    /// A MachineDeployment.
    Deployment(String),
}

/// A Normal Event on a MachineSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetEvent {
    /// The set.
    pub set: String,
    /// `FrozeMachineSet` or `UnfrozeMachineSet`.
    pub reason: &'static str,
    /// The Event's action (`Freeze`, `Unfreeze`).
    pub action: &'static str,
    /// The Event's note.
    pub note: String,
}

/// One effect of the pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OvershootAction {
    /// Freeze (`frozen`) or unfreeze an object: its `Frozen` condition as
    /// [`set_conditions_after_freeze`] / [`deployment_conditions_after_freeze`]
    /// say, its `freeze` label, and on an unfreeze the removal of the
    /// unfreeze annotation.
    Freeze {
        /// The object.
        target: FreezeTarget,
        /// Freeze or unfreeze.
        frozen: bool,
        /// The condition's reason.
        reason: &'static str,
        /// The condition's message.
        message: String,
    },
    /// Publish an Event on a set.
    Event(SetEvent),
}

/// An action and the earlier action it depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAction {
    /// What to do.
    pub action: OvershootAction,
    /// Only when the action at this index of the plan succeeded.
    pub after: Option<usize>,
}

/// Whether a set is frozen: its `freeze=True` label or a `Frozen` condition.
pub fn set_is_frozen(ms: &MachineSet) -> bool {
    label_frozen(&ms.metadata)
        || ms.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == MachineSetConditionType::Frozen)
        })
}

/// Whether a deployment is frozen: its `freeze=True` label or a `Frozen` condition.
pub fn deployment_is_frozen(d: &MachineDeployment) -> bool {
    label_frozen(&d.metadata)
        || d.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == MachineDeploymentConditionType::Frozen)
        })
}

fn label_frozen(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(c::FREEZE_LABEL))
        .map(String::as_str)
        == Some(c::FREEZE_LABEL_VALUE)
}

/// The deployment a set belongs to: its controller, else the first
/// deployment whose non-empty selector matches the set's labels.
pub fn parent_deployment<'a>(
    ms: &MachineSet,
    deployments: &'a [Arc<MachineDeployment>],
) -> Option<&'a Arc<MachineDeployment>> {
    if let Some(cr) = controller_ref(&ms.metadata).filter(|c| c.kind == "MachineDeployment") {
        if let Some(d) = deployments
            .iter()
            .find(|d| d.metadata.uid.as_deref() == Some(cr.uid.as_str()))
        {
            return Some(d);
        }
    }
    let labels = ms.metadata.labels.clone().unwrap_or_default();
    deployments.iter().find(|d| {
        d.spec.selector.as_ref().is_some_and(|s| {
            !crate::replicas::selector_is_empty(s)
                && crate::replicas::selector_matches(s, &labels).unwrap_or(false)
        })
    })
}

/// The conditions a set's freeze change writes: with a `Frozen` condition
/// added on a freeze (when it has none), without it on an unfreeze. `None`
/// when they stay as they are (no condition write; the label is written
/// anyway).
pub fn set_conditions_after_freeze(
    conditions: &[MachineSetCondition],
    frozen: bool,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Option<Vec<MachineSetCondition>> {
    let had = conditions
        .iter()
        .any(|c| c.type_ == MachineSetConditionType::Frozen);
    if frozen == had {
        return None;
    }
    let mut out = conditions.to_vec();
    if frozen {
        out.push(MachineSetCondition {
            type_: MachineSetConditionType::Frozen,
            status: ConditionStatus::True,
            last_transition_time: Some(to_k8s(now)),
            reason: reason.to_string(),
            message: message.to_string(),
        });
    } else {
        out.retain(|c| c.type_ != MachineSetConditionType::Frozen);
    }
    Some(out)
}

/// [`set_conditions_after_freeze`] for a deployment.
pub fn deployment_conditions_after_freeze(
    conditions: &[MachineDeploymentCondition],
    frozen: bool,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Option<Vec<MachineDeploymentCondition>> {
    let had = conditions
        .iter()
        .any(|c| c.type_ == MachineDeploymentConditionType::Frozen);
    if frozen == had {
        return None;
    }
    let mut out = conditions.to_vec();
    if frozen {
        out.push(MachineDeploymentCondition {
            type_: MachineDeploymentConditionType::Frozen,
            status: ConditionStatus::True,
            last_update_time: Some(to_k8s(now)),
            last_transition_time: Some(to_k8s(now)),
            reason: reason.to_string(),
            message: message.to_string(),
        });
    } else {
        out.retain(|c| c.type_ != MachineDeploymentConditionType::Frozen);
    }
    Some(out)
}

/// The plan being built, with the freeze state it leaves.
struct Plan {
    actions: Vec<PlannedAction>,
    set_frozen: HashMap<String, bool>,
    dep_frozen: HashMap<String, bool>,
}

impl Plan {
    fn push(&mut self, action: OvershootAction, after: Option<usize>) -> usize {
        self.actions.push(PlannedAction { action, after });
        self.actions.len() - 1
    }

    /// A freeze change, recorded in the state the rest of the pass reads.
    fn freeze(
        &mut self,
        target: FreezeTarget,
        frozen: bool,
        reason: &'static str,
        message: &str,
        after: Option<usize>,
    ) -> usize {
        match &target {
            FreezeTarget::Set(n) => self.set_frozen.insert(n.clone(), frozen),
            FreezeTarget::Deployment(n) => self.dep_frozen.insert(n.clone(), frozen),
        };
        self.push(
            OvershootAction::Freeze {
                target,
                frozen,
                reason,
                message: message.to_string(),
            },
            after,
        )
    }

    fn event(&mut self, set: &str, frozen: bool, note: String, after: usize) {
        let (reason, action) = if frozen {
            (c::MACHINE_SET_FREEZE_EVENT, "Freeze")
        } else {
            (c::MACHINE_SET_UNFREEZE_EVENT, "Unfreeze")
        };
        self.push(
            OvershootAction::Event(SetEvent {
                set: set.to_string(),
                reason,
                action,
                note,
            }),
            Some(after),
        );
    }

    fn set_frozen(&self, name: &str) -> bool {
        self.set_frozen.get(name).copied().unwrap_or(false)
    }
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn annotated_unfreeze(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(c::UNFREEZE_ANNOTATION))
}

/// The sets a deployment controls.
fn controlled<'a>(
    d: &'a MachineDeployment,
    sets: &'a [Arc<MachineSet>],
) -> impl Iterator<Item = &'a Arc<MachineSet>> + 'a {
    sets.iter().filter(move |s| {
        controller_ref(&s.metadata).is_some_and(|cr| Some(cr.uid) == d.metadata.uid)
    })
}

/// One pass: (1) every set's overshoot ([`overshoot_decision`]), freezing
/// or unfreezing it with its deployment; (2) the unfreeze annotations,
/// deployments (with their frozen sets) first, then sets; (3) every
/// deployment follows its sets ([`deployment_should_be_frozen`]). Unlike
/// the reference, every set is looked at in every pass (item 6).
pub fn plan_overshoot(input: &OvershootInput<'_>) -> Vec<PlannedAction> {
    let OvershootInput {
        sets,
        deployments,
        machines,
        safety_up,
        safety_down,
    } = *input;
    let mut plan = Plan {
        actions: Vec::new(),
        set_frozen: sets
            .iter()
            .map(|s| (name_of(&s.metadata), set_is_frozen(s)))
            .collect(),
        dep_frozen: deployments
            .iter()
            .map(|d| (name_of(&d.metadata), deployment_is_frozen(d)))
            .collect(),
    };
    let owner_names: Vec<(BTreeMap<String, String>, Vec<String>)> = machines
        .iter()
        .map(|m| {
            (
                m.metadata.labels.clone().unwrap_or_default(),
                m.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .map(|o| o.name.clone())
                    .collect(),
            )
        })
        .collect();

    // 1. Overshoot per set.
    for ms in sets {
        let name = name_of(&ms.metadata);
        let template_labels = ms.spec.template.metadata.labels.clone().unwrap_or_default();
        let count = overshoot_count(
            &name,
            &template_labels,
            owner_names.iter().map(|(l, o)| (l, o.as_slice())),
        );
        let parent = parent_deployment(ms, deployments);
        let (high, low) = overshoot_thresholds(
            ms.spec.replicas,
            parent.map(|d| (d.spec.replicas, safety_surge(&d.spec))),
            safety_up,
            safety_down,
        );
        match overshoot_decision(plan.set_frozen(&name), count, (high, low)) {
            OvershootDecision::Nothing => {}
            OvershootDecision::Freeze => {
                let msg = overshoot_freeze_message(&name, count, high);
                let reason = c::OVERSHOOTING_REPLICA_COUNT;
                let set = plan.freeze(FreezeTarget::Set(name.clone()), true, reason, &msg, None);
                if let Some(d) = parent {
                    let target = FreezeTarget::Deployment(name_of(&d.metadata));
                    plan.freeze(target, true, reason, &msg, Some(set));
                }
                plan.event(&name, true, msg, set);
            }
            OvershootDecision::Unfreeze => {
                let msg = overshoot_unfreeze_message(&name, count, low);
                let reason = c::UNDERSHOOTING_REPLICA_COUNT;
                if let Some(d) = parent {
                    let target = FreezeTarget::Deployment(name_of(&d.metadata));
                    plan.freeze(target, false, reason, &msg, None);
                }
                let set = plan.freeze(FreezeTarget::Set(name.clone()), false, reason, &msg, None);
                plan.event(&name, false, msg, set);
            }
        }
    }

    // 2. Unfreeze annotations: deployments (and their frozen sets), then sets.
    let reason = c::UNFREEZE_ANNOTATION_REASON;
    for d in deployments
        .iter()
        .filter(|d| annotated_unfreeze(&d.metadata))
    {
        let d_name = name_of(&d.metadata);
        let msg = format!(
            "MachineDeployment {d_name} unfrozen by the {} annotation",
            c::UNFREEZE_ANNOTATION
        );
        plan.freeze(FreezeTarget::Deployment(d_name), false, reason, &msg, None);
        for ms in controlled(d, sets) {
            let name = name_of(&ms.metadata);
            if plan.set_frozen(&name) {
                let set = plan.freeze(FreezeTarget::Set(name.clone()), false, reason, &msg, None);
                plan.event(&name, false, msg.clone(), set);
            }
        }
    }
    for ms in sets.iter().filter(|s| annotated_unfreeze(&s.metadata)) {
        let name = name_of(&ms.metadata);
        let msg = format!(
            "MachineSet {name} unfrozen by the {} annotation",
            c::UNFREEZE_ANNOTATION
        );
        let was_frozen = plan.set_frozen(&name);
        let set = plan.freeze(FreezeTarget::Set(name.clone()), false, reason, &msg, None);
        if was_frozen {
            plan.event(&name, false, msg, set);
        }
    }

    // 3. Deployments follow their sets.
    for d in deployments {
        let d_name = name_of(&d.metadata);
        let any_set_frozen = controlled(d, sets).any(|s| plan.set_frozen(&name_of(&s.metadata)));
        let frozen = plan.dep_frozen.get(&d_name).copied().unwrap_or(false);
        if let Some(want) = deployment_should_be_frozen(frozen, any_set_frozen) {
            let msg = if want {
                STATE_SYNC_FREEZE_MESSAGE.to_string()
            } else {
                format!("MachineDeployment {d_name} has no frozen MachineSet")
            };
            let target = FreezeTarget::Deployment(d_name);
            plan.freeze(target, want, c::MACHINE_DEPLOYMENT_STATE_SYNC, &msg, None);
        }
    }
    plan.actions
}

/// The `Frozen` condition's removal message when a set's count fell to the
/// lower threshold (`limit`).
pub fn overshoot_unfreeze_message(set: &str, count: usize, limit: i64) -> String {
    format!("The number of machines backing MachineSet {set} is {count}, at or below {limit}")
}

#[cfg(test)]
#[path = "overshoot_plan_tests.rs"]
mod tests;
