//! Machine preservation as a step machine, in the shape of
//! [`CreationFlow`](crate::machine::CreationFlow): read the Node → the plan
//! of [`plan_preservation`] → its effects one by one, the drain of a
//! preserved Failed machine included (its progress read, started, its
//! result turned into the `Preserved` condition). Every decision is made
//! here; the runtime does one effect per step (design: machine.md,
//! "Preservation").

use super::preserve::{
    plan_preservation, preserved_condition, PreserveInput, PreserveNode, PreserveStep,
};
use super::{DrainPlan, MachineView};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;
use std::collections::VecDeque;
use std::time::Duration;

/// The settings one pass runs with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreserveSettings {
    /// The effective preserve timeout (spec `machinePreserveTimeout` > flag).
    pub timeout: Duration,
    /// A look again while a drain runs (`--max-retry-period`).
    pub long_retry: Duration,
}

/// Where the drain of the preserved Node stands.
#[derive(Debug, Clone, PartialEq)]
pub enum PreserveDrain {
    /// No drain runs.
    Idle,
    /// A drain runs; `force`: it deletes pods instead of evicting them.
    Running {
        /// The running drain is forced.
        force: bool,
    },
    /// The drain finished with this result (handed out once).
    Finished(Result<(), String>),
}

/// The next effect of a preservation pass; `T` is the target cluster's
/// handle, carried by the drain's start with the Node's name.
#[derive(Debug, Clone, PartialEq)]
pub enum PreserveFlowStep<T = ()> {
    /// Read the machine's Node (from the Node cache).
    ReadNode,
    /// Publish an `InvalidPreserveAnnotation` Warning Event with this note.
    WarnInvalid(String),
    /// Apply one effect of the plan (never [`PreserveStep::Drain`]).
    Apply(PreserveStep),
    /// Ask the drain tasks where the preserved Node's drain stands (asked
    /// only with a target cluster and a Node name).
    ReadDrain,
    /// Start (or restart, forced) the drain of this Node with this plan.
    StartDrain {
        /// The drain's plan.
        plan: DrainPlan,
        /// The machine's Node.
        node: String,
        /// The target cluster the Node is in.
        target: T,
    },
    /// Publish a `PreservedNodeDrainFailed` Warning Event with this note.
    WarnDrainFailed(String),
    /// Stop this reconcile; reconcile again after this long.
    Requeue(Duration),
    /// Stop this reconcile; reconcile again after the machine's backoff.
    RequeueWithBackoff,
    /// The pass is done; the reconcile goes on (look again within this long:
    /// the expiry).
    Continue(Option<Duration>),
}

/// The result of the previous step's effect.
#[derive(Debug, Clone, PartialEq)]
pub enum PreserveOutcome {
    /// Nothing ran yet.
    Start,
    /// What was found of the machine's Node.
    NodeRead(PreserveNode),
    /// The effect was done (a write, an Event, a drain started).
    Done,
    /// The drain's progress.
    Drain(PreserveDrain),
}

/// One reconcile's preservation pass.
#[derive(Debug, Clone, PartialEq)]
pub struct PreserveFlow<T = ()> {
    settings: PreserveSettings,
    /// The target cluster; `None` in the mode without Nodes.
    target: Option<T>,
    /// The Node's `Preserved` condition as read (the drain's result updates it).
    condition: Option<NodeCondition>,
    /// The effective preserve value.
    value: String,
    /// `preserveExpiryTime`, as written so far in this pass.
    expiry: Option<DateTime<Utc>>,
    queue: VecDeque<PreserveFlowStep<T>>,
    /// The drain plan, while its progress is asked.
    drain: Option<DrainPlan>,
}

impl<T: Clone> PreserveFlow<T> {
    /// A new pass with these settings, on this target cluster (`None` in the
    /// mode without Nodes: no drain).
    pub fn new(settings: PreserveSettings, target: Option<T>) -> Self {
        PreserveFlow {
            settings,
            target,
            condition: None,
            value: String::new(),
            expiry: None,
            queue: VecDeque::new(),
            drain: None,
        }
    }

    /// The effective preserve value of the pass ("" before the Node was read).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The next step, from the machine as it was read and the last step's outcome.
    pub fn next(
        &mut self,
        m: &MachineView,
        outcome: PreserveOutcome,
        now: DateTime<Utc>,
    ) -> PreserveFlowStep<T> {
        match outcome {
            PreserveOutcome::Start => PreserveFlowStep::ReadNode,
            PreserveOutcome::NodeRead(node) => {
                let can_drain = m.target_node(self.target.as_ref()).is_some();
                self.plan(
                    PreserveInput::of(m, node, self.settings.timeout, now),
                    can_drain,
                );
                self.pop()
            }
            PreserveOutcome::Done => self.pop(),
            PreserveOutcome::Drain(progress) => {
                self.after_drain(m, progress, now);
                self.pop()
            }
        }
    }

    /// Queues the plan's effects; `can_drain`: a target cluster and a Node
    /// name are known (without them no drain can run and none is asked about).
    fn plan(&mut self, input: PreserveInput, can_drain: bool) {
        let plan = plan_preservation(&input);
        self.value = plan.effective.clone().unwrap_or_default();
        self.expiry = input.expiry;
        self.queue
            .extend(plan.invalid.into_iter().map(PreserveFlowStep::WarnInvalid));
        for step in plan.steps {
            match step {
                PreserveStep::Drain(p) if can_drain => {
                    self.drain = Some(p);
                    self.queue.push_back(PreserveFlowStep::ReadDrain);
                }
                PreserveStep::Drain(_) => {}
                other => self.queue.push_back(PreserveFlowStep::Apply(other)),
            }
        }
        self.queue
            .push_back(PreserveFlowStep::Continue(plan.recheck_after));
        self.condition = match input.node {
            PreserveNode::Found(n) => n.condition,
            _ => None,
        };
    }

    fn pop(&mut self) -> PreserveFlowStep<T> {
        let step = self
            .queue
            .pop_front()
            .unwrap_or(PreserveFlowStep::Continue(None));
        if let PreserveFlowStep::Apply(PreserveStep::SetExpiry(t)) = &step {
            // The drain's condition names the expiry this pass writes.
            self.expiry = Some(*t);
        }
        step
    }

    /// Ends the pass with `steps` (nothing planned after them runs in this reconcile).
    fn end_with(&mut self, steps: impl IntoIterator<Item = PreserveFlowStep<T>>) {
        self.queue.clear();
        self.queue.extend(steps);
    }

    fn after_drain(&mut self, m: &MachineView, progress: PreserveDrain, now: DateTime<Utc>) {
        let long = PreserveFlowStep::Requeue(self.settings.long_retry);
        let Some(plan) = self.drain.take() else {
            return;
        };
        match progress {
            PreserveDrain::Running { force } if force || !plan.force => self.end_with([long]),
            // Idle, or a normal drain running where a forced one is due now.
            PreserveDrain::Running { .. } | PreserveDrain::Idle => {
                if let Some((target, node)) = m.target_node(self.target.as_ref()) {
                    self.end_with([PreserveFlowStep::StartDrain { plan, node, target }, long]);
                }
            }
            PreserveDrain::Finished(result) => {
                let cond = preserved_condition(
                    &m.phase,
                    &self.value,
                    Some(&result),
                    self.condition.as_ref(),
                    self.expiry,
                    now,
                );
                let set = cond.map(|c| PreserveFlowStep::Apply(PreserveStep::SetCondition(c)));
                match result {
                    Ok(()) => {
                        // The condition first, then the rest of the plan.
                        if let Some(set) = set {
                            self.queue.push_front(set);
                        }
                    }
                    Err(e) => {
                        let steps: Vec<PreserveFlowStep<T>> = set
                            .into_iter()
                            .chain([
                                PreserveFlowStep::WarnDrainFailed(e),
                                PreserveFlowStep::RequeueWithBackoff,
                            ])
                            .collect();
                        self.end_with(steps);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "preserve_flow_tests.rs"]
mod tests;
