//! Drains against the real control plane: a drain blocked by a
//! PodDisruptionBudget (one that may allow the eviction later) holds no reconcile slot (other machines are created and
//! health-checked meanwhile, with `concurrent_syncs` 1), never deletes the pod
//! around its budget, and the pod goes only by the forced drain once the drain
//! timeout has passed; after an evicted pod's volume detached, the drain
//! waits until it is attached to another node (`--machine-pv-reattach-timeout`).
//! The tests play kubelet by writing Nodes and pod status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use mcm_api::{Machine, MachinePhase};
use mcm_driver::testing::{Script, ScriptedDriver};
use mcm_runtime::{machine, Config, Context};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

use crate::machine_common as mc;
use mc::{get, node_of, phase, wait_phase, WAIT};

/// One reconcile slot; a drain makes two eviction attempts of 15 s each
/// (drainTimeout 60s caps the attempts at 60 s / 30 s = 2), then fails. The
/// first attempt's 15 s must cover a new machine reaching Running on a busy
/// CI machine.
fn config(ns: &str) -> Config {
    Config {
        concurrent_syncs: 1,
        eviction_retry_interval: Duration::from_secs(15),
        ..mc::config(ns)
    }
}

/// The machine controller, which runs until its task is aborted.
fn start(env: &TestEnv, driver: Arc<ScriptedDriver>) -> (Arc<Context>, JoinHandle<()>) {
    let ctx = mc::context(env, "scripted", driver, true, config(&env.namespace));
    let task = tokio::spawn(machine::run(ctx.clone(), std::future::pending()));
    (ctx, task)
}

async fn setup(test: &str) -> Option<TestEnv> {
    let env = mc::namespace_with_secret(test, "#!/bin/sh\necho <<MACHINE_NAME>>").await?;
    env.create_class("scripted-class", "scripted", "creds", json!({"image": "x"}))
        .await
        .expect("create class");
    Some(env)
}

async fn create_machine(env: &TestEnv, name: &str, spec: serde_json::Value) {
    mc::create_machine(env, name, "scripted-class", spec).await;
}

fn last_op(m: &Machine) -> (String, String) {
    let op = m.status.clone().unwrap_or_default().last_operation;
    (op.description, op.state.as_str().to_string())
}

/// Plays kubelet: registers the Node, Ready.
async fn kubelet(client: &Client, node: &str, machine: &str) {
    mc::kubelet(client, node, machine, true).await;
}

/// A running, Ready pod `web` on `node`, covered by a PDB `minAvailable: 1`
/// that the disruption controller has observed.
async fn guarded_pod(env: &TestEnv, node: &str) {
    let pods: Api<Pod> = env.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    pods.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("pod status");
    // A second guarded pod, not scheduled and so not ready: the budget
    // (1 of 2 healthy, minAvailable 1) refuses the eviction for now but is
    // not misconfigured (a budget of only healthy pods allowing nothing
    // fails the drain at once: machine_controller.rs).
    let unready: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-unready", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &unready)
        .await
        .expect("unready pod");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .expect("pdb");
    env.api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &pdb)
        .await
        .expect("pdb");
    must_eventually(WAIT, "the PDB observed with the pod healthy", || async {
        env.api::<PodDisruptionBudget>()
            .get("web")
            .await
            .ok()
            .and_then(|p| p.status)
            .filter(|s| {
                s.observed_generation.is_some()
                    && s.current_healthy == Some(1)
                    && s.expected_pods == Some(2)
            })
            .map(|_| ())
    })
    .await;
}

/// Records, every 100 ms, the first time the pod was seen deleted or deleting.
fn watch_pod_deletion(env: &TestEnv) -> Arc<Mutex<Option<DateTime<Utc>>>> {
    let seen = Arc::new(Mutex::new(None));
    let out = seen.clone();
    let pods: Api<Pod> = env.api();
    tokio::spawn(async move {
        loop {
            if let Ok(p) = pods.get_opt("web").await {
                if p.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
                    *out.lock().expect("lock") = Some(Utc::now());
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    seen
}

async fn cordoned(client: &Client, node: &str) -> bool {
    Api::<Node>::all(client.clone())
        .get_opt(node)
        .await
        .ok()
        .flatten()
        .and_then(|n| n.spec)
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

#[tokio::test]
async fn a_pdb_blocked_drain_holds_no_slot_never_bypasses_the_budget_and_is_forced_after_the_drain_timeout(
) {
    let Some(env) = setup("drain-pdb").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        ..Script::default()
    }));
    let (ctx, task) = start(&env, driver.clone());
    create_machine(&env, "old", json!({"drainTimeout": "60s"})).await;
    wait_phase(&env, "old", MachinePhase::Pending).await;
    let node = node_of(&env, "old");
    kubelet(&env.client, &node, "old").await;
    wait_phase(&env, "old", MachinePhase::Running).await;
    guarded_pod(&env, &node).await;
    let deleted = watch_pod_deletion(&env);

    env.api::<Machine>()
        .delete("old", &DeleteParams::default())
        .await
        .expect("delete");
    must_eventually(WAIT, "the drain started (node cordoned)", || async {
        cordoned(&env.client, &node).await.then_some(())
    })
    .await;
    let deletion: DateTime<Utc> = get(&env, "old")
        .await
        .and_then(|m| m.metadata.deletion_timestamp)
        .map(|t| DateTime::from_timestamp(t.0.as_second(), 0).expect("time"))
        .expect("deletion timestamp");

    // The only reconcile slot is free while the drain waits on the budget: a
    // new machine is created and health-checked into Running meanwhile.
    create_machine(&env, "new", json!({})).await;
    wait_phase(&env, "new", MachinePhase::Pending).await;
    kubelet(&env.client, &node_of(&env, "new"), "new").await;
    wait_phase(&env, "new", MachinePhase::Running).await;
    let old = get(&env, "old").await.expect("old machine");
    assert_eq!(phase(&old), MachinePhase::Terminating);
    assert!(
        !last_op(&old).0.starts_with("Drain failed"),
        "the new machine ran while the first drain attempt was still waiting: {:?}",
        last_op(&old)
    );
    assert_eq!(ctx.drains.len(), 1, "one drain task for the machine");

    // Retries exhausted: the drain fails (the reference's text), the pod stays.
    let failed = must_eventually(
        Duration::from_secs(70),
        "the drain failed on the budget",
        || async {
            get(&env, "old")
                .await
                .map(|m| last_op(&m))
                .filter(|(d, _)| d.starts_with("Drain failed due to - eviction of pod"))
        },
    )
    .await;
    assert!(
        failed
            .0
            .ends_with("Will retry in next sync. Initiate node drain"),
        "{failed:?}"
    );
    assert_eq!(failed.1, "Failed");
    assert!(
        deleted.lock().expect("lock").is_none(),
        "the pod was deleted around its budget"
    );
    assert!(driver.vm("old").is_some(), "the VM outlives the drain");

    // After the drain timeout the forced drain deletes the pod, and the deletion completes.
    must_eventually(Duration::from_secs(80), "machine old gone", || async {
        get(&env, "old").await.is_none().then_some(())
    })
    .await;
    // The watcher polls every 100 ms, and the deletion now completes in the
    // same reconcile as the forced drain: give it a moment to look.
    let at = must_eventually(
        Duration::from_secs(5),
        "the pod was deleted by the forced drain",
        || async { *deleted.lock().expect("lock") },
    )
    .await;
    assert!(
        at >= deletion + chrono::Duration::seconds(60),
        "the pod went at {at}, before the drain timeout ({deletion} + 60s)"
    );
    assert!(driver.vm("old").is_none(), "VM deleted");
    task.abort();
}

#[tokio::test]
async fn a_running_drain_is_aborted_when_the_controller_stops() {
    let Some(env) = setup("drain-stop").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        ..Script::default()
    }));
    let (ctx, task) = start(&env, driver);
    create_machine(&env, "m", json!({})).await;
    wait_phase(&env, "m", MachinePhase::Pending).await;
    let node = node_of(&env, "m");
    kubelet(&env.client, &node, "m").await;
    wait_phase(&env, "m", MachinePhase::Running).await;
    guarded_pod(&env, &node).await;
    env.api::<Machine>()
        .delete("m", &DeleteParams::default())
        .await
        .expect("delete");
    must_eventually(WAIT, "the drain started", || async {
        (ctx.drains.len() == 1).then_some(())
    })
    .await;
    // Leadership lost: the controller's future is dropped mid-drain.
    task.abort();
    let _ = task.await;
    assert!(
        ctx.drains.is_empty(),
        "the drain was aborted with the controller"
    );
    // From now on any eviction request succeeds: without its budget the pod
    // is evicted (marked for deletion) by the first request that reaches the
    // API server. A drain task that outlived its controller retries within
    // one eviction retry interval; watch for longer than that.
    env.api::<PodDisruptionBudget>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the budget");
    let pods: Api<Pod> = env.api();
    let watch_for = config(&env.namespace).eviction_retry_interval * 2;
    let until = tokio::time::Instant::now() + watch_for;
    while tokio::time::Instant::now() < until {
        let pod = pods.get_opt("web").await.expect("get pod");
        assert!(
            pod.as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "an eviction request reached the API server after the controller stopped: {:?}",
            pod.map(|p| p.metadata.deletion_timestamp)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A VolumeAttachment `name` of PV `pv` on `node`, attached or not.
async fn attachment(client: &Client, name: &str, pv: &str, node: &str, attached: bool) {
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"attacher": "csi.test", "nodeName": node,
                 "source": {"persistentVolumeName": pv}},
    }))
    .expect("va");
    vas.create(&PostParams::default(), &va)
        .await
        .expect("create volume attachment");
    set_attached(client, name, attached).await;
}

async fn set_attached(client: &Client, name: &str, attached: bool) {
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    vas.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"attached": attached}})),
    )
    .await
    .expect("volume attachment status");
}

#[tokio::test]
async fn an_evicted_pods_volume_is_waited_for_until_it_attaches_to_another_node() {
    let Some(env) = setup("drain-reattach").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        ..Script::default()
    }));
    let (_ctx, task) = start(&env, driver.clone());
    create_machine(&env, "vol", json!({})).await;
    wait_phase(&env, "vol", MachinePhase::Pending).await;
    let node = node_of(&env, "vol");
    kubelet(&env.client, &node, "vol").await;
    wait_phase(&env, "vol", MachinePhase::Running).await;

    // A pod on the node with a PersistentVolume (cluster-wide: named after the namespace).
    let pv_name = format!("{}-data", env.namespace);
    let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": "csi.test", "volumeHandle": "vol-1"}},
    }))
    .expect("pv");
    pvs.create(&PostParams::default(), &pv).await.expect("pv");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv_name, "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("pvc");
    env.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &pvc)
        .await
        .expect("pvc");
    let pods: Api<Pod> = env.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let old_va = format!("{}-old", env.namespace);
    let new_va = format!("{}-new", env.namespace);
    attachment(&env.client, &old_va, &pv_name, &node, true).await;

    env.api::<Machine>()
        .delete("vol", &DeleteParams::default())
        .await
        .expect("delete");
    // Play kubelet: the evicted pod goes, then its volume detaches from the node.
    must_eventually(WAIT, "db evicted and gone", || async {
        match pods.get_opt("db").await.expect("get") {
            None => Some(()),
            Some(p) if p.metadata.deletion_timestamp.is_some() => {
                let zero = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                let _ = pods.delete("db", &zero).await;
                None
            }
            Some(_) => None,
        }
    })
    .await;
    set_attached(&env.client, &old_va, false).await;
    // Detached, but not yet attached anywhere else: the drain keeps waiting
    // (up to --machine-pv-reattach-timeout, 90 s by default).
    mcm_testenv::must_hold_for(
        Duration::from_secs(4),
        "the VM stays while the volume has not re-attached elsewhere",
        || async { driver.vm("vol").is_some() },
    )
    .await;
    let waiting = get(&env, "vol").await.expect("machine");
    assert_eq!(last_op(&waiting).0, "Initiate node drain", "{waiting:?}");
    // The replacement pod's node attaches the volume: the drain ends, the machine goes.
    attachment(&env.client, &new_va, &pv_name, "elsewhere", true).await;
    must_eventually(WAIT, "machine vol gone", || async {
        get(&env, "vol").await.is_none().then_some(())
    })
    .await;
    assert!(driver.vm("vol").is_none(), "VM deleted");
    let vas: Api<VolumeAttachment> = Api::all(env.client.clone());
    for va in [&old_va, &new_va] {
        let _ = vas.delete(va, &DeleteParams::default()).await;
    }
    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    task.abort();
}
