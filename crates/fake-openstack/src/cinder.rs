//! Cinder v3: volumes.

use crate::state::{Op, State as St, TIME};
use crate::{begin, error, lock, Shared};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/", get(versions))
        .route("/v3", get(version))
        .route("/v3/", get(version))
        .route("/v3/{project}", get(version))
        .route("/v3/{project}/", get(version))
        .route("/v3/{project}/volumes/detail", get(list_volumes))
        .route("/v3/{project}/volumes", post(create_volume))
        .route(
            "/v3/{project}/volumes/{id}",
            get(get_volume).delete(delete_volume),
        )
}

fn version_doc(base: &str) -> Value {
    json!({
        "id": "v3.0", "status": "CURRENT", "version": "3.71", "min_version": "3.0",
        "updated": "2023-08-31T00:00:00Z",
        "links": [{"href": format!("{base}/volume/v3/"), "rel": "self"}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.volume+json;version=3"}]
    })
}

async fn versions(State(s): State<Shared>) -> Json<Value> {
    let base = lock(&s).base.clone();
    Json(json!({ "versions": [version_doc(&base)] }))
}

async fn version(State(s): State<Shared>) -> Json<Value> {
    let base = lock(&s).base.clone();
    Json(json!({ "version": version_doc(&base) }))
}

/// A new volume (Cinder's detailed view), kept in the state.
pub(crate) fn new_volume(
    st: &mut St,
    name: &str,
    size: i64,
    volume_type: &str,
    az: &str,
    metadata: Value,
    status: &str,
) -> Value {
    let id = st.uuid();
    let b = st.base.clone();
    let p = st.project_id.clone();
    let v = json!({
        "attachments": [], "availability_zone": az, "bootable": "true", "consistencygroup_id": null,
        "created_at": TIME, "description": null, "encrypted": false, "id": id,
        "links": [
            {"href": format!("{b}/volume/v3/{p}/volumes/{id}"), "rel": "self"},
            {"href": format!("{b}/volume/{p}/volumes/{id}"), "rel": "bookmark"}
        ],
        "metadata": metadata, "migration_status": null, "multiattach": false, "name": name,
        "os-vol-tenant-attr:tenant_id": p, "replication_status": null, "size": size,
        "snapshot_id": null, "source_volid": null, "status": status, "updated_at": TIME,
        "user_id": "mcm-user", "volume_type": if volume_type.is_empty() { "__DEFAULT__" } else { volume_type }
    });
    st.volumes.insert(id, v.clone());
    v
}

fn advance(st: &mut St, id: &str) {
    let polls = st.volume_polls.entry(id.to_string()).or_insert(0);
    if let Some(v) = st.volumes.get_mut(id) {
        if v["status"] == json!("creating") {
            if *polls == 0 {
                v["status"] = json!("available");
            } else {
                *polls -= 1;
            }
        }
    }
}

async fn list_volumes(
    State(s): State<Shared>,
    Path(_project): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = begin(&s, Op::ListVolumes) {
        return r;
    }
    let mut st = lock(&s);
    let ids: Vec<String> = st.volumes.keys().cloned().collect();
    for id in &ids {
        advance(&mut st, id);
    }
    let items: Vec<&Value> = st
        .volumes
        .values()
        .filter(|v| q.get("name").is_none_or(|n| v["name"] == json!(n)))
        .collect();
    Json(json!({ "volumes": items })).into_response()
}

async fn create_volume(
    State(s): State<Shared>,
    Path(_project): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = begin(&s, Op::CreateVolume) {
        return r;
    }
    let mut st = lock(&s);
    let v = &body["volume"];
    let Some(size) = v["size"].as_i64().filter(|s| *s > 0) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Invalid input received: size must be a positive integer",
        );
    };
    if let Some(img) = v["imageRef"].as_str() {
        if !st.images.contains_key(img) {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("Invalid image identifier or unable to access requested image {img}."),
            );
        }
    }
    let polls = st.build_polls;
    let vol = new_volume(
        &mut st,
        v["name"].as_str().unwrap_or_default(),
        size,
        v["volume_type"].as_str().unwrap_or_default(),
        v["availability_zone"].as_str().unwrap_or("nova"),
        v["metadata"]
            .clone()
            .as_object()
            .map(|o| json!(o))
            .unwrap_or(json!({})),
        "creating",
    );
    if let Some(id) = vol["id"].as_str() {
        st.volume_polls.insert(id.to_string(), polls);
    }
    (StatusCode::ACCEPTED, Json(json!({ "volume": vol }))).into_response()
}

async fn get_volume(
    State(s): State<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    if let Some(r) = begin(&s, Op::GetVolume) {
        return r;
    }
    let mut st = lock(&s);
    advance(&mut st, &id);
    match st.volumes.get(&id) {
        Some(v) => Json(json!({ "volume": v })).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            &format!("Volume {id} could not be found."),
        ),
    }
}

async fn delete_volume(
    State(s): State<Shared>,
    Path((_project, id)): Path<(String, String)>,
) -> Response {
    if let Some(r) = begin(&s, Op::DeleteVolume) {
        return r;
    }
    let mut st = lock(&s);
    let Some(v) = st.volumes.get(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("Volume {id} could not be found."),
        );
    };
    if v["status"] == json!("in-use") {
        return error(
            StatusCode::BAD_REQUEST,
            "Invalid volume: Volume status must be available or error or error_restoring or error_extending or error_managing and must not be migrating, attached, belong to a group, have snapshots, awaiting a transfer, or be disassociated from snapshots after volume transfer.",
        );
    }
    st.volumes.remove(&id);
    StatusCode::ACCEPTED.into_response()
}
