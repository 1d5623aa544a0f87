//! Machine preservation's effects (decisions in `mcm_core::machine::PreserveFlow`
//! over `plan_preservation`; design: machine.md, "Preservation").
//!
//! Runs in every reconcile of a machine that is not being deleted, after the
//! health check and before the creation flow. One pass does the flow's steps
//! in order and stops at the first that cannot finish now (a drain still
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
    stopped_condition, PreserveDrain, PreserveFlow, PreserveFlowStep, PreserveNode,
    PreserveNodeView, PreserveOutcome, PreserveSettings, PreserveStep,
};
use mcm_core::time::to_k8s;
use tracing::Instrument;

impl Reconciler<'_> {
    /// The preservation pass: runs [`PreserveFlow`], one effect per step.
    /// `Ok(Some(d))`: reconcile again within `d` (the expiry); `Err(d)`: end
    /// this reconcile there, requeue after `d`.
    pub(super) async fn preserve(&mut self, driver: &Arc<dyn Driver>) -> Step<Option<Duration>> {
        let view = self.view();
        let timeout = self
            .machine
            .spec
            .configuration
            .machine_preserve_timeout_duration()
            .ok()
            .flatten()
            .unwrap_or(self.ctx.config.preserve_timeout);
        let mut flow = PreserveFlow::new(
            PreserveSettings {
                timeout,
                long_retry: self.ctx.config.long_retry,
            },
            self.ctx.target.clone(),
        );
        let mut outcome = PreserveOutcome::Start;
        loop {
            outcome = match flow.next(&view, outcome, Utc::now()) {
                PreserveFlowStep::ReadNode => PreserveOutcome::NodeRead(match &view.node {
                    None => PreserveNode::NoNode,
                    Some(name) => match self.ctx.nodes.get(&ObjectRef::new(name)) {
                        Some(n) => PreserveNode::Found(PreserveNodeView::of(&n)),
                        None => PreserveNode::Missing,
                    },
                }),
                PreserveFlowStep::WarnInvalid(msg) => {
                    warn!(%msg, "invalid preserve annotation");
                    self.event(EventType::Warning, "InvalidPreserveAnnotation", msg)
                        .await;
                    PreserveOutcome::Done
                }
                PreserveFlowStep::Apply(step) => {
                    debug!(?step, value = %flow.value(), "preservation");
                    self.apply_preserve_step(step, flow.value()).await?;
                    PreserveOutcome::Done
                }
                PreserveFlowStep::ReadDrain => PreserveOutcome::Drain(self.preserve_drain_state()),
                PreserveFlowStep::StartDrain { plan, node, target } => {
                    self.start_preserve_drain(plan, target, node, driver);
                    PreserveOutcome::Done
                }
                PreserveFlowStep::WarnDrainFailed(e) => {
                    self.event(EventType::Warning, "PreservedNodeDrainFailed", e)
                        .await;
                    PreserveOutcome::Done
                }
                PreserveFlowStep::Requeue(after) => return Ok(Err(after)),
                PreserveFlowStep::RequeueWithBackoff => {
                    return Ok(Err(self.ctx.failure_delay(&self.key, FailureKind::Normal)))
                }
                PreserveFlowStep::Continue(recheck) => return Ok(Ok(recheck)),
            };
        }
    }

    /// One effect of the preservation plan (a status write, a Node or
    /// Machine patch) and its Event.
    async fn apply_preserve_step(&mut self, step: PreserveStep, value: &str) -> Result<(), Error> {
        match step {
            PreserveStep::SetExpiry(t) => {
                self.set_expiry(Some(t)).await?;
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
                let v = c::CA_SCALE_DOWN_DISABLED_VALUE;
                self.patch_node_annotations(
                    MetaPatch::new()
                        .annotation(c::CA_SCALE_DOWN_DISABLED_ANNOTATION, v)
                        .annotation(c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION, v),
                )
                .await?;
            }
            PreserveStep::Taint => self.set_preserved_taint(true).await?,
            PreserveStep::Untaint => self.set_preserved_taint(false).await?,
            // The flow turns the drain into its own steps.
            PreserveStep::Drain(_) => {}
            PreserveStep::SetCondition(cond) => self.set_node_condition(cond).await?,
            PreserveStep::StopCondition => {
                self.set_node_condition(stopped_condition(Utc::now()))
                    .await?;
            }
            PreserveStep::RemoveNodeAnnotations { ca, preserve } => {
                let mut a = MetaPatch::new();
                if ca {
                    a = a
                        .remove_annotation(c::CA_SCALE_DOWN_DISABLED_ANNOTATION)
                        .remove_annotation(c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION);
                }
                if preserve {
                    a = a.remove_annotation(c::PRESERVE_ANNOTATION);
                }
                self.patch_node_annotations(a).await?;
            }
            PreserveStep::RemoveMachineAnnotations { mark_false } => {
                let preserve = mark_false.then_some(c::PRESERVE_VALUE_FALSE);
                self.patch_machine_annotations(
                    MetaPatch::new()
                        .annotation_opt(c::PRESERVE_ANNOTATION, preserve)
                        .remove_annotation(c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION),
                )
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
                        "Preservation stopped ({}={value:?})",
                        c::PRESERVE_ANNOTATION
                    ),
                )
                .await;
            }
            PreserveStep::RecordNodeValue(v) => {
                let last = (!v.is_empty()).then_some(v);
                self.patch_machine_annotations(
                    MetaPatch::new()
                        .remove_annotation(c::PRESERVE_ANNOTATION)
                        .annotation_opt(c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION, last),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// The drain task of the preservation, apart from the deletion's drain
    /// of the same machine (a name no object can have).
    fn preserve_drain_key(&self) -> crate::keys::ObjectKey {
        crate::keys::ObjectKey {
            name: format!("{}#preserve", self.key.name),
            ..self.key.clone()
        }
    }

    /// Where the preserved Node's drain stands (`Skipped` without a target
    /// cluster or a Node name).
    fn preserve_drain_state(&self) -> PreserveDrain {
        let uid = self.machine.uid().unwrap_or_default();
        match self.ctx.drains.state(&self.preserve_drain_key(), &uid) {
            DrainState::Finished(done) => {
                match &done.result {
                    Ok(()) => {
                        info!(force = done.plan.force, elapsed = ?done.elapsed, "preserved node drained")
                    }
                    Err(e) => {
                        warn!(force = done.plan.force, error = %e, "drain of the preserved node failed")
                    }
                }
                PreserveDrain::Finished(done.result)
            }
            DrainState::Running(running) => PreserveDrain::Running {
                force: running.force,
            },
            DrainState::Idle => PreserveDrain::Idle,
        }
    }

    /// Starts (or restarts) the drain of the preserved Node as a task,
    /// without a cordon; it is abandoned once the machine is gone, being
    /// deleted or no longer preserved.
    fn start_preserve_drain(
        &self,
        plan: mcm_core::machine::DrainPlan,
        target: kube::Client,
        node: String,
        driver: &Arc<dyn Driver>,
    ) {
        let key = self.preserve_drain_key();
        let uid = self.machine.uid().unwrap_or_default();
        let driver = driver.clone();
        info!(node, force = plan.force, timeout = ?plan.timeout, "draining the preserved node");
        let opts = drain::DrainOptions::from_plan(&plan, &self.ctx.config, &self.ctx.tenure);
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
                        && m.status
                            .as_ref()
                            .is_some_and(|st| st.current_status.preserve_expiry_time.is_some())
                })
            })
        };
        self.ctx.drains.start(
            &key,
            ObjectKey::machine(&self.machine),
            &uid,
            plan,
            work,
            still_wanted,
        );
    }

    async fn set_expiry(&mut self, t: Option<chrono::DateTime<Utc>>) -> Result<(), Error> {
        let expiry = t.map_or(Field::Remove, |t| Field::Set(to_k8s(t)));
        self.write(MachineStatusChange::preserve_expiry(expiry))
            .await
    }

    async fn patch_machine_annotations(&mut self, a: MetaPatch) -> Result<(), Error> {
        self.machine = a.send(&self.api, &self.name()).await?;
        Ok(())
    }

    fn nodes_api(&self) -> Option<(Api<Node>, String)> {
        let target = self.ctx.target.clone()?;
        let node = self.view().node?;
        Some((Api::all(target), node))
    }

    async fn patch_node_annotations(&self, a: MetaPatch) -> Result<(), Error> {
        let Some((nodes, node)) = self.nodes_api() else {
            return Ok(());
        };
        a.send_unless_gone(&nodes, &node).await?;
        Ok(())
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
        MetaPatch::new()
            .guarded_by_read(&n)
            .taints(taints)
            .send(&nodes, &node)
            .await?;
        info!(node, tainted = on, "preserved taint changed");
        Ok(())
    }
}
