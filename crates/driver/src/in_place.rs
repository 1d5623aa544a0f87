//! The hot-update half of the contract: which providerSpec changes a driver
//! can apply to a running VM ([`crate::Driver::in_place_changes`], a pure
//! check) and the request and answer of [`crate::Driver::update_machine`]
//! (docs/design/hot-update.md).

use crate::RedactedSecret;
use k8s_openapi::api::core::v1::Secret;
use mcm_api::{Machine, MachineClass};
use serde_json::Value;

/// The answer of the in-place check: the changed providerSpec fields, as
/// JSON paths (`tags`, `blockDevices[0].ebs.iops`), split by what the driver
/// can do on the running VM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InPlaceChanges {
    /// Fields UpdateMachine applies to the running VM.
    pub in_place: Vec<String>,
    /// Fields only a new VM can take.
    pub need_replacement: Vec<String>,
}

impl InPlaceChanges {
    /// No field changed.
    pub fn is_empty(&self) -> bool {
        self.in_place.is_empty() && self.need_replacement.is_empty()
    }

    /// Every change can be applied in place (and there is at least one).
    pub fn all_in_place(&self) -> bool {
        !self.in_place.is_empty() && self.need_replacement.is_empty()
    }

    /// The default answer: every changed field needs a replacement.
    pub fn all_need_replacement(fields: Vec<String>) -> InPlaceChanges {
        InPlaceChanges {
            in_place: Vec::new(),
            need_replacement: fields,
        }
    }
}

/// The paths of the fields that differ between two providerSpecs: object
/// keys are followed (`a.b`), an array or scalar that differs is one field
/// (`a.list`), and a key present on one side only is a changed field. Sorted,
/// without duplicates.
pub fn changed_fields(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(String::new(), before, after, &mut out);
    out.sort();
    out.dedup();
    out
}

fn diff(path: String, before: &Value, after: &Value, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys()) {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(child, x, y, out),
                    (Some(Value::Null), None) | (None, Some(Value::Null)) => {}
                    _ => out.push(child),
                }
            }
        }
        (a, b) if a == b => {}
        _ => out.push(if path.is_empty() {
            "<root>".into()
        } else {
            path
        }),
    }
}

/// Request of `UpdateMachine`. `Debug` shows only the secret's keys.
#[derive(Clone)]
pub struct UpdateMachineRequest {
    /// The Machine object.
    pub machine: Machine,
    /// Its MachineClass, with the providerSpec to converge on.
    pub machine_class: MachineClass,
    /// The merged secret (credentials and userdata).
    pub secret: Secret,
    /// The providerSpec the VM was created or last updated with.
    pub last_applied_provider_spec: Value,
}

impl std::fmt::Debug for UpdateMachineRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateMachineRequest")
            .field("machine", &self.machine.metadata.name)
            .field("machine_class", &self.machine_class.metadata.name)
            .field("secret", &RedactedSecret(&self.secret))
            .finish()
    }
}

/// Response of `UpdateMachine`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateMachineResponse {
    /// Opaque provider state, stored in `status.lastKnownState` when not empty.
    pub last_known_state: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changed_fields_follows_objects_and_treats_arrays_as_one_field() {
        let a = json!({"tags": {"a": "1", "b": "2"}, "machineType": "m5", "disks": [1], "x": null});
        let b = json!({"tags": {"a": "1", "b": "3", "c": "4"}, "machineType": "m5", "disks": [2]});
        assert_eq!(changed_fields(&a, &b), vec!["disks", "tags.b", "tags.c"]);
    }

    #[test]
    fn equal_specs_have_no_changed_fields() {
        let a = json!({"tags": {"a": "1"}});
        assert!(changed_fields(&a, &a.clone()).is_empty());
    }

    #[test]
    fn the_default_answer_needs_a_replacement_for_every_field() {
        let c = InPlaceChanges::all_need_replacement(vec!["tags.a".into()]);
        assert!(!c.all_in_place());
        assert!(!c.is_empty());
    }
}
