//! The simulated kubelets against the real test control plane
//! (`hack/testenv.sh up`): skipped when it is not running, except with CI=true.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use mcm_driver::Driver;
use mcm_provider_local::kubelet::{LEASE_NAMESPACE, MACHINE_NAME_LABEL};
use mcm_provider_local::server::CloudConfig;
use mcm_provider_local::wire::instance_id_of;
use mcm_provider_local::{InstanceAction, Tunables};
use mcm_testenv::{kubeconfig_path, must_eventually, must_hold_for, TestEnv};
use std::time::Duration;

fn condition(node: &Node, type_: &str) -> Option<(String, Option<k8s_openapi::jiff::Timestamp>)> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.clone(),
                c.last_heartbeat_time.as_ref().map(|t| t.0),
            )
        })
}

async fn renew_time(leases: &Api<Lease>, name: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.renew_time)
        .map(|t| t.0)
}

/// The kubelets' heartbeat (Node Lease renewal) interval in this test.
const HEARTBEAT: Duration = Duration::from_secs(1);
#[tokio::test]
async fn kubelets_register_ready_nodes_that_turn_dual_stack_after_initialize_stop_heartbeating_when_killed_and_go_with_their_instance(
) {
    let Some(env) = TestEnv::new("local-kubelet").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = CloudConfig::new(dir.path().join("cloud.redb"));
    config.tunables = Tunables::unlimited();
    config.tunables.boot_delay_ms = 500;
    config.target_kubeconfig = Some(kubeconfig_path());
    config.heartbeat_interval = HEARTBEAT;
    let (handle, driver, admin) = start_with(config).await;

    let class = class("kubelet");
    let m = machine("lk");
    let name = m.metadata.name.clone().expect("name");
    let req = request(&m, &class);
    let created = driver.create_machine(&req).await.expect("create");
    let id = instance_id_of(&created.provider_id)
        .expect("id")
        .to_string();

    let nodes: Api<Node> = Api::all(env.client.clone());
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), LEASE_NAMESPACE);
    let node = must_eventually(Duration::from_secs(30), "a Ready node", || async {
        let n = nodes.get_opt(&name).await.ok().flatten()?;
        (condition(&n, "Ready")?.0 == "True").then_some(n)
    })
    .await;
    let spec = node.spec.clone().expect("spec");
    assert_eq!(
        spec.provider_id.as_deref(),
        Some(created.provider_id.as_str())
    );
    let labels = node.metadata.labels.clone().expect("labels");
    assert_eq!(labels.get(MACHINE_NAME_LABEL), Some(&name));
    let addresses = node
        .status
        .clone()
        .and_then(|s| s.addresses)
        .expect("addresses");
    assert!(addresses
        .iter()
        .any(|a| a.type_ == "InternalIP" && a.address.starts_with("10.")));
    let ipv6_internal = |n: &Node| -> Vec<String> {
        n.status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .map(|a| {
                a.iter()
                    .filter(|a| a.type_ == "InternalIP")
                    .filter(|a| a.address.parse::<std::net::Ipv6Addr>().is_ok())
                    .map(|a| a.address.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        ipv6_internal(&node).is_empty(),
        "no IPv6 before InitializeMachine: {addresses:?}"
    );

    // Dual stack: InitializeMachine assigns the class's 2 IPv6 addresses
    // (ipv6AddressCount), and the kubelet's next status refresh puts them on
    // the Node as InternalIPs, next to the IPv4 one.
    let init = driver.initialize_machine(&req).await.expect("initialize");
    let assigned: Vec<String> = init
        .addresses
        .iter()
        .filter(|a| a.address.parse::<std::net::Ipv6Addr>().is_ok())
        .map(|a| a.address.clone())
        .collect();
    assert_eq!(assigned.len(), 2, "{:?}", init.addresses);
    let dual = must_eventually(
        Duration::from_secs(10),
        "the Node's IPv6 InternalIPs",
        || async {
            let n = nodes.get_opt(&name).await.ok().flatten()?;
            let mut v6 = ipv6_internal(&n);
            v6.sort();
            let mut want = assigned.clone();
            want.sort();
            (v6 == want).then_some(n)
        },
    )
    .await;
    assert!(
        dual.status
            .and_then(|s| s.addresses)
            .unwrap_or_default()
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address.starts_with("10.")),
        "the IPv4 InternalIP stays"
    );

    // A condition another controller owns (the machine controller's
    // InPlaceUpdate condition) survives the heartbeats: the status patch
    // merges conditions by type, as a real kubelet's does.
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "InPlaceUpdate", "status": "True", "reason": "CandidateForUpdate",
        "message": "Node is a candidate for in-place update"
    }]}});
    nodes
        .patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(&patch),
        )
        .await
        .expect("foreign condition");
    let patched_at = k8s_openapi::jiff::Timestamp::now();
    let later = must_eventually(
        Duration::from_secs(10),
        "a heartbeat after the patch",
        || async {
            let n = nodes.get_opt(&name).await.ok().flatten()?;
            let beat = condition(&n, "Ready")?.1?;
            (beat > patched_at).then_some(n)
        },
    )
    .await;
    assert_eq!(
        condition(&later, "InPlaceUpdate").map(|c| c.0),
        Some("True".to_string()),
        "the InPlaceUpdate condition survived the kubelet's status refresh"
    );

    // Heartbeats: the lease and the Ready condition keep moving.
    let first = must_eventually(Duration::from_secs(10), "a lease", || {
        renew_time(&leases, &name)
    })
    .await;
    let hb1 = condition(&node, "Ready")
        .and_then(|c| c.1)
        .expect("heartbeat time");
    let second = must_eventually(Duration::from_secs(10), "a renewed lease", || async {
        renew_time(&leases, &name).await.filter(|t| *t > first)
    })
    .await;
    must_eventually(
        Duration::from_secs(10),
        "a newer Ready heartbeat",
        || async {
            let n = nodes.get_opt(&name).await.ok().flatten()?;
            condition(&n, "Ready")?.1.filter(|t| *t > hb1)
        },
    )
    .await;

    // Kill the instance: heartbeats stop.
    admin
        .instance_action(&id, InstanceAction::Kill)
        .await
        .expect("kill");
    // A renewal already in flight may still land within one interval.
    tokio::time::sleep(HEARTBEAT + HEARTBEAT / 2).await;
    let frozen = renew_time(&leases, &name).await.expect("lease");
    assert!(frozen >= second);
    // Three heartbeat intervals without a renewal.
    must_hold_for(
        HEARTBEAT * 3,
        "the lease of a killed instance is not renewed",
        || async { renew_time(&leases, &name).await == Some(frozen) },
    )
    .await;

    // The node lifecycle controller (grace period 20 s in the test env) marks the Node Unknown.
    must_eventually(
        Duration::from_secs(60),
        "the node's Ready condition Unknown",
        || async {
            let n = nodes.get_opt(&name).await.ok().flatten()?;
            (condition(&n, "Ready")?.0 == "Unknown").then_some(())
        },
    )
    .await;

    // Started again, it heartbeats again and the Node turns Ready.
    admin
        .instance_action(&id, InstanceAction::Start)
        .await
        .expect("start");
    must_eventually(Duration::from_secs(30), "the node Ready again", || async {
        let n = nodes.get_opt(&name).await.ok().flatten()?;
        (condition(&n, "Ready")?.0 == "True").then_some(())
    })
    .await;

    // Deleting the instance (terminating it) stops its heartbeats and deletes
    // its Node, as a real cloud's node lifecycle controller does.
    driver.delete_machine(&req).await.expect("delete");
    must_eventually(
        Duration::from_secs(30),
        "the terminated instance's node deleted",
        || async { nodes.get_opt(&name).await.ok()?.is_none().then_some(()) },
    )
    .await;

    let _ = nodes.delete(&name, &DeleteParams::default()).await;
    let _ = leases.delete(&name, &DeleteParams::default()).await;
    handle.shutdown().await.expect("shutdown");
}
