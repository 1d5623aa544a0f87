//! The driver's settings: polling, timeouts, look-up caching and the API budget.

use mcm_driver::budget::BucketLimit;
use std::time::Duration;

/// The classes of OpenStack calls the client-side budget limits separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpClass {
    /// `POST /servers`: the expensive call that quotas and schedulers guard.
    CreateServer,
    /// Other writes: deletes, port and volume creation, port updates and tags.
    Write,
    /// Reads: GETs and lists of every service (and token requests).
    Read,
}

impl OpClass {
    /// All classes.
    pub const ALL: [OpClass; 3] = [OpClass::CreateServer, OpClass::Write, OpClass::Read];
}

/// The client-side budget per Keystone identity and project.
///
/// OpenStack publishes no API rate limits of its own: operators put them in
/// front of the APIs (API gateways, HAProxy, `oslo.middleware` rate limiting),
/// typically around 10 requests per second per project. The defaults stay
/// below that: reads 20 burst / 10 per s, writes 10 burst / 2 per s, server
/// creations 5 burst / 1 per s. A `429` or `503` answer pauses the class for
/// everyone in this process (see `mcm_driver::budget`).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimits {
    /// `false`: never wait (tests, private clouds without limits).
    pub enabled: bool,
    /// Server creations.
    pub create_server: BucketLimit,
    /// Other writes.
    pub write: BucketLimit,
    /// Reads.
    pub read: BucketLimit,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            enabled: true,
            create_server: BucketLimit::new(5, 1.0),
            write: BucketLimit::new(10, 2.0),
            read: BucketLimit::new(20, 10.0),
        }
    }
}

impl RateLimits {
    /// The limit of a class.
    pub fn limit(&self, class: OpClass) -> BucketLimit {
        match class {
            OpClass::CreateServer => self.create_server,
            OpClass::Write => self.write,
            OpClass::Read => self.read,
        }
    }
}

/// How the driver waits for servers and volumes.
#[derive(Clone, Debug, PartialEq)]
pub struct Polling {
    /// The first wait between two reads of a server or volume.
    pub initial: Duration,
    /// The longest wait (the waits double up to it). The reference polls every 10 s.
    pub max: Duration,
    /// How long a server may stay in `BUILD` (the reference: 20 minutes).
    pub server_timeout: Duration,
    /// How long a root volume may take to become `available` (the reference: 20 minutes).
    pub volume_timeout: Duration,
}

impl Default for Polling {
    fn default() -> Self {
        Polling {
            initial: Duration::from_secs(2),
            max: Duration::from_secs(10),
            server_timeout: Duration::from_secs(20 * 60),
            volume_timeout: Duration::from_secs(20 * 60),
        }
    }
}

impl Polling {
    /// Fast polling for tests against the in-process fake.
    pub fn fast() -> Self {
        Polling {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(50),
            server_timeout: Duration::from_secs(30),
            volume_timeout: Duration::from_secs(30),
        }
    }
}

/// The driver's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenStackDriverConfig {
    /// The client-side API budget.
    pub rate_limits: RateLimits,
    /// Waiting for servers and volumes.
    pub polling: Polling,
    /// How long name → ID look-ups (flavor, image, network, security group)
    /// are reused per class.
    pub lookup_ttl: Duration,
    /// Timeout of one HTTP request.
    pub http_timeout: Duration,
}

impl Default for OpenStackDriverConfig {
    fn default() -> Self {
        OpenStackDriverConfig {
            rate_limits: RateLimits::default(),
            polling: Polling::default(),
            lookup_ttl: Duration::from_secs(300),
            http_timeout: Duration::from_secs(60),
        }
    }
}

impl OpenStackDriverConfig {
    /// Settings for tests against the in-process fake: fast polling, no budget.
    pub fn for_tests() -> Self {
        OpenStackDriverConfig {
            rate_limits: RateLimits {
                enabled: false,
                ..RateLimits::default()
            },
            polling: Polling::fast(),
            ..OpenStackDriverConfig::default()
        }
    }
}
