//! A small Azure Resource Manager client: the calls the driver makes, on
//! reqwest and serde, with long-running operations, the ARM error envelope,
//! throttling and the shared cloud budget.
//!
//! - **Throttling:** each call first takes a token of its class from the
//!   budget (reads, writes, deletes, Resource Graph). A 429 answer honours
//!   `Retry-After` (seconds), pauses the whole class for everyone using this
//!   subscription (growing with consecutive 429s) and is retried up to
//!   [`ArmSettings::max_throttle_retries`] times. An answer whose
//!   `x-ms-ratelimit-remaining-subscription-*` header reaches 0 pauses the
//!   class before ARM starts answering 429.
//! - **Transient answers:** 408, 500, 502, 503 and 504, and no answer at all,
//!   are retried [`ArmSettings::max_transient_retries`] times after
//!   `Retry-After` or an exponential back-off, as the Go SDK's retry policy
//!   does; each try takes its budget token. What still fails keeps its code
//!   (a `Failed` operation's own error code, so quota stays `ResourceExhausted`).
//! - **Long-running operations:** PUT/PATCH/DELETE answered 201/202 are polled
//!   at the `Azure-AsyncOperation` URL (status `InProgress` → `Succeeded` /
//!   `Failed` / `Canceled`), else at the `Location` URL (202 until done), else
//!   by reading the resource until its `provisioningState` is terminal; each
//!   poll waits `Retry-After` or [`ArmSettings::poll_interval`]. Poll URLs must
//!   be on the ARM endpoint.

pub mod calls;
pub mod cloud_metrics;
pub mod error;
pub mod models;
mod ops;

pub use calls::ApiCalls;
pub use error::ArmError;

use crate::auth::TokenSource;
use mcm_driver::budget::Limiter;
use models::{ErrorEnvelope, OperationStatus};
use reqwest::header::HeaderMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

/// API version of Microsoft.Compute virtual machines and VM images.
pub const COMPUTE_API: &str = "2023-07-01";
/// API version of Microsoft.Compute disks.
pub const DISK_API: &str = "2023-04-02";
/// API version of Microsoft.Network.
pub const NETWORK_API: &str = "2023-05-01";
/// API version of resource groups.
pub const RESOURCES_API: &str = "2021-04-01";
/// API version of Resource Graph.
pub const RESOURCE_GRAPH_API: &str = "2021-06-01-preview";
/// API version of marketplace agreements.
pub const MARKETPLACE_API: &str = "2021-01-01";

/// ARM's throttling classes (per subscription; the Compute provider's own
/// policies are finer, but these are the ones every answer reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpClass {
    /// GET / HEAD.
    Read,
    /// PUT / PATCH / POST actions.
    Write,
    /// DELETE.
    Delete,
    /// Resource Graph queries (their own per-user quota).
    ResourceGraph,
}

impl OpClass {
    /// Every class.
    pub const ALL: [OpClass; 4] = [
        OpClass::Read,
        OpClass::Write,
        OpClass::Delete,
        OpClass::ResourceGraph,
    ];

    fn remaining_header(self) -> Option<&'static str> {
        match self {
            OpClass::Read => Some("x-ms-ratelimit-remaining-subscription-reads"),
            OpClass::Write => Some("x-ms-ratelimit-remaining-subscription-writes"),
            OpClass::Delete => Some("x-ms-ratelimit-remaining-subscription-deletes"),
            OpClass::ResourceGraph => None,
        }
    }
}

/// Timing of the client.
#[derive(Clone, Debug)]
pub struct ArmSettings {
    /// Wait between polls of a long-running operation without `Retry-After`.
    pub poll_interval: Duration,
    /// Extra tries after a 429.
    pub max_throttle_retries: u32,
    /// Wait after a 429 without `Retry-After`.
    pub default_retry_after: Duration,
    /// Longest wait after a 429.
    pub max_retry_after: Duration,
    /// Extra tries after a transient answer (408, 500, 502, 503, 504) or no
    /// answer at all, as the Go SDK's retry policy (3).
    pub max_transient_retries: u32,
    /// First wait after a transient answer without `Retry-After`, doubling
    /// per try (the Go SDK: 4 s) ...
    pub transient_delay: Duration,
    /// ... up to this (the Go SDK: 60 s).
    pub max_transient_delay: Duration,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
    /// VM create/update and delete (the reference: 15 min).
    pub vm_timeout: Duration,
    /// NIC and disk operations (the reference: 10-15 min).
    pub nic_disk_timeout: Duration,
}

impl Default for ArmSettings {
    fn default() -> Self {
        ArmSettings {
            poll_interval: Duration::from_secs(5),
            max_throttle_retries: 5,
            default_retry_after: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(120),
            max_transient_retries: 3,
            transient_delay: Duration::from_secs(4),
            max_transient_delay: Duration::from_secs(60),
            request_timeout: Duration::from_secs(60),
            vm_timeout: Duration::from_secs(15 * 60),
            nic_disk_timeout: Duration::from_secs(15 * 60),
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    /// Status.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn request_id(&self) -> Option<String> {
        self.header("x-ms-request-id")
            .or_else(|| self.header("x-ms-correlation-request-id"))
            .map(str::to_string)
    }

    fn retry_after(&self) -> Option<Duration> {
        self.header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
    }

    fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self, operation: &str) -> Result<T, ArmError> {
        serde_json::from_slice(&self.body).map_err(|e| ArmError::Transport {
            operation: operation.to_string(),
            message: format!("unexpected response body: {e}"),
        })
    }

    /// The ARM error this answer carries.
    pub fn error(&self, operation: &str) -> ArmError {
        let env: ErrorEnvelope = serde_json::from_slice(&self.body).unwrap_or_default();
        let code = if env.error.code.is_empty() {
            self.header("x-ms-error-code")
                .unwrap_or("HTTP error")
                .to_string()
        } else {
            env.error.code
        };
        let message = if env.error.message.is_empty() {
            String::from_utf8_lossy(&self.body)
                .chars()
                .take(300)
                .collect()
        } else {
            env.error.message
        };
        ArmError::Api {
            operation: operation.to_string(),
            status: self.status,
            code,
            message,
            request_id: self.request_id(),
        }
    }
}

/// A client of one subscription.
pub struct ArmClient {
    http: reqwest::Client,
    base: String,
    subscription: String,
    tokens: Arc<dyn TokenSource>,
    limiter: Arc<Limiter<OpClass>>,
    settings: ArmSettings,
    calls: Arc<ApiCalls>,
    cloud_api: mcm_driver::cloud_api::CloudApi,
}

impl std::fmt::Debug for ArmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmClient")
            .field("base", &self.base)
            .field("subscription", &self.subscription)
            .finish_non_exhaustive()
    }
}

impl ArmClient {
    /// A client of `subscription` at `base` (e.g. `https://management.azure.com`).
    pub fn new(
        http: reqwest::Client,
        base: &str,
        subscription: &str,
        tokens: Arc<dyn TokenSource>,
        limiter: Arc<Limiter<OpClass>>,
        settings: ArmSettings,
        calls: Arc<ApiCalls>,
    ) -> Self {
        ArmClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            subscription: subscription.to_string(),
            tokens,
            limiter,
            settings,
            calls,
            cloud_api: Default::default(),
        }
    }

    /// Reports every call to `api` (the driver's handle).
    pub fn with_cloud_api(mut self, api: mcm_driver::cloud_api::CloudApi) -> Self {
        self.cloud_api = api;
        self
    }

    /// The subscription.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }

    /// `https://…/subscriptions/<sub>` + `path` + `?api-version=<v>`.
    fn sub_url(&self, path: &str, api: &str) -> String {
        format!(
            "{}/subscriptions/{}{path}?api-version={api}",
            self.base, self.subscription
        )
    }

    /// One call, retried on 429.
    pub async fn call(
        &self,
        class: OpClass,
        method: reqwest::Method,
        url: &str,
        body: Option<&serde_json::Value>,
        operation: &str,
    ) -> Result<Answer, ArmError> {
        let mut tries = 0u32;
        loop {
            tries += 1;
            self.limiter.acquire(class).await;
            let token = self.tokens.token().await.map_err(|e| ArmError::Transport {
                operation: operation.to_string(),
                message: e.to_string(),
            })?;
            let mut req = self
                .http
                .request(method.clone(), url)
                .bearer_auth(token)
                .timeout(self.settings.request_timeout);
            if let Some(b) = body {
                req = req.json(b);
            }
            self.calls.record(&method, url);
            let started = std::time::Instant::now();
            let answer = send(req, operation).await;
            let ok = answer.as_ref().is_ok_and(Answer::is_success);
            cloud_metrics::record(&self.cloud_api, &method, url, started, ok);
            // Transient answers are retried as the Go SDK's pipeline does,
            // each try taking a token of the budget like the first.
            let transient_wait = |tries: u32, after: Option<Duration>| {
                after
                    .unwrap_or_else(|| {
                        self.settings
                            .transient_delay
                            .saturating_mul(1 << (tries - 1).min(16))
                    })
                    .min(self.settings.max_transient_delay)
            };
            let answer = match answer {
                Err(e @ ArmError::Transport { .. })
                    if tries <= self.settings.max_transient_retries =>
                {
                    let wait = transient_wait(tries, None);
                    warn!(operation, tries, wait_s = wait.as_secs_f64(), error = %e, "no answer from ARM; retrying");
                    tokio::time::sleep(wait).await;
                    continue;
                }
                other => other?,
            };
            let status = answer.status;
            if matches!(status, 408 | 500 | 502 | 503 | 504)
                && tries <= self.settings.max_transient_retries
            {
                let wait = transient_wait(tries, answer.retry_after());
                warn!(
                    operation,
                    status,
                    tries,
                    wait_s = wait.as_secs_f64(),
                    request_id = answer.request_id().unwrap_or_default(),
                    "transient ARM answer; retrying"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            if status == 429 {
                let retry_after = answer
                    .retry_after()
                    .unwrap_or(self.settings.default_retry_after)
                    .min(self.settings.max_retry_after);
                let pause = self
                    .limiter
                    .penalize(class, retry_after, self.settings.max_retry_after)
                    .await;
                warn!(
                    operation,
                    ?class,
                    tries,
                    retry_after_s = retry_after.as_secs_f64(),
                    pause_s = pause.as_secs_f64(),
                    request_id = answer.request_id().unwrap_or_default(),
                    "ARM throttled the call (429)"
                );
                if tries > self.settings.max_throttle_retries {
                    return Err(ArmError::Throttled {
                        operation: operation.to_string(),
                        tries,
                        request_id: answer.request_id(),
                    });
                }
                tokio::time::sleep(retry_after).await;
                continue;
            }
            if answer.is_success() {
                self.limiter.succeeded(class).await;
            }
            if let Some(h) = class.remaining_header() {
                if answer.header(h).and_then(|v| v.trim().parse::<i64>().ok()) == Some(0) {
                    let pause = self
                        .limiter
                        .penalize(
                            class,
                            self.settings.default_retry_after,
                            self.settings.max_retry_after,
                        )
                        .await;
                    debug!(
                        operation,
                        header = h,
                        pause_s = pause.as_secs_f64(),
                        "subscription budget exhausted"
                    );
                }
            }
            return Ok(answer);
        }
    }

    /// A call that must succeed (2xx).
    async fn call_ok(
        &self,
        class: OpClass,
        method: reqwest::Method,
        url: &str,
        body: Option<&serde_json::Value>,
        operation: &str,
    ) -> Result<Answer, ArmError> {
        let a = self.call(class, method, url, body, operation).await?;
        if a.is_success() {
            Ok(a)
        } else {
            Err(a.error(operation))
        }
    }

    /// A mutation and, when ARM runs it asynchronously, its polling until it is done.
    /// `resource_url` is read when ARM gives no poll URL but a non-terminal state.
    async fn long_running(
        &self,
        class: OpClass,
        method: reqwest::Method,
        url: &str,
        body: Option<&serde_json::Value>,
        operation: &str,
        timeout: Duration,
    ) -> Result<Answer, ArmError> {
        let first = self.call_ok(class, method, url, body, operation).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        let async_op = first.header("azure-asyncoperation").map(str::to_string);
        let location = first.header("location").map(str::to_string);
        let mut wait = first.retry_after().unwrap_or(self.settings.poll_interval);
        if let Some(poll) = async_op {
            self.check_poll_url(&poll, operation)?;
            loop {
                self.sleep_until(wait, deadline, operation, timeout).await?;
                let a = self
                    .call_ok(OpClass::Read, reqwest::Method::GET, &poll, None, operation)
                    .await?;
                let st: OperationStatus = a.json(operation)?;
                match st.status.as_str() {
                    "Succeeded" => return Ok(first),
                    "Failed" | "Canceled" => {
                        let e = st.error.unwrap_or_default();
                        return Err(ArmError::Api {
                            operation: operation.to_string(),
                            status: a.status,
                            code: if e.code.is_empty() { st.status } else { e.code },
                            message: e.message,
                            request_id: a.request_id(),
                        });
                    }
                    _ => wait = a.retry_after().unwrap_or(self.settings.poll_interval),
                }
            }
        }
        if first.status == 202 {
            if let Some(poll) = location {
                self.check_poll_url(&poll, operation)?;
                loop {
                    self.sleep_until(wait, deadline, operation, timeout).await?;
                    let a = self
                        .call(OpClass::Read, reqwest::Method::GET, &poll, None, operation)
                        .await?;
                    match a.status {
                        202 => wait = a.retry_after().unwrap_or(self.settings.poll_interval),
                        s if (200..300).contains(&s) => return Ok(first),
                        _ => return Err(a.error(operation)),
                    }
                }
            }
        }
        Ok(first)
    }

    fn check_poll_url(&self, poll: &str, operation: &str) -> Result<(), ArmError> {
        if poll.starts_with(&format!("{}/", self.base)) {
            Ok(())
        } else {
            Err(ArmError::Transport {
                operation: operation.to_string(),
                message: format!("refusing to poll a URL outside the ARM endpoint: {poll}"),
            })
        }
    }

    async fn sleep_until(
        &self,
        wait: Duration,
        deadline: tokio::time::Instant,
        operation: &str,
        timeout: Duration,
    ) -> Result<(), ArmError> {
        let now = tokio::time::Instant::now();
        if now + wait > deadline {
            return Err(ArmError::Timeout {
                operation: operation.to_string(),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }
}

/// Sends one request and reads its whole answer.
async fn send(req: reqwest::RequestBuilder, operation: &str) -> Result<Answer, ArmError> {
    let rsp = req.send().await.map_err(|e| ArmError::Transport {
        operation: operation.to_string(),
        message: format!("no answer: {e}"),
    })?;
    let status = rsp.status().as_u16();
    let headers = rsp.headers().clone();
    let body = rsp
        .bytes()
        .await
        .map_err(|e| ArmError::Transport {
            operation: operation.to_string(),
            message: format!("reading the answer: {e}"),
        })?
        .to_vec();
    Ok(Answer {
        status,
        headers,
        body,
    })
}
