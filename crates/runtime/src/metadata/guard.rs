//! The JSON patch (RFC 6902) of a write guarded by the copy it was computed
//! from ([`super::MetaPatch::guarded_by_read`]). Each change is preceded by
//! a `test` of exactly what it relies on, so that only a concurrent change
//! of that refuses it:
//!
//! - a label or annotation: its old value (`null` when it had none); the
//!   other keys of the map are not tested (a controller adding its own
//!   annotation meanwhile is no conflict);
//! - a taint list: each taint removed is tested at the index it had and
//!   removed there (from the highest index down), each taint added is
//!   appended; a taint added or removed after the ones we remove (the node
//!   lifecycle controller's `not-ready`) is no conflict;
//! - anything else (finalizers, ownerReferences, a scalar spec field): its
//!   whole old value, then the new one.
//!
//! A part the copy lacks is tested as `null` and written whole. Design:
//! docs/design/runtime.md, "Metadata writes".

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The operations of one JSON patch, in order.
#[derive(Debug, Default)]
pub(super) struct Ops(Vec<Value>);

impl Ops {
    fn test(&mut self, path: &str, value: Value) {
        self.0
            .push(json!({"op": "test", "path": path, "value": value}));
    }

    fn add(&mut self, path: &str, value: Value) {
        self.0
            .push(json!({"op": "add", "path": path, "value": value}));
    }

    fn remove(&mut self, path: &str) {
        self.0.push(json!({"op": "remove", "path": path}));
    }

    /// The patch body.
    pub(super) fn into_value(self) -> Value {
        Value::Array(self.0)
    }

    /// Sets (`Some`) or removes (`None`) keys of the string map at `path`,
    /// which `read` holds (or not).
    pub(super) fn map(
        &mut self,
        path: &str,
        read: Option<&Value>,
        changes: &BTreeMap<String, Option<String>>,
    ) {
        let Some(Value::Object(old)) = read else {
            let set: Map<String, Value> = changes
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), Value::String(v.clone()?))))
                .collect();
            if !set.is_empty() {
                self.test(path, Value::Null);
                self.add(path, Value::Object(set));
            }
            return;
        };
        for (key, new) in changes {
            let at = format!("{path}/{}", escape(key));
            match (old.get(key), new) {
                (Some(Value::String(o)), Some(n)) if o == n => {}
                (None, None) => {}
                (o, Some(n)) => {
                    self.test(&at, o.cloned().unwrap_or(Value::Null));
                    self.add(&at, Value::String(n.clone()));
                }
                (Some(o), None) => {
                    self.test(&at, o.clone());
                    self.remove(&at);
                }
            }
        }
    }

    /// Makes the list at `path`, which `read` holds (or not), hold the
    /// elements of `new`: removes each old element `new` lacks where it is,
    /// appends each new one.
    pub(super) fn list(&mut self, path: &str, read: Option<&Value>, new: &[Value]) {
        let old = match read {
            Some(Value::Array(old)) if !old.is_empty() => old,
            other => {
                if !new.is_empty() {
                    self.test(path, other.cloned().unwrap_or(Value::Null));
                    self.add(path, Value::Array(new.to_vec()));
                }
                return;
            }
        };
        for (i, o) in old.iter().enumerate().rev() {
            if !new.contains(o) {
                let at = format!("{path}/{i}");
                self.test(&at, o.clone());
                self.remove(&at);
            }
        }
        for n in new.iter().filter(|n| !old.contains(n)) {
            self.add(&format!("{path}/-"), n.clone());
        }
    }

    /// Replaces the value at `path` (which `read` holds, or not) whole.
    pub(super) fn whole(&mut self, path: &str, read: Option<&Value>, new: Value) {
        self.test(path, read.cloned().unwrap_or(Value::Null));
        self.add(path, new);
    }
}

/// `key` as one JSON-pointer token (RFC 6901): `~` is `~0`, `/` is `~1`.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}
