//! The health check's effects, one per step (decisions in
//! `mcm_core::machine::HealthFlow`).

#[allow(clippy::wildcard_imports)]
use super::*;

impl Reconciler<'_> {
    // ------------------------------------------------------------------
    // Health

    /// Runs the health check (`mcm_core::machine::HealthFlow`), one effect
    /// per step. `startup_taint`: `Some(description)` while the Node's
    /// startup taint holds the machine out of Running (design: startup-taint.md).
    pub(super) async fn health(
        &mut self,
        view: &MachineView,
        startup_taint: Option<String>,
    ) -> Step<Option<Duration>> {
        let node_name = view.node.clone().unwrap_or_default();
        let now = Utc::now();
        let mut flow = decide::HealthFlow::new();
        let mut outcome = decide::HealthOutcome::Start;
        loop {
            let step = flow.next(view, outcome, now);
            debug!(?step, "health step");
            outcome = match step {
                decide::HealthStep::ReadNode => {
                    let node = self.ctx.nodes.get(&ObjectRef::new(&node_name));
                    decide::HealthOutcome::NodeRead(
                        node.as_ref()
                            .map(|n| decide::HealthNode::of(n, startup_taint.clone())),
                    )
                }
                decide::HealthStep::DeleteMachine => {
                    info!(node = %node_name, "node is being deleted; deleting its machine");
                    self.api
                        .delete(&self.name(), &DeleteParams::default())
                        .await?;
                    decide::HealthOutcome::MachineDeleted
                }
                decide::HealthStep::Warn { reason, note } => {
                    self.event(EventType::Warning, reason, note).await;
                    decide::HealthOutcome::Warned
                }
                decide::HealthStep::AskFailedMark => {
                    let granted = self.may_mark_failed().await?;
                    if !granted {
                        info!("not marking Failed: another machine of the deployment is being replaced");
                    }
                    decide::HealthOutcome::FailedMark(granted)
                }
                decide::HealthStep::Write {
                    transition,
                    conditions,
                    release_mark,
                } => {
                    let written = self
                        .write(MachineStatusChange::of(&transition).with_conditions(conditions))
                        .await;
                    if written.is_err() && release_mark {
                        self.release_failed_mark().await;
                    }
                    written?;
                    decide::HealthOutcome::Written
                }
                decide::HealthStep::WriteConditions(c) => {
                    self.write(MachineStatusChange::conditions(c)).await?;
                    decide::HealthOutcome::Written
                }
                decide::HealthStep::CountFailedJoin => {
                    let class = self.cached_class();
                    self.ctx
                        .metrics
                        .machine_failed_join(&self.machine, class.as_deref());
                    decide::HealthOutcome::Counted
                }
                decide::HealthStep::Joined => {
                    self.joined(now).await?;
                    decide::HealthOutcome::JoinRecorded
                }
                decide::HealthStep::Requeue => return Ok(Err(self.ctx.config.short_retry)),
                decide::HealthStep::Continue(recheck) => return Ok(Ok(recheck)),
            };
        }
    }

    /// Whether this machine may be marked Failed: at most one replacement
    /// per MachineDeployment at a time, counting the marks granted to its
    /// siblings that the listing does not show yet
    /// ([`decide::FailedMarks::grant`]), so two machines that time out in
    /// one recheck are not both marked.
    async fn may_mark_failed(&self) -> Result<bool, Error> {
        let view = self.view();
        let Some(group) = decide::limiter_group(&view) else {
            return Ok(true);
        };
        let mut marks = self.ctx.failed_marks.lock().await;
        let siblings = self
            .api
            .list(&ListParams::default().labels(&format!("name={group}")))
            .await?;
        let defaults = self.ctx.config.default_settings();
        let views: Vec<MachineView> = siblings
            .items
            .iter()
            .map(|m| MachineView::of(m, &defaults))
            .collect();
        let listed = decide::limiter_siblings(&views);
        Ok(marks.grant(group, &self.name(), &listed, Utc::now()))
    }

    /// Withdraws this machine's Failed mark (its write failed).
    async fn release_failed_mark(&self) {
        if let Some(group) = decide::limiter_group(&self.view()) {
            self.ctx
                .failed_marks
                .lock()
                .await
                .release(group, &self.name());
        }
    }

    async fn joined(&mut self, now: chrono::DateTime<Utc>) -> Result<(), Error> {
        let view = self.view();
        let took = (now - view.created_or(now)).to_std().unwrap_or_default();
        self.machine = MetaPatch::new()
            .annotation(
                c::MACHINE_JOIN_DURATION_ANNOTATION,
                decide::format_go_duration(took),
            )
            .send(&self.api, &self.name())
            .await?;
        if let Some(target) = &self.ctx.target {
            match self.ctx.take_issued_token(&self.key) {
                Some(secret) if !secret.uid.is_empty() => {
                    crate::class::delete_issued_token(target, &secret).await?;
                }
                // Issued by another process (a restart, a new leader): look it up.
                _ => crate::class::delete_bootstrap_token(target, &self.machine).await?,
            }
        }
        let class = self.cached_class();
        self.ctx.metrics.machine_duration(
            crate::metrics::durations::Activity::Join,
            &self.machine,
            class.as_deref(),
            took,
        );
        Ok(())
    }

    /// The machine's class from the shared cache (the duration metrics'
    /// `instance_type`).
    pub(super) fn cached_class(&self) -> Option<std::sync::Arc<mcm_api::MachineClass>> {
        let ns = self.machine.namespace().unwrap_or_default();
        self.ctx.caches.class(&ns, &self.machine.spec.class.name)
    }
}
