#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking
#![cfg(feature = "gcp")]
//! The GCP provider end to end: the real `mcm run` binary, without a target
//! cluster, against the real control plane and the in-repo Compute Engine
//! fake (`mcm-fake-gcp`, started inside this test on 127.0.0.1).
//!
//! The MachineClass and its two Secrets are `examples/gcp-machine-class.yaml`
//! as a user applies it, with the service-account key replaced by a throwaway
//! one (the official auth library signs real JWTs with it) and a cluster tag
//! of its own. The fake fails the first two inserts with
//! `ZONE_RESOURCE_POOL_EXHAUSTED`, so two machines see `ResourceExhausted`
//! and are created again after `--resource-exhausted-retry` (2 s here).
//!
//! Without the control plane the test skips, except in CI (`CI` set and not `false`/`0`), where it fails.

use crate::e2e;

use e2e::unique;
use kube::api::ListParams;
use kube::ResourceExt;
use mcm_fake_gcp::{service_account_json, FakeGce, Fault, Method};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const EXAMPLE: &str = include_str!("../../../examples/gcp-machine-class.yaml");
const DEPLOYMENT: &str = "gcp-e2e";
const PROJECT: &str = "mcm-e2e-project";
/// The zone of `examples/gcp-machine-class.yaml`.
const ZONE: &str = "europe-west1-b";

/// Instances in the fake with the cluster tag: name → the UID in their metadata.
fn tagged_instances(fake: &FakeGce, cluster_tag: &str) -> BTreeMap<String, String> {
    fake.instances(PROJECT, ZONE)
        .into_iter()
        .filter(|(_, i)| {
            i["tags"]["items"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| x == cluster_tag))
        })
        .map(|(name, i)| {
            let uid = i["metadata"]["items"]
                .as_array()
                .and_then(|items| items.iter().find(|m| m["key"] == "mcm-machine-uid"))
                .and_then(|m| m["value"].as_str())
                .unwrap_or_default()
                .to_string();
            (name, uid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_on_the_compute_fake_brings_3_gcp_machines_to_available_through_capacity_errors_and_scales_to_0(
) {
    let t0 = Instant::now();
    let Some(env) = TestEnv::new("gcp-e2e").await else {
        return;
    };
    let ns = env.namespace.clone();
    let fake = FakeGce::start().await.expect("the Compute fake");
    fake.set_polls_until_done(2);
    fake.inject(
        Method::InstancesInsert,
        Fault::zone_resource_pool_exhausted(),
        2,
    );
    let cluster_tag = format!("kubernetes-io-cluster-{}", unique("shoot--e2e"));

    // The example's Secrets and MachineClass, pointed at the fake's project.
    let class_name = e2e::create_example(&env, EXAMPLE, |doc| {
        if doc["kind"] == "Secret" {
            if doc["stringData"].get("serviceAccountJSON").is_some() {
                doc["stringData"]["serviceAccountJSON"] = json!(service_account_json(PROJECT));
            }
            return;
        }
        let spec = &mut doc["providerSpec"];
        assert_eq!(spec["zone"], json!(ZONE), "the example's zone");
        let tags = spec["tags"].as_array_mut().expect("tags");
        tags.retain(|t| {
            !t.as_str()
                .unwrap_or_default()
                .starts_with("kubernetes-io-cluster-")
        });
        tags.push(json!(cluster_tag));
    })
    .await;

    let mut mcm = e2e::start_mcm("gcp", &ns, &["--gcp-endpoint", fake.endpoint()]).await;
    let e2e::Deployed {
        deployments,
        machines,
        took,
        ..
    } = e2e::deploy_available(&env, DEPLOYMENT, &class_name, 3, Duration::from_secs(180)).await;
    mcm.assert_alive();
    println!(
        "[{:>5.1?}] 3 machines Available {took:.1?} after the MachineDeployment was applied",
        t0.elapsed(),
    );

    // The Machines and the fake's instances are the same three, each with its UID.
    let list = machines
        .list(&ListParams::default())
        .await
        .expect("list Machines")
        .items;
    let mut want = BTreeMap::new();
    for m in &list {
        assert_eq!(
            m.spec.provider_id,
            format!("gce:///{PROJECT}/{ZONE}/{}", m.name_any()),
            "providerID of {}",
            m.name_any()
        );
        let addresses = &m.status.as_ref().expect("status").addresses;
        assert!(
            addresses.iter().any(|a| a.type_ == "InternalIP"),
            "{} reports its internal IP: {addresses:?}",
            m.name_any()
        );
        want.insert(m.name_any(), m.uid().unwrap_or_default());
    }
    assert_eq!(
        tagged_instances(&fake, &cluster_tag),
        want,
        "one instance per Machine (name → UID)"
    );

    // The two capacity failures were retried after --resource-exhausted-retry, for the same machines.
    let log = fake.insert_log();
    let failed: Vec<_> = log.iter().filter(|(_, _, failing)| *failing).collect();
    assert_eq!(failed.len(), 2, "{log:?}");
    for (name, at, _) in &failed {
        let retry = log
            .iter()
            .find(|(n, t, failing)| n == name && t > at && !failing)
            .unwrap_or_else(|| {
                panic!("{name} was not created again after ResourceExhausted: {log:?}")
            });
        let gap = retry.1.duration_since(*at);
        assert!(
            gap >= Duration::from_secs(2),
            "{name} retried after only {gap:?}, before --resource-exhausted-retry {}",
            e2e::RESOURCE_EXHAUSTED_RETRY
        );
        println!("{name}: ResourceExhausted, created again {gap:.1?} later");
    }
    let calls = fake.requests();
    println!("Compute calls while bringing 3 machines up (2 inserts failed): {calls:?}");

    // Scale to 0 through the scale subresource, as `kubectl scale` does.
    let t_scale = Instant::now();
    e2e::scale_to_zero(&deployments, DEPLOYMENT, &machines).await;
    must_eventually(
        Duration::from_secs(60),
        "no instance with the cluster tag in the fake",
        || async {
            tagged_instances(&fake, &cluster_tag)
                .is_empty()
                .then_some(())
        },
    )
    .await;
    mcm.assert_alive();
    let calls = fake.requests();
    let total: u64 = calls.values().sum();
    println!(
        "[{:>5.1?}] scaled to 0 in {:.1?}, no instance left; Compute calls for the whole run: {calls:?} ({total} in all, {:.1} per machine)",
        t0.elapsed(),
        t_scale.elapsed(),
        total as f64 / 3.0
    );
    drop(mcm);
}
