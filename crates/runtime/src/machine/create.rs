//! The creation flow's effects. Every decision is made by
//! [`mcm_core::machine::CreationFlow`]; this file performs the one effect each
//! step names and feeds the result back (see `docs/design/machine.md`, "Creation").

use super::{Cluster, Reconciler, Step};
use crate::metadata::MetaPatch;
use crate::pacing::Admission;
use crate::status::machine::MachineStatusChange;
use crate::Error;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::ByteString;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::MachineClass;
use mcm_core::machine::{
    self as decide, CreationFlow, CreationOutcome, CreationRetry, CreationStep, MachineView,
};
use mcm_driver::{CloudOp, Driver, MachineIdentity, MachineRequest};
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, info, warn};

/// A bound on the steps of one reconcile's flow (it has at most eight).
const MAX_STEPS: usize = 16;

impl Reconciler<'_> {
    /// Waits for the machine's turn at the cloud budget: `Some(wait)` when
    /// the turn is later than [`crate::pacing::HOLD`] (requeue until then).
    pub(super) async fn pace(
        &self,
        driver: &dyn Driver,
        provider: &str,
        req: &MachineRequest,
        op: CloudOp,
    ) -> Option<std::time::Duration> {
        let exists = self.ctx.machine_key_exists();
        match self
            .ctx
            .pacer
            .admit(&self.key, provider, driver, req, op, exists)
            .await
        {
            Admission::Go => None,
            Admission::Wait(wait) => {
                self.paced.store(true, std::sync::atomic::Ordering::Relaxed);
                debug!(?op, ?wait, "waiting for the cloud budget");
                Some(wait)
            }
        }
    }

    /// Tells the pacer how an admitted call was answered.
    pub(super) async fn answered<T>(
        &self,
        driver: &dyn Driver,
        provider: &str,
        req: &MachineRequest,
        op: CloudOp,
        result: &Result<T, mcm_driver::Status>,
    ) {
        let throttled = matches!(result, Err(e) if e.code == mcm_driver::Code::ResourceExhausted);
        self.ctx
            .pacer
            .answered(provider, driver, req, op, throttled)
            .await;
    }

    /// Runs the creation flow until it is done or a step fails.
    pub(super) async fn create(
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
        let mut flow = CreationFlow::new(self.cluster())
            .with_resource_exhausted_retry(self.ctx.config.resource_exhausted_retry);
        let mut outcome = CreationOutcome::Start;
        for _ in 0..MAX_STEPS {
            let view = self.view();
            let step = flow.next(&view, outcome, chrono::Utc::now());
            debug!(?step, "creation step");
            req.machine = self.machine.clone();
            outcome = match step {
                CreationStep::Probe { take_create_turn } => {
                    if take_create_turn {
                        if let Some(wait) =
                            self.pace(&*driver, &provider, &req, CloudOp::Create).await
                        {
                            return Ok(Action::requeue(wait));
                        }
                    }
                    if let Some(wait) = self.pace(&*driver, &provider, &req, CloudOp::Status).await
                    {
                        return Ok(Action::requeue(wait));
                    }
                    let result = driver.get_machine_status(&req).await;
                    self.answered(&*driver, &provider, &req, CloudOp::Status, &result)
                        .await;
                    CreationOutcome::Probed(result)
                }
                CreationStep::Create { turn_held } => {
                    if !turn_held {
                        if let Some(wait) =
                            self.pace(&*driver, &provider, &req, CloudOp::Create).await
                        {
                            return Ok(Action::requeue(wait));
                        }
                    }
                    let create_req = match self.with_userdata(&req, &view).await? {
                        Ok(r) => r,
                        Err(d) => return Ok(Action::requeue(d)),
                    };
                    self.record_create_attempt().await?;
                    info!(init = flow.init_reason().map(|r| r.as_str()), "creating VM");
                    let started = Instant::now();
                    let result = driver.create_machine(&create_req).await;
                    self.answered(&*driver, &provider, &req, CloudOp::Create, &result)
                        .await;
                    if let Ok(resp) = &result {
                        info!(provider_id = %resp.provider_id, node = %resp.node_name,
                            elapsed_ms = started.elapsed().as_millis() as u64, "VM created");
                        // From the Machine's creation, as the reference.
                        self.ctx.metrics.machine_duration(
                            crate::metrics::durations::Activity::Create,
                            &self.machine,
                            Some(&req.machine_class),
                            crate::metrics::durations::since(
                                self.machine.metadata.creation_timestamp.as_ref(),
                            ),
                        );
                    }
                    CreationOutcome::Created(result)
                }
                CreationStep::CheckStaleNode { identity, target } => CreationOutcome::NodeOwner {
                    owner: self.node_owner(target, &identity.node_name).await?,
                    identity,
                },
                CreationStep::DeleteStaleVm { provider_id } => {
                    warn!(%provider_id, "a node with the new VM's name belongs to another machine; deleting the VM");
                    let mut doomed = req.clone();
                    doomed.machine.spec.provider_id = provider_id;
                    CreationOutcome::StaleVmDeleted(
                        driver.delete_machine(&doomed).await.map(|_| ()),
                    )
                }
                CreationStep::PersistIdentity(id) => {
                    let class = req.machine_class.clone();
                    self.persist_identity(&id, &class).await?;
                    CreationOutcome::Persisted(id)
                }
                CreationStep::Initialize { reason, identity } => {
                    if let Some(wait) = self
                        .pace(&*driver, &provider, &req, CloudOp::Initialize)
                        .await
                    {
                        return Ok(Action::requeue(wait));
                    }
                    info!(reason = reason.as_str(), "initializing VM");
                    let started = Instant::now();
                    let result = driver.initialize_machine(&req).await;
                    self.answered(&*driver, &provider, &req, CloudOp::Initialize, &result)
                        .await;
                    if result.is_ok() {
                        self.ctx.metrics.machine_duration(
                            crate::metrics::durations::Activity::Initialize,
                            &self.machine,
                            Some(&req.machine_class),
                            started.elapsed(),
                        );
                    }
                    CreationOutcome::Initialized { identity, result }
                }
                CreationStep::MarkCreated {
                    transition,
                    identity,
                    addresses,
                } => {
                    self.write(MachineStatusChange::of(&transition).with_addresses(addresses))
                        .await?;
                    debug!(provider_id = %identity.provider_id, node = %identity.node_name,
                        phase = ?transition.phase, "created phase written");
                    CreationOutcome::Marked
                }
                CreationStep::Fail(failure) => {
                    warn!(error = %failure.error, call = failure.call, "creation step failed");
                    if let Some(t) = &failure.transition {
                        let mut change = MachineStatusChange::of(t);
                        if !failure.keep_last_known_state {
                            change = change.with_last_known_state(String::new());
                        }
                        self.write(change).await?;
                        self.provider_failure(failure.call, &failure.error).await;
                    }
                    // Decided by the flow (design: machine.md, "Retries").
                    return Ok(Action::requeue(match failure.retry {
                        CreationRetry::Pause => crate::pacing::PAUSE_BASE,
                        CreationRetry::HoldCreation(hold) => {
                            self.ctx.hold_creation(&self.key, hold);
                            info!(?hold, "creation answered ResourceExhausted; retrying after --resource-exhausted-retry");
                            hold
                        }
                        CreationRetry::Backoff(kind) => self.ctx.failure_delay(&self.key, kind),
                    }));
                }
                CreationStep::Done => {
                    self.ctx.reset_backoff(&self.key);
                    return Ok(Action::requeue(self.ctx.config.short_retry));
                }
            };
        }
        Ok(Action::requeue(self.ctx.config.short_retry))
    }

    /// The request with the userdata's placeholders substituted (and, with a
    /// target cluster, a bootstrap token made for the machine). Only
    /// CreateMachine needs it.
    async fn with_userdata(
        &mut self,
        req: &MachineRequest,
        view: &MachineView,
    ) -> Step<MachineRequest> {
        let mut data = req.secret.data.clone().unwrap_or_default();
        let Some(ud) = data.get("userData") else {
            let e = decide::UserDataError::Missing(view.name.clone());
            let stop = self.input_problem(e.into()).await?;
            return Ok(Err(stop));
        };
        // Bytes end to end: userData need not be UTF-8 (gzip'd cloud-init).
        let ud = ud.0.clone();
        let token = match &self.ctx.target {
            Some(target) => {
                let issued = crate::class::bootstrap_token(
                    target,
                    &self.machine,
                    view.settings.creation_timeout,
                    &self.ctx.config.bootstrap_token_auth_extra_groups,
                )
                .await?;
                // Remembered for the delete after the join (no read then).
                self.ctx.issued_token(&self.key, issued.secret);
                Some(issued.token)
            }
            None => None,
        };
        let substituted = decide::substitute_userdata(&ud, &view.name, token.as_deref());
        data.insert("userData".into(), ByteString(substituted));
        let mut out = req.clone();
        out.secret.data = Some(data);
        Ok(Ok(out))
    }

    /// Records, before the first CreateMachine call, that a VM may exist from
    /// now on (the deletion relies on it: `VmRecord`). A failed write means no
    /// create.
    async fn record_create_attempt(&mut self) -> Result<(), Error> {
        if !decide::must_record_create_attempt(&self.machine) {
            return Ok(());
        }
        self.machine = MetaPatch::new()
            .annotation(
                decide::CLOUD_CREATE_ANNOTATION,
                decide::CLOUD_CREATE_ATTEMPTED,
            )
            .send(&self.api, &self.name())
            .await?;
        Ok(())
    }

    /// The owner label of the Node of that name (`None`: no such Node, or
    /// no label); whether it is another machine's is the flow's question.
    async fn node_owner(&self, target: Cluster, node_name: &str) -> Result<Option<String>, Error> {
        let nodes: Api<Node> = Api::all(target.0);
        Ok(nodes
            .get_opt(node_name)
            .await?
            .and_then(|node| node.labels().get(c::MACHINE_NAME_NODE_LABEL).cloned()))
    }

    /// Writes what [`decide::identity_write`] decides: providerID, node
    /// label and priority annotation, and the providerSpec the VM was
    /// created with (the last-applied record of hot update, design:
    /// hot-update.md).
    async fn persist_identity(
        &mut self,
        id: &MachineIdentity,
        class: &MachineClass,
    ) -> Result<(), Error> {
        let view = self.view();
        let Some(write) = decide::identity_write(
            &view,
            id,
            self.target(),
            &self.machine.spec.class.name,
            &class.provider_spec,
        ) else {
            return Ok(());
        };
        let mut patch = MetaPatch::new();
        if let Some(node) = write.node_label {
            patch = patch.label(c::NODE_LABEL, node);
        }
        if let Some(priority) = write.priority {
            patch = patch.annotation(c::PRIORITY_ANNOTATION, priority);
        }
        if let Some(provider_id) = write.provider_id {
            patch = patch.provider_id(provider_id);
        }
        if let Some(a) = &write.applied {
            patch = patch.annotations(a.annotations());
        }
        self.machine = patch.send(&self.api, &self.name()).await?;
        info!(provider_id = %id.provider_id, node = %id.node_name, "persisted providerID and node label");
        Ok(())
    }
}
