//! The node sync against the real control plane, on the `local` provider: an
//! in-process local cloud whose simulated kubelets register the Nodes, and
//! the Machine controller in process.
//!
//! Nodes are cluster-wide and other tests share the control plane; every Node
//! here belongs to a Machine of this test's namespace.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachinePhase};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::collections::BTreeMap;

use crate::local_world::{World, WAIT};

impl World {
    async fn create_class(&self, name: &str, virtual_capacity: serde_json::Value) {
        let class: MachineClass = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": name},
            "provider": "local",
            "providerSpec": {
                "image": "local-ubuntu", "instanceType": "small",
                "tags": {format!("kubernetes.io/cluster/{}", self.env.namespace): "1",
                         "kubernetes.io/role/node": "1"}
            },
            "secretRef": {"name": "creds", "namespace": self.env.namespace},
            "nodeTemplate": {
                "capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
                "virtualCapacity": virtual_capacity,
                "instanceType": "small", "region": "local", "zone": self.env.namespace
            }
        }))
        .expect("class");
        self.env
            .api::<MachineClass>()
            .create(&PostParams::default(), &class)
            .await
            .expect("create class");
    }

    async fn create_machine(&self, name: &str, class: &str, node_template: serde_json::Value) {
        let m: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"class": {"kind": "MachineClass", "name": class}, "nodeTemplate": node_template},
        }))
        .expect("machine");
        self.env
            .api::<Machine>()
            .create(&PostParams::default(), &m)
            .await
            .expect("create machine");
    }

    async fn running_node(&self, machine: &str) -> String {
        must_eventually(WAIT, &format!("machine {machine} Running"), || async {
            let m = self.env.api::<Machine>().get_opt(machine).await.ok()??;
            let status = m.status.clone().unwrap_or_default();
            (status.current_status.phase == MachinePhase::Running)
                .then(|| m.metadata.labels.and_then(|l| l.get("node").cloned()))
                .flatten()
        })
        .await
    }

    /// Waits until `check` holds for the node.
    async fn node_where(&self, node: &str, what: &str, check: impl Fn(&Node) -> bool) -> Node {
        let nodes = self.nodes();
        must_eventually(WAIT, what, || async {
            nodes.get_opt(node).await.ok()?.filter(|n| check(n))
        })
        .await
    }
}

fn labels(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

fn annotations(n: &Node) -> BTreeMap<String, String> {
    n.metadata.annotations.clone().unwrap_or_default()
}

fn taints(n: &Node) -> Vec<Taint> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn has_taint(n: &Node, key: &str, value: &str, effect: &str) -> bool {
    taints(n)
        .iter()
        .any(|t| t.key == key && t.effect == effect && t.value.as_deref().unwrap_or("") == value)
}

fn capacity(n: &Node, key: &str) -> Option<String> {
    n.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get(key))
        .map(|q| q.0.clone())
}

async fn patch_node_template(env: &TestEnv, machine: &str, node_template: serde_json::Value) {
    env.api::<Machine>()
        .patch(
            machine,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/nodeTemplate", "value": node_template}
                ]))
                .expect("json patch"),
            ),
        )
        .await
        .expect("patch machine");
}

/// Another writer's guarded write: read, patch with the resourceVersion,
/// and on a conflict (the kubelet's status, the controller's writes) read
/// again, as any client with a precondition does.
async fn add_foreign_label_and_taint(client: &Client, node: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    must_eventually(WAIT, "the foreign label and taint written", || async {
        let n = nodes.get(node).await.expect("node");
        let mut ts = taints(&n);
        ts.push(Taint {
            key: "someone-else".into(),
            value: Some("x".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        match nodes
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"labels": {"someone-else": "x"}, "resourceVersion": n.metadata.resource_version},
                    "spec": {"taints": ts}
                })),
            )
            .await
        {
            Ok(_) => Some(()),
            Err(kube::Error::Api(s)) if s.code == 409 => None,
            Err(e) => panic!("patch node: {e}"),
        }
    })
    .await;
}

#[tokio::test]
async fn node_template_changes_reach_the_node_and_removed_entries_leave_it() {
    let Some(w) = World::start("node-sync-template", |_| {}).await else {
        return;
    };
    w.create_class("local-class", json!({"example.com/slices": "4"}))
        .await;
    let m = w.unique("m-sync");
    w.create_machine(
        &m,
        "local-class",
        json!({
            "metadata": {
                "labels": {"pool": "a", "goes-away": "1"},
                "annotations": {"note": "x", "goes-away": "1"}
            },
            "spec": {"taints": [
                {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
                {"key": "goes-away", "effect": "NoExecute"}
            ]}
        }),
    )
    .await;
    let node = w.running_node(&m).await;
    let n = w
        .node_where(
            &node,
            "template, bookkeeping and virtual capacity on the node",
            |n| {
                labels(n).get("pool").map(String::as_str) == Some("a")
                    && annotations(n).get("note").map(String::as_str) == Some("x")
                    && has_taint(n, "dedicated", "db", "NoSchedule")
                    && has_taint(n, "goes-away", "", "NoExecute")
                    && capacity(n, "example.com/slices").as_deref() == Some("4")
                    && annotations(n).contains_key(c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION)
            },
        )
        .await;
    let alt = annotations(&n)[c::LAST_APPLIED_ALT_ANNOTATION].clone();
    let recorded: serde_json::Value = serde_json::from_str(&alt).expect("bookkeeping is JSON");
    assert_eq!(recorded["metadata"]["labels"]["pool"], "a");
    assert!(
        capacity(&n, "cpu").is_some(),
        "the kubelet's capacity stays"
    );

    // Someone else labels and taints the node; then the template changes:
    // a label, an annotation and a taint leave it, a taint changes its value.
    add_foreign_label_and_taint(&w.env.client, &node).await;
    patch_node_template(
        &w.env,
        &m,
        json!({
            "metadata": {"labels": {"pool": "b"}, "annotations": {"note": "x"}},
            "spec": {"taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]}
        }),
    )
    .await;
    let n = w
        .node_where(&node, "template change applied to the node", |n| {
            labels(n).get("pool").map(String::as_str) == Some("b")
                && !labels(n).contains_key("goes-away")
                && !annotations(n).contains_key("goes-away")
                && has_taint(n, "dedicated", "web", "NoSchedule")
                && !has_taint(n, "goes-away", "", "NoExecute")
        })
        .await;
    let dedicated = taints(&n)
        .iter()
        .filter(|t| t.key == "dedicated" && t.effect == "NoSchedule")
        .count();
    assert_eq!(dedicated, 1, "a changed taint replaces the old one");
    assert_eq!(
        labels(&n).get("someone-else").map(String::as_str),
        Some("x"),
        "others' labels stay"
    );
    assert!(
        has_taint(&n, "someone-else", "x", "NoSchedule"),
        "others' taints stay"
    );

    // The class drops its virtual capacity: the key and its bookkeeping go.
    w.env
        .api::<MachineClass>()
        .patch(
            "local-class",
            &PatchParams::default(),
            &Patch::Merge(json!({"nodeTemplate": {"virtualCapacity": null}})),
        )
        .await
        .expect("patch class");
    w.node_where(&node, "virtual capacity removed from the node", |n| {
        capacity(n, "example.com/slices").is_none()
            && !annotations(n).contains_key(c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION)
            && capacity(n, "cpu").is_some()
    })
    .await;
    w.stop().await;
}

#[tokio::test]
async fn a_node_sync_the_api_server_rejects_is_reported_and_holds_the_startup_taint() {
    let Some(w) = World::start("node-sync-rejected", |_| {}).await else {
        return;
    };
    w.create_class("local-class", json!({})).await;
    // An invalid taint effect: every node patch carrying it is refused (422).
    let m = w.unique("m-bad");
    w.create_machine(
        &m,
        "local-class",
        json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "Sometimes"}]}}),
    )
    .await;
    // The health check still runs, but the template is not on the Node, so
    // the startup taint stays and the machine stays Pending, saying why
    // (design: startup-taint.md).
    let held = must_eventually(WAIT, "the machine held by the startup taint", || async {
        let mm = w.env.api::<Machine>().get_opt(&m).await.ok()??;
        let st = mm.status.clone().unwrap_or_default();
        (st.current_status.phase == MachinePhase::Pending
            && st
                .last_operation
                .description
                .contains("carries the startup taint"))
        .then(|| (mm.metadata.labels.and_then(|l| l.get("node").cloned()), st))
    })
    .await;
    let node = held.0.expect("node label");
    assert!(
        held.1.last_operation.description.contains("node template"),
        "{}",
        held.1.last_operation.description
    );
    let n = w.nodes().get(&node).await.expect("node");
    assert!(has_taint(&n, c::STARTUP_TAINT_KEY, "", "NoSchedule"));
    let events: Api<K8sEvent> = w.env.api();
    must_eventually(WAIT, "a NodeSyncFailed warning on the machine", || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.iter()
            .any(|e| {
                e.reason.as_deref() == Some("NodeSyncFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(m.as_str())
            })
            .then_some(())
    })
    .await;
    let n = w.nodes().get(&node).await.expect("node");
    assert!(!has_taint(&n, "dedicated", "db", "Sometimes"));
    // Fixing the template lets the sync through.
    patch_node_template(
        &w.env,
        &m,
        json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}),
    )
    .await;
    w.node_where(&node, "the fixed taint on the node", |n| {
        has_taint(n, "dedicated", "db", "NoSchedule")
    })
    .await;
    // Then the startup taint goes and the machine runs.
    assert_eq!(w.running_node(&m).await, node);
    w.node_where(&node, "the startup taint removed", |n| {
        !has_taint(n, c::STARTUP_TAINT_KEY, "", "NoSchedule")
    })
    .await;
    w.stop().await;
}
