//! Nova v2.1: servers, flavors, the image proxy and version discovery.

use crate::state::{Op, ServerRec, TIME};
use crate::{begin, error, lock, Shared};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/", get(versions))
        .route("/v2.1", get(version))
        .route("/v2.1/", get(version))
        .route("/v2.1/servers", axum::routing::post(create_server))
        .route("/v2.1/servers/detail", get(list_servers))
        .route("/v2.1/servers/{id}", get(get_server).delete(delete_server))
        .route(
            "/v2.1/servers/{id}/metadata",
            axum::routing::post(update_metadata).put(replace_metadata),
        )
        .route(
            "/v2.1/servers/{id}/metadata/{key}",
            axum::routing::delete(delete_metadata_item),
        )
        .route("/v2.1/flavors/detail", get(list_flavors))
        .route("/v2.1/images/detail", get(list_images))
}

fn version_doc(base: &str) -> Value {
    json!({
        "id": "v2.1",
        "links": [
            {"href": format!("{base}/compute/v2.1/"), "rel": "self"},
            {"href": "http://docs.openstack.org/", "rel": "describedby", "type": "text/html"}
        ],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.compute+json;version=2.1"}],
        "status": "CURRENT", "version": "2.96", "min_version": "2.1", "updated": "2013-07-23T11:33:21Z"
    })
}

async fn versions(State(s): State<Shared>) -> Json<Value> {
    let base = lock(&s).base.clone();
    let mut v = version_doc(&base);
    if let Some(o) = v.as_object_mut() {
        o.remove("media-types");
    }
    Json(json!({ "versions": [v] }))
}

async fn version(State(s): State<Shared>) -> Json<Value> {
    let base = lock(&s).base.clone();
    Json(json!({ "version": version_doc(&base) }))
}

fn bad(msg: &str) -> Response {
    error(StatusCode::BAD_REQUEST, msg)
}

/// Members of `server` in Nova's create request schema
/// (`nova/api/openstack/compute/schemas/servers.py`, 2.1 up to the
/// microversions the driver may negotiate).
const SERVER_MEMBERS: &[&str] = &[
    "name",
    "imageRef",
    "flavorRef",
    "adminPass",
    "metadata",
    "networks",
    "OS-DCF:diskConfig",
    "accessIPv4",
    "accessIPv6",
    "personality",
    "availability_zone",
    "block_device_mapping",
    "block_device_mapping_v2",
    "config_drive",
    "key_name",
    "min_count",
    "max_count",
    "return_reservation_id",
    "security_groups",
    "user_data",
    "description",
    "tags",
    "trusted_image_certificates",
    "host",
    "hypervisor_hostname",
    "hostname",
];

fn is_uuid(s: &str) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

/// What Nova checks of a create request before it schedules, with Nova's
/// messages: the request schema (no additional properties in `server`, the
/// `group` hint a string, here a UUID as the server group IDs are), then the
/// server group's existence, the key pair and the availability zone.
pub(crate) fn create_checks(st: &crate::state::State, body: &Value) -> Result<(), String> {
    let srv = &body["server"];
    let Some(members) = srv.as_object() else {
        return Err(
            "Invalid input for field/attribute server. Value: None. None is not of type 'object'"
                .into(),
        );
    };
    for k in members.keys() {
        if !SERVER_MEMBERS.contains(&k.as_str()) {
            return Err(format!(
                "Invalid input for field/attribute server. Value: {srv}. Additional properties are not allowed ('{k}' was unexpected)"
            ));
        }
    }
    for hints in ["os:scheduler_hints", "OS-SCH-HNT:scheduler_hints"] {
        if let Some(g) = body[hints].get("group") {
            let ok = g.as_str().is_some_and(is_uuid);
            if !ok {
                let why = if g.is_string() {
                    format!("{g} is not a 'uuid'")
                } else {
                    format!("{g} is not of type 'string'")
                };
                return Err(format!(
                    "Invalid input for field/attribute group. Value: {g}. {why}"
                ));
            }
            let uuid = g.as_str().unwrap_or_default();
            if !st.server_groups.contains(uuid) {
                return Err(format!("Instance group {uuid} could not be found."));
            }
        }
    }
    if let Some(k) = srv.get("key_name") {
        if !k.as_str().is_some_and(|k| st.keypairs.contains(k)) {
            return Err("Invalid key_name provided.".into());
        }
    }
    if let Some(az) = srv.get("availability_zone").and_then(Value::as_str) {
        if !st.zones.contains(az) {
            return Err("The requested availability zone is not available".into());
        }
    }
    Ok(())
}

async fn create_server(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    if let Some(r) = begin(&s, Op::CreateServer) {
        return r;
    }
    let mut st = lock(&s);
    st.last_server_create = Some(body.clone());
    if let Err(message) = create_checks(&st, &body) {
        return bad(&message);
    }
    let srv = &body["server"];
    let Some(name) = srv["name"].as_str().filter(|n| !n.is_empty()) else {
        return bad("Invalid input for field/attribute name.");
    };
    let flavor = match &srv["flavorRef"] {
        Value::String(f) => f.clone(),
        Value::Number(n) => n.to_string(),
        _ => return bad("Invalid input for field/attribute flavorRef."),
    };
    if !st.flavors.contains_key(&flavor) {
        return bad(&format!("Flavor {flavor} could not be found."));
    }
    let bdm = srv["block_device_mapping_v2"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let image = srv["imageRef"].as_str().unwrap_or_default().to_string();
    if bdm.is_empty() && !st.images.contains_key(&image) {
        return bad(&format!("Image {image} could not be found."));
    }
    if let Some(ud) = srv["user_data"].as_str() {
        let ok = ud
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/' || c == b'=');
        if !ok || ud.len() > 65535 {
            return bad("User data needs to be valid base 64.");
        }
    }
    let mut sgs = Vec::new();
    for g in srv["security_groups"].as_array().into_iter().flatten() {
        let n = g["name"].as_str().unwrap_or_default();
        if !st.security_groups.values().any(|v| v["name"] == json!(n)) {
            return bad(&format!(
                "Security group {n} not found for project {}.",
                st.project_id
            ));
        }
        sgs.push(n.to_string());
    }
    if sgs.is_empty() {
        sgs.push("default".into());
    }
    let id = st.uuid();
    let mut ports = Vec::new();
    let mut own_ports = Vec::new();
    for n in srv["networks"].as_array().into_iter().flatten() {
        if let Some(port_id) = n["port"].as_str() {
            let Some(p) = st.ports.get(port_id) else {
                return bad(&format!("Port {port_id} could not be found."));
            };
            if p["device_id"].as_str().is_some_and(|d| !d.is_empty()) {
                return error(
                    StatusCode::CONFLICT,
                    &format!("Port {port_id} is still in use."),
                );
            }
            ports.push(port_id.to_string());
        } else {
            let net = n["uuid"].as_str().unwrap_or_default().to_string();
            if !st.networks.contains_key(&net) {
                return bad(&format!("Network {net} could not be found."));
            }
            let port = st.new_port("", &net, Vec::new(), Vec::new());
            let pid = port["id"].as_str().unwrap_or_default().to_string();
            ports.push(pid.clone());
            own_ports.push(pid);
        }
    }
    let az = srv["availability_zone"]
        .as_str()
        .unwrap_or("nova")
        .to_string();
    let mut volumes = Vec::new();
    for b in &bdm {
        let dot = b["delete_on_termination"].as_bool().unwrap_or(false);
        match b["source_type"].as_str() {
            Some("volume") => {
                let vid = b["uuid"].as_str().unwrap_or_default().to_string();
                let Some(v) = st.volumes.get_mut(&vid) else {
                    return bad(&format!(
                        "Block Device Mapping is Invalid: failed to get volume {vid}."
                    ));
                };
                if v["status"] != json!("available") {
                    return bad(&format!(
                        "Block Device Mapping is Invalid: volume {vid} is not available."
                    ));
                }
                v["status"] = json!("in-use");
                v["attachments"] = json!([{"server_id": id, "attachment_id": format!("att-{vid}"), "volume_id": vid, "device": "/dev/vda", "host_name": "fake-host", "id": vid, "attached_at": TIME}]);
                volumes.push((vid, dot));
            }
            Some("image") => {
                let size = b["volume_size"].as_i64().unwrap_or(1);
                let v = crate::cinder::new_volume(&mut st, "", size, "", &az, json!({}), "in-use");
                let vid = v["id"].as_str().unwrap_or_default().to_string();
                volumes.push((vid, dot));
            }
            _ => return bad("Block Device Mapping is Invalid: unsupported source_type."),
        }
    }
    for p in &ports {
        if let Some(port) = st.ports.get_mut(p) {
            port["device_id"] = json!(id);
            port["device_owner"] = json!(format!("compute:{az}"));
        }
    }
    let fail_with = if st.failing_builds > 0 {
        st.failing_builds -= 1;
        Some(st.build_fault.clone())
    } else {
        None
    };
    let rec = ServerRec {
        id: id.clone(),
        name: name.to_string(),
        status: "BUILD".into(),
        polls_left: st.build_polls,
        fail_with,
        metadata: srv["metadata"]
            .clone()
            .as_object()
            .map(|_| srv["metadata"].clone())
            .unwrap_or(json!({})),
        flavor_id: flavor,
        image_id: if bdm.is_empty() { image } else { String::new() },
        az,
        key_name: srv["key_name"].as_str().map(str::to_string),
        security_groups: sgs.clone(),
        ports,
        own_ports,
        volumes,
        created: TIME.into(),
    };
    st.servers.insert(id.clone(), rec);
    let b = st.base.clone();
    (
        StatusCode::ACCEPTED,
        Json(json!({"server": {
            "OS-DCF:diskConfig": "MANUAL", "adminPass": "fake-admin-pass", "id": id,
            "links": [
                {"href": format!("{b}/compute/v2.1/servers/{id}"), "rel": "self"},
                {"href": format!("{b}/compute/servers/{id}"), "rel": "bookmark"}
            ],
            "security_groups": sgs.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()
        }})),
    )
        .into_response()
}

async fn list_servers(
    State(s): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = begin(&s, Op::ListServers) {
        return r;
    }
    let mut st = lock(&s);
    let ids: Vec<String> = st.servers.keys().cloned().collect();
    for id in &ids {
        st.advance(id);
    }
    // Nova's name filter is a regular-expression search: a plain name matches
    // every server whose name contains it.
    let mut all: Vec<&ServerRec> = st
        .servers
        .values()
        .filter(|r| q.get("name").is_none_or(|n| r.name.contains(n.as_str())))
        .collect();
    if let Some(marker) = q.get("marker") {
        match all.iter().position(|r| &r.id == marker) {
            Some(i) => all = all.split_off(i + 1),
            None => return bad(&format!("marker [{marker}] not found")),
        }
    }
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok());
    let mut links = Vec::new();
    if let Some(l) = limit.filter(|l| *l < all.len()) {
        all.truncate(l);
        if let Some(last) = all.last() {
            links.push(json!({"href": format!("{}/compute/v2.1/servers/detail?limit={l}&marker={}", st.base, last.id), "rel": "next"}));
        }
    }
    let servers: Vec<Value> = all.iter().map(|r| st.server_view(r)).collect();
    let mut body = json!({ "servers": servers });
    if !links.is_empty() {
        body["servers_links"] = json!(links);
    }
    Json(body).into_response()
}

async fn get_server(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    if let Some(r) = begin(&s, Op::GetServer) {
        return r;
    }
    let mut st = lock(&s);
    st.advance(&id);
    match st.servers.get(&id) {
        Some(r) => Json(json!({ "server": st.server_view(r) })).into_response(),
        None => error(StatusCode::NOT_FOUND, "Instance could not be found"),
    }
}

async fn delete_server(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    if let Some(r) = begin(&s, Op::DeleteServer) {
        return r;
    }
    let mut st = lock(&s);
    let Some(rec) = st.servers.remove(&id) else {
        return error(StatusCode::NOT_FOUND, "Instance could not be found");
    };
    for p in &rec.own_ports {
        st.ports.remove(p);
    }
    for p in &rec.ports {
        if let Some(port) = st.ports.get_mut(p) {
            port["device_id"] = json!("");
            port["device_owner"] = json!("");
            port["status"] = json!("DOWN");
        }
    }
    for (v, delete) in &rec.volumes {
        if *delete {
            st.volumes.remove(v);
        } else if let Some(vol) = st.volumes.get_mut(v) {
            vol["status"] = json!("available");
            vol["attachments"] = json!([]);
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

/// Nova's limit on a metadata key and on a value (`metadata` in its API schema).
pub(crate) const METADATA_MAX_LEN: usize = 255;

/// The `metadata` object of a metadata request, checked as Nova's API schema
/// (`parameter_types.metadata`) does: an object of strings whose keys match
/// `^[a-zA-Z0-9-_:. ]{1,255}$`, values of at most 255 characters, and nothing
/// else in the body.
fn metadata_of(body: &Value) -> Result<serde_json::Map<String, Value>, String> {
    let Some(obj) = body.as_object() else {
        return Err("The request body is not a JSON object.".into());
    };
    if let Some(extra) = obj.keys().find(|k| *k != "metadata") {
        return Err(format!(
            "Invalid input for field/attribute metadata. Value: {body}. Additional properties are not allowed ('{extra}' was unexpected)"
        ));
    }
    let Some(items) = obj.get("metadata").and_then(Value::as_object) else {
        return Err(format!(
            "Invalid input for field/attribute metadata. Value: {body}. 'metadata' is a required property"
        ));
    };
    for (k, v) in items {
        let key_ok = !k.is_empty()
            && k.chars().count() <= METADATA_MAX_LEN
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_:. ".contains(c));
        if !key_ok {
            return Err(format!(
                "Invalid input for field/attribute metadata. Value: {k}. '{k}' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{{1,255}}$'"
            ));
        }
        match v.as_str() {
            Some(text) if text.chars().count() <= METADATA_MAX_LEN => {}
            Some(text) => {
                return Err(format!(
                    "Invalid input for field/attribute {k}. Value: {text}. '{text}' is too long"
                ))
            }
            None => {
                return Err(format!(
                    "Invalid input for field/attribute {k}. Value: {v}. {v} is not of type 'string'"
                ))
            }
        }
    }
    Ok(items.clone())
}

/// `POST /servers/{id}/metadata`: creates the given items and replaces the
/// values of existing keys; other items stay. Answers every item.
async fn update_metadata(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    set_metadata(&s, Op::UpdateServerMetadata, &id, &body, false)
}

/// `PUT /servers/{id}/metadata`: the given items become all of the server's.
async fn replace_metadata(
    State(s): State<Shared>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    set_metadata(&s, Op::ReplaceServerMetadata, &id, &body, true)
}

fn set_metadata(s: &Shared, op: Op, id: &str, body: &Value, replace: bool) -> Response {
    if let Some(r) = begin(s, op) {
        return r;
    }
    let items = match metadata_of(body) {
        Ok(i) => i,
        Err(m) => return bad(&m),
    };
    let mut st = lock(s);
    let Some(rec) = st.servers.get_mut(id) else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("Instance {id} could not be found."),
        );
    };
    if replace || !rec.metadata.is_object() {
        rec.metadata = json!({});
    }
    if let Some(m) = rec.metadata.as_object_mut() {
        m.extend(items);
    }
    Json(json!({ "metadata": rec.metadata })).into_response()
}

/// `DELETE /servers/{id}/metadata/{key}`: 204, or 404 when the server has no such item.
async fn delete_metadata_item(
    State(s): State<Shared>,
    Path((id, key)): Path<(String, String)>,
) -> Response {
    if let Some(r) = begin(&s, Op::DeleteServerMetadataItem) {
        return r;
    }
    let mut st = lock(&s);
    let Some(rec) = st.servers.get_mut(&id) else {
        return error(
            StatusCode::NOT_FOUND,
            &format!("Instance {id} could not be found."),
        );
    };
    match rec.metadata.as_object_mut().and_then(|m| m.remove(&key)) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(StatusCode::NOT_FOUND, "Metadata item was not found"),
    }
}

async fn list_flavors(State(s): State<Shared>) -> Response {
    if let Some(r) = begin(&s, Op::ListFlavors) {
        return r;
    }
    let st = lock(&s);
    let b = &st.base;
    let flavors: Vec<Value> = st
        .flavors
        .iter()
        .map(|(id, name)| {
            json!({
                "OS-FLV-DISABLED:disabled": false, "disk": 20, "OS-FLV-EXT-DATA:ephemeral": 0,
                "os-flavor-access:is_public": true, "id": id,
                "links": [
                    {"href": format!("{b}/compute/v2.1/flavors/{id}"), "rel": "self"},
                    {"href": format!("{b}/compute/flavors/{id}"), "rel": "bookmark"}
                ],
                "name": name, "ram": 4096, "swap": "", "vcpus": 2, "rxtx_factor": 1.0
            })
        })
        .collect();
    Json(json!({ "flavors": flavors })).into_response()
}

async fn list_images(
    State(s): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = begin(&s, Op::ListImages) {
        return r;
    }
    let st = lock(&s);
    let b = &st.base;
    let images: Vec<Value> = st
        .images
        .iter()
        .filter(|(_, name)| q.get("name").is_none_or(|n| n == *name))
        .map(|(id, name)| {
            json!({
                "OS-EXT-IMG-SIZE:size": 25165824, "created": TIME, "id": id,
                "links": [
                    {"href": format!("{b}/compute/v2.1/images/{id}"), "rel": "self"},
                    {"href": format!("{b}/compute/images/{id}"), "rel": "bookmark"},
                    {"href": format!("{b}/image/images/{id}"), "rel": "alternate", "type": "application/vnd.openstack.image"}
                ],
                "metadata": {"architecture": "x86_64"}, "minDisk": 0, "minRam": 0, "name": name,
                "progress": 100, "status": "ACTIVE", "updated": TIME
            })
        })
        .collect();
    Json(json!({ "images": images })).into_response()
}
