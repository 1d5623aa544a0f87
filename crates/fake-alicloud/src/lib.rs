//! # mcm-fake-alicloud: an in-process fake of the ECS RPC API (test support)
//!
//! No emulator of Alibaba Cloud ECS exists, so the provider's tests run
//! against this fake. It serves `RunInstances`, `DescribeInstances` and
//! `DeleteInstance` on `127.0.0.1:<port>` and:
//! - dispatches on the action (`x-acs-action`) and checks `x-acs-version`;
//! - verifies the ACS3-HMAC-SHA256 signature against its access keys
//!   (`SignatureDoesNotMatch`, `InvalidAccessKeyId.NotFound`,
//!   `SignatureNonceUsed` for a replayed nonce);
//! - refuses any parameter that Alibaba's ECS metadata does not list for the
//!   action ([`metadata`]), so the client cannot drift from the real API;
//! - refuses values ECS refuses ([`checks`]): a value that is not of the
//!   metadata's type, a malformed instance name or tag, an unknown disk
//!   category, each with an error code the metadata lists for the action;
//! - moves instances from `Pending` to `Running` after
//!   [`FakeEcs::set_pending_for`];
//! - replays a `ClientToken`: a second RunInstances with the same token
//!   answers the first call's instance IDs and creates nothing;
//! - pages DescribeInstances with `MaxResults`/`NextToken`
//!   ([`FakeEcs::set_max_page`] forces small pages);
//! - injects error codes ([`FakeEcs::inject`]), only ones the metadata lists
//!   for the action or as throttling codes (`Zone.NotOnSale`,
//!   `OperationDenied.NoStock`, `QuotaExceed.*`, `Throttling.User`, ...),
//!   with the documented HTTP status, in ECS's error envelope.
//!
//! ```no_run
//! # async fn demo() {
//! let fake = mcm_fake_alicloud::FakeEcs::start().await.unwrap();
//! fake.inject("RunInstances", "OperationDenied.NoStock", 1).unwrap();
//! println!("point the driver at {}", fake.url());
//! # }
//! ```

pub mod checks;
pub mod metadata;
pub mod state;
pub mod verify;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::json;
use state::{EcsFault, State};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use state::FakeInstance;

/// The access key ID the fake accepts by default.
pub const ACCESS_KEY_ID: &str = "LTAIfakeAccessKeyId";
/// Its secret.
pub const ACCESS_KEY_SECRET: &str = "fake-access-key-secret";

struct Shared {
    state: Mutex<State>,
    keys: BTreeMap<String, String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

/// A running fake; stops when dropped.
pub struct FakeEcs {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeEcs {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeEcs {
    /// Starts a fake on 127.0.0.1 (a free port) accepting [`ACCESS_KEY_ID`].
    pub async fn start() -> std::io::Result<FakeEcs> {
        Self::start_on("127.0.0.1:0").await
    }

    /// Starts a fake on the given address.
    pub async fn start_on(addr: &str) -> std::io::Result<FakeEcs> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            keys: [(ACCESS_KEY_ID.to_string(), ACCESS_KEY_SECRET.to_string())].into(),
        });
        let s = Arc::clone(&shared);
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let s = Arc::clone(&s);
                async move { serve(&s, method, uri, headers, body) }
            },
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeEcs { addr, shared, task })
    }

    /// The endpoint URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers the next `times` calls of `action` with `code`. Refused unless
    /// the ECS metadata lists the code for the action or as a throttling code.
    pub fn inject(&self, action: &str, code: &str, times: usize) -> Result<(), String> {
        let status = metadata::metadata()
            .and_then(|m| m.error_status(action, code))
            .ok_or_else(|| format!("the ECS metadata lists no error code {code} for {action}"))?;
        let mut s = self.shared.lock();
        let q = s.faults.entry(action.to_string()).or_default();
        for _ in 0..times {
            q.push_back((code.to_string(), status));
        }
        Ok(())
    }

    /// How long new instances stay `Pending` (default 300 ms).
    pub fn set_pending_for(&self, d: Duration) {
        self.shared.lock().pending_for = d;
    }

    /// The largest DescribeInstances page (default 100, the API's limit).
    pub fn set_max_page(&self, n: usize) {
        self.shared.lock().max_page = n;
    }

    /// Every instance, by ID.
    pub fn instances(&self) -> BTreeMap<String, FakeInstance> {
        self.shared.lock().instances.clone()
    }

    /// The status an instance shows now.
    pub fn status_of(&self, id: &str) -> Option<&'static str> {
        let s = self.shared.lock();
        s.instances.get(id).map(|i| i.status(s.pending_for))
    }

    /// Creates an instance as another client would (e.g. the Go provider):
    /// a RunInstances of `name` in `region` with `tags`, not recorded among
    /// the requests. Returns its ID.
    pub fn put_instance(
        &self,
        region: &str,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Result<String, String> {
        let mut p = BTreeMap::new();
        for (k, v) in [
            ("RegionId", region),
            ("ImageId", "m-fake"),
            ("InstanceType", "ecs.g6.large"),
            ("InstanceName", name),
        ] {
            p.insert(k.to_string(), v.to_string());
        }
        for (n, (k, v)) in tags.iter().enumerate() {
            p.insert(format!("Tag.{}.Key", n + 1), k.to_string());
            p.insert(format!("Tag.{}.Value", n + 1), v.to_string());
        }
        let mut st = self.shared.lock();
        let seen = st.requests.len();
        let answer = st.handle("RunInstances", p).map_err(|e| e.code)?;
        st.requests.truncate(seen);
        answer["InstanceIdSets"]["InstanceIdSet"][0]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "no instance ID".to_string())
    }

    /// Removes an instance behind the driver's back (as a user in the console).
    pub fn remove_instance(&self, id: &str) -> bool {
        self.shared.lock().instances.remove(id).is_some()
    }

    /// Every accepted request: (action, parameters), in order.
    pub fn requests(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.shared.lock().requests.clone()
    }

    /// Accepted requests per action.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (a, _) in &self.shared.lock().requests {
            *out.entry(a.clone()).or_default() += 1;
        }
        out
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }
}

fn envelope(status: u16, code: &str, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let body = json!({
        "RequestId": hex::encode(rand::random::<[u8; 16]>()).to_uppercase(),
        "HostId": "ecs.fake.aliyuncs.com",
        "Code": code,
        "Message": message,
        "Recommend": format!("https://api.aliyun.com/troubleshoot?q={code}&product=Ecs"),
    });
    (status, axum::Json(body)).into_response()
}

fn serve(s: &Shared, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut params = match verify::parse_query(uri.query().unwrap_or_default()) {
        Ok(p) => p,
        Err(r) => return envelope(r.status, r.code, &r.message),
    };
    let signed = verify::Signed {
        method: method.as_str(),
        path: uri.path(),
        query: &params,
        header: &header,
        body: &body,
    };
    if let Err(r) = verify::verify(&signed, &s.keys) {
        return envelope(r.status, r.code, &r.message);
    }
    if header("x-acs-version").as_deref() != Some("2014-05-26") {
        return envelope(
            400,
            "InvalidVersion",
            "Specified parameter Version is not valid.",
        );
    }
    let Some(action) = header("x-acs-action") else {
        return envelope(400, "MissingAction", "x-acs-action is mandatory");
    };
    let nonce = header("x-acs-signature-nonce").unwrap_or_default();
    let mut state = s.lock();
    if !state.nonces.insert(nonce) {
        return envelope(
            400,
            "SignatureNonceUsed",
            "Specified signature nonce was used already.",
        );
    }
    // Form parameters in the body count as well (RPC accepts both).
    if header("content-type").is_some_and(|c| c.starts_with("application/x-www-form-urlencoded")) {
        match verify::parse_query(&String::from_utf8_lossy(&body)) {
            Ok(form) => params.extend(form),
            Err(r) => return envelope(r.status, r.code, &r.message),
        }
    }
    match state.handle(&action, params) {
        Ok(v) => axum::Json(v).into_response(),
        Err(EcsFault {
            status,
            code,
            message,
        }) => envelope(status, &code, &message),
    }
}
