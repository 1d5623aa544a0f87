//! The Machine controller against the real control plane, with the in-process
//! scriptable test driver (fault injection is why a test double is right here).
//! The tests play kubelet by writing Node objects.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachinePhase};
use mcm_driver::testing::{Script, ScriptedDriver, ScriptedVm};
use mcm_runtime::{machine, Config};
use mcm_testenv::{must_eventually, must_hold_for, must_see_events, TestEnv};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

use crate::machine_common as mc;
use mc::{create_machine, get, kubelet, node_of, phase, wait_gone, wait_phase, Running, WAIT};

/// Short retries, and evictions retried every 500 ms.
fn config(ns: &str) -> Config {
    Config {
        eviction_retry_interval: Duration::from_millis(500),
        ..mc::config(ns)
    }
}

fn start(env: &TestEnv, driver: Arc<ScriptedDriver>, target: bool, cfg: Config) -> Running {
    mc::start(env, "scripted", driver, target, cfg)
}

async fn setup(test: &str) -> Option<TestEnv> {
    let env =
        mc::namespace_with_secret(test, "#!/bin/sh\necho <<MACHINE_NAME>> <<BOOTSTRAP_TOKEN>>")
            .await?;
    create_class(&env, "scripted-class", "creds", json!({"image": "x"})).await;
    Some(env)
}

async fn create_class(env: &TestEnv, name: &str, secret: &str, spec: serde_json::Value) {
    env.create_class(name, "scripted", secret, spec)
        .await
        .expect("create class");
}

fn script(env: &TestEnv) -> Script {
    Script {
        node_prefix: format!("{}-", env.namespace),
        ..Script::default()
    }
}

fn calls(c: &std::sync::atomic::AtomicU32) -> u32 {
    ScriptedDriver::count(c)
}

#[tokio::test]
async fn machine_is_created_initialized_and_runs_when_its_node_is_ready() {
    let Some(env) = setup("mc-happy").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(script(&env)));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m1", "scripted-class", json!({})).await;
    let m = wait_phase(&env, "m1", MachinePhase::Pending).await;
    assert_eq!(m.spec.provider_id, "scripted:///zone-a/m1");
    assert_eq!(
        m.labels().get("node").map(String::as_str),
        Some(node_of(&env, "m1").as_str())
    );
    assert_eq!(
        m.annotations()
            .get("machinepriority.machine.sapcloud.io")
            .map(String::as_str),
        Some("3")
    );
    assert!(m
        .finalizers()
        .iter()
        .any(|f| f == "machine.sapcloud.io/machine-controller-manager"));
    assert!(driver.vm("m1").expect("vm").initialized);
    kubelet(&env.client, &node_of(&env, "m1"), "m1", true).await;
    let m = wait_phase(&env, "m1", MachinePhase::Running).await;
    let op = m.status.unwrap_or_default().last_operation;
    assert!(op
        .description
        .starts_with("Machine m1 successfully joined the cluster in"));
    assert_eq!(calls(&driver.calls.create), 1);
    assert_eq!(calls(&driver.calls.initialize), 1);
    ctl.stop().await;
}

#[tokio::test]
async fn unimplemented_initialization_still_reaches_running() {
    let Some(env) = setup("mc-unimpl").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        init_unimplemented: true,
        ..Script::default()
    }));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m2", "scripted-class", json!({})).await;
    wait_phase(&env, "m2", MachinePhase::Pending).await;
    kubelet(&env.client, &node_of(&env, "m2"), "m2", true).await;
    wait_phase(&env, "m2", MachinePhase::Running).await;
    assert_eq!(
        calls(&driver.calls.initialize),
        1,
        "called once, answered Unimplemented"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn initialization_failing_twice_crashloops_then_runs_with_a_single_create() {
    let Some(env) = setup("mc-retry").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        init_failures: 2,
        ..Script::default()
    }));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m3", "scripted-class", json!({})).await;
    let m = wait_phase(&env, "m3", MachinePhase::CrashLoopBackOff).await;
    let op = m.status.unwrap_or_default().last_operation;
    assert_eq!(op.state.as_str(), "Failed");
    assert_eq!(op.type_.as_str(), "Create");
    assert_eq!(op.error_code, "Internal");
    assert!(
        op.description.ends_with("Initialize VM Instance"),
        "{}",
        op.description
    );
    // providerID and node label are persisted before initialization
    let m = get(&env, "m3").await.expect("machine");
    assert_eq!(m.spec.provider_id, "scripted:///zone-a/m3");
    wait_phase(&env, "m3", MachinePhase::Pending).await;
    kubelet(&env.client, &node_of(&env, "m3"), "m3", true).await;
    wait_phase(&env, "m3", MachinePhase::Running).await;
    assert_eq!(
        calls(&driver.calls.create),
        1,
        "CreateMachine ran exactly once"
    );
    assert_eq!(calls(&driver.calls.initialize), 3);
    assert_eq!(driver.vm_count(), 1);
    ctl.stop().await;
}

#[tokio::test]
async fn initialization_failing_past_the_creation_timeout_fails_the_machine() {
    let Some(env) = setup("mc-timeout").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        init_always_fails: true,
        ..Script::default()
    }));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(
        &env,
        "m4",
        "scripted-class",
        json!({"creationTimeout": "3s"}),
    )
    .await;
    let m = wait_phase(&env, "m4", MachinePhase::Failed).await;
    let op = m.status.unwrap_or_default().last_operation;
    assert_eq!(op.error_code, "Uninitialized");
    assert!(op
        .description
        .starts_with("Provider error: machine codes error: code = [Uninitialized]"));
    assert_eq!(calls(&driver.calls.create), 1);
    ctl.stop().await;
}

#[tokio::test]
async fn uninitialized_status_after_a_restart_initializes_without_creating() {
    let Some(env) = setup("mc-restart").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(script(&env)));
    // The VM was created by an earlier controller that stopped before initializing.
    driver.insert_vm(
        "m5",
        ScriptedVm {
            provider_id: "scripted:///zone-a/m5".into(),
            node_name: node_of(&env, "m5"),
            initialized: false,
        },
    );
    create_machine(&env, "m5", "scripted-class", json!({})).await;
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    let m = wait_phase(&env, "m5", MachinePhase::Pending).await;
    assert_eq!(m.spec.provider_id, "scripted:///zone-a/m5");
    assert_eq!(calls(&driver.calls.create), 0);
    assert_eq!(calls(&driver.calls.initialize), 1);
    assert!(driver.vm("m5").expect("vm").initialized);
    ctl.stop().await;
}

#[tokio::test]
async fn a_vm_created_before_a_crash_is_adopted_never_created_twice() {
    let Some(env) = setup("mc-adopt").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(script(&env)));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m6", "scripted-class", json!({})).await;
    must_eventually(WAIT, "VM created", || async { driver.vm("m6") }).await;
    // Crash: stop the controller, forget what it persisted, start a new one.
    ctl.stop().await;
    let machines: Api<Machine> = env.api();
    machines
        .patch(
            "m6",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"providerID": ""}, "metadata": {"labels": {"node": null}}}),
            ),
        )
        .await
        .expect("patch");
    machines
        .patch_status(
            "m6",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentStatus": {"phase": ""}}})),
        )
        .await
        .expect("patch status");
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    let m = wait_phase(&env, "m6", MachinePhase::Pending).await;
    assert_eq!(m.spec.provider_id, "scripted:///zone-a/m6");
    assert_eq!(calls(&driver.calls.create), 1, "never created twice");
    assert_eq!(driver.vm_count(), 1);
    ctl.stop().await;
}

#[tokio::test]
async fn a_ready_node_does_not_make_an_uninitialized_machine_running() {
    let Some(env) = setup("mc-held").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        init_always_fails: true,
        ..Script::default()
    }));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m7", "scripted-class", json!({})).await;
    wait_phase(&env, "m7", MachinePhase::CrashLoopBackOff).await;
    let before = calls(&driver.calls.initialize);
    kubelet(&env.client, &node_of(&env, "m7"), "m7", true).await;
    // Two more initialization passes after the node became Ready (the first
    // may have started before the cache saw it): the pass that would have
    // made the machine Running ran, and it never is Running meanwhile.
    must_eventually(
        WAIT,
        "initialization retried twice after the node became Ready",
        || async {
            let m = get(&env, "m7").await.expect("machine");
            assert_ne!(phase(&m), MachinePhase::Running, "must not become Running");
            (calls(&driver.calls.initialize) >= before + 2).then_some(())
        },
    )
    .await;
    let m = get(&env, "m7").await.expect("machine");
    assert_eq!(
        phase(&m),
        MachinePhase::CrashLoopBackOff,
        "must not become Running"
    );
    must_see_events(
        &env,
        WAIT,
        &["InitializationPending", "InitializeMachineFailed"],
    )
    .await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_machine_stuck_in_initialization_can_be_deleted() {
    let Some(env) = setup("mc-del-init").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        init_always_fails: true,
        ..Script::default()
    }));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m8", "scripted-class", json!({})).await;
    wait_phase(&env, "m8", MachinePhase::CrashLoopBackOff).await;
    env.api::<Machine>()
        .delete("m8", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&env, "m8").await;
    assert!(driver.vm("m8").is_none(), "the VM is deleted");
    assert!(calls(&driver.calls.delete) >= 1);
    ctl.stop().await;
}

#[tokio::test]
async fn deleting_a_running_machine_drains_respecting_pdbs_and_skipping_daemonsets() {
    let Some(env) = setup("mc-drain").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(script(&env)));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m9", "scripted-class", json!({})).await;
    wait_phase(&env, "m9", MachinePhase::Pending).await;
    kubelet(&env.client, &node_of(&env, "m9"), "m9", true).await;
    wait_phase(&env, "m9", MachinePhase::Running).await;

    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "c", "image": "agent"}]}}}
    }))
    .expect("ds");
    let ds = env
        .api::<DaemonSet>()
        .create(&PostParams::default(), &ds)
        .await
        .expect("ds");
    let pods: Api<Pod> = env.api();
    let pod = |name: &str, labels: serde_json::Value, owner: Option<serde_json::Value>| -> Pod {
        let mut p = json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node_of(&env, "m9"), "containers": [{"name": "c", "image": "x"}]}
        });
        if let Some(o) = owner {
            p["metadata"]["ownerReferences"] = json!([o]);
        }
        serde_json::from_value(p).expect("pod")
    };
    pods.create(
        &PostParams::default(),
        &pod("web", json!({"app": "web"}), None),
    )
    .await
    .expect("web");
    // Play kubelet: the pod runs and is Ready (a Pending pod may always be evicted).
    pods.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .expect("pod status");
    pods.create(
        &PostParams::default(),
        &pod(
            "agent-1",
            json!({"app": "agent"}),
            Some(json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds.uid(), "controller": true})),
        ),
    )
    .await
    .expect("agent pod");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .expect("pdb");
    env.api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &pdb)
        .await
        .expect("pdb");

    must_eventually(
        WAIT,
        "the PDB is observed by the disruption controller",
        || async {
            env.api::<PodDisruptionBudget>()
                .get("web")
                .await
                .ok()
                .and_then(|p| p.status)
                .filter(|s| s.observed_generation.is_some() && s.current_healthy == Some(1))
                .map(|_| ())
        },
    )
    .await;
    env.api::<Machine>()
        .delete("m9", &DeleteParams::default())
        .await
        .expect("delete");
    // The PDB blocks the eviction: the machine waits in the drain step.
    must_eventually(WAIT, "drain step reached", || async {
        get(&env, "m9").await.filter(|m| {
            m.status.clone().unwrap_or_default().current_status.phase == MachinePhase::Terminating
        })
    })
    .await;
    // minAvailable 1 of 1 healthy pod, none being disrupted: the budget can
    // never allow an eviction, and the drain fails at once saying so, with
    // the reference's text (it is retried on the next sync).
    must_eventually(
        WAIT,
        "the drain fails on the misconfigured budget",
        || async {
            let m = get(&env, "m9").await?;
            let description = m.status.unwrap_or_default().last_operation.description;
            (description.contains("error while evicting pod \"web\": pod disruption budget")
                && description
                    .contains("/web is misconfigured and requires zero voluntary evictions"))
            .then_some(())
        },
    )
    .await;
    // Several eviction retries (each one eviction_retry_interval apart).
    must_hold_for(
        config(&env.namespace).eviction_retry_interval * 4,
        "the PDB-covered pod is not evicted while the budget allows no disruption",
        || async {
            pods.get_opt("web")
                .await
                .expect("get")
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        },
    )
    .await;
    assert!(driver.vm("m9").is_some(), "the VM outlives the drain");
    // The budget goes away; the eviction goes through. Play kubelet: remove terminating pods.
    env.api::<PodDisruptionBudget>()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete pdb");
    must_eventually(WAIT, "web pod evicted", || async {
        match pods.get_opt("web").await.expect("get") {
            None => Some(()),
            Some(p) if p.metadata.deletion_timestamp.is_some() => {
                let _ = pods
                    .delete(
                        "web",
                        &DeleteParams {
                            grace_period_seconds: Some(0),
                            ..Default::default()
                        },
                    )
                    .await;
                None
            }
            Some(_) => None,
        }
    })
    .await;
    wait_gone(&env, "m9").await;
    assert!(driver.vm("m9").is_none(), "VM deleted");
    let nodes: Api<Node> = Api::all(env.client.clone());
    assert!(
        nodes
            .get_opt(&node_of(&env, "m9"))
            .await
            .expect("node")
            .is_none(),
        "node deleted"
    );
    // The Node's deletion still routes to the machine while the cache shows
    // it: no reconcile of that older copy repeats the deletion, for the
    // longest retry period (any requeue of the key comes within it).
    must_hold_for(
        config(&env.namespace).long_retry,
        "the VM is deleted once",
        || async { ScriptedDriver::count(&driver.calls.delete) == 1 },
    )
    .await;
    let agent = pods.get_opt("agent-1").await.expect("agent");
    assert!(
        agent.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "DaemonSet pod not evicted"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_node_not_ready_past_the_health_timeout_fails_the_machine() {
    let Some(env) = setup("mc-health").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(script(&env)));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(
        &env,
        "m10",
        "scripted-class",
        json!({"healthTimeout": "3s"}),
    )
    .await;
    wait_phase(&env, "m10", MachinePhase::Pending).await;
    kubelet(&env.client, &node_of(&env, "m10"), "m10", true).await;
    wait_phase(&env, "m10", MachinePhase::Running).await;
    kubelet(&env.client, &node_of(&env, "m10"), "m10", false).await;
    wait_phase(&env, "m10", MachinePhase::Unknown).await;
    let m = wait_phase(&env, "m10", MachinePhase::Failed).await;
    let op = m.status.unwrap_or_default().last_operation;
    assert!(
        op.description.contains("health checks failing since last"),
        "{}",
        op.description
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_bad_class_or_missing_secret_is_reported_and_creates_no_vm() {
    let Some(env) = setup("mc-bad").await else {
        return;
    };
    create_class(&env, "no-secret", "does-not-exist", json!({"image": "x"})).await;
    let driver = Arc::new(ScriptedDriver::new(script(&env)));
    let ctl = start(&env, driver.clone(), true, config(&env.namespace));
    create_machine(&env, "m11", "no-secret", json!({})).await;
    create_machine(&env, "m11b", "missing-class", json!({})).await;
    let m = must_eventually(WAIT, "status message for the missing secret", || async {
        get(&env, "m11").await.filter(|m| {
            !m.status
                .clone()
                .unwrap_or_default()
                .last_operation
                .description
                .is_empty()
        })
    })
    .await;
    let op = m.status.unwrap_or_default().last_operation;
    assert!(
        op.description.contains("does-not-exist") && op.description.contains("not found"),
        "{}",
        op.description
    );
    let m = must_eventually(WAIT, "status message for the missing class", || async {
        get(&env, "m11b").await.filter(|m| {
            !m.status
                .clone()
                .unwrap_or_default()
                .last_operation
                .description
                .is_empty()
        })
    })
    .await;
    assert!(m
        .status
        .unwrap_or_default()
        .last_operation
        .description
        .contains("MachineClass"));
    must_see_events(&env, WAIT, &["SecretNotFound", "MachineClassNotFound"]).await;
    assert_eq!(calls(&driver.calls.create), 0);
    assert_eq!(driver.vm_count(), 0);
    ctl.stop().await;
}

#[tokio::test]
async fn without_a_target_cluster_the_machine_becomes_available_with_addresses() {
    let Some(env) = setup("mc-notarget").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(script(&env)));
    let ctl = start(&env, driver.clone(), false, config(&env.namespace));
    create_machine(&env, "m13", "scripted-class", json!({})).await;
    let m = wait_phase(&env, "m13", MachinePhase::Available).await;
    assert!(!m.labels().contains_key("node"));
    let addrs = m.status.unwrap_or_default().addresses;
    assert_eq!(addrs.first().map(|a| a.type_.as_str()), Some("Hostname"));
    env.api::<Machine>()
        .delete("m13", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&env, "m13").await;
    assert_eq!(driver.vm_count(), 0);
    ctl.stop().await;
}

#[tokio::test]
async fn with_two_replicas_only_the_lease_holder_acts() {
    let Some(env) = setup("mc-leader").await else {
        return;
    };
    let a = Arc::new(ScriptedDriver::new(script(&env)));
    let b = Arc::new(ScriptedDriver::new(script(&env)));
    let run = |driver: Arc<ScriptedDriver>, id: &str| {
        let ctx = mc::context(&env, "scripted", driver, true, config(&env.namespace));
        let lc = mcm_runtime::leader::LeaderConfig::new(&env.namespace, id);
        let client = env.client.clone();
        tokio::spawn(async move {
            let _ = mcm_runtime::leader::run_as_leader(
                client,
                lc,
                machine::run(ctx, std::future::pending()),
            )
            .await;
        })
    };
    let ta = run(a.clone(), "replica-a");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tb = run(b.clone(), "replica-b");
    create_machine(&env, "m12", "scripted-class", json!({})).await;
    wait_phase(&env, "m12", MachinePhase::Pending).await;
    // Two of the follower's election attempts: it never leads, never calls.
    let retry = mcm_runtime::leader::LeaderConfig::new(&env.namespace, "x").retry_period;
    must_hold_for(retry * 2, "the follower made no call", || async {
        calls(&b.calls.create) + calls(&b.calls.status) == 0
    })
    .await;
    assert_eq!(calls(&a.calls.create), 1, "the leader created the VM");
    ta.abort();
    tb.abort();
}

/// Records the userData of every CreateMachine, then lets the scripted
/// cloud answer.
struct UserDataRecorder {
    inner: Arc<ScriptedDriver>,
    seen: std::sync::Mutex<Vec<Vec<u8>>>,
}

#[async_trait::async_trait]
impl mcm_driver::Driver for UserDataRecorder {
    async fn create_machine(
        &self,
        r: &mcm_driver::CreateMachineRequest,
    ) -> mcm_driver::DriverResult<mcm_driver::CreateMachineResponse> {
        if let Some(ud) = r.secret.data.as_ref().and_then(|d| d.get("userData")) {
            self.seen.lock().unwrap().push(ud.0.clone());
        }
        self.inner.create_machine(r).await
    }
    async fn initialize_machine(
        &self,
        r: &mcm_driver::InitializeMachineRequest,
    ) -> mcm_driver::DriverResult<mcm_driver::InitializeMachineResponse> {
        self.inner.initialize_machine(r).await
    }
    async fn delete_machine(
        &self,
        r: &mcm_driver::DeleteMachineRequest,
    ) -> mcm_driver::DriverResult<mcm_driver::DeleteMachineResponse> {
        self.inner.delete_machine(r).await
    }
    async fn get_machine_status(
        &self,
        r: &mcm_driver::GetMachineStatusRequest,
    ) -> mcm_driver::DriverResult<mcm_driver::GetMachineStatusResponse> {
        self.inner.get_machine_status(r).await
    }
    async fn list_machines(
        &self,
        r: &mcm_driver::ListMachinesRequest,
    ) -> mcm_driver::DriverResult<mcm_driver::ListMachinesResponse> {
        self.inner.list_machines(r).await
    }
}

use mcm_driver::testing::GZIPPED_CLOUD_CONFIG;

#[tokio::test]
async fn gzipped_userdata_reaches_the_driver_byte_for_byte() {
    let Some(env) = TestEnv::new("userdata-gzip").await else {
        return;
    };
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("gzip-creds".into()),
            ..Default::default()
        },
        data: Some(
            [(
                "userData".to_string(),
                k8s_openapi::ByteString(GZIPPED_CLOUD_CONFIG.to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    env.api::<k8s_openapi::api::core::v1::Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    env.create_class(
        "gzip-class",
        "recorded",
        "gzip-creds",
        json!({"image": "x"}),
    )
    .await
    .expect("class");
    let recorder = Arc::new(UserDataRecorder {
        inner: Arc::new(ScriptedDriver::new(Script::default())),
        seen: Default::default(),
    });
    let running = mc::start(
        &env,
        "recorded",
        recorder.clone(),
        false,
        config(&env.namespace),
    );
    create_machine(&env, "gz", "gzip-class", json!({})).await;
    let seen = must_eventually(WAIT, "a CreateMachine call", || async {
        recorder.seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(seen, GZIPPED_CLOUD_CONFIG, "userData corrupted on its way");
    running.stop().await;
}
