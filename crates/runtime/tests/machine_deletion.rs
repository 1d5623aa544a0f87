//! Deleting Machines whose class cannot be used (issue 17, finding 10),
//! against the real control plane: a Machine whose creation never reached the
//! cloud is deletable; one whose VM may exist keeps its finalizer and says
//! what to fix until the class is repaired.
//!
//! The driver is the scriptable test driver behind a wrapper that refuses
//! every call with `InvalidArgument` for a class whose providerSpec says
//! `"broken": true`, as a real provider does for a spec it cannot decode.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use async_trait::async_trait;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineClass, MachinePhase};
use mcm_core::machine::{CLOUD_CREATE_ANNOTATION, CLOUD_CREATE_NEVER};
use mcm_driver::testing::{Script, ScriptedDriver};
use mcm_driver::*;
use mcm_runtime::Config;
use mcm_testenv::{must_eventually, must_see_events, TestEnv};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

use crate::machine_common as mc;
use mc::{get, wait_gone, Running, WAIT};

/// The scripted driver, refusing classes whose providerSpec has `broken: true`.
struct Strict(Arc<ScriptedDriver>);

/// DeleteMachine calls refused for a broken class, by machine name (a retry
/// marker: each one is a pass of the deletion).
static REFUSED_DELETES: std::sync::LazyLock<
    std::sync::Mutex<std::collections::BTreeMap<String, u32>>,
> = std::sync::LazyLock::new(Default::default);

fn refused_deletes(machine: &str) -> u32 {
    REFUSED_DELETES
        .lock()
        .map(|m| m.get(machine).copied().unwrap_or_default())
        .unwrap_or_default()
}

fn check(class: &MachineClass) -> Result<(), Status> {
    if class.provider_spec.get("broken") == Some(&json!(true)) {
        return Err(Status::invalid_argument(
            "providerSpec: cannot decode the providerSpec: unknown field `broken`",
        ));
    }
    Ok(())
}

#[async_trait]
impl Driver for Strict {
    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        check(&req.machine_class)?;
        self.0.create_machine(req).await
    }
    async fn initialize_machine(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        check(&req.machine_class)?;
        self.0.initialize_machine(req).await
    }
    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        if let Err(e) = check(&req.machine_class) {
            let name = req.machine.metadata.name.clone().unwrap_or_default();
            if let Ok(mut m) = REFUSED_DELETES.lock() {
                *m.entry(name).or_default() += 1;
            }
            return Err(e);
        }
        self.0.delete_machine(req).await
    }
    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        check(&req.machine_class)?;
        self.0.get_machine_status(req).await
    }
    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        check(&req.machine_class)?;
        self.0.list_machines(req).await
    }
}

fn start(env: &TestEnv, driver: Arc<ScriptedDriver>, target: bool) -> Running {
    let cfg = Config {
        long_retry: Duration::from_secs(2),
        ..mc::config(&env.namespace)
    };
    mc::start(env, "scripted", Arc::new(Strict(driver)), target, cfg)
}

async fn setup(test: &str) -> Option<TestEnv> {
    mc::namespace_with_secret(test, "#!/bin/sh\necho <<MACHINE_NAME>>").await
}

async fn create_class(env: &TestEnv, name: &str, spec: serde_json::Value) {
    env.create_class(name, "scripted", "creds", spec)
        .await
        .expect("create class");
}

async fn set_class_spec(env: &TestEnv, name: &str, spec: serde_json::Value) {
    let patch = json!({"providerSpec": spec});
    env.api::<MachineClass>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch class");
}

async fn create_machine(env: &TestEnv, name: &str, class: &str) {
    mc::create_machine(env, name, class, json!({})).await;
}

fn last_op(m: &Machine) -> mcm_api::LastOperation {
    m.status.clone().unwrap_or_default().last_operation
}

async fn delete(env: &TestEnv, name: &str) {
    env.api::<Machine>()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete machine");
}

/// The user's story: an undecodable class and a machine using it; the status
/// says InvalidArgument; deleting the machine removes it.
///
/// Machine names are unique across the test files: Nodes are cluster-wide,
/// and a Node labelled with this machine's name would (rightly) mean a VM.
async fn undecodable_class_story(test: &str, target: bool) {
    let Some(env) = setup(test).await else {
        return;
    };
    create_class(&env, "broken", json!({"broken": true})).await;
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    let ctl = start(&env, driver.clone(), target);
    create_machine(&env, "del-m1", "broken").await;
    let m = must_eventually(WAIT, "InvalidArgument in status", || async {
        get(&env, "del-m1")
            .await
            .filter(|m| last_op(m).error_code == "InvalidArgument")
    })
    .await;
    assert_eq!(
        m.annotations()
            .get(CLOUD_CREATE_ANNOTATION)
            .map(String::as_str),
        Some(CLOUD_CREATE_NEVER),
        "the machine records that no VM was created"
    );
    delete(&env, "del-m1").await;
    wait_gone(&env, "del-m1").await;
    assert_eq!(ScriptedDriver::count(&driver.calls.create), 0);
    assert_eq!(driver.vm_count(), 0);
    ctl.stop().await;
}

#[tokio::test]
async fn a_machine_of_an_undecodable_class_can_be_deleted() {
    undecodable_class_story("del-broken", true).await;
}

#[tokio::test]
async fn a_machine_of_an_undecodable_class_can_be_deleted_without_a_target_cluster() {
    undecodable_class_story("del-broken-nt", false).await;
}

#[tokio::test]
async fn a_machine_of_a_missing_class_can_be_deleted() {
    let Some(env) = setup("del-noclass").await else {
        return;
    };
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    let ctl = start(&env, driver.clone(), true);
    create_machine(&env, "del-m2", "does-not-exist").await;
    must_eventually(WAIT, "the missing class in status", || async {
        get(&env, "del-m2")
            .await
            .filter(|m| last_op(m).description.contains("not found"))
    })
    .await;
    delete(&env, "del-m2").await;
    wait_gone(&env, "del-m2").await;
    assert_eq!(ScriptedDriver::count(&driver.calls.create), 0);
    ctl.stop().await;
}

#[tokio::test]
async fn a_machine_whose_class_broke_after_its_vm_was_made_is_kept_until_the_class_is_fixed() {
    let Some(env) = setup("del-broke-later").await else {
        return;
    };
    create_class(&env, "c", json!({"image": "x"})).await;
    let driver = Arc::new(ScriptedDriver::new(Script::default()));
    let ctl = start(&env, driver.clone(), false);
    create_machine(&env, "del-m3", "c").await;
    must_eventually(WAIT, "machine Available", || async {
        get(&env, "del-m3").await.filter(|m| {
            m.status.clone().unwrap_or_default().current_status.phase == MachinePhase::Available
        })
    })
    .await;
    assert!(driver.vm("del-m3").is_some());
    set_class_spec(&env, "c", json!({"image": "x", "broken": true})).await;
    delete(&env, "del-m3").await;
    let m = must_eventually(WAIT, "the blocked deletion in status", || async {
        get(&env, "del-m3")
            .await
            .filter(|m| last_op(m).description.contains("fix the MachineClass"))
    })
    .await;
    let op = last_op(&m);
    assert_eq!(op.state, mcm_api::MachineState::Failed);
    assert_eq!(op.error_code, "InvalidArgument");
    // A Warning event says why.
    must_see_events(&env, WAIT, &["DeleteMachineFailed"]).await;
    // Retried, never given up: the machine and its VM stay while the class
    // is broken, through two more refused deletion passes.
    let before = refused_deletes("del-m3");
    must_eventually(WAIT, "two more deletion passes", || async {
        assert!(get(&env, "del-m3").await.is_some(), "the finalizer is kept");
        assert!(driver.vm("del-m3").is_some(), "the VM lives");
        (refused_deletes("del-m3") >= before + 2).then_some(())
    })
    .await;
    set_class_spec(&env, "c", json!({"image": "x", "broken": false})).await;
    wait_gone(&env, "del-m3").await;
    assert!(
        driver.vm("del-m3").is_none(),
        "the VM is deleted once the class is fixed"
    );
    ctl.stop().await;
}
