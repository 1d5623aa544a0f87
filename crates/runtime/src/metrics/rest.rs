//! The REST client series of the reference (its
//! `pkg/util/client/metrics/prometheus`, imported by both of its binaries):
//!
//! - `rest_client_requests_total{code, method, host}`: every request's
//!   outcome (`code` is the HTTP status, `<error>` when no response came);
//! - `rest_client_request_latency_seconds{verb, url}`: how long a request
//!   took, by method and URL template (client-go's `finalURLTemplate`:
//!   namespace and name replaced by `{namespace}` and `{name}`, query values
//!   by `{value}`); watches are not timed, as in client-go.
//!
//! The kube clients write them through a tower layer (`mcm`'s
//! `kubeclient`) that holds a [`RestMetrics`]; the Context owns the same
//! value (`Context::rest`, from [`crate::Clients`]), so the series are the
//! Context's, not the process's: two Contexts in one process share none.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// `{code, method, host}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    /// HTTP status code, or `<error>`.
    pub(crate) code: String,
    /// HTTP method.
    pub(crate) method: String,
    /// `host:port` of the API server.
    pub(crate) host: String,
}

/// `{verb, url}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LatencyLabels {
    /// HTTP method.
    pub(crate) verb: String,
    /// The URL template.
    pub(crate) url: String,
}

/// The REST client families; clones share the series.
#[derive(Clone, Debug)]
pub struct RestMetrics {
    results: Family<ResultLabels, Counter>,
    latency: Family<LatencyLabels, Histogram>,
}

impl Default for RestMetrics {
    fn default() -> Self {
        RestMetrics {
            results: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

fn latency_histogram() -> Histogram {
    // The reference's buckets: ExponentialBuckets(0.001, 2, 10).
    Histogram::new(exponential_buckets(0.001, 2.0, 10))
}

impl RestMetrics {
    /// Adds the REST client families to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            super::Described(self.results.clone()),
        );
        registry.register(
            "rest_client_request_latency_seconds",
            "Request latency in seconds. Broken down by verb and URL.",
            super::Described(self.latency.clone()),
        );
    }

    /// Records one finished request to `uri` (`status` is `None` when no
    /// response came).
    pub fn record(&self, method: &str, uri: &http::Uri, status: Option<u16>, took: Duration) {
        let code = status.map_or_else(|| "<error>".to_string(), |s| s.to_string());
        let host = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        self.results
            .get_or_create(&ResultLabels {
                code,
                method: method.to_string(),
                host,
            })
            .inc();
        if is_watch(uri) {
            return;
        }
        self.latency
            .get_or_create(&LatencyLabels {
                verb: method.to_string(),
                url: url_template(uri),
            })
            .observe(took.as_secs_f64());
    }
}

fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1")
}

/// client-go's URL template of a request: `/api/v1/namespaces/ns/pods/p?x=1`
/// → `/api/v1/namespaces/%7Bnamespace%7D/pods/%7Bname%7D?x=%7Bvalue%7D`
/// (with scheme and host), so the label does not grow with the objects.
pub(crate) fn url_template(uri: &http::Uri) -> String {
    let segments: Vec<&str> = uri.path().split('/').collect();
    let group = segments.get(1).copied().unwrap_or_default();
    let index = match group {
        _ if segments.len() <= 2 => usize::MAX,
        "api" => 3,
        "apis" => 4,
        _ => return format!("{}/%7Bprefix%7D", origin(uri)),
    };
    let mut out: Vec<&str> = segments.clone();
    let rest = segments.len().saturating_sub(index);
    let sub = |i: usize| segments.get(i).copied().unwrap_or_default();
    match rest {
        2 => out[index + 1] = "%7Bname%7D",
        3 if matches!(sub(index + 2), "finalize" | "status") => out[index + 1] = "%7Bname%7D",
        3 => out[index + 1] = "%7Bnamespace%7D",
        n if n >= 4 => {
            out[index + 1] = "%7Bnamespace%7D";
            if !matches!(sub(index + 3), "finalize" | "status") {
                out[index + 3] = "%7Bname%7D";
            }
        }
        _ => {}
    }
    let mut keys: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| kv.split('=').next().unwrap_or_default())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let query: Vec<String> = keys.iter().map(|k| format!("{k}=%7Bvalue%7D")).collect();
    let mut url = format!("{}{}", origin(uri), out.join("/"));
    if !query.is_empty() {
        url.push('?');
        url.push_str(&query.join("&"));
    }
    url
}

fn origin(uri: &http::Uri) -> String {
    match (uri.scheme_str(), uri.authority()) {
        (Some(s), Some(a)) => format!("{s}://{a}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> http::Uri {
        s.parse().expect("uri")
    }

    #[test]
    fn url_templates_hide_namespaces_names_and_query_values_like_client_go() {
        let base = "https://10.0.0.1:6443";
        let cases = [
            (
                "/api/v1/namespaces/shoot--a/secrets/s1",
                "/api/v1/namespaces/%7Bnamespace%7D/secrets/%7Bname%7D",
            ),
            (
                "/apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machines/m1/status",
                "/apis/machine.sapcloud.io/v1alpha1/namespaces/%7Bnamespace%7D/machines/%7Bname%7D/status",
            ),
            (
                "/apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machines?labelSelector=a%3Db&limit=500",
                "/apis/machine.sapcloud.io/v1alpha1/namespaces/%7Bnamespace%7D/machines?labelSelector=%7Bvalue%7D&limit=%7Bvalue%7D",
            ),
            ("/api/v1/nodes/n1", "/api/v1/nodes/%7Bname%7D"),
            ("/api/v1/nodes/n1/status", "/api/v1/nodes/%7Bname%7D/status"),
            ("/api/v1/nodes", "/api/v1/nodes"),
            ("/version", "/version"),
            ("/openapi/v2/x", "/%7Bprefix%7D"),
        ];
        for (path, want) in cases {
            assert_eq!(
                url_template(&uri(&format!("{base}{path}"))),
                format!("{base}{want}"),
                "{path}"
            );
        }
    }

    #[test]
    fn requests_are_counted_by_code_method_and_host_and_watches_are_not_timed() {
        let mut registry = Registry::default();
        let rest = RestMetrics::default();
        rest.register(&mut registry);
        let host = "rest-test.invalid:443";
        let get = uri(&format!("https://{host}/api/v1/namespaces/ns/pods/p"));
        let watch = uri(&format!("https://{host}/api/v1/pods?watch=true"));
        rest.record("GET", &get, Some(200), Duration::from_millis(3));
        rest.record("GET", &watch, Some(200), Duration::from_secs(300));
        rest.record("POST", &get, None, Duration::from_millis(3));
        let text = super::super::encode(&registry);
        assert!(
            text.contains(&format!(
                "rest_client_requests_total{{code=\"200\",method=\"GET\",host=\"{host}\"}} 2"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "rest_client_requests_total{{code=\"<error>\",method=\"POST\",host=\"{host}\"}} 1"
            )),
            "{text}"
        );
        assert!(text.contains("# TYPE rest_client_request_latency_seconds histogram"));
        assert!(
            !text.contains(&format!("url=\"https://{host}/api/v1/pods?watch")),
            "watches are not timed: {text}"
        );
    }

    #[test]
    fn two_rest_metrics_share_no_series() {
        let (mut one, mut other) = (Registry::default(), Registry::default());
        let (a, b) = (RestMetrics::default(), RestMetrics::default());
        a.register(&mut one);
        b.register(&mut other);
        let get = uri("https://rest-two.invalid:443/api/v1/pods");
        a.record("GET", &get, Some(200), Duration::from_millis(1));
        let series = "host=\"rest-two.invalid:443\"";
        assert!(super::super::encode(&one).contains(series));
        assert!(!super::super::encode(&other).contains(series));
    }
}
