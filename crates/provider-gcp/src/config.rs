//! Configuration of the GCP driver: endpoint, API budget, operation polling.

use mcm_driver::budget::BucketLimit;
use std::time::Duration;

/// Compute Engine's rate-quota groups the driver's calls fall into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpClass {
    /// Mutations (`instances.insert`, `instances.delete`): the "Queries" group.
    Mutation,
    /// `*.get` of resources (`instances.get`): "Read requests".
    Read,
    /// `*.list` (`instances.list`): "List requests".
    List,
    /// `zoneOperations.get`: "Operation read requests".
    OperationRead,
}

impl OpClass {
    /// Every class.
    pub const ALL: [OpClass; 4] = [
        OpClass::Mutation,
        OpClass::Read,
        OpClass::List,
        OpClass::OperationRead,
    ];
}

/// Client-side token buckets per Compute rate-quota group, per project.
/// Defaults are Compute Engine's published default per-project quotas
/// (requests per minute; the whole minute's quota is the burst).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimits {
    /// Switch the buckets off.
    pub enabled: bool,
    /// Mutations: 1,500 per minute.
    pub mutation: BucketLimit,
    /// Reads: 1,500 per minute.
    pub read: BucketLimit,
    /// Lists: 1,500 per minute.
    pub list: BucketLimit,
    /// Operation reads: 3,000 per minute.
    pub operation_read: BucketLimit,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            enabled: true,
            mutation: BucketLimit::per_minute(1500),
            read: BucketLimit::per_minute(1500),
            list: BucketLimit::per_minute(1500),
            operation_read: BucketLimit::per_minute(3000),
        }
    }
}

impl RateLimits {
    /// The limit of a class.
    pub fn limit(&self, class: OpClass) -> BucketLimit {
        match class {
            OpClass::Mutation => self.mutation,
            OpClass::Read => self.read,
            OpClass::List => self.list,
            OpClass::OperationRead => self.operation_read,
        }
    }
}

/// Exponential back-off with ±25 % jitter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Growth per step.
    pub factor: f64,
    /// Largest delay.
    pub max: Duration,
}

impl Backoff {
    /// The delay before step `step` (0-based), with jitter, never above `max`.
    pub fn delay(&self, step: u32) -> Duration {
        let base = self.initial.as_secs_f64() * self.factor.max(1.0).powi(step.min(64) as i32);
        let capped = base.min(self.max.as_secs_f64());
        let jitter = 0.75 + rand::random::<f64>() / 2.0;
        Duration::from_secs_f64((capped * jitter).clamp(0.0, self.max.as_secs_f64()))
    }
}

/// Configuration of [`crate::GcpDriver`]. `Default` is for real Compute Engine.
#[derive(Clone, Debug)]
pub struct GcpDriverConfig {
    /// Compute endpoint override (`http://127.0.0.1:port` for the fake). `None` = Google.
    pub endpoint: Option<String>,
    /// Client-side token buckets per project.
    pub rate_limits: RateLimits,
    /// Polling of zone operations until `DONE` (the reference polls every 5 s).
    pub operation_poll: Backoff,
    /// Give up waiting for an operation after this long (the reference: 300 s).
    pub operation_timeout: Duration,
    /// Tries of a call that Compute throttles (`rateLimitExceeded`, 429),
    /// each after pausing the call's class.
    pub throttle_retries: u32,
    /// Pause of a class after a throttled answer (doubles per strike).
    pub throttle_pause: Duration,
    /// Largest pause of a class.
    pub throttle_max_pause: Duration,
    /// Page size of `instances.list`.
    pub list_page_size: u32,
}

impl Default for GcpDriverConfig {
    fn default() -> Self {
        GcpDriverConfig {
            endpoint: None,
            rate_limits: RateLimits::default(),
            operation_poll: Backoff {
                initial: Duration::from_secs(1),
                factor: 1.5,
                max: Duration::from_secs(5),
            },
            operation_timeout: Duration::from_secs(300),
            throttle_retries: 3,
            throttle_pause: Duration::from_secs(2),
            throttle_max_pause: Duration::from_secs(60),
            list_page_size: 500,
        }
    }
}

impl GcpDriverConfig {
    /// Default settings against another endpoint.
    pub fn with_endpoint(endpoint: impl Into<String>) -> Self {
        GcpDriverConfig {
            endpoint: Some(endpoint.into()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_are_the_published_compute_quotas_per_minute() {
        let l = RateLimits::default();
        assert_eq!(l.limit(OpClass::Mutation), BucketLimit::per_minute(1500));
        assert_eq!(l.limit(OpClass::Read).capacity, 1500);
        assert!((l.limit(OpClass::List).refill_per_sec - 25.0).abs() < 1e-9);
        assert_eq!(l.limit(OpClass::OperationRead).capacity, 3000);
    }

    #[test]
    fn backoff_grows_and_stays_capped() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let d = b.delay(0);
            assert!(
                d >= Duration::from_millis(75) && d <= Duration::from_millis(125),
                "{d:?}"
            );
            assert!(b.delay(40) <= Duration::from_secs(1));
        }
    }
}
