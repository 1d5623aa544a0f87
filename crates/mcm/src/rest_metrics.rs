//! A tower layer on the kube clients that writes the reference's REST client
//! series (`rest_client_requests_total`, `rest_client_request_latency_seconds`;
//! see `mcm_runtime::metrics::rest`) for every request, into the
//! `RestMetrics` it is given (the Context's, not a process-wide one).

use mcm_runtime::metrics::rest::RestMetrics as Families;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// Adds [`RestMetrics`] to a client of the API server at `cluster_url`.
#[derive(Clone, Debug)]
pub struct RestMetricsLayer {
    origin: Arc<str>,
    families: Families,
}

impl RestMetricsLayer {
    /// A layer for the API server at `cluster_url` (its host labels the
    /// series) that writes `families`.
    pub fn new(cluster_url: &http::Uri, families: &Families) -> Self {
        let origin = match (cluster_url.scheme_str(), cluster_url.authority()) {
            (Some(s), Some(a)) => format!("{s}://{a}"),
            _ => String::new(),
        };
        RestMetricsLayer {
            origin: origin.into(),
            families: families.clone(),
        }
    }
}

impl<S> tower::Layer<S> for RestMetricsLayer {
    type Service = RestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RestMetrics {
            inner,
            origin: self.origin.clone(),
            families: self.families.clone(),
        }
    }
}

/// The service of [`RestMetricsLayer`].
#[derive(Clone, Debug)]
pub struct RestMetrics<S> {
    inner: S,
    origin: Arc<str>,
    families: Families,
}

impl<S> RestMetrics<S> {
    /// The request's full URI: the layer sits above kube's base-URI layer,
    /// so requests carry only their path and query here.
    fn full_uri(&self, uri: &http::Uri) -> http::Uri {
        if uri.authority().is_some() {
            return uri.clone();
        }
        let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        format!("{}{pq}", self.origin)
            .parse()
            .unwrap_or_else(|_| uri.clone())
    }
}

impl<S, B, RB> tower::Service<http::Request<B>> for RestMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.method().to_string();
        let uri = self.full_uri(req.uri());
        let start = Instant::now();
        let call = self.inner.call(req);
        let families = self.families.clone();
        Box::pin(async move {
            let result = call.await;
            let status = result.as_ref().ok().map(|r| r.status().as_u16());
            families.record(&method, &uri, status, start.elapsed());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service};

    /// Answers every request with 404.
    struct NotFound;

    impl Service<http::Request<()>> for NotFound {
        type Response = http::Response<()>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: http::Request<()>) -> Self::Future {
            let mut rsp = http::Response::new(());
            *rsp.status_mut() = http::StatusCode::NOT_FOUND;
            std::future::ready(Ok(rsp))
        }
    }

    #[tokio::test]
    async fn every_request_is_counted_with_the_api_servers_host() {
        let mut registry = prometheus_client::registry::Registry::default();
        let families = Families::default();
        families.register(&mut registry);
        let layer = RestMetricsLayer::new(
            &"https://rest-layer.invalid:6443".parse().unwrap(),
            &families,
        );
        let mut svc = layer.layer(NotFound);
        let req = http::Request::get("/api/v1/namespaces/ns/secrets/s")
            .body(())
            .unwrap();
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
        let rsp = svc.call(req).await.unwrap();
        assert_eq!(rsp.status(), 404);
        let text = mcm_runtime::metrics::encode(&registry);
        assert!(
            text.contains(
                "rest_client_requests_total{code=\"404\",method=\"GET\",host=\"rest-layer.invalid:6443\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("url=\"https://rest-layer.invalid:6443/api/v1/namespaces/%7Bnamespace%7D/secrets/%7Bname%7D\""),
            "{text}"
        );
    }
}
