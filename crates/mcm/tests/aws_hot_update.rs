#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking
#![cfg(feature = "aws")]
//! Hot update on AWS end to end: the real `mcm run` binary, the real control
//! plane and moto. The example MachineClass (as `aws_e2e.rs` sets it up) backs
//! a MachineDeployment of 3; then
//! - its tags and its data disk's IOPS and throughput are edited: every
//!   instance converges in place (moto shows the new tags and volume
//!   settings), no instance is replaced, each Machine records the new spec and
//!   `lastOperation` Update/Successful;
//! - its machine type is edited: nothing changes on the instances, and each
//!   Machine's `HotUpdate` condition names `machineType` as needing a
//!   replacement.
//!
//! Without a target cluster the machines' steady phase is Available, which
//! hot update treats like Running (docs/design/hot-update.md).

use crate::aws_common;
use crate::e2e;

use aws_common::{create_example, moto_setup, unique, Cloud, REGION};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineClass};
use mcm_testenv::{moto_endpoint, must_eventually, TestEnv};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const DEPLOYMENT: &str = "aws-hot";
const MACHINES: usize = 3;

/// What moto shows of an instance: type, tags, and (IOPS, throughput) of its
/// volume attached as `/dev/sdb`.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    instance_type: String,
    tags: BTreeMap<String, String>,
    data_disk: Option<(i32, i32)>,
}

async fn seen(cloud: &Cloud, ids: &[String]) -> BTreeMap<String, Seen> {
    let ec2 = cloud
        .driver
        .ec2_client(REGION, &cloud.secret)
        .expect("client");
    let out = ec2
        .describe_instances()
        .set_instance_ids(Some(ids.to_vec()))
        .send()
        .await
        .expect("DescribeInstances");
    let volumes = ec2
        .describe_volumes()
        .send()
        .await
        .expect("DescribeVolumes");
    let mut by_id = BTreeMap::new();
    for i in out.reservations().iter().flat_map(|r| r.instances()) {
        let id = i.instance_id().unwrap_or_default().to_string();
        let data_disk = volumes
            .volumes()
            .iter()
            .find(|v| {
                v.attachments()
                    .iter()
                    .any(|a| a.instance_id() == Some(id.as_str()) && a.device() == Some("/dev/sdb"))
            })
            .map(|v| (v.iops().unwrap_or(0), v.throughput().unwrap_or(0)));
        let tags = i
            .tags()
            .iter()
            .map(|t| {
                (
                    t.key().unwrap_or_default().to_string(),
                    t.value().unwrap_or_default().to_string(),
                )
            })
            .collect();
        by_id.insert(
            id,
            Seen {
                instance_type: i
                    .instance_type()
                    .map(|t| t.as_str().to_string())
                    .unwrap_or_default(),
                tags,
                data_disk,
            },
        );
    }
    by_id
}

fn instance_ids(machines: &[Machine]) -> Vec<String> {
    let mut ids: Vec<String> = machines
        .iter()
        .map(|m| {
            m.spec
                .provider_id
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn editing_an_aws_class_updates_tags_and_iops_in_place_and_reports_a_machine_type_change() {
    let Some(moto) = moto_endpoint("editing_an_aws_class_updates_tags_and_iops_in_place") else {
        return;
    };
    let Some(env) = TestEnv::new("aws-hot").await else {
        return;
    };
    let ns = env.namespace.clone();
    let cloud = moto_setup(&moto).await;
    let cluster_tag = format!("kubernetes.io/cluster/{}", unique("shoot--hot"));

    let class_name = create_example(&env, &cloud, &cluster_tag).await;
    let classes: Api<MachineClass> = env.api();

    let mut mcm = e2e::start_mcm("aws", &ns, &["--aws-endpoint", &moto]).await;
    let e2e::Deployed {
        deployments,
        machines,
        ..
    } = e2e::deploy_available(
        &env,
        DEPLOYMENT,
        &class_name,
        MACHINES,
        Duration::from_secs(300),
    )
    .await;
    mcm.assert_alive();
    let before = machines
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    let ids = instance_ids(&before);
    let names: Vec<String> = before.iter().map(ResourceExt::name_any).collect();
    let first = seen(&cloud, &ids).await;
    assert!(
        first
            .values()
            // moto records no throughput at launch (ModifyVolume sets it).
            .all(|s| s.data_disk.map(|d| d.0) == Some(3000) && !s.tags.contains_key("team")),
        "the example's data disk and tags before the edit: {first:#?}"
    );

    // 1. Tags and the data disk's IOPS and throughput: in place.
    classes
        .patch(
            &class_name,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "add", "path": "/providerSpec/tags/team", "value": "blue"},
                    {"op": "replace", "path": "/providerSpec/blockDevices/1/ebs/iops", "value": 4000},
                    {"op": "replace", "path": "/providerSpec/blockDevices/1/ebs/throughput", "value": 250}
                ]))
                .expect("patch"),
            ),
        )
        .await
        .expect("edit the class");
    let converged = must_eventually(
        Duration::from_secs(120),
        "every instance carries team=blue and a data disk of 4000 IOPS / 250 MB/s",
        || async {
            let now = seen(&cloud, &ids).await;
            (now.len() == MACHINES
                && now.values().all(|s| {
                    s.tags.get("team").map(String::as_str) == Some("blue")
                        && s.data_disk == Some((4000, 250))
                }))
            .then_some(now)
        },
    )
    .await;
    must_eventually(
        Duration::from_secs(60),
        "every Machine's lastOperation is Update/Successful",
        || async {
            let items = machines.list(&ListParams::default()).await.ok()?.items;
            items
                .iter()
                .all(|m| {
                    m.status.as_ref().is_some_and(|s| {
                        s.last_operation.type_.as_str() == "Update"
                            && s.last_operation.state.as_str() == "Successful"
                    })
                })
                .then_some(())
        },
    )
    .await;
    let after = machines
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(instance_ids(&after), ids, "no instance replaced");
    assert_eq!(
        after.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
        names,
        "no Machine replaced"
    );
    assert_eq!(
        cloud.live_instances(&cluster_tag).await.len(),
        MACHINES,
        "no extra instance"
    );
    mcm.assert_alive();

    // 2. The machine type: only a new instance can take it.
    classes
        .patch(
            &class_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"providerSpec": {"machineType": "m5.xlarge"}})),
        )
        .await
        .expect("edit the machine type");
    must_eventually(
        Duration::from_secs(90),
        "every Machine's HotUpdate condition names machineType as needing a replacement",
        || async {
            let items = machines.list(&ListParams::default()).await.ok()?.items;
            items
                .iter()
                .all(|m| {
                    m.status.as_ref().is_some_and(|s| {
                        s.conditions.iter().any(|c| {
                            c.type_ == "HotUpdate"
                                && c.status == "False"
                                && c.reason.as_deref() == Some("NeedsReplacement")
                                && c.message
                                    .as_deref()
                                    .unwrap_or_default()
                                    .contains("machineType")
                        })
                    })
                })
                .then_some(())
        },
    )
    .await;
    let last = seen(&cloud, &ids).await;
    assert_eq!(
        last, converged,
        "nothing changed on the instances after the machine type edit"
    );
    assert!(last.values().all(|s| s.instance_type == "m5.large"));
    let now = machines
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(instance_ids(&now), ids, "no instance replaced");
    mcm.assert_alive();

    // Clean up: scale to 0, no instance left.
    e2e::scale_to_zero(&deployments, DEPLOYMENT, &machines).await;
}
