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
//!
//! Once the VM is known, every step carries its [`MachineIdentity`] and the
//! runtime hands it back with the step's outcome: the stale-Node check, the
//! persisted identity, InitializeMachine and the created phase all act on
//! the identity the flow decided, never on a default.

use super::update::AppliedSpec;
use super::{markers, MachineView, OpState, OpType, Operation, Phase, Transition};
use crate::backoff::FailureKind;
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

/// How a failed step is retried (the deletion and update flows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryClass {
    /// An ordinary failure: per-machine exponential backoff from the short period.
    Normal,
    /// The cloud throttled or lacked capacity (`ResourceExhausted`): start higher.
    Throttled,
}

/// How the runtime retries a failed creation step: decided here, carried
/// out by the runtime without a choice of its own (design: machine.md,
/// "Retries").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreationRetry {
    /// The cloud's request rate limit answered (a throttled CreateMachine,
    /// probe or InitializeMachine): the call's own queue, not the machine's
    /// failure. The pacer pauses that operation for the driver's scope; the
    /// machine looks again after the pacer's first pause, and its backoff
    /// does not count a failure.
    Pause,
    /// CreateMachine, or the probe before it, found no capacity or quota
    /// (`ResourceExhausted` that is not a rate limit): the creation is held
    /// this long (`--resource-exhausted-retry`, [`resource_exhausted_retry`]),
    /// whatever wakes the machine up, as the reference's
    /// `machineCreateErrorHandler`; not the backoff.
    HoldCreation(std::time::Duration),
    /// The machine's backoff for a failure of this kind (it counts).
    Backoff(crate::backoff::FailureKind),
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
    /// How the runtime retries.
    pub retry: CreationRetry,
}

/// The next effect of the creation flow; `T` is the target cluster's
/// handle, carried by the step that reads a Node.
#[derive(Debug, Clone, PartialEq)]
pub enum CreationStep<T = ()> {
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
    /// Read the Node named by the new VM's identity (`node_name`) in the
    /// target cluster and report its owner ([`CreationOutcome::NodeOwner`]):
    /// the VM got the name of a Node that may belong to another machine.
    CheckStaleNode {
        /// The new VM's identity.
        identity: MachineIdentity,
        /// The target cluster the Node is in.
        target: T,
    },
    /// Delete the VM just created, whose node name belongs to another machine.
    DeleteStaleVm {
        /// The VM's providerID.
        provider_id: String,
    },
    /// Persist the providerID, the `node` label and the priority annotation
    /// (always before InitializeMachine, so a crash never loses the VM); what
    /// exactly is written is [`identity_write`]'s answer.
    PersistIdentity(MachineIdentity),
    /// Call InitializeMachine for the VM of this identity (persisted).
    Initialize {
        /// Why.
        reason: InitReason,
        /// The VM's identity, handed back with the answer
        /// ([`CreationOutcome::Initialized`]).
        identity: MachineIdentity,
    },
    /// Write the created phase (Pending with a target cluster, else Available).
    MarkCreated {
        /// The status to write.
        transition: Transition,
        /// The VM's identity the phase is written for.
        identity: MachineIdentity,
        /// Addresses to persist in `status.addresses` (only without a target
        /// cluster): the identity's, with its node name as the Hostname.
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
    /// The Node with the new VM's node name: its owner label
    /// (`node.machine.sapcloud.io/machine-name`); `None` when there is no
    /// such Node or it carries no owner. [`stale_node_of_other_machine`]
    /// judges it.
    NodeOwner {
        /// The identity of [`CreationStep::CheckStaleNode`].
        identity: MachineIdentity,
        /// The Node's owner.
        owner: Option<String>,
    },
    /// The stale VM's deletion answered.
    StaleVmDeleted(Result<(), Status>),
    /// The identity of [`CreationStep::PersistIdentity`] is persisted.
    Persisted(MachineIdentity),
    /// InitializeMachine answered.
    Initialized {
        /// The identity of [`CreationStep::Initialize`].
        identity: MachineIdentity,
        /// The answer.
        result: Result<InitializeMachineResponse, Status>,
    },
    /// The created phase is written.
    Marked,
}

/// One reconcile's creation flow: the target cluster it was given and what
/// it learned so far.
#[derive(Debug, Clone, PartialEq)]
pub struct CreationFlow<T = ()> {
    /// The target cluster's handle; `None` in the mode without Nodes.
    target: Option<T>,
    init: Option<InitReason>,
    /// The create turn was taken before this flow's probe.
    create_turn: bool,
    /// How long a creation answered `ResourceExhausted` is held.
    exhausted_hold: std::time::Duration,
}

impl<T: Clone> CreationFlow<T> {
    /// A new flow with the target cluster's handle (`None` in the mode
    /// without Nodes).
    pub fn new(target: Option<T>) -> Self {
        CreationFlow {
            target,
            init: None,
            create_turn: false,
            exhausted_hold: crate::defaults::RESOURCE_EXHAUSTED_RETRY.value,
        }
    }

    /// The flow with `--resource-exhausted-retry` set to `flag` (0 stands
    /// for the reference's `LongRetry`, [`resource_exhausted_retry`]).
    pub fn with_resource_exhausted_retry(mut self, flag: std::time::Duration) -> Self {
        self.exhausted_hold = resource_exhausted_retry(flag);
        self
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
    ) -> CreationStep<T> {
        match outcome {
            CreationOutcome::Start => self.probe(m),
            CreationOutcome::Probed(status) => {
                let plan = plan_creation(m, status);
                self.init = initialization_reason(m, &plan);
                match plan {
                    CreationPlan::Fail(err) => self.fail(m, "GetMachineStatus", err, now),
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
            CreationOutcome::Created(Err(err)) => self.fail(m, "CreateMachine", err, now),
            CreationOutcome::Created(Ok(resp)) => {
                let id = MachineIdentity {
                    provider_id: resp.provider_id,
                    node_name: resp.node_name,
                    addresses: resp.addresses,
                };
                let stale_check = !id.node_name.is_empty() && id.node_name != m.name;
                match (self.identified(m, id), self.target.clone()) {
                    (CreationStep::PersistIdentity(identity), Some(target)) if stale_check => {
                        CreationStep::CheckStaleNode { identity, target }
                    }
                    (step, _) => step,
                }
            }
            CreationOutcome::NodeOwner { identity, owner } => {
                if stale_node_of_other_machine(m, owner.as_deref()) {
                    CreationStep::DeleteStaleVm {
                        provider_id: identity.provider_id,
                    }
                } else {
                    CreationStep::PersistIdentity(identity)
                }
            }
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
                    retry: CreationRetry::Backoff(FailureKind::Normal),
                }))
            }
            CreationOutcome::Persisted(identity) => match self.init {
                Some(reason) => CreationStep::Initialize { reason, identity },
                None => self.mark(m, identity, None),
            },
            CreationOutcome::Initialized { result: Err(e), .. }
                if e.code != Code::Unimplemented =>
            {
                CreationStep::Fail(Box::new(CreationFailure {
                    call: "InitializeMachine",
                    transition: Some(initialize_failed(m, &e, now)),
                    keep_last_known_state: true,
                    retry: paused_or_backoff(&e),
                    error: e,
                }))
            }
            CreationOutcome::Initialized { identity, result } => {
                let addresses = result
                    .ok()
                    .map(|resp| resp.addresses)
                    .filter(|a| !a.is_empty());
                self.init = None;
                self.mark(m, identity, addresses)
            }
            CreationOutcome::Marked => CreationStep::Done,
        }
    }

    /// The VM is known: check the identity is complete, then persist it.
    fn identified(&mut self, m: &MachineView, id: MachineIdentity) -> CreationStep<T> {
        if id.provider_id.is_empty() || (self.target.is_some() && id.node_name.is_empty()) {
            let error = Status::internal(format!(
                "machine {:?}: nodeName ({:?}) or providerID ({:?}) is empty after creation flow",
                m.name, id.node_name, id.provider_id
            ));
            return CreationStep::Fail(Box::new(CreationFailure {
                call: "GetMachineStatus",
                error,
                transition: None,
                keep_last_known_state: true,
                retry: CreationRetry::Backoff(FailureKind::Normal),
            }));
        }
        CreationStep::PersistIdentity(id)
    }

    /// The probe; a machine without a providerID takes its create turn first.
    fn probe(&mut self, m: &MachineView) -> CreationStep<T> {
        let take_create_turn = m.provider_id.is_empty() && !self.create_turn;
        self.create_turn |= take_create_turn;
        CreationStep::Probe { take_create_turn }
    }

    /// A failed provider call of the creation flow (GetMachineStatus or
    /// CreateMachine): the phase per the creation timeout, `lastKnownState`
    /// kept only for `ResourceExhausted` and transient errors, and the retry
    /// (design: machine.md, "Retries"): a request rate limit
    /// ([`is_throttling`]) pauses, any other `ResourceExhausted` holds the
    /// creation for `--resource-exhausted-retry`, the rest backs off.
    fn fail(
        &self,
        m: &MachineView,
        call: &'static str,
        error: Status,
        now: DateTime<Utc>,
    ) -> CreationStep<T> {
        let exhausted = error.code == Code::ResourceExhausted;
        let keep = exhausted || error.code.is_transient();
        CreationStep::Fail(Box::new(CreationFailure {
            call,
            transition: Some(create_failed(m, &error, now)),
            keep_last_known_state: keep,
            retry: if exhausted && !is_throttling(&error) {
                CreationRetry::HoldCreation(self.exhausted_hold)
            } else {
                paused_or_backoff(&error)
            },
            error,
        }))
    }

    /// The created phase of the VM of `identity`, written only while the
    /// machine has none yet or is in CrashLoopBackOff (an adopted
    /// Pending/Running machine keeps its phase). Without a target cluster
    /// the addresses are persisted: InitializeMachine's when it reported
    /// some (`initialized`), else the identity's.
    fn mark(
        &self,
        m: &MachineView,
        identity: MachineIdentity,
        initialized: Option<Vec<NodeAddress>>,
    ) -> CreationStep<T> {
        if !matches!(m.phase, Phase::Empty | Phase::CrashLoopBackOff) {
            return CreationStep::Done;
        }
        let addresses = self.target.is_none().then(|| {
            let known = initialized.unwrap_or_else(|| identity.addresses.clone());
            sorted_addresses(&identity.node_name, known)
        });
        CreationStep::MarkCreated {
            transition: created(self.target.is_some()),
            identity,
            addresses,
        }
    }
}

/// The retry of a failed call that is not held: `ResourceExhausted` is the
/// cloud's queue (the pacer pauses the operation and holds the machine
/// back), anything else the machine's backoff.
fn paused_or_backoff(error: &Status) -> CreationRetry {
    if error.code == Code::ResourceExhausted {
        CreationRetry::Pause
    } else {
        CreationRetry::Backoff(FailureKind::Normal)
    }
}

/// Whether the Node that carries the new VM's node name belongs to another
/// machine: its owner label names a machine other than this one. A Node
/// without the label, or no Node, is no obstacle.
pub fn stale_node_of_other_machine(m: &MachineView, node_owner: Option<&str>) -> bool {
    node_owner.is_some_and(|owner| owner != m.name)
}

/// Whether a `ResourceExhausted` answer is the cloud's request rate limit
/// (EC2's `RequestLimitExceeded`, GCP's `rateLimitExceeded`, ARM's 429
/// `TooManyRequests`, ECS's `Throttling`) rather than a lack of capacity or
/// quota. A throttled create is paused ([`CreationRetry::Pause`]), not held
/// for `--resource-exhausted-retry`: the reference's AWS provider answers a
/// throttle `Internal`, which its controller retries soon, and a ten-minute
/// wait for a request-rate limit that refills in seconds would stall a
/// scale-up (design: machine.md, "Retries").
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
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityWrite {
    /// `spec.providerID`; `None` when the machine records the identity
    /// (providerID, node label, priority) already.
    pub provider_id: Option<String>,
    /// The `node` label to set (with a target cluster, when it differs).
    pub node_label: Option<String>,
    /// The `machinepriority` annotation to set (when the machine has none).
    pub priority: Option<String>,
    /// The providerSpec the VM was created with, recorded as the last
    /// applied one of hot update (design: hot-update.md) when the machine
    /// records none yet; a recorded one is never replaced here.
    pub applied: Option<AppliedSpec>,
}

/// What persisting the VM's identity writes: the providerID, the `node`
/// label (only with a target cluster) and the default priority annotation
/// when missing, and the class's providerSpec (`class`, `provider_spec`) as
/// the last applied one when the machine records none; `None` when the
/// machine records all of it already.
pub fn identity_write(
    m: &MachineView,
    id: &MachineIdentity,
    target_cluster: bool,
    class: &str,
    provider_spec: &serde_json::Value,
) -> Option<IdentityWrite> {
    use mcm_api::constants as c;
    let node_label = (target_cluster && m.labels.get(c::NODE_LABEL) != Some(&id.node_name))
        .then(|| id.node_name.clone());
    let priority = (!m.annotations.contains_key(c::PRIORITY_ANNOTATION))
        .then(|| c::DEFAULT_MACHINE_PRIORITY.to_string());
    let unchanged = node_label.is_none() && priority.is_none() && m.provider_id == id.provider_id;
    let applied = AppliedSpec::from_annotations(&m.annotations)
        .is_none()
        .then(|| AppliedSpec::of(class, provider_spec));
    if unchanged && applied.is_none() {
        return None;
    }
    Some(IdentityWrite {
        provider_id: (!unchanged).then(|| id.provider_id.clone()),
        node_label,
        priority,
        applied,
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
