//! The ARM client and the fake, checked against Azure's own request/response
//! examples (`x-ms-examples` of `Azure/azure-rest-api-specs`, MIT, kept in
//! `crates/fake-azure/testdata/azure-rest-api-specs`): the client's structs
//! parse every example response, and the fake's answers carry the keys the
//! examples carry (minus the features the driver never uses, listed below).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use mcm_driver::Driver;
use mcm_provider_azure::arm::models::{
    Disk, NetworkInterface, QueryRequest, QueryResponse, Subnet, VirtualMachine,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;

fn example(file: &str) -> Value {
    let path = format!(
        "{}/../fake-azure/testdata/azure-rest-api-specs/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn body(file: &str, status: &str) -> Value {
    example(file)["responses"][status]["body"].clone()
}

#[test]
fn the_clients_structs_parse_every_example_response() {
    let vm: VirtualMachine =
        serde_json::from_value(body("VirtualMachine_Get.json", "200")).unwrap();
    assert_eq!(vm.name.as_deref(), Some("myVM"));
    assert_eq!(vm.provisioning_state(), Some("Succeeded"));
    let p = vm.properties.as_ref().unwrap();
    let sp = p.storage_profile.as_ref().unwrap();
    assert_eq!(
        sp.os_disk.as_ref().unwrap().name.as_deref(),
        Some("myOsDisk")
    );
    assert_eq!(sp.data_disks.len(), 2);
    assert_eq!(sp.data_disks[1].create_option, "Attach");
    assert!(p.network_profile.as_ref().unwrap().network_interfaces[0]
        .id
        .ends_with("{myNIC}"));

    for status in ["200", "201"] {
        let vm: VirtualMachine = serde_json::from_value(body(
            "VirtualMachine_Create_WithEmptyDataDisks.json",
            status,
        ))
        .unwrap();
        assert_eq!(vm.provisioning_state(), Some("Creating"));
        let nic: NetworkInterface =
            serde_json::from_value(body("NetworkInterfaceCreate.json", status)).unwrap();
        let ip = &nic.properties.ip_configurations[0].properties;
        assert_eq!(ip.private_ip_address.as_deref(), Some("172.20.2.4"));
        assert_eq!(
            nic.properties.provisioning_state.as_deref(),
            Some("Succeeded")
        );
    }
    let created: VirtualMachine =
        serde_json::from_value(body("VirtualMachine_Create_WithEmptyDataDisks.json", "201"))
            .unwrap();
    let disks = &created
        .properties
        .unwrap()
        .storage_profile
        .unwrap()
        .data_disks;
    assert_eq!(disks[0].to_be_detached, Some(false));

    let subnet: Subnet = serde_json::from_value(body("SubnetGet.json", "200")).unwrap();
    assert!(subnet
        .id
        .ends_with("/virtualNetworks/vnetname/subnets/subnet1"));

    let disk: Disk = serde_json::from_value(body("Disk_Get.json", "200")).unwrap();
    assert!(disk.managed_by.is_some());
    assert_eq!(disk.sku.unwrap().name, "Standard_LRS");
    assert_eq!(disk.properties.disk_size_gb, Some(10));

    let page: QueryResponse =
        serde_json::from_value(body("ResourcesFirstPageQuery.json", "200")).unwrap();
    assert_eq!(page.count, 3);
    assert_eq!(page.data.len(), 3);
    assert!(page.skip_token.is_some());

    // The delete example answers 202 with a Location to poll.
    let del = example("VirtualMachine_Delete_Force.json");
    assert!(del["responses"]["202"]["headers"]["Location"].is_string());
}

#[test]
fn the_resource_graph_request_has_the_examples_shape() {
    let ex = &example("ResourcesFirstPageQuery.json")["parameters"]["query"];
    let ours = serde_json::to_value(QueryRequest {
        subscriptions: vec!["s".into()],
        query: "Resources".into(),
        options: Default::default(),
    })
    .unwrap();
    let keys = |v: &Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(keys(&ours), keys(ex));
}

/// Every key path of a JSON value (`a.b`, arrays as `a[]`); tag maps are data, not schema.
fn key_paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone());
                if k != "tags" {
                    key_paths(v, &p, out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(first) = a.first() {
                key_paths(first, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

fn missing(example: &Value, fake: &Value, unused: &[&str]) -> Vec<String> {
    let (mut want, mut have) = (BTreeSet::new(), BTreeSet::new());
    key_paths(example, "", &mut want);
    key_paths(fake, "", &mut have);
    want.into_iter()
        .filter(|k| {
            !unused.iter().any(|u| {
                k == u || k.starts_with(&format!("{u}.")) || k.starts_with(&format!("{u}["))
            })
        })
        .filter(|k| !have.contains(k))
        .collect()
}

async fn get(f: &mcm_fake_azure::FakeAzure, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{}{path}", f.url()))
        .bearer_auth("t")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_fakes_answers_carry_the_examples_keys() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    d.create_machine(&req).await.expect("create");
    let sub = format!(
        "/subscriptions/{}/resourceGroups/{RG}/providers",
        mcm_fake_azure::SUBSCRIPTION
    );

    let got = get(
        &f,
        &format!("{sub}/Microsoft.Compute/virtualMachines/{vm}?api-version=2023-07-01"),
    )
    .await;
    // Features the driver never sets (it uses a zone, no extensions, no Windows).
    let unused = [
        "properties.availabilitySet",
        "properties.proximityPlacementGroup",
        "properties.applicationProfile",
        "properties.userData",
        "properties.diagnosticsProfile",
        "properties.extensionsTimeBudget",
        "properties.osProfile.windowsConfiguration",
        "properties.osProfile.secrets",
        "resources",
    ];
    let m = missing(&body("VirtualMachine_Get.json", "200"), &got, &unused);
    assert!(m.is_empty(), "VM GET lacks {m:?}: {got:#}");
    let m = missing(
        &body("VirtualMachine_Create_WithEmptyDataDisks.json", "201"),
        &got,
        &unused,
    );
    assert!(m.is_empty(), "VM PUT answer lacks {m:?}");

    let got = get(
        &f,
        &format!("{sub}/Microsoft.Network/networkInterfaces/{vm}-nic?api-version=2023-05-01"),
    )
    .await;
    let unused = [
        "properties.disableTcpStateTracking",
        "properties.ipConfigurations[].properties.publicIPAddress",
    ];
    let m = missing(&body("NetworkInterfaceCreate.json", "201"), &got, &unused);
    assert!(m.is_empty(), "NIC GET lacks {m:?}: {got:#}");

    let got = get(
        &f,
        &format!("{sub}/Microsoft.Compute/disks/{vm}-os-disk?api-version=2023-04-02"),
    )
    .await;
    // An OS disk made with its VM carries no tags (ARM does not copy the VM's).
    let unused = [
        "tags",
        "properties.hyperVGeneration",
        "properties.purchasePlan",
        "properties.supportedCapabilities",
        "properties.supportsHibernation",
        "properties.securityProfile",
        "properties.encryptionSettingsCollection",
        "properties.encryption",
        "properties.LastOwnershipUpdateTime",
        "properties.creationData.imageReference",
    ];
    let m = missing(&body("Disk_Get.json", "200"), &got, &unused);
    assert!(m.is_empty(), "disk GET lacks {m:?}: {got:#}");

    let got = get(&f, &format!("{sub}/Microsoft.Network/virtualNetworks/{VNET}/subnets/{SUBNET}?api-version=2023-05-01")).await;
    let m = missing(&body("SubnetGet.json", "200"), &got, &[]);
    assert!(m.is_empty(), "subnet GET lacks {m:?}");

    f.set_graph_page_size(1);
    let query = mcm_provider_azure::driver::list_query(RG, CLUSTER_TAG, "kubernetes.io-role-node");
    let got: Value = reqwest::Client::new()
        .post(format!("{}/providers/Microsoft.ResourceGraph/resources?api-version=2021-06-01-preview", f.url()))
        .bearer_auth("t")
        .json(&json!({"subscriptions": [mcm_fake_azure::SUBSCRIPTION], "query": query, "options": {}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The driver's query projects `type, name, location, tags`.
    let m = missing(
        &body("ResourcesFirstPageQuery.json", "200"),
        &got,
        &["data[].id"],
    );
    assert!(m.is_empty(), "Resource Graph answer lacks {m:?}: {got:#}");
}

#[test]
fn the_tag_patch_examples_parse_and_send_only_tags() {
    // The driver's PATCH bodies are `{"tags": {...}}`: the NIC's
    // `TagsObject` exactly; the VM's and disk's update bodies take `tags`
    // beside `properties` (which the driver leaves out).
    let nic = example("NetworkInterfaceUpdateTags.json");
    let keys: BTreeSet<&str> = nic["parameters"]["parameters"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["tags"]));
    let parsed: NetworkInterface =
        serde_json::from_value(body("NetworkInterfaceUpdateTags.json", "200")).unwrap();
    assert_eq!(parsed.tags.get("tag1").map(String::as_str), Some("value1"));
    let vm: VirtualMachine = serde_json::from_value(body(
        "VirtualMachine_Update_DetachDataDiskUsingToBeDetachedProperty.json",
        "200",
    ))
    .unwrap();
    assert_eq!(vm.provisioning_state(), Some("Updating"));
    for status in ["200", "202"] {
        let disk: Disk =
            serde_json::from_value(body("Disk_Update_ChangeTier.json", status)).unwrap();
        assert!(disk.properties.provisioning_state.is_some());
    }
    let ex = example("Disk_Update_ChangeTier.json");
    assert!(ex["responses"]["202"]["headers"]["Location"].is_string());
}

#[tokio::test]
async fn the_fakes_tag_patch_answers_carry_the_examples_keys() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    d.create_machine(&req).await.expect("create");
    let sub = format!(
        "/subscriptions/{}/resourceGroups/{RG}/providers",
        mcm_fake_azure::SUBSCRIPTION
    );
    let patch = |path: String, body: Value| {
        let url = format!("{}{path}", f.url());
        async move {
            let r = reqwest::Client::new()
                .patch(url)
                .bearer_auth("t")
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            (status, headers, r.json::<Value>().await.unwrap())
        }
    };
    let tags = json!({"tags": {"tag1": "value1"}});

    let (status, _, got) = patch(
        format!("{sub}/Microsoft.Network/networkInterfaces/{vm}-nic?api-version=2023-05-01"),
        tags.clone(),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    let unused = [
        "properties.disableTcpStateTracking",
        "properties.vnetEncryptionSupported",
        "properties.ipConfigurations[].properties.publicIPAddress",
    ];
    let m = missing(
        &body("NetworkInterfaceUpdateTags.json", "200"),
        &got,
        &unused,
    );
    assert!(m.is_empty(), "NIC PATCH answer lacks {m:?}: {got:#}");
    assert_eq!(got["tags"], tags["tags"]);

    let (status, headers, got) = patch(
        format!("{sub}/Microsoft.Compute/virtualMachines/{vm}?api-version=2023-07-01"),
        tags.clone(),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert!(headers.contains_key("azure-asyncoperation"));
    let unused = [
        "properties.osProfile.windowsConfiguration",
        "properties.osProfile.secrets",
        "properties.storageProfile.osDisk.osType",
    ];
    let m = missing(
        &body(
            "VirtualMachine_Update_DetachDataDiskUsingToBeDetachedProperty.json",
            "200",
        ),
        &got,
        &unused,
    );
    assert!(m.is_empty(), "VM PATCH answer lacks {m:?}: {got:#}");

    let (status, headers, got) = patch(
        format!("{sub}/Microsoft.Compute/disks/{vm}-os-disk?api-version=2023-04-02"),
        tags.clone(),
    )
    .await;
    assert_eq!(status, 202, "{got}");
    assert!(headers.contains_key("location"));
    let m = missing(
        &body("Disk_Update_ChangeTier.json", "202"),
        &got,
        &["properties.tier", "properties.propertyUpdatesInProgress"],
    );
    assert!(m.is_empty(), "disk PATCH answer lacks {m:?}: {got:#}");
}
