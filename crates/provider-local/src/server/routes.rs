//! The HTTP side: one handler per route, and the router.

use super::error::{parse_body, ApiError};
use super::guard::Guard;
use super::state::{lock, Shared};
use crate::tunables::{Op, Tunables};
use crate::wire::InstanceList;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use mcm_driver::Code;
use serde::Deserialize;
use std::sync::Arc;
use tracing::info;

type AppState = State<Arc<Shared>>;

async fn create(State(s): AppState, body: Bytes) -> Response {
    s.run(Op::Create, s.create(body)).await
}

async fn initialize(State(s): AppState, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    s.run(Op::Initialize, s.initialize(id, body)).await
}

async fn update(State(s): AppState, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    s.run(Op::Update, s.update(id, body)).await
}

async fn delete(State(s): AppState, UrlPath(id): UrlPath<String>) -> Response {
    s.run(Op::Delete, s.delete(id)).await
}

async fn find(State(s): AppState, body: Bytes) -> Response {
    s.run(Op::Status, s.find(body)).await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    cluster_tag: Option<String>,
}

async fn list(State(s): AppState, query: Result<Query<ListQuery>, QueryRejection>) -> Response {
    let tag = query.ok().and_then(|Query(q)| q.cluster_tag);
    s.run(Op::List, s.list(tag)).await
}

async fn get_faults(State(s): AppState) -> Response {
    Json(s.tunables()).into_response()
}

fn set_tunables(s: &Shared, base: &Tunables, body: &Bytes) -> Response {
    let patch: serde_json::Value = match parse_body(body) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    match Tunables::merged(base, &patch) {
        Ok(t) => {
            *lock(&s.tunables) = t.clone();
            lock(&s.buckets).clear();
            info!(tunables = %serde_json::to_string(&t).unwrap_or_default(), "tunables changed");
            Json(t).into_response()
        }
        Err(e) => ApiError::invalid(e.to_string()).into_response(),
    }
}

async fn put_faults(State(s): AppState, body: Bytes) -> Response {
    set_tunables(&s, &Tunables::default(), &body)
}

async fn patch_faults(State(s): AppState, body: Bytes) -> Response {
    let current = s.tunables();
    set_tunables(&s, &current, &body)
}

async fn get_stats(State(s): AppState) -> Response {
    let instances = s.snapshot().await;
    Json(s.stats(&instances)).into_response()
}

async fn reset_stats(State(s): AppState) -> Response {
    {
        let mut st = lock(&s.stats);
        st.ops.clear();
        st.since = Some(Utc::now());
    }
    let instances = s.snapshot().await;
    Json(s.stats(&instances)).into_response()
}

async fn admin_instances(State(s): AppState) -> Response {
    Json(InstanceList {
        instances: s.snapshot().await,
    })
    .into_response()
}

async fn admin_action(
    State(s): AppState,
    UrlPath((id, action)): UrlPath<(String, String)>,
) -> Response {
    match s.act(&id, &action).await {
        Ok(i) => Json(i).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn not_found() -> Response {
    ApiError::new(Code::NotFound, "no such endpoint").into_response()
}

pub(super) fn router(shared: Arc<Shared>, guard: Guard) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/instances", post(create).get(list))
        .route("/v1/instances/find", post(find))
        .route("/v1/instances/{id}", axum::routing::delete(delete))
        .route("/v1/instances/{id}/initialize", post(initialize))
        .route("/v1/instances/{id}/update", post(update))
        .route(
            "/admin/faults",
            get(get_faults).put(put_faults).patch(patch_faults),
        )
        .route("/admin/stats", get(get_stats).delete(reset_stats))
        .route("/admin/instances", get(admin_instances))
        .route("/admin/instances/{id}/{action}", post(admin_action))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(guard),
            super::guard::check,
        ))
        .with_state(shared)
}
