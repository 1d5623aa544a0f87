//! Counting EC2 calls per action: an SDK interceptor that every client of the
//! driver carries. Operations count once per call (when the call ends);
//! attempts count every HTTP attempt (SDK retries included).

use aws_sdk_ec2::config::interceptors::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The EC2 actions that change something.
pub const MUTATING_ACTIONS: [&str; 13] = [
    "RunInstances",
    "TerminateInstances",
    "ModifyNetworkInterfaceAttribute",
    "AssignIpv6Addresses",
    "DeleteVolume",
    "DeleteNetworkInterface",
    "DetachNetworkInterface",
    "ModifyInstanceAttribute",
    "CreateTags",
    "DeleteTags",
    "ModifyVolume",
    "ModifyInstanceMetadataOptions",
    "UnassignIpv6Addresses",
];

/// EC2 calls by action name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiCalls {
    /// Calls (operations) per action.
    pub operations: BTreeMap<String, u64>,
    /// HTTP attempts per action (retries included).
    pub attempts: BTreeMap<String, u64>,
}

impl ApiCalls {
    /// The calls made since `earlier` (a snapshot of the same recorder).
    pub fn since(&self, earlier: &ApiCalls) -> ApiCalls {
        let diff = |now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.iter()
                .filter_map(|(k, v)| {
                    let d = v.saturating_sub(then.get(k).copied().unwrap_or(0));
                    (d > 0).then(|| (k.clone(), d))
                })
                .collect()
        };
        ApiCalls {
            operations: diff(&self.operations, &earlier.operations),
            attempts: diff(&self.attempts, &earlier.attempts),
        }
    }

    /// Calls of one action.
    pub fn count(&self, action: &str) -> u64 {
        self.operations.get(action).copied().unwrap_or(0)
    }

    /// Calls of mutating actions.
    pub fn mutating(&self) -> u64 {
        MUTATING_ACTIONS.iter().map(|a| self.count(a)).sum()
    }

    /// All calls.
    pub fn total(&self) -> u64 {
        self.operations.values().sum()
    }
}

/// The interceptor that counts calls.
#[derive(Clone, Debug, Default)]
pub struct ApiCallRecorder {
    calls: Arc<Mutex<ApiCalls>>,
}

impl ApiCallRecorder {
    /// A snapshot of the counts.
    pub fn snapshot(&self) -> ApiCalls {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn bump(&self, cfg: &ConfigBag, attempt: bool) {
        let name = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_string())
            .unwrap_or_else(|| "unknown".to_string());
        if let Ok(mut c) = self.calls.lock() {
            let map = if attempt {
                &mut c.attempts
            } else {
                &mut c.operations
            };
            *map.entry(name).or_default() += 1;
        }
    }
}

impl Intercept for ApiCallRecorder {
    fn name(&self) -> &'static str {
        "McmApiCallRecorder"
    }

    fn read_after_execution(
        &self,
        _context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.bump(cfg, false);
        Ok(())
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.bump(cfg, true);
        Ok(())
    }
}
