//! The cloud API series, written from [`mcm_driver::cloud_api`]: the
//! providers report every call at their HTTP/SDK layer, and the observer
//! here counts it. As in the reference (whose collectors are package-level
//! globals), the families are shared by the whole process, so every
//! [`super::Metrics`] registers the same series.
//!
//! The reference's AWS, GCP and Azure providers count a successful call in
//! `mcm_cloud_api_requests_total` (and observe its duration) and a failed
//! one only in `mcm_cloud_api_requests_failed_total`; this observer does the
//! same for every provider (the reference's OpenStack provider counted
//! failures in both and observed no duration; its Alicloud provider counted
//! nothing).

use super::CloudApiLabels;
use mcm_driver::cloud_api::{CloudApiCall, CloudApiObserver};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use std::sync::{Arc, LazyLock, Once};

/// The process's cloud API families.
#[derive(Clone)]
pub struct CloudApiFamilies {
    /// `mcm_cloud_api_requests_total`.
    pub requests: Family<CloudApiLabels, Counter>,
    /// `mcm_cloud_api_requests_failed_total`.
    pub failed: Family<CloudApiLabels, Counter>,
    /// `mcm_cloud_api_api_request_duration_seconds`.
    pub duration: Family<CloudApiLabels, Histogram>,
}

static FAMILIES: LazyLock<CloudApiFamilies> = LazyLock::new(|| CloudApiFamilies {
    requests: Family::default(),
    failed: Family::default(),
    duration: Family::new_with_constructor(super::histogram),
});

static INSTALL: Once = Once::new();

/// The process's families; the first call adds their observer to
/// [`mcm_driver::cloud_api`].
pub fn families() -> CloudApiFamilies {
    INSTALL.call_once(|| mcm_driver::cloud_api::add_observer(Arc::new(Observer)));
    FAMILIES.clone()
}

struct Observer;

impl CloudApiObserver for Observer {
    fn cloud_api_call(&self, call: &CloudApiCall<'_>) {
        let labels = CloudApiLabels {
            provider: call.provider.to_string(),
            service: call.service.to_string(),
        };
        if call.ok {
            FAMILIES.requests.get_or_create(&labels).inc();
            FAMILIES
                .duration
                .get_or_create(&labels)
                .observe(call.duration.as_secs_f64());
        } else {
            FAMILIES.failed.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;
    use std::time::Duration;

    #[test]
    fn a_providers_calls_move_the_cloud_api_series() {
        let mut registry = Registry::default();
        let _m = super::super::Metrics::new(&mut registry);
        mcm_driver::cloud_api::record("unitcloud", "instance_get", Duration::from_millis(30), true);
        mcm_driver::cloud_api::record("unitcloud", "instance_get", Duration::from_millis(5), false);
        let text = super::super::encode(&registry);
        let labels = "{provider=\"unitcloud\",service=\"instance_get\"}";
        assert!(
            text.contains(&format!("mcm_cloud_api_requests_total{labels} 1")),
            "{text}"
        );
        assert!(
            text.contains(&format!("mcm_cloud_api_requests_failed_total{labels} 1")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "mcm_cloud_api_api_request_duration_seconds_count{labels} 1"
            )),
            "only successful calls are timed, as in the reference: {text}"
        );
    }
}
