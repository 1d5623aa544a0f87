//! Rollout node handling against the real control plane: the set controllers
//! run with a target cluster (the same cluster). A fake machine controller
//! gives every new machine a Node and makes it Running after a delay, so the
//! rollout is slow enough to observe.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::sets_common;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::Machine;
use mcm_runtime::sets;
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use sets_common::*;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Gives machines a Node (named after the machine) and the Running phase
/// after `delay`; deletes the Nodes of machines that are gone.
fn fake_machine_controller(
    env: &TestEnv,
    delay: Duration,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let api: Api<Machine> = env.api();
    let nodes: Api<Node> = Api::all(env.client.clone());
    let task = tokio::spawn(async move {
        let mut seen: HashMap<String, Instant> = HashMap::new();
        let mut made: HashSet<String> = HashSet::new();
        while !s.load(Ordering::Relaxed) {
            if let Ok(list) = api.list(&ListParams::default()).await {
                let names: HashSet<String> = list.items.iter().map(|m| m.name_any()).collect();
                for m in &list.items {
                    let name = m.name_any();
                    if m.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    let t = *seen.entry(name.clone()).or_insert_with(Instant::now);
                    if t.elapsed() < delay || made.contains(&name) {
                        continue;
                    }
                    let node: Node =
                        serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
                    let _ = nodes.create(&PostParams::default(), &node).await;
                    let _ = api
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(&json!({"metadata": {"labels": {c::NODE_LABEL: name}}})),
                        )
                        .await;
                    if set_phase(&api, &name, "Running").await.is_ok() {
                        made.insert(name);
                    }
                }
                for gone in made
                    .iter()
                    .filter(|n| !names.contains(*n))
                    .cloned()
                    .collect::<Vec<_>>()
                {
                    let _ = nodes.delete(&gone, &DeleteParams::default()).await;
                    made.remove(&gone);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for n in made {
            let _ = nodes.delete(&n, &DeleteParams::default()).await;
        }
    });
    (stop, task)
}

fn node_annotation(n: &Node, key: &str) -> Option<String> {
    n.annotations().get(key).cloned()
}

fn prefer_no_schedule(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter().any(|t| {
                t.key == c::PREFER_NO_SCHEDULE_KEY
                    && t.effect == "PreferNoSchedule"
                    && t.value.as_deref() == Some(c::PREFER_NO_SCHEDULE_VALUE)
            })
        })
}

#[tokio::test]
async fn rolling_update_taints_old_nodes_and_disables_autoscaler_scale_down_until_complete() {
    let Some(env) = TestEnv::new("rollout-nodes").await else {
        return;
    };
    init_logs();
    let (tx, rx) = oneshot::channel::<()>();
    let controllers = tokio::spawn(sets::run_with_target(
        env.client.clone(),
        Some(env.client.clone()),
        env.namespace.clone(),
        config(),
        async move {
            let _ = rx.await;
        },
    ));
    let (fake_stop, fake) = fake_machine_controller(&env, Duration::from_secs(2));
    // Node names are the machine names, which start with the deployment's:
    // unique per namespace.
    let name = format!(
        "ro-{}",
        env.namespace.rsplit('-').next().unwrap_or_default()
    );
    create_deployment(&env, &deployment(&name, 2, "c1", rolling(1, 0))).await;
    wait_settled(&env, &name, 2, "c1").await;
    let old: Vec<String> = machines(&env).await.iter().map(|m| m.name_any()).collect();
    let nodes: Api<Node> = Api::all(env.client.clone());

    patch_deployment(
        &env,
        &name,
        json!({"spec": {"template": {"spec": {"class": {"name": "c2"}}}}}),
    )
    .await;
    // During the rollout: the old set's nodes are tainted, the set is marked,
    // and nodes carry both autoscaler annotations.
    must_eventually(WAIT, "old nodes tainted prefer-no-schedule", || async {
        let n = nodes.get_opt(&old[0]).await.ok()??;
        prefer_no_schedule(&n).then_some(())
    })
    .await;
    must_eventually(WAIT, "old set annotated prefer-no-schedule", || async {
        let sets = sets_of(&env).await;
        sets.iter()
            .any(|s| {
                s.spec.template.spec.class.name == "c1"
                    && s.annotations()
                        .get(c::PREFER_NO_SCHEDULE_KEY)
                        .map(String::as_str)
                        == Some(c::PREFER_NO_SCHEDULE_VALUE)
            })
            .then_some(())
    })
    .await;
    let mut saw_scale_down_disabled = false;
    for n in &old {
        if let Ok(Some(node)) = nodes.get_opt(n).await {
            saw_scale_down_disabled |= node_annotation(&node, c::CA_SCALE_DOWN_DISABLED_ANNOTATION)
                .as_deref()
                == Some("true")
                && node_annotation(&node, c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION).as_deref()
                    == Some("true");
        }
    }
    assert!(
        saw_scale_down_disabled,
        "an old node carries scale-down-disabled during the rollout"
    );

    // Complete: the new machines' nodes lose the autoscaler annotations.
    wait_settled(&env, &name, 2, "c2").await;
    must_eventually(
        WAIT,
        "no autoscaler annotations after the rollout",
        || async {
            let ms = machines(&env).await;
            for m in &ms {
                let n = nodes.get_opt(&m.name_any()).await.ok()??;
                if node_annotation(&n, c::CA_SCALE_DOWN_DISABLED_ANNOTATION).is_some()
                    || node_annotation(&n, c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION).is_some()
                    || prefer_no_schedule(&n)
                {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;

    // Clean up: scale to 0 so the fake deletes the nodes.
    patch_deployment(&env, &name, json!({"spec": {"replicas": 0}})).await;
    let _ = mcm_testenv::eventually(WAIT, "scaled to 0", || async {
        machines(&env).await.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    fake_stop.store(true, Ordering::Relaxed);
    let _ = fake.await;
    let _ = tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), controllers).await;
}
