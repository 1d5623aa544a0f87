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

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineClass, MachineDeployment};
use mcm_fake_openstack::FakeOpenStack;
use mcm_testenv::{eventually, must_eventually, TestEnv};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const EXAMPLE: &str = include_str!("../../../examples/openstack-machine-class.yaml");
const DEPLOYMENT: &str = "openstack-e2e";

use mcm_testenv::free_port;

async fn phases(machines: &Api<Machine>) -> BTreeMap<String, String> {
    machines
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let phase = m
                .status
                .as_ref()
                .map(|s| s.current_status.phase.as_str().to_string())
                .unwrap_or_default();
            (m.name_any(), phase)
        })
        .collect()
}

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
    let network = fake.add_network("shoot--demo");
    let subnet = fake.add_subnet(&network, "shoot--demo-nodes", "10.250.0.0/24");
    fake.set_build_polls(1);
    let cluster_key = format!("kubernetes.io-cluster-shoot--e2e-{}", std::process::id());

    let secrets: Api<Secret> = env.api();
    let classes: Api<MachineClass> = env.api();
    let mut class_name = String::new();
    for doc in serde_yaml::Deserializer::from_str(EXAMPLE) {
        let mut doc = Value::deserialize(doc).expect("the example parses");
        doc["metadata"]["namespace"] = json!(ns);
        match doc["kind"].as_str() {
            Some("Secret") => {
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
                let s: Secret = serde_json::from_value(doc).expect("the example's Secret");
                secrets
                    .create(&PostParams::default(), &s)
                    .await
                    .expect("create Secret");
            }
            Some("MachineClass") => {
                doc["secretRef"]["namespace"] = json!(ns);
                doc["credentialsSecretRef"]["namespace"] = json!(ns);
                let spec = &mut doc["providerSpec"]["spec"];
                spec["networkID"] = json!(network);
                spec["subnetIDs"] = json!([subnet]);
                let tags = spec["tags"].as_object_mut().expect("tags");
                tags.retain(|k, _| !k.starts_with("kubernetes.io-cluster-"));
                tags.insert(cluster_key.clone(), json!("1"));
                let class: MachineClass = serde_json::from_value(doc).expect("the example's class");
                class_name = class.name_any();
                classes
                    .create(&PostParams::default(), &class)
                    .await
                    .expect("create MachineClass");
            }
            other => panic!("unexpected document {other:?} in the example"),
        }
    }
    assert!(!class_name.is_empty());

    let port = free_port();
    let mut mcm = e2e::mcm_run("openstack", &ns, port, &[]);
    must_eventually(
        Duration::from_secs(30),
        "mcm run listens on its port",
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    mcm.assert_alive();
    e2e::assert_has_driver(&mcm, "openstack").await;

    let deployments: Api<MachineDeployment> = env.api();
    let md: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": ns},
        "spec": {
            "replicas": 3,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"name": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"name": DEPLOYMENT}},
                "spec": {"class": {"kind": "MachineClass", "name": class_name}}
            }
        }
    }))
    .expect("MachineDeployment");
    deployments
        .create(&PostParams::default(), &md)
        .await
        .expect("create MachineDeployment");
    let machines: Api<Machine> = env.api();
    let reached = eventually(Duration::from_secs(180), "3 Available machines", || async {
        let p = phases(&machines).await;
        (p.len() == 3 && p.values().all(|ph| ph == "Available")).then_some(())
    })
    .await;
    if let Err(e) = reached {
        panic!(
            "{e}: {:?}; fake calls {:?}",
            phases(&machines).await,
            fake.calls()
        );
    }
    mcm.assert_alive();
    println!("[{:>5.1?}] 3 machines Available", t0.elapsed());

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

    deployments
        .patch_scale(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale to 0");
    let gone = eventually(Duration::from_secs(120), "no Machine left", || async {
        phases(&machines).await.is_empty().then_some(())
    })
    .await;
    if let Err(e) = gone {
        panic!("{e}: {:?}", phases(&machines).await);
    }
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
