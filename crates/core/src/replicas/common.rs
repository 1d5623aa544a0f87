//! The label keys, limits, phase questions and controller references of the
//! set logic. The Machine itself is [`crate::machine::MachineView`], the one model shared
//! with the Machine step machines.

use super::*;

/// Label and annotation keys and values used by the MachineSet logic,
/// taken from [`mcm_api::constants`].
pub mod keys {
    use mcm_api::constants as c;
    /// Machine annotation: deletion priority, `"1"` is deleted first, default 3.
    pub const MACHINE_PRIORITY: &str = c::PRIORITY_ANNOTATION;
    /// The priority a machine has without (or with an unparsable) annotation.
    pub const DEFAULT_MACHINE_PRIORITY: i64 = 3;
    /// Machine annotation: RFC 3339 time at which a scaler marked the machine.
    pub const MARKED_FOR_DELETION_TIME: &str = c::MARKED_FOR_DELETION_TIME_ANNOTATION;
    /// MachineDeployment (copied to the new MachineSet) annotation: RFC 3339
    /// time of the last replica change made by a scaler.
    pub const SCALER_CHANGE_TIME: &str = c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION;
    /// MachineSet / MachineDeployment label set by the safety loop.
    pub const FREEZE_LABEL: &str = c::FREEZE_LABEL;
    /// Value of [`FREEZE_LABEL`] meaning "frozen".
    pub const FREEZE_VALUE: &str = c::FREEZE_LABEL_VALUE;
    /// MachineSet label (any value): never create machines (old sets of an in-place rollout).
    pub const SCALE_UP_DISABLED: &str = c::SCALE_UP_DISABLED_LABEL;
    /// Machine label of the in-place update protocol.
    pub const UPDATE_RESULT: &str = c::NODE_UPDATE_RESULT_LABEL;
    /// Value of [`UPDATE_RESULT`] for a machine updated in place.
    pub const UPDATE_RESULT_SUCCESSFUL: &str = c::NODE_UPDATE_RESULT_SUCCESSFUL;
    /// Machine / Node annotation asking for preservation.
    pub const PRESERVE: &str = c::PRESERVE_ANNOTATION;
    /// Machine annotation: the last node preserve value applied.
    pub const LAST_APPLIED_NODE_PRESERVE: &str = c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION;
    /// [`PRESERVE`] value: preserve now.
    pub const PRESERVE_NOW: &str = c::PRESERVE_VALUE_NOW;
    /// [`PRESERVE`] value: preserve once the machine fails.
    pub const PRESERVE_WHEN_FAILED: &str = c::PRESERVE_VALUE_WHEN_FAILED;
    /// [`PRESERVE`] value: preserved by the MachineSet's auto-preservation.
    pub const PRESERVE_AUTO: &str = c::PRESERVE_VALUE_AUTO_PRESERVED;
    /// [`PRESERVE`] value: do not preserve.
    pub const PRESERVE_FALSE: &str = c::PRESERVE_VALUE_FALSE;
    /// MachineSet annotation copied to new machines and overriding `creationTimeout`.
    pub const EFFECTIVE_CREATION_TIMEOUT: &str = c::EFFECTIVE_CREATION_TIMEOUT_ANNOTATION;
    /// The template-hash label written by the MachineDeployment controller.
    pub const TEMPLATE_HASH: &str = c::TEMPLATE_HASH_LABEL;
}

/// At most this many machines are created or deleted in one pass (`BurstReplicas`).
pub const BURST_REPLICAS: usize = 100;
/// The first slow-start batch creates this many machines.
pub const SLOW_START_INITIAL_BATCH_SIZE: usize = 1;
/// How long a recorded expectation is trusted before it is dropped (the reference's 5 min).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// The set controllers' questions about a machine phase
/// ([`MachinePhase`], `status.currentStatus.phase`).
///
/// `MachinePhase::Other` holding a well-known value (only possible when built
/// by hand; parsing normalises) answers like that well-known value.
pub trait PhaseExt {
    /// The rank in the deletion order: lower ranks are deleted first (design:
    /// sets-and-deployments.md, "Deletion order").
    ///
    /// Phases the reference's map does not list (no phase, the in-place
    /// phases) rank 0 there (Go map zero value), i.e. like Terminating. That
    /// is kept: a machine that never got a phase is the cheapest to lose.
    fn deletion_rank(&self) -> u8;

    /// `Available` or `Running`: counts as an available replica (design:
    /// sets-and-deployments.md, "MachineSet status").
    fn is_available(&self) -> bool;

    /// Neither Failed nor Terminating (`IsMachineActive`).
    fn is_active(&self) -> bool;
}

impl PhaseExt for MachinePhase {
    fn deletion_rank(&self) -> u8 {
        match self {
            MachinePhase::Terminating => 0,
            MachinePhase::Failed => 1,
            MachinePhase::CrashLoopBackOff => 2,
            MachinePhase::Unknown => 3,
            MachinePhase::Pending => 4,
            MachinePhase::Available => 5,
            MachinePhase::Running => 6,
            MachinePhase::Other(s) => match MachinePhase::from(s.as_str()) {
                MachinePhase::Other(_) => 0,
                known => known.deletion_rank(),
            },
            MachinePhase::Empty
            | MachinePhase::InPlaceUpdating
            | MachinePhase::InPlaceUpdateSuccessful
            | MachinePhase::InPlaceUpdateFailed => 0,
        }
    }

    fn is_available(&self) -> bool {
        *self == MachinePhase::Available || *self == MachinePhase::Running
    }

    fn is_active(&self) -> bool {
        *self != MachinePhase::Failed && *self != MachinePhase::Terminating
    }
}

/// The controller ownerReference of an object, reduced to what claiming needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControllerRef {
    /// `kind` of the owner.
    pub kind: String,
    /// `name` of the owner.
    pub name: String,
    /// `uid` of the owner.
    pub uid: String,
}

/// The controller ownerReference of an object's metadata.
pub fn controller_ref(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<ControllerRef> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| ControllerRef {
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
}

/// Parses an RFC 3339 time (the format of the scaler annotations).
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s.trim())
        .ok()
        .map(|t| t.with_timezone(&Utc))
}
