//! Configuration of the Azure driver: endpoint, token source, API budget, timing.

use crate::arm::{ArmSettings, OpClass};
use crate::auth::TokenSource;
pub use mcm_driver::budget::BucketLimit;
use std::fmt;
use std::sync::Arc;

/// Client-side token buckets per ARM throttling class, per subscription.
///
/// Defaults are Azure's published limits: ARM's per-subscription, per-region
/// token buckets (reads 250 burst / 25 per s, writes 200 / 10 per s, deletes
/// 200 / 10 per s) and Resource Graph's 15 queries per 5 seconds per user.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimits {
    /// `false` never waits.
    pub enabled: bool,
    /// GET / HEAD.
    pub read: BucketLimit,
    /// PUT / PATCH / POST.
    pub write: BucketLimit,
    /// DELETE.
    pub delete: BucketLimit,
    /// Resource Graph queries.
    pub resource_graph: BucketLimit,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            enabled: true,
            read: BucketLimit::new(250, 25.0),
            write: BucketLimit::new(200, 10.0),
            delete: BucketLimit::new(200, 10.0),
            resource_graph: BucketLimit::new(15, 3.0),
        }
    }
}

impl RateLimits {
    /// The limit of a class.
    pub fn limit(&self, class: OpClass) -> BucketLimit {
        match class {
            OpClass::Read => self.read,
            OpClass::Write => self.write,
            OpClass::Delete => self.delete,
            OpClass::ResourceGraph => self.resource_graph,
        }
    }
}

/// Configuration of [`crate::AzureDriver`]. `Default` talks to Azure.
#[derive(Clone)]
pub struct AzureDriverConfig {
    /// One endpoint for ARM and for the token endpoint (a fake, e.g.
    /// `http://127.0.0.1:8080`). `None` = the cloud of each MachineClass.
    pub endpoint: Option<String>,
    /// A fixed token source instead of `azure_identity` (tests).
    pub token_source: Option<Arc<dyn TokenSource>>,
    /// The API budget.
    pub rate_limits: RateLimits,
    /// Polling, throttling retries and timeouts of ARM calls.
    pub arm: ArmSettings,
    /// At most this many CreateMachine calls run at once.
    pub max_concurrent_creates: usize,
}

impl fmt::Debug for AzureDriverConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureDriverConfig")
            .field("endpoint", &self.endpoint)
            .field("token_source", &self.token_source.as_ref().map(|_| "<set>"))
            .field("rate_limits", &self.rate_limits)
            .field("arm", &self.arm)
            .field("max_concurrent_creates", &self.max_concurrent_creates)
            .finish()
    }
}

impl Default for AzureDriverConfig {
    fn default() -> Self {
        AzureDriverConfig {
            endpoint: None,
            token_source: None,
            rate_limits: RateLimits::default(),
            arm: ArmSettings::default(),
            max_concurrent_creates: 16,
        }
    }
}

impl AzureDriverConfig {
    /// Default settings against another endpoint (ARM and token endpoint).
    pub fn with_endpoint(endpoint: impl Into<String>) -> Self {
        AzureDriverConfig {
            endpoint: Some(endpoint.into()),
            ..Default::default()
        }
    }
}
