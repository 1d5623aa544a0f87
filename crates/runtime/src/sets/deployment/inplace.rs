//! The InPlaceUpdate strategy's effects (design: sets-and-deployments.md,
//! "In-place updates"); the decisions are [`mcm_core::deployment`]'s
//! `sets_to_disable_scale_up`, `nodes_to_mark_candidate`, `sync_sets`,
//! `new_set_step` and `old_sets_step`.
//!
//! One pass makes one kind of write and returns; the watch events of those
//! writes (and a short requeue while the rollout runs) bring the next pass.
//! Every write of a computed value carries the object's resourceVersion, so
//! a pass working on a stale cache fails with a conflict instead of moving
//! a machine or resizing a set twice.

#![allow(clippy::wildcard_imports)]
use super::*;
use k8s_openapi::api::core::v1::{Node, Taint};
use mcm_core::deployment::{
    new_set_step, nodes_to_mark_candidate, old_sets_step, sets_to_disable_scale_up, sync_sets,
    InPlaceFacts, InPlaceMachine, InPlaceNode, NewSetStep, OldSetsStep,
};

/// How often a running in-place rollout looks again, besides watch events
/// (Node changes reach the deployment only through its machines).
const IN_PLACE_RECHECK: Duration = Duration::from_secs(3);

fn condition_reason<'a>(
    conditions: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::NodeCondition>,
) -> Option<String> {
    conditions
        .into_iter()
        .find(|cd| cd.type_ == c::NODE_IN_PLACE_UPDATE_CONDITION)
        .map(|cd| cd.reason.clone().unwrap_or_default())
}

fn node_view(node: &Node) -> InPlaceNode {
    let labels = node.labels();
    InPlaceNode {
        name: node.name_any(),
        candidate: labels.contains_key(c::NODE_CANDIDATE_FOR_UPDATE_LABEL),
        selected: labels.contains_key(c::NODE_SELECTED_FOR_UPDATE_LABEL),
        result: labels.get(c::NODE_UPDATE_RESULT_LABEL).cloned(),
        condition: condition_reason(
            node.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten(),
        ),
    }
}

impl Pass<'_> {
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.ctx.nodes.get(&ObjectRef::new(name))
    }

    /// The in-place views of the deployment's machines (same order as `self.machines`).
    fn in_place_machines(&self) -> Vec<InPlaceMachine> {
        self.machines
            .iter()
            .map(|m| {
                let labels = m.labels();
                let set = self.sets.iter().position(|s| {
                    s.spec
                        .selector
                        .as_ref()
                        .and_then(|sel| sel.match_labels.as_ref())
                        .is_some_and(|ml| ml.iter().all(|(k, v)| labels.get(k) == Some(v)))
                });
                let status = m.status.clone().unwrap_or_default();
                InPlaceMachine {
                    name: m.name_any(),
                    set,
                    updating: status.current_status.phase == mcm_api::MachinePhase::InPlaceUpdating,
                    condition: condition_reason(status.conditions.iter()),
                    result_label: labels.get(c::NODE_UPDATE_RESULT_LABEL).map(String::as_str)
                        == Some(c::NODE_UPDATE_RESULT_SUCCESSFUL),
                    node: labels
                        .get(c::NODE_LABEL)
                        .filter(|n| !n.is_empty())
                        .and_then(|n| self.node(n))
                        .map(|n| node_view(&n)),
                }
            })
            .collect()
    }

    /// One InPlaceUpdate step (design: sets-and-deployments.md, "In-place updates").
    pub(super) async fn in_place(mut self) -> Result<Action, Error> {
        let Some(target) = self.ctx.target.clone() else {
            return self.in_place_unsupported().await;
        };
        let Some(n) = self.part.new else {
            self.create_new_set().await?;
            return Ok(requeue(self.ctx, Some(SHORTLY)));
        };
        let (max_unavailable, manual) = match self.strategy {
            Strategy::InPlaceUpdate { manual, .. } => {
                (self.strategy.max_unavailable(self.replicas()), manual)
            }
            _ => return Ok(requeue(self.ctx, None)),
        };
        let nodes: Api<Node> = Api::all(target);
        let disable = sets_to_disable_scale_up(&self.views, &self.part);
        for &i in &disable {
            let s = &self.sets[i];
            MetaPatch::new()
                .guarded_by(version_of(&**s))
                .label(c::SCALE_UP_DISABLED_LABEL, "true")
                .send(&self.ctx.machine_sets(), &s.name_any())
                .await?;
            info!(machineset = %s.name_any(), "old MachineSet may no longer create machines (in-place rollout)");
        }
        if !disable.is_empty() {
            return Ok(requeue(self.ctx, Some(SHORTLY)));
        }
        let machines = self.in_place_machines();
        let replicas = self.replicas();
        let facts = InPlaceFacts {
            replicas,
            max_unavailable,
            manual,
            sets: &self.views,
            part: &self.part,
            machines: &machines,
        };
        for node in nodes_to_mark_candidate(&facts) {
            self.label_node(&nodes, &node, c::NODE_CANDIDATE_FOR_UPDATE_LABEL)
                .await?;
        }
        let sync = sync_sets(&facts);
        let new_step = new_set_step(&facts);
        let old_step = old_sets_step(&facts);
        if let Some(size) = sync.new_size {
            // First the size: a moved machine keeps its `update-result`
            // label (which keeps its new set from deleting it as surplus)
            // until the set counts it.
            self.scale_set(n, size).await?;
            return self.in_place_status().await;
        }
        if !sync.is_empty() {
            for name in &sync.strip_machine_labels {
                MetaPatch::new()
                    .remove_label(c::NODE_UPDATE_RESULT_LABEL)
                    .send(&self.ctx.machines(), name)
                    .await?;
            }
            for node in &sync.finish_nodes {
                self.finish_node(&nodes, node).await?;
            }
            for &(i, size) in &sync.shrink_old {
                self.scale_set(i, size).await?;
            }
            return self.in_place_status().await;
        }
        match new_step {
            NewSetStep::Nothing => {}
            NewSetStep::Scale(size) => {
                self.scale_set(n, size).await?;
                return self.in_place_status().await;
            }
            NewSetStep::Transfer {
                moves,
                old_sizes,
                new_size,
            } => {
                for mv in &moves {
                    self.transfer(&nodes, &mv.machine, mv.from, n).await?;
                }
                for (i, size) in old_sizes {
                    self.scale_set(i, size).await?;
                }
                // A conflict here (the set's status moved on) is caught up by
                // the next pass's bookkeeping: the moved machines keep their
                // `update-result` label until the new set counts them.
                match self.scale_set(n, new_size).await {
                    Ok(_) => {}
                    Err(e) if e.is_conflict() => {
                        debug!(error = %e, "new MachineSet not raised yet; the next pass does it");
                        return Ok(requeue(self.ctx, Some(SHORTLY)));
                    }
                    Err(e) => return Err(e),
                }
                return self.in_place_status().await;
            }
        }
        match old_step {
            OldSetsStep::Nothing => {}
            OldSetsStep::ScaleToZero(list) => {
                for i in list {
                    self.scale_set(i, 0).await?;
                }
                return self.in_place_status().await;
            }
            OldSetsStep::Select(list) => {
                for name in &list {
                    let node = machines
                        .iter()
                        .find(|m| &m.name == name)
                        .and_then(|m| m.node.as_ref())
                        .map(|nd| nd.name.clone());
                    if let Some(node) = node {
                        self.label_node(&nodes, &node, c::NODE_SELECTED_FOR_UPDATE_LABEL)
                            .await?;
                        info!(machine = %name, node = %node, "selected for in-place update");
                    }
                }
                return self.in_place_status().await;
            }
        }
        let generation = self.d.meta().generation.unwrap_or(0);
        if is_complete(replicas, generation, &self.status()) {
            self.cleanup().await?;
        }
        self.in_place_status().await
    }

    /// The rollout status, and a short recheck while old sets hold machines.
    async fn in_place_status(mut self) -> Result<Action, Error> {
        let ongoing = self
            .part
            .old
            .iter()
            .any(|&i| self.views[i].replicas > 0 || self.views[i].status.replicas > 0);
        let action = self.sync_rollout_status().await?;
        if ongoing {
            return Ok(requeue(self.ctx, Some(IN_PLACE_RECHECK)));
        }
        Ok(action)
    }

    /// Puts `label=true` on a Node (guarded by its labels as read); a missing Node is skipped.
    async fn label_node(&self, nodes: &Api<Node>, name: &str, label: &str) -> Result<(), Error> {
        let Some(node) = self.node(name) else {
            return Ok(());
        };
        if node.labels().contains_key(label) {
            return Ok(());
        }
        MetaPatch::new()
            .guarded_by_read(&*node)
            .label(label, "true")
            .send_unless_gone(nodes, name)
            .await?;
        Ok(())
    }

    /// An updated Node of the new set: the protocol labels and the failure
    /// annotation go, it is uncordoned, loses prefer-no-schedule and gets
    /// `critical-components-not-ready` until its critical pods run again.
    async fn finish_node(&self, nodes: &Api<Node>, name: &str) -> Result<(), Error> {
        let Some(node) = self.node(name) else {
            return Ok(());
        };
        let mut taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| {
                !(t.key == c::PREFER_NO_SCHEDULE_KEY
                    && t.value.as_deref() == Some(c::PREFER_NO_SCHEDULE_VALUE)
                    && t.effect == "PreferNoSchedule")
            })
            .collect();
        if !taints
            .iter()
            .any(|t| t.key == c::CRITICAL_COMPONENTS_NOT_READY_TAINT && t.effect == "NoSchedule")
        {
            taints.push(Taint {
                key: c::CRITICAL_COMPONENTS_NOT_READY_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            });
        }
        MetaPatch::new()
            .guarded_by_read(&*node)
            .remove_label(c::NODE_CANDIDATE_FOR_UPDATE_LABEL)
            .remove_label(c::NODE_SELECTED_FOR_UPDATE_LABEL)
            .remove_label(c::NODE_UPDATE_RESULT_LABEL)
            .remove_annotation(c::NODE_UPDATE_FAILED_REASON_ANNOTATION)
            .unschedulable(false)
            .taints(taints)
            .send(nodes, name)
            .await?;
        info!(node = %name, "in-place update finished: node uncordoned");
        Ok(())
    }

    /// Moves an updated machine from old set `from` to the new set `to`:
    /// one controller owner reference, the new selector's labels and
    /// `update-result=successful`; then uncordons its Node.
    async fn transfer(
        &self,
        nodes: &Api<Node>,
        name: &str,
        from: usize,
        to: usize,
    ) -> Result<(), Error> {
        let Some(m) = self.machines.iter().find(|m| m.name_any() == name) else {
            return Ok(());
        };
        let selector = |i: usize| {
            self.sets[i]
                .spec
                .selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default()
        };
        let labels =
            mcm_core::deployment::moved_machine_labels(m.labels(), &selector(from), &selector(to));
        let mut write = MetaPatch::new()
            .guarded_by(version_of(&**m))
            .owner_references(vec![owner_reference(&*self.sets[to])]);
        for k in m.labels().keys().filter(|k| !labels.contains_key(*k)) {
            write = write.remove_label(k);
        }
        for (k, v) in &labels {
            write = write.label(k, v.clone());
        }
        write.send(&self.ctx.machines(), name).await?;
        info!(machine = %name, from = %self.sets[from].name_any(), to = %self.sets[to].name_any(),
              "updated in place: machine moved to the new MachineSet");
        if let Some(node) = m.labels().get(c::NODE_LABEL).filter(|n| !n.is_empty()) {
            MetaPatch::new()
                .unschedulable(false)
                .send_unless_gone(nodes, node)
                .await?;
        }
        Ok(())
    }
}

impl Pass<'_> {
    /// Without a target cluster there is no node agent protocol: InPlaceUpdate is refused.
    async fn in_place_unsupported(mut self) -> Result<Action, Error> {
        self.event(
            EventType::Warning,
            "InPlaceUpdateUnsupported",
            "The InPlaceUpdate strategy needs a target cluster; this controller does not roll it out".into(),
        )
        .await;
        self.sync_status().await?;
        Ok(requeue(self.ctx, None))
    }
}
