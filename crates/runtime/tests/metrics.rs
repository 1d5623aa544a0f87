//! MachineSet / MachineDeployment metrics are collected on scrape from the API.

use kube::api::{Api, Patch, PatchParams, PostParams};
use mcm_api::MachineSet;
use mcm_runtime::metrics::{encode, SetMetrics};
use mcm_testenv::TestEnv;
use serde_json::json;

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
    let mut registry = prometheus_client::registry::Registry::default();
    let m = SetMetrics::new(&mut registry);
    m.refresh(&env.client, &env.namespace)
        .await
        .expect("refresh");
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
}
