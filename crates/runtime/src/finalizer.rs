//! Adding and removing finalizers with resourceVersion-guarded merge patches,
//! shared by every controller (Machines, MachineClasses, Secrets, Nodes, sets).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::fmt::Debug;

/// Whether `obj` carries `finalizer`.
pub fn has<K: Resource>(obj: &K, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}

async fn write<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
}

/// Adds `finalizer` unless present; returns the updated object (`None` when
/// nothing changed). A stale object gives 409 Conflict.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if has(obj, finalizer) {
        return Ok(None);
    }
    let mut f = obj.finalizers().to_vec();
    f.push(finalizer.to_string());
    write(api, obj, f).await.map(Some)
}

/// Removes `finalizer` if present; an object that is already gone is fine.
/// Returns the updated object (`None` when nothing changed or it is gone).
pub async fn remove<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if !has(obj, finalizer) {
        return Ok(None);
    }
    let now = obj.finalizers().to_vec();
    let kept: Vec<String> = now.iter().filter(|x| *x != finalizer).cloned().collect();
    // Guarded by the finalizer list itself, not the resourceVersion: a
    // concurrent write elsewhere in the object (a Node's status heartbeat, a
    // label) is no conflict, and the copy may come from a cache. Only a
    // changed list fails the `test` (422/409), and the caller retries.
    let patch = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": now},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept},
    ]);
    let patch = Patch::Json::<()>(serde_json::from_value(patch).map_err(kube::Error::SerdeError)?);
    match api
        .patch(&obj.name_any(), &PatchParams::default(), &patch)
        .await
    {
        Ok(o) => Ok(Some(o)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
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
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
            match api.get_opt(&obj.name_any()).await? {
                Some(fresh) => remove(api, &fresh, finalizer).await,
                None => Ok(None),
            }
        }
        other => other,
    }
}
