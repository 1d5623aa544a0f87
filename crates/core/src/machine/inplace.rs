//! The machine side of an in-place update, as pure decisions (design:
//! machine.md, "In-place updates").
//!
//! The Node's labels drive its `InPlaceUpdate` condition
//! ([`node_condition_step`]): `candidate-for-update` → CandidateForUpdate,
//! `selected-for-update` → SelectedForUpdate, at which point the machine
//! controller cordons and drains the Node ([`plan_in_place_drain`],
//! [`after_in_place_drain`]: phase `InPlaceUpdating`, condition
//! DrainSuccessful, then ReadyForUpdate). The node agent then updates the
//! Node and labels it `update-result=successful` or `failed`
//! ([`in_place_result`]: phase `InPlaceUpdateSuccessful` / `InPlaceUpdateFailed`,
//! condition UpdateSuccessful / UpdateFailed). A machine that stays
//! `InPlaceUpdating` longer than its in-place timeout becomes
//! `InPlaceUpdateFailed` ([`in_place_timeout`]); the health check then turns
//! `InPlaceUpdateSuccessful` into `Running` and, after the health timeout,
//! `InPlaceUpdateFailed` into `Failed` (see [`super::health`]).

use super::{elapsed, DrainPlan, MachineView, Operation, Transition, FORCE_DRAIN_AFTER};
use crate::time::from_k8s;
use chrono::{DateTime, Utc};
use mcm_api::constants as c;
use mcm_api::{MachineOperationType as OpType, MachinePhase as Phase, MachineState as OpState};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the in-place step sees of the machine's Node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InPlaceNodeView {
    /// The Node's labels.
    pub labels: BTreeMap<String, String>,
    /// The Node's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The reason of its `InPlaceUpdate` condition, when it has one.
    pub condition: Option<String>,
    /// When that condition last changed.
    pub condition_since: Option<DateTime<Utc>>,
}

impl InPlaceNodeView {
    fn has(&self, label: &str) -> bool {
        self.labels.contains_key(label)
    }

    fn result(&self) -> Option<&str> {
        self.labels
            .get(c::NODE_UPDATE_RESULT_LABEL)
            .map(String::as_str)
    }

    fn reason_is(&self, reason: &str) -> bool {
        self.condition.as_deref() == Some(reason)
    }

    /// Why the agent says the update failed (annotation `update-failed-reason`).
    pub fn failed_reason(&self) -> &str {
        self.annotations
            .get(c::NODE_UPDATE_FAILED_REASON_ANNOTATION)
            .map_or("", String::as_str)
    }
}

/// A new `InPlaceUpdate` condition for the Node (status True).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InPlaceCondition {
    /// One of the reasons in [`mcm_api::constants`] (`IN_PLACE_*`).
    pub reason: &'static str,
    /// The reference's message.
    pub message: String,
}

fn cond(reason: &'static str, message: impl Into<String>) -> Option<InPlaceCondition> {
    Some(InPlaceCondition {
        reason,
        message: message.into(),
    })
}

/// `updateNodeConditionBasedOnLabel`: the condition the Node's labels call
/// for, or `None` when it is already right (or the Node is no candidate).
pub fn node_condition_step(node: &InPlaceNodeView) -> Option<InPlaceCondition> {
    if !node.has(c::NODE_CANDIDATE_FOR_UPDATE_LABEL) {
        return None;
    }
    // A new update starts (no condition yet, or the last one succeeded and
    // its result label is gone).
    if node.condition.is_none()
        || (node.reason_is(c::IN_PLACE_UPDATE_SUCCESSFUL) && !node.has(c::NODE_UPDATE_RESULT_LABEL))
    {
        return cond(
            c::IN_PLACE_CANDIDATE_FOR_UPDATE,
            "Node is a candidate for in-place update",
        );
    }
    if node.has(c::NODE_SELECTED_FOR_UPDATE_LABEL) {
        if node.reason_is(c::IN_PLACE_CANDIDATE_FOR_UPDATE) {
            return cond(
                c::IN_PLACE_SELECTED_FOR_UPDATE,
                "Node is selected for in-place update",
            );
        }
        if node.reason_is(c::IN_PLACE_SELECTED_FOR_UPDATE) {
            return None;
        }
    }
    match node.result() {
        Some(c::NODE_UPDATE_RESULT_SUCCESSFUL)
            if !node.reason_is(c::IN_PLACE_UPDATE_SUCCESSFUL) =>
        {
            cond(
                c::IN_PLACE_UPDATE_SUCCESSFUL,
                "Node in-place update successful",
            )
        }
        Some(c::NODE_UPDATE_RESULT_FAILED) if !node.reason_is(c::IN_PLACE_UPDATE_FAILED) => cond(
            c::IN_PLACE_UPDATE_FAILED,
            format!("Node in-place update failed: {}", node.failed_reason()),
        ),
        _ => None,
    }
}

/// What `inPlaceUpdate` does for the Node's current condition.
#[derive(Debug, Clone, PartialEq)]
pub enum InPlaceAction {
    /// Nothing to do.
    Nothing,
    /// Cordon and drain the Node with this plan.
    Drain(DrainPlan),
    /// The drain succeeded: set the condition to ReadyForUpdate.
    MarkReady,
    /// Wait for the node agent.
    WaitForAgent,
}

/// `inPlaceUpdate`: the action for the Node's `InPlaceUpdate` condition.
/// `force_drain`: the machine carries `force-drain=True`.
pub fn in_place_action(
    m: &MachineView,
    force_drain: bool,
    node: &InPlaceNodeView,
    now: DateTime<Utc>,
) -> InPlaceAction {
    match node.condition.as_deref() {
        Some(c::IN_PLACE_SELECTED_FOR_UPDATE) => {
            InPlaceAction::Drain(plan_in_place_drain(m, force_drain, node, now))
        }
        Some(c::IN_PLACE_DRAIN_SUCCESSFUL) => InPlaceAction::MarkReady,
        Some(c::IN_PLACE_READY_FOR_UPDATE) => InPlaceAction::WaitForAgent,
        _ => InPlaceAction::Nothing,
    }
}

/// The condition once the drain has succeeded, then once the Node is ready.
pub fn drain_successful_condition() -> InPlaceCondition {
    InPlaceCondition {
        reason: c::IN_PLACE_DRAIN_SUCCESSFUL,
        message: "Node draining successful".into(),
    }
}

/// The condition that tells the node agent to apply the update.
pub fn ready_for_update_condition() -> InPlaceCondition {
    InPlaceCondition {
        reason: c::IN_PLACE_READY_FOR_UPDATE,
        message: "Node is ready for in-place update".into(),
    }
}

/// The in-place drain (`drainNodeForInPlace`): forced, with a one-minute
/// deadline and a single eviction attempt, when the machine carries
/// `force-drain=True` or the drain timeout has passed since the Node was
/// selected; forced (deleting pods instead of evicting) when the Node has
/// been NotReady or ReadonlyFilesystem for over 5 minutes; otherwise a
/// normal drain within the drain timeout.
pub fn plan_in_place_drain(
    m: &MachineView,
    force_label: bool,
    node: &InPlaceNodeView,
    now: DateTime<Utc>,
) -> DrainPlan {
    let timed_out = node
        .condition_since
        .is_some_and(|t| elapsed(t, now) > m.settings.drain_timeout);
    if force_label || timed_out {
        return DrainPlan {
            force: true,
            timeout: Duration::from_secs(60),
            max_evict_retries: 1,
        };
    }
    let bad_for_long = |ty: &str, healthy: &str| {
        m.conditions.iter().any(|cd| {
            cd.type_ == ty
                && cd.status != healthy
                && cd
                    .last_transition_time
                    .as_ref()
                    .is_some_and(|t| elapsed(from_k8s(t), now) > FORCE_DRAIN_AFTER)
        })
    };
    let unhealthy = bad_for_long("Ready", "True") || bad_for_long("ReadonlyFilesystem", "False");
    let by_timeout = (m.settings.drain_timeout.as_secs() / 20).min(i32::MAX as u64) as i32;
    DrainPlan {
        force: unhealthy,
        timeout: m.settings.drain_timeout,
        max_evict_retries: m.settings.max_evict_retries.min(by_timeout).max(1),
    }
}

/// The status after the in-place drain: phase `InPlaceUpdating` on success
/// (the reference's "Drain successful. Node drain successful. Node is ready
/// for update" text is replaced by this one); on failure the phase stays
/// and the drain is retried on the next pass.
pub fn after_in_place_drain(machine: &str, result: Result<(), String>) -> Transition {
    match result {
        Ok(()) => Transition {
            phase: Some(Phase::InPlaceUpdating),
            operation: Operation::new(
                format!("Machine {machine} is undergoing an in-place update"),
                OpState::Processing,
                OpType::InPlaceUpdate,
            ),
            timeout_active: None,
        },
        Err(e) => Transition {
            phase: None,
            operation: Operation::new(
                format!(
                    "Drain failed due to - {e}. Will retry in next sync. {}",
                    c::INITIATE_DRAIN
                ),
                OpState::Processing,
                OpType::DrainNode,
            ),
            timeout_active: None,
        },
    }
}

/// The phase change the agent's `update-result` label calls for, for a
/// machine that is `InPlaceUpdating` or `InPlaceUpdateFailed`.
pub fn in_place_result(m: &MachineView, node: &InPlaceNodeView) -> Option<Transition> {
    if !matches!(m.phase, Phase::InPlaceUpdating | Phase::InPlaceUpdateFailed) {
        return None;
    }
    match node.result() {
        Some(c::NODE_UPDATE_RESULT_SUCCESSFUL) => Some(Transition {
            phase: Some(Phase::InPlaceUpdateSuccessful),
            operation: Operation::new(
                format!("Machine {} successfully updated dependencies", m.name),
                OpState::Successful,
                OpType::InPlaceUpdate,
            ),
            timeout_active: None,
        }),
        Some(c::NODE_UPDATE_RESULT_FAILED) if m.phase != Phase::InPlaceUpdateFailed => {
            Some(Transition {
                phase: Some(Phase::InPlaceUpdateFailed),
                operation: Operation::new(
                    format!(
                        "Machine {} failed to update dependencies: {}",
                        m.name,
                        node.failed_reason()
                    ),
                    OpState::Failed,
                    OpType::InPlaceUpdate,
                ),
                timeout_active: None,
            })
        }
        _ => None,
    }
}

/// The in-place timeout of an `InPlaceUpdating` machine (since its phase
/// last changed): `Err(after)` to look again later, `Ok(transition)` to
/// `InPlaceUpdateFailed` once it has passed.
pub fn in_place_timeout(
    m: &MachineView,
    timeout: Duration,
    now: DateTime<Utc>,
) -> Option<Result<Transition, Duration>> {
    if m.phase != Phase::InPlaceUpdating {
        return None;
    }
    let gone = elapsed(m.phase_since.unwrap_or(m.created_or(now)), now);
    if gone <= timeout {
        return Some(Err(
            (timeout - gone).min(Duration::from_secs(60)) + Duration::from_secs(1)
        ));
    }
    Some(Ok(Transition {
        phase: Some(Phase::InPlaceUpdateFailed),
        operation: Operation::new(
            format!(
                "Machine {} failed to in-place update in {} minutes.",
                m.name,
                crate::machine::format_go_duration(timeout)
            ),
            OpState::Failed,
            OpType::InPlaceUpdate,
        ),
        timeout_active: None,
    }))
}

#[cfg(test)]
#[path = "inplace_tests.rs"]
mod tests;

/// The machine and Node the in-place tests (these and the flow's) start from.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use crate::machine::Phase;
    use chrono::TimeZone;

    pub(crate) fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0)
            .single()
            .unwrap_or_default()
    }

    pub(crate) fn view(phase: Phase) -> MachineView {
        MachineView {
            provider_id: "local:///z/i-1".into(),
            has_finalizer: true,
            ..MachineView::test("m1", phase)
                .created_at(t0())
                .in_phase_since(t0())
                .on_node("m1")
        }
    }

    pub(crate) fn node(labels: &[&str], reason: Option<&str>) -> InPlaceNodeView {
        InPlaceNodeView {
            labels: labels
                .iter()
                .map(|l| match l.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (l.to_string(), "true".to_string()),
                })
                .collect(),
            condition: reason.map(str::to_string),
            condition_since: Some(t0()),
            ..Default::default()
        }
    }
}
