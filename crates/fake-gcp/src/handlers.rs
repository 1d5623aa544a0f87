//! The axum routes of the fake.

use crate::filter::Filter;
use crate::state::{zone_url, Effect, Fault, Method, State};
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
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
    let Some(name) = instance
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return error(
            400,
            "required",
            "Required field 'resource.name' not specified",
        );
    };
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
