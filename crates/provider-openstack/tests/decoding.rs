//! Decoding with the drivers' shared decoder (keys in another case read,
//! with warnings), the reference's own samples decoded and run against the
//! fake, and a class that no longer validates still letting its machines be
//! found, listed and deleted (only creation is refused).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::MachineClass;
use mcm_driver::{Code, Driver, ListMachinesRequest};
use serde_json::{json, Value};

#[tokio::test]
async fn an_invalid_class_still_lets_status_list_and_delete_work() {
    let env = env().await;
    let good = class("c", env.spec());
    let mut m = machine("inval");
    let created = env
        .driver
        .create_machine(&env.request(&good, m.clone()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    // The class is edited into one the provider refuses: no flavor.
    let mut s = env.spec();
    s["spec"]["flavorName"] = "".into();
    let bad = class("c", s);
    let refused = env
        .driver
        .create_machine(&env.request(&bad, machine("inval")))
        .await
        .expect_err("creation validates");
    assert_eq!(refused.code, Code::InvalidArgument, "{refused:?}");
    assert!(refused.message.contains("flavorName"), "{refused:?}");

    let req = env.request(&bad, m.clone());
    let status = env.driver.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: bad.clone(),
            secret: env.secret(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    env.driver.delete_machine(&req).await.expect("delete");
    let err = env
        .driver
        .get_machine_status(&req)
        .await
        .expect_err("the server is gone");
    assert_eq!(err.code, Code::NotFound, "{err:?}");
}

#[test]
fn keys_in_another_case_fill_their_fields_with_a_warning_each() {
    let d = <mcm_provider_openstack::spec::OpenStackSpec as mcm_driver::provider_spec::ProviderSpec>::decode(&json!({
        "apiVersion": "openstack.machine.gardener.cloud/v1alpha1",
        "kind": "MachineProviderConfig",
        "spec": {
            "imageId": "img-1",
            "FlavorName": "m1.small",
            "subnetIds": ["s1"],
            "rootDiskSizeGB": 30,
            "tags": {"Kubernetes.io-cluster-X": "1"},
            "flavour": "typo"
        }
    }))
    .expect("decodes");
    assert_eq!(d.value.image_id, "img-1");
    assert_eq!(d.value.flavor_name, "m1.small");
    assert_eq!(d.value.subnet_ids, ["s1"]);
    assert!(
        d.value.tags.contains_key("Kubernetes.io-cluster-X"),
        "tag keys stay"
    );
    let fields: Vec<&str> = d.warnings.iter().map(|w| w.field.as_str()).collect();
    assert!(
        fields.contains(&"providerSpec.spec.imageId")
            && fields.contains(&"providerSpec.spec.FlavorName")
            && fields.contains(&"providerSpec.spec.subnetIds")
            && fields.contains(&"providerSpec.spec.flavour"),
        "{fields:?}"
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

#[tokio::test]
async fn the_reference_samples_decode_and_drive_a_machine_through_the_fake() {
    let class: MachineClass =
        serde_yaml::from_str(include_str!("data/reference/machine-class.yaml")).expect("YAML");
    let d = <mcm_provider_openstack::spec::OpenStackSpec as mcm_driver::provider_spec::ProviderSpec>::decode(&class.provider_spec).expect("decodes");
    assert_eq!(d.warnings, [], "the sample is written canonically");
    assert_eq!(d.value.flavor_name, "m1.xmedium");
    assert_eq!(d.value.pod_network_cidr, "100.96.0.0/11");
    let env = env().await;
    let check = env.driver.check_class(&class, &reference_secret());
    assert_eq!(
        check.errors,
        [mcm_driver::Finding::new(
            "data[userData]",
            "Required value: userData is required"
        )],
        "the sample class is valid; its Secret lacks the userData the reference requires too"
    );
    assert_eq!(check.warnings, []);

    // The run points the class at the fake's region, zone, image, network
    // and key, and the Secret at the fake's Keystone and user.
    env.fake.add_flavor("m1.xmedium");
    env.fake.add_security_group("shoot--foobar-openstack");
    let mut spec = class.provider_spec.clone();
    spec["spec"]["imageID"] = json!(env.image);
    spec["spec"]["networkID"] = json!(env.network);
    spec["spec"]["region"] = json!(REGION);
    spec["spec"]["availabilityZone"] = json!("nova");
    spec["spec"]["keyName"] = json!("mcm-key");
    let mut run_class = class.clone();
    run_class.provider_spec = spec;
    let mut secret = reference_secret();
    if let Some(data) = secret.data.as_mut() {
        for (k, v) in [
            ("authURL", env.fake.auth_url()),
            ("username", mcm_fake_openstack::USERNAME.to_string()),
            ("password", mcm_fake_openstack::PASSWORD.to_string()),
            ("domainName", mcm_fake_openstack::DOMAIN.to_string()),
            ("tenantName", mcm_fake_openstack::PROJECT.to_string()),
            ("userData", USER_DATA.to_string()),
        ] {
            data.insert(k.to_string(), ByteString(v.into_bytes()));
        }
    }
    let r = |m: &mcm_api::Machine| mcm_driver::MachineRequest {
        machine: m.clone(),
        machine_class: run_class.clone(),
        secret: secret.clone(),
    };
    let mut m = machine("test-mc");
    let created = env.driver.create_machine(&r(&m)).await.expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let status = env.driver.get_machine_status(&r(&m)).await.expect("status");
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
    env.driver.delete_machine(&r(&m)).await.expect("delete");
    let err = env
        .driver
        .get_machine_status(&r(&m))
        .await
        .expect_err("gone");
    assert_eq!(err.code, Code::NotFound, "{err:?}");
}
