//! MachineSet / MachineDeployment metrics are collected on scrape from a
//! cache kept by a watch (no API call per scrape).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use mcm_api::{MachineDeployment, MachineSet};
use mcm_runtime::caches::Shared;
use mcm_runtime::metrics::{encode, SetMetrics};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn set_metrics_report_status_replicas_and_conditions_of_each_machine_set() {
    let Some(env) = TestEnv::new("metrics-sets").await else {
        return;
    };
    let sets: Api<MachineSet> = env.api();
    let set: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "s1"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"class": {"kind": "MachineClass", "name": "c"}}}}
    }))
    .expect("set");
    sets.create(&PostParams::default(), &set)
        .await
        .expect("create");
    sets.patch_status(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 2, "readyReplicas": 1,
            "machineSetCondition": [{"type": "Frozen", "status": "True"}]}})),
    )
    .await
    .expect("status");
    let sets_cache = Shared::new(sets.clone());
    let deployments_cache = Shared::new(env.api::<MachineDeployment>());
    sets_cache.start();
    deployments_cache.start();
    let mut registry = prometheus_client::registry::Registry::default();
    let m = SetMetrics::new(&mut registry, Default::default());
    // A scrape: the cached objects, no request.
    let scrape =
        |m: &SetMetrics| match (sets_cache.synced_state(), deployments_cache.synced_state()) {
            (Some(s), Some(d)) => {
                m.fill(&s, &d, &env.namespace);
                true
            }
            _ => false,
        };
    must_eventually(
        Duration::from_secs(20),
        "the cache holds s1's status",
        || async {
            (scrape(&m) && encode(&registry).contains("mcm_machine_set_status_replicas{"))
                .then_some(())
        },
    )
    .await;
    let text = encode(&registry);
    let ns = &env.namespace;
    assert!(text.contains("mcm_machine_set_items_total 1"), "{text}");
    assert!(
        text.contains(&format!(
            "mcm_machine_set_status_replicas{{name=\"s1\",namespace=\"{ns}\"}} 2"
        )),
        "status.replicas, not readyReplicas: {text}"
    );
    assert!(text.contains(&format!(
        "mcm_machine_set_status_condition{{name=\"s1\",namespace=\"{ns}\",condition=\"Frozen\"}} 1"
    )));
    sets.delete("s1", &DeleteParams::default())
        .await
        .expect("delete");
    must_eventually(Duration::from_secs(20), "s1's series are gone", || async {
        (scrape(&m) && !encode(&registry).contains("name=\"s1\"")).then_some(())
    })
    .await;
    assert!(encode(&registry).contains("mcm_machine_set_items_total 0"));
}
