//! Orphan-VM collection and the API-server freeze, against the real control plane.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use mcm_api::{Machine, MachineClass};
use mcm_driver::testing::{Script, ScriptedDriver, ScriptedVm};
use mcm_runtime::safety::{self, OrphanTracker, SafetyConfig};
use mcm_runtime::{metrics::Metrics, Context, DriverRegistry};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

async fn setup(test: &str) -> Option<TestEnv> {
    let env = TestEnv::new(test).await?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = env.api();
    let secret = serde_json::from_value(
        json!({"metadata": {"name": "creds"}, "stringData": {"userData": "x"}}),
    )
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let class: MachineClass = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "c"}, "provider": "scripted", "providerSpec": {"image": "x"},
        "secretRef": {"name": "creds", "namespace": env.namespace},
    }))
    .expect("class");
    env.api::<MachineClass>()
        .create(&PostParams::default(), &class)
        .await
        .expect("class");
    Some(env)
}

fn context(env: &TestEnv, driver: Arc<ScriptedDriver>, target: Option<Client>) -> Arc<Context> {
    let mut drivers = DriverRegistry::new();
    drivers.register("scripted", driver);
    let mut registry = prometheus_client::registry::Registry::default();
    let cfg = mcm_runtime::Config {
        namespace: env.namespace.clone(),
        apiserver_statuscheck_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    Context::new(
        env.client.clone(),
        target,
        cfg,
        drivers,
        Arc::new(Metrics::new(&mut registry)),
    )
}

fn orphan(driver: &ScriptedDriver, name: &str) {
    driver.insert_vm(
        name,
        ScriptedVm {
            provider_id: format!("scripted:///zone-a/{name}"),
            node_name: name.into(),
            initialized: true,
        },
    );
}

#[tokio::test]
async fn an_orphan_vm_is_deleted_only_after_the_grace_period() {
    let Some(env) = setup("safety-orphan").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    orphan(&driver, "lost-1");
    let ctx = context(&env, driver.clone(), Some(env.client.clone()));
    let mut tracker = OrphanTracker::default();
    let grace = Duration::from_secs(2);
    // The VM's Machine existed in this namespace, and went away without it.
    machine(&env, "lost-1", "", "").await;
    let busy = safety::collect_orphans(&ctx, &mut tracker, grace)
        .await
        .expect("collect");
    assert!(busy.is_empty(), "a machine being created keeps its VM");
    delete_machine(&env, "lost-1").await;
    let first = safety::collect_orphans(&ctx, &mut tracker, grace)
        .await
        .expect("collect");
    assert!(
        first.is_empty(),
        "a VM seen orphaned for the first time is kept"
    );
    assert!(driver.vm("lost-1").is_some());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let second = safety::collect_orphans(&ctx, &mut tracker, grace)
        .await
        .expect("collect");
    assert_eq!(second, vec!["scripted:///zone-a/lost-1".to_string()]);
    assert!(
        driver.vm("lost-1").is_none(),
        "deleted after the grace period"
    );
}

#[tokio::test]
async fn orphans_are_not_deleted_while_an_api_server_is_unreachable() {
    let Some(env) = setup("safety-freeze").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    orphan(&driver, "lost-2");
    // The target API server does not answer (nothing listens on this port).
    let mut dead = Config::new("https://127.0.0.1:1".parse().expect("url"));
    dead.connect_timeout = Some(Duration::from_millis(200));
    let target = Client::try_from(dead).expect("client");
    let ctx = context(&env, driver.clone(), Some(target));
    let loop_ctx = ctx.clone();
    let task = tokio::spawn(safety::run(
        loop_ctx,
        SafetyConfig {
            orphan_period: Duration::from_millis(200),
            orphan_grace: Duration::ZERO,
            apiserver_check_period: Duration::from_millis(200),
        },
    ));
    must_eventually(
        Duration::from_secs(20),
        "the controller freezes",
        || async { ctx.is_frozen().then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        driver.vm("lost-2").is_some(),
        "no orphan collection while frozen"
    );
    let mut tracker = OrphanTracker::default();
    let none = safety::collect_orphans(&ctx, &mut tracker, Duration::ZERO)
        .await
        .expect("collect");
    assert!(none.is_empty());
    task.abort();
}

/// A Machine of class `c` with that providerID and phase ("" for none).
async fn machine(env: &TestEnv, name: &str, provider_id: &str, phase: &str) {
    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": name},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}, "providerID": provider_id},
    }))
    .expect("machine");
    let api: Api<Machine> = env.api();
    api.create(&PostParams::default(), &m)
        .await
        .expect("create machine");
    if !phase.is_empty() {
        let status = json!({"status": {"currentStatus": {"phase": phase}}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("machine status");
    }
}

async fn delete_machine(env: &TestEnv, name: &str) {
    env.api::<Machine>()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete machine");
    must_eventually(Duration::from_secs(10), "machine gone", || async {
        env.api::<Machine>()
            .get_opt(name)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
}

/// Issue 17, finding 6: two namespaces whose classes share the cluster tag
/// (one cloud, the same listing): neither collects the other's VMs; a true
/// orphan of one namespace (its Machine is gone) is collected by that one.
#[tokio::test]
async fn two_namespaces_sharing_a_cluster_tag_never_collect_each_others_vms() {
    let Some(a) = setup("safety-ns-a").await else {
        return;
    };
    let Some(b) = setup("safety-ns-b").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    for vm in ["a-1", "a-gone", "b-1"] {
        orphan(&driver, vm);
    }
    // a-1's providerID is stored in another form than the cloud lists it.
    machine(&a, "a-1", "SCRIPTED:///zone-a/a-1/", "Running").await;
    machine(&a, "a-gone", "scripted:///zone-a/a-gone", "Running").await;
    machine(&b, "b-1", "scripted:///zone-a/b-1", "Running").await;
    let ctx_a = context(&a, driver.clone(), None);
    let ctx_b = context(&b, driver.clone(), None);
    let (mut ta, mut tb) = (OrphanTracker::default(), OrphanTracker::default());
    for _ in 0..2 {
        let da = safety::collect_orphans(&ctx_a, &mut ta, Duration::ZERO)
            .await
            .expect("collect a");
        let db = safety::collect_orphans(&ctx_b, &mut tb, Duration::ZERO)
            .await
            .expect("collect b");
        assert!(da.is_empty() && db.is_empty(), "{da:?} {db:?}");
    }
    // a-gone's Machine is removed without its VM (e.g. its finalizer was dropped by hand).
    delete_machine(&a, "a-gone").await;
    let db = safety::collect_orphans(&ctx_b, &mut tb, Duration::ZERO)
        .await
        .expect("collect b");
    assert!(db.is_empty(), "b never saw a-gone: not its orphan: {db:?}");
    let da = safety::collect_orphans(&ctx_a, &mut ta, Duration::ZERO)
        .await
        .expect("collect a");
    assert_eq!(da, vec!["scripted:///zone-a/a-gone".to_string()]);
    for vm in ["a-1", "b-1"] {
        assert!(driver.vm(vm).is_some(), "{vm} lives");
    }
    assert!(
        driver.vm("a-gone").is_none(),
        "the true orphan is collected"
    );
    assert!(ScriptedDriver::count(&driver.calls.list) >= 6);
}
