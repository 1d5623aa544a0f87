//! Hot update (UpdateMachine) on the local cloud, in process: the
//! conformance kit's update checks, tags and instance type changed in place,
//! faults and rate limits applying to the new call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use mcm_driver::conformance::{run_all, run_update_checks, Fixture, UpdateFixture};
use mcm_driver::{Code, Driver, MachineRequest, UpdateMachineRequest};
use mcm_provider_local::wire::Instance;
use mcm_provider_local::{AdminClient, Tunables};
use serde_json::{json, Value};
use std::sync::Arc;

/// The common spec with other tags and instance type (in-place changes only).
fn updated_spec(cluster: &str) -> Value {
    let mut s = spec(cluster);
    s["instanceType"] = json!("local.large");
    s["tags"]["team"] = json!("blue");
    s
}

async fn instance(admin: &AdminClient, provider_id: &str) -> Option<Instance> {
    admin
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .find(|i| i.provider_id == provider_id)
}

fn update_fixture(admin: &AdminClient, cluster: &str) -> UpdateFixture {
    let admin = Arc::new(admin.clone());
    let (a, b, c) = (admin.clone(), admin.clone(), admin);
    UpdateFixture {
        updated_class: class_with(&format!("class-{cluster}"), updated_spec(cluster)),
        break_updates: Box::new(move || {
            let a = a.clone();
            Box::pin(async move {
                a.patch_tunables(&json!({"update": {"errorRate": 1.0}}))
                    .await
                    .expect("faults");
            })
        }),
        heal: Box::new(move || {
            let b = b.clone();
            Box::pin(async move {
                b.patch_tunables(&json!({"update": {"errorRate": 0.0}}))
                    .await
                    .expect("faults");
            })
        }),
        converged: Box::new(move |provider_id| {
            let c = c.clone();
            Box::pin(async move {
                let i = instance(&c, &provider_id)
                    .await
                    .ok_or_else(|| format!("no instance {provider_id}"))?;
                if i.instance_type == "local.large"
                    && i.tags.get("team").map(String::as_str) == Some("blue")
                {
                    Ok(())
                } else {
                    Err(format!(
                        "instance {} has type {} and tags {:?}",
                        i.id, i.instance_type, i.tags
                    ))
                }
            })
        }),
    }
}

#[tokio::test]
async fn the_conformance_kits_update_checks_pass() {
    let cloud = start(Tunables::unlimited()).await;
    let fixture = Fixture {
        class: class("upd-a"),
        other_class: class("upd-b"),
        secret: Default::default(),
        new_machine: Box::new(|_| machine("upd")),
        invalid_classes: Vec::new(),
    };
    let u = update_fixture(&cloud.admin, "upd-a");
    let failures = run_update_checks(&cloud.driver, &fixture, &u).await;
    assert!(
        failures.is_empty(),
        "update conformance failures: {failures:#?}"
    );
    let mut failures = run_all(&cloud.driver, &fixture).await;
    // The kit's invalid-class check needs invalid classes; cloud.rs runs it.
    failures.retain(|f| !f.starts_with("invalid_provider_spec"));
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        cloud.admin.instances().await.expect("instances").is_empty(),
        "the kit leaves nothing behind"
    );
    cloud.handle.shutdown().await.expect("shutdown");
}

/// A VM created from the class `spec("c1")` plus a tag `old=1`.
async fn vm(cloud: &Cloud) -> (MachineRequest, Value, String) {
    let mut last = spec("c1");
    last["tags"]["old"] = json!("1");
    let req = request(&machine("hot"), &class_with("c", last.clone()));
    let created = cloud.driver.create_machine(&req).await.expect("create");
    let mut req = req;
    req.machine.spec.provider_id = created.provider_id.clone();
    (req, last, created.provider_id)
}

fn update(req: &MachineRequest, last: &Value, spec: Value) -> UpdateMachineRequest {
    UpdateMachineRequest {
        machine: req.machine.clone(),
        machine_class: class_with("c", spec),
        secret: Default::default(),
        last_applied_provider_spec: last.clone(),
    }
}

#[tokio::test]
async fn an_update_sets_the_new_tags_removes_the_dropped_ones_and_keeps_the_identity() {
    let cloud = start(Tunables::unlimited()).await;
    let (req, last, pid) = vm(&cloud).await;
    let before = instance(&cloud.admin, &pid).await.expect("instance");
    let identity: Vec<&String> = before
        .tags
        .keys()
        .filter(|k| k.starts_with("machine.sapcloud.io/"))
        .collect();
    assert!(
        !identity.is_empty(),
        "the VM carries the machine's identity: {:?}",
        before.tags
    );
    let mut next = spec("c1");
    next["tags"]["team"] = json!("blue");
    next["instanceType"] = json!("local.large");
    cloud
        .driver
        .update_machine(&update(&req, &last, next))
        .await
        .expect("update");
    let after = instance(&cloud.admin, &pid)
        .await
        .expect("the same instance");
    assert_eq!(after.id, before.id);
    assert_eq!(after.instance_type, "local.large");
    assert_eq!(after.tags.get("team").map(String::as_str), Some("blue"));
    assert!(
        !after.tags.contains_key("old"),
        "dropped from the class: removed"
    );
    for k in identity {
        assert_eq!(
            after.tags.get(k),
            before.tags.get(k),
            "identity tag {k} kept"
        );
    }
    assert_eq!(after.hot_updates, 1);
    assert_eq!(after.image, before.image, "the image is not touched");
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_repeated_update_changes_nothing_and_is_not_counted_again() {
    let cloud = start(Tunables::unlimited()).await;
    let (req, last, pid) = vm(&cloud).await;
    let mut next = last.clone();
    next["tags"]["team"] = json!("red");
    let up = update(&req, &last, next);
    cloud.driver.update_machine(&up).await.expect("first");
    cloud.driver.update_machine(&up).await.expect("second");
    let i = instance(&cloud.admin, &pid).await.expect("instance");
    assert_eq!(i.hot_updates, 1);
    assert_eq!(cloud.admin.instances().await.expect("list").len(), 1);
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn an_image_change_is_refused_without_touching_the_instance() {
    let cloud = start(Tunables::unlimited()).await;
    let (req, last, pid) = vm(&cloud).await;
    let mut next = last.clone();
    next["image"] = json!("local/other");
    let in_place = cloud.driver.in_place_changes(&last, &next);
    assert_eq!(in_place.need_replacement, vec!["image".to_string()]);
    let err = cloud
        .driver
        .update_machine(&update(&req, &last, next))
        .await
        .expect_err("refused");
    assert_eq!(err.code, Code::FailedPrecondition);
    assert!(err.message.contains("image"), "{err}");
    let i = instance(&cloud.admin, &pid).await.expect("instance");
    assert_eq!((i.hot_updates, i.image.as_str()), (0, "local/ubuntu-24.04"));
    let stats = cloud.admin.stats().await.expect("stats");
    assert_eq!(
        stats.operations.get("update").map(|s| s.calls),
        Some(0),
        "refused before the cloud"
    );
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_spec_that_no_longer_validates_is_refused_before_the_cloud() {
    let cloud = start(Tunables::unlimited()).await;
    let (req, last, _) = vm(&cloud).await;
    let mut bad = last.clone();
    bad["instanceType"] = json!("");
    let err = cloud
        .driver
        .update_machine(&update(&req, &last, bad))
        .await
        .expect_err("invalid");
    assert_eq!(err.code, Code::InvalidArgument);
    assert!(err.message.contains("providerSpec.instanceType"), "{err}");
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn update_faults_and_rate_limits_apply_to_update_machine() {
    let cloud = start(Tunables::unlimited()).await;
    let (req, last, _) = vm(&cloud).await;
    let mut next = last.clone();
    next["tags"]["team"] = json!("green");
    let up = update(&req, &last, next);
    cloud
        .admin
        .patch_tunables(&json!({"update": {"errorRate": 1.0, "errorCode": "Unavailable"}}))
        .await
        .expect("faults");
    let err = cloud
        .driver
        .update_machine(&up)
        .await
        .expect_err("injected");
    assert_eq!(err.code, Code::Unavailable);
    assert!(err.message.contains("injected fault"), "{err}");
    cloud
        .admin
        .patch_tunables(&json!({"update": {"errorRate": 0.0,
            "rateLimit": {"capacity": 1, "refillPerSecond": 0.001}}}))
        .await
        .expect("limits");
    cloud
        .driver
        .update_machine(&up)
        .await
        .expect("the one token");
    let err = cloud
        .driver
        .update_machine(&up)
        .await
        .expect_err("throttled");
    assert_eq!(err.code, Code::ResourceExhausted);
    let stats = cloud.admin.stats().await.expect("stats");
    let s = stats.operations.get("update").expect("update counted");
    assert_eq!((s.calls, s.ok), (3, 1));
    cloud.handle.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn the_driver_paces_update_machine_by_the_clouds_update_bucket() {
    let cloud = start(Tunables::default()).await;
    let limits = cloud.driver.rate_limits().await;
    assert!(
        limits
            .iter()
            .any(|(op, _)| *op == mcm_driver::CloudOp::Update),
        "{limits:?}"
    );
    cloud.handle.shutdown().await.expect("shutdown");
}
