//! Machine preservation's effects (decisions in `mcm_core::machine::plan_preservation`;
//! design: machine.md, "Preservation").
//!
//! Runs in every reconcile of a machine that is not being deleted, after the
//! health check and before the creation flow. One pass applies the planned
//! steps in order and stops at the first that cannot finish now (a drain still
//! running, an API error); the next reconcile plans again from the objects.
//!
//! The drain of a preserved Failed machine runs as a task like the deletion's
//! drain ([`crate::drain::tasks`], under the key `<namespace>/<name>#preserve`),
//! without a cordon: the `preserved:NoSchedule` taint keeps new pods away, so
//! a user's cordon is never undone. The task is abandoned when the machine
//! is gone, being deleted, or no longer preserved.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::drain::tasks::DrainState;
use crate::status::Field;
use k8s_openapi::api::core::v1::Taint;
use mcm_core::machine::{
    plan_preservation, preserved_condition, stopped_condition, PreserveInput, PreserveNode,
    PreserveNodeView, PreserveStep,
};
use mcm_core::time::to_k8s;
use tracing::Instrument;

impl Reconciler<'_> {
    /// The preservation pass. `Ok(Some(d))`: reconcile again within `d` (the
    /// expiry); `Err(d)`: end this reconcile there, requeue after `d`.
    pub(super) async fn preserve(&mut self, driver: &Arc<dyn Driver>) -> Step<Option<Duration>> {
        let view = self.view();
        let node = match &view.node {
            None => PreserveNode::NoNode,
            Some(name) => match self.ctx.nodes.get(&ObjectRef::new(name)) {
                Some(n) => PreserveNode::Found(PreserveNodeView::of(&n)),
                None => PreserveNode::Missing,
            },
        };
        let timeout = self
            .machine
            .spec
            .configuration
            .machine_preserve_timeout_duration()
            .ok()
            .flatten()
            .unwrap_or(self.ctx.config.preserve_timeout);
        let now = Utc::now();
        let input = PreserveInput::of(&view, node, timeout, now);
        let plan = plan_preservation(&input);
        for msg in &plan.invalid {
            warn!(%msg, "invalid preserve annotation");
            self.event(EventType::Warning, "InvalidPreserveAnnotation", msg.clone())
                .await;
        }
        if !plan.steps.is_empty() {
            debug!(summary = plan.summary, steps = ?plan.steps, effective = ?plan.effective, "preservation");
        }
        let value = plan.effective.clone().unwrap_or_default();
        let mut expiry = input.expiry;
        for step in plan.steps {
            match step {
                PreserveStep::SetExpiry(t) => {
                    self.set_expiry(Some(t)).await?;
                    expiry = Some(t);
                    info!(until = %t.to_rfc3339(), value = %value, "machine preserved");
                    self.event(
                        EventType::Normal,
                        "Preserved",
                        format!(
                            "Machine preserved until {} ({}={value})",
                            t.to_rfc3339(),
                            c::PRESERVE_ANNOTATION
                        ),
                    )
                    .await;
                }
                PreserveStep::AddScaleDownDisabled => {
                    self.patch_node_annotations(json!({
                        c::CA_SCALE_DOWN_DISABLED_ANNOTATION: c::CA_SCALE_DOWN_DISABLED_VALUE,
                        c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: c::CA_SCALE_DOWN_DISABLED_VALUE,
                    }))
                    .await?;
                }
                PreserveStep::Taint => self.set_preserved_taint(true).await?,
                PreserveStep::Untaint => self.set_preserved_taint(false).await?,
                PreserveStep::Drain(drain_plan) => {
                    let outcome =
                        self.preserve_drain(drain_plan, driver, &view, &value, expiry, &input);
                    let Some((result, cond)) = outcome else {
                        return Ok(Err(self.ctx.config.long_retry));
                    };
                    if let Some(cond) = cond {
                        self.set_node_condition(cond).await?;
                    }
                    match result {
                        Ok(()) => {}
                        Err(e) => {
                            self.event(EventType::Warning, "PreservedNodeDrainFailed", e)
                                .await;
                            return Ok(Err(self.ctx.failure_delay(&self.key, FailureKind::Normal)));
                        }
                    }
                }
                PreserveStep::SetCondition(cond) => self.set_node_condition(cond).await?,
                PreserveStep::StopCondition => {
                    self.set_node_condition(stopped_condition(now)).await?;
                }
                PreserveStep::RemoveNodeAnnotations { ca, preserve } => {
                    let mut a = serde_json::Map::new();
                    if ca {
                        a.insert(c::CA_SCALE_DOWN_DISABLED_ANNOTATION.into(), json!(null));
                        a.insert(
                            c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION.into(),
                            json!(null),
                        );
                    }
                    if preserve {
                        a.insert(c::PRESERVE_ANNOTATION.into(), json!(null));
                    }
                    self.patch_node_annotations(serde_json::Value::Object(a))
                        .await?;
                }
                PreserveStep::RemoveMachineAnnotations { mark_false } => {
                    let preserve = if mark_false {
                        json!(c::PRESERVE_VALUE_FALSE)
                    } else {
                        json!(null)
                    };
                    self.patch_machine_annotations(json!({
                        c::PRESERVE_ANNOTATION: preserve,
                        c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION: null,
                    }))
                    .await?;
                }
                PreserveStep::ClearExpiry => {
                    self.set_expiry(None).await?;
                    self.ctx.drains.abort(&self.preserve_drain_key());
                    info!(value = %value, "machine preservation stopped");
                    self.event(
                        EventType::Normal,
                        "PreservationStopped",
                        format!(
                            "Preservation stopped ({}={:?})",
                            c::PRESERVE_ANNOTATION,
                            plan.effective.as_deref().unwrap_or("")
                        ),
                    )
                    .await;
                }
                PreserveStep::RecordNodeValue(v) => {
                    let last = if v.is_empty() { json!(null) } else { json!(v) };
                    self.patch_machine_annotations(json!({
                        c::PRESERVE_ANNOTATION: null,
                        c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION: last,
                    }))
                    .await?;
                }
            }
        }
        Ok(Ok(plan.recheck_after))
    }

    /// The drain task of the preservation, apart from the deletion's drain
    /// of the same machine (a name no object can have).
    fn preserve_drain_key(&self) -> crate::keys::ObjectKey {
        crate::keys::ObjectKey {
            name: format!("{}#preserve", self.key.name),
            ..self.key.clone()
        }
    }

    /// The drain step of a preserved Failed machine: `None` while the drain
    /// runs (just started or still running), else its result and the
    /// `Preserved` condition to write.
    fn preserve_drain(
        &self,
        plan: mcm_core::machine::DrainPlan,
        driver: &Arc<dyn Driver>,
        view: &MachineView,
        value: &str,
        expiry: Option<chrono::DateTime<Utc>>,
        input: &PreserveInput,
    ) -> Option<(
        Result<(), String>,
        Option<k8s_openapi::api::core::v1::NodeCondition>,
    )> {
        let (Some(target), Some(node)) = (self.ctx.target.clone(), view.node.clone()) else {
            return Some((Ok(()), None));
        };
        let key = self.preserve_drain_key();
        let uid = self.machine.uid().unwrap_or_default();
        match self.ctx.drains.state(&key, &uid) {
            DrainState::Finished(done) => {
                match &done.result {
                    Ok(()) => {
                        info!(node, force = done.plan.force, elapsed = ?done.elapsed, "preserved node drained")
                    }
                    Err(e) => {
                        warn!(node, force = done.plan.force, error = %e, "drain of the preserved node failed")
                    }
                }
                let existing = match &input.node {
                    PreserveNode::Found(n) => n.condition.clone(),
                    _ => None,
                };
                let cond = preserved_condition(
                    &view.phase,
                    value,
                    Some(&done.result),
                    existing.as_ref(),
                    expiry,
                    Utc::now(),
                );
                Some((done.result, cond))
            }
            DrainState::Running(running) if running.force || !plan.force => None,
            DrainState::Running(_) | DrainState::Idle => {
                let driver = driver.clone();
                info!(node, force = plan.force, timeout = ?plan.timeout, "draining the preserved node");
                let opts =
                    drain::DrainOptions::from_plan(&plan, &self.ctx.config, &self.ctx.tenure);
                let span = tracing::info_span!("preserve_drain", machine = %self.name(), namespace = %self.machine.namespace().unwrap_or_default(), node = %node);
                let work = async move {
                    drain::drain_pods(&target, &node, &opts, driver.as_ref())
                        .await
                        .map_err(|e| e.to_string())
                }
                .instrument(span);
                let store = self.ctx.machine_store();
                let me = ObjectRef::<Machine>::new(&self.name())
                    .within(&self.machine.namespace().unwrap_or_default());
                let my_uid = uid.clone();
                let still_wanted = move || {
                    store.as_ref().is_none_or(|s| {
                        s.get(&me).is_some_and(|m| {
                            m.uid().as_deref() == Some(my_uid.as_str())
                                && m.meta().deletion_timestamp.is_none()
                                && m.status.as_ref().is_some_and(|st| {
                                    st.current_status.preserve_expiry_time.is_some()
                                })
                        })
                    })
                };
                self.ctx.drains.start(
                    &key,
                    ObjectRef::from_obj(&self.machine),
                    &uid,
                    plan,
                    work,
                    still_wanted,
                );
                None
            }
        }
    }

    async fn set_expiry(&mut self, t: Option<chrono::DateTime<Utc>>) -> Result<(), Error> {
        let expiry = t.map_or(Field::Remove, |t| Field::Set(to_k8s(t)));
        self.write(MachineStatusChange::preserve_expiry(expiry))
            .await
    }

    async fn patch_machine_annotations(&mut self, a: serde_json::Value) -> Result<(), Error> {
        let patch = json!({"metadata": {"annotations": a}});
        self.machine = self
            .api
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    fn nodes_api(&self) -> Option<(Api<Node>, String)> {
        let target = self.ctx.target.clone()?;
        let node = self.view().node?;
        Some((Api::all(target), node))
    }

    async fn patch_node_annotations(&self, a: serde_json::Value) -> Result<(), Error> {
        let Some((nodes, node)) = self.nodes_api() else {
            return Ok(());
        };
        let patch = json!({"metadata": {"annotations": a}});
        match nodes
            .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn set_node_condition(
        &self,
        cond: k8s_openapi::api::core::v1::NodeCondition,
    ) -> Result<(), Error> {
        let Some((nodes, node)) = self.nodes_api() else {
            return Ok(());
        };
        match crate::status::node::set_conditions(&nodes, &node, vec![cond]).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds (`on`) or removes the `preserved:NoSchedule` taint, with the
    /// Node's resourceVersion as precondition (a concurrent taint change is a
    /// conflict, retried, never overwritten).
    async fn set_preserved_taint(&self, on: bool) -> Result<(), Error> {
        let Some((nodes, node)) = self.nodes_api() else {
            return Ok(());
        };
        let Some(n) = nodes.get_opt(&node).await? else {
            return Ok(());
        };
        let mut taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let is_ours = |t: &Taint| t.key == c::PRESERVED_TAINT && t.effect == "NoSchedule";
        let has = taints.iter().any(is_ours);
        if has == on {
            return Ok(());
        }
        if on {
            taints.push(Taint {
                key: c::PRESERVED_TAINT.into(),
                effect: "NoSchedule".into(),
                time_added: Some(to_k8s(Utc::now())),
                value: None,
            });
        } else {
            taints.retain(|t| !is_ours(t));
        }
        let patch = json!({
            "metadata": {"resourceVersion": n.resource_version()},
            "spec": {"taints": taints},
        });
        nodes
            .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        info!(node, tainted = on, "preserved taint changed");
        Ok(())
    }
}
