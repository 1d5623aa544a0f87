//! The reference's cloud API series from the OpenStack driver: every call
//! reaches the driver's `CloudApi` handle with provider `openstack` and the
//! reference's service label (`nova`, `neutron`, `cinder`). Against the
//! in-repo OpenStack fake.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

mod common;

use common::{class, env, machine};
use mcm_driver::cloud_api::CallRecorder;
use mcm_driver::Driver;

#[tokio::test]
async fn openstack_calls_move_the_cloud_api_counters_by_service() {
    let env = env().await;
    let api = env
        .driver
        .cloud_api()
        .expect("the driver reports its calls");
    let calls = CallRecorder::install(&api);
    let c = class("c", env.spec());
    let req = env.request(&c, machine("metrics"));
    env.driver.create_machine(&req).await.expect("create");

    let seen = calls.of("openstack");
    assert!(calls.count("openstack", "nova", true) >= 1, "{seen:?}");
    assert!(calls.count("openstack", "neutron", true) >= 1, "{seen:?}");
    assert!(
        seen.keys()
            .all(|(service, _)| ["nova", "neutron", "cinder"].contains(&service.as_str())),
        "only the reference's service labels: {seen:?}"
    );
}
