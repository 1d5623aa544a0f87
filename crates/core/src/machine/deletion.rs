//! Deletion decisions that depend on whether a VM can exist for the machine.
//!
//! A Machine whose creation never reached the cloud (e.g. its class cannot be
//! decoded, so GetMachineStatus answers `InvalidArgument` for ever) must still
//! be deletable, and a Machine whose VM may exist must never lose its
//! finalizer while the provider cannot look the VM up. [`VmRecord`] is what
//! the Machine itself records about that; the `after_*` functions here turn
//! the provider's answers into the next deletion step with it. See
//! `docs/design/machine.md`, "Deletion".

use super::{delete_op, markers, OpState, Transition};
use mcm_api::Machine;
use mcm_driver::{Code, GetMachineStatusResponse, Status};

/// The annotation in which mcm-rs records whether CreateMachine was ever
/// called for a Machine: [`CLOUD_CREATE_NEVER`] from the first reconcile,
/// [`CLOUD_CREATE_ATTEMPTED`] written *before* the first CreateMachine call.
pub const CLOUD_CREATE_ANNOTATION: &str = "machine.sapcloud.io/mcm-rs-cloud-create";
/// CreateMachine was never called for this machine.
pub const CLOUD_CREATE_NEVER: &str = "never";
/// CreateMachine was called (at least once) for this machine.
pub const CLOUD_CREATE_ATTEMPTED: &str = "attempted";

/// What a Machine records about whether a VM may exist for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmRecord {
    /// It has a providerID or a node label: a VM was made for it.
    HasVm,
    /// CreateMachine was called but no providerID was persisted: a VM may exist.
    CreateAttempted,
    /// mcm-rs recorded the machine from its first reconcile and never called
    /// CreateMachine: no VM can exist.
    NeverCreated,
    /// Nothing recorded (a Machine the Go controller or an older mcm-rs
    /// handled): a VM may exist.
    Unknown,
}

impl VmRecord {
    /// What the Machine object records.
    pub fn of(m: &Machine) -> VmRecord {
        let node = m
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(mcm_api::constants::NODE_LABEL))
            .is_some_and(|n| !n.is_empty());
        if !m.spec.provider_id.trim().is_empty() || node {
            return VmRecord::HasVm;
        }
        match m
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLOUD_CREATE_ANNOTATION))
            .map(String::as_str)
        {
            Some(CLOUD_CREATE_NEVER) => VmRecord::NeverCreated,
            Some(CLOUD_CREATE_ATTEMPTED) => VmRecord::CreateAttempted,
            _ => VmRecord::Unknown,
        }
    }

    /// Whether no VM can exist for the machine, so its deletion may finish
    /// without the provider.
    pub fn no_vm_possible(self) -> bool {
        self == VmRecord::NeverCreated
    }

    /// Why a VM may exist (for status texts).
    pub fn why_a_vm_may_exist(self) -> &'static str {
        match self {
            VmRecord::HasVm => "the machine has a providerID or node, so its VM may still exist",
            VmRecord::CreateAttempted => {
                "CreateMachine was called for this machine earlier (the class may have been valid then), so a VM may exist"
            }
            VmRecord::NeverCreated => "no VM was ever created for this machine",
            VmRecord::Unknown => {
                "the machine does not record whether a VM was ever created for it, so one may exist"
            }
        }
    }
}

/// Whether the first reconcile should record [`CLOUD_CREATE_NEVER`]: a fresh
/// machine (no finalizer yet, no providerID, no node, no phase, no record),
/// not being deleted. A machine that already has the finalizer was seen
/// before (by the Go controller, or an mcm-rs without this record) and is
/// left [`VmRecord::Unknown`].
pub fn record_never_created(m: &Machine) -> bool {
    let fresh = !m
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == mcm_api::constants::MCM_FINALIZER));
    let phase_empty = m
        .status
        .as_ref()
        .is_none_or(|s| s.current_status.phase.is_empty());
    fresh
        && phase_empty
        && m.metadata.deletion_timestamp.is_none()
        && VmRecord::of(m) == VmRecord::Unknown
        && !m
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(CLOUD_CREATE_ANNOTATION))
}

/// Whether the runtime must record [`CLOUD_CREATE_ATTEMPTED`] before calling
/// CreateMachine (it is not recorded yet).
pub fn must_record_create_attempt(m: &Machine) -> bool {
    m.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CLOUD_CREATE_ANNOTATION))
        .map(String::as_str)
        != Some(CLOUD_CREATE_ATTEMPTED)
}

/// The deletion of a machine that never had a VM skips drain and VM deletion
/// and goes on to the node and finalizer steps. `why` says how the provider
/// (or the machine's inputs) answered.
pub fn no_vm_ever_created(why: &str) -> Transition {
    delete_op(
        format!(
            "No VM was ever created for this machine (CreateMachine was never called; {why}). Skipping drain and VM deletion. {}",
            markers::INITIATE_NODE_DELETION
        ),
        OpState::Processing,
    )
}

fn failed_with_code(description: String, e: &Status) -> Transition {
    let mut t = delete_op(description, OpState::Failed);
    t.operation.error_code = Some(e.code.name());
    t
}

/// Step GetVmStatus: the next operation, from whether there is a target
/// cluster, a node label, else the GetMachineStatus answer, and what the
/// machine records about its VM.
///
/// An error other than NotFound / Unimplemented / Uninitialized means the
/// provider cannot look the VM up (e.g. `InvalidArgument`: the class cannot
/// be decoded). For a machine whose creation never reached the cloud that is
/// no obstacle: the deletion skips to the node step. Otherwise the VM may
/// exist: the step fails with a text saying what to fix and is retried with
/// backoff (the reference gave up "without retry" here, for ever).
pub fn after_get_vm_status(
    target_cluster: bool,
    has_node: bool,
    status: Option<&Result<GetMachineStatusResponse, Status>>,
    record: VmRecord,
) -> Transition {
    use markers::*;
    if !target_cluster {
        return delete_op(
            format!("Running without target cluster, skipping node drain and volume attachment deletion. {INITIATE_VM_DELETION}"),
            OpState::Processing,
        );
    }
    if has_node {
        return delete_op(INITIATE_DRAIN.to_string(), OpState::Processing);
    }
    match status {
        None | Some(Ok(_)) => delete_op(INITIATE_DRAIN.to_string(), OpState::Processing),
        Some(Err(e)) => match e.code {
            Code::Unimplemented => delete_op(INITIATE_DRAIN.to_string(), OpState::Processing),
            Code::NotFound => delete_op(
                format!("VM was not found at provider. Moving forward to node drain. {INITIATE_DRAIN}"),
                OpState::Processing,
            ),
            Code::Uninitialized => delete_op(
                format!("VM instance was not initialized. Moving forward to node drain. {INITIATE_DRAIN}"),
                OpState::Processing,
            ),
            _ if record.no_vm_possible() => {
                no_vm_ever_created(&format!("the provider answered: {e}"))
            }
            c if c.is_transient() => failed_with_code(
                format!("Error occurred with decoding machine error status while getting VM status, aborting with retry. {GET_VM_STATUS}"),
                e,
            ),
            _ => failed_with_code(
                format!(
                    "Cannot tell whether the VM exists: getting its status failed: {e}. Deletion is blocked because {}; fix the MachineClass or its Secret so that the provider can look the VM up. Retrying with backoff. {GET_VM_STATUS}",
                    record.why_a_vm_may_exist()
                ),
                e,
            ),
        },
    }
}

/// Step DeleteVm: the next operation from DeleteMachine's answer. Every
/// failure is retried with backoff ([`DeletionFlow`] decides it).
///
/// A machine whose creation never reached the cloud goes on even when the
/// provider refuses (nothing to delete). Any other failure keeps the machine
/// (and its finalizer): the VM may exist; the text says so.
pub fn after_delete_vm<T>(result: &Result<T, Status>, record: VmRecord) -> Transition {
    use markers::*;
    match result {
        Ok(_) => delete_op(
            format!("VM deletion was successful. {INITIATE_NODE_DELETION}"),
            OpState::Processing,
        ),
        Err(e) if e.code == Code::NotFound => delete_op(
            format!("VM not found. Continuing deletion flow. {INITIATE_NODE_DELETION}"),
            OpState::Processing,
        ),
        Err(e) if record.no_vm_possible() => {
            no_vm_ever_created(&format!("DeleteMachine answered: {e}"))
        }
        Err(e) if e.code.is_transient() => failed_with_code(
            format!("VM deletion failed due to - {e}. However, will re-try in the next resync. {INITIATE_VM_DELETION}"),
            e,
        ),
        Err(e) => failed_with_code(
            format!(
                "VM deletion failed due to - {e}. Deletion is blocked because {}; fix the MachineClass or its Secret (or remove the VM by hand). Retrying with backoff. {INITIATE_VM_DELETION}",
                record.why_a_vm_may_exist()
            ),
            e,
        ),
    }
}

mod flow;
pub use flow::*;

#[cfg(test)]
mod tests;
