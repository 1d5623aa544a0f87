//! The Machine controller's retries, measured on the calls a test driver receives, against
//! the real control plane:
//!
//! * a machine whose CreateMachine keeps failing is retried with growing, jittered spacing,
//!   never more often than the minimum retry period (`Config::short_retry`);
//! * a machine whose CreateMachine answers `ResourceExhausted` is retried after
//!   `Config::resource_exhausted_retry` (`--resource-exhausted-retry`), not the backoff;
//! * a machine with an invalid timeout (`creationTimeout: 0s`) is reported in its status and
//!   by a Warning Event, and the driver is never called.
//!
//! Small retry periods (100 ms .. 1.6 s) keep the test short; the assertions are the
//! minimum spacing, the lower bounds of the backoff band (both hold however slow the
//! machine is), growth, and that jitter drew some spacing below its un-jittered value
//! (without jitter every spacing is at least that value).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use async_trait::async_trait;
use kube::api::ListParams;
use mcm_api::Machine;
use mcm_driver::*;
use mcm_runtime::Config;
use mcm_testenv::{must_eventually, must_hold_for, TestEnv};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::machine_common as mc;
use mc::Running;

const MIN: Duration = Duration::from_millis(100);
const MAX: Duration = Duration::from_millis(1600);
/// The backoff's jitter: a delay is drawn from `[base × (1 − 0.2), base]`, never below MIN.
const JITTER: f64 = 0.2;

/// A driver whose CreateMachine always fails (Internal, or `code`) and that records when it
/// was called.
#[derive(Default)]
struct FailingDriver {
    creates: Mutex<BTreeMap<String, Vec<Instant>>>,
    code: Option<Code>,
}

impl FailingDriver {
    fn answering(code: Code) -> Self {
        FailingDriver {
            code: Some(code),
            ..Default::default()
        }
    }

    fn creates_of(&self, machine: &str) -> Vec<Instant> {
        self.creates
            .lock()
            .map(|c| c.get(machine).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    fn total_creates(&self) -> usize {
        self.creates
            .lock()
            .map(|c| c.values().map(Vec::len).sum())
            .unwrap_or_default()
    }
}

#[async_trait]
impl Driver for FailingDriver {
    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let name = req.machine.metadata.name.clone().unwrap_or_default();
        if let Ok(mut c) = self.creates.lock() {
            c.entry(name).or_default().push(Instant::now());
        }
        match self.code {
            Some(code) => Err(Status::new(code, "test: no capacity")),
            None => Err(Status::internal("test: the cloud is broken")),
        }
    }

    async fn delete_machine(
        &self,
        _req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        _req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        Err(Status::not_found("test: no VM"))
    }

    async fn list_machines(
        &self,
        _req: &ListMachinesRequest,
    ) -> DriverResult<ListMachinesResponse> {
        Ok(ListMachinesResponse::default())
    }
}

/// The machine controller (no target cluster) with the failing driver and small retry periods.
fn start(env: &TestEnv, driver: Arc<FailingDriver>) -> Running {
    start_with(env, driver, Config::default().resource_exhausted_retry)
}

/// [`start`] with `--resource-exhausted-retry` set to `resource_exhausted_retry`.
fn start_with(
    env: &TestEnv,
    driver: Arc<FailingDriver>,
    resource_exhausted_retry: Duration,
) -> Running {
    let cfg = Config {
        short_retry: MIN,
        long_retry: MAX,
        resource_exhausted_retry,
        ..mc::config(&env.namespace)
    };
    mc::start(env, "failing", driver, false, cfg)
}

async fn setup(test: &str) -> Option<TestEnv> {
    let env = mc::namespace_with_secret(test, "#!/bin/sh\necho hi").await?;
    env.create_class("failing-class", "failing", "creds", json!({"image": "x"}))
        .await
        .expect("create class");
    Some(env)
}

async fn create_machine(env: &TestEnv, name: &str, spec: serde_json::Value) {
    mc::create_machine(env, name, "failing-class", spec).await;
}

/// The un-jittered delay after the `n`-th consecutive failure (1-based).
fn base(n: u32) -> Duration {
    MIN.saturating_mul(1 << (n - 1).min(20)).min(MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_create_is_retried_with_growing_jittered_spacing_never_faster_than_the_minimum() {
    let Some(env) = setup("mc-retries").await else {
        return;
    };
    let driver = Arc::new(FailingDriver::default());
    let ctl = start(&env, driver.clone());
    const MACHINES: [&str; 3] = ["r1", "r2", "r3"];
    // 8 calls: gaps 0.1, 0.2, 0.4, 0.8, then 1.6 (the cap) three times, jittered.
    const CALLS: usize = 8;
    for name in MACHINES {
        create_machine(&env, name, json!({})).await;
    }
    must_eventually(
        Duration::from_secs(60),
        "8 create calls per machine",
        || async {
            MACHINES
                .iter()
                .all(|m| driver.creates_of(m).len() >= CALLS)
                .then_some(())
        },
    )
    .await;
    ctl.stop().await;

    let mut below_base = 0;
    for name in MACHINES {
        let calls = driver.creates_of(name);
        let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1] - w[0]).collect();
        eprintln!("{name}: gaps {gaps:?}");
        for (i, gap) in gaps.iter().enumerate().take(CALLS - 1) {
            let n = i as u32 + 1;
            // Never more often than the minimum period.
            assert!(
                *gap >= MIN,
                "{name}: gap {i} is {gap:?} < {MIN:?}: {gaps:?}"
            );
            // Never below the backoff band's floor for this many failures.
            let floor = base(n).mul_f64(1.0 - JITTER).max(MIN);
            assert!(
                *gap >= floor,
                "{name}: gap {i} is {gap:?} < {floor:?}: {gaps:?}"
            );
            if *gap < base(n) {
                below_base += 1;
            }
        }
        // Growth: the spacing at the cap is many times the first.
        let last = gaps[CALLS - 2];
        assert!(last >= gaps[0] * 4, "{name}: no growth: {gaps:?}");
        assert!(
            gaps[4] > gaps[1] && gaps[3] > gaps[0],
            "{name}: spacing does not grow: {gaps:?}"
        );
    }
    // Jitter: without it every gap is at least its un-jittered delay. With it each delay is
    // drawn from [0.8, 1.0] × base; 18 draws that all land within the reconcile's own
    // overhead of the top are all but impossible.
    assert!(
        below_base > 0,
        "no retry was drawn below its un-jittered delay: no jitter"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_with_a_zero_creation_timeout_is_reported_and_never_created() {
    let Some(env) = setup("mc-zero-timeout").await else {
        return;
    };
    let driver = Arc::new(FailingDriver::default());
    let ctl = start(&env, driver.clone());
    create_machine(&env, "zero", json!({"creationTimeout": "0s"})).await;
    create_machine(&env, "banana", json!({"healthTimeout": "banana"})).await;
    for (name, field) in [
        ("zero", "spec.creationTimeout"),
        ("banana", "spec.healthTimeout"),
    ] {
        let description = must_eventually(
            Duration::from_secs(30),
            &format!("{name}: the invalid timeout in status"),
            || async {
                let m = env.api::<Machine>().get_opt(name).await.ok()??;
                let op = m.status?.last_operation;
                (!op.description.is_empty()).then_some(op.description)
            },
        )
        .await;
        assert!(
            description.starts_with("Invalid machine: ") && description.contains(field),
            "{name}: {description}"
        );
    }
    // The Event is posted after the status write: wait for it too.
    let events = env.api::<k8s_openapi::api::events::v1::Event>();
    must_eventually(
        Duration::from_secs(30),
        "an InvalidMachine Event naming spec.creationTimeout",
        || async {
            let items = events.list(&ListParams::default()).await.ok()?.items;
            items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("InvalidMachine")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("spec.creationTimeout"))
                })
                .then_some(())
        },
    )
    .await;
    // Two of the longest retry periods: any requeue of the invalid machines
    // came and created nothing.
    must_hold_for(MAX * 2, "an invalid machine is never created", || async {
        driver.total_creates() == 0
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answered_resource_exhausted_is_retried_after_the_resource_exhausted_retry_not_the_backoff(
) {
    let Some(env) = setup("mc-exhausted").await else {
        return;
    };
    // Five times the longest backoff: a retry within it came from the backoff.
    let period = MAX * 5 / 2;
    let driver = Arc::new(FailingDriver::answering(Code::ResourceExhausted));
    let ctl = start_with(&env, driver.clone(), period);
    create_machine(&env, "ex1", json!({})).await;
    must_eventually(Duration::from_secs(60), "3 create calls", || async {
        (driver.creates_of("ex1").len() >= 3).then_some(())
    })
    .await;
    ctl.stop().await;
    let calls = driver.creates_of("ex1");
    let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("ex1: gaps {gaps:?}");
    for gap in &gaps {
        assert!(
            *gap >= period,
            "retried after {gap:?}, before --resource-exhausted-retry {period:?}: {gaps:?}"
        );
        // Not much later either: the period, not the backoff's cap or a resync.
        assert!(
            *gap < period + Duration::from_secs(3),
            "retried only after {gap:?}: {gaps:?}"
        );
    }
    let m = env.api::<Machine>().get("ex1").await.expect("machine");
    let op = m.status.expect("status").last_operation;
    assert_eq!(op.error_code, "ResourceExhausted");
}
