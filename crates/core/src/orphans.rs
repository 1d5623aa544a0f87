//! Which VMs the orphan collector deletes (design: docs/design/safety.md,
//! "Orphan-VM collection").
//!
//! The runtime lists every class's VMs (`ListMachines`) and the namespace's
//! Machines, and asks [`judge`] about each VM; [`OrphanTracker::due`] says
//! which orphans have been seen for the whole grace period. The rules, in
//! order:
//!
//! 1. A VM that carries a live Machine's identity is never collected,
//!    whatever its class says now: the Machine's providerID (compared
//!    normalized, or by the VM's canonical key), the Machine's UID recorded on
//!    the VM at creation, or the Machine's name. This includes a preserved
//!    Machine's VM and a VM listed under a providerID that the class's
//!    current fields (an edited location or region) would build differently.
//! 2. A VM that carries another namespace's identity is never collected.
//! 3. A VM that carries this namespace's identity is collected once no
//!    Machine of that UID (and none of its name) exists.
//! 4. A VM without identity (made out of band, by the Go controller, or
//!    before VMs carried one) is collected as the reference collects it: it is
//!    listed for the class's cluster and role tags and no Machine of its name
//!    exists.

use mcm_api::constants as c;
use mcm_api::{Machine, MachinePhase};
use mcm_driver::MachineOwner;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A providerID in a form that compares equal for the same VM: trimmed,
/// lower-case, without trailing slashes; an AWS providerID is reduced to its
/// instance ID, so `aws:///<region>/<id>`, `aws:////<id>` and the Node's
/// `aws:///<zone>/<id>` name the same VM.
pub fn normalize_provider_id(provider_id: &str) -> String {
    let p = provider_id
        .trim()
        .trim_end_matches('/')
        .to_ascii_lowercase();
    if let Some(rest) = p.strip_prefix("aws://") {
        if let Some(id) = rest.rsplit('/').next().filter(|id| id.starts_with("i-")) {
            return format!("aws:///{id}");
        }
    }
    p
}

/// One VM as a class's ListMachines reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedVm {
    /// The MachineClass whose ListMachines listed it.
    pub class: String,
    /// Its providerID, as the provider built it (possibly from the class's
    /// current fields).
    pub provider_id: String,
    /// Its name (the machine name it was created for).
    pub name: String,
    /// The provider's canonical key for it (instance ID, resource ID), which
    /// no class field changes.
    pub instance_key: String,
    /// The identity recorded on it at creation.
    pub owner: Option<MachineOwner>,
}

/// Why a listed VM is kept, or that it is an orphan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanVerdict {
    /// A Machine has its providerID (or its canonical key), or its UID.
    Owned,
    /// The Machine it belongs to (by providerID, UID or name) is preserved.
    Preserved,
    /// The Machine of its name is still being created, or is being deleted
    /// (its own deletion deletes the VM).
    MachineBusy,
    /// A live Machine of its name exists (with another or no providerID yet,
    /// another class, a providerID the class now builds differently): it may
    /// be that Machine's VM, so it is never collected.
    LiveMachineName,
    /// It carries another namespace's identity. Never collected.
    OtherNamespace,
    /// It carries this namespace's identity and its Machine (that UID) is gone.
    MachineGone,
    /// It carries no identity and no Machine of its name exists: collected
    /// as the reference collects it.
    NoIdentity,
}

impl OrphanVerdict {
    /// Whether the VM is collected (after the grace period).
    pub fn is_orphan(self) -> bool {
        matches!(self, OrphanVerdict::MachineGone | OrphanVerdict::NoIdentity)
    }
}

/// Whether a Machine is preserved: a preserve annotation other than `false`,
/// or a preservation in progress (`status.currentStatus.preserveExpiryTime`).
pub fn is_preserved(m: &Machine) -> bool {
    let annotated = m
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(c::PRESERVE_ANNOTATION))
        .is_some_and(|v| !v.trim().is_empty() && v.trim() != c::PRESERVE_VALUE_FALSE);
    let expiry = m
        .status
        .as_ref()
        .is_some_and(|s| s.current_status.preserve_expiry_time.is_some());
    annotated || expiry
}

fn is_busy(m: &Machine) -> bool {
    let phase = m
        .status
        .as_ref()
        .map(|s| s.current_status.phase.clone())
        .unwrap_or_default();
    matches!(phase, MachinePhase::Empty | MachinePhase::CrashLoopBackOff)
        || m.metadata.deletion_timestamp.is_some()
}

/// Judges one VM listed for a class of `namespace` against the namespace's
/// Machines (the rules of this module's documentation).
pub fn judge(vm: &ListedVm, machines: &[Machine], namespace: &str) -> OrphanVerdict {
    let pid = normalize_provider_id(&vm.provider_id);
    let key = normalize_provider_id(&vm.instance_key);
    let by_provider_id = machines.iter().find(|m| {
        let mp = m.spec.provider_id.trim();
        !mp.is_empty() && {
            let mp = normalize_provider_id(mp);
            mp == pid || (!key.is_empty() && mp == key)
        }
    });
    let by_uid = vm
        .owner
        .as_ref()
        .filter(|o| o.namespace == namespace)
        .and_then(|o| {
            machines
                .iter()
                .find(|m| m.metadata.uid.as_deref() == Some(o.uid.as_str()))
        });
    if let Some(m) = by_provider_id.or(by_uid) {
        return if is_preserved(m) {
            OrphanVerdict::Preserved
        } else {
            OrphanVerdict::Owned
        };
    }
    if let Some(m) = machines
        .iter()
        .find(|m| m.metadata.name.as_deref() == Some(vm.name.as_str()))
    {
        return if is_preserved(m) {
            OrphanVerdict::Preserved
        } else if is_busy(m) {
            OrphanVerdict::MachineBusy
        } else {
            OrphanVerdict::LiveMachineName
        };
    }
    match &vm.owner {
        Some(o) if o.namespace != namespace => OrphanVerdict::OtherNamespace,
        Some(_) => OrphanVerdict::MachineGone,
        None => OrphanVerdict::NoIdentity,
    }
}

/// Remembers since when each orphan candidate (by its canonical key) has
/// been seen orphaned, continuously.
#[derive(Debug, Default)]
pub struct OrphanTracker {
    first_seen: HashMap<String, Instant>,
}

impl OrphanTracker {
    /// Records the current candidates (canonical keys) and returns those
    /// orphaned for at least `grace`. A candidate that is not seen in a pass
    /// starts over.
    pub fn due(
        &mut self,
        candidates: &HashSet<String>,
        grace: Duration,
        now: Instant,
    ) -> Vec<String> {
        self.first_seen.retain(|k, _| candidates.contains(k));
        let mut due = Vec::new();
        for c in candidates {
            let seen = *self.first_seen.entry(c.clone()).or_insert(now);
            if now.duration_since(seen) >= grace {
                due.push(c.clone());
            }
        }
        due.sort();
        due
    }
}

#[cfg(test)]
mod tests;
