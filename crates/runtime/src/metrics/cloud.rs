//! The cloud API series, written from the drivers' [`CloudApi`] handles:
//! the providers report every call at their HTTP/SDK layer, and the
//! observer here counts it. The families belong to one [`super::Metrics`]
//! (so to one Context): the Context adds their observer to the handle of
//! every driver it runs (`Context::with_clients`), and two Contexts in one
//! process share no series.
//!
//! The reference's AWS, GCP and Azure providers count a successful call in
//! `mcm_cloud_api_requests_total` (and observe its duration) and a failed
//! one only in `mcm_cloud_api_requests_failed_total`; this observer does the
//! same for every provider (the reference's OpenStack provider counted
//! failures in both and observed no duration; its Alicloud provider counted
//! nothing).

use super::CloudApiLabels;
#[cfg(doc)]
use mcm_driver::cloud_api::CloudApi;
use mcm_driver::cloud_api::{CloudApiCall, CloudApiObserver};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// The cloud API families of one [`super::Metrics`]; clones share the series.
#[derive(Clone)]
pub(crate) struct CloudApiFamilies {
    /// `mcm_cloud_api_requests_total`.
    pub(crate) requests: Family<CloudApiLabels, Counter>,
    /// `mcm_cloud_api_requests_failed_total`.
    pub(crate) failed: Family<CloudApiLabels, Counter>,
    /// `mcm_cloud_api_api_request_duration_seconds`.
    pub(crate) duration: Family<CloudApiLabels, Histogram>,
}

impl Default for CloudApiFamilies {
    fn default() -> Self {
        CloudApiFamilies {
            requests: Family::default(),
            failed: Family::default(),
            duration: Family::new_with_constructor(super::histogram),
        }
    }
}

impl CloudApiObserver for CloudApiFamilies {
    fn cloud_api_call(&self, call: &CloudApiCall<'_>) {
        let labels = CloudApiLabels {
            provider: call.provider.to_string(),
            service: call.service.to_string(),
        };
        if call.ok {
            self.requests.get_or_create(&labels).inc();
            self.duration
                .get_or_create(&labels)
                .observe(call.duration.as_secs_f64());
        } else {
            self.failed.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use mcm_driver::cloud_api::CloudApi;
    use prometheus_client::registry::Registry;
    use std::time::Duration;

    #[test]
    fn a_providers_calls_move_the_cloud_api_series() {
        let mut registry = Registry::default();
        let m = super::super::Metrics::new(&mut registry);
        let api = CloudApi::new();
        api.add_observer(m.cloud_api_observer());
        api.record("unitcloud", "instance_get", Duration::from_millis(30), true);
        api.record("unitcloud", "instance_get", Duration::from_millis(5), false);
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

    #[test]
    fn two_metrics_share_no_cloud_api_series() {
        let (mut one, mut other) = (Registry::default(), Registry::default());
        let (a, _b) = (
            super::super::Metrics::new(&mut one),
            super::super::Metrics::new(&mut other),
        );
        let api = CloudApi::new();
        api.add_observer(a.cloud_api_observer());
        api.record("twocloud", "instance_get", Duration::from_millis(1), true);
        let series = "mcm_cloud_api_requests_total{provider=\"twocloud\"";
        assert!(super::super::encode(&one).contains(series));
        assert!(!super::super::encode(&other).contains(series));
    }
}
