//! The local cloud server: an axum HTTP/JSON API over a redb store, with
//! tunable latency, rate limits and faults, an admin API and (optionally)
//! simulated kubelets.
//!
//! Cloud API (what [`crate::LocalDriver`] calls; each counts as one operation):
//!
//! | method and path | operation | answer |
//! |---|---|---|
//! | `POST /v1/instances` `{clientToken, machineName, providerSpec}` | create | the instance (the same one for a repeated `clientToken`) |
//! | `POST /v1/instances/{id}/initialize` `{providerSpec}` | initialize | the instance, its network settings now as the spec wants |
//! | `DELETE /v1/instances/{id}` | delete | `{deleted}` (a missing instance is not an error) |
//! | `POST /v1/instances/find` `{instanceId?, clientToken?, machineName?, clusterTag?}` | status | `{instances}` |
//! | `GET /v1/instances?clusterTag=<key>` | list | `{instances}` carrying that tag key |
//!
//! Admin API (not counted):
//!
//! | method and path | what |
//! |---|---|
//! | `GET /admin/faults` | the current [`Tunables`] |
//! | `PUT /admin/faults` | replace them (merged onto the defaults) |
//! | `PATCH /admin/faults` | change some (JSON merge patch onto the current ones) |
//! | `GET /admin/stats`, `DELETE /admin/stats` | counters per operation; reset them |
//! | `GET /admin/instances` | every instance, also those not yet visible |
//! | `POST /admin/instances/{id}/stop`, `.../kill`, `.../start` | operator actions on one instance |
//! | `GET /healthz` | `ok` |
//!
//! Errors are `{code, message}` with a machine code name (`NotFound`,
//! `InvalidArgument`, `ResourceExhausted`, ...) and a matching HTTP status.

use crate::kubelet::{self, KubeletConfig};
use crate::spec::LocalProviderSpec;
use crate::store::{Store, StoreError};
use crate::tunables::{self, Bucket, Op, Tunables};
use crate::wire::{
    self, CreateInstanceRequest, DeleteInstanceResponse, ErrorBody, FindInstancesRequest,
    InitializeInstanceRequest, Instance, InstanceList, InstanceState, OpStats, Stats,
};
use crate::Error;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use mcm_driver::Code;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, Mutex};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// The default port of `mcm local-cloud serve`.
pub const DEFAULT_PORT: u16 = 7070;
/// The default zone of instances whose spec names none.
pub const DEFAULT_ZONE: &str = "local-1a";

/// Parses a duration: `250ms`, `10s`, `2m`, `1h`, or a plain number of milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 500ms, 10s, 2m)"))?;
    let ms = match unit.trim() {
        "" | "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("{text:?}: unknown unit (use ms, s, m or h)")),
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Arguments of `mcm local-cloud serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// The address to listen on. The API has no authentication: keep it on loopback.
    #[arg(
        long,
        env = "MCM_LOCAL_CLOUD_LISTEN_ADDRESS",
        default_value = "127.0.0.1"
    )]
    pub listen_address: IpAddr,
    /// The port to listen on (0 picks a free one).
    #[arg(long, env = "MCM_LOCAL_CLOUD_PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The redb file holding the cloud's state (created when missing).
    #[arg(
        long,
        env = "MCM_LOCAL_CLOUD_STORE",
        default_value = ".mcm/local-cloud.redb"
    )]
    pub store: PathBuf,
    /// The kubeconfig of the cluster where the simulated kubelets register Nodes
    /// and renew Leases; `none` turns the kubelet simulation off.
    #[arg(long, env = "MCM_LOCAL_CLOUD_TARGET_KUBECONFIG")]
    pub target_kubeconfig: Option<PathBuf>,
    /// The zone of instances whose providerSpec names none.
    #[arg(long, default_value = DEFAULT_ZONE)]
    pub zone: String,
    /// A JSON tunables file (see `GET /admin/faults` for the format), merged onto the defaults.
    #[arg(long, env = "MCM_LOCAL_CLOUD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Time from launch to running and Node registration (overrides the config file).
    #[arg(long, value_parser = parse_duration)]
    pub boot_delay: Option<Duration>,
    /// How long a new instance stays invisible to status/list/initialize (overrides the config file).
    #[arg(long, value_parser = parse_duration)]
    pub eventual_consistency: Option<Duration>,
    /// Lift all rate limits (the defaults mirror EC2's published API limits).
    #[arg(long)]
    pub no_rate_limits: bool,
    /// How often a simulated kubelet renews its Lease.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub heartbeat_interval: Duration,
    /// How often a simulated kubelet refreshes its Node's Ready condition (default: the heartbeat interval).
    #[arg(long, value_parser = parse_duration)]
    pub node_status_interval: Option<Duration>,
}

impl ServeArgs {
    /// The server configuration these arguments describe (reads the config file).
    pub fn to_config(&self) -> Result<CloudConfig, Error> {
        let mut tunables = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| Error::Config {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                let doc: serde_json::Value =
                    serde_json::from_str(&text).map_err(|e| Error::Config {
                        path: path.clone(),
                        message: e.to_string(),
                    })?;
                Tunables::merged(&Tunables::default(), &doc).map_err(|e| Error::Config {
                    path: path.clone(),
                    message: e.to_string(),
                })?
            }
            None => Tunables::default(),
        };
        if let Some(d) = self.boot_delay {
            tunables.boot_delay_ms = millis(d);
        }
        if let Some(d) = self.eventual_consistency {
            tunables.eventual_consistency_ms = millis(d);
        }
        if self.no_rate_limits {
            for op in Op::ALL {
                tunables.op_mut(op).rate_limit = None;
            }
        }
        Ok(CloudConfig {
            listen: SocketAddr::new(self.listen_address, self.port),
            store_path: self.store.clone(),
            zone: self.zone.clone(),
            target_kubeconfig: self
                .target_kubeconfig
                .clone()
                .filter(|p| !p.as_os_str().is_empty() && p.as_os_str() != "none"),
            heartbeat_interval: self.heartbeat_interval,
            node_status_interval: self.node_status_interval,
            tunables,
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The configuration of a server started with [`spawn`].
#[derive(Debug, Clone)]
pub struct CloudConfig {
    /// Where to listen (port 0 picks a free one).
    pub listen: SocketAddr,
    /// The redb store file.
    pub store_path: PathBuf,
    /// The zone of instances whose spec names none.
    pub zone: String,
    /// The target cluster of the simulated kubelets (`None` = off).
    pub target_kubeconfig: Option<PathBuf>,
    /// Lease renewal period of the simulated kubelets.
    pub heartbeat_interval: Duration,
    /// Node Ready-condition refresh period (default: `heartbeat_interval`).
    pub node_status_interval: Option<Duration>,
    /// Latency, rate limits, faults, boot delay, eventual consistency.
    pub tunables: Tunables,
}

impl CloudConfig {
    /// 127.0.0.1 on a free port, the given store, default tunables, no kubelets.
    pub fn new(store_path: impl Into<PathBuf>) -> Self {
        CloudConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            store_path: store_path.into(),
            zone: DEFAULT_ZONE.to_string(),
            target_kubeconfig: None,
            heartbeat_interval: Duration::from_secs(10),
            node_status_interval: None,
            tunables: Tunables::default(),
        }
    }
}

// ---------------------------------------------------------------------------
// Errors of the API

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    Plain,
    Throttled,
    Injected,
}

/// An error answer of the API.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: Code,
    message: String,
    kind: ErrorKind,
}

impl ApiError {
    fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            kind: ErrorKind::Plain,
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(Code::InvalidArgument, message)
    }

    fn not_found(id: &str) -> Self {
        ApiError::new(
            Code::NotFound,
            format!("InvalidInstanceID.NotFound: the instance {id} does not exist"),
        )
    }

    fn injected(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            kind: ErrorKind::Injected,
        }
    }

    fn store(e: StoreError) -> Self {
        warn!(error = %e, "store write failed");
        ApiError::new(Code::Internal, format!("the cloud's store failed: {e}"))
    }
}

fn http_status(code: Code) -> StatusCode {
    match code {
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code.name(),
            message: self.message,
        };
        (http_status(self.code), Json(body)).into_response()
    }
}

fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("request body: {e}")))
}

// ---------------------------------------------------------------------------
// Shared state

#[derive(Debug, Default)]
struct CloudState {
    instances: BTreeMap<String, Instance>,
    by_token: HashMap<String, String>,
    next_seq: u64,
}

#[derive(Debug, Default)]
struct StatsState {
    ops: BTreeMap<&'static str, OpStats>,
    since: Option<DateTime<Utc>>,
}

/// The server's state, shared by the handlers and the kubelet simulation.
#[derive(Debug)]
pub(crate) struct Shared {
    zone: String,
    store: Store,
    state: Mutex<CloudState>,
    tunables: StdMutex<Tunables>,
    buckets: StdMutex<HashMap<Op, Bucket>>,
    stats: StdMutex<StatsState>,
}

fn lock<T>(m: &StdMutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks cannot leave the data
    // half-updated in a way that matters here: keep serving.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn instance_id() -> String {
    // 17 hex digits, like EC2.
    format!("i-{:017x}", rand::random::<u128>() & ((1u128 << 68) - 1))
}

/// The fake private IPv4 address of sequence number `seq`: 10.x.y.z, z in 1..=254.
fn private_ip(seq: u64) -> String {
    let z = seq % 254 + 1;
    let rest = seq / 254;
    format!("10.{}.{}.{}", (rest / 256) % 256, rest % 256, z)
}

fn seq_words(seq: u64) -> (u16, u16) {
    (((seq >> 16) & 0xffff) as u16, (seq & 0xffff) as u16)
}

/// The `k`-th IPv6 address of sequence number `seq` (in the ULA range fd00::/8).
fn ipv6_address(seq: u64, k: usize) -> String {
    let (hi, lo) = seq_words(seq);
    let k = u16::try_from(k + 1).unwrap_or(u16::MAX);
    Ipv6Addr::new(0xfd00, 0x10, hi, lo, 0, 0, 0, k).to_string()
}

/// The `k`-th IPv6 /80 prefix of sequence number `seq`.
fn ipv6_prefix(seq: u64, k: usize) -> String {
    let (hi, lo) = seq_words(seq);
    let k = u16::try_from(k + 1).unwrap_or(u16::MAX);
    format!("{}/80", Ipv6Addr::new(0xfd00, 0x20, hi, lo, k, 0, 0, 0))
}

fn view(inst: &Instance, now: DateTime<Utc>) -> Instance {
    let mut v = inst.clone();
    v.state = inst.state_at(now);
    v
}

fn after(now: DateTime<Utc>, ms: u64) -> DateTime<Utc> {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    now.checked_add_signed(chrono::Duration::milliseconds(ms))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl Shared {
    fn tunables(&self) -> Tunables {
        lock(&self.tunables).clone()
    }

    async fn persist_put(&self, inst: Instance, next_seq: u64) -> Result<(), ApiError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.put(&inst, next_seq))
            .await
            .map_err(|e| ApiError::new(Code::Internal, format!("store task: {e}")))?
            .map_err(ApiError::store)
    }

    async fn persist_remove(&self, id: String) -> Result<bool, ApiError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.remove(&id))
            .await
            .map_err(|e| ApiError::new(Code::Internal, format!("store task: {e}")))?
            .map_err(ApiError::store)
    }

    /// Rate limit, latency and the injected error rate of one call.
    async fn gate(&self, op: Op) -> Result<(), ApiError> {
        let t = self.tunables().op(op).clone();
        if let Some(limit) = t.rate_limit {
            let now = std::time::Instant::now();
            let mut buckets = lock(&self.buckets);
            let bucket = buckets.entry(op).or_insert_with(|| Bucket::new(limit, now));
            if bucket.limit() != limit {
                *bucket = Bucket::new(limit, now);
            }
            if !bucket.try_take(now) {
                return Err(ApiError {
                    code: Code::ResourceExhausted,
                    message: format!(
                        "RequestLimitExceeded: request limit exceeded for {op} (bucket {}, refill {}/s)",
                        limit.capacity, limit.refill_per_second
                    ),
                    kind: ErrorKind::Throttled,
                });
            }
        } else {
            lock(&self.buckets).remove(&op);
        }
        let delay = tunables::latency(&t);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if t.error_rate > 0.0 && rand::random::<f64>() < t.error_rate {
            return Err(ApiError::injected(
                Code::from_name(&t.error_code),
                format!("injected fault: {op} failed (errorRate {})", t.error_rate),
            ));
        }
        Ok(())
    }

    fn record<T>(&self, op: Op, result: &Result<T, ApiError>) {
        let mut stats = lock(&self.stats);
        let s = stats.ops.entry(op.as_str()).or_default();
        s.calls += 1;
        match result {
            Ok(_) => s.ok += 1,
            Err(e) => {
                *s.errors_by_code.entry(e.code.name()).or_default() += 1;
                match e.kind {
                    ErrorKind::Throttled => s.throttled += 1,
                    ErrorKind::Injected => s.injected_faults += 1,
                    ErrorKind::Plain => {}
                }
            }
        }
    }

    /// Runs one counted operation: gate, work, stats, answer.
    async fn run<T, F>(&self, op: Op, work: F) -> Response
    where
        T: Serialize,
        F: Future<Output = Result<T, ApiError>>,
    {
        let result = match self.gate(op).await {
            Ok(()) => work.await,
            Err(e) => Err(e),
        };
        self.record(op, &result);
        match result {
            Ok(v) => (StatusCode::OK, Json(v)).into_response(),
            Err(e) => {
                debug!(op = %op, code = %e.code, message = %e.message, "answering an error");
                e.into_response()
            }
        }
    }

    /// A copy of every instance with its current state (for the kubelets and the admin API).
    pub(crate) async fn snapshot(&self) -> Vec<Instance> {
        let now = Utc::now();
        let st = self.state.lock().await;
        st.instances.values().map(|i| view(i, now)).collect()
    }

    async fn create(&self, body: Bytes) -> Result<Instance, ApiError> {
        let req: CreateInstanceRequest = parse_body(&body)?;
        let machine_name = req.machine_name.trim().to_string();
        if machine_name.is_empty() {
            return Err(ApiError::invalid("machineName: required"));
        }
        let spec = LocalProviderSpec::parse(&req.provider_spec)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        let t = self.tunables();
        let now = Utc::now();
        let mut st = self.state.lock().await;
        if !req.client_token.is_empty() {
            if let Some(existing) = st
                .by_token
                .get(&req.client_token)
                .and_then(|id| st.instances.get(id))
            {
                info!(instance = %existing.id, machine = %existing.machine_name,
                      "create retried with a known client token: returning the existing instance");
                return Ok(view(existing, now));
            }
        }
        let mut id = instance_id();
        while st.instances.contains_key(&id) {
            id = instance_id();
        }
        let zone = spec.zone.clone().unwrap_or_else(|| self.zone.clone());
        let seq = st.next_seq;
        let inst = Instance {
            provider_id: wire::provider_id(&zone, &id),
            id: id.clone(),
            client_token: req.client_token.clone(),
            node_name: machine_name.clone(),
            machine_name,
            zone,
            image: spec.image,
            instance_type: spec.instance_type,
            tags: spec.tags,
            private_ip: private_ip(seq),
            created: now,
            visible_at: after(now, t.eventual_consistency_ms),
            ready_at: after(now, t.boot_delay_ms),
            state: InstanceState::Pending,
            src_dst_check: true,
            ipv6_addresses: Vec::new(),
            ipv6_prefixes: Vec::new(),
            seq,
        };
        self.persist_put(inst.clone(), seq + 1).await?;
        st.next_seq = seq + 1;
        if !inst.client_token.is_empty() {
            st.by_token.insert(inst.client_token.clone(), id.clone());
        }
        st.instances.insert(id, inst.clone());
        info!(instance = %inst.id, machine = %inst.machine_name, provider_id = %inst.provider_id,
              ip = %inst.private_ip, "instance launched");
        Ok(view(&inst, now))
    }

    /// Takes one pending "fail initialization" for this instance, if any.
    fn take_init_failure(&self, inst: &Instance) -> Option<(Code, String)> {
        let mut t = lock(&self.tunables);
        let code = Code::from_name(&t.fail_initialization.code);
        let per = &mut t.fail_initialization.per_instance;
        for key in [&inst.id, &inst.machine_name] {
            if let Some(n) = per.get_mut(key.as_str()) {
                if *n > 0 {
                    *n -= 1;
                    let left = *n;
                    if left == 0 {
                        per.remove(key.as_str());
                    }
                    return Some((code, format!(
                        "injected fault: initialization of instance {} failed ({left} more to fail for {key})",
                        inst.id
                    )));
                }
            }
        }
        if t.fail_initialization.global > 0 {
            t.fail_initialization.global -= 1;
            let left = t.fail_initialization.global;
            return Some((code, format!(
                "injected fault: initialization of instance {} failed ({left} more to fail globally)",
                inst.id
            )));
        }
        None
    }

    async fn initialize(&self, id: String, body: Bytes) -> Result<Instance, ApiError> {
        let req: InitializeInstanceRequest = parse_body(&body)?;
        let spec = LocalProviderSpec::parse(&req.provider_spec)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        let wanted = spec.wanted_network();
        let now = Utc::now();
        let mut st = self.state.lock().await;
        let inst = st
            .instances
            .get(&id)
            .filter(|i| i.visible_at(now))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&id))?;
        if let Some((code, message)) = self.take_init_failure(&inst) {
            warn!(instance = %inst.id, machine = %inst.machine_name, %code, "injecting an initialization failure");
            return Err(ApiError::injected(code, message));
        }
        let mut next = inst.clone();
        next.src_dst_check = wanted.src_dst_check;
        next.ipv6_addresses = (0..wanted.ipv6_address_count)
            .map(|k| ipv6_address(inst.seq, k))
            .collect();
        next.ipv6_prefixes = (0..wanted.ipv6_prefix_count)
            .map(|k| ipv6_prefix(inst.seq, k))
            .collect();
        if next != inst {
            let seq = st.next_seq;
            self.persist_put(next.clone(), seq).await?;
            st.instances.insert(id, next.clone());
            info!(instance = %next.id, machine = %next.machine_name, src_dst_check = next.src_dst_check,
                  ipv6_addresses = next.ipv6_addresses.len(), ipv6_prefixes = next.ipv6_prefixes.len(),
                  "instance network initialized");
        } else {
            debug!(instance = %next.id, machine = %next.machine_name, "instance network already as wanted");
        }
        Ok(view(&next, now))
    }

    async fn delete(&self, id: String) -> Result<DeleteInstanceResponse, ApiError> {
        let mut st = self.state.lock().await;
        let Some(inst) = st.instances.get(&id).cloned() else {
            debug!(instance = %id, "delete of a missing instance: nothing to do");
            return Ok(DeleteInstanceResponse { deleted: false });
        };
        self.persist_remove(id.clone()).await?;
        st.instances.remove(&id);
        if st.by_token.get(&inst.client_token) == Some(&id) {
            st.by_token.remove(&inst.client_token);
        }
        info!(instance = %id, machine = %inst.machine_name, "instance terminated");
        Ok(DeleteInstanceResponse { deleted: true })
    }

    async fn find(&self, body: Bytes) -> Result<InstanceList, ApiError> {
        let req: FindInstancesRequest = parse_body(&body)?;
        let nonempty =
            |s: &Option<String>| s.as_deref().filter(|v| !v.is_empty()).map(str::to_string);
        let (id, token, name, cluster) = (
            nonempty(&req.instance_id),
            nonempty(&req.client_token),
            nonempty(&req.machine_name),
            nonempty(&req.cluster_tag),
        );
        if id.is_none() && token.is_none() && name.is_none() {
            return Err(ApiError::invalid(
                "one of instanceId, clientToken or machineName is required",
            ));
        }
        let now = Utc::now();
        let st = self.state.lock().await;
        let instances = st
            .instances
            .values()
            .filter(|i| i.visible_at(now))
            .filter(|i| {
                id.as_deref() == Some(i.id.as_str())
                    || (token.is_some() && token.as_deref() == Some(i.client_token.as_str()))
                    || (name.as_deref() == Some(i.machine_name.as_str())
                        && cluster.as_ref().is_none_or(|c| i.tags.contains_key(c)))
            })
            .map(|i| view(i, now))
            .collect();
        Ok(InstanceList { instances })
    }

    async fn list(&self, cluster_tag: Option<String>) -> Result<InstanceList, ApiError> {
        let Some(tag) = cluster_tag.filter(|t| !t.is_empty()) else {
            return Err(ApiError::invalid("query parameter clusterTag: required"));
        };
        let now = Utc::now();
        let st = self.state.lock().await;
        let instances = st
            .instances
            .values()
            .filter(|i| i.visible_at(now) && i.tags.contains_key(&tag))
            .map(|i| view(i, now))
            .collect();
        Ok(InstanceList { instances })
    }

    async fn act(&self, id: &str, action: &str) -> Result<Instance, ApiError> {
        let now = Utc::now();
        let boot = self.tunables().boot_delay_ms;
        let mut st = self.state.lock().await;
        let inst = st
            .instances
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::not_found(id))?;
        let current = inst.state_at(now);
        let mut next = inst.clone();
        match action {
            "stop" => next.state = InstanceState::Stopped,
            "kill" => next.state = InstanceState::Killed,
            "start" => {
                if matches!(current, InstanceState::Stopped | InstanceState::Killed) {
                    next.state = InstanceState::Pending;
                    next.ready_at = after(now, boot);
                }
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown action {other:?} (use stop, kill or start)"
                )))
            }
        }
        if next != inst {
            let seq = st.next_seq;
            self.persist_put(next.clone(), seq).await?;
            st.instances.insert(id.to_string(), next.clone());
        }
        info!(instance = %id, machine = %next.machine_name, action, from = current.as_str(),
              to = next.state_at(now).as_str(), "operator action");
        Ok(view(&next, now))
    }

    fn stats(&self, instances: &[Instance]) -> Stats {
        let stats = lock(&self.stats);
        let mut operations = BTreeMap::new();
        for op in Op::ALL {
            let s = stats.ops.get(op.as_str()).cloned().unwrap_or_default();
            operations.insert(op.as_str().to_string(), s);
        }
        let mut by_state = BTreeMap::new();
        for i in instances {
            *by_state.entry(i.state.as_str().to_string()).or_default() += 1;
        }
        Stats {
            operations,
            instances_by_state: by_state,
            since: stats.since,
        }
    }
}

// ---------------------------------------------------------------------------
// Handlers

type AppState = State<Arc<Shared>>;

async fn create(State(s): AppState, body: Bytes) -> Response {
    s.run(Op::Create, s.create(body)).await
}

async fn initialize(State(s): AppState, UrlPath(id): UrlPath<String>, body: Bytes) -> Response {
    s.run(Op::Initialize, s.initialize(id, body)).await
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

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/instances", post(create).get(list))
        .route("/v1/instances/find", post(find))
        .route("/v1/instances/{id}", axum::routing::delete(delete))
        .route("/v1/instances/{id}/initialize", post(initialize))
        .route(
            "/admin/faults",
            get(get_faults).put(put_faults).patch(patch_faults),
        )
        .route("/admin/stats", get(get_stats).delete(reset_stats))
        .route("/admin/instances", get(admin_instances))
        .route("/admin/instances/{id}/{action}", post(admin_action))
        .fallback(not_found)
        .with_state(shared)
}

// ---------------------------------------------------------------------------
// Starting and stopping

/// A running server. Dropping it stops the server too (without waiting).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    kubelet: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL of the API, e.g. `http://127.0.0.1:7070`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server: no new requests, open ones finish, the kubelets stop,
    /// the store file is closed (and can be opened again) when this returns.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        if let Some(k) = self.kubelet.take() {
            k.abort();
            let _ = k.await;
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            match server.await {
                Ok(r) => r.map_err(Error::Serve)?,
                Err(e) if e.is_cancelled() => {}
                Err(e) => return Err(Error::Task(e.to_string())),
            }
        }
        Ok(())
    }

    /// Waits until the server stops by itself (it only does on an I/O failure).
    async fn wait(&mut self) -> Result<(), Error> {
        match self.server.as_mut() {
            Some(server) => match server.await {
                Ok(r) => r.map_err(Error::Serve),
                Err(e) => Err(Error::Task(e.to_string())),
            },
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(k) = self.kubelet.take() {
            k.abort();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts a server in this process: opens the store, binds, serves in a
/// background task and (with a target kubeconfig) starts the kubelet simulation.
pub async fn spawn(config: CloudConfig) -> Result<(SocketAddr, ServerHandle), Error> {
    config.tunables.validate()?;
    let path = config.store_path.clone();
    let (store, loaded) = tokio::task::spawn_blocking(move || Store::open(&path))
        .await
        .map_err(|e| Error::Task(e.to_string()))??;
    let mut state = CloudState {
        next_seq: loaded.next_seq,
        ..CloudState::default()
    };
    for inst in loaded.instances {
        if !inst.client_token.is_empty() {
            state
                .by_token
                .insert(inst.client_token.clone(), inst.id.clone());
        }
        state.instances.insert(inst.id.clone(), inst);
    }
    let count = state.instances.len();
    let shared = Arc::new(Shared {
        zone: config.zone.clone(),
        store,
        state: Mutex::new(state),
        tunables: StdMutex::new(config.tunables.clone()),
        buckets: StdMutex::new(HashMap::new()),
        stats: StdMutex::new(StatsState {
            ops: BTreeMap::new(),
            since: Some(Utc::now()),
        }),
    });

    let kubelet = match &config.target_kubeconfig {
        Some(path) => {
            let client = kubelet::client(path).await?;
            let kc = KubeletConfig {
                heartbeat_interval: config.heartbeat_interval,
                node_status_interval: config
                    .node_status_interval
                    .unwrap_or(config.heartbeat_interval),
            };
            info!(kubeconfig = %path.display(), heartbeat = ?kc.heartbeat_interval,
                  node_status = ?kc.node_status_interval, "kubelet simulation on");
            Some(tokio::spawn(kubelet::run(shared.clone(), client, kc)))
        }
        None => None,
    };

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.listen,
        source,
    })?;
    let (tx, rx) = oneshot::channel::<()>();
    let app = router(shared);
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    });
    info!(%addr, store = %config.store_path.display(), zone = %config.zone, instances = count,
          "local cloud listening");
    Ok((
        addr,
        ServerHandle {
            addr,
            shutdown: Some(tx),
            server: Some(server),
            kubelet,
        },
    ))
}

async fn terminate_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                tokio::select! {
                    _ = s.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs the server until SIGINT or SIGTERM (what `mcm local-cloud serve` does).
pub async fn serve(args: ServeArgs) -> Result<(), Error> {
    let config = args.to_config()?;
    let (addr, mut handle) = spawn(config).await?;
    info!(url = %format!("http://{addr}"), "serving; stop with Ctrl-C");
    tokio::select! {
        r = handle.wait() => return r,
        _ = terminate_signal() => {}
    }
    info!("shutting down");
    handle.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("42"), Ok(Duration::from_millis(42)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn addresses_are_derived_from_the_sequence() {
        assert_eq!(private_ip(0), "10.0.0.1");
        assert_eq!(private_ip(253), "10.0.0.254");
        assert_eq!(private_ip(254), "10.0.1.1");
        assert_eq!(ipv6_address(1, 0), "fd00:10:0:1::1");
        assert_eq!(ipv6_address(0, 1), "fd00:10::2");
        assert_eq!(ipv6_prefix(1, 1), "fd00:20:0:1:2::/80");
        let id = instance_id();
        assert!(id.starts_with("i-") && id.len() == 19, "{id}");
    }

    #[test]
    fn serve_args_parse_with_defaults() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let cli =
            Cli::try_parse_from(["x", "--port", "0", "--boot-delay", "1s", "--no-rate-limits"])
                .expect("parses");
        assert_eq!(cli.serve.target_kubeconfig, None);
        let c = cli.serve.to_config().expect("config");
        assert_eq!(c.tunables.boot_delay_ms, 1000);
        assert!(c.tunables.create.rate_limit.is_none());
        assert_eq!(c.listen.port(), 0);
        let cli = Cli::try_parse_from(["x", "--target-kubeconfig", "/k"]).expect("parses");
        assert_eq!(
            cli.serve.to_config().expect("config").target_kubeconfig,
            Some(PathBuf::from("/k"))
        );
        let cli = Cli::try_parse_from(["x", "--target-kubeconfig", "none"]).expect("parses");
        assert_eq!(
            cli.serve.to_config().expect("config").target_kubeconfig,
            None
        );
    }
}
