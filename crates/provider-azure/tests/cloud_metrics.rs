//! The reference's cloud API series from the Azure driver: every ARM call
//! reaches the driver's `CloudApi` handle with provider `azure` and the reference's
//! service label (`virtual_machine_create`, `nic_create`, ...). Against the
//! in-repo ARM fake.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

mod common;

use common::*;
use mcm_driver::cloud_api::CallRecorder;
use mcm_driver::Driver;

#[tokio::test]
async fn arm_calls_move_the_cloud_api_counters_with_the_references_labels() {
    let f = fake().await;
    let d = driver(&f);
    let calls = CallRecorder::install(&d.cloud_api().expect("the driver reports its calls"));
    let req = request(&class());
    d.create_machine(&req).await.expect("create");

    let seen = calls.of("azure");
    assert!(calls.count("azure", "nic_create", true) >= 1, "{seen:?}");
    assert!(
        calls.count("azure", "virtual_machine_create", true) >= 1,
        "{seen:?}"
    );
    assert!(
        seen.keys().all(|(service, _)| !service.is_empty()),
        "{seen:?}"
    );
}
