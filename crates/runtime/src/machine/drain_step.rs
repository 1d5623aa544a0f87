//! The deletion flow's Drain effects: report the drain task's state and start
//! the drain as a task beside the reconciles ([`crate::drain::tasks`]); the
//! flow (`mcm_core::machine::DeletionFlow`) decides what follows. No
//! reconcile waits for a drain.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::drain::tasks::DrainState;
use mcm_core::machine::DrainProgress;
use tracing::Instrument;

impl Reconciler<'_> {
    /// What this machine's drain task is doing, for the deletion flow. A
    /// finished drain's outcome is handed out once: its metric, log and
    /// Event are done here.
    pub(super) fn drain_progress(&self) -> DrainProgress {
        let uid = self.machine.uid().unwrap_or_default();
        match self.ctx.drains.state(&self.key, &uid) {
            DrainState::Idle => DrainProgress::Idle,
            DrainState::Running(plan) => {
                debug!("drain still running");
                DrainProgress::Running { force: plan.force }
            }
            DrainState::Finished(done) => {
                match &done.result {
                    Ok(()) => {
                        info!(force = done.plan.force, elapsed = ?done.elapsed, "drain finished");
                        self.ctx
                            .metrics
                            .machine_drain_duration(&self.machine, done.elapsed);
                    }
                    Err(e) => warn!(force = done.plan.force, error = %e, "drain failed"),
                }
                DrainProgress::Finished {
                    plan: done.plan,
                    result: done.result,
                }
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
            ObjectKey::machine(&self.machine),
            uid,
            plan,
            work,
            still_wanted,
        );
    }
}
