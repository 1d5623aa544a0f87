//! The deletion flow's effects, one per step (decisions in
//! `mcm_core::machine::DeletionFlow`; whether DeleteMachine runs:
//! `mcm_core::machine::vm_deletion`). A step carries the provider, target
//! cluster and Node its effect needs, so every step is performed as asked.

#[allow(clippy::wildcard_imports)]
use super::*;
use mcm_core::machine::{
    DeletionFlow, DeletionOutcome, DeletionRecord, DeletionStep, Inputs, Retry, Write,
};
use mcm_driver::CloudOp;
use std::fmt;

/// The machine's usable provider inputs: the handle the deletion flow hands
/// back in the steps that call the provider.
pub(super) struct Provider {
    class: MachineClass,
    secret: Secret,
    driver: Arc<dyn Driver>,
}

impl Provider {
    /// A request about `machine` as it is now.
    fn request(&self, machine: &Machine) -> MachineRequest {
        MachineRequest {
            machine: machine.clone(),
            machine_class: self.class.clone(),
            secret: self.secret.clone(),
        }
    }
}

/// Names the class only: the Secret's data is never logged.
impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("class", &self.class.name_any())
            .field("provider", &self.class.provider)
            .finish_non_exhaustive()
    }
}

impl Reconciler<'_> {
    // ------------------------------------------------------------------
    // Deletion

    pub(super) async fn delete(&mut self) -> Result<Action, Error> {
        // A machine being deleted never creates, initializes or updates in
        // place: the turns it reserved for that go back to the queue
        // (docs/design/runtime.md, "Pacing cloud calls"; an update in
        // progress never holds up a deletion, docs/design/hot-update.md).
        self.ctx
            .pacer
            .give_back(
                &self.key,
                &[
                    CloudOp::Create,
                    CloudOp::Initialize,
                    CloudOp::Update,
                    CloudOp::Status,
                ],
            )
            .await;
        // What the last reconcile staged while it waited for its turn.
        self.resume_carried();
        let inputs = match self.inputs().await? {
            Ok((class, secret, driver)) => Inputs::Usable(Arc::new(Provider {
                class,
                secret,
                driver,
            })),
            Err(retry_after) => Inputs::Unusable { retry_after },
        };
        let record = VmRecord::of(&self.machine);
        debug!(
            decision = decide::vm_deletion(record, &inputs, None).as_str(),
            "whether DeleteMachine runs"
        );
        let target = self.cluster();
        // Records are staged or written as the flow says; what is staged
        // is written once when the reconcile stops, or carried to the next
        // one when it stops for the cloud's turn ([`super::staged`]).
        let result = self
            .deletion_flow(DeletionFlow::new(target, inputs, record))
            .await;
        let flushed = self.flush().await;
        result.and_then(|action| flushed.map(|()| action))
    }

    /// Runs the deletion flow, one effect per step, until it says to wait
    /// or the finalizer is gone.
    async fn deletion_flow(
        &mut self,
        mut flow: DeletionFlow<Arc<Provider>, Cluster>,
    ) -> Result<Action, Error> {
        let mut outcome = DeletionOutcome::Start;
        loop {
            let view = self.view();
            let step = flow.next(&view, outcome, Utc::now());
            debug!(?step, "deletion step");
            outcome = match step {
                DeletionStep::Record(r) => {
                    self.record_deletion(*r).await?;
                    DeletionOutcome::Recorded
                }
                DeletionStep::FindNode => {
                    let me = self.name();
                    DeletionOutcome::NodeFound(
                        self.ctx
                            .nodes
                            .state()
                            .into_iter()
                            .find(|n| n.labels().get(c::MACHINE_NAME_NODE_LABEL) == Some(&me))
                            .map(|n| n.name_any()),
                    )
                }
                DeletionStep::Probe(provider) => {
                    let req = provider.request(&self.machine);
                    DeletionOutcome::Probed(provider.driver.get_machine_status(&req).await)
                }
                DeletionStep::LabelNode(node) => {
                    self.machine = MetaPatch::new()
                        .label(c::NODE_LABEL, node)
                        .send(&self.api, &self.name())
                        .await?;
                    DeletionOutcome::NodeLabelled
                }
                DeletionStep::CheckDrain => DeletionOutcome::Drain(self.drain_progress()),
                DeletionStep::StartDrain {
                    plan,
                    node,
                    target,
                    provider,
                } => {
                    let uid = self.machine.uid().unwrap_or_default();
                    self.start_drain(plan, target.0, node, provider.driver.clone(), &uid);
                    DeletionOutcome::DrainStarted
                }
                DeletionStep::CheckNodeVolumes { node, target } => {
                    let nodes: Api<Node> = Api::all(target.0);
                    let found = drain::cached_or_fetched(&nodes, &self.ctx.nodes, &node).await?;
                    DeletionOutcome::NodeVolumes(decide::NodeVolumes::of(found.as_ref()))
                }
                DeletionStep::ListAttachments(target) => {
                    let vas: Api<VolumeAttachment> = Api::all(target.0);
                    let listed = vas.list(&ListParams::default()).await?.items;
                    DeletionOutcome::Attachments(
                        listed.iter().map(decide::AttachmentView::of).collect(),
                    )
                }
                DeletionStep::DeleteAttachments { names, target } => {
                    let vas: Api<VolumeAttachment> = Api::all(target.0);
                    for name in &names {
                        if let Err(e) = vas.delete(name, &DeleteParams::default()).await {
                            debug!(error = %e, "deleting VolumeAttachment");
                        }
                    }
                    DeletionOutcome::AttachmentsDeleted
                }
                DeletionStep::DeleteVm(provider) => {
                    let req = &provider.request(&self.machine);
                    let (driver, provider_name) = (&provider.driver, &provider.class.provider);
                    match self
                        .pace(&**driver, provider_name, req, CloudOp::Delete)
                        .await
                    {
                        Some(wait) => DeletionOutcome::NotYourTurn(wait),
                        None => {
                            let result = driver.delete_machine(req).await;
                            self.answered(&**driver, provider_name, req, CloudOp::Delete, &result)
                                .await;
                            match &result {
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
                                Err(e) => debug!(error = %e, "DeleteMachine failed"),
                            }
                            DeletionOutcome::VmDeleted(result)
                        }
                    }
                }
                DeletionStep::DeleteNode { node, target } => {
                    DeletionOutcome::NodeDeleted(self.delete_node(target, node).await)
                }
                DeletionStep::RemoveFinalizer => {
                    self.remove_machine_finalizer().await?;
                    DeletionOutcome::FinalizerRemoved
                }
                DeletionStep::Wait(retry) => {
                    if retry.keeps_staged(self.staged_changes_phase()) {
                        self.carry_staged();
                    }
                    return Ok(Action::requeue(self.retry_delay(retry)));
                }
                DeletionStep::Done => return Ok(Action::await_change()),
            };
        }
    }

    /// Stages or writes a record of the deletion flow and publishes its Event.
    async fn record_deletion(&mut self, r: DeletionRecord) -> Result<(), Error> {
        let mut change = MachineStatusChange::of(&r.transition);
        if let Some(state) = r.last_known_state {
            change = change.with_last_known_state(state);
        }
        match r.write {
            Write::Stage => self.stage(change),
            Write::Now => self.write(change).await?,
        }
        if let Some(e) = r.event {
            let type_ = if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.event(type_, e.reason, e.note).await;
        }
        Ok(())
    }

    /// The delay of a [`Retry`] the flow asked for.
    fn retry_delay(&self, retry: Retry) -> Duration {
        match retry {
            Retry::Short => self.ctx.config.short_retry,
            Retry::Long => self.ctx.config.long_retry,
            Retry::Backoff(class) => self.retry_after(class),
            Retry::After(d) | Retry::Turn(d) => d,
        }
    }

    /// The last step: the machine's finalizer goes, and with it the object.
    async fn remove_machine_finalizer(&mut self) -> Result<(), Error> {
        // The reconcile started from the cache and staged writes do not
        // refresh the copy; the removal is guarded by the finalizer list
        // only, and retried once on a fresh copy if that list changed.
        finalizer::remove_retrying_stale(&self.api, &self.machine, c::MCM_FINALIZER).await?;
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
        Ok(())
    }

    /// Deletes the machine's Node. The Node is read from the shared cache
    /// (a GET only when the cache does not have it); a Node that is already
    /// being deleted (its kubelet went with the VM) is gone once our
    /// finalizer is removed, so no DELETE follows.
    async fn delete_node(&self, target: Cluster, node: String) -> NodeDeletion {
        let nodes: Api<Node> = Api::all(target.0);
        let obj = match drain::cached_or_fetched(&nodes, &self.ctx.nodes, &node).await {
            Ok(Some(obj)) => obj,
            Ok(None) => return NodeDeletion::NotFound(node),
            Err(e) => return NodeDeletion::ReadFailed(node, e.to_string()),
        };
        // A Node deletion is a drain request: only within this half's tenure.
        if let Err(e) = self.ctx.tenure.check() {
            return NodeDeletion::Failed(node, e.to_string());
        }
        match finalizer::remove_retrying_stale(&nodes, &obj, c::NODE_FINALIZER).await {
            Err(e) => return NodeDeletion::FinalizerRemovalFailed(node, e.to_string()),
            Ok(Some(after))
                if after.metadata.deletion_timestamp.is_some() && after.finalizers().is_empty() =>
            {
                return NodeDeletion::Deleted(node);
            }
            Ok(None)
                if obj.metadata.deletion_timestamp.is_some()
                    && obj.finalizers().iter().all(|f| f == c::NODE_FINALIZER) =>
            {
                // Already deleted, and nothing but ours held it: gone.
                return NodeDeletion::Deleted(node);
            }
            Ok(_) => {}
        }
        match nodes.delete(&node, &DeleteParams::default()).await {
            Ok(_) => NodeDeletion::Deleted(node),
            Err(kube::Error::Api(e)) if e.code == 404 => NodeDeletion::NotFound(node),
            Err(e) => NodeDeletion::Failed(node, e.to_string()),
        }
    }
}

/// Deletes a VM that has no Machine (used by the orphan collector).
pub(crate) async fn delete_orphan(
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
