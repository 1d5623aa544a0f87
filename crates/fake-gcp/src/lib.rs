//! # mcm-fake-gcp: an in-process fake of the Compute Engine API (test support)
//!
//! The Compute Engine surface that the GCP provider uses, served by axum on
//! `127.0.0.1:<port 0>` inside a test, with in-memory state:
//!
//! | method | path (under `/compute/v1/projects/{project}/zones/{zone}`) |
//! |---|---|
//! | `instances.insert` | `POST /instances` → Operation |
//! | `instances.get` | `GET /instances/{name}` → Instance, 404 when unknown |
//! | `instances.list` | `GET /instances?filter=&maxResults=&pageToken=` → InstanceList |
//! | `instances.delete` | `DELETE /instances/{name}` → Operation, 404 when unknown |
//! | `zoneOperations.get` | `GET /operations/{operation}` → Operation |
//! | `instances.setLabels` | `POST /instances/{name}/setLabels` → Operation, 412 on a stale `labelFingerprint` |
//! | `instances.setTags` | `POST /instances/{name}/setTags` → Operation, 412 on a stale tags `fingerprint` |
//! | `instances.setMetadata` | `POST /instances/{name}/setMetadata` → Operation, 412 on a stale metadata `fingerprint` |
//! | `disks.resize` | `POST /disks/{disk}/resize` → Operation, 400 unless larger |
//!
//! The hot-update calls check what Compute checks (label, network-tag and
//! metadata-key formats, duplicate metadata keys) and change the instance
//! when accepted; every accepted change gets a new fingerprint (a hash of
//! the content). Instances carry `labelFingerprint`, and each persistent
//! disk its `diskSizeGb` and a `source` `…/disks/<deviceName>`, which
//! `disks.resize` names.
//!
//! Operations are `PENDING`/`RUNNING` for [`FakeGce::set_polls_until_done`]
//! polls, then `DONE` (their effect, e.g. an instance reaching `RUNNING` or
//! disappearing, happens then). Their `id` is a decimal uint64 string, as the
//! real API sends it. Errors use Google's JSON envelope
//! (`{"error": {"code", "message", "errors": [{"reason", "domain", "message"}]}}`).
//! Faults are injected per method ([`FakeGce::inject`]): an HTTP error
//! (e.g. 409 `alreadyExists`, 403 `QUOTA_EXCEEDED`, 429 `rateLimitExceeded`),
//! or an operation that ends `DONE` with an error (e.g.
//! `ZONE_RESOURCE_POOL_EXHAUSTED`). A duplicate insert answers 409
//! `alreadyExists` like the real API.
//!
//! `instances.insert` refuses what Compute Engine refuses (see `checks`
//! and the README): a body outside the discovery schema, a name that is
//! not RFC 1035, a missing machine type or disk, malformed labels, and
//! scheduling combinations GCE does not allow.
//!
//! Authentication is not checked beyond the presence of a bearer token
//! ([`FakeGce::unauthenticated_requests`] counts requests without one).
//! This crate is test support only (`publish = false`), never a dependency of
//! the product.

mod checks;
mod filter;
mod handlers;
mod state;

pub use filter::Filter;
pub use state::{Fault, Method};

use serde_json::Value;
use state::State;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// A throwaway RSA key, generated for these tests only and valid nowhere:
/// the fake accepts any bearer token, but the official auth library signs
/// its service-account JWTs with a real key.
const TEST_KEY: &str = include_str!("test_service_account_key.pem");

/// A `service_account` JSON (only the fields the GCP provider allows) for
/// `project`, with a throwaway key, as a MachineClass Secret carries it.
pub fn service_account_json(project: &str) -> String {
    serde_json::json!({
        "type": "service_account",
        "project_id": project,
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": TEST_KEY,
        "client_email": format!("mcm-test@{project}.iam.gserviceaccount.com"),
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
        "universe_domain": "googleapis.com"
    })
    .to_string()
}

/// The API version segment of every path.
pub const BASE_PATH: &str = "/compute/v1";

/// A running fake. Dropping it stops the server.
pub struct FakeGce {
    endpoint: String,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Drop for FakeGce {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeGce {
    /// Starts a fake on `127.0.0.1` with a free port.
    pub async fn start() -> std::io::Result<FakeGce> {
        Self::start_on("127.0.0.1:0").await
    }

    /// Starts a fake on the given address (`host:port`).
    pub async fn start_on(addr: &str) -> std::io::Result<FakeGce> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let app = handlers::router(state.clone());
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "fake GCE server stopped");
            }
        });
        Ok(FakeGce {
            endpoint: format!("http://{local}"),
            state,
            server,
        })
    }

    /// The base URL to hand to the client (`http://127.0.0.1:<port>`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut s)
    }

    /// How many `zoneOperations.get` calls an operation answers with a
    /// non-`DONE` status before it is `DONE` (0 = done at once). Applies to
    /// operations created from now on.
    pub fn set_polls_until_done(&self, polls: u32) {
        self.with(|s| s.polls_until_done = polls);
    }

    /// Makes the next `times` calls of `method` fail with `fault`
    /// (queued after faults injected earlier for the same method).
    pub fn inject(&self, method: Method, fault: Fault, times: usize) {
        self.with(|s| {
            let q = s.faults.entry(method).or_default();
            for _ in 0..times {
                q.push_back(fault.clone());
            }
        });
    }

    /// Drops every fault still queued.
    pub fn clear_faults(&self) {
        self.with(|s| s.faults.clear());
    }

    /// Puts an instance (a Compute `Instance` JSON object with at least a
    /// `name`) into a zone as if it had been created earlier, e.g. another
    /// machine's instance. Missing output fields (`id`, `status`,
    /// `selfLink`, ...) are filled in as insert would.
    pub fn put_instance(&self, project: &str, zone: &str, instance: Value) {
        self.with(|s| {
            s.put_instance(project, zone, instance, true);
        });
    }

    /// Makes `image` (`projects/<p>/global/images/<name>` or its
    /// `…/images/family/<family>`) not exist: an insert naming it is answered
    /// 404 `notFound`, as Compute Engine answers a missing image. Every other
    /// well-formed image reference exists.
    pub fn delete_image(&self, image: &str) {
        self.with(|s| {
            s.deleted_images.insert(
                image
                    .trim_start_matches(crate::checks::API_PREFIX)
                    .to_string(),
            );
        });
    }

    /// The instances of a zone (name → Instance JSON).
    pub fn instances(&self, project: &str, zone: &str) -> BTreeMap<String, Value> {
        self.with(|s| {
            s.instances
                .iter()
                .filter(|((p, z, _), _)| p == project && z == zone)
                .map(|((_, _, n), v)| (n.clone(), v.clone()))
                .collect()
        })
    }

    /// All instances of every project and zone.
    pub fn instance_count(&self) -> usize {
        self.with(|s| s.instances.len())
    }

    /// Requests served so far, per method (faulted ones included).
    pub fn requests(&self) -> BTreeMap<Method, u64> {
        self.with(|s| s.requests.clone())
    }

    /// Requests that carried no `Authorization: Bearer …` header.
    pub fn unauthenticated_requests(&self) -> u64 {
        self.with(|s| s.unauthenticated)
    }

    /// The JSON bodies of the inserts received so far (the `Instance` as sent).
    pub fn inserted_bodies(&self) -> Vec<Value> {
        self.with(|s| s.inserted.clone())
    }

    /// Every insert with an instance name, in order: the name, when it
    /// arrived, and whether an injected operation error made it fail.
    pub fn insert_log(&self) -> Vec<(String, std::time::Instant, bool)> {
        self.with(|s| s.insert_log.clone())
    }

    /// The `filter` parameters of the list calls received so far.
    pub fn list_filters(&self) -> Vec<Option<String>> {
        self.with(|s| s.list_filters.clone())
    }

    /// Sets the largest page `instances.list` answers (default 500, as the API).
    pub fn set_max_page_size(&self, size: usize) {
        self.with(|s| s.max_page_size = size.max(1));
    }
}
