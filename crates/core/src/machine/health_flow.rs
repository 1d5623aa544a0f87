//! The health check as a step machine, in the shape of
//! [`CreationFlow`](crate::machine::CreationFlow): read the Node → (delete
//! the machine of a Node being deleted) → the decision of [`health`] →
//! (the failure limiter) → write → the join's follow-ups, with every decision
//! made here and every effect done by the runtime, one per step. Also the
//! reset of `Unknown` machines after an API-server outage
//! ([`reset_after_freeze`]). See `docs/design/machine.md`, "Health check".

use super::{
    health, markers, HealthDecision, MachineView, NodeView, OpState, OpType, Operation, Phase,
    Transition,
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;
use std::time::Duration;

/// What the health check knows of the machine's Node.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthNode {
    /// The Node has a deletion timestamp.
    pub deleting: bool,
    /// What the health decision reads.
    pub view: NodeView,
}

impl HealthNode {
    /// What the health check reads of a Node: whether it is being deleted
    /// (which deletes its machine), its conditions, whether it carries
    /// `node.gardener.cloud/critical-components-not-ready:NoSchedule`, and
    /// `startup_taint` (the startup-taint check's answer, startup-taint.md).
    pub fn of(n: &k8s_openapi::api::core::v1::Node, startup_taint: Option<String>) -> HealthNode {
        use mcm_api::constants as c;
        HealthNode {
            deleting: n.metadata.deletion_timestamp.is_some(),
            view: NodeView {
                conditions: n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default(),
                critical_components_not_ready: n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| {
                        ts.iter().any(|t| {
                            t.key == c::CRITICAL_COMPONENTS_NOT_READY_TAINT
                                && t.effect == "NoSchedule"
                        })
                    }),
                startup_taint,
            },
        }
    }
}

/// The next effect of the health check.
#[derive(Debug, Clone, PartialEq)]
pub enum HealthStep {
    /// Read the machine's Node (from the Node cache).
    ReadNode,
    /// The Node is being deleted: delete the Machine.
    DeleteMachine,
    /// Publish a Warning Event.
    Warn {
        /// The Event's reason.
        reason: &'static str,
        /// Its note.
        note: String,
    },
    /// Ask the per-MachineDeployment failure limiter for a Failed mark
    /// ([`FailedMarks::grant`](crate::machine::FailedMarks::grant), over
    /// the siblings [`limiter_siblings`] keeps).
    AskFailedMark,
    /// Write the phase change (with the Node's conditions, when they differ).
    /// When the write fails and `release_mark` is set, the mark granted
    /// for it is withdrawn.
    Write {
        /// The status change.
        transition: Transition,
        /// New `status.conditions`.
        conditions: Option<Vec<NodeCondition>>,
        /// Whether a Failed mark was granted for this write.
        release_mark: bool,
    },
    /// Write only the Node's conditions.
    WriteConditions(Vec<NodeCondition>),
    /// Count a machine that never joined (`mcm_machine_num_failed_join`).
    CountFailedJoin,
    /// The machine joined for the first time: record the join duration and
    /// delete its bootstrap token.
    Joined,
    /// Stop this reconcile and reconcile the machine again shortly.
    Requeue,
    /// The health check is done; the reconcile goes on. Look again after
    /// this long, when set (a timeout not reached yet).
    Continue(Option<Duration>),
}

/// The result of the previous step's effect.
#[derive(Debug, Clone, PartialEq)]
pub enum HealthOutcome {
    /// Nothing ran yet.
    Start,
    /// The Node as read (`None`: not found).
    NodeRead(Option<HealthNode>),
    /// The machine's DELETE was sent.
    MachineDeleted,
    /// The Event was published.
    Warned,
    /// The limiter's answer.
    FailedMark(bool),
    /// The status was written.
    Written,
    /// The failed join was counted.
    Counted,
    /// The join's follow-ups are done.
    JoinRecorded,
}

/// What the health check wrote.
#[derive(Debug, Clone, PartialEq)]
enum Wrote {
    /// Nothing yet.
    Nothing,
    /// Only the Node's conditions.
    Conditions,
    /// A phase change from `from` to `to` (`None`: the phase stays).
    Phase { from: Phase, to: Option<Phase> },
}

/// One reconcile's health check: what it decided so far.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthFlow {
    decision: Option<HealthDecision>,
    /// The transition waiting for the limiter's mark.
    pending: Option<Transition>,
    node_name: String,
    warned: bool,
    wrote: Wrote,
    counted: bool,
}

impl Default for HealthFlow {
    fn default() -> Self {
        HealthFlow {
            decision: None,
            pending: None,
            node_name: String::new(),
            warned: false,
            wrote: Wrote::Nothing,
            counted: false,
        }
    }
}

impl HealthFlow {
    /// A new health check.
    pub fn new() -> Self {
        HealthFlow::default()
    }

    /// The next step, from the machine as it was read and the last step's outcome.
    pub fn next(
        &mut self,
        m: &MachineView,
        outcome: HealthOutcome,
        now: DateTime<Utc>,
    ) -> HealthStep {
        match outcome {
            HealthOutcome::Start => HealthStep::ReadNode,
            // A Node being deleted means its machine goes too.
            HealthOutcome::NodeRead(Some(node)) if node.deleting => HealthStep::DeleteMachine,
            HealthOutcome::NodeRead(node) => {
                self.node_name = m.node.clone().unwrap_or_default();
                self.decision = Some(health(m, node.as_ref().map(|n| &n.view), now));
                self.decide(m)
            }
            HealthOutcome::MachineDeleted => HealthStep::Requeue,
            HealthOutcome::Warned => {
                self.warned = true;
                self.decide(m)
            }
            HealthOutcome::FailedMark(false) => HealthStep::Requeue,
            HealthOutcome::FailedMark(true) => match self.pending.take() {
                Some(transition) => self.write(m, transition, true),
                None => HealthStep::Requeue,
            },
            HealthOutcome::Written => self.after_write(),
            HealthOutcome::Counted => {
                self.counted = true;
                self.after_write()
            }
            HealthOutcome::JoinRecorded => HealthStep::Requeue,
        }
    }

    /// The decision's effects, in order.
    fn decide(&mut self, m: &MachineView) -> HealthStep {
        let Some(d) = self.decision.as_mut() else {
            return HealthStep::ReadNode;
        };
        // A CrashLoopBackOff/Failed machine whose Node is Ready but whose
        // InitializeMachine has not succeeded says why it is held.
        let init_failed = m
            .last_operation
            .as_ref()
            .is_some_and(|(desc, _, _)| desc.ends_with(markers::INSTANCE_INITIALIZATION));
        if d.held_for_initialization && init_failed && !self.warned {
            return HealthStep::Warn {
                reason: "InitializationPending",
                note: format!(
                    "Node {} is Ready, but InitializeMachine has not succeeded; the machine stays {} until it does",
                    self.node_name, m.phase
                ),
            };
        }
        if let Some(transition) = d.transition.take() {
            if d.rate_limited {
                self.pending = Some(transition);
                return HealthStep::AskFailedMark;
            }
            return self.write(m, transition, false);
        }
        if let Some(c) = d.conditions.take() {
            self.wrote = Wrote::Conditions;
            return HealthStep::WriteConditions(c);
        }
        HealthStep::Continue(d.recheck_after)
    }

    fn write(&mut self, m: &MachineView, transition: Transition, release_mark: bool) -> HealthStep {
        self.wrote = Wrote::Phase {
            from: m.phase.clone(),
            to: transition.phase.clone(),
        };
        HealthStep::Write {
            transition,
            conditions: self.decision.as_mut().and_then(|d| d.conditions.take()),
            release_mark,
        }
    }

    /// After the phase change (or the conditions) was written.
    fn after_write(&mut self) -> HealthStep {
        let recheck = self.decision.as_ref().and_then(|d| d.recheck_after);
        let joined = self.decision.as_ref().is_some_and(|d| d.joined);
        match &self.wrote {
            Wrote::Nothing => HealthStep::Requeue,
            Wrote::Conditions => HealthStep::Continue(recheck),
            Wrote::Phase { from, to } => {
                let failed_join = *from == Phase::Pending && *to == Some(Phase::Failed);
                if failed_join && !self.counted {
                    HealthStep::CountFailedJoin
                } else if joined {
                    HealthStep::Joined
                } else {
                    HealthStep::Requeue
                }
            }
        }
    }
}

/// The group of the failure limiter a machine belongs to: its
/// MachineDeployment, named by the machine's `name` label. A machine
/// without one is limited by nothing (it may be marked Failed at once).
pub fn limiter_group(m: &MachineView) -> Option<&str> {
    m.labels.get("name").map(String::as_str)
}

/// The siblings the failure limiter counts: a preserved machine is not a
/// replacement in progress (a preserved Failed machine must not hold up
/// the others for days; design: machine.md, "Preservation").
pub fn limiter_siblings(siblings: &[MachineView]) -> Vec<(String, Phase)> {
    siblings
        .iter()
        .filter(|m| m.preserve_expiry.is_none())
        .map(|m| (m.name.clone(), m.phase.clone()))
        .collect()
}

/// After an API-server outage (the freeze) an `Unknown` machine goes back to
/// `Running`, so that the outage does not count against its health timeout;
/// `None` for a machine in any other phase.
pub fn reset_after_freeze(m: &MachineView) -> Option<Transition> {
    (m.phase == Phase::Unknown).then(|| Transition {
        phase: Some(Phase::Running),
        operation: Operation::new(
            "Machine Health Timeout was reset due to APIServer being unreachable",
            OpState::Successful,
            OpType::HealthCheck,
        ),
        timeout_active: None,
    })
}

#[cfg(test)]
#[path = "health_flow_tests.rs"]
mod tests;
