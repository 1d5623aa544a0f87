//! The health check of a created machine and the sync of its Node.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Reconciler<'_> {
    // ------------------------------------------------------------------
    // Health

    /// `startup_taint`: `Some(description)` while the Node's startup taint
    /// holds the machine out of Running (design: startup-taint.md).
    pub(super) async fn health(
        &mut self,
        view: &MachineView,
        startup_taint: Option<String>,
    ) -> Step<Option<Duration>> {
        let node_name = view.node.clone().unwrap_or_default();
        let node = self.ctx.nodes.get(&ObjectRef::new(&node_name));
        if let Some(node) = &node {
            if node.meta().deletion_timestamp.is_some() {
                info!(node = %node_name, "node is being deleted; deleting its machine");
                self.api
                    .delete(&self.name(), &DeleteParams::default())
                    .await?;
                return Ok(Err(self.ctx.config.short_retry));
            }
        }
        let node_view = node.as_ref().map(|n| decide::NodeView {
            conditions: n
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default(),
            critical_components_not_ready: n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| {
                    ts.iter().any(|t| {
                        t.key == c::CRITICAL_COMPONENTS_NOT_READY_TAINT && t.effect == "NoSchedule"
                    })
                }),
            startup_taint: startup_taint.clone(),
        });
        let now = Utc::now();
        let d = decide::health(view, node_view.as_ref(), now);
        if d.held_for_initialization {
            let msg = format!(
                "Node {node_name} is Ready, but InitializeMachine has not succeeded; the machine stays {} until it does",
                view.phase
            );
            let already = view.last_operation.as_ref().is_some_and(|(desc, _, _)| {
                desc.ends_with(mcm_api::constants::INSTANCE_INITIALIZATION)
            });
            if already {
                self.event(EventType::Warning, "InitializationPending", msg)
                    .await;
            }
        }
        let conditions = d.conditions.clone();
        if let Some(t) = &d.transition {
            if d.rate_limited && !self.may_mark_failed().await? {
                info!("not marking Failed: another machine of the deployment is being replaced");
                return Ok(Err(self.ctx.config.short_retry));
            }
            let written = self
                .write(MachineStatusChange::of(t).with_conditions(conditions))
                .await;
            if written.is_err() && d.rate_limited {
                self.release_failed_mark().await;
            }
            written?;
            if view.phase == Phase::Pending && t.phase == Some(Phase::Failed) {
                let labels = self.duration_labels();
                self.ctx.metrics.failed_join.get_or_create(&labels).inc();
            }
            if d.joined {
                self.joined(now).await?;
            }
            return Ok(Err(self.ctx.config.short_retry));
        }
        if let Some(c) = conditions {
            self.write(MachineStatusChange::conditions(c)).await?;
        }
        Ok(Ok(d.recheck_after))
    }

    /// Whether this machine may be marked Failed: at most one replacement
    /// per MachineDeployment at a time, counting the marks granted to its
    /// siblings that the listing does not show yet
    /// ([`decide::FailedMarks::grant`]), so two machines that time out in
    /// one recheck are not both marked.
    async fn may_mark_failed(&self) -> Result<bool, Error> {
        let Some(group) = self.machine.labels().get("name").cloned() else {
            return Ok(true);
        };
        let mut marks = self.ctx.failed_marks.lock().await;
        let siblings = self
            .api
            .list(&ListParams::default().labels(&format!("name={group}")))
            .await?;
        let listed: Vec<(String, Phase)> = siblings
            .items
            .iter()
            // A preserved machine is not a replacement in progress: a
            // preserved Failed machine must not hold up the others for days
            // (design: machine.md, "Preservation").
            .filter(|m| {
                m.status
                    .as_ref()
                    .is_none_or(|s| s.current_status.preserve_expiry_time.is_none())
            })
            .map(|m| {
                (
                    m.name_any(),
                    m.status.clone().unwrap_or_default().current_status.phase,
                )
            })
            .collect();
        Ok(marks.grant(&group, &self.name(), &listed, Utc::now()))
    }

    /// Withdraws this machine's Failed mark (its write failed).
    async fn release_failed_mark(&self) {
        if let Some(group) = self.machine.labels().get("name") {
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
        let patch = json!({"metadata": {"annotations": {c::MACHINE_JOIN_DURATION_ANNOTATION: decide::format_go_duration(took)}}});
        self.machine = self
            .api
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if let Some(target) = &self.ctx.target {
            crate::class::delete_bootstrap_token(target, &self.machine).await?;
        }
        let labels = self.duration_labels();
        self.ctx
            .metrics
            .join_duration
            .get_or_create(&labels)
            .set(took.as_secs() as f64);
        Ok(())
    }

    pub(super) fn duration_labels(&self) -> crate::metrics::DurationLabels {
        crate::metrics::DurationLabels {
            namespace: self.machine.namespace().unwrap_or_default(),
            machine_deployment: self
                .machine
                .labels()
                .get("name")
                .cloned()
                .unwrap_or_default(),
            instance_type: String::new(),
            zone: self
                .machine
                .spec
                .node_template
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
                .unwrap_or_default(),
        }
    }
}
