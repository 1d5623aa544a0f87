//! Orphan-VM collection and the API-server freeze, against the real control plane.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use mcm_api::{Machine, MachineClass};
use mcm_driver::testing::{Script, ScriptedDriver, ScriptedVm};
use mcm_driver::{Driver, MachineRequest};
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
    context_with(env, driver, target, SafetyConfig::default())
}

/// A context whose safety loops run with `safety` (the API-server freeze after 1 s).
fn context_with(
    env: &TestEnv,
    driver: Arc<ScriptedDriver>,
    target: Option<Client>,
    safety: SafetyConfig,
) -> Arc<Context> {
    let mut drivers = DriverRegistry::new();
    drivers.register("scripted", driver);
    let mut registry = prometheus_client::registry::Registry::default();
    let cfg = mcm_runtime::Config {
        namespace: env.namespace.clone(),
        safety: SafetyConfig {
            apiserver_statuscheck_timeout: Duration::from_secs(1),
            ..safety
        },
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

/// A VM made out of band for the class `c`'s cluster, without identity.
fn out_of_band(driver: &ScriptedDriver, name: &str) -> String {
    let provider_id = format!("scripted:///zone-a/{name}");
    driver.insert_vm_with(
        name,
        ScriptedVm {
            provider_id: provider_id.clone(),
            node_name: name.into(),
            initialized: true,
        },
        Some("c"),
        None,
    );
    provider_id
}

/// Creates the VM of a Machine of the namespace through the driver (so it
/// carries the Machine's identity), and records its providerID and phase on
/// the Machine.
async fn vm_of(env: &TestEnv, driver: &ScriptedDriver, name: &str, phase: &str) -> String {
    let api: Api<Machine> = env.api();
    let m = api.get(name).await.expect("machine");
    let class = env
        .api::<MachineClass>()
        .get(&m.spec.class.name)
        .await
        .expect("class");
    let created = driver
        .create_machine(&MachineRequest {
            machine: m,
            machine_class: class,
            secret: Default::default(),
        })
        .await
        .expect("create VM");
    let patch = json!({"spec": {"providerID": created.provider_id}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("providerID");
    if !phase.is_empty() {
        let status = json!({"status": {"currentStatus": {"phase": phase}}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("machine status");
    }
    created.provider_id
}

async fn pass(ctx: &Context, tracker: &mut OrphanTracker, grace: Duration) -> Vec<String> {
    safety::collect_orphans(ctx, tracker, grace)
        .await
        .expect("collect")
}

/// A VM that carries this namespace's identity and whose Machine is gone is
/// collected, but only after it was seen orphaned for the grace period.
#[tokio::test]
async fn an_orphan_vm_is_deleted_only_after_the_grace_period() {
    let Some(env) = setup("safety-orphan").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    let ctx = context(&env, driver.clone(), Some(env.client.clone()));
    let mut tracker = OrphanTracker::default();
    let grace = Duration::from_secs(2);
    machine(&env, "lost-1", "", "").await;
    let pid = vm_of(&env, &driver, "lost-1", "").await;
    assert!(
        pass(&ctx, &mut tracker, grace).await.is_empty(),
        "a machine being created keeps its VM"
    );
    delete_machine(&env, "lost-1").await;
    assert!(
        pass(&ctx, &mut tracker, grace).await.is_empty(),
        "a VM seen orphaned for the first time is kept"
    );
    assert!(driver.vm_by_provider_id(&pid).is_some());
    tokio::time::sleep(grace + Duration::from_millis(100)).await;
    assert_eq!(pass(&ctx, &mut tracker, grace).await, vec![pid.clone()]);
    assert!(
        driver.vm_by_provider_id(&pid).is_none(),
        "deleted after the grace period"
    );
}

/// The freeze is what keeps a collectable orphan alive while an API server
/// is unreachable: the same VM is collected as soon as the controller is no
/// longer frozen.
#[tokio::test]
async fn orphans_are_not_deleted_while_an_api_server_is_unreachable() {
    let Some(env) = setup("safety-freeze").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    // A VM of this namespace whose Machine is gone: an orphan.
    machine(&env, "lost-2", "", "Running").await;
    let pid = vm_of(&env, &driver, "lost-2", "Running").await;
    delete_machine(&env, "lost-2").await;
    // The target API server does not answer (nothing listens on this port).
    let mut dead = Config::new("https://127.0.0.1:1".parse().expect("url"));
    dead.connect_timeout = Some(Duration::from_millis(200));
    let target = Client::try_from(dead).expect("client");
    let period = Duration::from_millis(200);
    let ctx = context_with(
        &env,
        driver.clone(),
        Some(target),
        SafetyConfig {
            orphan_period: period,
            orphan_grace: Duration::ZERO,
            apiserver_check_period: period,
            ..SafetyConfig::default()
        },
    );
    let task = tokio::spawn(safety::run(ctx.clone()));
    must_eventually(
        Duration::from_secs(20),
        "the controller freezes",
        || async { ctx.is_frozen().then_some(()) },
    )
    .await;
    // Several orphan periods (and probe ticks) pass while frozen.
    tokio::time::sleep(period * 10).await;
    assert!(
        driver.vm_by_provider_id(&pid).is_some(),
        "no orphan collection while frozen"
    );
    task.abort();
    let mut tracker = OrphanTracker::default();
    let none = pass(&ctx, &mut tracker, Duration::ZERO).await;
    assert!(
        none.is_empty(),
        "a pass while frozen deletes nothing: {none:?}"
    );
    assert!(driver.vm_by_provider_id(&pid).is_some());
    assert_eq!(
        ScriptedDriver::count(&driver.calls.delete),
        0,
        "no DeleteMachine while frozen"
    );
    // The control: unfrozen, the same VM is collected.
    ctx.set_frozen(false);
    assert_eq!(
        pass(&ctx, &mut tracker, Duration::ZERO).await,
        vec![pid.clone()]
    );
    assert!(driver.vm_by_provider_id(&pid).is_none());
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

/// Issue 17, finding 6 and issue 22, finding 5: two namespaces whose classes
/// share the cluster tag (one cloud, the same listing) and a machine name
/// (`w`): neither collects the other's VMs; a true orphan of one namespace
/// (its Machine is gone) is collected by that one, and only its own VM of
/// the colliding name.
#[tokio::test]
async fn two_namespaces_sharing_a_cluster_tag_and_a_machine_name_never_collect_each_others_vms() {
    let Some(a) = setup("safety-ns-a").await else {
        return;
    };
    let Some(b) = setup("safety-ns-b").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    for (env, name) in [
        (&a, "a-1"),
        (&a, "a-gone"),
        (&a, "w"),
        (&b, "b-1"),
        (&b, "w"),
    ] {
        machine(env, name, "", "").await;
    }
    let a1 = vm_of(&a, &driver, "a-1", "Running").await;
    let a_gone = vm_of(&a, &driver, "a-gone", "Running").await;
    let a_w = vm_of(&a, &driver, "w", "Running").await;
    let b1 = vm_of(&b, &driver, "b-1", "Running").await;
    let b_w = vm_of(&b, &driver, "w", "Running").await;
    assert_ne!(a_w, b_w, "two VMs of one name");
    // a-1's providerID is stored in another form than the cloud lists it.
    let patch = json!({"spec": {"providerID": a1.to_uppercase() + "/"}});
    a.api::<Machine>()
        .patch("a-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("providerID");
    let ctx_a = context(&a, driver.clone(), None);
    let ctx_b = context(&b, driver.clone(), None);
    let (mut ta, mut tb) = (OrphanTracker::default(), OrphanTracker::default());
    for _ in 0..2 {
        let da = pass(&ctx_a, &mut ta, Duration::ZERO).await;
        let db = pass(&ctx_b, &mut tb, Duration::ZERO).await;
        assert!(da.is_empty() && db.is_empty(), "{da:?} {db:?}");
    }
    // a's Machines a-gone and w are removed without their VMs (e.g. their
    // finalizers were dropped by hand).
    delete_machine(&a, "a-gone").await;
    delete_machine(&a, "w").await;
    let db = pass(&ctx_b, &mut tb, Duration::ZERO).await;
    assert!(db.is_empty(), "a's VMs are not b's orphans: {db:?}");
    let mut da = pass(&ctx_a, &mut ta, Duration::ZERO).await;
    da.sort();
    let mut want = vec![a_gone.clone(), a_w.clone()];
    want.sort();
    assert_eq!(da, want);
    for (vm, pid) in [("a-1", &a1), ("b-1", &b1), ("b's w", &b_w)] {
        assert!(driver.vm_by_provider_id(pid).is_some(), "{vm} lives");
    }
    assert_eq!(
        driver.owner_of(&b_w).map(|o| o.namespace),
        Some(b.namespace.clone())
    );
    assert!(
        driver.vm_by_provider_id(&a_gone).is_none(),
        "the true orphan is collected"
    );
    assert!(
        driver.vm_by_provider_id(&a_w).is_none(),
        "a's w is collected"
    );
    assert_eq!(ScriptedDriver::count(&driver.calls.delete), 2);
}

/// Issue 22, finding 5: the evidence lives on the VM, so a controller that
/// restarts inside the grace window (a fresh process: nothing in memory)
/// still collects the orphan of its namespace.
#[tokio::test]
async fn an_orphan_with_this_namespaces_identity_is_collected_after_a_controller_restart() {
    let Some(env) = setup("safety-restart").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    machine(&env, "r-1", "", "").await;
    let pid = vm_of(&env, &driver, "r-1", "Running").await;
    let grace = Duration::from_millis(500);
    let before = context(&env, driver.clone(), None);
    let mut tracker = OrphanTracker::default();
    assert!(pass(&before, &mut tracker, grace).await.is_empty());
    delete_machine(&env, "r-1").await;
    assert!(
        pass(&before, &mut tracker, grace).await.is_empty(),
        "first seen orphaned"
    );
    drop((before, tracker));
    // The restarted controller.
    let after = context(&env, driver.clone(), None);
    let mut tracker = OrphanTracker::default();
    assert!(pass(&after, &mut tracker, grace).await.is_empty());
    tokio::time::sleep(grace + Duration::from_millis(100)).await;
    assert_eq!(pass(&after, &mut tracker, grace).await, vec![pid.clone()]);
    assert!(driver.vm_by_provider_id(&pid).is_none());
}

/// Issue 22, finding 5: as the reference does, a VM made out of band with
/// the class's cluster and role tags, without identity and without a
/// Machine of its name, is collected after the grace period; one tagged for
/// another cluster is not listed and stays.
#[tokio::test]
async fn an_out_of_band_vm_with_the_class_tags_is_collected_after_the_grace_period() {
    let Some(env) = setup("safety-oob").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    let oob = out_of_band(&driver, "oob-1");
    let elsewhere = "scripted:///zone-a/oob-other".to_string();
    driver.insert_vm_with(
        "oob-other",
        ScriptedVm {
            provider_id: elsewhere.clone(),
            ..Default::default()
        },
        Some("another-cluster"),
        None,
    );
    let ctx = context(&env, driver.clone(), None);
    let mut tracker = OrphanTracker::default();
    let grace = Duration::from_millis(500);
    assert!(
        pass(&ctx, &mut tracker, grace).await.is_empty(),
        "not before the grace period"
    );
    assert!(driver.vm_by_provider_id(&oob).is_some());
    tokio::time::sleep(grace + Duration::from_millis(100)).await;
    assert_eq!(pass(&ctx, &mut tracker, grace).await, vec![oob.clone()]);
    assert!(driver.vm_by_provider_id(&oob).is_none());
    assert!(driver.vm_by_provider_id(&elsewhere).is_some());
}

/// Issue 22, finding 3: the class's location is edited under a Running
/// machine; the provider now lists its VM under a providerID built from the
/// new location. The VM carries the Machine's identity and is never
/// collected. Nor is a preserved machine's VM (upstream #1146).
#[tokio::test]
async fn a_running_machines_vm_survives_an_edit_of_its_class_location() {
    let Some(env) = setup("safety-location").await else {
        return;
    };
    let classes: Api<MachineClass> = env.api();
    let set_location = |loc: &str| json!({"providerSpec": {"image": "x", "location": loc}});
    classes
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(&set_location("westeurope")),
        )
        .await
        .expect("location");
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    machine(&env, "run-1", "", "").await;
    machine(&env, "kept-1", "", "").await;
    let running = vm_of(&env, &driver, "run-1", "Running").await;
    let preserved = vm_of(&env, &driver, "kept-1", "Failed").await;
    let annotate =
        json!({"metadata": {"annotations": {mcm_api::constants::PRESERVE_ANNOTATION: "now"}}});
    env.api::<Machine>()
        .patch("kept-1", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .expect("preserve");
    assert_eq!(running, "scripted:///westeurope/run-1");
    classes
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(&set_location("northeurope")),
        )
        .await
        .expect("location");
    let ctx = context(&env, driver.clone(), None);
    let mut tracker = OrphanTracker::default();
    for _ in 0..3 {
        let d = pass(&ctx, &mut tracker, Duration::ZERO).await;
        assert!(d.is_empty(), "{d:?}");
    }
    assert!(driver.vm_by_provider_id(&running).is_some());
    assert!(driver.vm_by_provider_id(&preserved).is_some());
    assert_eq!(ScriptedDriver::count(&driver.calls.delete), 0);
    assert!(ScriptedDriver::count(&driver.calls.list) >= 3);
}
