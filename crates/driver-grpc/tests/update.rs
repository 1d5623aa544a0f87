//! The hot update out of process: the conformance kit's update checks
//! (in-place check, UpdateMachine idempotent, a failed update retried to
//! convergence) pass for the local provider through `GrpcDriver` → Unix
//! socket → `serve` → `LocalDriver`, and the cloud's update fault reaches
//! the controller as the provider's own code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use mcm_driver::conformance::{run_update_checks, Fixture, UpdateFixture};
use mcm_driver::{Driver, UpdateMachineRequest};
use mcm_driver_grpc::ClientOptions;
use mcm_provider_local::AdminClient;
use serde_json::{json, Value};
use std::sync::Arc;

/// The class's spec with another instance type and one more tag: both
/// changed in place by the local cloud.
fn updated_spec(cluster: &str) -> Value {
    let mut s = spec(cluster);
    s["instanceType"] = json!("local.large");
    s["tags"]["team"] = json!("blue");
    s
}

fn faults(admin: &Arc<AdminClient>, rate: f64) -> mcm_driver::conformance::HookFuture<()> {
    let admin = admin.clone();
    Box::pin(async move {
        admin
            .patch_tunables(&json!({"update": {"errorRate": rate}}))
            .await
            .expect("update faults");
    })
}

fn update_fixture(admin: &AdminClient, cluster: &str) -> UpdateFixture {
    let admin = Arc::new(admin.clone());
    let (a, b, c) = (admin.clone(), admin.clone(), admin);
    UpdateFixture {
        updated_class: class_with(&format!("class-{cluster}"), updated_spec(cluster)),
        break_updates: Box::new(move || faults(&a, 1.0)),
        heal: Box::new(move || faults(&b, 0.0)),
        converged: Box::new(move |provider_id| {
            let c = c.clone();
            Box::pin(async move {
                let i = c
                    .instances()
                    .await
                    .expect("instances")
                    .into_iter()
                    .find(|i| i.provider_id == provider_id)
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

// Multi-threaded: the client answers the synchronous in-place check by
// blocking on the call, which needs a multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_kits_update_checks_pass_for_the_local_provider_out_of_process() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let fixture = Fixture {
        class: class("upd-a"),
        other_class: class("upd-b"),
        secret: Default::default(),
        new_machine: Box::new(|_| machine("upd")),
        invalid_classes: Vec::new(),
    };
    let u = update_fixture(&cloud.admin, "upd-a");
    let failures = run_update_checks(&d, &fixture, &u).await;
    assert!(
        failures.is_empty(),
        "update conformance failures over gRPC: {failures:#?}"
    );
    assert!(
        cloud.admin.instances().await.expect("instances").is_empty(),
        "the kit leaves nothing behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_fault_arrives_with_the_providers_code_and_text() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let (_stop, _task) = serve_on(local_driver(&cloud.url), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let local = local_driver(&cloud.url);
    let c = class("fault");
    let mut req = request(&machine("fault"), &c);
    let created = d.create_machine(&req).await.expect("create");
    req.machine.spec.provider_id = created.provider_id;
    let up = UpdateMachineRequest {
        machine: req.machine.clone(),
        machine_class: class_with("class-fault", updated_spec("fault")),
        secret: Default::default(),
        last_applied_provider_spec: c.provider_spec.clone(),
    };
    cloud
        .admin
        .patch_tunables(&json!({"update": {"errorRate": 1.0}}))
        .await
        .expect("faults");
    let remote = d.update_machine(&up).await.expect_err("fault over gRPC");
    let near = local
        .update_machine(&up)
        .await
        .expect_err("fault in process");
    assert_eq!(remote.code, near.code, "{remote} / {near}");
    assert_eq!(remote.to_string(), near.to_string());
    cloud
        .admin
        .patch_tunables(&json!({"update": {"errorRate": 0.0}}))
        .await
        .expect("faults");
    d.update_machine(&up).await.expect("update once healed");
    d.delete_machine(&req).await.expect("delete");
}
