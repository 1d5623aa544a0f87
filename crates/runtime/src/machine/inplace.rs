//! The machine side of an in-place update (design: machine.md, "In-place
//! updates"); the decisions are [`mcm_core::machine::inplace`].
//!
//! Runs after the health check for a machine with a Node, on a target
//! cluster: the agent's `update-result` label → phase; the in-place timeout;
//! the Node's `InPlaceUpdate` condition from its protocol labels; the
//! cordon and drain of a selected Node (the deletion flow's drain, run as a
//! task: [`crate::drain::tasks`]); ReadyForUpdate once drained.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::drain::tasks::DrainState;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_core::machine::inplace::{self as ip, InPlaceAction, InPlaceCondition, InPlaceNodeView};
use mcm_core::time::from_k8s;

/// How often a machine waiting for the node agent looks again.
const AGENT_RECHECK: Duration = Duration::from_secs(10);

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

    /// The in-place step. `Ok(Ok(recheck))` goes on with the reconcile.
    pub(super) async fn in_place(
        &mut self,
        view: &MachineView,
        driver: &Arc<dyn Driver>,
    ) -> Step<Option<Duration>> {
        let (Some(target), Some(node_name)) = (self.ctx.target.clone(), view.node.clone()) else {
            return Ok(Ok(None));
        };
        let Some(node) = self.ctx.nodes.get(&ObjectRef::new(&node_name)) else {
            return Ok(Ok(None));
        };
        let nv = in_place_node_view(&node);
        let short = self.ctx.config.short_retry;
        let nodes: Api<Node> = Api::all(target.clone());
        if let Some(t) = ip::in_place_result(view, &nv) {
            self.write(MachineStatusChange::of(&t)).await?;
            // The Node's condition in the same pass: its watch event brings
            // the next one (the health check's re-join), without waiting.
            if let Some(cond) = ip::node_condition_step(&nv) {
                self.set_in_place_condition(&nodes, &node_name, cond)
                    .await?;
            }
            return Ok(Err(short));
        }
        let mut recheck = None;
        match ip::in_place_timeout(view, self.in_place_timeout(), Utc::now()) {
            Some(Ok(t)) => {
                warn!(description = %t.operation.description, "in-place update timed out");
                self.write(MachineStatusChange::of(&t)).await?;
                return Ok(Err(short));
            }
            Some(Err(after)) => recheck = Some(after),
            None => {}
        }
        if let Some(cond) = ip::node_condition_step(&nv) {
            self.set_in_place_condition(&nodes, &node_name, cond)
                .await?;
            return Ok(Err(short));
        }
        let force_drain = self
            .machine
            .labels()
            .get(c::FORCE_DRAIN_LABEL)
            .map(String::as_str)
            == Some(c::FORCE_DRAIN_LABEL_VALUE);
        match ip::in_place_action(view, force_drain, &nv, Utc::now()) {
            InPlaceAction::Nothing => Ok(Ok(recheck)),
            InPlaceAction::WaitForAgent => Ok(Ok(Some(
                recheck.map_or(AGENT_RECHECK, |r| r.min(AGENT_RECHECK)),
            ))),
            InPlaceAction::MarkReady => {
                self.set_in_place_condition(&nodes, &node_name, ip::ready_for_update_condition())
                    .await?;
                Ok(Ok(Some(AGENT_RECHECK)))
            }
            InPlaceAction::Drain(plan) => {
                let uid = self.machine.uid().unwrap_or_default();
                match self.ctx.drains.state(&self.key, &uid) {
                    DrainState::Finished(done) => {
                        let ok = done.result.is_ok();
                        if let Err(e) = &done.result {
                            warn!(node = %node_name, error = %e, "in-place drain failed");
                            self.event(EventType::Warning, "DrainFailed", e.clone())
                                .await;
                        } else {
                            info!(node = %node_name, elapsed = ?done.elapsed,
                                  "{}", mcm_api::constants::NODE_READY_FOR_UPDATE);
                        }
                        let t = ip::after_in_place_drain(&self.name(), done.result);
                        self.write(MachineStatusChange::of(&t)).await?;
                        if !ok {
                            return Ok(Err(self.ctx.failure_delay(&self.key, FailureKind::Normal)));
                        }
                        self.set_in_place_condition(
                            &nodes,
                            &node_name,
                            ip::drain_successful_condition(),
                        )
                        .await?;
                        Ok(Err(short))
                    }
                    DrainState::Running(_) => Ok(Ok(Some(self.ctx.config.long_retry))),
                    DrainState::Idle => {
                        info!(node = %node_name, "draining the node for its in-place update");
                        self.start_drain(plan, target, node_name, driver.clone(), &uid);
                        Ok(Ok(Some(self.ctx.config.long_retry)))
                    }
                }
            }
        }
    }
}
