//! The axum routes of the fake.

use crate::filter::Filter;
use crate::state::{fingerprint, int64, zone_url, Effect, Fault, Method, State};
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Shared = Arc<Mutex<State>>;

pub(crate) fn router(state: Shared) -> Router {
    let zone = "/compute/v1/projects/{project}/zones/{zone}";
    Router::new()
        .route(
            &format!("{zone}/instances"),
            get(list_instances).post(insert_instance),
        )
        .route(
            &format!("{zone}/instances/{{name}}"),
            get(get_instance).delete(delete_instance),
        )
        .route(
            &format!("{zone}/instances/{{name}}/setLabels"),
            post(set_labels),
        )
        .route(
            &format!("{zone}/instances/{{name}}/setTags"),
            post(set_tags),
        )
        .route(
            &format!("{zone}/instances/{{name}}/setMetadata"),
            post(set_metadata),
        )
        .route(&format!("{zone}/disks/{{disk}}/resize"), post(resize_disk))
        .route(
            &format!("{zone}/operations/{{operation}}"),
            get(get_operation),
        )
        .fallback(|| async {
            error(
                404,
                "notFound",
                "The requested URL was not found on this server.",
            )
        })
        .with_state(state)
}

/// Google's JSON error envelope.
pub(crate) fn error(status: u16, reason: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}]
        }
    });
    (code, Json(body)).into_response()
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    match s.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Counts the request and its authentication; returns an injected fault.
fn begin(st: &mut State, m: Method, headers: &HeaderMap) -> Option<Fault> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer ") && v.len() > 7);
    if !bearer {
        st.unauthenticated += 1;
    }
    st.take_fault(m)
}

fn fault_response(f: &Fault) -> Option<Response> {
    match f {
        Fault::Http {
            status,
            reason,
            message,
        } => Some(error(*status, reason, message)),
        _ => None,
    }
}

fn lost() -> Response {
    error(503, "backendError", "Backend Error")
}

fn resource(project: &str, zone: &str, kind: &str, name: &str) -> String {
    format!("projects/{project}/zones/{zone}/{kind}/{name}")
}

async fn insert_instance(
    AxState(s): AxState<Shared>,
    Path((project, zone)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut st = lock(&s);
    let fault = begin(&mut st, Method::InstancesInsert, &headers);
    if let Some(r) = fault.as_ref().and_then(fault_response) {
        return r;
    }
    let instance: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return error(400, "parseError", "Parse Error"),
    };
    st.inserted.push(instance.clone());
    if let Err((status, reason, message)) = crate::checks::insert(&instance)
        .and_then(|()| crate::checks::source_images(&instance, &st.deleted_images))
    {
        return error(status, reason, &message);
    }
    let name = instance["name"].as_str().unwrap_or_default().to_string();
    let key = (project.clone(), zone.clone(), name.clone());
    let failing = matches!(fault, Some(Fault::OperationError { .. }));
    st.insert_log
        .push((name.clone(), std::time::Instant::now(), failing));
    if st.instances.contains_key(&key) {
        return error(
            409,
            "alreadyExists",
            &format!(
                "The resource '{}' already exists",
                resource(&project, &zone, "instances", &name)
            ),
        );
    }
    let id = st.put_instance(&project, &zone, instance, false);
    let op_error = match &fault {
        Some(Fault::OperationError { code, message }) => Some((code.clone(), message.clone())),
        _ => None,
    };
    let op = st.start_operation(&project, &zone, &name, &id, Effect::Insert, op_error);
    if fault == Some(Fault::LostResponse) {
        return lost();
    }
    Json(op).into_response()
}

async fn get_instance(
    AxState(s): AxState<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut st = lock(&s);
    if let Some(r) = begin(&mut st, Method::InstancesGet, &headers)
        .as_ref()
        .and_then(fault_response)
    {
        return r;
    }
    match st
        .instances
        .get(&(project.clone(), zone.clone(), name.clone()))
    {
        Some(v) => Json(v.clone()).into_response(),
        None => not_found(&project, &zone, "instances", &name),
    }
}

fn not_found(project: &str, zone: &str, kind: &str, name: &str) -> Response {
    error(
        404,
        "notFound",
        &format!(
            "The resource '{}' was not found",
            resource(project, zone, kind, name)
        ),
    )
}

async fn list_instances(
    AxState(s): AxState<Shared>,
    Path((project, zone)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut st = lock(&s);
    if let Some(r) = begin(&mut st, Method::InstancesList, &headers)
        .as_ref()
        .and_then(fault_response)
    {
        return r;
    }
    let filter_text = q.get("filter").filter(|f| !f.trim().is_empty()).cloned();
    st.list_filters.push(filter_text.clone());
    let filter = match filter_text.as_deref().map(Filter::parse) {
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => return error(400, "invalid", &e),
        None => None,
    };
    let max = q
        .get("maxResults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(st.max_page_size)
        .clamp(1, st.max_page_size);
    let start = match q.get("pageToken").filter(|t| !t.is_empty()) {
        Some(t) => match t.parse::<usize>() {
            Ok(n) => n,
            Err(_) => return error(400, "invalid", "Invalid value for field 'pageToken'"),
        },
        None => 0,
    };
    let matching: Vec<Value> = st
        .instances
        .iter()
        .filter(|((p, z, _), _)| *p == project && *z == zone)
        .map(|(_, v)| v)
        .filter(|v| filter.as_ref().is_none_or(|f| f.matches(v)))
        .cloned()
        .collect();
    let page: Vec<Value> = matching.iter().skip(start).take(max).cloned().collect();
    let zurl = zone_url(&project, &zone);
    let mut body = json!({
        "kind": "compute#instanceList",
        "id": format!("projects/{project}/zones/{zone}/instances"),
        "selfLink": format!("{zurl}/instances"),
    });
    if !page.is_empty() {
        body["items"] = Value::Array(page);
    }
    if start + max < matching.len() {
        body["nextPageToken"] = json!((start + max).to_string());
    }
    Json(body).into_response()
}

async fn delete_instance(
    AxState(s): AxState<Shared>,
    Path((project, zone, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut st = lock(&s);
    let fault = begin(&mut st, Method::InstancesDelete, &headers);
    if let Some(r) = fault.as_ref().and_then(fault_response) {
        return r;
    }
    let key = (project.clone(), zone.clone(), name.clone());
    let Some(instance) = st.instances.get_mut(&key) else {
        return not_found(&project, &zone, "instances", &name);
    };
    if let Some(o) = instance.as_object_mut() {
        o.insert("status".into(), json!("STOPPING"));
    }
    let id = instance
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let op_error = match &fault {
        Some(Fault::OperationError { code, message }) => Some((code.clone(), message.clone())),
        _ => None,
    };
    let op = st.start_operation(&project, &zone, &name, &id, Effect::Delete, op_error);
    if fault == Some(Fault::LostResponse) {
        return lost();
    }
    Json(op).into_response()
}

async fn get_operation(
    AxState(s): AxState<Shared>,
    Path((project, zone, operation)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut st = lock(&s);
    if let Some(r) = begin(&mut st, Method::ZoneOperationsGet, &headers)
        .as_ref()
        .and_then(fault_response)
    {
        return r;
    }
    let in_zone = st
        .operations
        .get(&operation)
        .is_some_and(|o| o.project == project && o.zone == zone);
    if !in_zone {
        return not_found(&project, &zone, "operations", &operation);
    }
    match st.poll(&operation) {
        Some(v) => Json(v).into_response(),
        None => not_found(&project, &zone, "operations", &operation),
    }
}

/// Why a hot-update call is refused: a status, reason and message.
type Refusal = (u16, &'static str, String);

fn stale(what: &str) -> Refusal {
    (
        412,
        "conditionNotMet",
        format!("Supplied fingerprint does not match current {what} fingerprint."),
    )
}

/// A hot-update call on an instance (`setLabels`, `setTags`,
/// `setMetadata`): counts it, takes an injected fault, parses the body,
/// applies `change` to the instance unless the operation is to fail, and
/// answers the operation.
fn update_instance(
    s: &Shared,
    m: Method,
    op_type: &'static str,
    (project, zone, name): (String, String, String),
    headers: &HeaderMap,
    body: &Bytes,
    change: impl FnOnce(&mut Map<String, Value>, &Value) -> Result<(), Refusal>,
) -> Response {
    let mut st = lock(s);
    let fault = begin(&mut st, m, headers);
    if let Some(r) = fault.as_ref().and_then(fault_response) {
        return r;
    }
    let body: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return error(400, "parseError", "Parse Error"),
    };
    let key = (project.clone(), zone.clone(), name.clone());
    let Some(Value::Object(instance)) = st.instances.get_mut(&key) else {
        return not_found(&project, &zone, "instances", &name);
    };
    let id = instance
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let op_error = match &fault {
        Some(Fault::OperationError { code, message }) => Some((code.clone(), message.clone())),
        _ => None,
    };
    if op_error.is_none() {
        if let Err((status, reason, message)) = change(instance, &body) {
            return error(status, reason, &message);
        }
    }
    let effect = Effect::Update {
        op_type,
        kind: "instances",
    };
    let op = st.start_operation(&project, &zone, &name, &id, effect, op_error);
    if fault == Some(Fault::LostResponse) {
        return lost();
    }
    Json(op).into_response()
}

/// `instances.setLabels` (`InstancesSetLabelsRequest`): replaces every
/// label when `labelFingerprint` is the instance's.
async fn set_labels(
    AxState(s): AxState<Shared>,
    Path(at): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    update_instance(
        &s,
        Method::InstancesSetLabels,
        "setLabels",
        at,
        &headers,
        &body,
        |i, b| {
            if b.get("labelFingerprint") != i.get("labelFingerprint") {
                return Err((
                    412,
                    "conditionNotMet",
                    "Labels fingerprint either invalid or resource labels have changed".into(),
                ));
            }
            let labels = b.get("labels").cloned().unwrap_or(json!({}));
            crate::checks::labels(&labels)?;
            i.insert("labelFingerprint".into(), json!(fingerprint(&labels)));
            i.insert("labels".into(), labels);
            Ok(())
        },
    )
}

/// A network tag as Compute allows it (RFC 1035: lowercase letters, digits
/// and `-`, starting with a letter, not ending with `-`, at most 63).
fn tag_ok(t: &str) -> bool {
    (1..=63).contains(&t.len())
        && t.starts_with(|c: char| c.is_ascii_lowercase())
        && !t.ends_with('-')
        && t.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `instances.setTags` (`Tags`): replaces the network tags when
/// `fingerprint` is the instance's tags fingerprint.
async fn set_tags(
    AxState(s): AxState<Shared>,
    Path(at): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    update_instance(
        &s,
        Method::InstancesSetTags,
        "setTags",
        at,
        &headers,
        &body,
        |i, b| {
            let current = i.get("tags").and_then(|t| t.get("fingerprint"));
            if b.get("fingerprint") != current {
                return Err(stale("tags"));
            }
            let items = b.get("items").cloned().unwrap_or(json!([]));
            for (n, t) in items.as_array().into_iter().flatten().enumerate() {
                let t = t.as_str().unwrap_or_default();
                if !tag_ok(t) {
                    return Err((
                    400,
                    "invalid",
                    format!(
                        "Invalid value for field 'resource.tags.items[{n}]': '{t}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
                    ),
                ));
                }
            }
            let fp = fingerprint(&items);
            i.insert("tags".into(), json!({"items": items, "fingerprint": fp}));
            Ok(())
        },
    )
}

/// `instances.setMetadata` (`Metadata`): replaces every item when
/// `fingerprint` is the instance's metadata fingerprint.
async fn set_metadata(
    AxState(s): AxState<Shared>,
    Path(at): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    update_instance(
        &s,
        Method::InstancesSetMetadata,
        "setMetadata",
        at,
        &headers,
        &body,
        |i, b| {
            let current = i.get("metadata").and_then(|m| m.get("fingerprint"));
            if b.get("fingerprint") != current {
                return Err(stale("metadata"));
            }
            let items = b.get("items").cloned().unwrap_or(json!([]));
            let mut seen = std::collections::BTreeSet::new();
            for item in items.as_array().into_iter().flatten() {
                let k = item.get("key").and_then(Value::as_str).unwrap_or_default();
                let key_ok = (1..=128).contains(&k.len())
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                if !key_ok {
                    return Err((
                    400,
                    "invalid",
                    format!("Invalid value for field 'resource.items[].key': '{k}'. Must be a match of regex '[a-zA-Z0-9-_]{{1,128}}'"),
                ));
                }
                if !seen.insert(k.to_string()) {
                    return Err((
                        400,
                        "invalid",
                        format!("Metadata has duplicate keys: '{k}'."),
                    ));
                }
            }
            let fp = fingerprint(&items);
            i.insert(
                "metadata".into(),
                json!({"kind": "compute#metadata", "items": items, "fingerprint": fp}),
            );
            Ok(())
        },
    )
}

/// `disks.resize` (`DisksResizeRequest`): grows the persistent disk named
/// `disk` (an instance's attached disk whose `source` names it); a size not
/// larger than the current one is refused, as Compute does.
async fn resize_disk(
    AxState(s): AxState<Shared>,
    Path((project, zone, disk)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut st = lock(&s);
    let fault = begin(&mut st, Method::DisksResize, &headers);
    if let Some(r) = fault.as_ref().and_then(fault_response) {
        return r;
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return error(400, "parseError", "Parse Error"),
    };
    let Some(want) = body.get("sizeGb").and_then(int64) else {
        return error(400, "required", "Required field 'sizeGb' not specified");
    };
    let suffix = format!("/disks/{disk}");
    let attached = st
        .instances
        .iter_mut()
        .filter(|((p, z, _), _)| *p == project && *z == zone)
        .filter_map(|(_, i)| i.get_mut("disks").and_then(Value::as_array_mut))
        .flatten()
        .find(|d| {
            d.get("source")
                .and_then(Value::as_str)
                .is_some_and(|s| s.ends_with(&suffix))
        });
    let Some(d) = attached else {
        return not_found(&project, &zone, "disks", &disk);
    };
    let have = d.get("diskSizeGb").and_then(int64).unwrap_or_default();
    let op_error = match &fault {
        Some(Fault::OperationError { code, message }) => Some((code.clone(), message.clone())),
        _ => None,
    };
    if want <= have {
        return error(
            400,
            "invalid",
            &format!(
                "Invalid value for field 'sizeGb': '{want}'. New disk size '{want}' GiB must be larger than existing size '{have}' GiB."
            ),
        );
    }
    if op_error.is_none() {
        d["diskSizeGb"] = json!(want.to_string());
    }
    let effect = Effect::Update {
        op_type: "resize",
        kind: "disks",
    };
    let disk_id = st.next_id();
    let op = st.start_operation(&project, &zone, &disk, &disk_id, effect, op_error);
    if fault == Some(Fault::LostResponse) {
        return lost();
    }
    Json(op).into_response()
}
