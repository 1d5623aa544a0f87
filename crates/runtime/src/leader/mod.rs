//! Leader election through a `coordination.k8s.io` Lease, like client-go's
//! leases lock: two replicas never reconcile at once (design:
//! docs/design/leader-election.md).
//!
//! [`lead`] waits until this replica holds the Lease, then runs the work while
//! a task of its own renews it (a busy work task never delays a renewal).
//! Every attempt is bounded by a timeout; when no renewal succeeded for the
//! renew deadline the work is dropped (cancelling its reconciles and cloud
//! calls) before any candidate may take over, and an error is returned. The
//! same deadline is kept in a [`TenureGate`] that every mutating cloud call and
//! drain request checks first. On shutdown the work gets a grace period, then
//! the Lease is released so a standby takes over at once. The decisions are in
//! [`election`] and [`gate`].

pub mod election;
pub(crate) mod gate;

pub use gate::{TenureEnded, TenureGate};

use election::{Decision, Durations, InvalidDurations, Observer, Record, Tenure};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Leader-election settings (the reference's flag defaults: 15s / 10s / 2s).
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease (`machine-controller` or `machine-controller-manager`).
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// `--leader-elect-lease-duration`.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`.
    pub retry_period: Duration,
    /// How long the work may take to stop after shutdown before it is dropped.
    pub shutdown_grace: Duration,
    /// Whether this replica leads now (for `/readyz`).
    pub leading: Arc<AtomicBool>,
    /// The tenure deadline the work's cloud calls and drain requests check:
    /// closed when [`lead`] starts, open from the first write of the Lease
    /// until the renew deadline after the last successful renewal, closed
    /// again when leadership ends.
    pub tenure: TenureGate,
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
            shutdown_grace: Duration::from_secs(10),
            leading: Arc::new(AtomicBool::new(false)),
            tenure: TenureGate::closed(),
        }
    }

    /// The three election durations.
    pub(crate) fn durations(&self) -> Durations {
        Durations {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }
}

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The lease could not be renewed within the renew deadline, or another replica holds it.
    #[error("lost the leader lease {0}")]
    Lost(String),
    /// The durations would let two leaders act at once.
    #[error("invalid leader election settings: {0}")]
    Invalid(#[from] InvalidDurations),
    /// No identity.
    #[error("invalid leader election settings: the identity is empty")]
    NoIdentity,
}

/// What one attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease (created, renewed or taken over).
    Ours,
    /// Another replica holds it and may still be leading.
    Held,
    /// Someone wrote the Lease between our read and our write (409): try again.
    Conflict,
}

/// Why one attempt failed.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

/// The Lease, this replica's view of it, and the last Lease object it wrote.
struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    observer: Observer,
    /// The Lease as last written by us (its resourceVersion guards the release).
    ours: Option<Lease>,
}

impl Elector {
    fn new(client: Client, cfg: LeaderConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observer: Observer::new(),
            ours: None,
        }
    }

    /// One bounded acquire-or-renew attempt.
    async fn attempt(&mut self, budget: Duration) -> Result<Attempt, AttemptError> {
        match tokio::time::timeout(budget, self.try_acquire_or_renew()).await {
            Ok(r) => r.map_err(AttemptError::from),
            Err(_) => Err(AttemptError::Timeout(budget)),
        }
    }

    /// client-go's `tryAcquireOrRenew`: read, decide by the observed record, write.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let cfg = &self.cfg;
        let secs = cfg.durations().lease_seconds();
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = self.api.get_opt(&cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(cfg.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => Ok(self.wrote(created)),
                Err(e) if crate::is_conflict(&e) => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };
        self.observer.observe(Record::of(&lease), Instant::now());
        let decision = self
            .observer
            .decide(&cfg.identity, cfg.lease_duration, Instant::now());
        let spec = lease.spec.clone().unwrap_or_default();
        let mut new = spec.clone();
        match decision {
            Decision::Held { holder, remaining } => {
                debug!(lease = %cfg.name, %holder, ?remaining, "leader election: the lease is held");
                return Ok(Attempt::Held);
            }
            Decision::TakeOver => {
                new.acquire_time = Some(now.clone());
                new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            }
            Decision::Renew => {}
        }
        new.holder_identity = Some(cfg.identity.clone());
        new.lease_duration_seconds = Some(secs);
        new.renew_time = Some(now);
        lease.spec = Some(new);
        // replace carries the resourceVersion: a concurrent writer gets 409.
        match self
            .api
            .replace(&cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => Ok(self.wrote(written)),
            Err(e) if crate::is_conflict(&e) => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    fn wrote(&mut self, lease: Lease) -> Attempt {
        self.observer.observe(Record::of(&lease), Instant::now());
        self.ours = Some(lease);
        Attempt::Ours
    }

    /// client-go's `ReleaseOnCancel`: an empty holder, a one-second duration and
    /// a fresh renewTime, written over the Lease as we last wrote it (a 409
    /// means someone else wrote it since: nothing to release).
    async fn release(&mut self) {
        let Some(mut lease) = self.ours.take() else {
            return;
        };
        let now = MicroTime(Timestamp::now());
        let spec = lease.spec.clone().unwrap_or_default();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: spec.lease_transitions,
            ..spec
        });
        let name = self.cfg.name.clone();
        let pp = PostParams::default();
        let write = self.api.replace(&name, &pp, &lease);
        match tokio::time::timeout(self.cfg.renew_deadline, write).await {
            Ok(Ok(_)) => {
                info!(lease = %name, identity = %self.cfg.identity, "released the leader lease")
            }
            Ok(Err(e)) => warn!(lease = %name, error = %e, "could not release the leader lease"),
            Err(_) => warn!(lease = %name, "releasing the leader lease timed out"),
        }
    }

    /// Tries until this replica holds the Lease, with client-go's jitter.
    async fn acquire(&mut self) -> Tenure {
        loop {
            let started = Instant::now();
            match self.attempt(self.cfg.renew_deadline).await {
                Ok(Attempt::Ours) => return Tenure::new(started, self.cfg.renew_deadline),
                Ok(Attempt::Held | Attempt::Conflict) => {}
                Err(e) => {
                    warn!(lease = %self.cfg.name, error = %e, "leader election: could not read or write the lease")
                }
            }
            let jitter = rand::random::<f64>() * election::JITTER_FACTOR;
            tokio::time::sleep(self.cfg.retry_period.mul_f64(1.0 + jitter)).await;
        }
    }

    /// Renews every retry period; returns when leadership is over: the renew
    /// deadline passed since the last successful renewal, or another replica
    /// holds the Lease.
    async fn keep(&mut self, mut tenure: Tenure) {
        loop {
            let next = (Instant::now() + self.cfg.retry_period).min(tenure.deadline());
            tokio::time::sleep_until(next.into()).await;
            let started = Instant::now();
            let Some(budget) = tenure.budget(started) else {
                warn!(lease = %self.cfg.name, deadline = ?self.cfg.renew_deadline, "leader election: no successful renewal within the renew deadline");
                return;
            };
            match self.attempt(budget).await {
                Ok(Attempt::Ours) => {
                    tenure.renewed(started);
                    self.cfg.tenure.extend_to(tenure.deadline());
                }
                // Retried until the renew deadline, as client-go does.
                Ok(Attempt::Conflict) => {
                    debug!(lease = %self.cfg.name, "leader election: the lease changed under the renewal; retrying")
                }
                Ok(Attempt::Held) => {
                    let holder = self.observer.record().map(|r| r.holder.clone());
                    warn!(lease = %self.cfg.name, ?holder, "leader election: another replica holds the lease");
                    self.ours = None;
                    return;
                }
                Err(e) => {
                    warn!(lease = %self.cfg.name, error = %e, "leader election: renewal failed")
                }
            }
        }
    }
}

/// Waits for leadership, then runs `work` while renewing the Lease, without
/// a shutdown signal. Returns `work`'s output, or an error when leadership is
/// lost (the work is dropped first).
pub async fn run_as_leader<F, T>(
    client: Client,
    cfg: LeaderConfig,
    work: F,
) -> Result<T, LeaderError>
where
    F: Future<Output = T>,
{
    match lead(client, cfg.clone(), work, std::future::pending::<()>()).await? {
        Some(out) => Ok(out),
        None => Err(LeaderError::Lost(cfg.name)),
    }
}

/// Waits for leadership, then runs `work` while renewing the Lease until the
/// work ends, leadership is lost or `shutdown` completes.
///
/// - `Ok(Some(out))`: the work ended (on its own, or within the shutdown
///   grace after `shutdown`); the Lease is released.
/// - `Ok(None)`: `shutdown` came before leadership, or the work did not end
///   within the grace and was dropped; a held Lease is released.
/// - `Err(Lost)`: no renewal within the renew deadline, or another replica
///   holds the Lease; the work was dropped before the function returned,
///   which is before any candidate may take over.
/// - `Err(Invalid)`: the durations are inconsistent; nothing was started.
///
/// The caller tells its work to stop on `shutdown` (the work ends on its own).
pub async fn lead<F, T, S>(
    client: Client,
    cfg: LeaderConfig,
    work: F,
    shutdown: S,
) -> Result<Option<T>, LeaderError>
where
    F: Future<Output = T>,
    S: Future<Output = ()>,
{
    cfg.durations().validate()?;
    if cfg.identity.is_empty() {
        return Err(LeaderError::NoIdentity);
    }
    let leading = cfg.leading.clone();
    let gate = cfg.tenure.clone();
    gate.close();
    let mut elector = Elector::new(client, cfg);
    tokio::pin!(shutdown);
    let tenure = tokio::select! {
        t = elector.acquire() => t,
        _ = &mut shutdown => return Ok(None),
    };
    let (name, identity) = (elector.cfg.name.clone(), elector.cfg.identity.clone());
    gate.extend_to(tenure.deadline());
    info!(%identity, lease = %name, "acquired leadership");
    leading.store(true, Ordering::SeqCst);
    let grace = elector.cfg.shutdown_grace;
    // The renewal runs on a task of its own: a work task busy with
    // reconciles (or blocked) never delays it. Dropping `stop` (this
    // function ends, or is dropped) releases the Lease.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut renewal = tokio::spawn(renew(elector, tenure, stopped));
    // The work lives only inside this block: when it ends, it is dropped.
    // `biased`: the renewal's end is seen before the work is polled again.
    let outcome = {
        tokio::pin!(work);
        let first = tokio::select! {
            biased;
            _ = &mut renewal => Some(Err(LeaderError::Lost(name.clone()))),
            _ = &mut shutdown => None,
            out = &mut work => Some(Ok(Some(out))),
        };
        match first {
            Some(r) => r,
            None => {
                info!(lease = %name, ?grace, "shutting down: letting the work finish");
                tokio::select! {
                    biased;
                    _ = &mut renewal => Err(LeaderError::Lost(name.clone())),
                    out = &mut work => Ok(Some(out)),
                    _ = tokio::time::sleep(grace) => {
                        warn!(lease = %name, "the work did not stop within the grace period: dropping it");
                        Ok(None)
                    }
                }
            }
        }
    };
    leading.store(false, Ordering::SeqCst);
    gate.close();
    match &outcome {
        Err(_) => warn!(%identity, lease = %name, "lost leadership; the controllers are stopped"),
        Ok(_) => {
            // The renewal task has not ended (it would be `Err`): it stops
            // renewing and releases the Lease.
            let _ = stop.send(());
            let _ = renewal.await;
        }
    }
    outcome
}

/// The renewal task: renews until leadership is over (returns `true`: lost)
/// or `stop` fires or is dropped (then the Lease is released; `false`). The
/// tenure gate is closed before either.
async fn renew(
    mut elector: Elector,
    tenure: Tenure,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> bool {
    let lost = {
        let keep = elector.keep(tenure);
        tokio::pin!(keep);
        tokio::select! {
            biased;
            _ = &mut keep => true,
            _ = stop => false,
        }
    };
    elector.cfg.tenure.close();
    if !lost {
        elector.release().await;
    }
    lost
}
