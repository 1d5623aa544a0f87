//! Kubernetes clients with the reference's kubeconfig semantics and a
//! client-side rate limit (`--kube-api-qps`, `--kube-api-burst`).
//!
//! - `--control-kubeconfig=inClusterConfig`: the pod's service account.
//! - an empty `--control-kubeconfig`: the same cluster as the target.
//! - an empty `--target-kubeconfig`: in-cluster (outside a pod: `$KUBECONFIG`,
//!   so `mcm run` works from a shell).
//! - `--target-kubeconfig=none`: no target cluster.
//!
//! The in-cluster configuration reads `KUBERNETES_SERVICE_HOST`/`_PORT` and the
//! token, CA and namespace from `/var/run/secrets/kubernetes.io/serviceaccount`,
//! or from the folder in `MCM_SERVICEACCOUNT_DIR` (for tests).

use anyhow::{bail, Context as _};
use kube::client::ClientBuilder;
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The special `--control-kubeconfig` value for the in-cluster configuration.
pub const IN_CLUSTER: &str = "inClusterConfig";
/// The `--target-kubeconfig` value that disables the target cluster.
pub const NO_TARGET: &str = "none";
/// The default service-account folder of a pod.
pub const SERVICEACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What a kubeconfig flag resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The pod's service account.
    InCluster,
    /// A kubeconfig file.
    File(PathBuf),
    /// In-cluster when running in a pod, else `$KUBECONFIG` / `~/.kube/config`.
    Default,
}

/// Resolves `--control-kubeconfig` and `--target-kubeconfig` the reference's
/// way: (control, target); target `None` means no target cluster.
pub fn resolve(control: &str, target: &str) -> anyhow::Result<(Source, Option<Source>)> {
    let target_src = match target {
        NO_TARGET => None,
        "" => Some(Source::Default),
        IN_CLUSTER => Some(Source::InCluster),
        path => Some(Source::File(PathBuf::from(path))),
    };
    let control_src = match control {
        "" => match &target_src {
            Some(t) => t.clone(),
            None => bail!(
                "--control-kubeconfig cannot be empty if --target-kubeconfig=none is specified"
            ),
        },
        IN_CLUSTER => Source::InCluster,
        path => Source::File(PathBuf::from(path)),
    };
    Ok((control_src, target_src))
}

fn in_cluster_config() -> anyhow::Result<Config> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST")
        .context("inClusterConfig: KUBERNETES_SERVICE_HOST is not set (not running in a pod)")?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT")
        .context("inClusterConfig: KUBERNETES_SERVICE_PORT is not set")?;
    let dir = PathBuf::from(
        std::env::var("MCM_SERVICEACCOUNT_DIR").unwrap_or_else(|_| SERVICEACCOUNT_DIR.into()),
    );
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    let url: http::Uri = format!("https://{host}:{port}")
        .parse()
        .context("inClusterConfig: KUBERNETES_SERVICE_HOST/PORT do not form a URL")?;
    let ca_path = dir.join("ca.crt");
    let ca = std::fs::read(&ca_path)
        .with_context(|| format!("inClusterConfig: reading {}", ca_path.display()))?;
    let certs: Vec<Vec<u8>> = pem_blocks(&ca);
    if certs.is_empty() {
        bail!(
            "inClusterConfig: {} holds no certificate",
            ca_path.display()
        );
    }
    let token_path = dir.join("token");
    if !token_path.exists() {
        bail!("inClusterConfig: no token at {}", token_path.display());
    }
    let namespace = std::fs::read_to_string(dir.join("namespace"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "default".into());
    let mut config = Config::new(url);
    config.default_namespace = namespace;
    config.root_cert = Some(certs);
    config.auth_info = AuthInfo {
        token_file: Some(token_path.to_string_lossy().into_owned()),
        ..Default::default()
    };
    Ok(config)
}

/// The DER certificates of a PEM bundle.
fn pem_blocks(pem: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(pem);
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("-----BEGIN CERTIFICATE") {
            body = Some(String::new());
        } else if line.starts_with("-----END CERTIFICATE") {
            if let Some(b) = body.take() {
                if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b) {
                    out.push(der);
                }
            }
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        }
    }
    out
}

async fn config_of(source: &Source) -> anyhow::Result<Config> {
    match source {
        Source::InCluster => in_cluster_config(),
        Source::File(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Ok(
                Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("kubeconfig {}", path.display()))?,
            )
        }
        Source::Default => {
            if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
                in_cluster_config()
            } else {
                Config::infer().await.context(
                    "no kubeconfig: pass --target-kubeconfig/--control-kubeconfig or set KUBECONFIG",
                )
            }
        }
    }
}

/// The reference's User-Agent of a client named `agent` in the program
/// `program`: client-go's default (`<program>/<version> (<os>/<arch>)
/// kubernetes/<commit>`) with `/<agent>` appended by `rest.AddUserAgent`;
/// mcm-rs writes `mcm-rs` where client-go writes `kubernetes`. Audit logs
/// show it (`machine-controller-manager`, `machine-controller`,
/// `machine-leader-election` as the reference's clients).
pub fn user_agent(program: &str, agent: &str) -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!(
        "{program}/v{} ({}/{arch}) mcm-rs/{agent}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS
    )
}

/// Builds a client for `source` with the client-side rate limit, sending
/// `user_agent`; its requests move the REST client series of `rest`.
pub async fn client(
    source: &Source,
    qps: f32,
    burst: i32,
    user_agent: &str,
    rest: &mcm_runtime::metrics::rest::RestMetrics,
) -> anyhow::Result<Client> {
    let mut config = config_of(source).await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(user_agent)?,
    ));
    let limiter = RateLimitLayer::new(qps, burst);
    let metrics = crate::rest_metrics::RestMetricsLayer::new(&config.cluster_url, rest);
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&metrics)
        .with_layer(&limiter)
        .build())
}

/// A token bucket: `qps` tokens per second, at most `burst` (at least 1) stored.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(qps: f32, burst: i32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps).max(0.001),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes a token now, or tells how long to wait for one.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// A tower layer that waits for a token before every request (client-go's
/// token-bucket rate limiter on the REST client).
#[derive(Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    /// A layer with `qps` requests per second and bursts of `burst`.
    pub fn new(qps: f32, burst: i32) -> Self {
        RateLimitLayer {
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst))),
        }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            permitted: false,
        }
    }
}

/// The service of [`RateLimitLayer`].
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    sleep: Option<Pin<Box<Sleep>>>,
    permitted: bool,
}

impl<S, R> tower::Service<R> for RateLimited<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.permitted {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let taken = match self.bucket.lock() {
                Ok(mut b) => b.take(Instant::now()),
                Err(_) => Ok(()),
            };
            match taken {
                Ok(()) => self.permitted = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.permitted = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents_end_in_the_reference_client_names() {
        let ua = user_agent("machine-controller-manager", "machine-leader-election");
        assert!(ua.starts_with("machine-controller-manager/v"), "{ua}");
        assert!(ua.ends_with(" mcm-rs/machine-leader-election"), "{ua}");
        assert!(ua.contains(&format!("({}/", std::env::consts::OS)), "{ua}");
        assert!(http::HeaderValue::from_str(&ua).is_ok());
    }

    #[test]
    fn empty_control_kubeconfig_means_the_target_and_none_disables_the_target() {
        assert_eq!(
            resolve("", "/t").unwrap(),
            (Source::File("/t".into()), Some(Source::File("/t".into())))
        );
        assert_eq!(
            resolve("inClusterConfig", "/t").unwrap(),
            (Source::InCluster, Some(Source::File("/t".into())))
        );
        assert_eq!(
            resolve("/c", "").unwrap(),
            (Source::File("/c".into()), Some(Source::Default))
        );
        assert_eq!(
            resolve("/c", "none").unwrap(),
            (Source::File("/c".into()), None)
        );
        assert!(resolve("", "none").is_err());
    }

    #[tokio::test]
    async fn bucket_allows_the_burst_then_qps() {
        let mut b = TokenBucket::new(10.0, 3);
        let now = Instant::now();
        for _ in 0..3 {
            assert!(b.take(now).is_ok());
        }
        let wait = b.take(now).unwrap_err();
        assert!(wait <= Duration::from_millis(100) && wait >= Duration::from_millis(99));
        assert!(b.take(now + Duration::from_millis(100)).is_ok());
    }
}
