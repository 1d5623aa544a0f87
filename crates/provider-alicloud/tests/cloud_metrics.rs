//! The cloud API series from the Alicloud driver: every ECS call reaches
//! the driver's `CloudApi` handle with provider `alicloud` and the action in snake
//! case (the reference's Alicloud provider reports none; the names are the
//! other providers'). Against the in-repo ECS fake.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

mod common;

use common::*;
use mcm_driver::cloud_api::CallRecorder;
use mcm_driver::Driver;

#[tokio::test]
async fn ecs_calls_move_the_cloud_api_counters() {
    let (_fake, driver) = setup().await;
    let calls = CallRecorder::install(&driver.cloud_api().expect("the driver reports its calls"));
    let c = class("c", spec(&unique("shoot--metrics")));
    let m = machine("metrics");
    driver
        .create_machine(&request(&m, &c, &secret()))
        .await
        .expect("create");

    let seen = calls.of("alicloud");
    assert!(
        calls.count("alicloud", "run_instances", true) >= 1,
        "{seen:?}"
    );
}
