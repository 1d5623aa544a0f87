#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking
#![cfg(feature = "alicloud")]
//! The Alibaba Cloud provider end to end: the real `mcm run` binary, without
//! a target cluster, against the real control plane and the in-repo ECS fake
//! (`mcm-fake-alicloud`, started in this test on 127.0.0.1 and handed to
//! `mcm run` with `--alicloud-endpoint`).
//!
//! The MachineClass and its two Secrets are `examples/alicloud-machine-class.yaml`
//! as a user applies it, with the fake's access key and a cluster tag of its own.
//! A MachineDeployment of 3 must reach `Available`, then scaling it to 0
//! must leave no Machine and no instance in the fake.
//!
//! Without the control plane the test skips, except in CI (`CI` set and not `false`/`0`), where it fails.

use crate::e2e;

use kube::api::ListParams;
use kube::ResourceExt;
use mcm_fake_alicloud::{FakeEcs, ACCESS_KEY_ID, ACCESS_KEY_SECRET};
use mcm_testenv::TestEnv;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const REGION: &str = "eu-central-1";
const EXAMPLE: &str = include_str!("../../../examples/alicloud-machine-class.yaml");
const DEPLOYMENT: &str = "alicloud-e2e";

/// Instances of the fake carrying `cluster_tag`: instance ID → InstanceName.
fn instances(fake: &FakeEcs, cluster_tag: &str) -> BTreeMap<String, String> {
    fake.instances()
        .into_values()
        .filter(|i| i.tags.iter().any(|(k, _)| k == cluster_tag))
        .map(|i| (i.id, i.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcm_run_on_the_ecs_fake_brings_3_alicloud_machines_to_available_and_scales_to_0_without_instances(
) {
    let t0 = Instant::now();
    let Some(env) = TestEnv::new("alicloud-e2e").await else {
        return;
    };
    let ns = env.namespace.clone();
    let fake = FakeEcs::start().await.expect("start the ECS fake");
    fake.set_pending_for(Duration::from_secs(1));
    let cluster_tag = format!("kubernetes.io/cluster/{}", e2e::unique("shoot--e2e"));

    // The example's Secrets and MachineClass, with the fake's access key.
    let class_name = e2e::create_example(&env, EXAMPLE, |doc| {
        if doc["kind"] == "Secret" {
            if doc["stringData"].get("alicloudAccessKeyID").is_some() {
                doc["stringData"]["alicloudAccessKeyID"] = json!(ACCESS_KEY_ID);
                doc["stringData"]["alicloudAccessKeySecret"] = json!(ACCESS_KEY_SECRET);
            }
            return;
        }
        let spec = &mut doc["providerSpec"];
        assert_eq!(spec["region"], json!(REGION), "the example's region");
        let tags = spec["tags"].as_object_mut().expect("tags");
        tags.retain(|k, _| !k.starts_with("kubernetes.io/cluster/"));
        tags.insert(cluster_tag.clone(), json!("1"));
    })
    .await;

    let mut mcm = e2e::start_mcm("alicloud", &ns, &["--alicloud-endpoint", &fake.url()]).await;
    let e2e::Deployed {
        deployments,
        machines,
        took,
        ..
    } = e2e::deploy_available(&env, DEPLOYMENT, &class_name, 3, Duration::from_secs(180)).await;
    mcm.assert_alive();
    let calls_up = fake.calls();
    println!(
        "[{:>5.1?}] 3 machines Available {took:.1?} after the MachineDeployment was applied; ECS calls so far: {calls_up:?}",
        t0.elapsed(),
    );

    // The machines and the fake's instances are the same three.
    let list = machines
        .list(&ListParams::default())
        .await
        .expect("list Machines")
        .items;
    let mut by_instance = BTreeMap::new();
    for m in &list {
        let pid = m.spec.provider_id.clone();
        assert!(
            pid.starts_with(&format!("{REGION}.i-")),
            "providerID of {}: {pid:?}",
            m.name_any()
        );
        let id = pid.rsplit('.').next().expect("instance id").to_string();
        by_instance.insert(id, m.name_any());
    }
    assert_eq!(
        instances(&fake, &cluster_tag),
        by_instance,
        "one instance per Machine, named after it (instance → name)"
    );
    let run_calls = calls_up.get("RunInstances").copied().unwrap_or(0);
    assert_eq!(run_calls, 3, "one RunInstances per machine");

    // Scale to 0 through the scale subresource, as `kubectl scale` does.
    let t_scale = Instant::now();
    e2e::scale_to_zero(&deployments, DEPLOYMENT, &machines).await;
    assert!(
        instances(&fake, &cluster_tag).is_empty(),
        "no instance left in the fake: {:?}",
        instances(&fake, &cluster_tag)
    );
    mcm.assert_alive();
    let calls = fake.calls();
    println!(
        "[{:>5.1?}] scaled to 0 in {:.1?}: no Machine, no instance; ECS calls in total: {calls:?}",
        t0.elapsed(),
        t_scale.elapsed()
    );
    assert_eq!(
        calls.get("DeleteInstance"),
        Some(&3),
        "one DeleteInstance per machine"
    );
    drop(mcm);
}
