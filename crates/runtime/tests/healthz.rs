//! `/healthz` and `/readyz` against the real control plane: liveness fails
//! when the API server stops answering, readiness needs leadership and synced
//! caches.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::blackhole;

use blackhole::Blackhole;
use mcm_api::Machine;
use mcm_runtime::caches::Shared;
use mcm_runtime::healthz::{probe_api, Half, Health, HealthConfig};
use mcm_runtime::leader::{lead, LeaderConfig};
use mcm_testenv::{must_eventually, TestEnv};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test]
async fn healthz_fails_when_the_api_server_stops_answering() {
    let Some(_env) = TestEnv::new("health-api").await else {
        return;
    };
    let proxy = Blackhole::start().await;
    let probe_period = Duration::from_millis(300);
    let grace = Duration::from_secs(2);
    let health = Health::new(HealthConfig {
        probe_period,
        grace,
    });
    let probe = tokio::spawn(probe_api(proxy.client.clone(), health.clone()));
    // Past the start-up grace (and a few probes), alive only through successful probes.
    tokio::time::sleep(grace + probe_period * 3).await;
    assert_eq!(health.liveness(), Ok(()));
    proxy.cut();
    let reason = must_eventually(Duration::from_secs(15), "/healthz fails", || async {
        health.liveness().err()
    })
    .await;
    assert!(
        reason.contains("no successful API server request"),
        "{reason}"
    );
    probe.abort();
}

#[tokio::test]
async fn readyz_waits_for_the_leaders_cache_and_a_standby_is_ready_while_it_reaches_the_api_server()
{
    let Some(env) = TestEnv::new("health-ready").await else {
        return;
    };
    let replica = |id: &str| {
        let cfg = LeaderConfig {
            lease_duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(500),
            ..LeaderConfig::new(&env.namespace, id)
        };
        let leading = cfg.leading.clone();
        let machines = Shared::new(env.api::<Machine>());
        // The leader's work: fill the cache (a standby never starts it).
        let fill = {
            let machines = machines.clone();
            async move {
                machines.synced().await;
                std::future::pending::<()>().await;
            }
        };
        let health = Health::new(HealthConfig {
            probe_period: Duration::from_millis(300),
            grace: Duration::from_secs(10),
        });
        health.add(Half::new(
            "machine-controller",
            leading.clone(),
            vec![machines.synced_flag()],
        ));
        // Not ready before anything ran: no API answer, no leadership, no cache.
        assert!(health.readiness().is_err());
        let client = env.client.clone();
        let probe = tokio::spawn(probe_api(client.clone(), health.clone()));
        let task = tokio::spawn(async move {
            let _ = lead(client, cfg, fill, std::future::pending()).await;
        });
        (health, leading, machines, vec![probe, task])
    };
    let (a, a_leading, a_machines, tasks_a) = replica("a");
    must_eventually(Duration::from_secs(20), "the leader is ready", || async {
        a.readiness().ok()
    })
    .await;
    assert!(a_leading.load(Ordering::SeqCst));
    assert!(
        a_machines.is_synced(),
        "the leader is ready only with a synced cache"
    );
    let (b, b_leading, b_machines, tasks_b) = replica("b");
    must_eventually(Duration::from_secs(20), "the standby is ready", || async {
        b.readiness().ok()
    })
    .await;
    assert!(!b_leading.load(Ordering::SeqCst), "b is a standby");
    assert!(!b_machines.is_synced(), "a standby watches nothing");
    assert_eq!(b.liveness(), Ok(()), "the standby is alive");
    for t in tasks_a.into_iter().chain(tasks_b) {
        t.abort();
    }
}
