//! Machine preservation end to end on the `local` provider: the real
//! `mcm run` binary against the real control plane, an in-process local
//! cloud whose simulated kubelets keep the Nodes alive, and a crash of the
//! instance (`kill`), after which kube-controller-manager marks the Node
//! `Unknown` and the machine goes `Failed`.
//!
//! The controllers' output goes to `$TMPDIR/mcm-preservation-<ns>.log`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::local_scenario;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachineSet};
use mcm_provider_local::InstanceAction;
use mcm_testenv::must_eventually;
use serde_json::json;
use std::time::Duration;

/// Node `Unknown` takes the control plane's 20 s grace period, then the 5 s health timeout.
const STEP: Duration = Duration::from_secs(60);

fn preserved(n: &Node) -> Option<(String, String, String)> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == c::NODE_PRESERVED_CONDITION)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == c::PRESERVED_TAINT))
}

#[tokio::test]
async fn a_node_annotated_when_failed_keeps_its_crashed_vm_until_the_expiry_then_is_replaced() {
    let Some(s) = local_scenario::start(
        "preservation-local",
        |config| config.tunables.boot_delay_ms = 1_000,
        &[
            "--max-retry-period",
            "5s",
            "--machine-health-timeout",
            "5s",
            "--machine-preserve-timeout",
            "15s",
        ],
    )
    .await
    else {
        return;
    };
    let (env, ns, admin) = (&s.env, s.ns.clone(), &s.admin);
    let pp = PostParams::default();
    s.create_userdata_secret("userdata").await;
    let class: MachineClass = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "local", "namespace": ns},
        "provider": "local",
        "providerSpec": {"image": "local-ubuntu", "instanceType": "small",
                         "tags": {format!("kubernetes.io/cluster/{ns}"): "1", "kubernetes.io/role/node": "1"}},
        "secretRef": {"name": "userdata", "namespace": ns}
    }))
    .expect("MachineClass");
    env.api::<MachineClass>()
        .create(&pp, &class)
        .await
        .expect("create MachineClass");
    let set: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "pool", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"pool": "p"}},
            "template": {"metadata": {"labels": {"pool": "p"}},
                         "spec": {"class": {"kind": "MachineClass", "name": "local"}}}
        }
    }))
    .expect("MachineSet");
    env.api::<MachineSet>()
        .create(&pp, &set)
        .await
        .expect("create MachineSet");

    let machines: Api<Machine> = env.api();
    let nodes: Api<Node> = Api::all(env.client.clone());
    let (name, node) = must_eventually(STEP, "the machine runs", || async {
        let m = machines.list(&Default::default()).await.ok()?.items.pop()?;
        let phase = m.status.as_ref()?.current_status.phase.clone();
        let node = m.labels().get(c::NODE_LABEL)?.clone();
        (phase == mcm_api::MachinePhase::Running).then(|| (m.name_any(), node))
    })
    .await;

    // The Node's annotation preserves the machine once it fails.
    let patch = json!({"metadata": {"annotations": {c::PRESERVE_ANNOTATION: "when-failed"}}});
    nodes
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate node");
    must_eventually(
        STEP,
        "the node's value is recorded on the machine",
        || async {
            let m = machines.get(&name).await.ok()?;
            (m.annotations()
                .get(c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION)
                .map(String::as_str)
                == Some("when-failed"))
            .then_some(())
        },
    )
    .await;

    admin
        .instance_action(&name, InstanceAction::Kill)
        .await
        .expect("kill the instance");
    let until = must_eventually(STEP, "the failed machine is preserved", || async {
        let m = machines.get(&name).await.ok()?;
        let cs = &m.status.as_ref()?.current_status;
        (cs.phase == mcm_api::MachinePhase::Failed)
            .then_some(())
            .and(cs.preserve_expiry_time.as_ref())
            .map(|t| t.0.as_second())
    })
    .await;
    let n = must_eventually(STEP, "the node is tainted and drained", || async {
        let n = nodes.get(&node).await.ok()?;
        let (status, reason, message) = preserved(&n)?;
        (status == "True"
            && reason == c::PRESERVED_BY_USER
            && message.starts_with(c::PRESERVED_NODE_DRAIN_SUCCESSFUL)
            && tainted(&n))
        .then_some(n)
    })
    .await;
    assert_ne!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "tainted, not cordoned"
    );
    // Kept until the expiry: one Machine, its VM still in the cloud.
    while k8s_openapi::jiff::Timestamp::now().as_second() < until - 1 {
        let all = machines
            .list(&Default::default())
            .await
            .expect("list")
            .items;
        assert_eq!(all.len(), 1, "replaced before the expiry");
        assert!(all[0].metadata.deletion_timestamp.is_none());
        let vms = admin.instances().await.expect("instances");
        assert!(
            vms.iter().any(|i| i.machine_name == name),
            "the preserved VM was deleted before the expiry"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Expired: the Failed machine is replaced and its VM deleted.
    must_eventually(STEP, "replaced after the expiry", || async {
        let all = machines.list(&Default::default()).await.ok()?.items;
        let vms = admin.instances().await.ok()?;
        (!all.iter().any(|m| m.name_any() == name)
            && all.len() == 1
            && !vms.iter().any(|i| i.machine_name == name))
        .then_some(())
    })
    .await;
}
