//! The one way to add or remove a finalizer, for every kind the controllers
//! keep one on (Machines, MachineClasses, Secrets, MachineSets,
//! MachineDeployments) or remove one from (Nodes).
//!
//! - Adding writes the whole list with the object's resourceVersion as
//!   guard ([`add_body`]): a stale copy answers 409 and the next reconcile,
//!   on the fresh copy, adds it again.
//! - Removing is a JSON patch guarded by the list itself ([`remove_body`]):
//!   a concurrent write elsewhere in the object (a Node's status heartbeat,
//!   a label) is no conflict and the copy may come from a cache; only a
//!   changed list fails the `test` (a conflict for [`crate::is_conflict`]),
//!   and [`remove_retrying_stale`] retries once on a fresh copy.

use super::{version_of, MetaPatch};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::fmt::Debug;

/// Whether `obj` carries `finalizer`.
pub(crate) fn has<K: Resource>(obj: &K, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}

/// The write that adds `finalizer` to `obj` together with `with` (other
/// metadata changes of the same write), guarded by `obj`'s resourceVersion;
/// `None` when `finalizer` is already there.
pub(crate) fn add_body<K: Resource>(
    obj: &K,
    finalizer: &str,
    with: MetaPatch,
) -> Option<MetaPatch> {
    if has(obj, finalizer) {
        return None;
    }
    let mut list = obj.finalizers().to_vec();
    list.push(finalizer.to_string());
    Some(with.finalizers(list).guarded_by(version_of(obj)))
}

/// The JSON patch that removes `finalizer` from `obj`, guarded by `obj`'s
/// finalizer list; `None` when `finalizer` is not there.
pub(crate) fn remove_body<K: Resource>(obj: &K, finalizer: &str) -> Option<Value> {
    if !has(obj, finalizer) {
        return None;
    }
    let now = obj.finalizers().to_vec();
    let kept: Vec<&String> = now.iter().filter(|x| *x != finalizer).collect();
    Some(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": now},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept},
    ]))
}

/// Adds `finalizer` unless present; returns the updated object (`None` when
/// nothing changed). A stale object gives 409 Conflict.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    add_with(api, obj, finalizer, MetaPatch::new()).await
}

/// [`add`], writing the changes of `with` in the same request (they are
/// written only when the finalizer is added).
pub(crate) async fn add_with<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    with: MetaPatch,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match add_body(obj, finalizer, with) {
        Some(write) => write.send(api, &obj.name_any()).await.map(Some),
        None => Ok(None),
    }
}

/// Removes `finalizer` if present; an object that is already gone is fine.
/// Returns the updated object (`None` when nothing changed or it is gone).
pub async fn remove<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Some(body) = remove_body(obj, finalizer) else {
        return Ok(None);
    };
    let patch = Patch::Json::<()>(serde_json::from_value(body).map_err(kube::Error::SerdeError)?);
    match api
        .patch(&obj.name_any(), &PatchParams::default(), &patch)
        .await
    {
        Ok(o) => Ok(Some(o)),
        Err(e) if crate::is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// [`remove`], retried once on a fresh copy when `obj` (from a cache, or
/// read before other writes) no longer matches the server's finalizers.
pub async fn remove_retrying_stale<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match remove(api, obj, finalizer).await {
        Err(e) if crate::is_conflict(&e) => match api.get_opt(&obj.name_any()).await? {
            Some(fresh) => remove(api, &fresh, finalizer).await,
            None => Ok(None),
        },
        other => other,
    }
}
