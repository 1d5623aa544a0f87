//! Every status write of the runtime, as typed values (design:
//! docs/design/runtime.md, "Status writes").
//!
//! A status change is a value built from the API types ([`mcm_api`] for
//! Machines, MachineSets and MachineDeployments, `k8s-openapi` for Nodes)
//! and serialized with serde into the request body; no controller writes a
//! status body by hand. A field a change leaves alone is absent from the
//! patch, a field it removes is written as `null` because the type says so
//! ([`Field::Remove`]).
//!
//! - [`machine`]: a Machine's status changes, their staging and the write;
//! - [`machine_set`], [`machine_deployment`]: conditions (merge patch) and
//!   whole-status replacements;
//! - [`node`]: Node conditions (strategic merge patch, merged by type).

pub(crate) mod machine;
pub(crate) mod machine_deployment;
pub(crate) mod machine_set;
pub(crate) mod node;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};

/// One field of a merge patch: left alone, set, or removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum Field<T> {
    /// Absent from the patch: the stored value stays.
    #[default]
    Keep,
    /// Written: the stored value becomes this one.
    Set(T),
    /// Written as `null`: the stored value is removed.
    Remove,
}

impl<T> Field<T> {
    /// True when the field is absent from the patch (for `skip_serializing_if`).
    pub(crate) fn is_keep(&self) -> bool {
        matches!(self, Field::Keep)
    }

    /// What writing `self` and then `later` leaves: the later write wins
    /// unless it leaves the field alone.
    pub(crate) fn then(self, later: Field<T>) -> Field<T> {
        match later {
            Field::Keep => self,
            written => written,
        }
    }

    /// Applies the field to a stored optional value, as the API server does.
    pub(crate) fn apply_to(&self, stored: &mut Option<T>)
    where
        T: Clone,
    {
        match self {
            Field::Keep => {}
            Field::Set(v) => *stored = Some(v.clone()),
            Field::Remove => *stored = None,
        }
    }
}

impl<T: Serialize> Serialize for Field<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Set(v) => v.serialize(serializer),
            // `Keep` is skipped by every field that holds one (`is_keep`).
            Field::Keep | Field::Remove => serializer.serialize_none(),
        }
    }
}

/// The body of a status patch: `{"status": ...}`, with a resourceVersion
/// precondition when `guard` is given.
#[derive(Serialize, Debug)]
struct StatusPatch<'a, S> {
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Guard<'a>>,
    status: &'a S,
}

/// `metadata.resourceVersion` of a guarded patch: the write fails with a
/// conflict when the object changed since it was read.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct Guard<'a> {
    resource_version: &'a str,
}

impl<'a, S: Serialize> StatusPatch<'a, S> {
    fn new(status: &'a S, guard: Option<&'a str>) -> Self {
        StatusPatch {
            metadata: guard.map(|resource_version| Guard { resource_version }),
            status,
        }
    }
}

/// Merge-patches the status subresource with `status`.
async fn merge_patch<K, S>(
    api: &Api<K>,
    name: &str,
    status: &S,
    guard: Option<&str>,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + std::fmt::Debug,
{
    let body = StatusPatch::new(status, guard);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
}

/// Replaces the whole status of `obj` with what `set` puts there (PUT on
/// /status, guarded by the resourceVersion `obj` was read at).
async fn replace<K>(api: &Api<K>, obj: &K, set: impl FnOnce(&mut K)) -> Result<K, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let mut written = obj.clone();
    set(&mut written);
    api.replace_status(&obj.name_any(), &PostParams::default(), &written)
        .await
}

/// The written object, or `None` when it was already gone (HTTP 404): for
/// writes that have nothing left to do then.
pub(crate) fn unless_gone<K>(written: Result<K, kube::Error>) -> Result<Option<K>, kube::Error> {
    match written {
        Ok(obj) => Ok(Some(obj)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// RFC 7386: what the API server does with a merge patch.
    pub(crate) fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
        let serde_json::Value::Object(p) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = serde_json::Value::Object(serde_json::Map::new());
        }
        if let serde_json::Value::Object(t) = target {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        }
    }

    #[derive(Serialize)]
    struct OneField {
        #[serde(skip_serializing_if = "Field::is_keep")]
        f: Field<u8>,
    }

    #[test]
    fn a_kept_field_is_absent_a_removed_one_is_null() {
        let body = |f| serde_json::to_value(OneField { f }).unwrap();
        assert_eq!(body(Field::Keep), json!({}));
        assert_eq!(body(Field::Set(3)), json!({"f": 3}));
        assert_eq!(body(Field::Remove), json!({"f": null}));
    }

    #[test]
    fn a_later_write_wins_unless_it_keeps_the_field() {
        assert_eq!(Field::Set(1).then(Field::Keep), Field::Set(1));
        assert_eq!(Field::Set(1).then(Field::Remove), Field::Remove);
        assert_eq!(Field::Remove.then(Field::Set(2)), Field::Set(2));
        assert_eq!(Field::<u8>::Keep.then(Field::Keep), Field::Keep);
    }

    #[test]
    fn a_guarded_patch_carries_the_resource_version() {
        let status = json!({"x": 1});
        let body = |guard| serde_json::to_value(StatusPatch::new(&status, guard)).unwrap();
        assert_eq!(body(None), json!({"status": {"x": 1}}));
        assert_eq!(
            body(Some("42")),
            json!({"metadata": {"resourceVersion": "42"}, "status": {"x": 1}})
        );
    }
}
