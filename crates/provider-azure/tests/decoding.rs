//! Decoding as the reference does (Go's case-insensitive keys, with
//! warnings), the reference's own samples decoded and run against the ARM
//! fake, and a class that no longer validates still letting its machines be
//! found, listed and deleted (only creation is refused).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use mcm_api::MachineClass;
use mcm_driver::provider_spec::ProviderSpec;
use mcm_driver::{Code, Driver, ListMachinesRequest};
use mcm_provider_azure::spec::AzureProviderSpec;
use serde_json::{json, Value};

#[tokio::test]
async fn an_invalid_class_still_lets_status_list_and_delete_work() {
    let f = fake().await;
    let d = driver(&f);
    let good = class();
    let mut req = request(&good);
    let created = d.create_machine(&req).await.expect("create");
    req.machine.spec.provider_id = created.provider_id.clone();
    // The class is edited into one the provider refuses: no VM size.
    let mut s = spec(CLUSTER_TAG);
    s["properties"]["hardwareProfile"]["vmSize"] = "".into();
    let bad = class_with("azure-class", s);
    let refused = d
        .create_machine(&request(&bad))
        .await
        .expect_err("creation validates");
    assert_eq!(refused.code, Code::InvalidArgument, "{refused:?}");
    assert!(refused.message.contains("vmSize"), "{refused:?}");

    req.machine_class = bad.clone();
    let status = d.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = d
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
    d.delete_machine(&req).await.expect("delete");
    let err = d
        .get_machine_status(&req)
        .await
        .expect_err("the VM is gone");
    assert_eq!(err.code, Code::NotFound, "{err:?}");
}

#[test]
fn go_spellings_fill_their_fields_with_a_warning_each() {
    let mut s = spec(CLUSTER_TAG);
    s["properties"]["zone"] = Value::Null;
    s["properties"]["machineSet"] = json!({"id": "/subscriptions/s/vmss", "Kind": "vmo"});
    s["properties"]["hardwareProfile"] = json!({"VMSize": "Standard_D4s_v3"});
    s["properties"]["storageProfile"]["osDisk"]["diskSizeGb"] = json!(70);
    s["SubnetInfo"] = s["subnetInfo"].take();
    let d = <AzureProviderSpec as ProviderSpec>::decode(&s).expect("decodes");
    assert_eq!(
        d.value
            .properties
            .machine_set
            .as_ref()
            .map(|m| m.kind.as_str()),
        Some("vmo"),
        "machineSet.Kind fills kind, as in the reference's own sample"
    );
    assert_eq!(
        d.value.properties.hardware_profile.vm_size,
        "Standard_D4s_v3"
    );
    assert_eq!(d.value.subnet_info.subnet_name, SUBNET);
    assert_eq!(d.value.tags[CLUSTER_TAG], "1", "tag keys stay as written");
    let fields: Vec<&str> = d.warnings.iter().map(|w| w.field.as_str()).collect();
    assert!(
        fields.contains(&"providerSpec.properties.machineSet.Kind")
            && fields.contains(&"providerSpec.properties.hardwareProfile.VMSize")
            && fields.contains(&"providerSpec.SubnetInfo"),
        "{fields:?}"
    );
    // The class is usable: the deprecated machineSet becomes the scale set.
    let class = class_with("ms", s);
    let spec = mcm_driver::provider_spec::decode::<AzureProviderSpec>(&class, &reference_secret())
        .expect("valid")
        .value;
    assert_eq!(
        spec.properties.virtual_machine_scale_set.map(|v| v.id),
        Some("/subscriptions/s/vmss".to_string())
    );
}

/// The reference's sample class with its `<boolean>` placeholder written as
/// `true` (left as is, it is a string where a bool belongs, which Go refuses
/// too).
fn reference_class_text() -> String {
    include_str!("data/reference/machine-class.yaml").replace("<boolean>", "true")
}

/// The reference's sample Secret with its `data` values read as the plain
/// strings they stand for (they are placeholders, not base64).
fn reference_secret() -> k8s_openapi::api::core::v1::Secret {
    let v: Value = serde_yaml::from_str(include_str!("data/reference/secret.yaml")).expect("YAML");
    let data = v["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                k8s_openapi::ByteString(v.as_str().unwrap_or_default().as_bytes().to_vec()),
            )
        })
        .collect();
    k8s_openapi::api::core::v1::Secret {
        data: Some(data),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_reference_samples_decode_and_drive_a_machine_through_the_fake() {
    let verbatim: MachineClass =
        serde_yaml::from_str(include_str!("data/reference/machine-class.yaml")).expect("YAML");
    let e = <AzureProviderSpec as ProviderSpec>::decode(&verbatim.provider_spec)
        .expect_err("a string where a bool belongs");
    assert_eq!(
        e.field,
        "providerSpec.properties.networkProfile.acceleratedNetworking"
    );

    let class: MachineClass = serde_yaml::from_str(&reference_class_text()).expect("YAML");
    // The keys alone (the driver's decode also refuses the placeholder
    // machineSet kind, as the reference does).
    let d =
        mcm_driver::spec_decode::decode::<AzureProviderSpec>(&class.provider_spec, "providerSpec")
            .expect("decodes");
    let warnings: Vec<String> = d.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings, EXPECTED_SAMPLE_WARNINGS, "{warnings:#?}");
    assert_eq!(
        d.value.properties.hardware_profile.vm_size,
        "Standard_DS2_v2"
    );
    assert_eq!(
        d.value
            .properties
            .machine_set
            .as_ref()
            .map(|m| m.kind.as_str()),
        Some("<string>"),
        "machineSet.Kind is read"
    );
    let check = driver(&fake().await).check_class(&class, &reference_secret());
    assert!(
        check
            .errors
            .iter()
            .all(|f| !f.field.starts_with("secretRef")),
        "the sample Secret's keys are the ones the driver reads: {check:?}"
    );

    // The sample sets a zone, an availability set and a machine set at once
    // with placeholder IDs, which the reference's validation refuses too
    // (exactly one of them): the run keeps the zone, and points the class
    // at the fake's resource group, network and a storage account type.
    let mut spec = class.provider_spec.clone();
    let props = spec["properties"].as_object_mut().expect("properties");
    props.remove("availabilitySet");
    props.remove("machineSet");
    props.remove("identityID");
    spec["properties"]["storageProfile"]["osDisk"]["managedDisk"]["storageAccountType"] =
        json!("Standard_LRS");
    spec["resourceGroup"] = json!(RG);
    spec["subnetInfo"] = json!({"vnetName": VNET, "subnetName": SUBNET});
    let run_class = class_with("reference", spec);
    let f = fake().await;
    let d = driver(&f);
    let mut req = request(&run_class);
    req.secret = reference_secret();
    if let Some(data) = req.secret.data.as_mut() {
        data.insert(
            "azureSubscriptionId".into(),
            k8s_openapi::ByteString(mcm_fake_azure::SUBSCRIPTION.as_bytes().to_vec()),
        );
    }
    let created = d.create_machine(&req).await.expect("create");
    req.machine.spec.provider_id = created.provider_id.clone();
    let status = d.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = d
        .list_machines(&ListMachinesRequest {
            machine_class: run_class.clone(),
            secret: req.secret.clone(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    d.delete_machine(&req).await.expect("delete");
    let err = d.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(err.code, Code::NotFound, "{err:?}");
}

/// `machineSet.Kind` is read as `kind` (Go's matching). `networkInterfaces`
/// (the sample writes `{}`) is a field the reference's API declares deprecated
/// and never reads: decoded, so no warning.
const EXPECTED_SAMPLE_WARNINGS: &[&str] = &[
    "providerSpec.properties.machineSet.Kind: read as kind, as Go's encoding/json matches keys case-insensitively; write kind, the canonical key",
];
