//! Hot update by the Machine controller against the real control plane,
//! with the scriptable test driver (design: docs/design/hot-update.md): the
//! record written at creation, a class edit applied in place after a failed
//! first call, a change that needs a new VM reported without any VM call, and
//! a machine whose updates fail deleted all the same. The tests play kubelet
//! by writing Node objects.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachineOperationType, MachinePhase, MachineState};
use mcm_core::machine::update::AppliedSpec;
use mcm_driver::budget::BucketLimit;
use mcm_driver::testing::{Script, ScriptedDriver};
use mcm_driver::CloudOp;
use mcm_testenv::{must_eventually, must_hold_for, TestEnv};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

use crate::machine_common as mc;
use mc::{kubelet, node_of, phase, Running, WAIT};

const CLASS: &str = "scripted-class";

fn start(env: &TestEnv, driver: Arc<ScriptedDriver>) -> Running {
    mc::start(env, "scripted", driver, true, mc::config(&env.namespace))
}

fn spec(image: &str, team: &str) -> Value {
    json!({"image": image, "tags": {"team": team}})
}

/// A namespace with the class and a secret, and the controller with a
/// driver that changes `tags` in place.
async fn controller(test: &str, script: Script) -> Option<(TestEnv, Arc<ScriptedDriver>, Running)> {
    let env = mc::namespace_with_secret(test, "#!/bin/sh\necho hi").await?;
    env.create_class(CLASS, "scripted", "creds", spec("x", "a"))
        .await
        .expect("create class");
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        update_in_place: vec!["tags".into()],
        ..script
    }));
    let ctl = start(&env, driver.clone());
    Some((env, driver, ctl))
}

/// [`controller`] and a Running machine `m1`.
async fn running_machine(
    test: &str,
    script: Script,
) -> Option<(TestEnv, Arc<ScriptedDriver>, Running)> {
    let (env, driver, ctl) = controller(test, script).await?;
    mc::create_machine(&env, "m1", CLASS, json!({})).await;
    wait(&env, "m1 Pending", |m| phase(m) == MachinePhase::Pending).await;
    kubelet(&env.client, &node_of(&env, "m1"), "m1", true).await;
    wait(&env, "m1 Running", |m| phase(m) == MachinePhase::Running).await;
    Some((env, driver, ctl))
}

fn hash(m: &Machine) -> Option<String> {
    m.annotations()
        .get(c::LAST_APPLIED_PROVIDER_SPEC_HASH_ANNOTATION)
        .cloned()
}

/// Waits until the machine `m1` satisfies `check`.
async fn wait(env: &TestEnv, what: &str, check: impl Fn(&Machine) -> bool) -> Machine {
    mc::wait_for(env, "m1", what, check).await
}

async fn set_spec(env: &TestEnv, spec: &Value) {
    env.api::<MachineClass>()
        .patch(
            CLASS,
            &PatchParams::default(),
            &Patch::Merge(&json!({"providerSpec": spec})),
        )
        .await
        .expect("patch class");
}

fn calls(c: &std::sync::atomic::AtomicU32) -> u32 {
    ScriptedDriver::count(c)
}

#[tokio::test]
async fn a_class_edit_is_applied_in_place_after_a_failed_call_and_recorded() {
    let Some((env, driver, ctl)) = running_machine(
        "hot-in-place",
        Script {
            update_failures: 1,
            ..Script::default()
        },
    )
    .await
    else {
        return;
    };
    let m = wait(&env, "the record", |m| hash(m).is_some()).await;
    assert_eq!(
        hash(&m),
        Some(AppliedSpec::of(CLASS, &spec("x", "a")).hash),
        "the spec the VM was created with"
    );
    assert_eq!(
        m.annotations()
            .get(c::LAST_APPLIED_PROVIDER_SPEC_ANNOTATION)
            .map(String::as_str),
        Some(r#"{"image":"x","tags":{"team":"a"}}"#)
    );
    let b = spec("x", "b");
    set_spec(&env, &b).await;
    let want = AppliedSpec::of(CLASS, &b).hash;
    let m = wait(&env, "the new spec recorded after the update", |m| {
        let op = m.status.clone().unwrap_or_default().last_operation;
        hash(m).as_ref() == Some(&want) && op.state == MachineState::Successful
    })
    .await;
    let op = m.status.clone().unwrap_or_default().last_operation;
    assert_eq!(op.type_, MachineOperationType::Update);
    assert!(op.description.contains("tags.team"), "{op:?}");
    assert_eq!(phase(&m), MachinePhase::Running);
    assert_eq!(calls(&driver.calls.update), 2, "one failure, one retry");
    assert_eq!(driver.applied_spec(&m.spec.provider_id), Some(b));
    assert_eq!((calls(&driver.calls.create), driver.vm_count()), (1, 1));
    ctl.stop().await;
}

#[tokio::test]
async fn a_change_that_needs_a_new_vm_is_reported_and_nothing_is_called() {
    let Some((env, driver, ctl)) = running_machine("hot-replace", Script::default()).await else {
        return;
    };
    wait(&env, "the record", |m| hash(m).is_some()).await;
    set_spec(&env, &spec("y", "a")).await;
    let m = wait(&env, "the condition naming image", |m| {
        m.status
            .clone()
            .unwrap_or_default()
            .conditions
            .iter()
            .any(|x| {
                x.type_ == c::HOT_UPDATE_CONDITION
                    && x.status == "False"
                    && x.message.as_deref().is_some_and(|t| t.contains("image"))
            })
    })
    .await;
    assert!(
        m.status
            .clone()
            .unwrap_or_default()
            .conditions
            .iter()
            .any(|x| x.type_ == "Ready"),
        "the Node's conditions stay"
    );
    must_hold_for(Duration::from_secs(2), "no VM call, no new VM", || async {
        calls(&driver.calls.update) == 0
            && calls(&driver.calls.create) == 1
            && calls(&driver.calls.delete) == 0
            && driver.vm_count() == 1
    })
    .await;
    assert_eq!(phase(&m), MachinePhase::Running);
    ctl.stop().await;
}

#[tokio::test]
async fn a_machine_whose_updates_keep_failing_is_deleted_all_the_same() {
    let Some((env, driver, ctl)) = running_machine(
        "hot-delete",
        Script {
            update_failures: u32::MAX,
            ..Script::default()
        },
    )
    .await
    else {
        return;
    };
    wait(&env, "the record", |m| hash(m).is_some()).await;
    set_spec(&env, &spec("x", "b")).await;
    wait(&env, "a failed update", |m| {
        let op = m.status.clone().unwrap_or_default().last_operation;
        op.type_ == MachineOperationType::Update && op.state == MachineState::Failed
    })
    .await;
    env.api::<Machine>()
        .delete("m1", &DeleteParams::default())
        .await
        .expect("delete");
    must_eventually(WAIT, "the machine gone", || async {
        env.api::<Machine>()
            .get_opt("m1")
            .await
            .ok()
            .and_then(|m| m.is_none().then_some(()))
    })
    .await;
    assert_eq!(driver.vm_count(), 0, "its VM deleted");
    ctl.stop().await;
}

/// Some when every Machine of the namespace passes `check`.
async fn all(machines: &Api<Machine>, check: impl Fn(&Machine) -> bool) -> Option<()> {
    let list = machines.list(&Default::default()).await.ok()?.items;
    (!list.is_empty() && list.iter().all(check)).then_some(())
}

/// UpdateMachine draws on the cloud budget like every other call: a class
/// edit for many machines is applied no faster than the driver's declared
/// update limit allows (design: hot-update.md, "Pace").
#[tokio::test]
async fn a_class_edit_updates_many_machines_no_faster_than_the_update_budget() {
    const MACHINES: usize = 5;
    // A burst of 1, then one call a second.
    let limit = BucketLimit::new(1, 1.0);
    let script = Script {
        rate_limits: vec![(CloudOp::Update, limit)],
        ..Script::default()
    };
    let Some((env, driver, ctl)) = controller("hot-paced", script).await else {
        return;
    };
    let machines: Api<Machine> = env.api();
    for i in 1..=MACHINES {
        mc::create_machine(&env, &format!("m{i}"), CLASS, json!({})).await;
    }
    must_eventually(WAIT, "every machine past creation", || {
        all(&machines, |m| phase(m) != MachinePhase::default())
    })
    .await;
    for i in 1..=MACHINES {
        let name = format!("m{i}");
        kubelet(&env.client, &node_of(&env, &name), &name, true).await;
    }
    let created = AppliedSpec::of(CLASS, &spec("x", "a")).hash;
    must_eventually(WAIT, "every machine Running with its record", || {
        all(&machines, |m| {
            phase(m) == MachinePhase::Running && hash(m).as_ref() == Some(&created)
        })
    })
    .await;

    set_spec(&env, &spec("x", "b")).await;
    let updated = AppliedSpec::of(CLASS, &spec("x", "b")).hash;
    must_eventually(WAIT, "every machine updated in place", || {
        all(&machines, |m| hash(m).as_ref() == Some(&updated))
    })
    .await;

    let at = driver.calls.update_at.lock().expect("times").clone();
    assert_eq!(at.len(), MACHINES, "one call per machine: {at:?}");
    // In any stretch of time the calls are at most the burst plus what the
    // bucket refilled meanwhile (a little slack for timer granularity).
    for i in 0..at.len() {
        for j in i + 1..at.len() {
            let secs = at[j].duration_since(at[i]).as_secs_f64();
            let allowed = f64::from(limit.capacity) + limit.refill_per_sec * (secs + 0.1);
            assert!(
                (j - i + 1) as f64 <= allowed,
                "calls {i}..={j} came within {secs:.2} s, more than the budget's {allowed:.1}"
            );
        }
    }
    assert_eq!((calls(&driver.calls.create), driver.vm_count()), (5, 5));
    ctl.stop().await;
}
