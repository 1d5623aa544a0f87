//! The deletion step machine's effects (decisions in `mcm_core::machine::deletion_step`).

#[allow(clippy::wildcard_imports)]
use super::*;
use mcm_driver::CloudOp;

impl Reconciler<'_> {
    // ------------------------------------------------------------------
    // Deletion

    pub(super) async fn delete(&mut self) -> Result<Action, Error> {
        // A machine being deleted never creates or initializes: the turns
        // it reserved for that go back to the queue (docs/design/runtime.md,
        // "Pacing cloud calls").
        self.ctx
            .pacer
            .give_back(
                &self.key,
                &[CloudOp::Create, CloudOp::Initialize, CloudOp::Status],
            )
            .await;
        let inputs = match self.inputs().await? {
            Ok(x) => Some(x),
            // A machine whose creation never reached the cloud is deleted
            // without its class, secret or driver (they may be gone or
            // broken); one that may have a VM waits for them.
            Err(Stop::After(_)) if VmRecord::of(&self.machine).no_vm_possible() => None,
            Err(Stop::After(d)) => return Ok(Action::requeue(d)),
        };
        // Both paths stage their status transitions; what is staged is
        // written once when the reconcile stops ([`super::staged`]).
        let result = match inputs {
            Some((class, secret, driver)) => self.delete_steps(class, secret, driver).await,
            None => self.delete_without_provider().await,
        };
        let flushed = self.flush().await;
        result.and_then(|action| flushed.map(|()| action))
    }

    /// The deletion of a machine that never had a VM and whose inputs are
    /// unusable: no provider call; drain and VM deletion are skipped.
    async fn delete_without_provider(&mut self) -> Result<Action, Error> {
        for _ in 0..8 {
            let view = self.view();
            let step = decide::deletion_step(&view);
            debug!(?step, "deletion step (no VM was ever created)");
            match step {
                DeletionStep::MissingFinalizer => return Ok(Action::await_change()),
                DeletionStep::SetTerminating => {
                    self.write(MachineStatusChange::of(&decide::set_terminating()))
                        .await?;
                }
                DeletionStep::GetVmStatus
                | DeletionStep::Drain
                | DeletionStep::DeleteVolumeAttachments
                | DeletionStep::DeleteVm => {
                    let t = decide::no_vm_ever_created(
                        "the machine's class, secret or provider is unusable, see the events",
                    );
                    self.event(
                        EventType::Normal,
                        "NoVmToDelete",
                        t.operation.description.clone(),
                    )
                    .await;
                    self.write(MachineStatusChange::of(&t)).await?;
                }
                DeletionStep::DeleteNode | DeletionStep::RemoveFinalizer => {
                    if let Some(a) = self.node_and_finalizer_steps(step, &view).await? {
                        return Ok(a);
                    }
                }
            }
        }
        Ok(Action::requeue(self.ctx.config.short_retry))
    }

    /// The last two steps, shared by both deletion paths. `Some` ends the reconcile.
    async fn node_and_finalizer_steps(
        &mut self,
        step: DeletionStep,
        view: &MachineView,
    ) -> Result<Option<Action>, Error> {
        if step == DeletionStep::DeleteNode {
            let outcome = self.delete_node(view).await?;
            let failed = matches!(outcome, NodeDeletion::Failed(..));
            let t = decide::after_delete_node(&view.name, &outcome);
            if failed {
                self.write(MachineStatusChange::of(&t)).await?;
            } else {
                self.stage(MachineStatusChange::of(&t));
            }
            if failed {
                return Ok(Some(Action::requeue(
                    self.ctx.failure_delay(&self.key, FailureKind::Normal),
                )));
            }
            return Ok(None);
        }
        // The reconcile started from the cache and staged writes do not
        // refresh the copy; the removal is guarded by the finalizer list
        // only, and retried once on a fresh copy if that list changed.
        crate::finalizer::remove_retrying_stale(&self.api, &self.machine, c::MCM_FINALIZER).await?;
        // The object is gone: what was staged need not be written, and a
        // reconcile of the cache's older copy must not act on it.
        self.discard_staged();
        self.ctx
            .released(&self.key, &self.machine.uid().unwrap_or_default());
        info!("machine deleted; finalizer removed");
        self.ctx.reset_backoff(&self.key);
        self.ctx.pacer.forget(&self.key).await;
        self.ctx
            .metrics
            .forget_machine(&self.machine.namespace().unwrap_or_default(), &self.name());
        Ok(Some(Action::await_change()))
    }

    async fn delete_steps(
        &mut self,
        class: MachineClass,
        secret: Secret,
        driver: Arc<dyn Driver>,
    ) -> Result<Action, Error> {
        let provider = class.provider.clone();
        let mut req = MachineRequest {
            machine: self.machine.clone(),
            machine_class: class,
            secret,
        };
        for _ in 0..12 {
            let view = self.view();
            let step = decide::deletion_step(&view);
            debug!(?step, "deletion step");
            match step {
                DeletionStep::MissingFinalizer => return Ok(Action::await_change()),
                DeletionStep::SetTerminating => {
                    self.stage(MachineStatusChange::of(&decide::set_terminating()));
                }
                DeletionStep::GetVmStatus => {
                    let t = self.get_vm_status_step(&view, &driver, &mut req).await?;
                    let failed = t.operation.state == mcm_api::MachineState::Failed;
                    if !failed {
                        self.stage(MachineStatusChange::of(&t));
                    } else {
                        self.write(MachineStatusChange::of(&t)).await?;
                        self.event(
                            EventType::Warning,
                            "DeletionBlocked",
                            t.operation.description.clone(),
                        )
                        .await;
                        return Ok(Action::requeue(
                            self.ctx.failure_delay(&self.key, FailureKind::Normal),
                        ));
                    }
                }
                DeletionStep::Drain => {
                    // Started as a task; a later reconcile consumes its outcome.
                    if let Some(action) = self.drain_step(&view, &driver).await? {
                        return Ok(action);
                    }
                }
                DeletionStep::DeleteVolumeAttachments => {
                    let node = view.node.clone().unwrap_or_default();
                    if let Some(target) = &self.ctx.target {
                        let vas: Api<VolumeAttachment> = Api::all(target.clone());
                        let live: Vec<VolumeAttachment> = vas
                            .list(&ListParams::default())
                            .await?
                            .items
                            .into_iter()
                            .filter(|v| {
                                v.spec.node_name == node && v.meta().deletion_timestamp.is_none()
                            })
                            .collect();
                        if !live.is_empty() {
                            for v in &live {
                                if let Err(e) =
                                    vas.delete(&v.name_any(), &DeleteParams::default()).await
                                {
                                    debug!(error = %e, "deleting VolumeAttachment");
                                }
                            }
                            return Ok(Action::requeue(self.ctx.config.short_retry));
                        }
                    }
                    self.stage(MachineStatusChange::of(&decide::volume_attachments_gone(
                        &node,
                    )));
                }
                DeletionStep::DeleteVm => {
                    req.machine = self.machine.clone();
                    if let Some(wait) = self.pace(&*driver, &provider, &req, CloudOp::Delete).await
                    {
                        return Ok(Action::requeue(wait));
                    }
                    let result = driver.delete_machine(&req).await;
                    self.answered(&*driver, &provider, &req, CloudOp::Delete, &result)
                        .await;
                    let (t, quick) = decide::after_delete_vm(&result, VmRecord::of(&self.machine));
                    let state = result
                        .as_ref()
                        .map(|r| r.last_known_state.clone())
                        .unwrap_or_default();
                    self.stage(MachineStatusChange::of(&t).with_last_known_state(state));
                    match result {
                        Ok(_) => {
                            info!(provider_id = %self.machine.spec.provider_id, "VM deleted");
                            // From the deletion timestamp, as the reference.
                            let took = crate::metrics::durations::since(
                                self.machine.metadata.deletion_timestamp.as_ref(),
                            );
                            self.ctx.metrics.machine_duration(
                                crate::metrics::durations::Activity::Delete,
                                &self.machine,
                                Some(&req.machine_class),
                                took,
                            );
                        }
                        Err(e) if e.code == Code::NotFound => {}
                        Err(_) if t.operation.state != mcm_api::MachineState::Failed => {
                            info!("no VM was ever created for this machine; nothing to delete");
                        }
                        Err(e) => {
                            self.provider_failure("DeleteMachine", &e).await;
                            let d = if quick {
                                self.backoff_for(&e)
                            } else {
                                self.ctx.config.long_retry
                            };
                            return Ok(Action::requeue(d));
                        }
                    }
                }
                DeletionStep::DeleteNode | DeletionStep::RemoveFinalizer => {
                    if let Some(a) = self.node_and_finalizer_steps(step, &view).await? {
                        return Ok(a);
                    }
                }
            }
        }
        Ok(Action::requeue(self.ctx.config.short_retry))
    }

    async fn get_vm_status_step(
        &mut self,
        view: &MachineView,
        driver: &Arc<dyn Driver>,
        req: &mut MachineRequest,
    ) -> Result<Transition, Error> {
        let record = VmRecord::of(&self.machine);
        if !self.target() || view.node.is_some() {
            return Ok(decide::after_get_vm_status(
                self.target(),
                view.node.is_some(),
                None,
                record,
            ));
        }
        // A Node that names this machine?
        let me = self.name();
        let from_cache = self
            .ctx
            .nodes
            .state()
            .into_iter()
            .find(|n| n.labels().get(c::MACHINE_NAME_NODE_LABEL) == Some(&me))
            .map(|n| n.name_any());
        let (node, status) = match from_cache {
            Some(n) => (Some(n), None),
            None => {
                req.machine = self.machine.clone();
                let r = driver.get_machine_status(req).await;
                let node = match &r {
                    Ok(resp) if !resp.node_name.is_empty() => Some(resp.node_name.clone()),
                    Err(e) => e
                        .machine
                        .as_ref()
                        .map(|m| m.node_name.clone())
                        .filter(|n| !n.is_empty()),
                    _ => None,
                };
                (node, Some(r))
            }
        };
        if let Some(node) = &node {
            let patch = json!({"metadata": {"labels": {c::NODE_LABEL: node}}});
            self.machine = self
                .api
                .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        let record = VmRecord::of(&self.machine);
        Ok(decide::after_get_vm_status(
            true,
            false,
            status.as_ref(),
            record,
        ))
    }

    /// Deletes the machine's Node. The Node is read from the shared cache
    /// (a GET only when the cache does not have it); a Node that is already
    /// being deleted (its kubelet went with the VM) is gone once our
    /// finalizer is removed, so no DELETE follows.
    async fn delete_node(&self, view: &MachineView) -> Result<NodeDeletion, Error> {
        let (Some(target), Some(node)) = (&self.ctx.target, &view.node) else {
            return Ok(NodeDeletion::NoLabel);
        };
        let nodes: Api<Node> = Api::all(target.clone());
        let Some(obj) = drain::cached_or_fetched(&nodes, &self.ctx.nodes, node).await? else {
            return Ok(NodeDeletion::NotFound(node.clone()));
        };
        // A Node deletion is a drain request: only within this half's tenure.
        if let Err(e) = self.ctx.tenure.check() {
            return Ok(NodeDeletion::Failed(node.clone(), e.to_string()));
        }
        match crate::finalizer::remove_retrying_stale(&nodes, &obj, c::NODE_FINALIZER).await {
            Err(e) => return Ok(NodeDeletion::Failed(node.clone(), e.to_string())),
            Ok(Some(after))
                if after.metadata.deletion_timestamp.is_some() && after.finalizers().is_empty() =>
            {
                return Ok(NodeDeletion::Deleted(node.clone()));
            }
            Ok(None)
                if obj.metadata.deletion_timestamp.is_some()
                    && obj.finalizers().iter().all(|f| f == c::NODE_FINALIZER) =>
            {
                // Already deleted, and nothing but ours held it: gone.
                return Ok(NodeDeletion::Deleted(node.clone()));
            }
            Ok(_) => {}
        }
        match nodes.delete(node, &DeleteParams::default()).await {
            Ok(_) => Ok(NodeDeletion::Deleted(node.clone())),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(NodeDeletion::NotFound(node.clone())),
            Err(e) => Ok(NodeDeletion::Failed(node.clone(), e.to_string())),
        }
    }
}

/// Deletes a VM that has no Machine (used by the orphan collector).
pub async fn delete_orphan(
    driver: &dyn Driver,
    class: MachineClass,
    secret: Secret,
    provider_id: &str,
    name: &str,
) -> Result<(), Status> {
    let mut machine = Machine::new(name, mcm_api::MachineSpec::default());
    machine.metadata.namespace = class.metadata.namespace.clone();
    machine.spec.provider_id = provider_id.into();
    let req = MachineRequest {
        machine,
        machine_class: class,
        secret,
    };
    driver.delete_machine(&req).await.map(|_| ())
}
