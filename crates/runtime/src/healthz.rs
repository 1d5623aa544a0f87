//! What `/healthz` and `/readyz` answer (design: docs/design/process-contract.md,
//! "Probes").
//!
//! - `/healthz` (Gardener's liveness probe): fails when no request to the API
//!   server succeeded for the grace period ([`probe_api`] asks `/version`
//!   every probe period, on a task and a client of its own), when a half's
//!   work, while it runs, has not been polled for the grace period (a
//!   reconcile blocking its thread, a deadlock: [`Half::heartbeat`] shares the
//!   work's task), or at once when a half is neither leading nor campaigning
//!   (its leader election ended: [`Half::election_ended`]).
//! - `/readyz`: every leading half (or one without leader election) has
//!   caches that hold a full list, and every standby reached the API server
//!   within the grace period (it can take over). A standby is ready: a
//!   rolling update of two replicas waits for the new pod to be ready while
//!   the old one still leads.
//!
//! The decisions ([`judge_liveness`], [`judge_readiness`]) take the clock as
//! an argument and are unit-tested.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// Periods of the probes.
#[derive(Debug, Clone, Copy)]
pub struct HealthConfig {
    /// How often the API server is asked for `/version` (and how long one try may take).
    pub probe_period: Duration,
    /// How long without a successful API request, or without a heartbeat of a
    /// running half, before `/healthz` fails.
    pub grace: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            probe_period: Duration::from_secs(10),
            grace: Duration::from_secs(60),
        }
    }
}

/// One half's state: leadership, cache sync, heartbeat.
pub struct Half {
    name: String,
    leading: Arc<AtomicBool>,
    synced: Vec<Arc<AtomicBool>>,
    /// Last heartbeat of the running work; `None` while it does not run.
    beat: Mutex<Option<Instant>>,
    /// The half's leader election (or, without it, its work) has ended: it
    /// neither leads nor campaigns.
    ended: AtomicBool,
}

impl Half {
    /// A half named `name` that leads while `leading` is set and is synced
    /// when all `synced` flags are.
    pub fn new(name: &str, leading: Arc<AtomicBool>, synced: Vec<Arc<AtomicBool>>) -> Arc<Half> {
        Arc::new(Half {
            name: name.into(),
            leading,
            synced,
            beat: Mutex::new(None),
            ended: AtomicBool::new(false),
        })
    }

    /// The half's leader election (or its work, without leader election)
    /// has ended: from now on it neither leads nor campaigns, and `/healthz`
    /// fails.
    pub fn election_ended(&self) {
        self.ended.store(true, Ordering::SeqCst);
    }

    fn set_beat(&self, at: Option<Instant>) {
        if let Ok(mut b) = self.beat.lock() {
            *b = at;
        }
    }

    /// Beats every `period` while polled; join it with the half's work so it
    /// runs (and stops) with it. Until dropped: the half counts as running.
    pub async fn heartbeat(self: Arc<Self>, period: Duration) {
        struct Stopped(Arc<Half>);
        impl Drop for Stopped {
            fn drop(&mut self) {
                self.0.set_beat(None);
            }
        }
        let guard = Stopped(self);
        loop {
            guard.0.set_beat(Some(Instant::now()));
            tokio::time::sleep(period).await;
        }
    }

    fn view(&self) -> HalfView {
        HalfView {
            name: self.name.clone(),
            leading: self.leading.load(Ordering::SeqCst),
            synced: self.synced.iter().all(|f| f.load(Ordering::Relaxed)),
            beat: self.beat.lock().ok().and_then(|b| *b),
            ended: self.ended.load(Ordering::SeqCst),
        }
    }
}

/// A half as the decisions see it.
#[derive(Debug, Clone)]
pub(crate) struct HalfView {
    /// Its name (the Lease's).
    pub(crate) name: String,
    /// Whether it leads (or runs without leader election).
    pub(crate) leading: bool,
    /// Whether its caches hold a full list.
    pub(crate) synced: bool,
    /// The last heartbeat of its running work (`None`: not running).
    pub(crate) beat: Option<Instant>,
    /// Neither leading nor campaigning: its leader election ended.
    pub(crate) ended: bool,
}

/// The process's health.
pub struct Health {
    cfg: HealthConfig,
    started: Instant,
    api_ok: Mutex<Option<Instant>>,
    halves: Mutex<Vec<Arc<Half>>>,
    stopping: AtomicBool,
}

impl Health {
    /// A process that started now.
    pub fn new(cfg: HealthConfig) -> Arc<Health> {
        Arc::new(Health {
            cfg,
            started: Instant::now(),
            api_ok: Mutex::new(None),
            halves: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
        })
    }

    /// Adds a half.
    pub fn add(&self, half: Arc<Half>) {
        if let Ok(mut h) = self.halves.lock() {
            h.push(half);
        }
    }

    /// Records a successful request to the API server.
    pub(crate) fn api_ok(&self) {
        if let Ok(mut t) = self.api_ok.lock() {
            *t = Some(Instant::now());
        }
    }

    /// The process is shutting down: `/healthz` and `/readyz` fail from now on.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    fn views(&self) -> Vec<HalfView> {
        self.halves
            .lock()
            .map(|h| h.iter().map(|h| h.view()).collect())
            .unwrap_or_default()
    }

    /// `/healthz`: `Err(reason)` when unhealthy.
    pub fn liveness(&self) -> Result<(), String> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err("shutting down".into());
        }
        let api_ok = self.api_ok.lock().ok().and_then(|t| *t);
        judge_liveness(
            Instant::now(),
            self.started,
            api_ok,
            self.cfg.grace,
            &self.views(),
        )
    }

    /// `/readyz`: `Err(reason)` when not ready.
    pub fn readiness(&self) -> Result<(), String> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err("shutting down".into());
        }
        let api_ok = self.api_ok.lock().ok().and_then(|t| *t);
        judge_readiness(Instant::now(), api_ok, self.cfg.grace, &self.views())
    }
}

/// Liveness: no half's leader election has ended, an API request succeeded
/// within `grace` (or the process is younger than `grace`), and every running
/// half beat within `grace`.
pub(crate) fn judge_liveness(
    now: Instant,
    started: Instant,
    api_ok: Option<Instant>,
    grace: Duration,
    halves: &[HalfView],
) -> Result<(), String> {
    if let Some(h) = halves.iter().find(|h| h.ended) {
        return Err(format!(
            "{}: neither leading nor campaigning (its leader election ended)",
            h.name
        ));
    }
    let since_api = now.saturating_duration_since(api_ok.unwrap_or(started));
    if since_api > grace {
        return Err(match api_ok {
            Some(_) => format!("no successful API server request for {since_api:?}"),
            None => format!("the API server has not answered since start ({since_api:?} ago)"),
        });
    }
    for h in halves {
        if let Some(beat) = h.beat {
            let since = now.saturating_duration_since(beat);
            if since > grace {
                return Err(format!(
                    "{}: the controllers have not been polled for {since:?}",
                    h.name
                ));
            }
        }
    }
    Ok(())
}

/// Readiness: a leading half's caches are synced; a standby half reached
/// the API server within `grace` (so it can take over).
pub(crate) fn judge_readiness(
    now: Instant,
    api_ok: Option<Instant>,
    grace: Duration,
    halves: &[HalfView],
) -> Result<(), String> {
    let api_recent = api_ok.is_some_and(|t| now.saturating_duration_since(t) <= grace);
    let mut reasons = Vec::new();
    for h in halves {
        if h.leading && !h.synced {
            reasons.push(format!("{}: leading, caches not synced", h.name));
        } else if !h.leading && !api_recent {
            reasons.push(format!(
                "{}: standby without a recent API server answer",
                h.name
            ));
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons.join("; "))
    }
}

/// Asks the API server for `/version` every probe period (each try bounded
/// by the period) and records the successes in `health`. Runs until dropped.
pub async fn probe_api(client: kube::Client, health: Arc<Health>) {
    let period = health.cfg.probe_period;
    loop {
        match tokio::time::timeout(period, client.apiserver_version()).await {
            Ok(Ok(_)) => health.api_ok(),
            Ok(Err(e)) => warn!(error = %e, "health: the API server did not answer /version"),
            Err(_) => warn!(?period, "health: /version timed out"),
        }
        debug!("health: probed the API server");
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn half(leading: bool, synced: bool, beat: Option<Instant>) -> HalfView {
        HalfView {
            name: "machine-controller".into(),
            leading,
            synced,
            beat,
            ended: false,
        }
    }

    #[test]
    fn healthy_while_the_api_server_answered_within_the_grace() {
        let t0 = Instant::now();
        assert_eq!(
            judge_liveness(t0 + secs(50), t0, None, secs(60), &[]),
            Ok(())
        );
        assert_eq!(
            judge_liveness(t0 + secs(100), t0, Some(t0 + secs(45)), secs(60), &[]),
            Ok(())
        );
    }

    #[test]
    fn unhealthy_when_the_api_server_has_not_answered_for_the_grace() {
        let t0 = Instant::now();
        let err = judge_liveness(t0 + secs(61), t0, None, secs(60), &[]).unwrap_err();
        assert!(err.contains("has not answered since start"), "{err}");
        let err =
            judge_liveness(t0 + secs(200), t0, Some(t0 + secs(100)), secs(60), &[]).unwrap_err();
        assert!(err.contains("no successful API server request"), "{err}");
    }

    #[test]
    fn unhealthy_when_a_running_half_is_no_longer_polled() {
        let t0 = Instant::now();
        let api = Some(t0 + secs(100));
        let stuck = half(true, true, Some(t0 + secs(30)));
        let err = judge_liveness(t0 + secs(100), t0, api, secs(60), &[stuck]).unwrap_err();
        assert!(err.contains("not been polled"), "{err}");
        // A standby runs no work: nothing to be stuck.
        let standby = half(false, false, None);
        assert_eq!(
            judge_liveness(t0 + secs(100), t0, api, secs(60), &[standby]),
            Ok(())
        );
    }

    #[test]
    fn a_leader_is_ready_once_its_caches_are_synced() {
        let t0 = Instant::now();
        assert!(judge_readiness(t0, None, secs(60), &[half(true, true, None)]).is_ok());
        let err = judge_readiness(t0, Some(t0), secs(60), &[half(true, false, None)]).unwrap_err();
        assert!(err.contains("not synced"), "{err}");
    }

    #[test]
    fn a_standby_is_ready_while_it_reaches_the_api_server() {
        let t0 = Instant::now();
        let standby = [half(false, false, None)];
        let err = judge_readiness(t0, None, secs(60), &standby).unwrap_err();
        assert!(
            err.contains("standby without a recent API server answer"),
            "{err}"
        );
        assert!(judge_readiness(t0 + secs(30), Some(t0), secs(60), &standby).is_ok());
        assert!(judge_readiness(t0 + secs(61), Some(t0), secs(60), &standby).is_err());
    }

    #[test]
    fn unhealthy_at_once_when_a_halfs_leader_election_ended() {
        let t0 = Instant::now();
        let api = Some(t0 + secs(1));
        let ended = HalfView {
            ended: true,
            ..half(false, true, None)
        };
        let err = judge_liveness(
            t0 + secs(2),
            t0,
            api,
            secs(60),
            &[half(true, true, Some(t0)), ended],
        )
        .unwrap_err();
        assert!(err.contains("neither leading nor campaigning"), "{err}");
    }

    #[test]
    fn a_half_whose_election_ended_turns_healthz_unhealthy() {
        let health = Health::new(HealthConfig::default());
        let h = Half::new(
            "machine-controller",
            Arc::new(AtomicBool::new(false)),
            vec![],
        );
        health.add(h.clone());
        health.api_ok();
        assert_eq!(
            health.liveness(),
            Ok(()),
            "a campaigning standby is healthy"
        );
        h.election_ended();
        let err = health.liveness().unwrap_err();
        assert!(
            err.contains("machine-controller: neither leading nor campaigning"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_heartbeat_marks_its_half_running_until_dropped() {
        let h = Half::new(
            "machine-controller",
            Arc::new(AtomicBool::new(true)),
            vec![],
        );
        let beat = tokio::spawn(h.clone().heartbeat(secs(1)));
        tokio::task::yield_now().await;
        for _ in 0..100 {
            if h.view().beat.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(h.view().beat.is_some());
        beat.abort();
        let _ = beat.await;
        assert!(h.view().beat.is_none(), "a stopped half is not running");
    }
}
