//! Cloud API calls, reported where they happen: every provider hooks its
//! HTTP/SDK layer once (AWS: an SDK interceptor; Azure, Alicloud, GCP:
//! around their one request function; OpenStack: around its one endpoint
//! runner) and reports each call to its [`CloudApi`] handle. The handle is
//! the driver's ([`crate::Driver::cloud_api`]), not the process's: whoever
//! runs the driver adds its observers to it. The runtime adds one that
//! writes the reference's `mcm_cloud_api_requests_total`,
//! `mcm_cloud_api_requests_failed_total` and
//! `mcm_cloud_api_api_request_duration_seconds` (`{provider, service}`) of
//! its own metrics, so two runtimes in one process share no series.
//!
//! Label values follow the reference's provider binaries: `provider` is the
//! binary's value (`aws`, `gcp`, `azure`, `openstack`, `alicloud`); `service`
//! is the reference's helper label where it has one (`instance_terminate`,
//! `virtual_machine_get`, `nova`, ...) and otherwise the call's own name in
//! snake case. See docs/design/process-contract.md, "Metrics".

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// One finished cloud API call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloudApiCall<'a> {
    /// The provider label (`aws`, `gcp`, ...).
    pub provider: &'a str,
    /// The service label (`instance_get_by_id`, `nova`, ...).
    pub service: &'a str,
    /// How long the call took (retries inside the SDK included).
    pub duration: Duration,
    /// Whether the call succeeded.
    pub ok: bool,
}

/// Sees every cloud API call of the process.
pub trait CloudApiObserver: Send + Sync {
    /// Called once per finished call.
    fn cloud_api_call(&self, call: &CloudApiCall<'_>);
}

/// Where one driver reports its cloud API calls: a cheap handle (clones
/// share the observers) that the driver creates, keeps for its HTTP/SDK
/// layer and hands out through [`crate::Driver::cloud_api`], so that whoever
/// runs it can [`CloudApi::add_observer`]. Without observers a call costs
/// nothing but the clock read.
#[derive(Clone, Default)]
pub struct CloudApi {
    observers: Arc<RwLock<Vec<Arc<dyn CloudApiObserver>>>>,
}

impl std::fmt::Debug for CloudApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.observers.read().map_or(0, |l| l.len());
        f.debug_struct("CloudApi").field("observers", &n).finish()
    }
}

impl CloudApi {
    /// A handle without observers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an observer of every later call reported to this handle (or a
    /// clone of it).
    pub fn add_observer(&self, observer: Arc<dyn CloudApiObserver>) {
        if let Ok(mut list) = self.observers.write() {
            list.push(observer);
        }
    }

    /// Reports one finished call to every observer.
    pub fn record(&self, provider: &str, service: &str, duration: Duration, ok: bool) {
        let call = CloudApiCall {
            provider,
            service,
            duration,
            ok,
        };
        if let Ok(list) = self.observers.read() {
            for o in list.iter() {
                o.cloud_api_call(&call);
            }
        }
    }

    /// Runs `call` and reports it (ok = `Ok`), for clients without a hook of their own.
    pub async fn observe<T, E>(
        &self,
        provider: &str,
        service: &str,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let start = Instant::now();
        let result = call.await;
        self.record(provider, service, start.elapsed(), result.is_ok());
        result
    }
}

/// `RunInstances` → `run_instances`, `instances.get` → `instances_get`.
pub fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for ch in name.chars() {
        if ch.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
            prev_lower = false;
        } else if ch.is_ascii_alphanumeric() {
            out.push(ch);
            prev_lower = true;
        } else {
            if !out.is_empty() && !out.ends_with('_') {
                out.push('_');
            }
            prev_lower = false;
        }
    }
    out
}

/// An observer that counts calls in memory, for tests: add one to a
/// driver's handle with [`CallRecorder::install`] and read it after the calls.
#[derive(Debug, Default)]
pub struct CallRecorder {
    calls: Mutex<BTreeMap<(String, String, bool), u64>>,
}

impl CallRecorder {
    /// A new recorder, added as an observer of `api`.
    pub fn install(api: &CloudApi) -> Arc<CallRecorder> {
        let r = Arc::new(CallRecorder::default());
        api.add_observer(r.clone());
        r
    }

    /// Calls of `provider`/`service` that succeeded (`ok`) or failed.
    pub fn count(&self, provider: &str, service: &str, ok: bool) -> u64 {
        self.calls
            .lock()
            .ok()
            .and_then(|c| {
                c.get(&(provider.to_string(), service.to_string(), ok))
                    .copied()
            })
            .unwrap_or(0)
    }

    /// Every `(service, ok)` seen for `provider`, with its count.
    pub fn of(&self, provider: &str) -> BTreeMap<(String, bool), u64> {
        self.calls
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|((p, _, _), _)| p == provider)
                    .map(|((_, s, ok), n)| ((s.clone(), *ok), *n))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl CloudApiObserver for CallRecorder {
    fn cloud_api_call(&self, call: &CloudApiCall<'_>) {
        if let Ok(mut c) = self.calls.lock() {
            *c.entry((call.provider.to_string(), call.service.to_string(), call.ok))
                .or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_the_references_snake_case() {
        assert_eq!(snake_case("RunInstances"), "run_instances");
        assert_eq!(snake_case("DescribeInstances"), "describe_instances");
        assert_eq!(snake_case("instances.get"), "instances_get");
        assert_eq!(snake_case("zoneOperations.get"), "zone_operations_get");
    }

    #[tokio::test]
    async fn observed_calls_reach_every_observer_of_the_handle_with_their_outcome() {
        let api = CloudApi::new();
        let a = CallRecorder::install(&api);
        let b = CallRecorder::install(&api.clone());
        let ok: Result<u8, ()> = api
            .observe("testcloud-a", "thing_get", async { Ok(1) })
            .await;
        assert_eq!(ok, Ok(1));
        let failed: Result<u8, &str> = api
            .observe("testcloud-a", "thing_get", async { Err("boom") })
            .await;
        assert!(failed.is_err());
        for r in [&a, &b] {
            assert_eq!(r.count("testcloud-a", "thing_get", true), 1);
            assert_eq!(r.count("testcloud-a", "thing_get", false), 1);
        }
    }

    #[tokio::test]
    async fn two_handles_share_no_observers() {
        let (one, other) = (CloudApi::new(), CloudApi::new());
        let seen = CallRecorder::install(&one);
        other.record("testcloud-b", "thing_get", Duration::from_millis(1), true);
        assert_eq!(seen.count("testcloud-b", "thing_get", true), 0);
        one.record("testcloud-b", "thing_get", Duration::from_millis(1), true);
        assert_eq!(seen.count("testcloud-b", "thing_get", true), 1);
    }
}
