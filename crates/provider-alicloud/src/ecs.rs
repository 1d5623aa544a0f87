//! A small ECS RPC client: the three actions the driver needs, signed with
//! ACS3-HMAC-SHA256, budgeted per action class, retried on throttling.
//!
//! Parameters travel as the query string of a `POST /` with an empty body, as
//! the ECS metadata places them (`"in": "query"`); lists are flattened to
//! 1-based keys (`Tag.1.Key`, `DataDisk.2.Size`), nested objects dotted
//! (`SystemDisk.Category`), and `InstanceIds` is a JSON array in a string.

use crate::config::{ActionClass, RetrySettings};
use crate::errors::EcsError;
use crate::sign::{self, SigningInput};
use crate::spec::Credentials;
use mcm_driver::budget::Limiter;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tracing::{debug, warn};

/// The ECS API version.
pub const API_VERSION: &str = "2014-05-26";
/// Page size of DescribeInstances (the API's maximum).
pub const PAGE_SIZE: u32 = 100;

/// Flat RPC parameters, sorted by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params(pub BTreeMap<String, String>);

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Params::default()
    }

    /// Sets a parameter.
    pub fn set(&mut self, key: impl Into<String>, value: impl ToString) -> &mut Self {
        self.0.insert(key.into(), value.to_string());
        self
    }

    /// Sets a parameter unless the value is empty.
    pub fn set_non_empty(&mut self, key: &str, value: &str) -> &mut Self {
        if !value.is_empty() {
            self.set(key, value);
        }
        self
    }

    /// Sets the fields of the `n`-th (1-based) element of a repeat list:
    /// `<list>.<n>.<field>`.
    pub fn set_item(
        &mut self,
        list: &str,
        n: usize,
        field: &str,
        value: impl ToString,
    ) -> &mut Self {
        self.set(format!("{list}.{n}.{field}"), value)
    }

    /// `Tag.N.Key` / `Tag.N.Value` for each tag, in order.
    pub fn set_tags<'a>(
        &mut self,
        tags: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> &mut Self {
        for (i, (k, v)) in tags.into_iter().enumerate() {
            self.set_item("Tag", i + 1, "Key", k);
            self.set_item("Tag", i + 1, "Value", v);
        }
        self
    }

    /// A value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

/// ECS calls per action, counted by the driver.
#[derive(Clone, Debug, Default)]
pub struct CallCounter(Arc<Mutex<BTreeMap<String, u64>>>);

impl CallCounter {
    fn record(&self, action: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(action.to_string()).or_default() += 1;
        }
    }

    /// The counts so far (attempts, including retries).
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// A tag as DescribeInstances shows it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
pub struct Tag {
    /// Key.
    pub tag_key: String,
    /// Value.
    pub tag_value: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
struct Tags {
    tag: Vec<Tag>,
}

/// A list of IP addresses (`{"IpAddress": [...]}`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
pub struct IpList {
    /// The addresses.
    pub ip_address: Vec<String>,
}

/// VPC attributes of an instance.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
pub struct VpcAttributes {
    /// Private addresses.
    pub private_ip_address: IpList,
    /// The vSwitch.
    #[serde(rename = "VSwitchId")]
    pub v_switch_id: String,
}

/// An instance as DescribeInstances shows it (the fields the driver reads).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
pub struct Instance {
    /// `i-...`.
    pub instance_id: String,
    /// The machine name.
    pub instance_name: String,
    /// `Pending`, `Starting`, `Running`, `Stopping` or `Stopped`.
    pub status: String,
    /// The region.
    pub region_id: String,
    /// The zone.
    pub zone_id: String,
    /// Host name.
    pub host_name: String,
    tags: Tags,
    /// VPC attributes.
    pub vpc_attributes: VpcAttributes,
    /// Public addresses.
    pub public_ip_address: IpList,
    /// Elastic IP, when bound.
    pub eip_address: EipAddress,
}

/// An elastic IP.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "PascalCase")]
pub struct EipAddress {
    /// The address (empty when none).
    pub ip_address: String,
}

impl Instance {
    /// The instance's tags.
    pub fn tags(&self) -> &[Tag] {
        &self.tags.tag
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribePage {
    #[serde(default)]
    next_token: String,
    #[serde(default)]
    instances: InstanceList,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct InstanceList {
    instance: Vec<Instance>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RunAnswer {
    #[serde(default)]
    instance_id_sets: IdSets,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct IdSets {
    instance_id_set: Vec<String>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct ErrorEnvelope {
    code: String,
    message: String,
    request_id: String,
}

/// ECS access for one account and region.
pub struct Ecs {
    pub(crate) http: reqwest::Client,
    pub(crate) endpoint: String,
    pub(crate) region: String,
    pub(crate) credentials: Credentials,
    pub(crate) limiter: Arc<Limiter<ActionClass>>,
    pub(crate) retry: RetrySettings,
    pub(crate) calls: CallCounter,
    /// Where every call is reported (the driver's handle).
    pub(crate) cloud_api: mcm_driver::cloud_api::CloudApi,
}

impl Ecs {
    /// Calls an action with retries (each attempt reported to
    /// the driver's [`mcm_driver::cloud_api::CloudApi`] with provider `alicloud` and the action in
    /// snake case as service; the reference's Alicloud provider reports no
    /// such series): a throttled answer pauses the action class
    /// (shared by every caller of this account and region) and is retried up to
    /// `throttle_retries` times; no answer or a server error up to `transient_retries`.
    pub async fn call(
        &self,
        class: ActionClass,
        params: &Params,
    ) -> Result<serde_json::Value, EcsError> {
        let action = class.action();
        let mut throttled = 0;
        let mut transient = 0;
        loop {
            let waited = self.limiter.acquire(class).await;
            if !waited.is_zero() {
                debug!(
                    action,
                    waited_ms = waited.as_millis() as u64,
                    "waited for the ECS budget"
                );
            }
            self.calls.record(action);
            let service = mcm_driver::cloud_api::snake_case(action);
            match self
                .cloud_api
                .observe("alicloud", &service, self.send(action, params))
                .await
            {
                Ok(v) => {
                    self.limiter.succeeded(class).await;
                    return Ok(v);
                }
                Err(e) if e.is_throttling() && throttled < self.retry.throttle_retries => {
                    throttled += 1;
                    let pause = self
                        .limiter
                        .penalize(
                            class,
                            self.retry.throttle_pause,
                            self.retry.max_throttle_pause,
                        )
                        .await;
                    warn!(
                        action,
                        code = e.code(),
                        pause_ms = pause.as_millis() as u64,
                        "ECS throttled the call; pausing the action class"
                    );
                    if self.limiter.wait_estimate(class).await.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
                Err(e) if e.is_transient() && transient < self.retry.transient_retries => {
                    let pause = self.retry.transient_pause.saturating_mul(1 << transient);
                    transient += 1;
                    warn!(action, error = %e, "ECS call failed; retrying");
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn send(&self, action: &str, params: &Params) -> Result<serde_json::Value, EcsError> {
        let query = sign::canonical_query(params.0.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let host = host_of(&self.endpoint);
        let date = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        let payload = sign::sha256_hex(b"");
        let headers = [
            ("host", host.as_str()),
            ("x-acs-action", action),
            ("x-acs-version", API_VERSION),
            ("x-acs-date", date.as_str()),
            ("x-acs-signature-nonce", nonce.as_str()),
            ("x-acs-content-sha256", payload.as_str()),
        ];
        let authorization = sign::authorization(
            &self.credentials.access_key_id,
            &self.credentials.access_key_secret,
            &SigningInput {
                method: "POST",
                path: "/",
                canonical_query: &query,
                headers: &headers,
                hashed_payload: &payload,
            },
        );
        let url = format!("{}/?{query}", self.endpoint.trim_end_matches('/'));
        let mut req = self
            .http
            .post(url)
            .timeout(self.retry.attempt_timeout)
            .header("authorization", authorization)
            .header("accept", "application/json");
        for (k, v) in headers.iter().filter(|(k, _)| *k != "host") {
            req = req.header(*k, *v);
        }
        let transport = |e: reqwest::Error| EcsError::Transport {
            action: action.to_string(),
            message: e.to_string(),
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(transport)?;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|e| EcsError::Decode {
                action: action.to_string(),
                message: e.to_string(),
            });
        }
        let env: ErrorEnvelope = serde_json::from_slice(&body).unwrap_or_default();
        Err(EcsError::Api {
            action: action.to_string(),
            code: if env.code.is_empty() {
                format!("HTTP{}", status.as_u16())
            } else {
                env.code
            },
            message: env.message,
            request_id: env.request_id,
            http_status: status.as_u16(),
        })
    }

    /// RunInstances: the IDs of the instances created (or, for a replayed
    /// `ClientToken`, of the instances the first call created).
    pub async fn run_instances(&self, params: &Params) -> Result<Vec<String>, EcsError> {
        let mut p = params.clone();
        p.set("RegionId", &self.region);
        let v = self.call(ActionClass::RunInstances, &p).await?;
        let answer: RunAnswer = serde_json::from_value(v).map_err(|e| EcsError::Decode {
            action: "RunInstances".into(),
            message: e.to_string(),
        })?;
        Ok(answer.instance_id_sets.instance_id_set)
    }

    /// DescribeInstances with the given filters, every page (NextToken paging).
    pub async fn describe_instances(&self, filters: &Params) -> Result<Vec<Instance>, EcsError> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let mut p = filters.clone();
            p.set("RegionId", &self.region);
            p.set("MaxResults", PAGE_SIZE);
            if !token.is_empty() {
                p.set("NextToken", &token);
            }
            let v = self.call(ActionClass::DescribeInstances, &p).await?;
            let page: DescribePage = serde_json::from_value(v).map_err(|e| EcsError::Decode {
                action: "DescribeInstances".into(),
                message: e.to_string(),
            })?;
            out.extend(page.instances.instance);
            if page.next_token.is_empty() || page.next_token == token {
                return Ok(out);
            }
            token = page.next_token;
        }
    }

    /// DescribeInstances by instance IDs (at most 100).
    pub async fn instances_by_id(&self, ids: &[&str]) -> Result<Vec<Instance>, EcsError> {
        let mut p = Params::new();
        p.set(
            "InstanceIds",
            serde_json::Value::from(ids.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        );
        self.describe_instances(&p).await
    }

    /// DeleteInstance with `Force=true` (a running instance is stopped and released).
    pub async fn delete_instance(&self, instance_id: &str) -> Result<(), EcsError> {
        let mut p = Params::new();
        p.set("InstanceId", instance_id).set("Force", "true");
        self.call(ActionClass::DeleteInstance, &p).await.map(|_| ())
    }
}

/// The `host[:port]` of an endpoint URL.
fn host_of(endpoint: &str) -> String {
    let rest = endpoint
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(endpoint);
    rest.split('/').next().unwrap_or(rest).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_flattened_one_based() {
        let mut p = Params::new();
        p.set_tags([
            ("kubernetes.io/cluster/c", "1"),
            ("kubernetes.io/role/node", "1"),
        ])
        .set_item("DataDisk", 1, "Size", 100);
        assert_eq!(p.get("Tag.1.Key"), Some("kubernetes.io/cluster/c"));
        assert_eq!(p.get("Tag.2.Value"), Some("1"));
        assert_eq!(p.get("DataDisk.1.Size"), Some("100"));
    }

    #[test]
    fn the_host_of_an_endpoint_keeps_its_port() {
        assert_eq!(host_of("http://127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(
            host_of("https://ecs.eu-central-1.aliyuncs.com/"),
            "ecs.eu-central-1.aliyuncs.com"
        );
    }
}
