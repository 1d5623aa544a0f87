//! Adoption on a retried create: a create that meets a VM of the machine's
//! name decides, from what the VM carries, whether it is this machine's VM
//! (adopt it) or another's (refuse with a clear error, never create a
//! second VM and never take over a foreign one).
//! Design: docs/design/safety.md, "Adoption on a retried create".
//!
//! | the VM carries | decision |
//! | --- | --- |
//! | this Machine's identity (its UID, and namespace where recorded) | adopt ([`Adopted::Identity`]) |
//! | another Machine's identity | refuse, `FailedPrecondition` naming that Machine |
//! | no identity, but the class's cluster tag (and role tag, where the cloud has one) | adopt ([`Adopted::ClusterTags`]): the Go provider created it for this Machine's name in this cluster, e.g. before a migration |
//! | neither | refuse, `FailedPrecondition`: the name is taken by a VM of no machine of this cluster |
//!
//! Names are unique per Machine within a cluster's namespace, so a VM of the
//! machine's name with this cluster's tags is this machine's VM; the Go
//! providers record no more than that (name and cluster tags).

use crate::{Code, MachineOwner, Status};
use mcm_api::Machine;

/// What a VM of the machine's name carries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Carried {
    /// The identity read from its tags/labels/metadata, if complete.
    pub owner: Option<MachineOwner>,
    /// A Machine UID a provider records apart from [`MachineOwner`] (e.g.
    /// GCP's `mcm-machine-uid` metadata, Azure's UID tag), if any.
    pub uid: Option<String>,
    /// Whether it carries the class's cluster tag (and role tag where the
    /// cloud has one).
    pub cluster_tags: bool,
}

/// Why a VM is adopted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// It carries this Machine's identity (an earlier attempt of ours).
    Identity,
    /// It carries no identity but the class's cluster tags (created by the
    /// reference provider for this Machine's name).
    ClusterTags,
}

impl Adopted {
    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Adopted::Identity => "it carries this machine's identity",
            Adopted::ClusterTags => {
                "it carries no machine identity but this cluster's tags (created by the reference provider)"
            }
        }
    }
}

/// Decides about VM `vm` of `machine`'s name that carries `carried`.
pub fn decide(machine: &Machine, vm: &str, carried: &Carried) -> Result<Adopted, Status> {
    let uid = machine.metadata.uid.as_deref().unwrap_or_default();
    let namespace = machine.metadata.namespace.as_deref().unwrap_or_default();
    let found_uid = carried
        .owner
        .as_ref()
        .map(|o| o.uid.as_str())
        .or(carried.uid.as_deref())
        .filter(|u| !u.is_empty());
    match found_uid {
        Some(found) => {
            let same_namespace = carried
                .owner
                .as_ref()
                .is_none_or(|o| namespace.is_empty() || o.namespace == namespace);
            if !uid.is_empty() && found == uid && same_namespace {
                Ok(Adopted::Identity)
            } else {
                let whose = match &carried.owner {
                    Some(o) => format!("the Machine with UID {} in namespace {}", o.uid, o.namespace),
                    None => format!("the Machine with UID {found}"),
                };
                Err(Status::new(
                    Code::FailedPrecondition,
                    format!(
                        "VM {vm} exists already and belongs to {whose}, not to this machine (UID {uid}); it is not adopted. Delete or rename that VM, or this Machine"
                    ),
                ))
            }
        }
        None if carried.cluster_tags => Ok(Adopted::ClusterTags),
        None => Err(Status::new(
            Code::FailedPrecondition,
            format!(
                "VM {vm} exists already but carries neither this machine's identity nor the class's cluster tags; it is not adopted. Delete or rename that VM, or this Machine"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_api::MachineSpec;

    fn machine() -> Machine {
        let mut m = Machine::new("m-1", MachineSpec::default());
        m.metadata.namespace = Some("shoot--a".into());
        m.metadata.uid = Some("uid-1".into());
        m
    }

    fn owner(ns: &str, uid: &str) -> Option<MachineOwner> {
        Some(MachineOwner {
            namespace: ns.into(),
            uid: uid.into(),
        })
    }

    #[test]
    fn a_vm_with_this_machines_identity_is_adopted_whatever_its_tags() {
        let c = Carried {
            owner: owner("shoot--a", "uid-1"),
            ..Default::default()
        };
        assert_eq!(decide(&machine(), "m-1", &c), Ok(Adopted::Identity));
        let legacy = Carried {
            uid: Some("uid-1".into()),
            ..Default::default()
        };
        assert_eq!(decide(&machine(), "m-1", &legacy), Ok(Adopted::Identity));
    }

    #[test]
    fn a_vm_of_another_machine_is_refused_even_with_this_clusters_tags() {
        for c in [
            Carried {
                owner: owner("shoot--a", "uid-2"),
                cluster_tags: true,
                ..Default::default()
            },
            Carried {
                owner: owner("shoot--b", "uid-1"),
                cluster_tags: true,
                ..Default::default()
            },
            Carried {
                uid: Some("uid-2".into()),
                cluster_tags: true,
                ..Default::default()
            },
        ] {
            let e = decide(&machine(), "m-1", &c).unwrap_err();
            assert_eq!(e.code, Code::FailedPrecondition, "{c:?}");
            assert!(
                e.message.contains("belongs to the Machine with UID"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn a_vm_without_identity_is_adopted_by_cluster_tags_and_refused_without() {
        let tagged = Carried {
            cluster_tags: true,
            ..Default::default()
        };
        assert_eq!(decide(&machine(), "m-1", &tagged), Ok(Adopted::ClusterTags));
        let e = decide(&machine(), "m-1", &Carried::default()).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(e.message.contains("neither"), "{}", e.message);
    }

    #[test]
    fn a_machine_without_uid_adopts_nothing_that_carries_an_identity() {
        let mut m = machine();
        m.metadata.uid = None;
        let c = Carried {
            owner: owner("shoot--a", "uid-1"),
            ..Default::default()
        };
        assert!(decide(&m, "m-1", &c).is_err());
    }
}
