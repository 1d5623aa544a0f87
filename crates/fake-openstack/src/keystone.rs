//! Keystone v3: version discovery and token issuing with a service catalog.

use crate::state::{Catalog, Op, TIME};
use crate::{
    begin, error, lock, Shared, APP_CRED_ID, APP_CRED_SECRET, DOMAIN, PASSWORD, PROJECT, USERNAME,
};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// The name of the application credential [`APP_CRED_ID`] (a credential
/// named in the request keeps the name it was given).
const APP_CRED_NAME: &str = "mcm-app-cred";

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/", get(versions))
        .route("/v3", get(version))
        .route("/v3/", get(version))
        .route("/v3/auth/tokens", post(issue_token))
}

fn version_doc(base: &str) -> Value {
    json!({
        "id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{base}/identity/v3/")}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]
    })
}

async fn versions(State(s): State<Shared>) -> Response {
    let base = lock(&s).base.clone();
    (
        StatusCode::MULTIPLE_CHOICES,
        Json(json!({"versions": {"values": [version_doc(&base)]}})),
    )
        .into_response()
}

async fn version(State(s): State<Shared>) -> Json<Value> {
    let base = lock(&s).base.clone();
    Json(json!({ "version": version_doc(&base) }))
}

fn endpoint(c: &Catalog, kind: &str, name: &str, url: String) -> Value {
    let one = |interface: &str, url: String| {
        json!({
            "id": format!("{kind}-{interface}"), "interface": interface, "region": c.region,
            "region_id": c.region_id, "url": url
        })
    };
    let mut endpoints = vec![one("public", url)];
    if c.unreachable_internal_and_admin {
        // Port 9 (discard): nothing answers there.
        endpoints.push(one("internal", format!("http://127.0.0.1:9/{kind}")));
        endpoints.push(one("admin", format!("http://127.0.0.1:9/{kind}")));
    }
    json!({"type": kind, "name": name, "id": format!("{kind}-service"), "endpoints": endpoints})
}

/// Which identity the request proves, if any.
fn check(body: &Value, headers: &HeaderMap, s: &crate::state::State) -> Option<&'static str> {
    let identity = &body["auth"]["identity"];
    let methods: Vec<&str> = identity["methods"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if methods.contains(&"password") {
        let user = &identity["password"]["user"];
        let domain_ok = user["domain"]["name"] == json!(DOMAIN)
            || user["domain"]["id"].is_string()
            || user["id"].is_string();
        let ok =
            user["name"] == json!(USERNAME) && user["password"] == json!(PASSWORD) && domain_ok;
        let scope = &body["auth"]["scope"]["project"];
        let scope_ok = scope["name"] == json!(PROJECT) || scope["id"].is_string();
        return (ok && scope_ok).then_some("password");
    }
    if methods.contains(&"application_credential") {
        let ac = &identity["application_credential"];
        let ok = (ac["id"] == json!(APP_CRED_ID)
            || (ac["name"].is_string() && ac["user"]["name"] == json!(USERNAME)))
            && ac["secret"] == json!(APP_CRED_SECRET);
        return ok.then_some("application_credential");
    }
    if methods.contains(&"token") {
        let t = identity["token"]["id"]
            .as_str()
            .or_else(|| headers.get("x-auth-token").and_then(|v| v.to_str().ok()))?;
        return s.tokens.contains(t).then_some("token");
    }
    None
}

async fn issue_token(
    State(s): State<Shared>,
    headers: HeaderMap,
    Json(body_in): Json<Value>,
) -> Response {
    if let Some(r) = begin(&s, Op::IssueToken) {
        return r;
    }
    let mut st = lock(&s);
    let Some(method) = check(&body_in, &headers, &st) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "The request you have made requires authentication.",
        );
    };
    let token = format!("gAAAAAB-fake-token-{}", st.uuid());
    st.tokens.insert(token.clone());
    let b = st.base.clone();
    let p = st.project_id.clone();
    let c = &st.catalog;
    let mut catalog = vec![
        endpoint(c, "identity", "keystone", format!("{b}/identity")),
        endpoint(c, "compute", "nova", format!("{b}/compute/v2.1")),
        endpoint(c, "network", "neutron", format!("{b}/network")),
    ];
    for kind in &c.block_storage_types {
        catalog.push(endpoint(c, kind, "cinder", format!("{b}/volume/v3/{p}")));
    }
    let domain = json!({"id": "default", "name": DOMAIN});
    let mut body = json!({"token": {
        "methods": [method], "expires_at": "2099-12-31T23:59:59.000000Z", "issued_at": TIME,
        "audit_ids": ["fake-audit"],
        "user": {"id": "mcm-user", "name": USERNAME, "domain": domain, "password_expires_at": null},
        "project": {"id": p, "name": PROJECT, "domain": domain},
        "roles": [{"id": "member-role", "name": "member"}],
        "is_domain": false,
        "catalog": catalog
    }});
    if method == "application_credential" {
        // Keystone names the credential a token was issued for.
        let ac = &body_in["auth"]["identity"]["application_credential"];
        body["token"]["application_credential"] = json!({
            "id": APP_CRED_ID,
            "name": ac["name"].as_str().unwrap_or(APP_CRED_NAME),
            "restricted": true
        });
    }
    drop(st);
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(v) = token.parse() {
        resp.headers_mut().insert("x-subject-token", v);
    }
    resp
}
