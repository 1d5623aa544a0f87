//! Throughput figures of the local cloud (ignored by default; run with
//! `cargo test -p mcm-provider-local --test integration bench:: -- --ignored --nocapture`).
//! Bounded in count and time; loopback only.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use futures::StreamExt;
use mcm_driver::{Code, Driver, MachineRequest};
use mcm_provider_local::{LocalDriver, Tunables};
use std::time::{Duration, Instant};

const MACHINES: usize = 300;
const CONCURRENCY: usize = 16;

async fn timed<F, Fut>(what: &str, reqs: &[MachineRequest], f: F)
where
    F: Fn(MachineRequest) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    let ok = futures::stream::iter(reqs.iter().cloned())
        .map(&f)
        .buffer_unordered(CONCURRENCY)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{what:>10}: {ok}/{} ok in {s:.2}s = {:.0}/s",
        reqs.len(),
        reqs.len() as f64 / s
    );
    assert_eq!(ok, reqs.len(), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn throughput_without_limits() {
    let cloud = start(Tunables::unlimited()).await;
    let c = class("bench");
    let reqs: Vec<MachineRequest> = (0..MACHINES)
        .map(|_| request(&machine("bench"), &c))
        .collect();
    let d = cloud.driver.clone();
    timed("create", &reqs, |r| {
        let d = d.clone();
        async move { d.create_machine(&r).await.is_ok() }
    })
    .await;
    timed("initialize", &reqs, |r| {
        let d = d.clone();
        async move { d.initialize_machine(&r).await.is_ok() }
    })
    .await;
    timed("status", &reqs, |r| {
        let d = d.clone();
        async move { d.get_machine_status(&r).await.is_ok() }
    })
    .await;
    let t0 = Instant::now();
    for _ in 0..20 {
        let l = d.list_machines(&list_request(&c)).await.expect("list");
        assert_eq!(l.machine_list.len(), MACHINES);
    }
    println!(
        "      list: {MACHINES} machines, {:.1} ms per call",
        t0.elapsed().as_secs_f64() * 1000.0 / 20.0
    );
    timed("delete", &reqs, |r| {
        let d = d.clone();
        async move { d.delete_machine(&r).await.is_ok() }
    })
    .await;
    let size = std::fs::metadata(&cloud.store)
        .map(|m| m.len())
        .unwrap_or(0);
    println!("store file: {} KiB", size / 1024);
    cloud.handle.shutdown().await.expect("shutdown");
}

/// With the EC2-like defaults a scale-up is paced by the RunInstances bucket
/// (5, then 2/s): creating 25 machines with a client that retries on
/// ResourceExhausted takes about (25 - 5) / 2 = 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn scale_up_paced_by_ec2_limits() {
    let cloud = start(Tunables::default()).await;
    let c = class("paced");
    let d: LocalDriver = cloud.driver.clone();
    let t0 = Instant::now();
    let mut throttled = 0u32;
    for _ in 0..25 {
        let r = request(&machine("paced"), &c);
        loop {
            match d.create_machine(&r).await {
                Ok(_) => break,
                Err(e) if e.code == Code::ResourceExhausted => {
                    throttled += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{e}"),
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "bounded");
        }
    }
    let s = t0.elapsed().as_secs_f64();
    println!("25 creates under the default limits: {s:.1}s, {throttled} throttled answers");
    assert!(s > 9.0 && s < 20.0, "{s}");
    let stats = cloud.admin.stats().await.expect("stats");
    println!("create stats: {:?}", stats.operations["create"]);
    cloud.handle.shutdown().await.expect("shutdown");
}
