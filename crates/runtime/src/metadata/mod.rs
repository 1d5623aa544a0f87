//! Every write of an object's metadata (labels, annotations, finalizers,
//! ownerReferences) and of the few spec fields the controllers own on
//! objects they do not otherwise write (a Machine's `providerID`, a
//! MachineSet's `replicas`, a Node's `taints` and `unschedulable`), as status
//! writes go through `status/` (design: docs/design/runtime.md, "Metadata
//! writes").
//!
//! A controller says what changes with a [`MetaPatch`]; the module builds
//! the JSON merge patch (RFC 7386) and sends it. A key removed is written as
//! `null`; a field left alone is absent. [`MetaPatch::guarded_by`] adds the
//! resourceVersion the change was computed from, so that the API server
//! refuses it (409) when the object moved on; a write that is right
//! whatever the object holds now carries none.
//!
//! A Node moves on all the time (its kubelet's status heartbeats, the node
//! lifecycle controller's taints), so a Node write is guarded by what it
//! was computed from instead: [`MetaPatch::guarded_by_read`] sends a JSON
//! patch (RFC 6902) that `test`s, against the copy it read, exactly what
//! each change relies on (a key's old value, a removed taint where it was;
//! see [`guard`]) before making it. Only a change of those fails it (422,
//! which [`crate::is_conflict`] counts as a conflict). Finalizers have their
//! own functions ([`finalizer`]): adding one is a guarded merge patch of the
//! whole list, removing one a JSON patch guarded by the list itself.

pub mod finalizer;
mod guard;
#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// One metadata write (and the spec fields listed in the module docs), as a
/// value: built with the setters, sent with [`MetaPatch::send`].
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct MetaPatch {
    labels: BTreeMap<String, Option<String>>,
    annotations: BTreeMap<String, Option<String>>,
    finalizers: Option<Vec<String>>,
    owner_references: Option<Vec<OwnerReference>>,
    guard: Guard,
    spec: BTreeMap<&'static str, Value>,
}

/// What a write is guarded by.
#[derive(Clone, Debug, Default, PartialEq)]
enum Guard {
    /// Nothing: the write is right whatever the object holds.
    #[default]
    None,
    /// The object's resourceVersion (a merge patch that answers 409).
    Version(String),
    /// The object as read (its JSON): what each change relies on must
    /// still be there (a JSON patch that answers 422 otherwise).
    Read(Value),
}

impl MetaPatch {
    /// A write that changes nothing yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Sets label `key` to `value`.
    pub(crate) fn label(mut self, key: &str, value: impl Into<String>) -> Self {
        self.labels.insert(key.to_string(), Some(value.into()));
        self
    }

    /// Removes label `key` (written as `null`).
    pub(crate) fn remove_label(mut self, key: &str) -> Self {
        self.labels.insert(key.to_string(), None);
        self
    }

    /// Sets (`Some`) or removes (`None`) label `key`.
    pub(crate) fn label_opt(mut self, key: &str, value: Option<impl Into<String>>) -> Self {
        self.labels.insert(key.to_string(), value.map(Into::into));
        self
    }

    /// Sets annotation `key` to `value`.
    pub(crate) fn annotation(mut self, key: &str, value: impl Into<String>) -> Self {
        self.annotations.insert(key.to_string(), Some(value.into()));
        self
    }

    /// Removes annotation `key` (written as `null`).
    pub(crate) fn remove_annotation(mut self, key: &str) -> Self {
        self.annotations.insert(key.to_string(), None);
        self
    }

    /// Sets (`Some`) or removes (`None`) annotation `key`.
    pub(crate) fn annotation_opt(mut self, key: &str, value: Option<impl Into<String>>) -> Self {
        self.annotations
            .insert(key.to_string(), value.map(Into::into));
        self
    }

    /// Sets or removes every annotation of `changes`.
    pub(crate) fn annotations<'a, V: Into<String>>(
        mut self,
        changes: impl IntoIterator<Item = (&'a str, Option<V>)>,
    ) -> Self {
        for (k, v) in changes {
            self.annotations.insert(k.to_string(), v.map(Into::into));
        }
        self
    }

    /// Replaces the finalizer list (use [`finalizer::add`] /
    /// [`finalizer::remove`] for one finalizer; this is for a write that
    /// adds one together with other changes).
    pub(crate) fn finalizers(mut self, finalizers: Vec<String>) -> Self {
        self.finalizers = Some(finalizers);
        self
    }

    /// Replaces the ownerReferences; an empty list removes the field
    /// (written as `null`).
    pub(crate) fn owner_references(mut self, refs: Vec<OwnerReference>) -> Self {
        self.owner_references = Some(refs);
        self
    }

    /// Guards the write by the resourceVersion it was computed from (no
    /// guard for `None`): a changed object answers 409 Conflict.
    pub(crate) fn guarded_by(mut self, resource_version: Option<String>) -> Self {
        self.guard = resource_version.map_or(Guard::None, Guard::Version);
        self
    }

    /// Guards the write by what it relies on in `read` (the copy it was
    /// computed from): sent as a JSON patch that tests it before each change
    /// ([`guard`]). A change elsewhere in the object (a Node's status,
    /// another key, a taint after the ones removed) is no conflict; a change
    /// of what is tested answers 422, a conflict for [`crate::is_conflict`].
    /// For Nodes (their JSON always has `metadata` and `spec`). Falls back to
    /// `read`'s resourceVersion if it cannot be serialized.
    pub(crate) fn guarded_by_read<K: Resource + Serialize>(mut self, read: &K) -> Self {
        self.guard = match serde_json::to_value(read) {
            Ok(read) => Guard::Read(read),
            Err(_) => version_of(read).map_or(Guard::None, Guard::Version),
        };
        self
    }

    /// Sets a Machine's `spec.providerID`.
    pub(crate) fn provider_id(mut self, id: impl Into<String>) -> Self {
        self.spec.insert("providerID", Value::String(id.into()));
        self
    }

    /// Sets a MachineSet's `spec.replicas`.
    pub(crate) fn replicas(mut self, replicas: i32) -> Self {
        self.spec.insert("replicas", json!(replicas));
        self
    }

    /// Replaces a Node's `spec.taints`.
    pub(crate) fn taints(mut self, taints: Vec<Taint>) -> Self {
        self.spec.insert("taints", json!(taints));
        self
    }

    /// Sets a Node's `spec.unschedulable` (cordon, uncordon).
    pub(crate) fn unschedulable(mut self, on: bool) -> Self {
        self.spec.insert("unschedulable", Value::Bool(on));
        self
    }

    /// Whether the write changes nothing (a guard alone changes nothing).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.labels.is_empty()
            && self.annotations.is_empty()
            && self.finalizers.is_none()
            && self.owner_references.is_none()
            && self.spec.is_empty()
    }

    /// The merge-patch body.
    pub(crate) fn body(&self) -> Value {
        let keys = |m: &BTreeMap<String, Option<String>>| -> Value {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
        };
        let mut meta = Map::new();
        if !self.labels.is_empty() {
            meta.insert("labels".into(), keys(&self.labels));
        }
        if !self.annotations.is_empty() {
            meta.insert("annotations".into(), keys(&self.annotations));
        }
        if let Some(f) = &self.finalizers {
            meta.insert("finalizers".into(), json!(f));
        }
        if let Some(refs) = &self.owner_references {
            let value = if refs.is_empty() {
                Value::Null
            } else {
                json!(refs)
            };
            meta.insert("ownerReferences".into(), value);
        }
        if let Guard::Version(rv) = &self.guard {
            meta.insert("resourceVersion".into(), json!(rv));
        }
        let mut body = Map::new();
        if !meta.is_empty() {
            body.insert("metadata".into(), Value::Object(meta));
        }
        if !self.spec.is_empty() {
            let spec = self.spec.iter().map(|(k, v)| (k.to_string(), v.clone()));
            body.insert("spec".into(), Value::Object(spec.collect()));
        }
        Value::Object(body)
    }

    /// The JSON-patch body of a write guarded by what it read (`guard`).
    fn json_patch(&self, read: &Value) -> Value {
        let mut ops = guard::Ops::default();
        if !self.labels.is_empty() {
            let path = "/metadata/labels";
            ops.map(path, read.pointer(path), &self.labels);
        }
        if !self.annotations.is_empty() {
            let path = "/metadata/annotations";
            ops.map(path, read.pointer(path), &self.annotations);
        }
        if let Some(f) = &self.finalizers {
            let path = "/metadata/finalizers";
            ops.whole(path, read.pointer(path), json!(f));
        }
        if let Some(refs) = &self.owner_references {
            let path = "/metadata/ownerReferences";
            ops.whole(path, read.pointer(path), json!(refs));
        }
        for (field, value) in &self.spec {
            let path = format!("/spec/{field}");
            match value {
                Value::Array(list) if *field == "taints" => {
                    ops.list(&path, read.pointer(&path), list);
                }
                _ => ops.whole(&path, read.pointer(&path), value.clone()),
            }
        }
        ops.into_value()
    }

    /// The request: a merge patch, or the JSON patch of a write guarded by
    /// the parts it read.
    fn request(&self) -> Result<Patch<Value>, kube::Error> {
        match &self.guard {
            Guard::Read(read) => serde_json::from_value(self.json_patch(read))
                .map(Patch::Json)
                .map_err(kube::Error::SerdeError),
            Guard::None | Guard::Version(_) => Ok(Patch::Merge(self.body())),
        }
    }

    /// Sends the write to object `name` and answers the object as written.
    pub(crate) async fn send<K>(&self, api: &Api<K>, name: &str) -> Result<K, kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        api.patch(name, &PatchParams::default(), &self.request()?)
            .await
    }

    /// [`MetaPatch::send`], where an object that is gone is no error (`None`).
    pub(crate) async fn send_unless_gone<K>(
        &self,
        api: &Api<K>,
        name: &str,
    ) -> Result<Option<K>, kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        match self.send(api, name).await {
            Ok(o) => Ok(Some(o)),
            Err(e) if crate::is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The resourceVersion of `obj`, for [`MetaPatch::guarded_by`].
pub(crate) fn version_of<K: Resource>(obj: &K) -> Option<String> {
    obj.meta().resource_version.clone()
}
