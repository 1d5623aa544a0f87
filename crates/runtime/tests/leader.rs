//! Leader election against the real control plane: a renewed lease is never
//! taken, a released one at once, a holder that cannot renew stops its work
//! (and its tenure gate refuses) before anyone may take over, the renewal
//! runs while the work blocks its thread, and bad durations are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::blackhole;

use blackhole::Blackhole;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use mcm_runtime::leader::{lead, LeaderConfig, LeaderError};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// When a replica's work started and when it was dropped or ended.
#[derive(Default)]
struct Work {
    started: Mutex<Option<Instant>>,
    stopped: Mutex<Option<Instant>>,
}

impl Work {
    fn started(&self) -> Option<Instant> {
        *self.started.lock().expect("lock")
    }

    fn stopped(&self) -> Option<Instant> {
        *self.stopped.lock().expect("lock")
    }

    /// The work: runs until `stop` is set (or until dropped).
    fn run(self: &Arc<Self>, mut stop: watch::Receiver<bool>) -> impl Future<Output = ()> {
        struct Stopped(Arc<Work>);
        impl Drop for Stopped {
            fn drop(&mut self) {
                *self.0.stopped.lock().expect("lock") = Some(Instant::now());
            }
        }
        let me = self.clone();
        async move {
            *me.started.lock().expect("lock") = Some(Instant::now());
            let _guard = Stopped(me);
            let _ = stop.wait_for(|s| *s).await;
        }
    }
}

fn fast(ns: &str, lease: &str, id: &str) -> LeaderConfig {
    LeaderConfig {
        name: lease.into(),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
        shutdown_grace: Duration::from_secs(2),
        ..LeaderConfig::new(ns, id)
    }
}

type Led = tokio::task::JoinHandle<Result<Option<()>, LeaderError>>;

/// Starts a replica: its work, a stop switch (the shutdown signal) and the task.
fn replica(client: kube::Client, cfg: LeaderConfig) -> (Arc<Work>, watch::Sender<bool>, Led) {
    let work = Arc::new(Work::default());
    let (tx, rx) = watch::channel(false);
    let mut shutdown = rx.clone();
    let fut = work.run(rx);
    let task = tokio::spawn(async move {
        lead(client, cfg, fut, async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await
    });
    (work, tx, task)
}

async fn holder(env: &TestEnv, lease: &str) -> String {
    let leases: kube::Api<Lease> = env.api();
    leases
        .get(lease)
        .await
        .expect("lease")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

async fn started(work: &Arc<Work>, what: &str) -> Instant {
    must_eventually(Duration::from_secs(20), what, || async { work.started() }).await
}

#[tokio::test]
async fn a_candidate_never_takes_a_lease_that_is_being_renewed() {
    let Some(env) = TestEnv::new("leader-renewed").await else {
        return;
    };
    let (a, _stop_a, task_a) = replica(
        env.client.clone(),
        fast(&env.namespace, "machine-controller", "a"),
    );
    started(&a, "a leads").await;
    let cfg_b = fast(&env.namespace, "machine-controller", "b");
    let b_leading = cfg_b.leading.clone();
    let (b, _stop_b, task_b) = replica(env.client.clone(), cfg_b);
    // Three lease durations: b sees the record change on every renewal.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(b.started().is_none(), "b never started its work");
    assert!(!b_leading.load(Ordering::SeqCst));
    assert!(a.stopped().is_none(), "a kept leading");
    assert_eq!(holder(&env, "machine-controller").await, "a");
    task_a.abort();
    task_b.abort();
}

#[tokio::test]
async fn a_standby_takes_over_at_once_when_the_holder_releases_on_shutdown() {
    let Some(env) = TestEnv::new("leader-release").await else {
        return;
    };
    // A long lease: without the release, b would wait 30 s.
    let slow = |id: &str| LeaderConfig {
        lease_duration: Duration::from_secs(30),
        renew_deadline: Duration::from_secs(20),
        ..fast(&env.namespace, "machine-controller-manager", id)
    };
    let (a, stop_a, task_a) = replica(env.client.clone(), slow("a"));
    started(&a, "a leads").await;
    let (b, _stop_b, task_b) = replica(env.client.clone(), slow("b"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(b.started().is_none());
    stop_a.send(true).expect("stop a");
    let out = task_a.await.expect("a's task");
    assert!(
        matches!(out, Ok(Some(()))),
        "a's work ended within the grace: {out:?}"
    );
    let a_stopped = a.stopped().expect("a's work ended");
    let b_started = started(&b, "b takes over").await;
    eprintln!("b took over {:?} after a released", b_started - a_stopped);
    assert!(b_started > a_stopped, "b starts only after a stopped");
    assert!(
        b_started - a_stopped < Duration::from_secs(10),
        "b took over after {:?}, well before the 30 s lease duration",
        b_started - a_stopped
    );
    assert_eq!(holder(&env, "machine-controller-manager").await, "b");
    task_b.abort();
}

#[tokio::test]
async fn a_holder_that_cannot_renew_stops_its_work_before_another_may_take_over() {
    let Some(env) = TestEnv::new("leader-cut").await else {
        return;
    };
    let proxy = Blackhole::start().await;
    let cfg_a = fast(&env.namespace, "machine-controller", "a");
    let lease_duration = cfg_a.lease_duration;
    let gate_a = cfg_a.tenure.clone();
    let (a, _stop_a, task_a) = replica(proxy.client.clone(), cfg_a);
    started(&a, "a leads").await;
    assert!(
        gate_a.check().is_ok(),
        "a's cloud calls are allowed while it leads"
    );
    let (b, _stop_b, task_b) = replica(
        env.client.clone(),
        fast(&env.namespace, "machine-controller", "b"),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    // From now on a's requests hang: only its own timeouts can end them.
    let cut = Instant::now();
    proxy.cut();
    let out = tokio::time::timeout(Duration::from_secs(20), task_a)
        .await
        .expect("a gave up leading")
        .expect("a's task");
    assert!(matches!(out, Err(LeaderError::Lost(_))), "{out:?}");
    assert!(
        gate_a.check().is_err(),
        "a's cloud calls and drain requests are refused once it lost the lease"
    );
    let a_stopped = a.stopped().expect("a's work was dropped");
    assert!(
        a_stopped - cut < lease_duration,
        "a stopped {:?} after its last chance to renew, within the lease duration {lease_duration:?}",
        a_stopped - cut
    );
    let b_started = started(&b, "b takes over").await;
    eprintln!(
        "a stopped {:?} after the cut; b started {:?} after a stopped",
        a_stopped - cut,
        b_started - a_stopped
    );
    assert!(
        b_started > a_stopped,
        "never two leaders: b started after a stopped"
    );
    assert_eq!(holder(&env, "machine-controller").await, "b");
    task_b.abort();
}

async fn resource_version(env: &TestEnv, lease: &str) -> Option<String> {
    env.api::<Lease>()
        .get(lease)
        .await
        .expect("lease")
        .metadata
        .resource_version
}

/// The work blocks its thread for half the renew deadline at a time (a
/// reconcile doing CPU work, a synchronous call): the renewal, on a task of
/// its own, still renews, and the tenure gate stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_renewed_while_the_work_blocks_its_thread() {
    let Some(env) = TestEnv::new("leader-busy").await else {
        return;
    };
    let cfg = fast(&env.namespace, "machine-controller", "a");
    let (renew_deadline, gate) = (cfg.renew_deadline, cfg.tenure.clone());
    let running = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = running.clone();
    let work = async move {
        flag.store(true, Ordering::SeqCst);
        loop {
            std::thread::sleep(renew_deadline / 2);
            tokio::task::yield_now().await;
        }
    };
    let client = env.client.clone();
    let task = tokio::spawn(async move { lead(client, cfg, work, std::future::pending()).await });
    must_eventually(Duration::from_secs(20), "a leads", || async {
        running.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let before = resource_version(&env, "machine-controller").await;
    // Five renew deadlines: a renewal sharing the blocked task misses one.
    let until = Instant::now() + renew_deadline * 5;
    while Instant::now() < until {
        assert!(
            !task.is_finished(),
            "a lost its lease while its work was busy"
        );
        assert!(gate.check().is_ok(), "a's tenure stayed open");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_ne!(
        resource_version(&env, "machine-controller").await,
        before,
        "the Lease was renewed meanwhile"
    );
    assert_eq!(holder(&env, "machine-controller").await, "a");
    task.abort();
}

#[tokio::test]
async fn a_lease_stamped_by_a_skewed_clock_is_taken_only_after_a_lease_duration_of_observation() {
    let Some(env) = TestEnv::new("leader-skew").await else {
        return;
    };
    // The holder's clock is an hour behind: by renewTime the lease looks
    // long expired; by observation it was just written.
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "machine-controller"},
        "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 4,
                 "renewTime": "2000-01-01T00:00:00.000000Z", "acquireTime": "2000-01-01T00:00:00.000000Z"}
    }))
    .expect("lease");
    env.api::<Lease>()
        .create(&PostParams::default(), &lease)
        .await
        .expect("create");
    let t0 = Instant::now();
    let (b, _stop_b, task_b) = replica(
        env.client.clone(),
        fast(&env.namespace, "machine-controller", "b"),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(b.started().is_none(), "not taken on the stale renewTime");
    let b_started = started(&b, "b takes over the abandoned lease").await;
    assert!(
        b_started - t0 >= Duration::from_secs(4),
        "after a lease duration of observation"
    );
    task_b.abort();
}

#[tokio::test]
async fn inconsistent_durations_are_refused_before_anything_runs() {
    let Some(env) = TestEnv::new("leader-invalid").await else {
        return;
    };
    for (lease, renew, retry) in [(10, 10, 2), (15, 2, 2), (15, 10, 0)] {
        let cfg = LeaderConfig {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            ..LeaderConfig::new(&env.namespace, "a")
        };
        let work = Arc::new(Work::default());
        let (_tx, rx) = watch::channel(false);
        let out = lead(
            env.client.clone(),
            cfg,
            work.run(rx),
            std::future::pending(),
        )
        .await;
        assert!(
            matches!(out, Err(LeaderError::Invalid(_))),
            "{lease}/{renew}/{retry}: {out:?}"
        );
        assert!(work.started().is_none());
    }
    let leases = env
        .api::<Lease>()
        .get_opt("machine-controller")
        .await
        .expect("get");
    assert!(leases.is_none(), "no Lease was written");
}
