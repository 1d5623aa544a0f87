//! Typed keys of the objects the controllers keep per-object state for
//! (backoff, creation holds, released finalizers, cloud turns, drains).
//! A key says its kind, so a map holding keys of several kinds never parses
//! a string back to learn which cache to ask.

use kube::ResourceExt;
use std::fmt;

/// The kinds with per-object state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A Machine.
    Machine,
    /// A MachineSet.
    MachineSet,
    /// A MachineDeployment.
    MachineDeployment,
    /// A MachineClass.
    MachineClass,
}

/// One object: its kind, namespace and name. Displayed as
/// `namespace/name`, the workqueue key of the reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// The kind.
    pub(crate) kind: Kind,
    /// The namespace.
    pub(crate) namespace: String,
    /// The name.
    pub(crate) name: String,
}

impl ObjectKey {
    /// The key of an object of `kind`.
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        ObjectKey {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The key of a Machine.
    pub(crate) fn machine(m: &mcm_api::Machine) -> Self {
        Self::new(
            Kind::Machine,
            &m.namespace().unwrap_or_default(),
            &m.name_any(),
        )
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_kinds_with_one_name_are_different_keys() {
        let m = ObjectKey::new(Kind::Machine, "ns", "a");
        let s = ObjectKey::new(Kind::MachineSet, "ns", "a");
        assert_ne!(m, s);
        assert_eq!(m.to_string(), "ns/a");
        assert_eq!(s.to_string(), "ns/a");
    }
}
