//! The server's shared state: the instances in memory (rebuilt from the
//! [`Store`] at start), the tunables, the rate-limit buckets and the call
//! counters, and what every counted call goes through (gate, stats, answer).

use super::error::{ApiError, ErrorKind};
use crate::store::{Loaded, Store};
use crate::tunables::{self, Bucket, Op, Tunables};
use crate::wire::{Instance, OpStats, Stats};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use mcm_driver::Code;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tracing::debug;

/// The instances in memory: always what the store holds (see [`Shared::commit`]).
#[derive(Debug, Default)]
pub(super) struct CloudState {
    pub(super) instances: BTreeMap<String, Instance>,
    pub(super) by_token: HashMap<String, String>,
    pub(super) next_seq: u64,
}

impl CloudState {
    fn apply(&mut self, change: Change) {
        match change {
            Change::Put { inst, next_seq } => {
                self.next_seq = next_seq;
                if !inst.client_token.is_empty() {
                    self.by_token
                        .insert(inst.client_token.clone(), inst.id.clone());
                }
                self.instances.insert(inst.id.clone(), *inst);
            }
            Change::Remove { id } => {
                if let Some(inst) = self.instances.remove(&id) {
                    if self.by_token.get(&inst.client_token) == Some(&id) {
                        self.by_token.remove(&inst.client_token);
                    }
                }
            }
        }
    }
}

/// One change of the cloud's state.
#[derive(Debug, Clone)]
pub(super) enum Change {
    /// Insert or replace an instance, and set the next address sequence number.
    Put { inst: Box<Instance>, next_seq: u64 },
    /// Remove an instance.
    Remove { id: String },
}

#[derive(Debug, Default)]
pub(super) struct StatsState {
    pub(super) ops: BTreeMap<&'static str, OpStats>,
    pub(super) since: Option<DateTime<Utc>>,
}

/// The server's state, shared by the handlers and the kubelet simulation.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(super) zone: String,
    pub(super) store: Store,
    pub(super) state: Arc<Mutex<CloudState>>,
    pub(super) tunables: StdMutex<Tunables>,
    pub(super) buckets: StdMutex<HashMap<Op, Bucket>>,
    pub(super) stats: StdMutex<StatsState>,
}

pub(super) fn lock<T>(m: &StdMutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks cannot leave the data
    // half-updated in a way that matters here: keep serving.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(super) fn view(inst: &Instance, now: DateTime<Utc>) -> Instance {
    let mut v = inst.clone();
    v.state = inst.state_at(now);
    v
}

pub(super) fn after(now: DateTime<Utc>, ms: u64) -> DateTime<Utc> {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    now.checked_add_signed(chrono::Duration::milliseconds(ms))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl Shared {
    pub(crate) fn tunables(&self) -> Tunables {
        lock(&self.tunables).clone()
    }

    /// The state of a store just opened: its instances, default counters.
    pub(super) fn new(zone: String, store: Store, loaded: Loaded, tunables: Tunables) -> Shared {
        let mut state = CloudState {
            next_seq: loaded.next_seq,
            ..CloudState::default()
        };
        for inst in loaded.instances {
            let next_seq = state.next_seq;
            state.apply(Change::Put {
                inst: Box::new(inst),
                next_seq,
            });
        }
        Shared {
            zone,
            store,
            state: Arc::new(Mutex::new(state)),
            tunables: StdMutex::new(tunables),
            buckets: StdMutex::new(HashMap::new()),
            stats: StdMutex::new(StatsState {
                ops: BTreeMap::new(),
                since: Some(Utc::now()),
            }),
        }
    }

    /// Locks the instances for a change (see [`Shared::commit`]).
    pub(super) async fn lock_state(&self) -> OwnedMutexGuard<CloudState> {
        self.state.clone().lock_owned().await
    }

    /// Writes `change` to the store and, once it is committed, applies it to
    /// memory. Both happen in one blocking task that owns the state's guard,
    /// so they finish together even when the request is cancelled (its client
    /// disconnected) while waiting here: the store and memory never diverge,
    /// and a retried create finds the instance of the first attempt.
    pub(super) async fn commit(
        &self,
        mut st: OwnedMutexGuard<CloudState>,
        change: Change,
    ) -> Result<(), ApiError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            match &change {
                Change::Put { inst, next_seq } => store.put(inst, *next_seq)?,
                Change::Remove { id } => {
                    store.remove(id)?;
                }
            }
            st.apply(change);
            Ok(())
        })
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
    pub(super) async fn run<T, F>(&self, op: Op, work: F) -> Response
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

    /// Applies a new image and instance type to a running instance in place
    /// (the simulated node agent of in-place updates): same instance, same
    /// addresses, one more in-place update counted (none when it already has
    /// them). `None` when it is gone.
    pub(crate) async fn update_in_place(
        &self,
        id: &str,
        image: &str,
        instance_type: &str,
    ) -> Result<Option<Instance>, String> {
        let st = self.lock_state().await;
        let Some(mut inst) = st.instances.get(id).cloned() else {
            return Ok(None);
        };
        if inst.image == image && inst.instance_type == instance_type {
            // Already applied (a retried answer): nothing changes, nothing is counted.
            return Ok(Some(inst));
        }
        inst.image = image.to_string();
        inst.instance_type = instance_type.to_string();
        inst.in_place_updates = inst.in_place_updates.saturating_add(1);
        let next_seq = st.next_seq;
        self.commit(
            st,
            Change::Put {
                inst: Box::new(inst.clone()),
                next_seq,
            },
        )
        .await
        .map_err(|e| e.message)?;
        Ok(Some(inst))
    }

    /// A copy of every instance with its current state (for the kubelets and the admin API).
    pub(crate) async fn snapshot(&self) -> Vec<Instance> {
        let now = Utc::now();
        let st = self.state.lock().await;
        st.instances.values().map(|i| view(i, now)).collect()
    }

    pub(super) fn stats(&self, instances: &[Instance]) -> Stats {
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
