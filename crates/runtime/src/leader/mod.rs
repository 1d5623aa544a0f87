//! Leader election through a `coordination.k8s.io` Lease, like client-go's
//! leases lock: two replicas never reconcile at once.
//!
//! [`run_as_leader`] waits until this replica holds the Lease, then runs the
//! controllers while renewing it; when renewal fails for longer than the renew
//! deadline it stops them (and returns an error, so the process can exit).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use std::future::Future;
use std::time::Duration;
use tracing::{info, warn};

/// Leader-election settings (the reference's flag defaults: 15s / 10s / 2s).
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease (`machine-controller` in the reference).
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// `--leader-elect-lease-duration`.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Defaults for a namespace and identity.
    pub fn new(namespace: &str, identity: &str) -> Self {
        LeaderConfig {
            namespace: namespace.into(),
            name: "machine-controller".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The lease could not be renewed within the renew deadline.
    #[error("lost the leader lease {0}")]
    Lost(String),
}

/// Tries once to acquire or renew the Lease. Returns whether we hold it.
pub async fn try_acquire(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let secs = i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(15);
    match api.get_opt(&cfg.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(cfg.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(secs));
            let expired = spec
                .renew_time
                .as_ref()
                .is_none_or(|t| t.0.as_second() + duration < now.as_second());
            if holder != cfg.identity && !holder.is_empty() && !expired {
                return Ok(false);
            }
            let mut new = spec.clone();
            if holder != cfg.identity {
                new.acquire_time = Some(MicroTime(now));
                new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            new.holder_identity = Some(cfg.identity.clone());
            new.lease_duration_seconds = Some(secs);
            new.renew_time = Some(MicroTime(now));
            lease.spec = Some(new);
            // replace carries the resourceVersion: a concurrent acquirer gets 409.
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Waits for leadership, then runs `work` while renewing the Lease. Returns
/// `work`'s output, or an error when leadership is lost.
pub async fn run_as_leader<F, T>(
    client: Client,
    cfg: LeaderConfig,
    work: F,
) -> Result<T, LeaderError>
where
    F: Future<Output = T>,
{
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    loop {
        match try_acquire(&api, &cfg).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                warn!(error = %e, lease = %cfg.name, "leader election: could not read or write the lease")
            }
        }
        tokio::time::sleep(cfg.retry_period).await;
    }
    info!(identity = %cfg.identity, lease = %cfg.name, "acquired leadership");
    let renew = async {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(cfg.retry_period).await;
            match try_acquire(&api, &cfg).await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => return LeaderError::Lost(cfg.name.clone()),
                Err(e) => warn!(error = %e, "leader election: renewal failed"),
            }
            if last_ok.elapsed() > cfg.renew_deadline {
                return LeaderError::Lost(cfg.name.clone());
            }
        }
    };
    tokio::select! {
        out = work => Ok(out),
        lost = renew => {
            warn!(identity = %cfg.identity, "lost leadership; stopping the controllers");
            Err(lost)
        }
    }
}
