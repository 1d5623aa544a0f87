//! Neutron v2.0: networks, subnets, ports (with tags) and security groups.

use crate::state::Op;
use crate::{begin, lock, neutron_error, Shared};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/", get(versions))
        .route("/v2.0/networks", get(list_networks))
        .route("/v2.0/subnets/{id}", get(get_subnet))
        .route("/v2.0/ports", get(list_ports).post(create_port))
        .route("/v2.0/ports/{id}", put(update_port).delete(delete_port))
        .route("/v2.0/ports/{id}/tags", put(tag_port))
        .route("/v2.0/security-groups", get(list_security_groups))
}

async fn versions(State(s): State<Shared>) -> Json<Value> {
    let base = lock(&s).base.clone();
    Json(json!({"versions": [{
        "status": "CURRENT", "id": "v2.0",
        "links": [{"href": format!("{base}/network/v2.0/"), "rel": "self"}]
    }]}))
}

fn not_found(kind: &str, id: &str) -> Response {
    neutron_error(
        StatusCode::NOT_FOUND,
        &format!("{kind}NotFound"),
        &format!("{kind} {id} could not be found."),
    )
}

/// Neutron's filters: every query key but paging must equal the attribute.
fn matches(item: &Value, q: &HashMap<String, String>) -> bool {
    q.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "limit" | "marker" | "fields"))
        .all(|(k, v)| match &item[k] {
            Value::String(s) => s == v,
            Value::Bool(b) => v.parse::<bool>().ok() == Some(*b),
            Value::Null => false,
            Value::Number(n) => n.to_string() == v.as_str(),
            _ => false,
        })
}

async fn list_networks(
    State(s): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = begin(&s, Op::ListNetworks) {
        return r;
    }
    let st = lock(&s);
    let items: Vec<&Value> = st.networks.values().filter(|n| matches(n, &q)).collect();
    Json(json!({ "networks": items })).into_response()
}

async fn get_subnet(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    if let Some(r) = begin(&s, Op::GetSubnet) {
        return r;
    }
    match lock(&s).subnets.get(&id) {
        Some(v) => Json(json!({ "subnet": v })).into_response(),
        None => not_found("Subnet", &id),
    }
}

async fn list_ports(State(s): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    if let Some(r) = begin(&s, Op::ListPorts) {
        return r;
    }
    let st = lock(&s);
    let items: Vec<&Value> = st.ports.values().filter(|p| matches(p, &q)).collect();
    Json(json!({ "ports": items })).into_response()
}

async fn create_port(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    if let Some(r) = begin(&s, Op::CreatePort) {
        return r;
    }
    let mut st = lock(&s);
    let p = &body["port"];
    let net = p["network_id"].as_str().unwrap_or_default().to_string();
    if !st.networks.contains_key(&net) {
        return not_found("Network", &net);
    }
    let fixed: Vec<Value> = p["fixed_ips"].as_array().cloned().unwrap_or_default();
    for f in &fixed {
        let sid = f["subnet_id"].as_str().unwrap_or_default();
        match st.subnets.get(sid) {
            Some(sub) if sub["network_id"] == json!(net) => {}
            Some(_) => {
                return neutron_error(
                    StatusCode::BAD_REQUEST,
                    "InvalidInput",
                    &format!("Invalid input for operation: Failed to create port on network {net}, because fixed_ips included invalid subnet {sid}."),
                )
            }
            None => return not_found("Subnet", sid),
        }
    }
    let sgs: Vec<Value> = p["security_groups"].as_array().cloned().unwrap_or_default();
    for g in &sgs {
        let id = g.as_str().unwrap_or_default();
        if !st.security_groups.contains_key(id) {
            return not_found("SecurityGroup", id);
        }
    }
    let name = p["name"].as_str().unwrap_or_default().to_string();
    let port = st.new_port(&name, &net, fixed, sgs);
    (StatusCode::CREATED, Json(json!({ "port": port }))).into_response()
}

async fn update_port(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = begin(&s, Op::UpdatePort) {
        return r;
    }
    let mut st = lock(&s);
    let Some(port) = st.ports.get_mut(&id) else {
        return not_found("Port", &id);
    };
    if let Some(obj) = body["port"].as_object() {
        for (k, v) in obj {
            if matches!(
                k.as_str(),
                "allowed_address_pairs"
                    | "name"
                    | "description"
                    | "security_groups"
                    | "admin_state_up"
            ) {
                port[k] = v.clone();
            }
        }
    }
    let mac = port["mac_address"].clone();
    if let Some(pairs) = port["allowed_address_pairs"].as_array_mut() {
        for pair in pairs.iter_mut() {
            if pair.get("mac_address").is_none() {
                pair["mac_address"] = mac.clone();
            }
        }
    }
    port["revision_number"] = json!(port["revision_number"].as_i64().unwrap_or(1) + 1);
    Json(json!({ "port": port })).into_response()
}

async fn tag_port(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = begin(&s, Op::TagPort) {
        return r;
    }
    let mut st = lock(&s);
    let Some(port) = st.ports.get_mut(&id) else {
        return not_found("Port", &id);
    };
    let Some(tags) = body["tags"].as_array() else {
        return neutron_error(
            StatusCode::BAD_REQUEST,
            "InvalidInput",
            "Invalid input for operation: tags.",
        );
    };
    port["tags"] = json!(tags);
    Json(json!({ "tags": tags })).into_response()
}

async fn delete_port(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    if let Some(r) = begin(&s, Op::DeletePort) {
        return r;
    }
    match lock(&s).ports.remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => not_found("Port", &id),
    }
}

async fn list_security_groups(
    State(s): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = begin(&s, Op::ListSecurityGroups) {
        return r;
    }
    let st = lock(&s);
    let items: Vec<&Value> = st
        .security_groups
        .values()
        .filter(|g| matches(g, &q))
        .collect();
    Json(json!({ "security_groups": items })).into_response()
}
