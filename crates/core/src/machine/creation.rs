//! Creation as a step machine: GetMachineStatus → CreateMachine → persist the
//! identity → InitializeMachine → the created phase, with every decision made
//! here and every effect done by the runtime, one per step.
//!
//! The runtime keeps a [`CreationFlow`] for one reconcile, asks it for the
//! next [`CreationStep`], performs exactly that effect, and feeds the result
//! back as a [`CreationOutcome`]. The flow never skips persisting the
//! providerID before InitializeMachine, never creates when the provider
//! reports an existing VM, and says for each failure how to retry and
//! whether `lastKnownState` survives. See `docs/design/machine.md`,
//! "Creation".

use super::{markers, MachineView, OpState, OpType, Operation, Phase, Transition};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeAddress;
use mcm_driver::{
    Code, CreateMachineResponse, GetMachineStatusResponse, InitializeMachineResponse,
    MachineIdentity, Status,
};

/// What to do after the first GetMachineStatus of the creation flow.
#[derive(Debug, Clone, PartialEq)]
pub enum CreationPlan {
    /// No VM: call CreateMachine, then initialize.
    Create,
    /// A VM exists and is initialized: adopt it.
    Adopt(MachineIdentity),
    /// A VM exists but is not initialized: initialize it, never create another.
    Initialize(MachineIdentity),
    /// The provider cannot tell (NotFound/Unimplemented) but the machine already
    /// has a providerID: keep it.
    KeepExisting,
    /// A provider error: record it as a create failure.
    Fail(Status),
}

/// Decides the creation step from the GetMachineStatus answer (design: machine.md, "Creation").
///
/// `Uninitialized` without an identity (a nil response in the reference, a
/// panic there; design: machine.md, "Where mcm-rs differs from the reference",
/// item 1) falls back to what the machine already records, and
/// to a failure when it records nothing.
pub fn plan_creation(
    m: &MachineView,
    status: Result<GetMachineStatusResponse, Status>,
) -> CreationPlan {
    match status {
        Ok(resp) => CreationPlan::Adopt(resp.into()),
        Err(e) if matches!(e.code, Code::NotFound | Code::Unimplemented) => {
            if m.provider_id.is_empty() {
                CreationPlan::Create
            } else {
                CreationPlan::KeepExisting
            }
        }
        Err(e) if e.code == Code::Uninitialized => match e.machine {
            Some(id) if !id.provider_id.is_empty() => CreationPlan::Initialize(*id),
            _ if !m.provider_id.is_empty() => CreationPlan::Initialize(MachineIdentity {
                provider_id: m.provider_id.clone(),
                node_name: m.node.clone().unwrap_or_default(),
                addresses: Vec::new(),
            }),
            _ => CreationPlan::Fail(Status::internal(format!(
                "provider answered Uninitialized for machine {:?} without identifying the VM",
                m.name
            ))),
        },
        Err(e) => CreationPlan::Fail(e),
    }
}

/// Why InitializeMachine runs in this creation flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitReason {
    /// CreateMachine just made the VM.
    FreshVm,
    /// GetMachineStatus answered `Uninitialized`: the VM exists but was never
    /// initialized (e.g. the controller stopped between create and initialize).
    ProviderSaysUninitialized,
    /// The machine's last recorded operation is a failed InitializeMachine;
    /// it is retried even when the provider cannot report the VM's state
    /// (the reference skipped it and promoted the machine anyway).
    PreviousAttemptFailed,
}

impl InitReason {
    /// A short text for logs and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            InitReason::FreshVm => "the VM was just created",
            InitReason::ProviderSaysUninitialized => "the provider reports the VM as uninitialized",
            InitReason::PreviousAttemptFailed => "the previous InitializeMachine failed",
        }
    }
}

/// Will InitializeMachine run in this flow, and why: the one place that
/// answers it. `None`: the VM is adopted or kept as it is.
pub fn initialization_reason(m: &MachineView, plan: &CreationPlan) -> Option<InitReason> {
    match plan {
        CreationPlan::Create => Some(InitReason::FreshVm),
        CreationPlan::Initialize(_) => Some(InitReason::ProviderSaysUninitialized),
        CreationPlan::Adopt(_) | CreationPlan::KeepExisting => m
            .initialization_failed()
            .then_some(InitReason::PreviousAttemptFailed),
        CreationPlan::Fail(_) => None,
    }
}

/// Whether InitializeMachine must run for this plan ([`initialization_reason`] is some).
pub fn needs_initialization(m: &MachineView, plan: &CreationPlan) -> bool {
    initialization_reason(m, plan).is_some()
}

/// The phase after a failed create or initialize: `Failed` once the creation
/// timeout has passed, `CrashLoopBackOff` before.
pub fn creation_failure_phase(m: &MachineView, now: DateTime<Utc>) -> Phase {
    if m.creation_timed_out(now) {
        Phase::Failed
    } else {
        Phase::CrashLoopBackOff
    }
}

/// The status after a failed CreateMachine (or an undecodable GetMachineStatus).
pub fn create_failed(m: &MachineView, err: &Status, now: DateTime<Utc>) -> Transition {
    Transition {
        phase: Some(creation_failure_phase(m, now)),
        operation: Operation {
            description: format!("Cloud provider message - {err}"),
            error_code: Some(err.code.name()),
            state: OpState::Failed,
            kind: OpType::Create,
        },
        timeout_active: None,
    }
}

/// The status after a failed InitializeMachine (contract text).
pub fn initialize_failed(m: &MachineView, err: &Status, now: DateTime<Utc>) -> Transition {
    Transition {
        phase: Some(creation_failure_phase(m, now)),
        operation: Operation {
            description: format!(
                "Provider error: {err}. {}",
                markers::INSTANCE_INITIALIZATION
            ),
            error_code: Some(err.code.name()),
            state: OpState::Failed,
            kind: OpType::Create,
        },
        timeout_active: None,
    }
}

/// The outcome of InitializeMachine as the controller sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum InitOutcome {
    /// Initialized (or nothing to initialize: `Unimplemented`).
    Done,
    /// Failed: record it and retry with backoff.
    Failed(Transition),
}

/// Classifies an InitializeMachine result.
pub fn initialization_outcome<T>(
    m: &MachineView,
    result: &Result<T, Status>,
    now: DateTime<Utc>,
) -> InitOutcome {
    match result {
        Ok(_) => InitOutcome::Done,
        Err(e) if e.code == Code::Unimplemented => InitOutcome::Done,
        Err(e) => InitOutcome::Failed(initialize_failed(m, e, now)),
    }
}

/// The status once the VM exists and is initialized: Pending (waiting for the
/// node), or Available when there is no target cluster.
pub fn created(target_cluster: bool) -> Transition {
    if target_cluster {
        Transition {
            phase: Some(Phase::Pending),
            operation: Operation::new(
                "Creating machine on cloud provider",
                OpState::Processing,
                OpType::Create,
            ),
            timeout_active: Some(true),
        }
    } else {
        Transition {
            phase: Some(Phase::Available),
            operation: Operation::new(
                "Created machine on cloud provider",
                OpState::Successful,
                OpType::Create,
            ),
            timeout_active: Some(false),
        }
    }
}

/// The stale-node failure: a Node with the new VM's node name already exists
/// and belongs to another machine.
pub fn stale_node() -> Transition {
    Transition {
        phase: Some(Phase::Failed),
        operation: Operation::new("VM using old node obj", OpState::Failed, OpType::Create),
        timeout_active: None,
    }
}

// ---------------------------------------------------------------------------
// The step machine

/// How a failed step is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryClass {
    /// An ordinary failure: per-machine exponential backoff from the short period.
    Normal,
    /// The cloud throttled or lacked capacity (`ResourceExhausted`) on a call
    /// other than those of [`RetryClass::ResourceExhausted`]: start higher.
    Throttled,
    /// CreateMachine, or the probe (GetMachineStatus) before it, answered
    /// `ResourceExhausted`: the creation is tried again after
    /// `--resource-exhausted-retry` ([`resource_exhausted_retry`]), as the
    /// reference's `machineCreateErrorHandler`, not with the backoff.
    ResourceExhausted,
}

/// The reference's `LongRetry`, which `--resource-exhausted-retry 0` stands for.
pub const LONG_RETRY: std::time::Duration = crate::backoff::periods::LONG;

/// When a creation answered `ResourceExhausted` is tried again: the flag's
/// period, or [`LONG_RETRY`] when it is 0 (as the reference).
pub fn resource_exhausted_retry(flag: std::time::Duration) -> std::time::Duration {
    if flag.is_zero() {
        LONG_RETRY
    } else {
        flag
    }
}

impl RetryClass {
    /// The retry class of a provider error.
    pub fn of(err: &Status) -> RetryClass {
        if err.code == Code::ResourceExhausted {
            RetryClass::Throttled
        } else {
            RetryClass::Normal
        }
    }
}

/// A failed creation step: what to record and how to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct CreationFailure {
    /// The provider call that failed (`GetMachineStatus`, `CreateMachine`, ...),
    /// for metrics and the Warning Event.
    pub call: &'static str,
    /// The error.
    pub error: Status,
    /// The status to write; `None` writes nothing (an internal inconsistency
    /// that a retry resolves).
    pub transition: Option<Transition>,
    /// Whether `status.lastKnownState` is kept (throttling and transient errors)
    /// or cleared.
    pub keep_last_known_state: bool,
    /// How to retry.
    pub retry: RetryClass,
}

/// The next effect of the creation flow.
#[derive(Debug, Clone, PartialEq)]
pub enum CreationStep {
    /// Call GetMachineStatus: is there a VM for this machine already?
    Probe {
        /// Take the machine's create turn at the cloud pacer first (a
        /// machine without a providerID): the probe and the create then run
        /// back to back, since waiting between them would repeat the probe
        /// (and a provider may rely on a fresh probe's answer).
        take_create_turn: bool,
    },
    /// Call CreateMachine.
    Create {
        /// The create turn was taken before the probe of this flow; otherwise
        /// take it now.
        turn_held: bool,
    },
    /// Check whether a Node named `node_name` exists and belongs to another machine
    /// (the VM got the name of an old node).
    CheckStaleNode {
        /// The new VM's node name.
        node_name: String,
    },
    /// Delete the VM just created, whose node name belongs to another machine.
    DeleteStaleVm {
        /// The VM's providerID.
        provider_id: String,
    },
    /// Persist the providerID, the `node` label and the priority annotation
    /// (always before InitializeMachine, so a crash never loses the VM).
    PersistIdentity(MachineIdentity),
    /// Call InitializeMachine.
    Initialize {
        /// Why.
        reason: InitReason,
    },
    /// Write the created phase (Pending with a target cluster, else Available).
    MarkCreated {
        /// The status to write.
        transition: Transition,
        /// Addresses to persist in `status.addresses` (only without a target cluster).
        addresses: Option<Vec<NodeAddress>>,
    },
    /// Record the failure and retry later.
    Fail(Box<CreationFailure>),
    /// The flow is complete (the machine is created and initialized).
    Done,
}

/// The result of the previous step's effect.
#[derive(Debug, Clone, PartialEq)]
pub enum CreationOutcome {
    /// Nothing ran yet.
    Start,
    /// GetMachineStatus answered.
    Probed(Result<GetMachineStatusResponse, Status>),
    /// CreateMachine answered.
    Created(Result<CreateMachineResponse, Status>),
    /// The stale-node check: `true` when the node belongs to another machine.
    StaleNodeChecked(bool),
    /// The stale VM's deletion answered.
    StaleVmDeleted(Result<(), Status>),
    /// The identity is persisted.
    Persisted,
    /// InitializeMachine answered.
    Initialized(Result<InitializeMachineResponse, Status>),
    /// The created phase is written.
    Marked,
}

/// One reconcile's creation flow: what it learned so far.
#[derive(Debug, Clone, PartialEq)]
pub struct CreationFlow {
    target_cluster: bool,
    identity: Option<MachineIdentity>,
    init: Option<InitReason>,
    addresses: Vec<NodeAddress>,
    /// The create turn was taken before this flow's probe.
    create_turn: bool,
}

impl CreationFlow {
    /// A new flow; `target_cluster` is false in the mode without Nodes.
    pub fn new(target_cluster: bool) -> Self {
        CreationFlow {
            target_cluster,
            identity: None,
            init: None,
            addresses: Vec::new(),
            create_turn: false,
        }
    }

    /// Why InitializeMachine runs in this flow, once decided.
    pub fn init_reason(&self) -> Option<InitReason> {
        self.init
    }

    /// The next step, from the machine as it is now and the last step's outcome.
    pub fn next(
        &mut self,
        m: &MachineView,
        outcome: CreationOutcome,
        now: DateTime<Utc>,
    ) -> CreationStep {
        match outcome {
            CreationOutcome::Start => self.probe(m),
            CreationOutcome::Probed(status) => {
                let plan = plan_creation(m, status);
                self.init = initialization_reason(m, &plan);
                match plan {
                    CreationPlan::Fail(err) => fail(m, "GetMachineStatus", err, now),
                    CreationPlan::Create => CreationStep::Create {
                        turn_held: std::mem::take(&mut self.create_turn),
                    },
                    CreationPlan::Adopt(id) | CreationPlan::Initialize(id) => {
                        self.identified(m, id)
                    }
                    CreationPlan::KeepExisting => {
                        let id = MachineIdentity {
                            provider_id: m.provider_id.clone(),
                            node_name: m.node.clone().unwrap_or_default(),
                            addresses: Vec::new(),
                        };
                        self.identified(m, id)
                    }
                }
            }
            CreationOutcome::Created(Err(err)) => fail(m, "CreateMachine", err, now),
            CreationOutcome::Created(Ok(resp)) => {
                let id = MachineIdentity {
                    provider_id: resp.provider_id,
                    node_name: resp.node_name,
                    addresses: resp.addresses,
                };
                let stale_check =
                    self.target_cluster && !id.node_name.is_empty() && id.node_name != m.name;
                let node_name = id.node_name.clone();
                let step = self.identified(m, id);
                if stale_check && matches!(step, CreationStep::PersistIdentity(_)) {
                    CreationStep::CheckStaleNode { node_name }
                } else {
                    step
                }
            }
            CreationOutcome::StaleNodeChecked(false) => self.persist(m),
            CreationOutcome::StaleNodeChecked(true) => CreationStep::DeleteStaleVm {
                provider_id: self
                    .identity
                    .as_ref()
                    .map(|i| i.provider_id.clone())
                    .unwrap_or_default(),
            },
            CreationOutcome::StaleVmDeleted(result) => {
                let error = match result {
                    Ok(()) => Status::new(
                        Code::AlreadyExists,
                        "the new VM's node name belongs to another machine's Node; the VM was deleted",
                    ),
                    Err(e) => e,
                };
                CreationStep::Fail(Box::new(CreationFailure {
                    call: "DeleteMachine",
                    error,
                    transition: Some(stale_node()),
                    keep_last_known_state: true,
                    retry: RetryClass::Normal,
                }))
            }
            CreationOutcome::Persisted => match self.init {
                Some(reason) => CreationStep::Initialize { reason },
                None => self.mark(m),
            },
            CreationOutcome::Initialized(result) => match initialization_outcome(m, &result, now) {
                InitOutcome::Failed(t) => {
                    let error = result
                        .err()
                        .unwrap_or_else(|| Status::internal("initialization failed"));
                    CreationStep::Fail(Box::new(CreationFailure {
                        call: "InitializeMachine",
                        retry: RetryClass::of(&error),
                        error,
                        transition: Some(t),
                        keep_last_known_state: true,
                    }))
                }
                InitOutcome::Done => {
                    if let Ok(resp) = result {
                        if !resp.addresses.is_empty() {
                            self.addresses = resp.addresses;
                        }
                    }
                    self.init = None;
                    self.mark(m)
                }
            },
            CreationOutcome::Marked => CreationStep::Done,
        }
    }

    /// The VM is known: check the identity is complete, then persist it.
    fn identified(&mut self, m: &MachineView, id: MachineIdentity) -> CreationStep {
        if id.provider_id.is_empty() || (self.target_cluster && id.node_name.is_empty()) {
            let error = Status::internal(format!(
                "machine {:?}: nodeName ({:?}) or providerID ({:?}) is empty after creation flow",
                m.name, id.node_name, id.provider_id
            ));
            return CreationStep::Fail(Box::new(CreationFailure {
                call: "GetMachineStatus",
                error,
                transition: None,
                keep_last_known_state: true,
                retry: RetryClass::Normal,
            }));
        }
        self.addresses = id.addresses.clone();
        self.identity = Some(id.clone());
        CreationStep::PersistIdentity(id)
    }

    /// The probe; a machine without a providerID takes its create turn first.
    fn probe(&mut self, m: &MachineView) -> CreationStep {
        let take_create_turn = m.provider_id.is_empty() && !self.create_turn;
        self.create_turn |= take_create_turn;
        CreationStep::Probe { take_create_turn }
    }

    fn persist(&mut self, m: &MachineView) -> CreationStep {
        match &self.identity {
            Some(id) => CreationStep::PersistIdentity(id.clone()),
            None => self.probe(m),
        }
    }

    /// The created phase, written only while the machine has none yet or is in
    /// CrashLoopBackOff (an adopted Pending/Running machine keeps its phase).
    fn mark(&self, m: &MachineView) -> CreationStep {
        if !matches!(m.phase, Phase::Empty | Phase::CrashLoopBackOff) {
            return CreationStep::Done;
        }
        let addresses = (!self.target_cluster).then(|| {
            let node = self
                .identity
                .as_ref()
                .map(|i| i.node_name.as_str())
                .unwrap_or_default();
            sorted_addresses(node, self.addresses.clone())
        });
        CreationStep::MarkCreated {
            transition: created(self.target_cluster),
            addresses,
        }
    }
}

/// A failed provider call of the creation flow (GetMachineStatus or
/// CreateMachine): the phase per the creation timeout, `lastKnownState`
/// kept only for throttling and transient errors, `ResourceExhausted`
/// retried after `--resource-exhausted-retry`.
fn fail(m: &MachineView, call: &'static str, error: Status, now: DateTime<Utc>) -> CreationStep {
    let exhausted = error.code == Code::ResourceExhausted;
    let keep = exhausted || error.code.is_transient();
    CreationStep::Fail(Box::new(CreationFailure {
        call,
        transition: Some(create_failed(m, &error, now)),
        keep_last_known_state: keep,
        retry: if exhausted && !is_throttling(&error) {
            RetryClass::ResourceExhausted
        } else {
            RetryClass::of(&error)
        },
        error,
    }))
}

/// Whether a `ResourceExhausted` answer is the cloud's request rate limit
/// (EC2's `RequestLimitExceeded`, GCP's `rateLimitExceeded`, ARM's 429
/// `TooManyRequests`, ECS's `Throttling`) rather than a lack of capacity or
/// quota. A throttled create is retried with the backoff
/// ([`RetryClass::Throttled`]), not after `--resource-exhausted-retry`: the
/// reference's AWS provider answers a throttle `Internal`, which its
/// controller retries soon, and a ten-minute wait for a request-rate limit
/// that refills in seconds would stall a scale-up (design: machine.md,
/// "ResourceExhausted").
pub fn is_throttling(error: &Status) -> bool {
    const MARKS: [&str; 6] = [
        "requestlimitexceeded",
        "request limit exceeded",
        "ratelimitexceeded",
        "rate limit",
        "throttl",
        "toomanyrequests",
    ];
    let text = error.message.to_ascii_lowercase();
    error.code == Code::ResourceExhausted && MARKS.iter().any(|m| text.contains(m))
}

/// What PersistIdentity writes to the Machine's metadata and spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityWrite {
    /// `spec.providerID`.
    pub provider_id: String,
    /// The `node` label to set (with a target cluster, when it differs).
    pub node_label: Option<String>,
    /// The `machinepriority` annotation to set (when the machine has none).
    pub priority: Option<String>,
}

/// What persisting the VM's identity writes: the providerID, the `node`
/// label (only with a target cluster) and the default priority annotation
/// when missing; `None` when the machine records all of it already.
pub fn identity_write(
    m: &MachineView,
    id: &MachineIdentity,
    target_cluster: bool,
) -> Option<IdentityWrite> {
    use mcm_api::constants as c;
    let node_label = (target_cluster && m.labels.get(c::NODE_LABEL) != Some(&id.node_name))
        .then(|| id.node_name.clone());
    let priority = (!m.annotations.contains_key(c::PRIORITY_ANNOTATION))
        .then(|| c::DEFAULT_MACHINE_PRIORITY.to_string());
    let unchanged = node_label.is_none() && priority.is_none() && m.provider_id == id.provider_id;
    (!unchanged).then(|| IdentityWrite {
        provider_id: id.provider_id.clone(),
        node_label,
        priority,
    })
}

/// Addresses as the reference persists them without a target cluster: the
/// Hostname first, deduplicated, sorted by type then address.
pub fn sorted_addresses(node_name: &str, mut addrs: Vec<NodeAddress>) -> Vec<NodeAddress> {
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

#[cfg(test)]
mod tests;
