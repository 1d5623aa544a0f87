//! Driver configuration: endpoint override, cloud budget and retries.

use mcm_driver::budget::BucketLimit;
use std::time::Duration;

/// The ECS action classes the client budgets separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionClass {
    /// RunInstances.
    RunInstances,
    /// DeleteInstance.
    DeleteInstance,
    /// DescribeInstances.
    DescribeInstances,
    /// TagResources (UpdateMachine).
    TagResources,
    /// UntagResources (UpdateMachine).
    UntagResources,
}

impl ActionClass {
    /// All classes.
    pub const ALL: [ActionClass; 5] = [
        ActionClass::RunInstances,
        ActionClass::DeleteInstance,
        ActionClass::DescribeInstances,
        ActionClass::TagResources,
        ActionClass::UntagResources,
    ];

    /// The ECS action of the class.
    pub fn action(self) -> &'static str {
        match self {
            ActionClass::RunInstances => "RunInstances",
            ActionClass::DeleteInstance => "DeleteInstance",
            ActionClass::DescribeInstances => "DescribeInstances",
            ActionClass::TagResources => "TagResources",
            ActionClass::UntagResources => "UntagResources",
        }
    }
}

/// Client-side token buckets per account and region.
///
/// ECS applies flow control per account, region and API (the `Throttling.User`
/// and `Throttling.Api` answers; the per-API quotas are shown in Quota Center
/// and differ per account). The defaults stay well below the usual default
/// quotas, so that a scale-up queues here instead of drawing throttling
/// answers; a throttled answer still pauses the whole class.
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimits {
    /// `false` never waits.
    pub enabled: bool,
    /// RunInstances bucket.
    pub run_instances: BucketLimit,
    /// DeleteInstance bucket.
    pub delete_instance: BucketLimit,
    /// DescribeInstances bucket.
    pub describe_instances: BucketLimit,
    /// TagResources and UntagResources bucket (each action its own bucket
    /// of this size).
    pub tag_resources: BucketLimit,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            enabled: true,
            run_instances: BucketLimit::new(10, 2.0),
            delete_instance: BucketLimit::new(20, 5.0),
            describe_instances: BucketLimit::new(50, 20.0),
            tag_resources: BucketLimit::new(20, 5.0),
        }
    }
}

impl RateLimits {
    /// The limit of a class.
    pub fn limit(&self, class: ActionClass) -> BucketLimit {
        match class {
            ActionClass::RunInstances => self.run_instances,
            ActionClass::DeleteInstance => self.delete_instance,
            ActionClass::DescribeInstances => self.describe_instances,
            ActionClass::TagResources | ActionClass::UntagResources => self.tag_resources,
        }
    }
}

/// Retries of one ECS call.
#[derive(Clone, Debug, PartialEq)]
pub struct RetrySettings {
    /// Extra tries after a `Throttling*` answer (each after the class's pause).
    pub throttle_retries: u32,
    /// First pause after a throttled answer; doubles per consecutive answer.
    pub throttle_pause: Duration,
    /// Longest pause after throttled answers.
    pub max_throttle_pause: Duration,
    /// Extra tries after no answer or a server error.
    pub transient_retries: u32,
    /// Pause before a transient retry (doubling).
    pub transient_pause: Duration,
    /// Timeout of one HTTP attempt.
    pub attempt_timeout: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            throttle_retries: 4,
            throttle_pause: Duration::from_millis(500),
            max_throttle_pause: Duration::from_secs(20),
            transient_retries: 2,
            transient_pause: Duration::from_millis(300),
            attempt_timeout: Duration::from_secs(30),
        }
    }
}

/// The driver's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct AlicloudDriverConfig {
    /// ECS endpoint override (e.g. `http://127.0.0.1:8080` for the fake); by
    /// default the region's endpoint (`https://ecs.<region>.aliyuncs.com`).
    pub endpoint_url: Option<String>,
    /// The cloud budget.
    pub rate_limits: RateLimits,
    /// Retries.
    pub retry: RetrySettings,
    /// How long DeleteMachine waits for a Pending/Starting/Stopping instance to
    /// settle before answering `Unavailable` (retry later).
    pub settle_timeout: Duration,
    /// Poll interval while waiting for an instance to settle.
    pub settle_poll: Duration,
}

impl Default for AlicloudDriverConfig {
    fn default() -> Self {
        AlicloudDriverConfig {
            endpoint_url: None,
            rate_limits: RateLimits::default(),
            retry: RetrySettings::default(),
            settle_timeout: Duration::from_secs(20),
            settle_poll: Duration::from_millis(500),
        }
    }
}

impl AlicloudDriverConfig {
    /// The default configuration with an endpoint override.
    pub fn with_endpoint(url: impl Into<String>) -> Self {
        AlicloudDriverConfig {
            endpoint_url: Some(url.into()),
            ..Default::default()
        }
    }
}

/// The ECS endpoint of a region, following the regional endpoint table of
/// the ECS 2014-05-26 metadata (a few regions use another host name).
pub fn regional_endpoint(region: &str) -> String {
    let host = match region {
        "cn-hangzhou" | "cn-shanghai-finance-1" | "cn-shenzhen-finance-1" => {
            "ecs-cn-hangzhou.aliyuncs.com".to_string()
        }
        "cn-hangzhou-finance" => "ecs.aliyuncs.com".to_string(),
        r => format!("ecs.{r}.aliyuncs.com"),
    };
    format!("https://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regional_endpoints_follow_the_metadata_table() {
        assert_eq!(
            regional_endpoint("eu-central-1"),
            "https://ecs.eu-central-1.aliyuncs.com"
        );
        assert_eq!(
            regional_endpoint("cn-hangzhou"),
            "https://ecs-cn-hangzhou.aliyuncs.com"
        );
        assert_eq!(
            regional_endpoint("cn-hangzhou-finance"),
            "https://ecs.aliyuncs.com"
        );
    }
}
