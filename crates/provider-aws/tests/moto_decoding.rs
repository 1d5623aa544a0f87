//! The reference's own samples decoded and run against moto, and a class
//! that no longer validates still letting its machines be found, listed and
//! deleted (only creation is refused). The spellings Go's matching accepts
//! are covered by `src/spec/decode/tests.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::moto::*;
use common::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::MachineClass;
use mcm_driver::provider_spec::ProviderSpec;
use mcm_driver::{Code, Driver, ListMachinesRequest};
use mcm_provider_aws::spec::AwsProviderSpec;
use serde_json::{json, Value};

#[tokio::test]
async fn moto_an_invalid_class_still_lets_status_list_and_delete_work() {
    let Some(env) = Env::new().await else { return };
    let good = class("valid", env.spec());
    let mut m = machine("inval");
    let created = env
        .driver
        .create_machine(&request(&m, &good, &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    // The class is edited into one the provider refuses: no machine type.
    let mut spec = env.spec();
    spec["machineType"] = "".into();
    let bad = class("valid", spec);
    let refused = env
        .driver
        .create_machine(&request(&machine("inval"), &bad, &secret()))
        .await
        .expect_err("creation validates");
    assert_eq!(refused.code, Code::InvalidArgument, "{refused:?}");
    assert!(refused.message.contains("machineType"), "{refused:?}");

    let req = request(&m, &bad, &secret());
    let status = env.driver.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: bad.clone(),
            secret: secret(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    env.driver.delete_machine(&req).await.expect("delete");
    let id = instance_id(&created.provider_id);
    let states = live_states(&env, &id).await;
    assert!(
        states
            .iter()
            .all(|s| s == "terminated" || s == "shutting-down"),
        "the VM is terminated: {states:?}"
    );
}

/// The reference's sample Secret with its `data` values read as the plain
/// strings they stand for (they are placeholders, not base64).
fn reference_secret() -> Secret {
    let v: Value = serde_yaml::from_str(include_str!("data/reference/secret.yaml")).expect("YAML");
    let data = v["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                ByteString(v.as_str().unwrap_or_default().as_bytes().to_vec()),
            )
        })
        .collect();
    Secret {
        data: Some(data),
        ..Default::default()
    }
}

fn reference_class() -> MachineClass {
    serde_yaml::from_str(include_str!("data/reference/machine-class.yaml")).expect("a MachineClass")
}

#[test]
fn the_reference_samples_decode_without_warnings_and_validate() {
    let class = reference_class();
    let d = <AwsProviderSpec as ProviderSpec>::decode(&class.provider_spec).expect("decodes");
    assert_eq!(d.warnings, [], "the sample is written canonically");
    assert_eq!(d.value.machine_type, "t2.large");
    assert_eq!(d.value.block_devices.len(), 2);
    assert_eq!(
        d.value
            .instance_metadata_options
            .as_ref()
            .and_then(|o| o.http_put_response_hop_limit),
        Some(1)
    );
    let driver = mcm_provider_aws::AwsDriver::new(Default::default());
    let check = driver.check_class(&class, &reference_secret());
    assert_eq!(check.errors, [], "the sample class and Secret are valid");
    assert_eq!(check.warnings, []);
}

#[tokio::test]
async fn moto_the_reference_samples_drive_a_machine() {
    let Some(env) = Env::new().await else { return };
    // The run points the class at moto's world: its region (the sample's
    // eu-east-1 is no AWS region), AMI, subnet, security group, instance
    // profile and the test's own cluster tag; the Secret at moto's keys.
    let class = reference_class();
    let mut spec = class.provider_spec.clone();
    spec["region"] = json!(REGION);
    spec["ami"] = json!(env.ami);
    spec["iam"] = json!({"name": env.profile});
    spec["networkInterfaces"][0]["subnetID"] = json!(env.subnet);
    spec["networkInterfaces"][0]["securityGroupIDs"] = json!([env.sg]);
    spec["keyName"] = Value::Null;
    let tags = spec["tags"].as_object_mut().expect("tags");
    tags.remove("kubernetes.io/cluster/YOUR_CLUSTER_NAME");
    tags.insert(env.cluster.clone(), json!("1"));
    let run_class = common::class("test-mc", spec);
    let mut secret = reference_secret();
    if let Some(data) = secret.data.as_mut() {
        data.insert(
            "providerAccessKeyId".into(),
            ByteString(b"testing".to_vec()),
        );
        data.insert(
            "providerSecretAccessKey".into(),
            ByteString(b"testing".to_vec()),
        );
    }
    let mut m = machine("refsample");
    let created = env
        .driver
        .create_machine(&request(&m, &run_class, &secret))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let req = request(&m, &run_class, &secret);
    let status = env.driver.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: run_class.clone(),
            secret: secret.clone(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    env.driver.delete_machine(&req).await.expect("delete");
    let err = env.driver.get_machine_status(&req).await;
    assert!(
        matches!(&err, Err(e) if e.code == Code::NotFound),
        "{err:?}"
    );
}
