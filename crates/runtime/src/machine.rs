//! The Machine controller: creation with post-creation initialization,
//! health, and the deletion step machine, on kube-rs.
//!
//! Each reconcile reads the Machine (and from caches its Node), asks
//! [`mcm_core::machine`] what to do, calls the provider driver, and persists the
//! result. Steps that succeed run on in the same reconcile; every step's
//! outcome is persisted before the next, so a crash resumes where it stopped.
//! Failures are retried with per-machine exponential backoff and jitter.

use crate::{drain, Context, Error};
use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeAddress, Secret};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachinePhase as Phase};
use mcm_core::backoff::FailureKind;
use mcm_core::machine::{
    self as decide, CreationPlan, DeletionStep, InitOutcome, MachineView, NodeDeletion, Transition,
};
use mcm_driver::{Code, Driver, MachineIdentity, MachineRequest, Status};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, instrument, warn};

/// Runs the Machine controller until `shutdown` completes.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let ns = ctx.config.namespace.clone();
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
    let classes: Api<MachineClass> = Api::namespaced(ctx.client.clone(), &ns);
    let controller = Controller::new(machines, watcher::Config::default());
    let store = controller.store();
    ctx.set_machine_store(store.clone());
    let class_store = store.clone();
    let mut controller = controller
        .watches(
            classes,
            watcher::Config::default(),
            move |class: MachineClass| {
                let name = class.name_any();
                class_store
                    .state()
                    .into_iter()
                    .filter(|m| m.spec.class.name == name)
                    .map(|m| ObjectRef::from_obj(&*m))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(
            kube::runtime::controller::Config::default().concurrency(ctx.config.concurrent_syncs),
        );
    if let (Some(target), Some(writer)) = (ctx.target.clone(), ctx.take_node_writer()) {
        let nodes: Api<Node> = Api::all(target);
        let ns_for_nodes = ns.clone();
        let stream = reflector(writer, watcher(nodes, watcher::Config::default()))
            .default_backoff()
            .applied_objects();
        controller = controller.watches_stream(stream, move |node: Node| {
            node.labels()
                .get(c::MACHINE_NAME_NODE_LABEL)
                .map(|m| ObjectRef::new(m).within(&ns_for_nodes))
        });
    }
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                debug!(error = %e, "machine reconcile error");
            }
        })
        .await;
}

fn error_policy(m: Arc<Machine>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&m);
    warn!(machine = %m.name_any(), error = %err, "reconcile failed");
    Action::requeue(ctx.failure_delay(&key, FailureKind::Normal))
}

fn key_of(m: &Machine) -> String {
    format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any())
}

/// The reconcile entry point.
#[instrument(skip_all, fields(machine = %m.name_any(), namespace = %m.namespace().unwrap_or_default()))]
pub async fn reconcile(m: Arc<Machine>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut r = Reconciler::new(&m, &ctx);
    let action = if m.meta().deletion_timestamp.is_some() {
        r.delete().await?
    } else {
        r.reconcile().await?
    };
    ctx.metrics.items.set(ctx.machine_count());
    debug!(?action, "reconciled");
    Ok(action)
}

/// The outcome of a step that could not go on.
enum Stop {
    /// Requeue after this long.
    After(Duration),
}

struct Reconciler<'a> {
    ctx: &'a Context,
    machine: Machine,
    api: Api<Machine>,
    key: String,
}

type Step<T> = Result<Result<T, Stop>, Error>;

impl<'a> Reconciler<'a> {
    fn new(m: &Machine, ctx: &'a Context) -> Self {
        let ns = m
            .namespace()
            .unwrap_or_else(|| ctx.config.namespace.clone());
        Reconciler {
            ctx,
            machine: m.clone(),
            api: Api::namespaced(ctx.client.clone(), &ns),
            key: key_of(m),
        }
    }

    fn name(&self) -> String {
        self.machine.name_any()
    }

    fn view(&self) -> MachineView {
        MachineView::of(&self.machine, &self.ctx.config.default_settings())
    }

    fn target(&self) -> bool {
        self.ctx.target.is_some()
    }

    // ------------------------------------------------------------------
    // Events and status

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self
            .ctx
            .recorder
            .publish(&ev, &self.machine.object_ref(&()))
            .await
        {
            debug!(error = %e, "could not publish event");
        }
    }

    /// Writes a transition to the status subresource and emits an Event on a phase change.
    async fn write(&mut self, t: &Transition, extra: serde_json::Value) -> Result<(), Error> {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let old_phase = self.view().phase;
        let mut status = json!({
            "lastOperation": {
                "description": t.operation.description,
                "errorCode": t.operation.error_code.clone().unwrap_or_default(),
                "lastUpdateTime": now,
                "state": t.operation.state.as_str(),
                "type": t.operation.kind.as_str(),
            }
        });
        if let Some(phase) = &t.phase {
            let mut cs = json!({"phase": phase.as_str(), "lastUpdateTime": now});
            if let Some(active) = t.timeout_active {
                cs["timeoutActive"] = json!(active);
            }
            if *phase == Phase::Terminating {
                cs["preserveExpiryTime"] = serde_json::Value::Null;
            }
            status["currentStatus"] = cs;
        }
        if let (Some(obj), serde_json::Value::Object(more)) = (status.as_object_mut(), extra) {
            obj.extend(more);
        }
        let patch = json!({"status": status});
        self.machine = self
            .api
            .patch_status(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if let Some(phase) = &t.phase {
            self.ctx
                .metrics
                .phase
                .get_or_create(&crate::metrics::MachineLabels {
                    name: self.name(),
                    namespace: self.machine.namespace().unwrap_or_default(),
                })
                .set(crate::metrics::Metrics::phase_value(phase));
            if *phase != old_phase {
                let warn = matches!(
                    phase,
                    Phase::Failed | Phase::CrashLoopBackOff | Phase::Unknown
                );
                info!(from = %old_phase, to = %phase, description = %t.operation.description, "phase changed");
                self.event(
                    if warn {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    phase.as_str(),
                    format!(
                        "{} -> {}: {}",
                        display_phase(&old_phase),
                        phase,
                        t.operation.description
                    ),
                )
                .await;
            }
        }
        Ok(())
    }

    /// Records a problem with the machine's inputs (class, secret, driver) in
    /// status and as a Warning Event, without changing the phase.
    async fn input_problem(&mut self, reason: &str, message: String) -> Result<Stop, Error> {
        let view = self.view();
        let already = view
            .last_operation
            .as_ref()
            .is_some_and(|(d, _, _)| *d == message);
        if !already {
            warn!(reason, %message, "machine cannot be reconciled");
            let kind = if view.deleting_since.is_some() {
                mcm_api::MachineOperationType::Delete
            } else {
                mcm_api::MachineOperationType::Create
            };
            let t = Transition {
                phase: None,
                operation: decide::Operation {
                    description: message.clone(),
                    error_code: Some(Code::InvalidArgument.name()),
                    state: mcm_api::MachineState::Failed,
                    kind,
                },
                timeout_active: None,
            };
            self.write(&t, json!({})).await?;
            self.event(EventType::Warning, reason, message).await;
        }
        Ok(Stop::After(
            self.ctx.failure_delay(&self.key, FailureKind::Normal),
        ))
    }

    async fn provider_failure(&self, op: &str, err: &Status) {
        let provider = self.provider_name().await;
        self.ctx
            .metrics
            .driver_failed
            .get_or_create(&crate::metrics::DriverErrorLabels {
                provider: crate::metrics::provider_label(&provider),
                operation: crate::metrics::operation_label(op),
                error_code: crate::metrics::error_code_label(err.code),
            })
            .inc();
        self.event(EventType::Warning, &format!("{op}Failed"), err.to_string())
            .await;
    }

    async fn provider_name(&self) -> String {
        let classes: Api<MachineClass> = Api::namespaced(
            self.ctx.client.clone(),
            &self.machine.namespace().unwrap_or_default(),
        );
        classes
            .get_opt(&self.machine.spec.class.name)
            .await
            .ok()
            .flatten()
            .map(|c| c.provider)
            .unwrap_or_default()
    }

    fn backoff_for(&self, err: &Status) -> Duration {
        let kind = match err.code {
            Code::ResourceExhausted => FailureKind::Throttled,
            _ => FailureKind::Normal,
        };
        self.ctx.failure_delay(&self.key, kind)
    }

    // ------------------------------------------------------------------
    // Inputs: finalizers, class, secret, driver

    async fn ensure_finalizer(&mut self) -> Result<(), Error> {
        if let Some(m) = crate::finalizer::add(&self.api, &self.machine, c::MCM_FINALIZER).await? {
            self.machine = m;
        }
        Ok(())
    }

    /// The class, the merged secret and the driver, or the reason they are unusable.
    async fn inputs(&mut self) -> Step<(MachineClass, Secret, Arc<dyn Driver>)> {
        let ns = self.machine.namespace().unwrap_or_default();
        let class_spec = &self.machine.spec.class;
        if class_spec.name.is_empty()
            || (!class_spec.kind.is_empty() && class_spec.kind != "MachineClass")
        {
            let msg = format!(
                "Invalid machine: spec.class must name a MachineClass (kind {:?}, name {:?})",
                class_spec.kind, class_spec.name
            );
            let stop = self.input_problem("InvalidMachine", msg).await?;
            return Ok(Err(stop));
        }
        let classes: Api<MachineClass> = Api::namespaced(self.ctx.client.clone(), &ns);
        let Some(class) = classes.get_opt(&class_spec.name).await? else {
            let msg = format!("MachineClass {ns}/{} not found", class_spec.name);
            let stop = self.input_problem("MachineClassNotFound", msg).await?;
            return Ok(Err(stop));
        };
        if let Err(errs) = mcm_api::validation::validate_machine_class(&class) {
            let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
            let msg = format!(
                "Invalid MachineClass {}: {}",
                class_spec.name,
                text.join("; ")
            );
            let stop = self.input_problem("InvalidMachineClass", msg).await?;
            return Ok(Err(stop));
        }
        if self.machine.meta().deletion_timestamp.is_none() {
            crate::class::ensure_class_finalizer(&self.ctx.client, &class).await?;
        }
        let secret = match crate::class::merged_secret(&self.ctx.client, &class).await? {
            Ok(s) => s,
            Err(missing) => {
                let msg = format!(
                    "Secret {missing} referenced by MachineClass {} not found",
                    class_spec.name
                );
                let stop = self.input_problem("SecretNotFound", msg).await?;
                return Ok(Err(stop));
            }
        };
        let Some(driver) = self.ctx.drivers.get(Some(&class.provider)) else {
            let msg = format!(
                "No driver for provider {:?} of MachineClass {} (compiled in: {})",
                class.provider,
                class_spec.name,
                self.ctx.drivers.providers().join(", ")
            );
            let stop = self.input_problem("UnknownProvider", msg).await?;
            return Ok(Err(stop));
        };
        Ok(Ok((class, secret, driver)))
    }

    // ------------------------------------------------------------------
    // Main path

    async fn reconcile(&mut self) -> Result<Action, Error> {
        self.ensure_finalizer().await?;
        if self.ctx.is_frozen() {
            info!("machine controller is frozen (API server unreachable); not reconciling");
            return Ok(Action::requeue(self.ctx.config.long_retry));
        }
        let (class, secret, driver) = match self.inputs().await? {
            Ok(x) => x,
            Err(Stop::After(d)) => return Ok(Action::requeue(d)),
        };
        let view = self.view();
        let mut recheck = None;
        if self.target() && view.node.is_some() && !view.phase.is_empty() {
            // Never fails, so it never holds up the health check.
            crate::node_sync::sync_and_report(self.ctx, &self.machine, &class).await;
            match self.health(&view).await? {
                Ok(r) => recheck = r,
                Err(Stop::After(d)) => return Ok(Action::requeue(d)),
            }
        }
        let view = self.view();
        if view.needs_creation_flow() {
            return self.create(view, class, secret, driver).await;
        }
        Ok(Action::requeue(
            recheck.unwrap_or(self.ctx.config.long_retry),
        ))
    }

    // ------------------------------------------------------------------
    // Creation

    async fn userdata_secret(&mut self, secret: &Secret, view: &MachineView) -> Step<Secret> {
        let data = secret.data.clone().unwrap_or_default();
        let Some(ud) = data.get("userData") else {
            let e = decide::UserDataError::Missing(view.name.clone());
            let stop = self.input_problem("UserDataMissing", e.to_string()).await?;
            return Ok(Err(stop));
        };
        let ud = String::from_utf8_lossy(&ud.0).to_string();
        let token = if let Some(target) = &self.ctx.target {
            Some(
                crate::class::bootstrap_token(
                    target,
                    &self.machine,
                    view.settings.creation_timeout,
                    &self.ctx.config.bootstrap_token_auth_extra_groups,
                )
                .await?,
            )
        } else {
            None
        };
        let substituted = decide::substitute_userdata(&ud, &view.name, token.as_deref());
        let mut out = secret.clone();
        let mut data = data;
        data.insert("userData".into(), ByteString(substituted.into_bytes()));
        out.data = Some(data);
        Ok(Ok(out))
    }

    async fn timed<T>(
        &self,
        op: &str,
        provider: &str,
        f: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let start = Instant::now();
        let r = f.await;
        self.ctx
            .metrics
            .driver_duration
            .get_or_create(&crate::metrics::DriverLabels {
                provider: crate::metrics::provider_label(provider),
                operation: crate::metrics::operation_label(op),
            })
            .observe(start.elapsed().as_secs_f64());
        r
    }

    async fn create(
        &mut self,
        view: MachineView,
        class: MachineClass,
        secret: Secret,
        driver: Arc<dyn Driver>,
    ) -> Result<Action, Error> {
        let secret = match self.userdata_secret(&secret, &view).await? {
            Ok(s) => s,
            Err(Stop::After(d)) => return Ok(Action::requeue(d)),
        };
        let provider = class.provider.clone();
        let mut req = MachineRequest {
            machine: self.machine.clone(),
            machine_class: class,
            secret,
        };
        let now = Utc::now();
        let status = self
            .timed(
                "GetMachineStatus",
                &provider,
                driver.get_machine_status(&req),
            )
            .await;
        let plan = decide::plan_creation(&view, status);
        let mut init_needed = decide::needs_initialization(&view, &plan);
        let identity: MachineIdentity = match plan {
            CreationPlan::Fail(err) => {
                return self.create_failed(&view, err, "GetMachineStatus").await
            }
            CreationPlan::Create => {
                info!("creating VM");
                let started = Instant::now();
                match self
                    .timed("CreateMachine", &provider, driver.create_machine(&req))
                    .await
                {
                    Err(err) => return self.create_failed(&view, err, "CreateMachine").await,
                    Ok(resp) => {
                        info!(provider_id = %resp.provider_id, node = %resp.node_name, elapsed_ms = started.elapsed().as_millis() as u64, "VM created");
                        self.event(
                            EventType::Normal,
                            "Created",
                            format!("VM {} created", resp.provider_id),
                        )
                        .await;
                        let id = MachineIdentity {
                            provider_id: resp.provider_id,
                            node_name: resp.node_name,
                            addresses: resp.addresses,
                        };
                        if let Some(action) = self.stale_node_check(&id, &driver, &req).await? {
                            return Ok(action);
                        }
                        id
                    }
                }
            }
            CreationPlan::Adopt(id) => {
                if view.provider_id.is_empty() {
                    info!(provider_id = %id.provider_id, "adopting existing VM");
                }
                id
            }
            CreationPlan::Initialize(id) => {
                info!(provider_id = %id.provider_id, "VM exists but is not initialized");
                id
            }
            CreationPlan::KeepExisting => MachineIdentity {
                provider_id: view.provider_id.clone(),
                node_name: view.node.clone().unwrap_or_default(),
                addresses: Vec::new(),
            },
        };
        if (self.target() && identity.node_name.is_empty()) || identity.provider_id.is_empty() {
            let err = Status::internal(format!(
                "machine {:?}: nodeName ({:?}) or providerID ({:?}) is empty after creation flow",
                view.name, identity.node_name, identity.provider_id
            ));
            warn!(%err, "provider returned an incomplete identity");
            return Ok(Action::requeue(self.backoff_for(&err)));
        }
        // Persist providerID, node label and priority BEFORE initialization.
        self.persist_identity(&identity).await?;
        req.machine = self.machine.clone();
        let mut addresses = identity.addresses.clone();
        if !init_needed && view.phase == Phase::CrashLoopBackOff && view.initialization_failed() {
            init_needed = true;
        }
        if init_needed {
            let result = self
                .timed(
                    "InitializeMachine",
                    &provider,
                    driver.initialize_machine(&req),
                )
                .await;
            match decide::initialization_outcome(&self.view(), &result, now) {
                InitOutcome::Failed(t) => {
                    let err = result
                        .err()
                        .unwrap_or_else(|| Status::internal("initialization failed"));
                    warn!(error = %err, "InitializeMachine failed");
                    self.write(&t, json!({})).await?;
                    self.provider_failure("InitializeMachine", &err).await;
                    return Ok(Action::requeue(self.backoff_for(&err)));
                }
                InitOutcome::Done => {
                    if let Ok(resp) = result {
                        if !resp.addresses.is_empty() {
                            addresses = resp.addresses;
                        }
                        self.event(
                            EventType::Normal,
                            "Initialized",
                            "InitializeMachine succeeded".into(),
                        )
                        .await;
                    }
                }
            }
        }
        self.ctx.reset_backoff(&self.key);
        let view = self.view();
        if matches!(view.phase, Phase::Empty | Phase::CrashLoopBackOff) {
            let t = decide::created(self.target());
            let extra = if self.target() {
                json!({})
            } else {
                json!({"addresses": sorted_addresses(&identity.node_name, addresses)})
            };
            self.write(&t, extra).await?;
        }
        Ok(Action::requeue(self.ctx.config.short_retry))
    }

    async fn create_failed(
        &mut self,
        view: &MachineView,
        err: Status,
        op: &str,
    ) -> Result<Action, Error> {
        warn!(error = %err, op, "provider call failed during creation");
        let t = decide::create_failed(view, &err, Utc::now());
        let keep_state = matches!(err.code, Code::ResourceExhausted) || err.code.is_transient();
        let extra = if keep_state {
            json!({})
        } else {
            json!({"lastKnownState": ""})
        };
        self.write(&t, extra).await?;
        self.provider_failure(op, &err).await;
        Ok(Action::requeue(self.backoff_for(&err)))
    }

    /// A Node with the new VM's name that belongs to another machine: delete the
    /// new VM and fail the machine (the reference's stale-node check).
    async fn stale_node_check(
        &mut self,
        id: &MachineIdentity,
        driver: &Arc<dyn Driver>,
        req: &MachineRequest,
    ) -> Result<Option<Action>, Error> {
        let Some(target) = &self.ctx.target else {
            return Ok(None);
        };
        if id.node_name == self.name() {
            return Ok(None);
        }
        let nodes: Api<Node> = Api::all(target.clone());
        let Some(node) = nodes.get_opt(&id.node_name).await? else {
            return Ok(None);
        };
        let owner = node.labels().get(c::MACHINE_NAME_NODE_LABEL).cloned();
        if owner.as_deref() == Some(&self.name()) || owner.is_none() {
            return Ok(None);
        }
        warn!(node = %id.node_name, "a node with the new VM's name belongs to another machine; deleting the VM");
        let mut doomed = req.clone();
        doomed.machine.spec.provider_id = id.provider_id.clone();
        let del = driver.delete_machine(&doomed).await;
        self.write(&decide::stale_node(), json!({})).await?;
        if let Err(e) = del {
            self.provider_failure("DeleteMachine", &e).await;
        }
        Ok(Some(Action::requeue(self.ctx.config.short_retry)))
    }

    async fn persist_identity(&mut self, id: &MachineIdentity) -> Result<(), Error> {
        let mut labels = serde_json::Map::new();
        let mut annotations = serde_json::Map::new();
        if self.target() && self.machine.labels().get(c::NODE_LABEL) != Some(&id.node_name) {
            labels.insert(c::NODE_LABEL.into(), json!(id.node_name));
        }
        if !self
            .machine
            .annotations()
            .contains_key(c::PRIORITY_ANNOTATION)
        {
            annotations.insert(
                c::PRIORITY_ANNOTATION.into(),
                json!(c::DEFAULT_MACHINE_PRIORITY),
            );
        }
        let pid_changed = self.machine.spec.provider_id != id.provider_id;
        if labels.is_empty() && annotations.is_empty() && !pid_changed {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"labels": labels, "annotations": annotations},
            "spec": {"providerID": id.provider_id},
        });
        self.machine = self
            .api
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        info!(provider_id = %id.provider_id, node = %id.node_name, "persisted providerID and node label");
        Ok(())
    }

    // ------------------------------------------------------------------
    // Health

    async fn health(&mut self, view: &MachineView) -> Step<Option<Duration>> {
        let node_name = view.node.clone().unwrap_or_default();
        let node = self.ctx.nodes.get(&ObjectRef::new(&node_name));
        if let Some(node) = &node {
            if node.meta().deletion_timestamp.is_some() {
                info!(node = %node_name, "node is being deleted; deleting its machine");
                self.api
                    .delete(&self.name(), &DeleteParams::default())
                    .await?;
                return Ok(Err(Stop::After(self.ctx.config.short_retry)));
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
                return Ok(Err(Stop::After(self.ctx.config.short_retry)));
            }
            let extra = conditions.map_or(json!({}), |c| json!({"conditions": c}));
            self.write(t, extra).await?;
            if view.phase == Phase::Pending && t.phase == Some(Phase::Failed) {
                let labels = self.duration_labels();
                self.ctx.metrics.failed_join.get_or_create(&labels).inc();
            }
            if d.joined {
                self.joined(now).await?;
            }
            return Ok(Err(Stop::After(self.ctx.config.short_retry)));
        }
        if let Some(c) = conditions {
            let patch = json!({"status": {"conditions": c}});
            self.machine = self
                .api
                .patch_status(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(Ok(d.recheck_after))
    }

    async fn may_mark_failed(&self) -> Result<bool, Error> {
        let Some(group) = self.machine.labels().get("name").cloned() else {
            return Ok(true);
        };
        let _permit = self.ctx.failed_permits.lock().await;
        let siblings = self
            .api
            .list(&ListParams::default().labels(&format!("name={group}")))
            .await?;
        let me = self.name();
        let phases: Vec<Phase> = siblings
            .items
            .iter()
            .filter(|m| m.name_any() != me)
            .map(|m| m.status.clone().unwrap_or_default().current_status.phase)
            .collect();
        Ok(decide::may_mark_failed(phases.iter()))
    }

    async fn joined(&mut self, now: chrono::DateTime<Utc>) -> Result<(), Error> {
        let view = self.view();
        let took = (now - view.created).to_std().unwrap_or_default();
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

    fn duration_labels(&self) -> crate::metrics::DurationLabels {
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

    // ------------------------------------------------------------------
    // Deletion

    async fn delete(&mut self) -> Result<Action, Error> {
        let (class, secret, driver) = match self.inputs().await? {
            Ok(x) => x,
            Err(Stop::After(d)) => return Ok(Action::requeue(d)),
        };
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
                    self.write(&decide::set_terminating(), json!({})).await?;
                }
                DeletionStep::GetVmStatus => {
                    let t = self
                        .get_vm_status_step(&view, &driver, &mut req, &provider)
                        .await?;
                    let failed = t.operation.state == mcm_api::MachineState::Failed;
                    self.write(&t, json!({})).await?;
                    if failed {
                        return Ok(Action::requeue(
                            self.ctx.failure_delay(&self.key, FailureKind::Normal),
                        ));
                    }
                }
                DeletionStep::Drain => {
                    let plan = decide::plan_drain(&view, Utc::now());
                    let (t, ok) = match (&self.ctx.target, &view.node) {
                        (Some(target), Some(node)) => {
                            let started = Instant::now();
                            let opts = drain::DrainOptions::from_plan(&plan, &self.ctx.config);
                            let r = drain::drain_node(target, node, &opts, driver.as_ref()).await;
                            let ok = r.is_ok();
                            if ok {
                                self.ctx
                                    .metrics
                                    .drain_duration
                                    .get_or_create(&crate::metrics::DrainLabels {
                                        namespace: self.machine.namespace().unwrap_or_default(),
                                        machine_deployment: self
                                            .machine
                                            .labels()
                                            .get("name")
                                            .cloned()
                                            .unwrap_or_default(),
                                    })
                                    .set(started.elapsed().as_secs_f64().round());
                            } else if let Err(e) = &r {
                                self.event(EventType::Warning, "DrainFailed", e.to_string())
                                    .await;
                            }
                            (
                                decide::after_drain(&plan, true, r.map_err(|e| e.to_string())),
                                ok || plan.force,
                            )
                        }
                        _ => (decide::after_drain(&plan, false, Ok(())), true),
                    };
                    self.write(&t, json!({})).await?;
                    if !ok {
                        return Ok(Action::requeue(
                            self.ctx.failure_delay(&self.key, FailureKind::Normal),
                        ));
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
                    self.write(&decide::volume_attachments_gone(&node), json!({}))
                        .await?;
                }
                DeletionStep::DeleteVm => {
                    req.machine = self.machine.clone();
                    let started = Instant::now();
                    let result = self
                        .timed("DeleteMachine", &provider, driver.delete_machine(&req))
                        .await;
                    let (t, quick) = decide::after_delete_vm(&result);
                    let state = result
                        .as_ref()
                        .map(|r| r.last_known_state.clone())
                        .unwrap_or_default();
                    self.write(&t, json!({"lastKnownState": state})).await?;
                    match result {
                        Ok(_) => {
                            info!(provider_id = %self.machine.spec.provider_id, "VM deleted");
                            let labels = self.duration_labels();
                            self.ctx
                                .metrics
                                .delete_duration
                                .get_or_create(&labels)
                                .set(started.elapsed().as_secs_f64().round());
                        }
                        Err(e) if e.code == Code::NotFound => {}
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
                DeletionStep::DeleteNode => {
                    let outcome = self.delete_node(&view).await?;
                    let failed = matches!(outcome, NodeDeletion::Failed(..));
                    self.write(&decide::after_delete_node(&view.name, &outcome), json!({}))
                        .await?;
                    if failed {
                        return Ok(Action::requeue(
                            self.ctx.failure_delay(&self.key, FailureKind::Normal),
                        ));
                    }
                }
                DeletionStep::RemoveFinalizer => {
                    crate::finalizer::remove(&self.api, &self.machine, c::MCM_FINALIZER).await?;
                    info!("machine deleted; finalizer removed");
                    self.ctx.reset_backoff(&self.key);
                    self.ctx.metrics.forget_machine(
                        &self.machine.namespace().unwrap_or_default(),
                        &self.name(),
                    );
                    return Ok(Action::await_change());
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
        provider: &str,
    ) -> Result<Transition, Error> {
        if !self.target() || view.node.is_some() {
            return Ok(decide::after_get_vm_status(
                self.target(),
                view.node.is_some(),
                None,
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
                let r = self
                    .timed("GetMachineStatus", provider, driver.get_machine_status(req))
                    .await;
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
        Ok(decide::after_get_vm_status(true, false, status.as_ref()))
    }

    async fn delete_node(&self, view: &MachineView) -> Result<NodeDeletion, Error> {
        let (Some(target), Some(node)) = (&self.ctx.target, &view.node) else {
            return Ok(NodeDeletion::NoLabel);
        };
        let nodes: Api<Node> = Api::all(target.clone());
        let Some(obj) = nodes.get_opt(node).await? else {
            return Ok(NodeDeletion::NotFound(node.clone()));
        };
        if let Err(e) = crate::finalizer::remove(&nodes, &obj, c::NODE_FINALIZER).await {
            return Ok(NodeDeletion::Failed(node.clone(), e.to_string()));
        }
        match nodes.delete(node, &DeleteParams::default()).await {
            Ok(_) => Ok(NodeDeletion::Deleted(node.clone())),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(NodeDeletion::NotFound(node.clone())),
            Err(e) => Ok(NodeDeletion::Failed(node.clone(), e.to_string())),
        }
    }
}

fn display_phase(p: &Phase) -> &str {
    if p.is_empty() {
        "(none)"
    } else {
        p.as_str()
    }
}

/// Addresses as the reference persists them without a target cluster: the
/// Hostname first, deduplicated, sorted by type then address.
fn sorted_addresses(node_name: &str, mut addrs: Vec<NodeAddress>) -> Vec<NodeAddress> {
    if !node_name.is_empty() {
        addrs.push(NodeAddress {
            type_: "Hostname".into(),
            address: node_name.into(),
        });
    }
    addrs.sort_by(|a, b| (&a.type_, &a.address).cmp(&(&b.type_, &b.address)));
    addrs.dedup_by(|a, b| a.type_ == b.type_ && a.address == b.address);
    addrs
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
