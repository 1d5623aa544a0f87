//! The pacer against the real control plane: a MachineSet scaled far past
//! the cloud's create budget and back gives the scaled-away machines' turns
//! back, so a later replacement is admitted near now instead of behind the
//! old queue (design: docs/design/runtime.md, "Pacing cloud calls").
//! Asserted on the pacer's reserved turns, never on wall-clock timing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::machine_common as mc;
use async_trait::async_trait;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineSet};
use mcm_driver::budget::BucketLimit;
use mcm_driver::testing::{Script, ScriptedDriver};
use mcm_driver::*;
use mcm_runtime::sets::{self, SetsConfig};
use mcm_runtime::{machine, metrics::Metrics, Config, Context, DriverRegistry};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(60);

/// The create budget: burst 2 (the pacer keeps 1 back), then one per 30 s
/// (at the pacer's 97 %: ~30.9 s). 30 machines queue for about 15 minutes.
const CREATE_EVERY_SECS: f64 = 30.0;

/// The scripted cloud with these budgets.
struct Budgeted(Arc<ScriptedDriver>, Vec<(CloudOp, BucketLimit)>);

#[async_trait]
impl Driver for Budgeted {
    async fn create_machine(
        &self,
        r: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        self.0.create_machine(r).await
    }
    async fn initialize_machine(
        &self,
        r: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        self.0.initialize_machine(r).await
    }
    async fn delete_machine(
        &self,
        r: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        self.0.delete_machine(r).await
    }
    async fn get_machine_status(
        &self,
        r: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.0.get_machine_status(r).await
    }
    async fn list_machines(&self, r: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        self.0.list_machines(r).await
    }
    async fn rate_limits(&self) -> Vec<(CloudOp, BucketLimit)> {
        self.1.clone()
    }
}

fn machine_set(replicas: i32) -> MachineSet {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "pool"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"set": "pool"}},
            "template": {
                "metadata": {"labels": {"set": "pool"}},
                "spec": {"class": {"kind": "MachineClass", "name": "budgeted"}}
            }
        }
    }))
    .unwrap()
}

async fn scale(env: &TestEnv, replicas: i32) {
    env.api::<MachineSet>()
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

async fn machine_names(env: &TestEnv) -> Vec<String> {
    env.api::<Machine>()
        .list(&ListParams::default())
        .await
        .expect("list machines")
        .items
        .iter()
        .map(|m| m.name_any())
        .collect()
}

#[tokio::test]
async fn a_replacement_after_scaling_far_past_the_budget_and_back_is_not_queued_behind_the_old_turns(
) {
    let Some(env) = mc::namespace_with_secret("pacing-refund", "#!/bin/sh\necho hi").await else {
        return;
    };
    env.create_class("budgeted", "budgeted", "creds", json!({"image": "x"}))
        .await
        .expect("class");
    let scripted = Arc::new(ScriptedDriver::new(Script {
        init_unimplemented: true,
        ..Script::default()
    }));
    let mut drivers = DriverRegistry::new();
    let budget = vec![(
        CloudOp::Create,
        BucketLimit::new(2, 1.0 / CREATE_EVERY_SECS),
    )];
    drivers.register("budgeted", Arc::new(Budgeted(scripted.clone(), budget)));
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let cfg = Config {
        namespace: env.namespace.clone(),
        short_retry: Duration::from_millis(200),
        long_retry: Duration::from_secs(3),
        ..Config::default()
    };
    let ctx = Context::new(env.client.clone(), None, cfg, drivers, metrics);
    let (stop_m, rx_m) = oneshot::channel::<()>();
    let machines_task = tokio::spawn(machine::run(ctx.clone(), async move {
        let _ = rx_m.await;
    }));
    let (stop_s, rx_s) = oneshot::channel::<()>();
    let sets_task = tokio::spawn(sets::run_until(
        env.client.clone(),
        env.namespace.clone(),
        SetsConfig {
            overshooting_period: Duration::from_millis(300),
            ..SetsConfig::default()
        },
        async move {
            let _ = rx_s.await;
        },
    ));

    // Scale up to 30: one create goes at once, 29 queue for ~15 minutes.
    env.api::<MachineSet>()
        .create(&PostParams::default(), &machine_set(30))
        .await
        .expect("create set");
    let period = Duration::from_secs_f64(CREATE_EVERY_SECS / 0.97);
    must_eventually(
        WAIT,
        "29 machines waiting for their create turn",
        || async { (ctx.pacer.reserved_turns() >= 29).then_some(()) },
    )
    .await;

    // Scale back to 1: the 29 deleted machines give their turns back.
    scale(&env, 1).await;
    must_eventually(WAIT, "the set scaled down to 1 machine", || async {
        (machine_names(&env).await.len() == 1).then_some(())
    })
    .await;
    let kept = machine_names(&env).await;

    // A replacement (the set scaled to 2) gets a turn near now: at most one
    // turn behind the machine that stayed, not ~29 turns behind the old queue.
    scale(&env, 2).await;
    let turn = must_eventually(WAIT, "the new machine admitted or queued", || async {
        let names = machine_names(&env).await;
        let new = names.iter().find(|n| !kept.contains(n))?;
        let key = mcm_runtime::keys::ObjectKey::new(
            mcm_runtime::keys::Kind::Machine,
            &env.namespace,
            new,
        );
        if let Some(wait) = ctx.pacer.turn(&key, CloudOp::Create) {
            return Some(wait);
        }
        scripted.vm(new).map(|_| Duration::ZERO)
    })
    .await;
    eprintln!(
        "the replacement's create turn is {turn:?} away (one turn: {period:?}; the old queue held 29)"
    );
    assert!(
        turn <= period * 2,
        "the replacement waits {turn:?}, one turn is {period:?}"
    );
    assert!(
        ctx.pacer.reserved_turns() <= 2,
        "no turns of deleted machines remain: {}",
        ctx.pacer.reserved_turns()
    );

    let _ = stop_s.send(());
    let _ = stop_m.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), sets_task).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), machines_task).await;
}

/// Deletions queued behind the cloud's delete budget: each machine shows
/// `Terminating` while it waits for its turn (a wait for the turn never
/// carries a phase change unwritten, `Retry::keeps_staged`), is deleted from
/// the cloud once, and writes one status on the way (design: machine.md,
/// "Requests per deletion").
#[tokio::test]
async fn deletions_waiting_for_the_delete_budget_show_terminating_with_one_status_write() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    use mcm_api::MachinePhase;

    let Some(env) = mc::namespace_with_secret("pacing-delete", "#!/bin/sh").await else {
        return;
    };
    env.create_class("budgeted", "budgeted", "creds", json!({"image": "x"}))
        .await
        .expect("class");
    let scripted = Arc::new(ScriptedDriver::new(Script {
        init_unimplemented: true,
        ..Script::default()
    }));
    // Burst 2 (the pacer keeps one back): one delete at once, then one per 2 s.
    let budget = vec![(CloudOp::Delete, BucketLimit::new(2, 0.5))];
    let driver = Arc::new(Budgeted(scripted.clone(), budget));
    let ctl = mc::start(&env, "budgeted", driver, false, mc::config(&env.namespace));
    let names = ["pd-a", "pd-b", "pd-c", "pd-d"];
    for n in names {
        mc::create_machine(&env, n, "budgeted", json!({})).await;
    }
    for n in names {
        mc::wait_phase(&env, n, MachinePhase::Available).await;
    }

    // Every status write of the deletions, as the watch sees them.
    let seen: Arc<std::sync::Mutex<Vec<(String, String, String)>>> = Arc::default();
    let recorder = {
        let seen = seen.clone();
        let api = env.api::<Machine>();
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(ev)) = stream.next().await {
                if let watcher::Event::Apply(m) = ev {
                    let st = m.status.clone().unwrap_or_default();
                    if m.metadata.deletion_timestamp.is_some() {
                        seen.lock().unwrap().push((
                            m.name_any(),
                            st.current_status.phase.to_string(),
                            st.last_operation.description.clone(),
                        ));
                    }
                }
            }
        })
    };
    for n in names {
        env.api::<Machine>()
            .delete(n, &Default::default())
            .await
            .expect("delete");
    }
    // While queued, each shows Terminating.
    must_eventually(
        WAIT,
        "every deleted machine Terminating or gone",
        || async {
            let mut all = true;
            for n in names {
                if let Some(m) = mc::get(&env, n).await {
                    all &= mc::phase(&m) == MachinePhase::Terminating;
                }
            }
            all.then_some(())
        },
    )
    .await;
    for n in names {
        mc::wait_gone(&env, n).await;
    }
    recorder.abort();
    assert_eq!(
        ScriptedDriver::count(&scripted.calls.delete),
        4,
        "one DeleteMachine per machine"
    );
    let seen = seen.lock().unwrap().clone();
    for n in names {
        // Distinct statuses seen after the DELETE, less the one it found
        // (the finalizer's removal and the deletion repeat the last one).
        let mut statuses: Vec<(String, String)> = seen
            .iter()
            .filter(|(m, _, _)| m == n)
            .map(|(_, p, d)| (p.clone(), d.clone()))
            .collect();
        statuses.dedup();
        let written: Vec<_> = statuses.iter().filter(|(p, _)| p != "Available").collect();
        eprintln!("{n}: {statuses:?}");
        assert!(
            written.len() <= 1,
            "{n} wrote {} statuses while being deleted: {written:?}",
            written.len()
        );
    }
    ctl.stop().await;
}
