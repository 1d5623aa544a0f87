//! Machine preservation against the real control plane: the machine
//! controller and the MachineSet controller in process, a scripted driver,
//! and the test playing kubelet (it registers the Nodes and flips their Ready
//! condition). Preserve timeouts are seconds long, so every expiry is seen.
//!
//! See `docs/design/machine.md`, "Preservation".

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use mcm_api::constants as c;
use mcm_api::{Machine, MachinePhase, MachineSet};
use mcm_core::time::from_k8s;
use mcm_driver::testing::{Script, ScriptedDriver};
use mcm_runtime::sets::{self, SetsConfig};
use mcm_runtime::{machine, Config};
use mcm_testenv::{must_eventually, must_hold_for, TestEnv};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

use crate::machine_common as mc;
use mc::{get, kubelet, phase, WAIT};

/// The controllers of one test; aborted when dropped.
struct Controllers(Vec<JoinHandle<()>>);

impl Drop for Controllers {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The set controllers' resync period in these tests.
const SETS_RESYNC: Duration = Duration::from_secs(2);

/// A period in which both controllers made at least one more pass: the
/// machine controller's longest retry and the sets' resync.
fn one_pass_of_each(ns: &str) -> Duration {
    config(ns).long_retry.max(SETS_RESYNC) + Duration::from_millis(500)
}

fn config(ns: &str) -> Config {
    Config {
        long_retry: Duration::from_secs(2),
        health_timeout: Duration::from_secs(2),
        eviction_retry_interval: Duration::from_millis(500),
        ..mc::config(ns)
    }
}

fn start(env: &TestEnv, driver: Arc<ScriptedDriver>) -> Controllers {
    let ctx = mc::context(env, "scripted", driver, true, config(&env.namespace));
    let machines = tokio::spawn(machine::run(ctx, std::future::pending()));
    let sets = tokio::spawn(sets::run_with_target(
        env.client.clone(),
        Some(env.client.clone()),
        env.namespace.clone(),
        SetsConfig {
            resync_period: SETS_RESYNC,
            ..SetsConfig::default()
        },
        std::future::pending(),
    ));
    Controllers(vec![machines, sets])
}

async fn setup(test: &str) -> Option<(TestEnv, Arc<ScriptedDriver>, Controllers)> {
    let env = mc::namespace_with_secret(test, "#!/bin/sh\necho <<MACHINE_NAME>>").await?;
    env.create_class("scripted-class", "scripted", "creds", json!({"image": "x"}))
        .await
        .expect("create class");
    let driver = Arc::new(ScriptedDriver::new(Script {
        node_prefix: format!("{}-", env.namespace),
        ..Script::default()
    }));
    let controllers = start(&env, driver.clone());
    Some((env, driver, controllers))
}

/// A MachineSet of one machine; `spec` is merged into the machine template's spec.
async fn create_set(env: &TestEnv, spec: serde_json::Value, max_auto_preserved: i32) {
    create_set_of(env, spec, max_auto_preserved, 1).await;
}

/// Like [`create_set`], with `replicas` machines. The machines carry the
/// `name` label of a MachineDeployment, which the Unknown→Failed limiter groups by.
async fn create_set_of(
    env: &TestEnv,
    spec: serde_json::Value,
    max_auto_preserved: i32,
    replicas: i32,
) {
    let mut template_spec = json!({"class": {"kind": "MachineClass", "name": "scripted-class"}});
    if let (Some(t), Some(more)) = (template_spec.as_object_mut(), spec.as_object()) {
        t.extend(more.clone());
    }
    let ms: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "pool"},
        "spec": {
            "replicas": replicas,
            "autoPreserveFailedMachineMax": max_auto_preserved,
            "selector": {"matchLabels": {"set": "pool"}},
            "template": {"metadata": {"labels": {"set": "pool", "name": "pool"}}, "spec": template_spec},
        },
    }))
    .expect("machine set");
    env.api::<MachineSet>()
        .create(&PostParams::default(), &ms)
        .await
        .expect("create machine set");
}

fn expiry(m: &Machine) -> Option<DateTime<Utc>> {
    m.status
        .as_ref()
        .and_then(|s| s.current_status.preserve_expiry_time.as_ref())
        .map(from_k8s)
}

async fn machines(env: &TestEnv) -> Vec<Machine> {
    env.api::<Machine>()
        .list(&ListParams::default())
        .await
        .expect("list machines")
        .items
}

async fn node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("get node")
}

fn preserved_condition(n: &Node) -> Option<NodeCondition> {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == c::NODE_PRESERVED_CONDITION))
        .cloned()
}

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == c::PRESERVED_TAINT && t.effect == "NoSchedule")
        })
}

fn annotation<'a>(obj: &'a impl ResourceExt, key: &str) -> Option<&'a str> {
    obj.annotations().get(key).map(String::as_str)
}

/// Waits for the set's machine and its Node, plays a Ready kubelet and waits
/// until it runs. Returns (machine, node).
async fn running_machine(env: &TestEnv) -> (String, String) {
    let (name, node_name) = must_eventually(WAIT, "the set's machine has a node", || async {
        machines(env).await.into_iter().find_map(|m| {
            let node = m.labels().get(c::NODE_LABEL)?.clone();
            Some((m.name_any(), node))
        })
    })
    .await;
    kubelet(&env.client, &node_name, &name, true).await;
    must_eventually(WAIT, "the machine runs", || async {
        get(env, &name)
            .await
            .filter(|m| phase(m) == MachinePhase::Running)
    })
    .await;
    (name, node_name)
}

async fn annotate_machine(env: &TestEnv, name: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {c::PRESERVE_ANNOTATION: value}}});
    env.api::<Machine>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate machine");
}

async fn annotate_node(client: &Client, name: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {c::PRESERVE_ANNOTATION: value}}});
    Api::<Node>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate node");
}

async fn wait_failed(env: &TestEnv, name: &str) {
    must_eventually(WAIT, &format!("machine {name} is Failed"), || async {
        get(env, name)
            .await
            .filter(|m| phase(m) == MachinePhase::Failed)
    })
    .await;
}

/// Waits until `name` is gone and another machine replaced it.
async fn wait_replaced(env: &TestEnv, name: &str, within: Duration) {
    must_eventually(within, "the machine is replaced", || async {
        let all = machines(env).await;
        (!all.iter().any(|m| m.name_any() == name) && !all.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_machine_annotated_preserve_now_keeps_its_vm_until_the_timeout() {
    let Some((env, driver, _controllers)) = setup("preserve-now").await else {
        return;
    };
    create_set(&env, json!({"machinePreserveTimeout": "15s"}), 0).await;
    let (name, node_name) = running_machine(&env).await;

    annotate_machine(&env, &name, Some("now")).await;
    let until = must_eventually(WAIT, "the machine is preserved", || async {
        get(&env, &name).await.as_ref().and_then(expiry)
    })
    .await;
    let left = until - Utc::now();
    assert!(
        left > chrono::Duration::seconds(8) && left <= chrono::Duration::seconds(15),
        "expiry = now + machinePreserveTimeout (15s), {left} left"
    );
    must_eventually(WAIT, "the node says Preserved by user", || async {
        let n = node(&env.client, &node_name).await;
        let cond = preserved_condition(&n)?;
        (cond.status == "True"
            && cond.reason.as_deref() == Some(c::PRESERVED_BY_USER)
            && annotation(&n, c::CA_SCALE_DOWN_DISABLED_ANNOTATION) == Some("true"))
        .then_some(())
    })
    .await;
    assert!(
        !tainted(&node(&env.client, &node_name).await),
        "a running preserved machine stays schedulable"
    );

    // It fails: it is kept (tainted, drained), not deleted, until the expiry.
    kubelet(&env.client, &node_name, &name, false).await;
    wait_failed(&env, &name).await;
    must_eventually(
        WAIT,
        "the failed preserved node is tainted and drained",
        || async {
            let n = node(&env.client, &node_name).await;
            let msg = preserved_condition(&n)?.message.unwrap_or_default();
            (tainted(&n) && msg.starts_with(c::PRESERVED_NODE_DRAIN_SUCCESSFUL)).then_some(())
        },
    )
    .await;
    while Utc::now() < until - chrono::Duration::milliseconds(500) {
        let m = get(&env, &name).await.expect("kept until the expiry");
        assert!(
            m.metadata.deletion_timestamp.is_none(),
            "deleted before the expiry"
        );
        assert_eq!(
            ScriptedDriver::count(&driver.calls.delete),
            0,
            "VM deleted early"
        );
        assert_eq!(machines(&env).await.len(), 1, "replaced before the expiry");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Expired: the machine goes the way of a Failed machine, and is replaced.
    wait_replaced(&env, &name, WAIT).await;
    assert!(ScriptedDriver::count(&driver.calls.delete) >= 1);
}

#[tokio::test]
async fn a_failed_machine_preserved_when_failed_is_drained_tainted_and_not_replaced_until_expiry() {
    let Some((env, driver, _controllers)) = setup("preserve-when-failed").await else {
        return;
    };
    create_set(&env, json!({"machinePreserveTimeout": "12s"}), 0).await;
    let (name, node_name) = running_machine(&env).await;
    annotate_machine(&env, &name, Some("when-failed")).await;
    // A pod to drain, and a DaemonSet-less node the user cordoned himself.
    let pods: Api<Pod> = env.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"nodeName": node_name, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    must_hold_for(
        one_pass_of_each(&env.namespace),
        "when-failed preserves nothing while the machine runs",
        || async { get(&env, &name).await.as_ref().and_then(expiry).is_none() },
    )
    .await;

    kubelet(&env.client, &node_name, &name, false).await;
    wait_failed(&env, &name).await;
    let until = must_eventually(WAIT, "the failed machine is preserved", || async {
        get(&env, &name).await.as_ref().and_then(expiry)
    })
    .await;
    must_eventually(WAIT, "the node is tainted and drained", || async {
        let n = node(&env.client, &node_name).await;
        let cond = preserved_condition(&n)?;
        (tainted(&n)
            && cond.status == "True"
            && cond
                .message
                .unwrap_or_default()
                .starts_with(c::PRESERVED_NODE_DRAIN_SUCCESSFUL))
        .then_some(())
    })
    .await;
    assert!(
        pods.get_opt("web").await.expect("get pod").is_none(),
        "the pod was evicted"
    );
    let n = node(&env.client, &node_name).await;
    assert_ne!(
        n.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "a preserved node is tainted, never cordoned"
    );
    while Utc::now() < until - chrono::Duration::milliseconds(500) {
        let all = machines(&env).await;
        assert_eq!(all.len(), 1, "replaced before the expiry");
        assert!(all[0].metadata.deletion_timestamp.is_none());
        assert_eq!(ScriptedDriver::count(&driver.calls.delete), 0);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    wait_replaced(&env, &name, WAIT).await;
}

#[tokio::test]
async fn removing_the_preserve_annotation_stops_preservation() {
    let Some((env, _driver, _controllers)) = setup("preserve-stop").await else {
        return;
    };
    create_set(&env, json!({}), 0).await;
    let (name, node_name) = running_machine(&env).await;
    annotate_machine(&env, &name, Some("when-failed")).await;
    kubelet(&env.client, &node_name, &name, false).await;
    wait_failed(&env, &name).await;
    must_eventually(WAIT, "preserved, tainted", || async {
        let n = node(&env.client, &node_name).await;
        (get(&env, &name).await.as_ref().and_then(expiry).is_some() && tainted(&n)).then_some(())
    })
    .await;
    // Kept for the flag's 96h: the set leaves it alone.
    must_hold_for(
        one_pass_of_each(&env.namespace) * 2,
        "the preserved Failed machine is not replaced",
        || async { machines(&env).await.len() == 1 },
    )
    .await;

    annotate_machine(&env, &name, None).await;
    must_eventually(WAIT, "the node says Preservation stopped", || async {
        // Once stopped, the Failed machine is replaced at once and its Node
        // deleted with it (only a machine that is no longer preserved gets
        // there): a Node that is gone has passed this point.
        let Some(n) = Api::<Node>::all(env.client.clone())
            .get_opt(&node_name)
            .await
            .expect("get node")
        else {
            return Some(());
        };
        let cond = preserved_condition(&n)?;
        (cond.status == "False"
            && cond.reason.as_deref() == Some(c::PRESERVATION_STOPPED)
            && !tainted(&n)
            && annotation(&n, c::CA_SCALE_DOWN_DISABLED_ANNOTATION).is_none())
        .then_some(())
    })
    .await;
    // No longer preserved, the Failed machine is replaced.
    wait_replaced(&env, &name, WAIT).await;
}

#[tokio::test]
async fn a_node_annotation_preserves_its_machine() {
    let Some((env, _driver, _controllers)) = setup("preserve-node").await else {
        return;
    };
    create_set(&env, json!({}), 0).await;
    let (name, node_name) = running_machine(&env).await;
    annotate_node(&env.client, &node_name, Some("now")).await;
    let m = must_eventually(WAIT, "the node's value is applied", || async {
        get(&env, &name).await.filter(|m| {
            expiry(m).is_some()
                && annotation(m, c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION) == Some("now")
        })
    })
    .await;
    let left = expiry(&m).expect("expiry") - Utc::now();
    assert!(
        left > chrono::Duration::hours(95),
        "the flag's 96h apply: {left}"
    );
    // The node's `false` beats the machine's own `now`.
    annotate_machine(&env, &name, Some("now")).await;
    annotate_node(&env.client, &node_name, Some("false")).await;
    must_eventually(WAIT, "the node's false stops preservation", || async {
        get(&env, &name).await.filter(|m| {
            expiry(m).is_none()
                && annotation(m, c::LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION) == Some("false")
                && annotation(m, c::PRESERVE_ANNOTATION).is_none()
        })
    })
    .await;
    let n = node(&env.client, &node_name).await;
    assert_eq!(
        preserved_condition(&n).and_then(|c| c.reason).as_deref(),
        Some(c::PRESERVATION_STOPPED)
    );
}

#[tokio::test]
async fn an_invalid_preserve_value_is_reported_and_preserves_nothing() {
    let Some((env, _driver, _controllers)) = setup("preserve-invalid").await else {
        return;
    };
    create_set(&env, json!({}), 0).await;
    let (name, _node) = running_machine(&env).await;
    annotate_machine(&env, &name, Some("forever")).await;
    let events: Api<Event> = env.api();
    must_eventually(WAIT, "a warning names the invalid value", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("InvalidPreserveAnnotation")
                    && e.note.as_deref().is_some_and(|n| n.contains("\"forever\""))
            })
            .map(|_| ())
    })
    .await;
    assert!(get(&env, &name).await.as_ref().and_then(expiry).is_none());
}

#[tokio::test]
async fn an_auto_preserved_machine_is_replaced_after_its_expiry_and_not_preserved_again() {
    let Some((env, _driver, _controllers)) = setup("preserve-auto").await else {
        return;
    };
    create_set(&env, json!({"machinePreserveTimeout": "6s"}), 1).await;
    let (name, node_name) = running_machine(&env).await;
    kubelet(&env.client, &node_name, &name, false).await;
    wait_failed(&env, &name).await;
    let m = must_eventually(
        WAIT,
        "the set auto-preserves the failed machine",
        || async {
            get(&env, &name).await.filter(|m| {
                expiry(m).is_some()
                    && annotation(m, c::PRESERVE_ANNOTATION) == Some("auto-preserved")
            })
        },
    )
    .await;
    let n = must_eventually(WAIT, "Preserved by MCM", || async {
        let n = node(&env.client, &node_name).await;
        (preserved_condition(&n)?.reason.as_deref() == Some(c::PRESERVED_BY_MCM)).then_some(n)
    })
    .await;
    assert!(tainted(&n));
    let until = expiry(&m).expect("expiry");
    // After the expiry it is marked `false` (the set cannot pick it again) and replaced.
    must_eventually(
        WAIT,
        "the expired machine is marked false or gone",
        || async {
            match get(&env, &name).await {
                None => Some(()),
                Some(m) => (annotation(&m, c::PRESERVE_ANNOTATION) == Some("false")
                    && expiry(&m).is_none())
                .then_some(()),
            }
        },
    )
    .await;
    assert!(Utc::now() >= until, "stopped only at the expiry");
    wait_replaced(&env, &name, WAIT).await;
}

#[tokio::test]
async fn a_preserved_failed_machine_does_not_hold_up_failing_its_siblings() {
    let Some((env, _driver, _controllers)) = setup("preserve-limiter").await else {
        return;
    };
    create_set_of(&env, json!({}), 0, 2).await;
    let pairs = must_eventually(WAIT, "both machines have nodes", || async {
        let all: Vec<(String, String)> = machines(&env)
            .await
            .into_iter()
            .filter_map(|m| Some((m.name_any(), m.labels().get(c::NODE_LABEL)?.clone())))
            .collect();
        (all.len() == 2).then_some(all)
    })
    .await;
    for (m, n) in &pairs {
        kubelet(&env.client, n, m, true).await;
    }
    for (m, _) in &pairs {
        must_eventually(WAIT, "running", || async {
            get(&env, m)
                .await
                .filter(|x| phase(x) == MachinePhase::Running)
        })
        .await;
    }
    let ((first, first_node), (second, second_node)) = (&pairs[0], &pairs[1]);
    annotate_machine(&env, first, Some("when-failed")).await;
    kubelet(&env.client, first_node, first, false).await;
    wait_failed(&env, first).await;
    must_eventually(WAIT, "the first is preserved", || async {
        get(&env, first).await.as_ref().and_then(expiry)
    })
    .await;
    // The preserved Failed machine is no replacement in progress: the second may fail too.
    // (The set deletes an unpreserved Failed machine at once, and nothing
    // else deletes an Unknown one: gone counts as failed.)
    kubelet(&env.client, second_node, second, false).await;
    must_eventually(WAIT, "the second machine is Failed", || async {
        match get(&env, second).await {
            None => Some(()),
            Some(m) => (phase(&m) == MachinePhase::Failed
                || m.metadata.deletion_timestamp.is_some())
            .then_some(()),
        }
    })
    .await;
    assert!(
        get(&env, first).await.is_some(),
        "the preserved machine is still there"
    );
}

/// Upstream #1119: the preserve drain taints instead of cordoning and the
/// controller never uncordons, so a Node the user cordoned stays cordoned
/// while its Failed machine is preserved (v0.62.1 cordoned for the drain and
/// uncordoned the Node when preservation stopped on a recovered machine).
#[tokio::test]
async fn a_node_the_user_cordoned_stays_cordoned_while_its_failed_machine_is_preserved() {
    let Some((env, _driver, _controllers)) = setup("preserve-cordon").await else {
        return;
    };
    create_set(&env, json!({}), 0).await;
    let (name, node_name) = running_machine(&env).await;
    annotate_machine(&env, &name, Some("now")).await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    nodes
        .patch(
            &node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("the user cordons the node");
    let cordoned = |n: &Node| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);

    kubelet(&env.client, &node_name, &name, false).await;
    wait_failed(&env, &name).await;
    must_eventually(
        WAIT,
        "the failed machine's node is tainted and drained",
        || async {
            let n = node(&env.client, &node_name).await;
            let cond = preserved_condition(&n)?;
            (tainted(&n)
                && cond
                    .message
                    .unwrap_or_default()
                    .starts_with(c::PRESERVED_NODE_DRAIN_SUCCESSFUL))
            .then_some(())
        },
    )
    .await;
    // The Node turns Ready again while the machine stays preserved.
    kubelet(&env.client, &node_name, &name, true).await;
    must_hold_for(
        one_pass_of_each(&env.namespace) * 2,
        "the user's cordon stays through the preservation",
        || async { cordoned(&node(&env.client, &node_name).await) },
    )
    .await;
}
