#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking
#![cfg(feature = "aws")]
//! The AWS provider end to end: the real `mcm run` binary, without a target
//! cluster, against the real control plane and moto (the EC2 emulator that
//! `hack/moto.sh` starts and announces in `MCM_AWS_TEST_ENDPOINT`).
//!
//! The MachineClass and its two Secrets are `examples/aws-machine-class.yaml`
//! as a user applies it, with the IDs replaced by the VPC, subnet, security
//! group, AMI and instance profile this test creates in moto, a cluster tag of
//! its own (moto is shared with tests running in parallel), and without
//! `ipv6PrefixCount`, since moto does not emulate IPv6 prefixes (the driver's
//! prefix handling is covered by `crates/provider-aws/tests/mocks.rs`).
//!
//! The binary reaches moto through [`ec2_proxy`], which counts its EC2 calls
//! per action and answers beyond EC2's published request buckets with
//! `RequestLimitExceeded`, as EC2 does: the test asserts the EC2 calls per
//! machine for create + initialize + delete and that none was throttled.
//!
//! Without the control plane or moto the test skips visibly, except in CI,
//! where it fails (`mcm_testenv::skip`).

use crate::aws_common;
use crate::e2e;
use crate::ec2_proxy;

use aws_common::{create_example, moto_setup, unique, REGION};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use mcm_testenv::{moto_endpoint, must_eventually, TestEnv};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const DEPLOYMENT: &str = "aws-e2e";
/// Machines of the MachineDeployment.
const MACHINES: usize = 20;
/// The target: EC2 calls per machine for create + initialize + delete.
const MAX_EC2_CALLS_PER_MACHINE: f64 = 6.0;

#[tokio::test]
async fn mcm_run_on_moto_brings_20_aws_machines_to_available_initialized_and_scales_to_0_within_6_ec2_calls_per_machine(
) {
    let t0 = Instant::now();
    let Some(moto) = moto_endpoint("mcm_run_on_moto_brings_20_aws_machines_to_available") else {
        return;
    };
    let Some(env) = TestEnv::new("aws-e2e").await else {
        return;
    };
    let ns = env.namespace.clone();
    let cloud = moto_setup(&moto).await;
    let cluster_tag = format!("kubernetes.io/cluster/{}", unique("shoot--e2e"));

    // The example's Secrets and MachineClass, pointed at moto.
    let class_name = create_example(&env, &cloud, &cluster_tag).await;
    println!(
        "[{:>5.1?}] moto and the control plane are set up",
        t0.elapsed()
    );

    let proxy = ec2_proxy::Ec2Proxy::start(&moto);
    let mut mcm = e2e::start_mcm("aws", &ns, &["--aws-endpoint", &proxy.url]).await;

    // The class's `subnetId` works and is reported on the class, naming the canonical key.
    let events: Api<Event> = env.api();
    let warning = must_eventually(
        Duration::from_secs(60),
        "a ProviderSpecWarning Event on the MachineClass naming subnetID",
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.involved_object.kind.as_deref() == Some("MachineClass")
                        && e.involved_object.name.as_deref() == Some(class_name.as_str())
                        && e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("ProviderSpecWarning")
                })
        },
    )
    .await;
    let message = warning.message.unwrap_or_default();
    assert!(
        message.contains("networkInterfaces[0].subnetId") && message.contains("subnetID"),
        "the warning names the key and its canonical spelling: {message}"
    );
    println!("[{:>5.1?}] MachineClass warning: {message}", t0.elapsed());

    // A MachineDeployment of MACHINES.
    let e2e::Deployed {
        deployments,
        machines,
        status: md_status,
        took,
    } = e2e::deploy_available(
        &env,
        DEPLOYMENT,
        &class_name,
        MACHINES,
        Duration::from_secs(300),
    )
    .await;
    mcm.assert_alive();
    println!(
        "[{:>5.1?}] {MACHINES} machines Available {took:.1?} after the MachineDeployment was applied (status: replicas {}, available {})",
        t0.elapsed(),
        md_status.replicas,
        md_status.available_replicas
    );

    // The machines and the instances in moto are the same.
    let list = machines
        .list(&ListParams::default())
        .await
        .expect("list Machines")
        .items;
    let mut by_instance = BTreeMap::new();
    for m in &list {
        let pid = m.spec.provider_id.clone();
        assert!(
            pid.starts_with(&format!("aws:///{REGION}/i-")),
            "providerID of {}: {pid:?}",
            m.name_any()
        );
        let addresses = &m.status.as_ref().expect("status").addresses;
        assert!(
            addresses.iter().any(|a| a.address.contains(':')),
            "{} reports its IPv6 address: {addresses:?}",
            m.name_any()
        );
        let id = pid.rsplit('/').next().expect("instance id").to_string();
        by_instance.insert(id, m.name_any());
    }
    let live = cloud.live_instances(&cluster_tag).await;
    assert_eq!(
        live, by_instance,
        "one live instance per Machine, tagged Name=<machine> (instance → name)"
    );

    // InitializeMachine's work, as moto sees it.
    for id in live.keys() {
        let nics = cloud.interfaces_of(id).await;
        assert_eq!(
            nics.len(),
            1,
            "{id} has the example's one interface: {nics:?}"
        );
        for n in &nics {
            assert_eq!(
                n.source_dest_check,
                Some(false),
                "source/destination check off on {} of {id}",
                n.id
            );
            assert!(
                !n.ipv6.is_empty(),
                "an IPv6 address assigned to {} of {id}",
                n.id
            );
        }
    }
    println!(
        "[{:>5.1?}] moto: {} instances, source/destination check off, IPv6 assigned",
        t0.elapsed(),
        live.len()
    );
    let up = proxy.counts();

    // Scale to 0 through the scale subresource, as `kubectl scale` does.
    let t_scale = Instant::now();
    e2e::scale_to_zero(&deployments, DEPLOYMENT, &machines).await;
    let terminated: BTreeSet<String> = by_instance.keys().cloned().collect();
    must_eventually(
        Duration::from_secs(60),
        "no pending or running instance with the cluster tag in moto",
        || async {
            cloud
                .live_instances(&cluster_tag)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    mcm.assert_alive();
    println!(
        "[{:>5.1?}] scaled to 0 in {:.1?}: no Machine, {} instances no longer running",
        t0.elapsed(),
        t_scale.elapsed(),
        terminated.len()
    );
    drop(mcm);

    // The EC2 calls of `mcm run`, as the proxy saw them.
    let all = proxy.counts();
    let per_machine = all.total() as f64 / MACHINES as f64;
    println!("EC2 calls of mcm run for {MACHINES} machines (create + initialize + delete):");
    for (action, n) in &all.calls {
        let scale_up = up.calls.get(action).copied().unwrap_or(0);
        println!(
            "  {action:<34} {n:>4}  ({:.2} per machine; {scale_up} until all Available)",
            *n as f64 / MACHINES as f64
        );
    }
    println!(
        "  total {} = {per_machine:.2} per machine; throttled {}",
        all.total(),
        all.total_throttled()
    );
    if all.total_throttled() > 0 {
        let first = all.run_instances.first().map(|r| r.0).unwrap_or_default();
        let arrivals: Vec<String> = all
            .run_instances
            .iter()
            .map(|(t, thr)| format!("{:.2}{}", t - first, if *thr { "!" } else { "" }))
            .collect();
        println!(
            "RunInstances arrivals (s, ! = throttled): {}",
            arrivals.join(" ")
        );
    }
    assert_eq!(
        all.total_throttled(),
        0,
        "no EC2 call beyond EC2's request buckets: {:?}",
        all.throttled
    );
    assert_eq!(
        all.calls.get("RunInstances").copied(),
        Some(MACHINES as u64),
        "one RunInstances per machine"
    );
    assert!(
        per_machine <= MAX_EC2_CALLS_PER_MACHINE,
        "{per_machine:.2} EC2 calls per machine (target {MAX_EC2_CALLS_PER_MACHINE}): {:?}",
        all.calls
    );
}
