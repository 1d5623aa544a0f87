#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking
#![cfg(feature = "openstack")]
//! The OpenStack provider end to end: the real `mcm run` binary, without a
//! target cluster, against the real control plane and the in-process
//! OpenStack fake (`mcm-fake-openstack`, Keystone v3 + Nova + Neutron +
//! Cinder on 127.0.0.1).
//!
//! The MachineClass and its two Secrets are `examples/openstack-machine-class.yaml`
//! as a user applies it, with the Keystone URL, network and subnet replaced by
//! the fake's and a cluster key of its own. A MachineDeployment of 3 must
//! reach `Available`, and scaling it to 0 must leave no server, port or volume.
//!
//! Without the control plane the test skips, except in CI (`CI` set and not `false`/`0`), where it fails.

use crate::e2e;

use kube::api::ListParams;
use kube::ResourceExt;
use mcm_fake_openstack::FakeOpenStack;
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const EXAMPLE: &str = include_str!("../../../examples/openstack-machine-class.yaml");
const DEPLOYMENT: &str = "openstack-e2e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_on_the_openstack_fake_brings_3_machines_to_available_and_scales_to_0_leaving_nothing(
) {
    let t0 = Instant::now();
    // openstack_sdk compiles rustls' aws-lc-rs backend in next to kube's ring:
    // pick one before the test's Kubernetes client is built.
    mcm_provider_openstack::install_crypto_provider();
    let Some(env) = TestEnv::new("openstack-e2e").await else {
        return;
    };
    let ns = env.namespace.clone();
    let fake = FakeOpenStack::start().await.expect("fake");
    fake.add_flavor("m1.large");
    fake.add_image("ubuntu-24.04");
    fake.add_security_group("shoot--demo-nodes");
    fake.add_keypair("shoot--demo-ssh-publickey");
    let network = fake.add_network("shoot--demo");
    let subnet = fake.add_subnet(&network, "shoot--demo-nodes", "10.250.0.0/24");
    fake.set_build_polls(1);
    let cluster_key = format!("kubernetes.io-cluster-{}", e2e::unique("shoot--e2e"));

    let class_name = e2e::create_example(&env, EXAMPLE, |doc| {
        if doc["kind"] == "Secret" {
            if doc["stringData"]["authURL"].is_string() {
                doc["stringData"] = json!({
                    "authURL": fake.auth_url(),
                    "domainName": mcm_fake_openstack::DOMAIN,
                    "tenantName": mcm_fake_openstack::PROJECT,
                    "username": mcm_fake_openstack::USERNAME,
                    "password": mcm_fake_openstack::PASSWORD,
                    "insecure": "false",
                });
            }
            return;
        }
        let spec = &mut doc["providerSpec"]["spec"];
        spec["networkID"] = json!(network);
        spec["subnetIDs"] = json!([subnet]);
        let tags = spec["tags"].as_object_mut().expect("tags");
        tags.retain(|k, _| !k.starts_with("kubernetes.io-cluster-"));
        tags.insert(cluster_key.clone(), json!("1"));
    })
    .await;

    let mut mcm = e2e::start_mcm("openstack", &ns, &[]).await;
    let e2e::Deployed {
        deployments,
        machines,
        took,
        ..
    } = e2e::deploy_available(&env, DEPLOYMENT, &class_name, 3, Duration::from_secs(180)).await;
    mcm.assert_alive();
    println!(
        "[{:>5.1?}] 3 machines Available {took:.1?} after the MachineDeployment was applied",
        t0.elapsed()
    );

    // The Machines and the fake's servers are the same three, each with its port and volume.
    let list = machines
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    let mut by_server = BTreeMap::new();
    for m in &list {
        let pid = m.spec.provider_id.clone();
        assert!(pid.starts_with("openstack:///RegionOne/"), "{pid}");
        by_server.insert(
            pid.rsplit('/').next().unwrap_or_default().to_string(),
            m.name_any(),
        );
    }
    let servers: BTreeMap<String, String> = fake
        .servers()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap_or_default().to_string(),
                s["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(servers, by_server, "one server per Machine");
    let ports = fake.ports();
    assert_eq!(ports.len(), 3, "one port per machine: {ports:?}");
    for p in &ports {
        assert!(
            p["tags"]
                .as_array()
                .is_some_and(|t| t.contains(&json!(cluster_key))),
            "{p}"
        );
    }
    assert_eq!(fake.volumes().len(), 3, "one root volume per machine");
    let calls = fake.calls();
    println!(
        "[{:>5.1?}] fake calls for 3 machines: {calls:?}",
        t0.elapsed()
    );

    e2e::scale_to_zero(&deployments, DEPLOYMENT, &machines).await;
    must_eventually(
        Duration::from_secs(60),
        "no server, port or volume left",
        || async {
            (fake.servers().is_empty() && fake.ports().is_empty() && fake.volumes().is_empty())
                .then_some(())
        },
    )
    .await;
    mcm.assert_alive();
    println!(
        "[{:>5.1?}] scaled to 0: no server, port or volume left",
        t0.elapsed()
    );
    drop(mcm);
}
