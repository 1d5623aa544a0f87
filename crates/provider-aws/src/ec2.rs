//! The EC2 access layer: one [`Ec2`] per credentials and region, holding the
//! SDK client, the account's token buckets, the DescribeInstances batcher and
//! an AMI cache. Every call goes through [`Ec2::call`], which takes a token of
//! the action's class, logs the AWS request ID, and pauses the class (and
//! retries a bounded number of times) when EC2 throttles.

use crate::config::{AwsDriverConfig, RetrySettings};
use crate::errors::Ec2Error;
use crate::ratelimit::{ActionClass, Limiter};
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::operation::RequestId;
use aws_sdk_ec2::types::{Filter, Instance, InstanceStateName};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn};

/// The instance states that count as "a VM backs this machine".
pub const LIVE_STATES: [&str; 4] = ["pending", "running", "stopping", "stopped"];

/// Whether an instance is pending, running, stopping or stopped.
pub fn is_live(instance: &Instance) -> bool {
    !matches!(
        instance.state().and_then(|s| s.name()),
        Some(InstanceStateName::ShuttingDown) | Some(InstanceStateName::Terminated)
    )
}

/// The value of a tag of an instance.
pub fn tag_value<'a>(instance: &'a Instance, key: &str) -> Option<&'a str> {
    instance
        .tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

/// Whether an instance has a tag with this key.
pub fn has_tag_key(instance: &Instance, key: &str) -> bool {
    instance.tags().iter().any(|t| t.key() == Some(key))
}

fn filter(name: &str, values: impl IntoIterator<Item = impl Into<String>>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(Into::into).collect()))
        .build()
}

/// One DescribeInstances question the batcher can merge with others.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lookup {
    /// The instance with this ID, in any state.
    Id(String),
    /// The live instances with this `Name` tag and both tag keys.
    Name {
        /// Cluster tag key.
        cluster: String,
        /// Role tag key.
        role: String,
        /// The machine name.
        name: String,
    },
}

type Reply = oneshot::Sender<Result<Vec<Instance>, Ec2Error>>;

#[derive(Default)]
struct Pending {
    queries: Vec<(Lookup, Reply)>,
    scheduled: bool,
}

/// The EC2 access of one account (credentials) and region.
pub struct Ec2 {
    client: aws_sdk_ec2::Client,
    limiter: Arc<Limiter>,
    retry: RetrySettings,
    batch_window: Duration,
    max_batch_size: usize,
    image_cache_ttl: Duration,
    pending: Mutex<Pending>,
    images: Mutex<HashMap<String, (Instant, Option<String>)>>,
    /// Held while an AMI is looked up, so that concurrent creates of a
    /// scale-up ask EC2 once and the others read the cache.
    image_lookup: tokio::sync::Mutex<()>,
}

impl Ec2 {
    /// Wraps a client.
    pub fn new(
        client: aws_sdk_ec2::Client,
        limiter: Arc<Limiter>,
        config: &AwsDriverConfig,
    ) -> Self {
        Ec2 {
            client,
            limiter,
            retry: config.retry.clone(),
            batch_window: config.batch_window,
            max_batch_size: config.max_batch_size.max(1),
            image_cache_ttl: config.image_cache_ttl,
            pending: Mutex::new(Pending::default()),
            images: Mutex::new(HashMap::new()),
            image_lookup: tokio::sync::Mutex::new(()),
        }
    }

    /// The SDK client (for calls that need no budget, e.g. test setup).
    pub fn client(&self) -> &aws_sdk_ec2::Client {
        &self.client
    }

    /// Sends one EC2 call: token bucket, request-ID logging, throttling pause
    /// and bounded retry. `send` builds and sends the request (it may run again).
    pub async fn call<T, E, F, Fut>(
        &self,
        action: &'static str,
        class: ActionClass,
        send: F,
    ) -> Result<T, Ec2Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        T: RequestId,
    {
        let mut throttled = 0u32;
        loop {
            let waited = self.limiter.acquire(class).await;
            if waited > Duration::from_millis(100) {
                debug!(
                    action,
                    waited_ms = waited.as_millis() as u64,
                    "waited for the EC2 token bucket"
                );
            }
            match send().await {
                Ok(out) => {
                    self.limiter.succeeded(class).await;
                    debug!(
                        action,
                        aws_request_id = out.request_id().unwrap_or("-"),
                        "EC2 call succeeded"
                    );
                    return Ok(out);
                }
                Err(e) => {
                    let err = Ec2Error::from_sdk(action, e);
                    if err.is_throttling() {
                        let pause = self
                            .limiter
                            .penalize(
                                class,
                                self.retry.throttle_pause,
                                self.retry.throttle_max_pause,
                            )
                            .await;
                        if throttled < self.retry.throttle_retries {
                            throttled += 1;
                            warn!(
                                action,
                                aws_request_id = err.request_id().unwrap_or("-"),
                                pause_ms = pause.as_millis() as u64,
                                attempt = throttled,
                                "EC2 throttled the call after the SDK's retries; pausing the action class"
                            );
                            continue;
                        }
                    }
                    debug!(
                        action,
                        aws_request_id = err.request_id().unwrap_or("-"),
                        error_code = err.code().unwrap_or("-"),
                        "EC2 call failed"
                    );
                    return Err(err);
                }
            }
        }
    }

    /// The root device name of an AMI (`None`: no such image). Cached.
    pub async fn root_device_name(&self, ami: &str) -> Result<Option<String>, Ec2Error> {
        if let Some(name) = self.cached_image(ami) {
            return Ok(name);
        }
        let _one_lookup = self.image_lookup.lock().await;
        if let Some(name) = self.cached_image(ami) {
            return Ok(name);
        }
        let out = self
            .call("DescribeImages", ActionClass::Describe, || {
                self.client.describe_images().image_ids(ami).send()
            })
            .await;
        let name = match out {
            Ok(out) => out
                .images()
                .iter()
                .find(|i| i.image_id() == Some(ami))
                .or_else(|| out.images().first())
                .map(|i| i.root_device_name().unwrap_or_default().to_string()),
            Err(e) if e.code() == Some("InvalidAMIID.NotFound") => None,
            Err(e) => return Err(e),
        };
        if let Ok(mut cache) = self.images.lock() {
            cache.insert(ami.to_string(), (Instant::now(), name.clone()));
        }
        Ok(name)
    }

    /// A fresh cache entry of an AMI (`Some(None)`: known not to exist).
    fn cached_image(&self, ami: &str) -> Option<Option<String>> {
        let cache = self.images.lock().ok()?;
        let (at, name) = cache.get(ami)?;
        (at.elapsed() < self.image_cache_ttl).then(|| name.clone())
    }

    /// One DescribeInstances look-up, merged with the other look-ups that
    /// arrive within the batch window.
    pub async fn lookup(self: &Arc<Self>, query: Lookup) -> Result<Vec<Instance>, Ec2Error> {
        let (tx, rx) = oneshot::channel();
        let spawn = {
            let mut p = self
                .pending
                .lock()
                .map_err(|_| unexpected("DescribeInstances", "batcher lock poisoned"))?;
            p.queries.push((query, tx));
            !std::mem::replace(&mut p.scheduled, true)
        };
        if spawn {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                tokio::time::sleep(me.batch_window).await;
                me.flush().await;
            });
        }
        rx.await
            .map_err(|_| unexpected("DescribeInstances", "the batched look-up was dropped"))?
    }

    /// The instance with this ID (any state), if EC2 knows it.
    pub async fn instance_by_id(self: &Arc<Self>, id: &str) -> Result<Option<Instance>, Ec2Error> {
        Ok(self
            .lookup(Lookup::Id(id.to_string()))
            .await?
            .into_iter()
            .next())
    }

    /// The live instances of a machine, by `Name` tag and cluster/role tag keys.
    pub async fn instances_by_name(
        self: &Arc<Self>,
        cluster: &str,
        role: &str,
        name: &str,
    ) -> Result<Vec<Instance>, Ec2Error> {
        self.lookup(Lookup::Name {
            cluster: cluster.to_string(),
            role: role.to_string(),
            name: name.to_string(),
        })
        .await
    }

    async fn flush(&self) {
        let queries = match self.pending.lock() {
            Ok(mut p) => {
                p.scheduled = false;
                std::mem::take(&mut p.queries)
            }
            Err(_) => return,
        };
        let mut ids: BTreeSet<String> = BTreeSet::new();
        let mut names: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for (q, _) in &queries {
            match q {
                Lookup::Id(id) => {
                    ids.insert(id.clone());
                }
                Lookup::Name {
                    cluster,
                    role,
                    name,
                } => {
                    names
                        .entry((cluster.clone(), role.clone()))
                        .or_default()
                        .insert(name.clone());
                }
            }
        }
        debug!(
            queries = queries.len(),
            ids = ids.len(),
            names = names.values().map(BTreeSet::len).sum::<usize>(),
            "batched DescribeInstances"
        );
        // Run every chunk; remember per ID / name which result answers it.
        let mut by_id: HashMap<String, Result<Vec<Instance>, Ec2Error>> = HashMap::new();
        let ids: Vec<String> = ids.into_iter().collect();
        for chunk in ids.chunks(self.max_batch_size) {
            let res = self
                .describe_all(vec![filter("instance-id", chunk.iter().cloned())])
                .await;
            for id in chunk {
                let r = res.as_ref().map(|all| {
                    all.iter()
                        .filter(|i| i.instance_id() == Some(id.as_str()))
                        .cloned()
                        .collect()
                });
                by_id.insert(id.clone(), r.map_err(Clone::clone));
            }
        }
        let mut by_name: HashMap<(String, String, String), Result<Vec<Instance>, Ec2Error>> =
            HashMap::new();
        for ((cluster, role), set) in names {
            let list: Vec<String> = set.into_iter().collect();
            for chunk in list.chunks(self.max_batch_size) {
                // One `tag-key` filter only: several filters of the same name
                // are not ANDed by every EC2 implementation; the role key is
                // checked here instead.
                let res = self
                    .describe_all(vec![
                        filter("tag:Name", chunk.iter().cloned()),
                        filter("tag-key", [cluster.clone()]),
                        filter("instance-state-name", LIVE_STATES),
                    ])
                    .await;
                for name in chunk {
                    let r = res.as_ref().map(|all| {
                        all.iter()
                            .filter(|i| {
                                tag_value(i, "Name") == Some(name.as_str())
                                    && has_tag_key(i, &role)
                                    && is_live(i)
                            })
                            .cloned()
                            .collect()
                    });
                    by_name.insert(
                        (cluster.clone(), role.clone(), name.clone()),
                        r.map_err(Clone::clone),
                    );
                }
            }
        }
        for (q, reply) in queries {
            let answer = match q {
                Lookup::Id(id) => by_id.get(&id).cloned(),
                Lookup::Name {
                    cluster,
                    role,
                    name,
                } => by_name.get(&(cluster, role, name)).cloned(),
            }
            .unwrap_or_else(|| Err(unexpected("DescribeInstances", "look-up lost in the batch")));
            let _ = reply.send(answer);
        }
    }

    /// Every instance matching the filters (all pages).
    pub async fn describe_all(&self, filters: Vec<Filter>) -> Result<Vec<Instance>, Ec2Error> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        let mut seen_tokens = BTreeSet::new();
        loop {
            let page = self
                .call("DescribeInstances", ActionClass::Describe, || {
                    self.client
                        .describe_instances()
                        .set_filters(Some(filters.clone()))
                        .max_results(1000)
                        .set_next_token(token.clone())
                        .send()
                })
                .await?;
            for r in page.reservations() {
                out.extend(r.instances().iter().cloned());
            }
            match page.next_token() {
                Some(t) if !t.is_empty() && seen_tokens.insert(t.to_string()) => {
                    token = Some(t.to_string())
                }
                _ => break,
            }
        }
        Ok(out)
    }

    /// The live instances carrying both tag keys (the cluster key filtered by
    /// EC2, the role key here).
    pub async fn instances_by_tags(
        &self,
        cluster: &str,
        role: &str,
    ) -> Result<Vec<Instance>, Ec2Error> {
        let all = self
            .describe_all(vec![
                filter("tag-key", [cluster]),
                filter("instance-state-name", LIVE_STATES),
            ])
            .await?;
        Ok(all
            .into_iter()
            .filter(|i| has_tag_key(i, role) && has_tag_key(i, cluster) && is_live(i))
            .collect())
    }

    /// The live instances launched with this client token.
    pub async fn instances_by_client_token(&self, token: &str) -> Result<Vec<Instance>, Ec2Error> {
        self.describe_all(vec![
            filter("client-token", [token]),
            filter("instance-state-name", LIVE_STATES),
        ])
        .await
    }

    /// TerminateInstances for one instance. An unknown ID is success.
    pub async fn terminate(&self, id: &str) -> Result<(), Ec2Error> {
        self.terminate_if_known(id).await.map(|_| ())
    }

    /// TerminateInstances for one instance: `Ok(false)` when EC2 does not
    /// know the ID (already gone, or not visible to these credentials).
    pub async fn terminate_if_known(&self, id: &str) -> Result<bool, Ec2Error> {
        match self
            .call(
                "TerminateInstances",
                ActionClass::TerminateInstances,
                || self.client.terminate_instances().instance_ids(id).send(),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_instance_not_found() => {
                debug!(instance_id = id, "instance unknown to EC2");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether these credentials see every one of these subnets: `Ok(false)`
    /// when EC2 answers that one does not exist (another account or region).
    pub async fn sees_subnets(&self, ids: &[String]) -> Result<bool, Ec2Error> {
        let out = self
            .call("DescribeSubnets", ActionClass::Describe, || {
                self.client
                    .describe_subnets()
                    .set_subnet_ids(Some(ids.to_vec()))
                    .send()
            })
            .await;
        match out {
            Ok(out) => Ok(ids.iter().all(|id| {
                out.subnets()
                    .iter()
                    .any(|s| s.subnet_id() == Some(id.as_str()))
            })),
            Err(e) if e.code() == Some("InvalidSubnetID.NotFound") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Turns the source/destination check of an interface off.
    pub async fn disable_source_dest_check(&self, eni: &str) -> Result<(), Ec2Error> {
        self.call(
            "ModifyNetworkInterfaceAttribute",
            ActionClass::Mutating,
            || {
                self.client
                    .modify_network_interface_attribute()
                    .network_interface_id(eni)
                    .source_dest_check(
                        aws_sdk_ec2::types::AttributeBooleanValue::builder()
                            .value(false)
                            .build(),
                    )
                    .send()
            },
        )
        .await
        .map(|_| ())
    }

    /// AssignIpv6Addresses with an address count or a prefix count; returns
    /// the addresses EC2 reports as assigned.
    pub async fn assign_ipv6(
        &self,
        eni: &str,
        addresses: Option<i32>,
        prefixes: Option<i32>,
    ) -> Result<Vec<String>, Ec2Error> {
        let out = self
            .call(
                "AssignIpv6Addresses",
                ActionClass::AssignIpv6Addresses,
                || {
                    self.client
                        .assign_ipv6_addresses()
                        .network_interface_id(eni)
                        .set_ipv6_address_count(addresses)
                        .set_ipv6_prefix_count(prefixes)
                        .send()
                },
            )
            .await?;
        Ok(out.assigned_ipv6_addresses().to_vec())
    }
}

fn unexpected(action: &'static str, message: &str) -> Ec2Error {
    Ec2Error::Unexpected {
        action,
        message: message.to_string(),
    }
}
