//! The Alicloud driver against the in-repo ECS fake: the conformance kit,
//! error mapping, idempotent creation, paging, throttling, and the honesty
//! checks against Alibaba's ECS metadata.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, FlexPersistentVolumeSource, PersistentVolumeSpec,
};
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver, GetVolumeIdsRequest};
use mcm_fake_alicloud::metadata::metadata;
use mcm_provider_alicloud::errors::RESOURCE_EXHAUSTED_CODES;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn the_conformance_kit_passes_against_the_fake() {
    let (_fake, driver) = setup().await;
    let fixture = Fixture {
        class: class("conformance", spec("shoot--conformance")),
        other_class: class("other", spec("shoot--other")),
        secret: secret(),
        new_machine: Box::new(|_| machine("conf")),
        invalid_classes: vec![
            (class("empty", json!({})), "providerSpec.imageID".into()),
            (class("garbage", json!("garbage")), "providerSpec".into()),
            (
                class("no-role", {
                    let mut s = spec("shoot--conformance");
                    s["tags"] = json!({"kubernetes.io/cluster/shoot--conformance": "1"});
                    s
                }),
                "kubernetes.io/role/".into(),
            ),
        ],
    };
    let failures = run_all(&driver, &fixture).await;
    assert!(failures.is_empty(), "{failures:#?}");
    // The same checks out of process, through the gRPC hop.
    let served = mcm_driver_grpc::Loopback::start(std::sync::Arc::new(driver), "alicloud")
        .await
        .expect("served");
    let failures = run_all(&served.client, &fixture).await;
    served.stop().await;
    assert!(failures.is_empty(), "over gRPC: {failures:#?}");
}

#[tokio::test]
async fn out_of_stock_and_quota_answers_are_resource_exhausted_and_create_nothing() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--stock"));
    for code in [
        "OperationDenied.NoStock",
        "Zone.NotOnSale",
        "QuotaExceed.ElasticQuota",
        "QuotaExceed.DiskCapacity",
    ] {
        fake.inject("RunInstances", code, 1).unwrap();
        let err = driver
            .create_machine(&request(&machine("m"), &c, &secret()))
            .await
            .unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted, "{code}: {err:?}");
        assert!(err.message.contains(code), "{}", err.message);
    }
    assert!(fake.instances().is_empty());
}

#[tokio::test]
async fn a_retried_create_adopts_the_first_instance_instead_of_creating_a_second() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--replay"));
    let m = machine("m");
    let req = request(&m, &c, &secret());
    let first = driver.create_machine(&req).await.unwrap();
    // The controller lost the answer (crash before persisting) and creates again.
    let second = driver.create_machine(&req).await.unwrap();
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(fake.instances().len(), 1, "one instance for one Machine");
    let uid = m.metadata.uid.clone().unwrap();
    let tokens: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|(a, _)| a == "RunInstances")
        .map(|(_, p)| p["ClientToken"].clone())
        .collect();
    assert_eq!(
        tokens,
        vec![format!("mcm-{uid}")],
        "the retry finds the instance by name before drawing a token"
    );
    assert!(first.provider_id.starts_with(&format!("{REGION}.i-")));
    let id = first.provider_id.rsplit('.').next().unwrap();
    assert_eq!(first.node_name, format!("{}z", id.replacen('-', "z", 1)));
}

#[tokio::test]
async fn a_token_whose_instance_was_deleted_moves_to_the_next_generation() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--gen"));
    let m = machine("m");
    let req = request(&m, &c, &secret());
    let first = driver.create_machine(&req).await.unwrap();
    assert!(fake.remove_instance(first.provider_id.rsplit('.').next().unwrap()));
    let second = driver.create_machine(&req).await.unwrap();
    assert_ne!(first.provider_id, second.provider_id);
    assert_eq!(fake.instances().len(), 1);
    let uid = m.metadata.uid.clone().unwrap();
    let last_token = fake
        .requests()
        .into_iter()
        .filter(|(a, _)| a == "RunInstances")
        .map(|(_, p)| p["ClientToken"].clone())
        .next_back();
    assert_eq!(last_token, Some(format!("mcm-{uid}-1")));
}

#[tokio::test]
async fn list_machines_follows_next_token_through_every_page() {
    let (fake, driver) = setup().await;
    fake.set_max_page(2);
    let c = class("c", spec("shoot--paging"));
    let mut want = std::collections::BTreeMap::new();
    for _ in 0..5 {
        let m = machine("p");
        let r = driver
            .create_machine(&request(&m, &c, &secret()))
            .await
            .unwrap();
        want.insert(r.provider_id, m.metadata.name.clone().unwrap());
    }
    // Another cluster's VM on the same account is not listed.
    driver
        .create_machine(&request(
            &machine("x"),
            &class("o", spec("shoot--else")),
            &secret(),
        ))
        .await
        .unwrap();
    fake.clear_requests();
    let listed = driver.list_machines(&list_request(&c)).await.unwrap();
    assert_eq!(listed.machine_list, want);
    let pages: Vec<_> = fake.requests();
    assert_eq!(pages.len(), 3, "5 instances in pages of 2");
    assert!(!pages[0].1.contains_key("NextToken"));
    assert!(pages[1].1.contains_key("NextToken") && pages[2].1.contains_key("NextToken"));
    assert_eq!(
        pages[0].1.get("Tag.1.Key").map(String::as_str),
        Some("kubernetes.io/cluster/shoot--paging")
    );
    assert_eq!(
        pages[0].1.get("Tag.2.Key").map(String::as_str),
        Some("kubernetes.io/role/node")
    );
}

#[tokio::test]
async fn throttling_is_retried_after_a_pause_and_unavailable_when_it_persists() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--throttle"));
    let m = machine("t");
    fake.inject("DescribeInstances", "Throttling.User", 2)
        .unwrap();
    let err = driver
        .get_machine_status(&request(&m, &c, &secret()))
        .await
        .unwrap_err();
    assert_eq!(
        err.code,
        Code::NotFound,
        "retried through two throttled answers: {err:?}"
    );
    assert_eq!(fake.calls().get("DescribeInstances"), Some(&3));

    fake.inject("DescribeInstances", "Throttling.User", 10)
        .unwrap();
    let err = driver
        .get_machine_status(&request(&m, &c, &secret()))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err:?}");
    assert!(err.message.contains("Throttling.User"));
}

#[tokio::test]
async fn delete_waits_for_a_pending_instance_and_tolerates_a_gone_one() {
    let (fake, driver) = setup().await;
    fake.set_pending_for(Duration::from_millis(600));
    let c = class("c", spec("shoot--pending"));
    let mut m = machine("d");
    let created = driver
        .create_machine(&request(&m, &c, &secret()))
        .await
        .unwrap();
    let id = created.provider_id.rsplit('.').next().unwrap().to_string();
    assert_eq!(fake.status_of(&id), Some("Pending"));
    m.spec.provider_id = created.provider_id.clone();
    driver
        .delete_machine(&request(&m, &c, &secret()))
        .await
        .unwrap();
    assert!(fake.instances().is_empty());
    driver
        .delete_machine(&request(&m, &c, &secret()))
        .await
        .unwrap();

    // Still Pending after the settle timeout: Unavailable, retried later.
    fake.set_pending_for(Duration::from_secs(60));
    let mut m = machine("d");
    let created = driver
        .create_machine(&request(&m, &c, &secret()))
        .await
        .unwrap();
    m.spec.provider_id = created.provider_id;
    let err = driver
        .delete_machine(&request(&m, &c, &secret()))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::Unavailable, "{err:?}");
}

#[tokio::test]
async fn two_vms_named_after_one_machine_are_out_of_range() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--dup"));
    let a = machine("dup");
    let name = a.metadata.name.clone().unwrap();
    driver
        .create_machine(&request(&a, &c, &secret()))
        .await
        .unwrap();
    // A second VM of the name in the cluster (made behind the driver's back).
    fake.put_instance(
        REGION,
        &name,
        &[
            ("kubernetes.io/cluster/shoot--dup", "1"),
            ("kubernetes.io/role/node", "1"),
        ],
    )
    .unwrap();
    let err = driver
        .get_machine_status(&request(&a, &c, &secret()))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::OutOfRange, "{err:?}");
}

#[tokio::test]
async fn an_instance_the_go_provider_created_for_the_machine_is_adopted_by_name_and_cluster_tag() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--migrated"));
    let m = machine("migrated");
    let name = m.metadata.name.clone().unwrap();
    // What machine-controller-manager-provider-alicloud writes: the
    // machine's name and the class's tags, no identity.
    let theirs = fake
        .put_instance(
            REGION,
            &name,
            &[
                ("kubernetes.io/cluster/shoot--migrated", "1"),
                ("kubernetes.io/role/node", "1"),
            ],
        )
        .unwrap();
    // Another instance of the name, of no cluster: someone else's, ignored.
    fake.put_instance(REGION, &name, &[("team", "other")])
        .unwrap();
    let created = driver
        .create_machine(&request(&m, &c, &secret()))
        .await
        .expect("adopted");
    assert!(
        created.provider_id.ends_with(&theirs),
        "{}",
        created.provider_id
    );
    assert_eq!(fake.calls().get("RunInstances"), None, "nothing created");
    // Once adopted it is the machine's for every other call: its status,
    // the list of the class, and its deletion (the other instance of the
    // name stays).
    let mut adopted = m.clone();
    adopted.spec.provider_id = created.provider_id.clone();
    let status = driver
        .get_machine_status(&request(&adopted, &c, &secret()))
        .await
        .expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = driver.list_machines(&list_request(&c)).await.unwrap();
    assert_eq!(
        listed.machine_list.get(&created.provider_id),
        Some(&name),
        "{listed:?}"
    );
    driver
        .delete_machine(&request(&adopted, &c, &secret()))
        .await
        .expect("delete");
    let left = fake.instances();
    assert!(
        !left.contains_key(&theirs),
        "the adopted instance is deleted"
    );
    assert_eq!(left.len(), 1, "the stranger's instance stays");
}

#[tokio::test]
async fn an_instance_of_the_name_with_another_machines_identity_refuses_the_create() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--taken"));
    let a = machine("taken");
    let mut b = machine("taken");
    b.metadata.name = a.metadata.name.clone();
    let ua = a.metadata.uid.clone().unwrap();
    driver
        .create_machine(&request(&a, &c, &secret()))
        .await
        .unwrap();
    let e = driver
        .create_machine(&request(&b, &c, &secret()))
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    assert!(e.message.contains(&ua), "{}", e.message);
    assert_eq!(fake.instances().len(), 1, "no second VM of the name");
}

#[tokio::test]
async fn a_wrong_access_key_secret_is_unauthenticated() {
    let (_fake, driver) = setup().await;
    let c = class("c", spec("shoot--auth"));
    let bad = secret_with(&[
        ("accessKeyID", mcm_fake_alicloud::ACCESS_KEY_ID),
        ("accessKeySecret", "wrong"),
        ("userData", USER_DATA),
    ]);
    let err = driver
        .create_machine(&request(&machine("a"), &c, &bad))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::Unauthenticated, "{err:?}");
    assert!(err.message.contains("SignatureDoesNotMatch"));
}

#[tokio::test]
async fn invalid_classes_are_invalid_argument_with_every_finding() {
    let (fake, driver) = setup().await;
    let mut wrong_provider = class("c", spec("shoot--v"));
    wrong_provider.provider = "AWS".into();
    let err = driver
        .create_machine(&request(&machine("v"), &wrong_provider, &secret()))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    assert!(
        err.message.contains("we only support 'Alicloud'"),
        "{}",
        err.message
    );

    let mut s = spec("shoot--v");
    s["imageID"] = json!("");
    s["dataDisks"] = json!([{"name": "a", "category": "cloud_essd", "size": 0}]);
    let no_user_data = secret_with(&[
        ("alicloudAccessKeyID", mcm_fake_alicloud::ACCESS_KEY_ID),
        (
            "alicloudAccessKeySecret",
            mcm_fake_alicloud::ACCESS_KEY_SECRET,
        ),
    ]);
    let err = driver
        .create_machine(&request(&machine("v"), &class("c", s), &no_user_data))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    for want in [
        "providerSpec.imageID: Required value: ImageID is required",
        "providerSpec.dataDisks[0].size: Invalid value: 0",
        "secretRef.userData: Required value: Mention userData",
    ] {
        assert!(
            err.message.contains(want),
            "{want} missing in {}",
            err.message
        );
    }
    assert!(fake.requests().is_empty(), "nothing reaches ECS");
}

#[tokio::test]
async fn every_parameter_the_client_sends_is_one_the_ecs_metadata_lists() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--meta"));
    let mut m = machine("meta");
    let r = request(&m, &c, &secret());
    let _ = driver.get_machine_status(&r).await;
    let created = driver.create_machine(&r).await.unwrap();
    driver.get_machine_status(&r).await.unwrap();
    driver.list_machines(&list_request(&c)).await.unwrap();
    m.spec.provider_id = created.provider_id;
    driver
        .delete_machine(&request(&m, &c, &secret()))
        .await
        .unwrap();
    driver
        .delete_machine(&request(&machine("gone"), &c, &secret()))
        .await
        .unwrap();

    let meta = metadata().expect("metadata");
    let requests = fake.requests();
    let actions: std::collections::BTreeSet<&str> =
        requests.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        actions,
        ["DeleteInstance", "DescribeInstances", "RunInstances"]
            .into_iter()
            .collect()
    );
    for (action, params) in &requests {
        for name in params.keys() {
            assert!(
                meta.param_known(action, name),
                "{action} has no parameter {name}"
            );
        }
    }
    // The RunInstances call carries the reference's parameters.
    let run = &requests
        .iter()
        .find(|(a, _)| a == "RunInstances")
        .unwrap()
        .1;
    for key in [
        "RegionId",
        "ZoneId",
        "ImageId",
        "InstanceType",
        "SecurityGroupId",
        "VSwitchId",
        "InstanceChargeType",
        "InternetChargeType",
        "InternetMaxBandwidthIn",
        "InternetMaxBandwidthOut",
        "SpotStrategy",
        "IoOptimized",
        "KeyPairName",
        "SystemDisk.Category",
        "SystemDisk.Size",
        "DataDisk.1.DiskName",
        "DataDisk.1.Category",
        "DataDisk.1.Size",
        "DataDisk.1.Encrypted",
        "DataDisk.1.Description",
        "DataDisk.1.DeleteWithInstance",
        "DataDisk.2.Size",
        "Tag.1.Key",
        "Tag.1.Value",
        "Tag.3.Key",
        "InstanceName",
        "ClientToken",
        "UserData",
    ] {
        assert!(run.contains_key(key), "RunInstances lacks {key}: {run:#?}");
    }
    assert!(
        !run.contains_key("DataDisk.2.DeleteWithInstance"),
        "not for ephemeral_ssd"
    );
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&run["UserData"])
        .unwrap();
    assert_eq!(decoded, USER_DATA.as_bytes());
    let delete = &requests
        .iter()
        .find(|(a, _)| a == "DeleteInstance")
        .unwrap()
        .1;
    assert_eq!(delete.get("Force").map(String::as_str), Some("true"));
}

#[tokio::test]
async fn every_error_code_the_fake_injects_is_one_the_ecs_metadata_lists() {
    let (fake, _driver) = setup().await;
    let meta = metadata().expect("metadata");
    for code in [
        "Zone.NotOnSale",
        "OperationDenied.NoStock",
        "QuotaExceed.ElasticQuota",
        "QuotaExceed.DiskCapacity",
        "Throttling.User",
    ] {
        assert!(meta.error_status("RunInstances", code).is_some(), "{code}");
        fake.inject("RunInstances", code, 1).unwrap();
    }
    fake.inject("DescribeInstances", "Throttling.User", 1)
        .unwrap();
    fake.inject("DeleteInstance", "IncorrectInstanceStatus", 1)
        .unwrap();
    assert!(fake.inject("RunInstances", "NotAnEcsCode", 1).is_err());
    assert!(fake
        .inject("DeleteInstance", "OperationDenied.NoStock", 1)
        .is_err());
    // Which of the reference's capacity codes the metadata documents for RunInstances.
    let documented: Vec<&str> = RESOURCE_EXHAUSTED_CODES
        .iter()
        .copied()
        .filter(|c| meta.error_status("RunInstances", c).is_some())
        .collect();
    assert!(documented.len() >= 10, "{documented:?}");
}

#[tokio::test]
async fn volume_ids_come_from_the_disk_csi_driver_and_flex_volumes() {
    let (_fake, driver) = setup().await;
    let csi = PersistentVolumeSpec {
        csi: Some(CSIPersistentVolumeSource {
            driver: "diskplugin.csi.alibabacloud.com".into(),
            volume_handle: "d-gw8csi".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let other_csi = PersistentVolumeSpec {
        csi: Some(CSIPersistentVolumeSource {
            driver: "ebs.csi.aws.com".into(),
            volume_handle: "vol-1".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let flex = PersistentVolumeSpec {
        flex_volume: Some(FlexPersistentVolumeSource {
            driver: "alicloud/disk".into(),
            options: Some([("volumeId".to_string(), "d-gw8flex".to_string())].into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = driver
        .get_volume_ids(&GetVolumeIdsRequest {
            pv_specs: vec![csi, other_csi, flex],
        })
        .await
        .unwrap();
    assert_eq!(r.volume_ids, vec!["d-gw8csi", "d-gw8flex"]);
}

/// The ECS calls of one machine's life as the controller drives it: status
/// (NotFound), create, status, delete. Printed for the README.
#[tokio::test]
async fn ecs_calls_per_machine_lifecycle() {
    let (fake, driver) = setup().await;
    fake.set_pending_for(Duration::ZERO);
    let c = class("c", spec("shoot--calls"));
    let mut m = machine("calls");
    let r = request(&m, &c, &secret());
    assert_eq!(
        driver.get_machine_status(&r).await.unwrap_err().code,
        Code::NotFound
    );
    let created = driver.create_machine(&r).await.unwrap();
    driver.get_machine_status(&r).await.unwrap();
    m.spec.provider_id = created.provider_id;
    driver
        .delete_machine(&request(&m, &c, &secret()))
        .await
        .unwrap();
    let calls = fake.calls();
    println!("ECS calls for one machine (status, create, status, delete): {calls:?}");
    assert_eq!(calls.get("RunInstances"), Some(&1));
    assert_eq!(calls.get("DeleteInstance"), Some(&1));
    // Status, the create's adoption look-up by name, the new instance,
    // status, and delete's wait for the instance to go.
    assert_eq!(calls.get("DescribeInstances"), Some(&5));
    assert_eq!(
        driver.api_calls(),
        calls,
        "the driver counts what the fake saw"
    );
}

use mcm_driver::testing::GZIPPED_CLOUD_CONFIG;

#[tokio::test]
async fn gzipped_userdata_reaches_ecs_byte_for_byte() {
    let (fake, driver) = setup().await;
    let c = class("c", spec("shoot--gzip"));
    let mut s = secret();
    if let Some(data) = s.data.as_mut() {
        data.insert(
            "userData".into(),
            k8s_openapi::ByteString(GZIPPED_CLOUD_CONFIG.to_vec()),
        );
    }
    driver
        .create_machine(&request(&machine("gzip"), &c, &s))
        .await
        .unwrap();
    let requests = fake.requests();
    let run = &requests
        .iter()
        .find(|(a, _)| a == "RunInstances")
        .unwrap()
        .1;
    use base64::Engine;
    let sent = base64::engine::general_purpose::STANDARD
        .decode(&run["UserData"])
        .unwrap();
    assert_eq!(sent, GZIPPED_CLOUD_CONFIG);
}

// ---- The fake refuses what ECS refuses; our RunInstances passes ----

/// The RunInstances parameters our driver sent for a valid class (which
/// the fake took).
async fn sent_run_instances(
    fake: &mcm_fake_alicloud::FakeEcs,
    driver: &mcm_provider_alicloud::AlicloudDriver,
) -> std::collections::BTreeMap<String, String> {
    let c = class("c", spec("shoot--refusals"));
    driver
        .create_machine(&request(&machine("refusal"), &c, &secret()))
        .await
        .expect("ECS's checks pass for a valid class");
    fake.requests()
        .into_iter()
        .rfind(|(a, _)| a == "RunInstances")
        .map(|(_, p)| p)
        .expect("RunInstances")
}

/// Serves a spoiled copy of the driver's parameters on a fresh fake state;
/// the refusal's status and code, which must be one the ECS metadata
/// documents for RunInstances with that status.
fn refusal_of(params: std::collections::BTreeMap<String, String>) -> (u16, String) {
    let mut st = mcm_fake_alicloud::state::State::default();
    let e = st.handle("RunInstances", params).expect_err("refused");
    let meta = metadata().expect("metadata");
    assert_eq!(
        meta.error_status("RunInstances", &e.code),
        Some(e.status),
        "{} is documented for RunInstances with HTTP {}",
        e.code,
        e.status
    );
    (e.status, e.code)
}

#[tokio::test]
async fn values_not_of_the_metadata_type_are_refused_and_ours_are_typed_right() {
    let (fake, driver) = setup().await;
    let mut p = sent_run_instances(&fake, &driver).await;
    p.insert("InternetMaxBandwidthOut".into(), "five".into());
    assert_eq!(refusal_of(p.clone()), (400, "InvalidParameter".into()));
    p.insert("InternetMaxBandwidthOut".into(), "5".into());
    p.insert("DryRun".into(), "yes".into());
    assert_eq!(refusal_of(p), (400, "InvalidParameter".into()));
}

#[tokio::test]
async fn malformed_instance_names_are_refused_and_the_driver_reports_ecs_code() {
    let (fake, driver) = setup().await;
    let p = sent_run_instances(&fake, &driver).await;
    for bad in ["1-starts-with-a-digit", "x", "has space", &"n".repeat(129)] {
        let mut q = p.clone();
        q.insert("InstanceName".into(), bad.to_string());
        assert_eq!(
            refusal_of(q),
            (400, "InvalidInstanceName.Malformed".into()),
            "{bad}"
        );
    }
    // A Kubernetes name may start with a digit, an ECS instance name may
    // not: the driver carries ECS's code to the Machine.
    let c = class("c", spec("shoot--refusals"));
    let mut m = machine("digit");
    m.metadata.name = Some("0-node".into());
    let e = driver
        .create_machine(&request(&m, &c, &secret()))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("InvalidInstanceName.Malformed"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn reserved_tag_keys_and_unknown_disk_categories_are_refused_and_ours_pass() {
    let (fake, driver) = setup().await;
    let p = sent_run_instances(&fake, &driver).await;
    let key = p
        .iter()
        .find(|(k, _)| k.starts_with("Tag.") && k.ends_with(".Key"))
        .map(|(k, _)| k.clone())
        .expect("the driver sends tags");
    for bad in ["aliyun-owned", "acs:x", "see https://x"] {
        let mut q = p.clone();
        q.insert(key.clone(), bad.into());
        assert_eq!(
            refusal_of(q),
            (400, "InvalidTagKey.Malformed".into()),
            "{bad}"
        );
    }
    let mut q = p.clone();
    q.insert(key.replace("Key", "Value"), "v".repeat(129));
    assert_eq!(refusal_of(q), (400, "InvalidTagValue.Malformed".into()));
    let mut q = p;
    q.insert("SystemDisk.Category".into(), "cloud_turbo".into());
    assert_eq!(
        refusal_of(q),
        (400, "InvalidSystemDiskCategory.ValueNotSupported".into())
    );
}
