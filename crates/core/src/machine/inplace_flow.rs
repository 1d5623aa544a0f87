//! The machine side of an in-place update as a step machine, in the shape of
//! [`CreationFlow`](crate::machine::CreationFlow): read the Node → the
//! agent's result, the timeout, the Node's condition, the drain → write,
//! each decision made here with the functions of [`super::inplace`] and each
//! effect done by the runtime, one per step (design: machine.md, "In-place
//! updates").

use super::inplace::{self as ip, InPlaceAction, InPlaceCondition, InPlaceNodeView};
use super::{DrainPlan, MachineView, Transition};
use chrono::{DateTime, Utc};
use std::collections::VecDeque;
use std::time::Duration;

/// How often a machine waiting for the node agent looks again.
pub const AGENT_RECHECK: Duration = Duration::from_secs(10);

/// The settings one pass runs with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InPlaceSettings {
    /// The machine's in-place timeout (`spec.inPlaceUpdateTimeout`, else
    /// `--machine-inplace-update-timeout`).
    pub timeout: Duration,
    /// The machine carries `force-drain=True`.
    pub force_drain: bool,
    /// A look again soon (`--min-retry-period`).
    pub short_retry: Duration,
    /// A look again while a drain runs (`--max-retry-period`).
    pub long_retry: Duration,
}

/// Where the machine's in-place drain task stands.
#[derive(Debug, Clone, PartialEq)]
pub enum InPlaceDrain {
    /// No drain runs for it.
    Idle,
    /// A drain runs.
    Running,
    /// The drain finished with this result (handed out once).
    Finished(Result<(), String>),
}

/// The next effect of the in-place step; `T` is the target cluster's handle,
/// carried by each step that acts on the Node, with the Node's name.
#[derive(Debug, Clone, PartialEq)]
pub enum InPlaceStep<T = ()> {
    /// Read the machine's Node from the Node cache (asked only with a target
    /// cluster and a Node name).
    ReadNode,
    /// Write this status change.
    Write(Transition),
    /// Set the Node's `InPlaceUpdate` condition.
    SetCondition {
        /// The condition.
        condition: InPlaceCondition,
        /// The machine's Node.
        node: String,
        /// The target cluster the Node is in.
        target: T,
    },
    /// Ask the drain tasks where the machine's drain stands.
    ReadDrain,
    /// Start the drain of this Node with this plan.
    StartDrain {
        /// The drain's plan.
        plan: DrainPlan,
        /// The machine's Node.
        node: String,
        /// The target cluster the Node is in.
        target: T,
    },
    /// Publish a `DrainFailed` Warning Event with this note.
    WarnDrainFailed(String),
    /// Stop this reconcile; reconcile again after this long.
    Requeue(Duration),
    /// Stop this reconcile; reconcile again after the machine's backoff.
    RequeueWithBackoff,
    /// The step is done; the reconcile goes on (look again after this long, when set).
    Continue(Option<Duration>),
}

/// The result of the previous step's effect.
#[derive(Debug, Clone, PartialEq)]
pub enum InPlaceOutcome {
    /// Nothing ran yet.
    Start,
    /// The Node's view, as read (`None`: no Node, or no target cluster).
    NodeRead(Option<InPlaceNodeView>),
    /// The status was written.
    Written,
    /// The Node's condition was set.
    ConditionSet,
    /// The drain's progress.
    Drain(InPlaceDrain),
    /// The drain was started.
    DrainStarted,
    /// The Event was published.
    Warned,
}

/// One reconcile's in-place step: the effects still to do.
#[derive(Debug, Clone, PartialEq)]
pub struct InPlaceFlow<T = ()> {
    settings: InPlaceSettings,
    /// The target cluster; `None` in the mode without Nodes.
    target: Option<T>,
    /// The effects decided and not done yet, in order.
    queue: VecDeque<InPlaceStep<T>>,
    /// The drain plan, while the drain's progress is asked.
    plan: Option<DrainPlan>,
}

impl<T: Clone> InPlaceFlow<T> {
    /// A new pass with these settings, on this target cluster (`None` in the
    /// mode without Nodes: nothing to do).
    pub fn new(settings: InPlaceSettings, target: Option<T>) -> Self {
        InPlaceFlow {
            settings,
            target,
            queue: VecDeque::new(),
            plan: None,
        }
    }

    /// The next step, from the machine as it was read and the last step's outcome.
    pub fn next(
        &mut self,
        m: &MachineView,
        outcome: InPlaceOutcome,
        now: DateTime<Utc>,
    ) -> InPlaceStep<T> {
        match outcome {
            InPlaceOutcome::Start => match m.target_node(self.target.as_ref()) {
                Some(_) => InPlaceStep::ReadNode,
                None => InPlaceStep::Continue(None),
            },
            InPlaceOutcome::NodeRead(None) => InPlaceStep::Continue(None),
            InPlaceOutcome::NodeRead(Some(node)) => match m.target_node(self.target.as_ref()) {
                Some((target, name)) => {
                    self.decide(m, &node, (target, name), now);
                    self.pop()
                }
                None => InPlaceStep::Continue(None),
            },
            InPlaceOutcome::Drain(progress) => {
                self.after_drain(m, progress);
                self.pop()
            }
            InPlaceOutcome::Written
            | InPlaceOutcome::ConditionSet
            | InPlaceOutcome::DrainStarted
            | InPlaceOutcome::Warned => self.pop(),
        }
    }

    fn pop(&mut self) -> InPlaceStep<T> {
        self.queue
            .pop_front()
            .unwrap_or(InPlaceStep::Continue(None))
    }

    fn push(&mut self, steps: impl IntoIterator<Item = InPlaceStep<T>>) {
        self.queue.extend(steps);
    }

    /// The decisions for the Node as read, in the reference's order: the
    /// agent's result, the timeout, the Node's condition, the action.
    /// `on_node`: the target cluster and the Node's name.
    fn decide(
        &mut self,
        m: &MachineView,
        node: &InPlaceNodeView,
        on_node: (T, String),
        now: DateTime<Utc>,
    ) {
        let (target, name) = on_node;
        let set = |condition| InPlaceStep::SetCondition {
            condition,
            node: name.clone(),
            target: target.clone(),
        };
        let short = InPlaceStep::Requeue(self.settings.short_retry);
        if let Some(t) = ip::in_place_result(m, node) {
            // The Node's condition in the same pass: its watch event brings
            // the next one (the health check's re-join), without waiting.
            self.push([InPlaceStep::Write(t)]);
            self.push(ip::node_condition_step(node).map(set));
            self.push([short]);
            return;
        }
        let mut recheck = None;
        match ip::in_place_timeout(m, self.settings.timeout, now) {
            Some(Ok(t)) => {
                self.push([InPlaceStep::Write(t), short]);
                return;
            }
            Some(Err(after)) => recheck = Some(after),
            None => {}
        }
        if let Some(cond) = ip::node_condition_step(node) {
            self.push([set(cond), short]);
            return;
        }
        match ip::in_place_action(m, self.settings.force_drain, node, now) {
            InPlaceAction::Nothing => self.push([InPlaceStep::Continue(recheck)]),
            InPlaceAction::WaitForAgent => self.push([InPlaceStep::Continue(Some(
                recheck.map_or(AGENT_RECHECK, |r| r.min(AGENT_RECHECK)),
            ))]),
            InPlaceAction::MarkReady => self.push([
                set(ip::ready_for_update_condition()),
                InPlaceStep::Continue(Some(AGENT_RECHECK)),
            ]),
            InPlaceAction::Drain(plan) => {
                self.plan = Some(plan);
                self.push([InPlaceStep::ReadDrain]);
            }
        }
    }

    /// The steps after the drain's progress was read.
    fn after_drain(&mut self, m: &MachineView, progress: InPlaceDrain) {
        let long = InPlaceStep::Continue(Some(self.settings.long_retry));
        match progress {
            InPlaceDrain::Running => self.push([long]),
            InPlaceDrain::Idle => match (self.plan.take(), m.target_node(self.target.as_ref())) {
                (Some(plan), Some((target, node))) => {
                    self.push([InPlaceStep::StartDrain { plan, node, target }, long])
                }
                _ => self.push([InPlaceStep::Continue(None)]),
            },
            InPlaceDrain::Finished(Err(e)) => self.push([
                InPlaceStep::WarnDrainFailed(e.clone()),
                InPlaceStep::Write(ip::after_in_place_drain(&m.name, Err(e))),
                InPlaceStep::RequeueWithBackoff,
            ]),
            InPlaceDrain::Finished(Ok(())) => {
                self.push([InPlaceStep::Write(ip::after_in_place_drain(
                    &m.name,
                    Ok(()),
                ))]);
                self.push(m.target_node(self.target.as_ref()).map(|(target, node)| {
                    InPlaceStep::SetCondition {
                        condition: ip::drain_successful_condition(),
                        node,
                        target,
                    }
                }));
                self.push([InPlaceStep::Requeue(self.settings.short_retry)]);
            }
        }
    }
}

#[cfg(test)]
#[path = "inplace_flow_tests.rs"]
mod tests;
