//! Configuration of the AWS driver: endpoint, API budget, retries, timing.

use crate::ratelimit::ActionClass;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A hook that adjusts every EC2 client config the driver builds (after the
/// driver's own settings), e.g. to add interceptors or a test HTTP client.
pub type SdkConfigHook =
    Arc<dyn Fn(aws_sdk_ec2::config::Builder) -> aws_sdk_ec2::config::Builder + Send + Sync>;

/// Configuration of [`crate::AwsDriver`]. `Default` gives production settings
/// for real EC2.
#[derive(Clone)]
pub struct AwsDriverConfig {
    /// EC2 endpoint override (moto, LocalStack, EC2-compatible clouds). `None` = AWS.
    pub endpoint_url: Option<String>,
    /// Client-side token buckets per EC2 action class.
    pub rate_limits: RateLimits,
    /// SDK retries and the driver's own throttling back-off.
    pub retry: RetrySettings,
    /// How long concurrent DescribeInstances look-ups are collected into one call.
    pub batch_window: Duration,
    /// Largest number of IDs / names merged into one DescribeInstances call.
    pub max_batch_size: usize,
    /// Concurrent CreateMachine calls (RunInstances plus the visibility wait).
    pub max_concurrent_creates: usize,
    /// Back-off while waiting for a new instance to become visible.
    pub visibility_backoff: Backoff,
    /// Give up waiting for a new instance to become visible after this long.
    pub visibility_timeout: Duration,
    /// How long an AMI's root device name is cached.
    pub image_cache_ttl: Duration,
    /// Per-attempt timeout of one EC2 HTTP call.
    pub attempt_timeout: Duration,
    /// Adjusts each EC2 client config (tests, extra interceptors).
    pub sdk_config_hook: Option<SdkConfigHook>,
}

impl Default for AwsDriverConfig {
    fn default() -> Self {
        AwsDriverConfig {
            endpoint_url: None,
            rate_limits: RateLimits::default(),
            retry: RetrySettings::default(),
            batch_window: Duration::from_millis(20),
            max_batch_size: 100,
            max_concurrent_creates: 16,
            visibility_backoff: Backoff {
                initial: Duration::from_millis(500),
                factor: 1.5,
                max: Duration::from_secs(60),
            },
            visibility_timeout: Duration::from_secs(300),
            image_cache_ttl: Duration::from_secs(600),
            attempt_timeout: Duration::from_secs(30),
            sdk_config_hook: None,
        }
    }
}

impl AwsDriverConfig {
    /// Default settings against another endpoint (e.g. `http://127.0.0.1:5000` for moto).
    pub fn with_endpoint(endpoint_url: impl Into<String>) -> Self {
        AwsDriverConfig {
            endpoint_url: Some(endpoint_url.into()),
            ..Default::default()
        }
    }
}

impl fmt::Debug for AwsDriverConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsDriverConfig")
            .field("endpoint_url", &self.endpoint_url)
            .field("rate_limits", &self.rate_limits)
            .field("retry", &self.retry)
            .field("batch_window", &self.batch_window)
            .field("max_batch_size", &self.max_batch_size)
            .field("max_concurrent_creates", &self.max_concurrent_creates)
            .field("visibility_backoff", &self.visibility_backoff)
            .field("visibility_timeout", &self.visibility_timeout)
            .field("image_cache_ttl", &self.image_cache_ttl)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("sdk_config_hook", &self.sdk_config_hook.is_some())
            .finish()
    }
}

/// Exponential back-off with ±50 % jitter.
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
    /// The delay before retry number `step` (0-based), with jitter.
    pub fn delay(&self, step: u32) -> Duration {
        let base = self.initial.as_secs_f64() * self.factor.max(1.0).powi(step.min(64) as i32);
        let capped = base.min(self.max.as_secs_f64());
        let jitter = 0.5 + rand::random::<f64>();
        Duration::from_secs_f64((capped * jitter).min(self.max.as_secs_f64()).max(0.0))
    }
}

pub use mcm_driver::budget::BucketLimit;

/// Client-side token buckets per EC2 action class, per account (credentials)
/// and region. Defaults are EC2's published per-account limits
/// ([`RateLimits::ec2_published`]) less a margin ([`RateLimits::with_margin`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimits {
    /// Switch the buckets off entirely.
    pub enabled: bool,
    /// RunInstances request bucket (EC2: 5 burst, 2/s).
    pub run_instances: BucketLimit,
    /// TerminateInstances request bucket (EC2: 100 burst, 5/s).
    pub terminate_instances: BucketLimit,
    /// Non-mutating (Describe*) bucket (EC2: 100 burst, 20/s).
    pub describe: BucketLimit,
    /// Other mutating actions (EC2: 50 burst, 5/s).
    pub mutating: BucketLimit,
    /// AssignIpv6Addresses (EC2 uncategorized: 100 burst, 5/s).
    pub assign_ipv6_addresses: BucketLimit,
    /// Create/DeleteNetworkInterface (EC2 uncategorized: 100 burst, 5/s).
    pub network_interfaces: BucketLimit,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self::ec2_published().with_margin()
    }
}

impl RateLimits {
    /// EC2's published per-account limits: RunInstances 5 burst / 2 per s,
    /// TerminateInstances 100 / 5, describes 100 / 20, other mutations 50 / 5,
    /// the uncategorized actions 100 / 5.
    pub fn ec2_published() -> Self {
        RateLimits {
            enabled: true,
            run_instances: BucketLimit::new(5, 2.0),
            terminate_instances: BucketLimit::new(100, 5.0),
            describe: BucketLimit::new(100, 20.0),
            mutating: BucketLimit::new(50, 5.0),
            assign_ipv6_addresses: BucketLimit::new(100, 5.0),
            network_interfaces: BucketLimit::new(100, 5.0),
        }
    }

    /// These limits less a margin: one token of burst and a tenth of the
    /// rate. A driver that spends exactly EC2's rate keeps EC2's bucket at
    /// zero, so any jitter between its sends and EC2's arrivals (or a call
    /// of another client of the account) draws a throttled answer; the
    /// margin keeps a token in EC2's bucket.
    pub fn with_margin(&self) -> Self {
        let m = |l: BucketLimit| {
            BucketLimit::new(l.capacity.saturating_sub(1).max(1), l.refill_per_sec * 0.9)
        };
        RateLimits {
            enabled: self.enabled,
            run_instances: m(self.run_instances),
            terminate_instances: m(self.terminate_instances),
            describe: m(self.describe),
            mutating: m(self.mutating),
            assign_ipv6_addresses: m(self.assign_ipv6_addresses),
            network_interfaces: m(self.network_interfaces),
        }
    }

    /// The limit of a class.
    pub fn limit(&self, class: ActionClass) -> BucketLimit {
        match class {
            ActionClass::RunInstances => self.run_instances,
            ActionClass::TerminateInstances => self.terminate_instances,
            ActionClass::Describe => self.describe,
            ActionClass::Mutating => self.mutating,
            ActionClass::AssignIpv6Addresses => self.assign_ipv6_addresses,
            ActionClass::NetworkInterfaces => self.network_interfaces,
        }
    }
}

/// Retries: the SDK's standard retry strategy (throttling, 5xx and transport
/// errors, with its own client-side retry quota), then the driver's own pause
/// of the whole action class when a call is still throttled.
#[derive(Clone, Debug, PartialEq)]
pub struct RetrySettings {
    /// SDK attempts per call (1 = no SDK retry).
    pub sdk_max_attempts: u32,
    /// SDK initial back-off.
    pub sdk_initial_backoff: Duration,
    /// SDK largest back-off.
    pub sdk_max_backoff: Duration,
    /// Extra tries of a call that is still throttled after the SDK's retries.
    pub throttle_retries: u32,
    /// Pause of the action class after the first throttled call (doubles per strike).
    pub throttle_pause: Duration,
    /// Largest pause of an action class.
    pub throttle_max_pause: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            sdk_max_attempts: 3,
            sdk_initial_backoff: Duration::from_secs(1),
            sdk_max_backoff: Duration::from_secs(20),
            throttle_retries: 2,
            throttle_pause: Duration::from_secs(2),
            throttle_max_pause: Duration::from_secs(30),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let d0 = b.delay(0);
            assert!(
                d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(150),
                "{d0:?}"
            );
            assert!(b.delay(30) <= Duration::from_secs(1));
        }
    }

    #[test]
    fn default_limits_stay_a_margin_below_the_published_ec2_ones() {
        let ec2 = RateLimits::ec2_published();
        assert_eq!(
            ec2.limit(ActionClass::RunInstances),
            BucketLimit::new(5, 2.0)
        );
        assert_eq!(
            ec2.limit(ActionClass::Describe),
            BucketLimit::new(100, 20.0)
        );
        assert_eq!(
            ec2.limit(ActionClass::TerminateInstances),
            BucketLimit::new(100, 5.0)
        );
        let l = RateLimits::default();
        for class in ActionClass::ALL {
            let (ours, theirs) = (l.limit(class), ec2.limit(class));
            assert_eq!(ours.capacity + 1, theirs.capacity, "{class:?}");
            assert!(
                (ours.refill_per_sec - 0.9 * theirs.refill_per_sec).abs() < 1e-9,
                "{class:?}"
            );
        }
    }
}
