//! The deletion flow's Drain step: starts the drain as a task beside the
//! reconciles ([`crate::drain::tasks`]) and later consumes its outcome through
//! `mcm_core::machine::after_drain`. No reconcile waits for a drain.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::drain::tasks::{DrainState, Finished};
use tracing::Instrument;

impl Reconciler<'_> {
    /// Runs the Drain step. `None`: the step is done (status written), go on
    /// with the next one; `Some`: stop here with that action.
    pub(super) async fn drain_step(
        &mut self,
        view: &MachineView,
        driver: &Arc<dyn Driver>,
    ) -> Result<Option<Action>, Error> {
        let plan = decide::plan_drain(view, Utc::now());
        let (Some(target), Some(node)) = (self.ctx.target.clone(), view.node.clone()) else {
            self.write(MachineStatusChange::of(&decide::after_drain(
                &plan,
                false,
                Ok(()),
            )))
            .await?;
            return Ok(None);
        };
        let uid = self.machine.uid().unwrap_or_default();
        match self.ctx.drains.state(&self.key, &uid) {
            DrainState::Finished(done) => self.drain_finished(done).await,
            // A forced drain supersedes a normal one still waiting on a budget.
            DrainState::Running(running) if running.force || !plan.force => {
                debug!(node, "drain still running");
                Ok(Some(Action::requeue(self.ctx.config.long_retry)))
            }
            DrainState::Running(_) | DrainState::Idle => {
                self.start_drain(plan, target, node, driver.clone(), &uid);
                Ok(Some(Action::requeue(self.ctx.config.long_retry)))
            }
        }
    }

    pub(super) fn start_drain(
        &self,
        plan: decide::DrainPlan,
        target: kube::Client,
        node: String,
        driver: Arc<dyn Driver>,
        uid: &str,
    ) {
        let ns = self.machine.namespace().unwrap_or_default();
        let name = self.name();
        info!(node, force = plan.force, timeout = ?plan.timeout, max_evict_retries = plan.max_evict_retries, "starting the drain");
        let opts = drain::DrainOptions::from_plan(&plan, &self.ctx.config, &self.ctx.tenure);
        let span = tracing::info_span!("drain", machine = %name, namespace = %ns, node = %node);
        let nodes = self.ctx.nodes.clone();
        let work = async move {
            drain::drain_node(&target, &node, &nodes, &opts, driver.as_ref())
                .await
                .map_err(|e| e.to_string())
        }
        .instrument(span);
        let store = self.ctx.machine_store();
        let me = ObjectRef::<Machine>::new(&name).within(&ns);
        let my_uid = uid.to_string();
        let still_wanted = move || {
            store.as_ref().is_none_or(|s| {
                s.get(&me)
                    .is_some_and(|m| m.uid().as_deref() == Some(my_uid.as_str()))
            })
        };
        self.ctx.drains.start(
            &self.key,
            ObjectRef::from_obj(&self.machine),
            uid,
            plan,
            work,
            still_wanted,
        );
    }

    async fn drain_finished(&mut self, done: Finished) -> Result<Option<Action>, Error> {
        let ok = done.result.is_ok();
        match &done.result {
            Ok(()) => {
                info!(force = done.plan.force, elapsed = ?done.elapsed, "drain finished");
                self.ctx
                    .metrics
                    .machine_drain_duration(&self.machine, done.elapsed);
            }
            Err(e) => {
                warn!(force = done.plan.force, error = %e, "drain failed");
                self.event(EventType::Warning, "DrainFailed", e.clone())
                    .await;
            }
        }
        let t = decide::after_drain(&done.plan, true, done.result);
        if ok || done.plan.force {
            // The next steps follow in this reconcile; one write at its end.
            self.stage(MachineStatusChange::of(&t));
            Ok(None)
        } else {
            self.write(MachineStatusChange::of(&t)).await?;
            Ok(Some(Action::requeue(
                self.ctx.failure_delay(&self.key, FailureKind::Normal),
            )))
        }
    }
}
