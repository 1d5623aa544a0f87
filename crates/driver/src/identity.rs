//! The identity a VM carries of the Machine it was created for: the Machine's
//! namespace and UID, recorded on the VM at creation (as tags, labels or
//! metadata, whatever the cloud has) and reported back by `ListMachines`
//! (design: docs/design/safety.md, "VM identity").
//!
//! The orphan collector uses it as durable, exact evidence: a VM that carries
//! another namespace's identity is never collected, one that carries this
//! namespace's is collected once the Machine of that UID is gone (also after
//! a restart: the evidence lives on the VM, not in the controller's memory).
//!
//! Key names follow each cloud's spelling of the reference's cluster tags
//! (`kubernetes.io/cluster/<name>`, `kubernetes.io-cluster-<name>`,
//! `kubernetes-io-cluster-<name>`), under this API's group:
//!
//! | style | clouds | namespace key | UID key |
//! | --- | --- | --- | --- |
//! | [`TagStyle::Slash`] | AWS, Alicloud, local | `machine.sapcloud.io/namespace` | `machine.sapcloud.io/uid` |
//! | [`TagStyle::Dash`] | Azure (no `/` in tag names), OpenStack | `machine.sapcloud.io-namespace` | `machine.sapcloud.io-uid` |
//! | [`TagStyle::Label`] | GCP (label keys: lower case, digits, `-`, `_`; at most 63 characters) | `machine-sapcloud-io-namespace` | `machine-sapcloud-io-uid` |

use mcm_api::Machine;

/// How a cloud spells the identity keys (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagStyle {
    /// `machine.sapcloud.io/namespace`, `machine.sapcloud.io/uid`.
    Slash,
    /// `machine.sapcloud.io-namespace`, `machine.sapcloud.io-uid`.
    Dash,
    /// `machine-sapcloud-io-namespace`, `machine-sapcloud-io-uid` (GCP labels).
    Label,
}

impl TagStyle {
    /// The key that holds the Machine's namespace.
    pub fn namespace_key(self) -> &'static str {
        match self {
            TagStyle::Slash => "machine.sapcloud.io/namespace",
            TagStyle::Dash => "machine.sapcloud.io-namespace",
            TagStyle::Label => "machine-sapcloud-io-namespace",
        }
    }

    /// The key that holds the Machine's UID.
    pub fn uid_key(self) -> &'static str {
        match self {
            TagStyle::Slash => "machine.sapcloud.io/uid",
            TagStyle::Dash => "machine.sapcloud.io-uid",
            TagStyle::Label => "machine-sapcloud-io-uid",
        }
    }

    /// Whether `key` is one of the identity keys (providers that copy a VM's
    /// tags elsewhere may skip them).
    pub fn is_identity_key(self, key: &str) -> bool {
        key == self.namespace_key() || key == self.uid_key()
    }
}

/// The Machine a VM was created for: its namespace and UID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MachineOwner {
    /// The Machine's namespace.
    pub namespace: String,
    /// The Machine's UID.
    pub uid: String,
}

impl MachineOwner {
    /// The identity of a Machine; `None` when it has no namespace or UID (a
    /// stand-in Machine, a test object).
    pub fn of(machine: &Machine) -> Option<MachineOwner> {
        let namespace = machine.metadata.namespace.clone().unwrap_or_default();
        let uid = machine.metadata.uid.clone().unwrap_or_default();
        Self::checked(namespace, uid)
    }

    fn checked(namespace: String, uid: String) -> Option<MachineOwner> {
        let ok = |v: &str| {
            !v.is_empty()
                && v.len() <= 63
                && v.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        (ok(&namespace) && ok(&uid)).then_some(MachineOwner { namespace, uid })
    }

    /// The two key/value pairs to record on the VM, in the cloud's spelling.
    /// Both values fit every cloud's tag syntax (a namespace is a DNS label,
    /// a UID lower-case hex with dashes).
    pub fn tags(&self, style: TagStyle) -> [(String, String); 2] {
        [
            (style.namespace_key().to_string(), self.namespace.clone()),
            (style.uid_key().to_string(), self.uid.clone()),
        ]
    }

    /// The identity read back from a VM's tags (`get` looks a key up); `None`
    /// unless both keys are there with valid values.
    pub fn from_tags<'a>(
        style: TagStyle,
        get: impl Fn(&str) -> Option<&'a str>,
    ) -> Option<MachineOwner> {
        let ns = get(style.namespace_key())?.trim().to_string();
        let uid = get(style.uid_key())?.trim().to_string();
        Self::checked(ns, uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn an_identity_round_trips_through_the_tags_of_every_style() {
        let owner = MachineOwner {
            namespace: "shoot--a--b".into(),
            uid: "0f8b5e4c-3c1e-4d5e-9a7b-1234567890ab".into(),
        };
        for style in [TagStyle::Slash, TagStyle::Dash, TagStyle::Label] {
            let tags: BTreeMap<String, String> = owner.tags(style).into_iter().collect();
            let back = MachineOwner::from_tags(style, |k| tags.get(k).map(String::as_str));
            assert_eq!(back.as_ref(), Some(&owner), "{style:?}");
            assert!(tags.keys().all(|k| style.is_identity_key(k)));
        }
    }

    #[test]
    fn gcp_label_keys_are_valid_label_keys() {
        for k in [TagStyle::Label.namespace_key(), TagStyle::Label.uid_key()] {
            assert!(k.len() <= 63);
            assert!(k
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'));
        }
        assert!(!TagStyle::Dash.namespace_key().contains('/'));
    }

    #[test]
    fn a_partial_or_malformed_identity_is_none() {
        let only_ns: BTreeMap<&str, &str> = [("machine.sapcloud.io/namespace", "ns")]
            .into_iter()
            .collect();
        assert_eq!(
            MachineOwner::from_tags(TagStyle::Slash, |k| only_ns.get(k).copied()),
            None
        );
        let bad: BTreeMap<&str, &str> = [
            ("machine.sapcloud.io/namespace", "NS"),
            ("machine.sapcloud.io/uid", "u"),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            MachineOwner::from_tags(TagStyle::Slash, |k| bad.get(k).copied()),
            None
        );
        assert_eq!(
            MachineOwner::of(&Machine::new("m", Default::default())),
            None
        );
    }
}
