//! The machine side of an in-place update (design: machine.md, "In-place
//! updates"); the decisions are [`mcm_core::machine::inplace`].
//!
//! Runs after the health check for a machine with a Node, on a target
//! cluster. What happens is decided by `mcm_core::machine::InPlaceFlow`
//! (the agent's `update-result` label → phase; the in-place timeout; the
//! Node's `InPlaceUpdate` condition from its protocol labels; the cordon and
//! drain of a selected Node; ReadyForUpdate once drained); this file does
//! its effects, the drain as a task ([`crate::drain::tasks`]).

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::drain::tasks::DrainState;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_core::machine::inplace::{InPlaceCondition, InPlaceNodeView};
use mcm_core::machine::{InPlaceDrain, InPlaceFlow, InPlaceOutcome, InPlaceSettings, InPlaceStep};
use mcm_core::time::from_k8s;

fn in_place_node_view(node: &Node) -> InPlaceNodeView {
    let cond = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|cd| cd.type_ == c::NODE_IN_PLACE_UPDATE_CONDITION)
        });
    InPlaceNodeView {
        labels: node.labels().clone(),
        annotations: node.annotations().clone(),
        condition: cond.map(|cd| cd.reason.clone().unwrap_or_default()),
        condition_since: cond
            .and_then(|cd| cd.last_transition_time.as_ref())
            .map(from_k8s),
    }
}

impl Reconciler<'_> {
    /// The in-place timeout of this machine (`spec.inPlaceUpdateTimeout`,
    /// else `--machine-inplace-update-timeout`).
    fn in_place_timeout(&self) -> Duration {
        self.machine
            .spec
            .configuration
            .in_place_update_timeout
            .as_deref()
            .and_then(decide::parse_go_duration)
            .unwrap_or(self.ctx.config.in_place_update_timeout)
    }

    /// Writes the Node's `InPlaceUpdate` condition (strategic merge: the
    /// conditions list is keyed by type).
    async fn set_in_place_condition(
        &self,
        nodes: &Api<Node>,
        node: &str,
        cond: InPlaceCondition,
    ) -> Result<(), Error> {
        let c = NodeCondition {
            type_: c::NODE_IN_PLACE_UPDATE_CONDITION.into(),
            status: "True".into(),
            last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            reason: Some(cond.reason.into()),
            message: Some(cond.message),
            ..Default::default()
        };
        crate::status::node::set_conditions(nodes, node, vec![c]).await?;
        info!(node, reason = cond.reason, "in-place update condition set");
        Ok(())
    }

    /// The in-place step: runs [`InPlaceFlow`], one effect per step.
    /// `Ok(Ok(recheck))` goes on with the reconcile.
    pub(super) async fn in_place(
        &mut self,
        view: &MachineView,
        driver: &Arc<dyn Driver>,
    ) -> Step<Option<Duration>> {
        let force_drain = self
            .machine
            .labels()
            .get(c::FORCE_DRAIN_LABEL)
            .map(String::as_str)
            == Some(c::FORCE_DRAIN_LABEL_VALUE);
        let mut flow = InPlaceFlow::new(
            InPlaceSettings {
                timeout: self.in_place_timeout(),
                force_drain,
                short_retry: self.ctx.config.short_retry,
                long_retry: self.ctx.config.long_retry,
            },
            self.ctx.target.clone(),
        );
        let node_name = view.node.clone().unwrap_or_default();
        let uid = self.machine.uid().unwrap_or_default();
        let mut outcome = InPlaceOutcome::Start;
        loop {
            outcome = match flow.next(view, outcome, Utc::now()) {
                InPlaceStep::ReadNode => InPlaceOutcome::NodeRead(
                    self.ctx
                        .nodes
                        .get(&ObjectRef::new(&node_name))
                        .map(|n| in_place_node_view(&n)),
                ),
                InPlaceStep::Write(t) => {
                    if t.phase.is_some() {
                        info!(description = %t.operation.description, "in-place update status");
                    }
                    self.write(MachineStatusChange::of(&t)).await?;
                    InPlaceOutcome::Written
                }
                InPlaceStep::SetCondition {
                    condition,
                    node,
                    target,
                } => {
                    let nodes: Api<Node> = Api::all(target);
                    self.set_in_place_condition(&nodes, &node, condition)
                        .await?;
                    InPlaceOutcome::ConditionSet
                }
                InPlaceStep::ReadDrain => {
                    InPlaceOutcome::Drain(match self.ctx.drains.state(&self.key, &uid) {
                        DrainState::Finished(done) => {
                            if done.result.is_ok() {
                                info!(node = %node_name, elapsed = ?done.elapsed,
                                      "{}", mcm_api::constants::NODE_READY_FOR_UPDATE);
                            }
                            InPlaceDrain::Finished(done.result)
                        }
                        DrainState::Running(_) => InPlaceDrain::Running,
                        DrainState::Idle => InPlaceDrain::Idle,
                    })
                }
                InPlaceStep::StartDrain { plan, node, target } => {
                    info!(node = %node, "draining the node for its in-place update");
                    self.start_drain(plan, target, node, driver.clone(), &uid);
                    InPlaceOutcome::DrainStarted
                }
                InPlaceStep::WarnDrainFailed(e) => {
                    warn!(node = %node_name, error = %e, "in-place drain failed");
                    self.event(EventType::Warning, "DrainFailed", e).await;
                    InPlaceOutcome::Warned
                }
                InPlaceStep::Requeue(after) => return Ok(Err(after)),
                InPlaceStep::RequeueWithBackoff => {
                    return Ok(Err(self.ctx.failure_delay(&self.key, FailureKind::Normal)))
                }
                InPlaceStep::Continue(recheck) => return Ok(Ok(recheck)),
            };
        }
    }
}
