//! # mcm-fake-openstack: an in-process OpenStack for tests
//!
//! A small, stateful fake of the OpenStack APIs the OpenStack provider uses:
//! Keystone v3 (version discovery, password and application-credential
//! tokens, a service catalog), Nova v2.1 (servers with metadata and Nova's
//! regex-like name filter, server metadata create/update, replace and item
//! delete checked against Nova's metadata schema, flavors, the image proxy,
//! version discovery),
//! Neutron v2.0 (networks, subnets, ports with tags, security groups) and
//! Cinder v3 (volumes). Responses follow the shapes of OpenStack's own API
//! samples (the provider's `samples` test checks them against the samples
//! shipped in the `nova` and `neutron-lib` source distributions).
//!
//! A server create is refused as Nova refuses it (`nova::create_checks`):
//! a member Nova's request schema does not allow, an unknown `key_name`
//! or availability zone, a server group hint that is not a UUID.
//!
//! Everything runs on `127.0.0.1` on a port chosen by the OS; state lives in
//! memory. Faults are injected per operation ([`Fault`]), servers can be kept
//! in `BUILD` for a number of polls or sent to `ERROR`, and every request is
//! counted per operation ([`FakeOpenStack::calls`]).
//!
//! ```no_run
//! # async fn demo() {
//! let fake = mcm_fake_openstack::FakeOpenStack::start().await.unwrap();
//! let flavor = fake.add_flavor("m1.small");
//! println!("auth URL {} flavor {flavor}", fake.auth_url());
//! # }
//! ```

mod cinder;
mod keystone;
mod neutron;
mod nova;
mod state;
pub mod tls;

pub use state::{Catalog, Fault, Op};

use axum::extract::{Request, State as AxState};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use state::State;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::task::JoinHandle;

/// The user name the fake accepts with [`FakeOpenStack::PASSWORD`].
pub const USERNAME: &str = "mcm";
/// The password of [`USERNAME`].
pub const PASSWORD: &str = "secret-password";
/// The application credential ID the fake accepts.
pub const APP_CRED_ID: &str = "app-cred-id";
/// The secret of [`APP_CRED_ID`].
pub const APP_CRED_SECRET: &str = "app-cred-secret";
/// The project (tenant) name.
pub const PROJECT: &str = "mcm-project";
/// The domain name.
pub const DOMAIN: &str = "Default";
/// The region of every catalog endpoint.
pub const REGION: &str = "RegionOne";

pub(crate) type Shared = Arc<Mutex<State>>;

pub(crate) fn lock(s: &Shared) -> MutexGuard<'_, State> {
    match s.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A running fake. Stops when dropped.
pub struct FakeOpenStack {
    addr: SocketAddr,
    scheme: &'static str,
    state: Shared,
    server: JoinHandle<()>,
    refused: Arc<AtomicU64>,
}

impl Drop for FakeOpenStack {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeOpenStack {
    /// Starts the fake on `127.0.0.1` on a free port.
    pub async fn start() -> std::io::Result<FakeOpenStack> {
        FakeOpenStack::start_with(false).await
    }

    /// Starts the fake over TLS on `127.0.0.1`, requiring a client
    /// certificate signed by [`tls::CA`] (see [`tls`] for the material).
    pub async fn start_tls() -> std::io::Result<FakeOpenStack> {
        FakeOpenStack::start_with(true).await
    }

    async fn start_with(tls: bool) -> std::io::Result<FakeOpenStack> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let scheme = if tls { "https" } else { "http" };
        let state: Shared = Arc::new(Mutex::new(State::new(format!("{scheme}://{addr}"))));
        let app = axum::Router::new()
            .nest("/identity", keystone::router())
            .nest("/compute", nova::router())
            .nest("/network", neutron::router())
            .nest("/volume", cinder::router())
            .fallback(unmatched)
            .layer(middleware::from_fn_with_state(state.clone(), authenticate))
            .with_state(state.clone());
        let refused = Arc::new(AtomicU64::new(0));
        let server = if tls {
            let listener = tls::TlsListener {
                tcp: listener,
                acceptor: tokio_rustls::TlsAcceptor::from(tls::server_config()?),
                refused: refused.clone(),
            };
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            })
        } else {
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            })
        };
        Ok(FakeOpenStack {
            addr,
            scheme,
            state,
            server,
            refused,
        })
    }

    /// TLS handshakes refused so far (no client certificate, or one the
    /// fake does not trust); always 0 without TLS.
    pub fn refused_handshakes(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// The base URL, e.g. `http://127.0.0.1:40001`.
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The Keystone v3 URL for the Secret's `authURL`.
    pub fn auth_url(&self) -> String {
        format!("{}://{}/identity/v3", self.scheme, self.addr)
    }

    /// Revokes every token issued so far (as an expiry would): the next call
    /// with one is answered 401.
    pub fn revoke_tokens(&self) {
        lock(&self.state).tokens.clear();
    }

    /// Changes what the service catalog of the next tokens lists.
    pub fn set_catalog(&self, catalog: Catalog) {
        lock(&self.state).catalog = catalog;
    }

    /// Adds a flavor; returns its ID.
    pub fn add_flavor(&self, name: &str) -> String {
        lock(&self.state).add_flavor(name)
    }

    /// Adds a key pair: a server create may name it as `key_name`.
    pub fn add_keypair(&self, name: &str) {
        lock(&self.state).keypairs.insert(name.to_string());
    }

    /// Adds a server group (by UUID): a create naming another is refused, as
    /// Nova refuses it (`InstanceGroupNotFound`, 400).
    pub fn add_server_group(&self, uuid: &str) {
        lock(&self.state).server_groups.insert(uuid.to_string());
    }

    /// Adds an availability zone (`nova` is there from the start).
    pub fn add_availability_zone(&self, name: &str) {
        lock(&self.state).zones.insert(name.to_string());
    }

    /// Adds an image (visible through Nova's image proxy); returns its ID.
    pub fn add_image(&self, name: &str) -> String {
        lock(&self.state).add_image(name)
    }

    /// Adds a network; returns its ID.
    pub fn add_network(&self, name: &str) -> String {
        lock(&self.state).add_network(name)
    }

    /// Adds a subnet of a network with an IPv4 CIDR like `10.0.1.0/24`; returns its ID.
    pub fn add_subnet(&self, network_id: &str, name: &str, cidr: &str) -> String {
        lock(&self.state).add_subnet(network_id, name, cidr)
    }

    /// Adds a security group; returns its ID.
    pub fn add_security_group(&self, name: &str) -> String {
        lock(&self.state).add_security_group(name)
    }

    /// Makes the next `fault.times` calls of `op` fail with the fault.
    pub fn inject(&self, op: Op, fault: Fault) {
        lock(&self.state).faults.insert(op, fault);
    }

    /// Servers answer `BUILD` to this many reads before they become `ACTIVE`.
    pub fn set_build_polls(&self, polls: u32) {
        lock(&self.state).build_polls = polls;
    }

    /// The next `count` servers go to `ERROR` with this fault message instead of `ACTIVE`.
    pub fn fail_next_builds(&self, count: u32, message: &str) {
        let mut s = lock(&self.state);
        s.failing_builds = count;
        s.build_fault = message.to_string();
    }

    /// Every server (as Nova shows it), deleted ones excluded.
    pub fn servers(&self) -> Vec<Value> {
        let s = lock(&self.state);
        s.servers.values().map(|v| s.server_view(v)).collect()
    }

    /// Every port (as Neutron shows it).
    pub fn ports(&self) -> Vec<Value> {
        lock(&self.state).ports.values().cloned().collect()
    }

    /// Every volume (as Cinder shows it).
    pub fn volumes(&self) -> Vec<Value> {
        lock(&self.state).volumes.values().cloned().collect()
    }

    /// The last server-create request body seen.
    pub fn last_server_create(&self) -> Option<Value> {
        lock(&self.state).last_server_create.clone()
    }

    /// Requests per operation (e.g. `nova.servers.create`) since the start.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        lock(&self.state).calls.clone()
    }

    /// Requests that matched no route (method and path), for debugging.
    pub fn unmatched(&self) -> Vec<String> {
        lock(&self.state).unmatched.clone()
    }

    /// Adds a server directly (as another tool would), with the given metadata; returns its ID.
    pub fn add_server(&self, name: &str, metadata: Value) -> String {
        lock(&self.state).add_server_direct(name, metadata)
    }

    /// Adds an ACTIVE server with a port on `network_id` (a server another
    /// client, e.g. the Go provider, booted); returns its ID.
    pub fn add_server_on(&self, name: &str, metadata: Value, network_id: &str) -> String {
        lock(&self.state).add_server_on(name, metadata, network_id)
    }
}

/// Checks the token of every request but token issuing and version discovery.
async fn authenticate(AxState(state): AxState<Shared>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let public = path.starts_with("/identity")
        || path == "/compute"
        || path == "/compute/"
        || path == "/compute/v2.1"
        || path == "/compute/v2.1/"
        || path == "/network"
        || path == "/network/"
        || path == "/volume"
        || path == "/volume/"
        || (path.starts_with("/volume/v3") && path.trim_end_matches('/').matches('/').count() <= 3);
    if !public {
        let token = req
            .headers()
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if !lock(&state).tokens.contains(&token) {
            return error(
                StatusCode::UNAUTHORIZED,
                "The request you have made requires authentication.",
            );
        }
    }
    next.run(req).await
}

async fn unmatched(AxState(state): AxState<Shared>, req: Request) -> Response {
    let what = format!("{} {}", req.method(), req.uri());
    lock(&state).unmatched.push(what.clone());
    error(StatusCode::NOT_FOUND, &format!("no route for {what}"))
}

/// An error in the envelope of Nova and Cinder (`{"itemNotFound": {...}}`).
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    let key = match status.as_u16() {
        400 => "badRequest",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "itemNotFound",
        409 => "conflictingRequest",
        413 => "overLimit",
        _ => "computeFault",
    };
    (
        status,
        Json(json!({ key: { "code": status.as_u16(), "message": message } })),
    )
        .into_response()
}

/// An error in Neutron's envelope (`{"NeutronError": {...}}`).
pub(crate) fn neutron_error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        Json(json!({ "NeutronError": { "type": kind, "message": message, "detail": "" } })),
    )
        .into_response()
}

/// The injected fault of an operation, if one is due; counts the call.
pub(crate) fn begin(state: &Shared, op: Op) -> Option<Response> {
    let mut s = lock(state);
    *s.calls.entry(op.name().to_string()).or_default() += 1;
    let fault = s.faults.get_mut(&op)?;
    if fault.times == 0 {
        return None;
    }
    fault.times -= 1;
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let message = fault.message.clone();
    Some(if op.is_neutron() {
        let kind = if fault.status == 409 {
            "OverQuota"
        } else {
            "NeutronError"
        };
        neutron_error(status, kind, &message)
    } else {
        error(status, &message)
    })
}

#[cfg(test)]
mod tests;
