//! The EC2 calls one driver call saves the next one of the same machine
//! (`driver/recent.rs`): a create right after a status probe that found no VM
//! does not look by name again, a create whose RunInstances answer names the
//! private DNS name does not wait for DescribeInstances, InitializeMachine
//! right after a create plans on the create's description, and each saved
//! answer is used once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use aws_sdk_ec2::operation::describe_instances::DescribeInstancesOutput;
use aws_sdk_ec2::operation::modify_network_interface_attribute::ModifyNetworkInterfaceAttributeOutput;
use aws_sdk_ec2::operation::run_instances::RunInstancesOutput;
use aws_sdk_ec2::types::InstanceStateName;
use aws_sdk_ec2::Client;
use aws_smithy_mocks::{mock, Rule};
use common::mock::*;
use common::*;
use mcm_driver::{Code, Driver};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const ID: &str = "i-0reuse";

/// DescribeInstances that counts look-ups by name and by ID: nothing by name,
/// the launched instance by ID.
fn counting_describe(by_name: Arc<AtomicUsize>, by_id: Arc<AtomicUsize>) -> Rule {
    mock!(Client::describe_instances).then_compute_output(move |input| {
        if by_id_filter(input) {
            by_id.fetch_add(1, Ordering::SeqCst);
            reservations(vec![instance(
                ID,
                InstanceStateName::Pending,
                vec![eni("eni-0", 0, "interface", true, 0)],
            )])
        } else {
            by_name.fetch_add(1, Ordering::SeqCst);
            DescribeInstancesOutput::builder().build()
        }
    })
}

/// RunInstances answering with a complete description (private DNS name, interfaces).
fn run_rule() -> Rule {
    mock!(Client::run_instances).then_output(|| {
        RunInstancesOutput::builder()
            .instances(instance(
                ID,
                InstanceStateName::Pending,
                vec![eni("eni-0", 0, "interface", true, 0)],
            ))
            .build()
    })
}

fn modify_rule() -> Rule {
    mock!(Client::modify_network_interface_attribute)
        .then_output(|| ModifyNetworkInterfaceAttributeOutput::builder().build())
}

struct Counted {
    by_name: Arc<AtomicUsize>,
    by_id: Arc<AtomicUsize>,
    driver: mcm_provider_aws::AwsDriver,
}

fn counted() -> Counted {
    let (by_name, by_id) = (Arc::default(), Arc::default());
    let rules = vec![
        counting_describe(Arc::clone(&by_name), Arc::clone(&by_id)),
        images_rule(),
        run_rule(),
        modify_rule(),
    ];
    Counted {
        by_name,
        by_id,
        driver: driver(rules, fast_config()),
    }
}

#[tokio::test]
async fn a_create_right_after_a_probe_that_found_no_vm_does_not_look_by_name_again() {
    let c = counted();
    let class = class("reuse", spec(json!({})));
    let m = machine("probed");
    let req = request(&m, &class, &secret());
    let probe = c.driver.get_machine_status(&req).await.expect_err("no VM");
    assert_eq!(probe.code, Code::NotFound);
    assert_eq!(
        c.by_name.load(Ordering::SeqCst),
        1,
        "the probe looks by name"
    );
    c.driver.create_machine(&req).await.expect("create");
    assert_eq!(
        c.by_name.load(Ordering::SeqCst),
        1,
        "the create relies on the probe and the ClientToken"
    );
    assert_eq!(c.driver.api_calls().count("RunInstances"), 1);
    // The probe's answer is used once: a retried create looks again.
    c.driver.create_machine(&req).await.expect("retried create");
    assert_eq!(c.by_name.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_create_without_a_probe_looks_by_name_first() {
    let c = counted();
    let class = class("reuse", spec(json!({})));
    let req = request(&machine("unprobed"), &class, &secret());
    c.driver.create_machine(&req).await.expect("create");
    assert_eq!(c.by_name.load(Ordering::SeqCst), 1);
    // A probe of another machine saves nothing for this one.
    let other = request(&machine("other"), &class, &secret());
    let _ = c.driver.get_machine_status(&other).await;
    let again = request(&machine("third"), &class, &secret());
    c.driver.create_machine(&again).await.expect("create");
    assert_eq!(c.by_name.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn initialize_right_after_create_plans_on_the_create_s_description_once() {
    let c = counted();
    let class = class("reuse", spec(json!({"srcAndDstChecksEnabled": false})));
    let mut m = machine("init");
    let created = c
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    assert_eq!(
        c.by_id.load(Ordering::SeqCst),
        0,
        "RunInstances' answer names the node: no wait for DescribeInstances"
    );
    m.spec.provider_id = created.provider_id;
    let req = request(&m, &class, &secret());
    c.driver.initialize_machine(&req).await.expect("initialize");
    assert_eq!(
        c.by_id.load(Ordering::SeqCst),
        0,
        "InitializeMachine describes nothing right after the create"
    );
    assert_eq!(
        c.driver
            .api_calls()
            .count("ModifyNetworkInterfaceAttribute"),
        1
    );
    // A second InitializeMachine (a retry) describes the VM again.
    c.driver.initialize_machine(&req).await.expect("again");
    assert_eq!(c.by_id.load(Ordering::SeqCst), 1);
}
