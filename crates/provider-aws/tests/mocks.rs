//! The driver against `aws-smithy-mocks`: the paths moto cannot emulate
//! (each test name says `moto_cannot` where that is the reason): IPv6
//! prefixes, EFA interfaces, capacity errors, throttling, an instance that
//! shows up late in DescribeInstances, a ClientToken that names a terminated
//! instance. The mocks sit behind the SDK's real serializers, retry strategy
//! and (for `http_status` answers) the real EC2 error parser.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use aws_sdk_ec2::operation::assign_ipv6_addresses::AssignIpv6AddressesOutput;
use aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsOutput;
use aws_sdk_ec2::operation::modify_network_interface_attribute::ModifyNetworkInterfaceAttributeOutput;
use aws_sdk_ec2::operation::run_instances::RunInstancesOutput;
use aws_sdk_ec2::operation::terminate_instances::TerminateInstancesOutput;
use aws_sdk_ec2::types::{Instance, InstanceState, InstanceStateName, Subnet};
use aws_sdk_ec2::Client;
use aws_smithy_mocks::mock;
use common::mock::*;
use common::*;
use mcm_driver::{Code, Driver};
use mcm_provider_aws::BucketLimit;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[tokio::test]
async fn mock_ipv6_prefixes_are_topped_up_by_initialize_moto_cannot() {
    let prefixes = Arc::new(AtomicUsize::new(1));
    let p = prefixes.clone();
    let describe = describe_rule(move || {
        vec![instance(
            "i-0001",
            InstanceStateName::Running,
            vec![eni("eni-0", 0, "interface", true, p.load(Ordering::SeqCst))],
        )]
    });
    let asked: Arc<Mutex<Vec<Option<i32>>>> = Arc::default();
    let (p, a) = (prefixes.clone(), asked.clone());
    let assign = mock!(Client::assign_ipv6_addresses).then_compute_output(move |input| {
        a.lock().expect("lock").push(input.ipv6_prefix_count());
        p.fetch_add(
            input.ipv6_prefix_count().unwrap_or(0) as usize,
            Ordering::SeqCst,
        );
        AssignIpv6AddressesOutput::builder()
            .network_interface_id("eni-0")
            .assigned_ipv6_prefixes("2001:db8:0:9::/80")
            .build()
    });
    let d = driver(vec![describe, assign.clone()], fast_config());
    let class = class(
        "prefix",
        spec(
            json!({"networkInterfaces": [{"subnetID": "s", "securityGroupIDs": ["g"], "ipv6PrefixCount": 3}]}),
        ),
    );
    let req = request(&machine_with_provider_id("i-0001"), &class, &secret());

    let s = d.get_machine_status(&req).await.expect_err("uninitialized");
    assert_eq!(s.code, Code::Uninitialized);
    assert!(
        s.message.contains("2 IPv6 prefix(es) missing on eni-0"),
        "{}",
        s.message
    );
    assert_eq!(
        s.machine.as_deref().map(|m| m.provider_id.as_str()),
        Some("aws:///eu-west-1/i-0001")
    );

    d.initialize_machine(&req).await.expect("initialize");
    assert_eq!(
        *asked.lock().expect("lock"),
        vec![Some(2)],
        "only the missing delta is assigned"
    );
    d.get_machine_status(&req)
        .await
        .expect("OK once the prefixes are there");
    let before = d.api_calls();
    d.initialize_machine(&req).await.expect("second initialize");
    assert_eq!(d.api_calls().since(&before).mutating(), 0);
    assert_eq!(assign.num_calls(), 1);
}

#[tokio::test]
async fn mock_efa_interfaces_keep_their_check_moto_cannot() {
    let off: Arc<Mutex<Vec<String>>> = Arc::default();
    let o = off.clone();
    let describe = describe_rule(move || {
        let done = o.lock().expect("lock").clone();
        vec![instance(
            "i-0002",
            InstanceStateName::Running,
            vec![
                eni(
                    "eni-0",
                    0,
                    "interface",
                    !done.contains(&"eni-0".to_string()),
                    0,
                ),
                eni("eni-1", 1, "efa", true, 0),
                eni("eni-2", 2, "efa-only", true, 0),
                eni(
                    "eni-3",
                    3,
                    "interface",
                    !done.contains(&"eni-3".to_string()),
                    0,
                ),
            ],
        )]
    });
    let o = off.clone();
    let modify =
        mock!(Client::modify_network_interface_attribute).then_compute_output(move |input| {
            assert_eq!(
                input.source_dest_check().and_then(|v| v.value()),
                Some(false)
            );
            o.lock()
                .expect("lock")
                .push(input.network_interface_id().unwrap_or_default().to_string());
            ModifyNetworkInterfaceAttributeOutput::builder().build()
        });
    let d = driver(vec![describe, modify], fast_config());
    let class = class("efa", spec(json!({"srcAndDstChecksEnabled": false})));
    let req = request(&machine_with_provider_id("i-0002"), &class, &secret());
    assert_eq!(
        d.get_machine_status(&req).await.expect_err("uninit").code,
        Code::Uninitialized
    );
    d.initialize_machine(&req).await.expect("initialize");
    assert_eq!(
        *off.lock().expect("lock"),
        vec!["eni-0", "eni-3"],
        "EFA interfaces untouched"
    );
    d.get_machine_status(&req)
        .await
        .expect("OK: EFA interfaces do not count");
    d.initialize_machine(&req).await.expect("second initialize");
    assert_eq!(
        off.lock().expect("lock").len(),
        2,
        "second call changes nothing"
    );
}

#[tokio::test]
async fn mock_insufficient_capacity_is_resource_exhausted_moto_cannot() {
    let run = mock!(Client::run_instances)
        .sequence()
        .http_status(
            500,
            Some(ec2_error_xml(
                "InsufficientInstanceCapacity",
                "no m5.large in eu-west-1a",
            )),
        )
        .repeatedly()
        .build();
    let d = driver(
        vec![images_rule(), describe_rule(Vec::new), run.clone()],
        fast_config(),
    );
    let class = class("cap", spec(json!({})));
    let e = d
        .create_machine(&request(&machine("cap"), &class, &secret()))
        .await
        .expect_err("no capacity");
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    assert!(
        e.message.contains("InsufficientInstanceCapacity"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("req-InsufficientInstanceCapacity"),
        "the AWS request ID: {}",
        e.message
    );
    assert_eq!(
        run.num_calls(),
        3,
        "EC2 sends capacity errors as 500s: the SDK retries them, we do not"
    );
    for (code, want) in [
        ("VcpuLimitExceeded", Code::ResourceExhausted),
        ("InvalidParameterValue", Code::InvalidArgument),
        ("InvalidSubnetID.NotFound", Code::NotFound),
        ("UnauthorizedOperation", Code::PermissionDenied),
    ] {
        let run = mock!(Client::run_instances)
            .sequence()
            .http_status(400, Some(ec2_error_xml(code, "x")))
            .repeatedly()
            .build();
        let d = driver(
            vec![images_rule(), describe_rule(Vec::new), run],
            fast_config(),
        );
        let e = d
            .create_machine(&request(&machine("cap"), &class, &secret()))
            .await
            .expect_err(code);
        assert_eq!(e.code, want, "{code}: {e}");
    }
}

#[tokio::test]
async fn mock_throttling_backs_off_then_succeeds_moto_cannot() {
    let throttle = ec2_error_xml("RequestLimitExceeded", "Request limit exceeded.");
    let run = mock!(Client::run_instances)
        .sequence()
        .http_status(503, Some(throttle))
        .times(4)
        .output(|| {
            RunInstancesOutput::builder()
                .instances(instance("i-0003", InstanceStateName::Pending, vec![]))
                .build()
        })
        .build();
    let describe = describe_rule(|| vec![instance("i-0003", InstanceStateName::Running, vec![])]);
    let clock = AttemptClock::new("RunInstances");
    let cfg = fast_config();
    let pause = cfg.retry.throttle_pause;
    let d = driver_with_clock(
        vec![images_rule(), describe, run.clone()],
        cfg,
        Some(clock.clone()),
    );
    let class = class("throttle", spec(json!({})));
    let created = d
        .create_machine(&request(&machine("throttle"), &class, &secret()))
        .await
        .expect("create after throttling");
    assert_eq!(created.provider_id, "aws:///eu-west-1/i-0003");
    // 3 SDK attempts, then a class pause (~50 ms) and a second round: 2 more attempts.
    assert_eq!(run.num_calls(), 5);
    let calls = d.api_calls();
    assert_eq!(
        calls.count("RunInstances"),
        2,
        "two driver-level tries: {calls:?}"
    );
    assert_eq!(calls.attempts.get("RunInstances"), Some(&5));
    // The class pause sits between the first round's last attempt and the
    // second round's first: nothing else waits that long there (the SDK's
    // back-off is at most 5 ms), so without the pause this gap is ~0.
    let sent = clock.times();
    assert_eq!(sent.len(), 5, "{sent:?}");
    let gap = sent[3] - sent[2];
    assert!(
        gap >= pause,
        "the RunInstances class was paused for {pause:?} between the rounds: {gap:?}"
    );
}

#[tokio::test]
async fn mock_persistent_throttling_gives_up_after_a_bounded_number_of_attempts_moto_cannot() {
    let throttle = ec2_error_xml("RequestLimitExceeded", "Request limit exceeded.");
    let describe = mock!(Client::describe_instances)
        .sequence()
        .http_status(503, Some(throttle))
        .repeatedly()
        .build();
    let clock = AttemptClock::new("DescribeInstances");
    let cfg = fast_config();
    let pause = cfg.retry.throttle_pause;
    let d = driver_with_clock(vec![describe.clone()], cfg, Some(clock.clone()));
    let class = class("storm", spec(json!({})));
    let req = request(&machine_with_provider_id("i-0004"), &class, &secret());
    let e = d.get_machine_status(&req).await.expect_err("throttled");
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(e.message.contains("RequestLimitExceeded"), "{}", e.message);
    // 3 SDK attempts × (1 + 2 driver retries), pauses 50 + 100 ms between
    // rounds (doubling per strike); the SDK's own back-off is at most 5 ms,
    // so only the class pause makes these gaps.
    assert_eq!(describe.num_calls(), 9);
    let sent = clock.times();
    assert_eq!(sent.len(), 9, "{sent:?}");
    assert!(sent[3] - sent[2] >= pause, "{:?}", sent[3] - sent[2]);
    assert!(sent[6] - sent[5] >= pause * 2, "{:?}", sent[6] - sent[5]);
    // The give-up is a third strike: the class stays paused (200 ms) for the
    // next caller, whose first attempt waits for it instead of hammering
    // (without the pause it would follow the last attempt at once).
    let _ = d.get_machine_status(&req).await;
    let sent = clock.times();
    assert_eq!(sent.len(), 18, "{sent:?}");
    let gap = sent[9] - sent[8];
    assert!(
        gap >= pause * 4,
        "the next call waited for the class pause: {gap:?}"
    );
}

#[tokio::test]
async fn mock_instance_that_appears_late_is_waited_for_when_run_instances_names_no_dns_name_moto_cannot(
) {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let describe = describe_rule(move || {
        if s.fetch_add(1, Ordering::SeqCst) < 3 {
            Vec::new()
        } else {
            vec![instance("i-0005", InstanceStateName::Running, vec![])]
        }
    });
    let run = mock!(Client::run_instances).then_output(|| {
        RunInstancesOutput::builder()
            .instances(
                Instance::builder()
                    .instance_id("i-0005")
                    .state(
                        InstanceState::builder()
                            .name(InstanceStateName::Pending)
                            .build(),
                    )
                    .build(),
            )
            .build()
    });
    let d = driver(vec![images_rule(), describe, run], fast_config());
    let class = class("late", spec(json!({})));
    let created = d
        .create_machine(&request(&machine("late"), &class, &secret()))
        .await
        .expect("create");
    assert_eq!(created.provider_id, "aws:///eu-west-1/i-0005");
    assert_eq!(
        created.node_name, "ip-10-0-0-1.eu-west-1.compute.internal",
        "the node name comes from the instance once visible"
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        4,
        "three empty answers, then the instance"
    );

    // Never visible: Internal after the visibility timeout.
    let describe = describe_rule(Vec::new);
    let run = mock!(Client::run_instances).then_output(|| {
        let mut i = instance("i-0006", InstanceStateName::Pending, vec![]);
        i.private_dns_name = None;
        RunInstancesOutput::builder().instances(i).build()
    });
    let mut cfg = fast_config();
    cfg.visibility_timeout = Duration::from_millis(150);
    let d = driver(vec![images_rule(), describe, run], cfg);
    let e = d
        .create_machine(&request(&machine("never"), &class, &secret()))
        .await
        .expect_err("never visible");
    assert_eq!(e.code, Code::Internal);
    assert!(
        e.message
            .contains("timed out waiting for eventual consistency"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn mock_client_token_of_a_terminated_instance_moves_to_the_next_generation_moto_cannot() {
    let tokens: Arc<Mutex<Vec<String>>> = Arc::default();
    let t = tokens.clone();
    let run = mock!(Client::run_instances).then_compute_output(move |input| {
        let token = input.client_token().unwrap_or_default().to_string();
        t.lock().expect("lock").push(token.clone());
        let (id, state) = if token.ends_with("-g1") {
            ("i-new", InstanceStateName::Pending)
        } else {
            ("i-old", InstanceStateName::Terminated)
        };
        RunInstancesOutput::builder()
            .instances(instance(id, state, vec![]))
            .build()
    });
    let describe = describe_rule(|| vec![instance("i-new", InstanceStateName::Running, vec![])]);
    let d = driver(vec![images_rule(), describe, run], fast_config());
    let class = class("token", spec(json!({})));
    let m = machine("token");
    let uid = m.metadata.uid.clone().expect("uid");
    let created = d
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    assert_eq!(created.provider_id, "aws:///eu-west-1/i-new");
    assert_eq!(
        *tokens.lock().expect("lock"),
        vec![format!("mcm-{uid}"), format!("mcm-{uid}-g1")]
    );
}

#[tokio::test]
async fn mock_failed_lookups_are_never_not_found() {
    let describe = mock!(Client::describe_instances)
        .sequence()
        .http_status(
            403,
            Some(ec2_error_xml("UnauthorizedOperation", "not allowed")),
        )
        .repeatedly()
        .build();
    let d = driver(vec![describe], fast_config());
    let class = class("lookup", spec(json!({})));
    for m in [machine("lookup"), machine_with_provider_id("i-0007")] {
        let e = d
            .get_machine_status(&request(&m, &class, &secret()))
            .await
            .expect_err("failure");
        assert_eq!(e.code, Code::PermissionDenied, "{e}");
        if !m.spec.provider_id.is_empty() {
            // DeleteMachine of a known VM terminates it without a look-up.
            continue;
        }
        let e = d
            .delete_machine(&request(&m, &class, &secret()))
            .await
            .expect_err("failure");
        assert_ne!(e.code, Code::NotFound);
    }
}

#[tokio::test]
async fn mock_initialize_failures_answer_uninitialized() {
    let describe = describe_rule(|| {
        vec![instance(
            "i-0008",
            InstanceStateName::Running,
            vec![eni("eni-0", 0, "interface", true, 0)],
        )]
    });
    let modify = mock!(Client::modify_network_interface_attribute)
        .sequence()
        .http_status(
            400,
            Some(ec2_error_xml("InvalidNetworkInterfaceID.NotFound", "gone")),
        )
        .repeatedly()
        .build();
    let d = driver(vec![describe, modify], fast_config());
    let class = class("initfail", spec(json!({"srcAndDstChecksEnabled": false})));
    let e = d
        .initialize_machine(&request(
            &machine_with_provider_id("i-0008"),
            &class,
            &secret(),
        ))
        .await
        .expect_err("failure");
    assert_eq!(e.code, Code::Uninitialized, "{e}");
    // No VM at all (and the class's subnet visible, so it is truly gone):
    // Uninitialized wrapping NotFound.
    let d = driver(
        vec![describe_rule(Vec::new), subnets_rule(true)],
        fast_config(),
    );
    let e = d
        .initialize_machine(&request(
            &machine_with_provider_id("i-0009"),
            &class,
            &secret(),
        ))
        .await
        .expect_err("no VM");
    assert_eq!(e.code, Code::Uninitialized);
    assert!(e.message.contains("NotFound"), "{}", e.message);
}

#[tokio::test]
async fn mock_token_bucket_paces_run_instances() {
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    let run = mock!(Client::run_instances).then_compute_output(move |_| {
        let i = c.fetch_add(1, Ordering::SeqCst);
        RunInstancesOutput::builder()
            .instances(instance(
                &format!("i-{i:04}"),
                InstanceStateName::Pending,
                vec![],
            ))
            .build()
    });
    let describe = mock!(Client::describe_instances).then_compute_output(|input| {
        let ids: Vec<String> = input
            .filters()
            .iter()
            .filter(|f| f.name() == Some("instance-id"))
            .flat_map(|f| f.values().to_vec())
            .collect();
        reservations(
            ids.iter()
                .map(|id| instance(id, InstanceStateName::Running, vec![]))
                .collect(),
        )
    });
    let mut cfg = fast_config();
    cfg.rate_limits.run_instances = BucketLimit {
        capacity: 1,
        refill_per_sec: 10.0,
    };
    let d = driver(vec![images_rule(), describe, run], cfg);
    let class = class("pace", spec(json!({})));
    let reqs: Vec<_> = (0..5)
        .map(|_| request(&machine("pace"), &class, &secret()))
        .collect();
    let started = Instant::now();
    let done = futures::future::join_all(reqs.iter().map(|r| d.create_machine(r))).await;
    let took = started.elapsed();
    assert!(done.iter().all(Result::is_ok), "{done:?}");
    assert!(
        took >= Duration::from_millis(380),
        "5 launches at 1 burst + 10/s take 0.4 s: {took:?}"
    );
    let calls = d.api_calls();
    assert_eq!(calls.count("RunInstances"), 5);
    assert!(
        calls.count("DescribeInstances") < 10,
        "pre-checks and visibility waits are batched: {calls:?}"
    );
    assert_eq!(
        calls.count("DescribeImages"),
        1,
        "concurrent creates look the AMI up once: {calls:?}"
    );
}

#[tokio::test]
async fn mock_delete_of_a_gone_vm_is_ok_and_terminate_not_found_is_ok() {
    let describe = describe_rule(|| vec![instance("i-0010", InstanceStateName::Running, vec![])]);
    let terminate = mock!(Client::terminate_instances)
        .sequence()
        .http_status(
            400,
            Some(ec2_error_xml("InvalidInstanceID.NotFound", "gone")),
        )
        .output(|| TerminateInstancesOutput::builder().build())
        .build();
    let d = driver(
        vec![describe.clone(), terminate.clone(), subnets_rule(true)],
        fast_config(),
    );
    let class = class("gone", spec(json!({})));
    let req = request(&machine_with_provider_id("i-0010"), &class, &secret());
    d.delete_machine(&req)
        .await
        .expect("NotFound on terminate is success");
    assert_eq!(terminate.num_calls(), 1);
    assert_eq!(
        describe.num_calls(),
        0,
        "a known VM whose spec keeps nothing is terminated without a look-up"
    );
    let d = driver(vec![describe_rule(Vec::new)], fast_config());
    let req = request(&machine("gone"), &class, &secret());
    d.delete_machine(&req)
        .await
        .expect("no VM found by name is success");
}

/// DescribeSubnets: the class's subnet `subnet-1` is visible to the
/// credentials, or EC2 answers that it does not exist (another account).
fn subnets_rule(visible: bool) -> aws_smithy_mocks::Rule {
    if visible {
        mock!(Client::describe_subnets).then_output(|| {
            DescribeSubnetsOutput::builder()
                .subnets(Subnet::builder().subnet_id("subnet-1").build())
                .build()
        })
    } else {
        mock!(Client::describe_subnets)
            .sequence()
            .http_status(
                400,
                Some(ec2_error_xml(
                    "InvalidSubnetID.NotFound",
                    "The subnet ID 'subnet-1' does not exist",
                )),
            )
            .repeatedly()
            .build()
    }
}

#[tokio::test]
async fn mock_a_vm_unknown_to_credentials_of_another_account_is_not_gone() {
    let terminate = mock!(Client::terminate_instances)
        .sequence()
        .http_status(
            400,
            Some(ec2_error_xml("InvalidInstanceID.NotFound", "unknown")),
        )
        .repeatedly()
        .build();
    let subnets = subnets_rule(false);
    let d = driver(
        vec![describe_rule(Vec::new), terminate, subnets.clone()],
        fast_config(),
    );
    let class = class("moved", spec(json!({})));
    let req = request(&machine_with_provider_id("i-0020"), &class, &secret());
    let e = d.get_machine_status(&req).await.expect_err("not visible");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    assert!(e.message.contains("subnet-1"), "{}", e.message);
    let e = d
        .delete_machine(&req)
        .await
        .expect_err("a VM that may still run in the other account is not deleted as gone");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    assert!(subnets.num_calls() >= 2);
}

#[tokio::test]
async fn mock_a_vm_unknown_to_credentials_that_see_the_class_subnet_is_gone() {
    let d = driver(
        vec![describe_rule(Vec::new), subnets_rule(true)],
        fast_config(),
    );
    let class = class("gone", spec(json!({})));
    let req = request(&machine_with_provider_id("i-0021"), &class, &secret());
    let e = d.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(e.code, Code::NotFound, "{e}");
}

#[tokio::test]
async fn mock_a_cancelled_create_leaves_no_create_lock_entry() {
    let n = Arc::new(AtomicUsize::new(0));
    let c = n.clone();
    let run = mock!(Client::run_instances).then_compute_output(move |_| {
        let i = c.fetch_add(1, Ordering::SeqCst);
        RunInstancesOutput::builder()
            .instances(instance(
                &format!("i-{i:04}"),
                InstanceStateName::Pending,
                vec![],
            ))
            .build()
    });
    let describe = mock!(Client::describe_instances).then_compute_output(|input| {
        let ids: Vec<String> = input
            .filters()
            .iter()
            .filter(|f| f.name() == Some("instance-id"))
            .flat_map(|f| f.values().to_vec())
            .collect();
        reservations(
            ids.iter()
                .map(|id| instance(id, InstanceStateName::Running, vec![]))
                .collect(),
        )
    });
    // One launch in the bucket, then one per 1000 s: the second machine's
    // create waits for its turn until the caller gives up on it.
    let mut cfg = fast_config();
    cfg.rate_limits.run_instances = BucketLimit {
        capacity: 1,
        refill_per_sec: 0.001,
    };
    let d = driver(vec![images_rule(), describe, run], cfg);
    let class = class("cancel", spec(json!({})));
    d.create_machine(&request(&machine("cancel"), &class, &secret()))
        .await
        .expect("the first launch has its token");
    assert_eq!(
        d.create_locks_in_use(),
        0,
        "a finished create leaves no entry"
    );

    // Two creates of one machine: one holds the lock (waiting for a launch
    // turn), the other waits for the lock; both futures are dropped.
    let req = request(&machine("cancel"), &class, &secret());
    let both = futures::future::join(d.create_machine(&req), d.create_machine(&req));
    let cancelled = tokio::time::timeout(Duration::from_millis(300), both).await;
    assert!(cancelled.is_err(), "both creates were still running");
    assert_eq!(
        d.create_locks_in_use(),
        0,
        "a create cancelled mid-call left its create-lock entry"
    );
    assert_eq!(
        n.load(Ordering::SeqCst),
        1,
        "the cancelled creates launched nothing"
    );
}
