//! The HTTP side: routing, the token endpoint, faults and long-running operations.

use crate::resources::{self as r, Reply};
use crate::state::{FaultResponse, State};
use axum::body::Bytes;
use axum::extract::State as Extract;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

type Shared = Arc<Mutex<State>>;

pub(crate) fn router(state: Shared) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// An ARM error envelope.
pub(crate) fn arm_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(status, json!({"error": {"code": code, "message": message}}))
}

/// A check's refusal as ARM answers it (with `target` when it names one).
pub(crate) fn refused((status, code, message, target): crate::checks::Refused) -> Reply {
    let mut e = json!({"code": code, "message": message});
    if let Some(t) = target {
        e["target"] = json!(t);
    }
    Reply::json(status, json!({ "error": e }))
}

fn eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn to_response(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    headers.insert("x-ms-request-id", HeaderValue::from_static("fake-request"));
    for (k, v) in reply.headers {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            headers.insert(k, v);
        }
    }
    match reply.body {
        Some(b) => {
            headers.insert("content-type", HeaderValue::from_static("application/json"));
            (status, headers, b.to_string()).into_response()
        }
        None => (status, headers).into_response(),
    }
}

async fn handle(
    Extract(state): Extract<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = match state.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    to_response(dispatch(&mut s, &method, &uri, &headers, &body))
}

fn dispatch(s: &mut State, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Reply {
    let segs: Vec<&str> = uri.path().split('/').filter(|x| !x.is_empty()).collect();
    // The identity platform's token endpoint: /{tenant}/oauth2/v2.0/token.
    if let [_tenant, o, v, t] = segs.as_slice() {
        if eq(o, "oauth2") && eq(v, "v2.0") && eq(t, "token") && method == Method::POST {
            s.log.push("POST token".into());
            let form = String::from_utf8_lossy(body);
            let has = |k: &str| {
                form.split('&')
                    .any(|p| p.starts_with(&format!("{k}=")) && p.len() > k.len() + 1)
            };
            if !has("client_id") || !(has("client_secret") || has("client_assertion")) {
                return Reply::json(
                    400,
                    json!({"error": "invalid_request", "error_description": "client_id and a secret or assertion are required"}),
                );
            }
            s.tokens_issued += 1;
            return Reply::json(
                200,
                json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599,
                       "access_token": format!("fake-token-{}", s.tokens_issued)}),
            );
        }
    }
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if bearer.trim().is_empty() {
        return arm_error(
            401,
            "AuthenticationFailed",
            "Authentication failed. The 'Authorization' header is missing.",
        );
    }
    if let Err(r) = crate::checks::api_version(&segs, uri.query()) {
        return refused(r);
    }
    let json_body = || serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let m = method.as_str();
    match segs.as_slice() {
        ["providers", ns, "resources"] if eq(ns, "Microsoft.ResourceGraph") => {
            s.log.push(format!("{m} resources"));
            if let Some(f) = s.take_fault(m, "resources", None) {
                return fault_reply(f);
            }
            r::graph(s, &json_body())
        }
        ["subscriptions", _, rgs, rg] if eq(rgs, "resourcegroups") => {
            s.log.push(format!("{m} resourcegroups/{rg}"));
            if let Some(f) = s.take_fault(m, "resourcegroups", Some(rg)) {
                return fault_reply(f);
            }
            let status = if s.rgs.contains(&rg.to_ascii_lowercase()) {
                204
            } else {
                404
            };
            Reply::empty(status)
        }
        ["subscriptions", _, "providers", _, "locations", _, "operations", id] => {
            s.log.push("GET operations".into());
            match s.poll(id) {
                None => arm_error(404, "NotFound", "unknown operation"),
                Some((status, err)) => {
                    let mut v =
                        json!({"name": id, "status": status, "startTime": "2026-12-02T00:00:00Z"});
                    if let Some((code, message)) = err {
                        v["error"] = json!({"code": code, "message": message});
                    }
                    Reply::json(200, v)
                }
            }
        }
        ["subscriptions", _, "providers", _, "locations", _, "operationResults", id] => {
            s.log.push("GET operationResults".into());
            match s.poll(id) {
                None => arm_error(404, "NotFound", "unknown operation"),
                Some(("InProgress", _)) => Reply::empty(202),
                Some((_, Some((code, message)))) => arm_error(409, &code, &message),
                Some(_) => Reply::empty(200),
            }
        }
        ["subscriptions", _, "providers", _, "locations", loc, "publishers", p, "artifacttypes", _, "offers", o, "skus", sku, "versions", v] =>
        {
            s.log.push(format!("{m} vmimage"));
            r::image(s, loc, p, o, sku, v)
        }
        ["subscriptions", _, "providers", ns, "offerTypes", _, "publishers", p, "offers", o, "plans", plan, "agreements", "current"]
            if eq(ns, "Microsoft.MarketplaceOrdering") =>
        {
            s.log.push(format!("{m} agreements"));
            r::agreement(s, m, p, o, plan, &json_body())
        }
        ["subscriptions", _, rgs, rg, "providers", _, vnets, vnet, subnets, subnet]
            if eq(rgs, "resourceGroups")
                && eq(vnets, "virtualNetworks")
                && eq(subnets, "subnets") =>
        {
            s.log.push(format!("{m} subnets/{subnet}"));
            if let Some(f) = s.take_fault(m, "subnets", Some(subnet)) {
                return fault_reply(f);
            }
            r::subnet(s, rg, vnet, subnet)
        }
        ["subscriptions", _, rgs, rg, "providers", _, kind] if eq(rgs, "resourceGroups") => {
            s.log.push(format!("{m} {kind} (list)"));
            if let Some(f) = s.take_fault(m, kind, None) {
                return fault_reply(f);
            }
            if !s.rgs.contains(&rg.to_ascii_lowercase()) {
                return arm_error(
                    404,
                    "ResourceGroupNotFound",
                    &format!("Resource group '{rg}' could not be found."),
                );
            }
            let items: Vec<Value> = s
                .resources_of(&kind.to_ascii_lowercase(), rg)
                .into_values()
                .collect();
            Reply::json(200, json!({ "value": items }))
        }
        ["subscriptions", _, rgs, rg, "providers", _, kind, name] if eq(rgs, "resourceGroups") => {
            s.log.push(format!("{m} {kind}/{name}"));
            let fault = s.take_fault(m, kind, Some(name));
            let lro_failure = match fault {
                Some(FaultResponse::LroFailed { code, message }) => Some((code, message)),
                Some(f) => return fault_reply(f),
                None => None,
            };
            if !s.rgs.contains(&rg.to_ascii_lowercase()) {
                return arm_error(
                    404,
                    "ResourceGroupNotFound",
                    &format!("Resource group '{rg}' could not be found."),
                );
            }
            r::resource(
                s,
                m,
                &kind.to_ascii_lowercase(),
                rg,
                name,
                json_body(),
                lro_failure,
            )
        }
        _ => arm_error(
            404,
            "InvalidResourceType",
            &format!("no route for {m} {}", uri.path()),
        ),
    }
}

fn fault_reply(f: FaultResponse) -> Reply {
    match f {
        FaultResponse::Http {
            status,
            code,
            message,
            retry_after,
        } => {
            let mut reply = arm_error(status, &code, &message);
            if let Some(sec) = retry_after {
                reply.headers.push(("retry-after".into(), sec.to_string()));
            }
            reply
        }
        FaultResponse::LroFailed { code, message } => arm_error(500, &code, &message),
    }
}
