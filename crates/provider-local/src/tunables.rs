//! Tunables of the local cloud: latency, rate limits and faults per operation,
//! the boot delay and eventual consistency.
//!
//! The JSON form (camelCase) is what `--config`, `GET/PUT/PATCH /admin/faults`
//! read and write. A `PUT` document or a config file is merged onto
//! [`Tunables::default`] (so fields it leaves out keep the EC2-like defaults);
//! a `PATCH` document is merged onto the current tunables (RFC 7386: `null`
//! removes a field, e.g. `{"create": {"rateLimit": null}}` lifts a rate limit).
//!
//! The default rate limits mirror the published EC2 API token buckets (per
//! account and Region, refilled every second):
//!
//! | operation | EC2 call | bucket | refill/s |
//! |---|---|---|---|
//! | create | RunInstances | 5 | 2 |
//! | initialize | ModifyNetworkInterfaceAttribute / AssignIpv6Addresses (mutating) | 50 | 5 |
//! | update | CreateTags / DeleteTags / ModifyInstanceAttribute (mutating) | 50 | 5 |
//! | delete | TerminateInstances | 100 | 5 |
//! | status | DescribeInstances, filtered (non-mutating) | 100 | 20 |
//! | list | DescribeInstances, filtered (non-mutating) | 100 | 20 |
//!
//! (EC2 charges status and list to one DescribeInstances bucket; here each
//! operation has its own bucket so that benchmarks can tell them apart.)

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

/// The longest latency, boot delay or eventual-consistency delay accepted (1 hour).
pub const MAX_DELAY_MS: u64 = 3_600_000;

/// The operations of the cloud API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Launch an instance.
    Create,
    /// Establish the network settings.
    Initialize,
    /// Change tags and instance type of a running instance (hot update).
    Update,
    /// Terminate an instance.
    Delete,
    /// Find the instances of a machine.
    Status,
    /// List the instances of a cluster.
    List,
}

impl Op {
    /// All operations.
    pub const ALL: [Op; 6] = [
        Op::Create,
        Op::Initialize,
        Op::Update,
        Op::Delete,
        Op::Status,
        Op::List,
    ];

    /// The name used in the API and the stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Initialize => "initialize",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Status => "status",
            Op::List => "list",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token bucket: `capacity` tokens, refilled at `refillPerSecond`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    /// The bucket size (the burst).
    pub capacity: u32,
    /// Tokens added per second.
    pub refill_per_second: f64,
}

/// The tunables of one operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OpTunables {
    /// Added latency of every answer that is not throttled, in milliseconds.
    pub latency_ms: u64,
    /// Random extra latency, uniformly 0..=jitterMs milliseconds.
    pub jitter_ms: u64,
    /// The token bucket; `null` or absent = unlimited.
    pub rate_limit: Option<RateLimit>,
    /// The share of calls (0.0..=1.0) that fail with `errorCode`.
    pub error_rate: f64,
    /// The code of injected errors (a machine code name, default `Internal`).
    pub error_code: String,
}

impl Default for OpTunables {
    fn default() -> Self {
        OpTunables {
            latency_ms: 0,
            jitter_ms: 0,
            rate_limit: None,
            error_rate: 0.0,
            error_code: "Internal".to_string(),
        }
    }
}

impl OpTunables {
    fn limited(capacity: u32, refill_per_second: f64) -> Self {
        OpTunables {
            rate_limit: Some(RateLimit {
                capacity,
                refill_per_second,
            }),
            ..OpTunables::default()
        }
    }
}

/// "Fail initialization N times".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FailInitialization {
    /// The next N initializations (of any instance) fail.
    pub global: u32,
    /// The next N initializations of one instance fail, keyed by instance ID or machine name.
    pub per_instance: BTreeMap<String, u32>,
    /// The code of these failures (default `Internal`).
    pub code: String,
}

impl Default for FailInitialization {
    fn default() -> Self {
        FailInitialization {
            global: 0,
            per_instance: BTreeMap::new(),
            code: "Internal".to_string(),
        }
    }
}

/// All tunables. Counters (`failInitialization`) count down as faults fire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Tunables {
    /// Time from launch to `running` (and Node registration), in milliseconds.
    pub boot_delay_ms: u64,
    /// A new instance stays invisible to status, list and initialize for this long, in milliseconds.
    pub eventual_consistency_ms: u64,
    /// CreateMachine.
    pub create: OpTunables,
    /// InitializeMachine.
    pub initialize: OpTunables,
    /// UpdateMachine (hot update of tags and instance type).
    pub update: OpTunables,
    /// DeleteMachine.
    pub delete: OpTunables,
    /// GetMachineStatus.
    pub status: OpTunables,
    /// ListMachines.
    pub list: OpTunables,
    /// Failing initializations.
    pub fail_initialization: FailInitialization,
    /// What the simulated node agent does with in-place updates.
    pub in_place_update: InPlaceUpdateAgent,
}

/// What the simulated node agent does when a Node is ready for an in-place update.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InPlaceUpdateMode {
    /// Apply the MachineDeployment's class to the instance, report `successful`.
    #[default]
    Apply,
    /// Report `failed` with [`InPlaceUpdateAgent::fail_reason`].
    Fail,
    /// Never answer (a stuck update: the in-place timeout fails it).
    Hang,
}

/// The simulated node agent of in-place updates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct InPlaceUpdateAgent {
    /// `apply` (default), `fail` or `hang`.
    pub mode: InPlaceUpdateMode,
    /// The `update-failed-reason` the agent reports in mode `fail`.
    pub fail_reason: String,
}

impl Default for InPlaceUpdateAgent {
    fn default() -> Self {
        InPlaceUpdateAgent {
            mode: InPlaceUpdateMode::Apply,
            fail_reason: "injected fault: in-place update failed".into(),
        }
    }
}

impl Default for Tunables {
    /// EC2-like rate limits, a 3 s boot, no latency, no faults.
    fn default() -> Self {
        Tunables {
            boot_delay_ms: 3_000,
            eventual_consistency_ms: 0,
            create: OpTunables::limited(5, 2.0),
            initialize: OpTunables::limited(50, 5.0),
            update: OpTunables::limited(50, 5.0),
            delete: OpTunables::limited(100, 5.0),
            status: OpTunables::limited(100, 20.0),
            list: OpTunables::limited(100, 20.0),
            fail_initialization: FailInitialization::default(),
            in_place_update: InPlaceUpdateAgent::default(),
        }
    }
}

/// A tunables document that does not fit.
#[derive(Debug, thiserror::Error)]
#[error("invalid tunables: {0}")]
pub struct TunablesError(pub String);

impl Tunables {
    /// No rate limits, no boot delay, no faults: for tests.
    pub fn unlimited() -> Self {
        let mut t = Tunables {
            boot_delay_ms: 0,
            ..Tunables::default()
        };
        for op in Op::ALL {
            t.op_mut(op).rate_limit = None;
        }
        t
    }

    /// The tunables of one operation.
    pub fn op(&self, op: Op) -> &OpTunables {
        match op {
            Op::Create => &self.create,
            Op::Initialize => &self.initialize,
            Op::Update => &self.update,
            Op::Delete => &self.delete,
            Op::Status => &self.status,
            Op::List => &self.list,
        }
    }

    /// The tunables of one operation, mutable.
    pub fn op_mut(&mut self, op: Op) -> &mut OpTunables {
        match op {
            Op::Create => &mut self.create,
            Op::Initialize => &mut self.initialize,
            Op::Update => &mut self.update,
            Op::Delete => &mut self.delete,
            Op::Status => &mut self.status,
            Op::List => &mut self.list,
        }
    }

    /// `base` with `patch` merged in (RFC 7386), validated.
    pub fn merged(base: &Tunables, patch: &Value) -> Result<Tunables, TunablesError> {
        let mut doc = serde_json::to_value(base).map_err(|e| TunablesError(e.to_string()))?;
        merge_patch(&mut doc, patch);
        let t: Tunables = serde_json::from_value(doc).map_err(|e| TunablesError(e.to_string()))?;
        t.validate()?;
        Ok(t)
    }

    /// Checks ranges: error rates in 0..=1, refill rates positive, codes known.
    pub fn validate(&self) -> Result<(), TunablesError> {
        for op in Op::ALL {
            let o = self.op(op);
            if !(0.0..=1.0).contains(&o.error_rate) {
                return Err(TunablesError(format!(
                    "{op}.errorRate must be within 0..=1"
                )));
            }
            if let Some(r) = o.rate_limit {
                if !(r.refill_per_second.is_finite() && r.refill_per_second > 0.0)
                    || r.capacity == 0
                {
                    return Err(TunablesError(format!(
                        "{op}.rateLimit needs capacity >= 1 and refillPerSecond > 0"
                    )));
                }
            }
            if o.latency_ms.saturating_add(o.jitter_ms) > MAX_DELAY_MS {
                return Err(TunablesError(format!(
                    "{op}.latencyMs + jitterMs must be at most {MAX_DELAY_MS}"
                )));
            }
            check_code(&format!("{op}.errorCode"), &o.error_code)?;
        }
        if self.boot_delay_ms > MAX_DELAY_MS || self.eventual_consistency_ms > MAX_DELAY_MS {
            return Err(TunablesError(format!(
                "bootDelayMs and eventualConsistencyMs must be at most {MAX_DELAY_MS}"
            )));
        }
        check_code("failInitialization.code", &self.fail_initialization.code)
    }
}

fn check_code(field: &str, name: &str) -> Result<(), TunablesError> {
    let code = mcm_driver::Code::from_name(name);
    if code == mcm_driver::Code::Unknown && name != "Unknown" {
        return Err(TunablesError(format!(
            "{field}: unknown machine code {name:?}"
        )));
    }
    if code == mcm_driver::Code::Ok {
        return Err(TunablesError(format!("{field}: OK is not an error code")));
    }
    Ok(())
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// A running token bucket.
#[derive(Clone, Debug)]
pub struct Bucket {
    limit: RateLimit,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(limit: RateLimit, now: Instant) -> Self {
        Bucket {
            limit,
            tokens: f64::from(limit.capacity),
            last: now,
        }
    }

    /// The limit this bucket enforces.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.limit.refill_per_second)
            .min(f64::from(self.limit.capacity));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The latency to add for one call.
pub fn latency(o: &OpTunables) -> Duration {
    let jitter = if o.jitter_ms > 0 {
        rand::random_range(0..=o.jitter_ms)
    } else {
        0
    };
    Duration::from_millis(o.latency_ms.saturating_add(jitter))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_mirror_ec2_buckets() {
        let t = Tunables::default();
        assert_eq!(
            t.create.rate_limit,
            Some(RateLimit {
                capacity: 5,
                refill_per_second: 2.0
            })
        );
        assert_eq!(t.status.rate_limit.map(|r| r.capacity), Some(100));
        assert!(Tunables::unlimited().op(Op::Create).rate_limit.is_none());
        assert!(Tunables::unlimited().op(Op::Update).rate_limit.is_none());
        t.validate().expect("defaults are valid");
    }

    #[test]
    fn merging_keeps_what_the_patch_leaves_out() {
        let base = Tunables::default();
        let t = Tunables::merged(&base, &json!({"create": {"errorRate": 0.5}})).expect("valid");
        assert_eq!(t.create.error_rate, 0.5);
        assert_eq!(t.create.rate_limit, base.create.rate_limit);
        let t = Tunables::merged(&t, &json!({"create": {"rateLimit": null}})).expect("valid");
        assert_eq!(t.create.rate_limit, None);
        assert_eq!(t.create.error_rate, 0.5);
        assert!(Tunables::merged(&base, &json!({"create": {"errorRate": 2}})).is_err());
        assert!(Tunables::merged(&base, &json!({"create": {"errorCode": "Bogus"}})).is_err());
        assert!(Tunables::merged(&base, &json!({"bootDelayMs": "x"})).is_err());
        assert!(Tunables::merged(&base, &json!({"bootDelayMs": 3_600_001})).is_err());
        assert!(Tunables::merged(
            &base,
            &json!({"status": {"latencyMs": 3_600_000, "jitterMs": 1}})
        )
        .is_err());
    }

    #[test]
    fn update_faults_are_configured_like_the_other_operations() {
        let t = Tunables::merged(
            &Tunables::unlimited(),
            &json!({"update": {"errorRate": 0.3}}),
        )
        .expect("valid");
        assert_eq!(t.op(Op::Update).error_rate, 0.3);
        assert_eq!(t.op(Op::Update).error_code, "Internal");
        assert_eq!(
            Tunables::default().update.rate_limit.map(|r| r.capacity),
            Some(50),
            "EC2's mutating bucket by default"
        );
        assert!(Tunables::merged(&t, &json!({"update": {"errorRate": 1.5}})).is_err());
    }

    #[test]
    fn bucket_refills_over_time() {
        let now = Instant::now();
        let mut b = Bucket::new(
            RateLimit {
                capacity: 2,
                refill_per_second: 2.0,
            },
            now,
        );
        assert!(b.try_take(now));
        assert!(b.try_take(now));
        assert!(!b.try_take(now));
        assert!(b.try_take(now + Duration::from_millis(500)));
        assert!(!b.try_take(now + Duration::from_millis(600)));
    }
}
