//! The reference's cloud API series from the EC2 interceptor: every call of
//! a driver-built client reaches the driver's `CloudApi` handle with provider `aws`
//! and the reference's service label, successful or failed. Against moto
//! (`hack/moto.sh`); without `MCM_AWS_TEST_ENDPOINT` the test skips visibly,
//! except in CI, where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

mod common;

use aws_sdk_ec2::types::Filter;
use common::*;
use mcm_driver::cloud_api::CallRecorder;
use mcm_driver::Driver;
use mcm_provider_aws::{AwsDriver, AwsDriverConfig};

#[tokio::test]
async fn moto_calls_of_the_driver_clients_move_the_cloud_api_counters() {
    let Some(endpoint) = mcm_testenv::moto_endpoint(&mcm_testenv::current_test()) else {
        return;
    };
    let driver = AwsDriver::new(AwsDriverConfig::with_endpoint(&endpoint));
    let calls = CallRecorder::install(&driver.cloud_api().expect("the driver reports its calls"));
    let client = driver.ec2_client(REGION, &secret()).expect("client");

    client
        .describe_instances()
        .filters(
            Filter::builder()
                .name("tag:Name")
                .values(unique("nobody"))
                .build(),
        )
        .send()
        .await
        .expect("describe by tag");
    let missing = client
        .terminate_instances()
        .instance_ids("i-00000000000000000")
        .send()
        .await;
    assert!(missing.is_err(), "moto refuses an unknown instance");

    assert_eq!(
        calls.count("aws", "instance_get_by_tag_and_status", true),
        1,
        "{:?}",
        calls.of("aws")
    );
    assert_eq!(
        calls.count("aws", "instance_terminate", false),
        1,
        "a failed call counts as failed: {:?}",
        calls.of("aws")
    );
    assert_eq!(calls.count("aws", "instance_terminate", true), 0);
}
