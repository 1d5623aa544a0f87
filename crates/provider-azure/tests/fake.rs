//! The Azure driver against the in-process ARM fake: the conformance kit,
//! creation and deletion with their resources, LRO failures, throttling,
//! adoption, listing and the token endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use base64::Engine;
use common::*;
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver, GetVolumeIdsRequest, ListMachinesRequest};
use mcm_fake_azure::Fault;
use mcm_provider_azure::{AzureDriver, AzureDriverConfig};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn the_conformance_kit_passes_against_the_fake() {
    let f = fake().await;
    let d = driver(&f);
    let mut bad_tags = spec(CLUSTER_TAG);
    bad_tags["tags"] = json!({});
    let mut no_location = spec(CLUSTER_TAG);
    no_location["location"] = json!("");
    let fixture = Fixture {
        class: class(),
        other_class: class_with("other", spec("kubernetes.io-cluster-shoot--other")),
        secret: secret(),
        new_machine: Box::new(machine),
        invalid_classes: vec![
            (
                class_with("empty", json!({})),
                "providerSpec.location".into(),
            ),
            (
                class_with("garbage", json!("garbage")),
                "providerSpec".into(),
            ),
            (class_with("tags", bad_tags), "providerSpec.tags".into()),
            (
                class_with("loc", no_location),
                "providerSpec.location".into(),
            ),
        ],
    };
    let failures = run_all(&d, &fixture).await;
    assert!(failures.is_empty(), "{failures:#?}");
    // The same checks out of process, through the gRPC hop.
    let served = mcm_driver_grpc::Loopback::start(std::sync::Arc::new(d), "azure")
        .await
        .expect("served");
    let failures = run_all(&served.client, &fixture).await;
    served.stop().await;
    assert!(failures.is_empty(), "over gRPC: {failures:#?}");
    assert!(f.vms(RG).is_empty(), "VMs left: {:?}", f.vms(RG).keys());
    assert!(f.nics(RG).is_empty(), "NICs left: {:?}", f.nics(RG).keys());
    assert!(
        f.disks(RG).is_empty(),
        "disks left: {:?}",
        f.disks(RG).keys()
    );
}

#[tokio::test]
async fn create_makes_the_nic_vm_and_disks_with_the_reference_names_tags_and_user_data() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    let out = d.create_machine(&req).await.expect("create");
    assert_eq!(out.provider_id, format!("azure:///{LOCATION}/{vm}"));
    assert_eq!(out.node_name, vm);
    assert!(
        out.addresses.iter().any(|a| a.type_ == "InternalIP"),
        "{:?}",
        out.addresses
    );

    let vms = f.vms(RG);
    let v = &vms[&vm];
    let uid = req.machine.metadata.uid.clone().unwrap();
    assert_eq!(v["tags"][CLUSTER_TAG], json!("1"));
    assert_eq!(v["tags"]["mcm.gardener.cloud-machine-uid"], json!(uid));
    assert_eq!(v["zones"], json!(["1"]));
    assert_eq!(v["properties"]["provisioningState"], json!("Succeeded"));
    assert_eq!(v["properties"]["osProfile"]["computerName"], json!(vm));
    let sp = &v["properties"]["storageProfile"];
    assert_eq!(sp["imageReference"]["publisher"], json!("sap"));
    assert_eq!(sp["osDisk"]["name"], json!(format!("{vm}-os-disk")));
    assert_eq!(sp["osDisk"]["deleteOption"], json!("Delete"));
    assert_eq!(
        sp["dataDisks"][0]["name"],
        json!(format!("{vm}-etcd-0-data-disk"))
    );
    assert_eq!(sp["dataDisks"][0]["deleteOption"], json!("Delete"));
    let key = v["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"]
        .as_str()
        .unwrap();
    assert!(
        key.starts_with("ssh-rsa AAAA"),
        "a throw-away key is sent: {key}"
    );
    let nic_ref = &v["properties"]["networkProfile"]["networkInterfaces"][0];
    assert!(nic_ref["id"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/networkInterfaces/{vm}-nic")));
    assert_eq!(nic_ref["properties"]["deleteOption"], json!("Delete"));
    let user_data = base64::engine::general_purpose::STANDARD
        .decode(f.custom_data(RG, &vm).expect("customData"))
        .unwrap();
    assert_eq!(user_data, b"#cloud-config\nhostname: x\n");

    let nics = f.nics(RG);
    let nic = &nics[&format!("{vm}-nic")];
    assert_eq!(nic["properties"]["enableIPForwarding"], json!(true));
    assert_eq!(nic["properties"]["nicType"], json!("Standard"));
    assert_eq!(
        nic["properties"]["ipConfigurations"][0]["properties"]["privateIPAllocationMethod"],
        json!("Dynamic")
    );
    assert_eq!(nic["tags"]["kubernetes.io-role-node"], json!("1"));
    let disks = f.disks(RG);
    assert!(
        disks.contains_key(&format!("{vm}-os-disk"))
            && disks.contains_key(&format!("{vm}-etcd-0-data-disk"))
    );

    let status = d.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, out.provider_id);
}

#[tokio::test]
async fn an_allocation_failure_midway_is_resource_exhausted_and_removes_the_vm_nic_and_disks() {
    let f = fake().await;
    f.set_lro_polls(3);
    let d = driver(&f);
    f.inject(Fault::lro_failed(
        "PUT",
        "virtualMachines",
        "AllocationFailed",
        "Allocation failed. We do not have sufficient capacity for the requested VM size in this region.",
    ));
    let req = request(&class());
    let e = d
        .create_machine(&req)
        .await
        .expect_err("allocation failure");
    assert_eq!(e.code, Code::ResourceExhausted, "{e:?}");
    assert!(e.message.contains("AllocationFailed"), "{}", e.message);
    assert!(f.vms(RG).is_empty(), "{:?}", f.vms(RG).keys());
    assert!(
        f.nics(RG).is_empty(),
        "the NIC is cleaned up: {:?}",
        f.nics(RG).keys()
    );
    assert!(f.disks(RG).is_empty(), "{:?}", f.disks(RG).keys());
}

#[tokio::test]
async fn quota_and_unsupported_sku_answers_are_resource_exhausted_other_errors_internal() {
    let f = fake().await;
    let d = driver(&f);
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        409,
        "OperationNotAllowed",
        "Operation could not be completed as it results in exceeding approved Total Regional Cores quota.",
    ));
    let e = d.create_machine(&request(&class())).await.unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e:?}");
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        409,
        "SkuNotAvailable",
        "The requested size is not available.",
    ));
    let e = d.create_machine(&request(&class())).await.unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e:?}");
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        409,
        "OperationNotAllowed",
        "The VM is being deleted.",
    ));
    let req = request(&class());
    let e = d.create_machine(&req).await.unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e:?}");
    // Unlike the reference, which leaves the NIC of a non-capacity failure,
    // every failed create removes what it made (see tests/cleanup.rs).
    assert!(f.nics(RG).is_empty(), "{:?}", f.nics(RG).keys());
    assert!(f.vms(RG).is_empty());
}

#[tokio::test]
async fn throttled_calls_wait_for_retry_after_then_succeed() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    d.create_machine(&req).await.expect("create");
    f.inject(Fault::throttle("GET", "virtualMachines", 2, 1));
    let t = Instant::now();
    d.get_machine_status(&req)
        .await
        .expect("status after two 429s");
    assert!(
        t.elapsed() >= Duration::from_secs(2),
        "Retry-After honoured: {:?}",
        t.elapsed()
    );
    let gets = f
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET virtualMachines/"))
        .count();
    assert_eq!(
        gets,
        5,
        "create's look-up and read-back + 2 throttled + 1 answered: {:?}",
        f.requests()
    );
}

#[tokio::test]
async fn throttling_that_outlives_the_retries_is_an_internal_error() {
    let f = fake().await;
    let d = driver(&f);
    f.inject(Fault::throttle("GET", "virtualMachines", 10, 0));
    let e = d.get_machine_status(&request(&class())).await.unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e:?}");
    assert!(e.message.contains("throttled"), "{}", e.message);
}

#[tokio::test]
async fn a_retried_create_adopts_the_vm_carrying_the_machines_uid() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let first = d.create_machine(&req).await.expect("create");
    f.clear_requests();
    let again = d.create_machine(&req).await.expect("retried create");
    assert_eq!(again.provider_id, first.provider_id);
    assert_eq!(
        f.requests(),
        vec![format!("GET virtualMachines/{}", name(&req))]
    );
    assert_eq!(f.vms(RG).len(), 1);
}

/// A VM as the Go provider (machine-controller-manager-provider-azure)
/// leaves it: the machine's name, the class's tags, no machine identity.
fn go_provider_vm(tags: serde_json::Value) -> serde_json::Value {
    json!({"location": LOCATION, "tags": tags,
           "properties": {"provisioningState": "Succeeded", "vmId": "11111111-0000-4000-8000-000000000001",
                          "hardwareProfile": {"vmSize": "Standard_D2s_v3"}}})
}

#[tokio::test]
async fn a_vm_the_go_provider_created_for_the_machine_is_adopted_by_name_and_cluster_tags() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    f.put_raw(
        "virtualMachines",
        RG,
        &vm,
        go_provider_vm(
            json!({CLUSTER_TAG: "1", "kubernetes.io-role-node": "1", "Name": "shoot--test"}),
        ),
    );
    f.clear_requests();
    let created = d.create_machine(&req).await.expect("adopted");
    assert!(
        created.provider_id.ends_with(&vm),
        "{}",
        created.provider_id
    );
    assert_eq!(
        f.requests(),
        vec![format!("GET virtualMachines/{vm}")],
        "adopted with no further call"
    );
    assert!(f.nics(RG).is_empty(), "nothing created beside it");
}

#[tokio::test]
async fn a_go_provider_machine_with_its_nic_and_disks_is_adopted_listed_and_deleted_whole() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    // Made as the Go provider makes it: `<vm>-nic`, `<vm>-os-disk`,
    // `<vm>-etcd-0-data-disk`, every one deleted with the VM, the class's
    // tags on the VM and NIC; and none of our identity tags.
    d.create_machine(&req).await.expect("create");
    let ours = [
        "machine.sapcloud.io-uid",
        "machine.sapcloud.io-namespace",
        "mcm.gardener.cloud-machine-uid",
    ];
    for (kind, all) in [
        ("virtualMachines", f.vms(RG)),
        ("networkInterfaces", f.nics(RG)),
        ("disks", f.disks(RG)),
    ] {
        for (n, mut v) in all {
            if let Some(t) = v["tags"].as_object_mut() {
                t.retain(|k, _| !ours.contains(&k.as_str()));
            }
            f.put_raw(kind, RG, &n, v);
        }
    }
    assert!(f.vms(RG)[&vm]["tags"]
        .as_object()
        .is_some_and(|t| t.keys().all(|k| !k.starts_with("machine.sapcloud.io"))));
    f.clear_requests();
    let adopted = d.create_machine(&req).await.expect("adopted");
    assert_eq!(f.requests(), vec![format!("GET virtualMachines/{vm}")]);
    let status = d.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, adopted.provider_id);
    let list = d
        .list_machines(&ListMachinesRequest {
            machine_class: class(),
            secret: secret(),
        })
        .await
        .expect("list");
    assert_eq!(list.machine_list.get(&adopted.provider_id), Some(&vm));
    d.delete_machine(&req).await.expect("delete");
    assert!(
        f.vms(RG).is_empty() && f.nics(RG).is_empty() && f.disks(RG).is_empty(),
        "left: {:?} {:?} {:?}",
        f.vms(RG).keys(),
        f.nics(RG).keys(),
        f.disks(RG).keys()
    );
}

#[tokio::test]
async fn a_vm_of_the_name_that_is_not_the_machines_is_refused_not_updated() {
    let f = fake().await;
    let d = driver(&f);
    // Another machine's VM (our identity tags with another UID) ...
    let req = request(&class());
    let vm = name(&req);
    f.put_raw(
        "virtualMachines",
        RG,
        &vm,
        go_provider_vm(json!({CLUSTER_TAG: "1", "kubernetes.io-role-node": "1",
                              "machine.sapcloud.io-namespace": "default", "machine.sapcloud.io-uid": "someone-else"})),
    );
    let e = d.create_machine(&req).await.unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    assert!(e.message.contains("someone-else"), "{}", e.message);
    // ... and a VM of another cluster, without identity.
    let req = request(&class());
    let vm = name(&req);
    f.put_raw(
        "virtualMachines",
        RG,
        &vm,
        go_provider_vm(
            json!({"kubernetes.io-cluster-shoot--other": "1", "kubernetes.io-role-node": "1"}),
        ),
    );
    let e = d.create_machine(&req).await.unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    assert!(f.nics(RG).is_empty(), "no NIC for a refused create");
    assert_eq!(
        f.vms(RG)[&vm]["tags"]["kubernetes.io-cluster-shoot--other"],
        "1",
        "the other VM is untouched"
    );
}

#[tokio::test]
async fn delete_removes_the_vm_its_nic_and_its_disks_and_a_second_delete_is_ok() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    d.create_machine(&req).await.expect("create");
    d.delete_machine(&req).await.expect("delete");
    assert!(f.vms(RG).is_empty() && f.nics(RG).is_empty() && f.disks(RG).is_empty());
    d.delete_machine(&req).await.expect("second delete");
    let e = d.get_machine_status(&req).await.unwrap_err();
    assert_eq!(e.code, Code::NotFound);
    assert_eq!(
        e.message,
        format!(
            "VM: [ResourceGroup: {RG}, Name: {}] is not found",
            name(&req)
        )
    );
}

#[tokio::test]
async fn a_half_created_machine_is_listed_by_its_nic_and_delete_removes_the_orphan() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    // A 500 on every try (the first and the three transient retries).
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        4,
        500,
        "InternalServerError",
        "boom",
    ));
    // ... and the clean-up of the NIC fails too, leaving a half-created machine.
    f.inject(Fault::http(
        "DELETE",
        "networkInterfaces",
        1,
        409,
        "Conflict",
        "Another operation on this NIC is in progress.",
    ));
    d.create_machine(&req).await.expect_err("VM creation fails");
    let list = d
        .list_machines(&ListMachinesRequest {
            machine_class: class(),
            secret: secret(),
        })
        .await
        .expect("list");
    let pid = format!("azure:///{LOCATION}/{}", name(&req));
    assert_eq!(list.machine_list.get(&pid), Some(&name(&req)), "{list:?}");
    d.delete_machine(&req).await.expect("delete");
    assert!(f.nics(RG).is_empty(), "{:?}", f.nics(RG).keys());
}

#[tokio::test]
async fn delete_sets_missing_delete_options_before_deleting_the_vm() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    d.create_machine(&req).await.expect("create");
    // As an older provider left it: NIC and disks detached when the VM goes.
    let mut v = f.vms(RG)[&vm].clone();
    v["properties"]["storageProfile"]["osDisk"]["deleteOption"] = json!("Detach");
    v["properties"]["storageProfile"]["dataDisks"][0]["deleteOption"] = json!("Detach");
    v["properties"]["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] =
        json!("Detach");
    f.put_raw("virtualMachines", RG, &vm, v);
    f.clear_requests();
    d.delete_machine(&req).await.expect("delete");
    assert!(
        f.requests()
            .contains(&format!("PATCH virtualMachines/{vm}")),
        "{:?}",
        f.requests()
    );
    assert!(
        f.vms(RG).is_empty() && f.nics(RG).is_empty() && f.disks(RG).is_empty(),
        "left: {:?} {:?} {:?}",
        f.vms(RG).keys(),
        f.nics(RG).keys(),
        f.disks(RG).keys()
    );
}

#[tokio::test]
async fn a_failed_vm_is_deleted_and_then_its_leftovers() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    d.create_machine(&req).await.expect("create");
    let mut v = f.vms(RG)[&vm].clone();
    v["properties"]["provisioningState"] = json!("Failed");
    v["properties"]["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] =
        json!("Detach");
    f.put_raw("virtualMachines", RG, &vm, v);
    f.clear_requests();
    d.delete_machine(&req).await.expect("delete");
    assert!(
        !f.requests().iter().any(|r| r.starts_with("PATCH")),
        "{:?}",
        f.requests()
    );
    assert!(f.vms(RG).is_empty() && f.nics(RG).is_empty() && f.disks(RG).is_empty());
}

#[tokio::test]
async fn delete_without_the_resource_group_is_a_no_op() {
    let f = FakeAzureNoRg::new().await;
    let d = driver(&f.0);
    d.delete_machine(&request(&class())).await.expect("delete");
    assert_eq!(
        f.0.requests(),
        vec!["HEAD resourcegroups/shoot--test".to_string()]
    );
}

struct FakeAzureNoRg(mcm_fake_azure::FakeAzure);
impl FakeAzureNoRg {
    async fn new() -> Self {
        FakeAzureNoRg(mcm_fake_azure::FakeAzure::start().await.unwrap())
    }
}

#[tokio::test]
async fn list_pages_through_resource_graph_and_falls_back_to_list_calls() {
    let f = fake().await;
    let d = driver(&f);
    let a = request(&class());
    let b = request(&class());
    d.create_machine(&a).await.unwrap();
    d.create_machine(&b).await.unwrap();
    let list_req = ListMachinesRequest {
        machine_class: class(),
        secret: secret(),
    };
    f.set_graph_page_size(1);
    f.clear_requests();
    let paged = d.list_machines(&list_req).await.unwrap();
    assert_eq!(paged.machine_list.len(), 2, "{paged:?}");
    assert!(
        f.requests()
            .iter()
            .filter(|r| *r == "POST resources")
            .count()
            >= 4,
        "one row per page"
    );
    f.disable_resource_graph();
    let fallback = d.list_machines(&list_req).await.unwrap();
    assert_eq!(fallback, paged);
    let values: Vec<&String> = fallback.machine_list.values().collect();
    assert!(values.contains(&&name(&a)) && values.contains(&&name(&b)));
}

#[tokio::test]
async fn marketplace_terms_are_accepted_and_the_plan_is_attached() {
    let f = fake().await;
    f.add_plan_publisher("sap");
    let d = driver(&f);
    let req = request(&class());
    d.create_machine(&req).await.expect("create");
    assert!(f.agreement_accepted("sap", "gardenlinux", "greatest"));
    let v = &f.vms(RG)[&name(&req)];
    assert_eq!(
        v["plan"],
        json!({"name": "greatest", "publisher": "sap", "product": "gardenlinux"})
    );
}

#[tokio::test]
async fn tokens_come_from_azure_identity_through_the_fakes_token_endpoint() {
    let f = fake().await;
    let d = AzureDriver::new(AzureDriverConfig {
        endpoint: Some(f.url().to_string()),
        arm: fast_settings(),
        ..Default::default()
    });
    let req = request(&class());
    d.create_machine(&req)
        .await
        .expect("create with a client-secret token");
    d.get_machine_status(&req).await.expect("status");
    assert_eq!(f.tokens_issued(), 1, "one token, cached by azure_identity");
}

#[tokio::test]
async fn volume_ids_of_the_csi_driver_and_in_tree_disks() {
    let f = fake().await;
    let d = driver(&f);
    let pvs: Vec<k8s_openapi::api::core::v1::PersistentVolumeSpec> = serde_json::from_value(json!([
        {"csi": {"driver": "disk.csi.azure.com", "volumeHandle": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/pv-1"}},
        {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}},
        {"azureDisk": {"diskName": "pv-2", "diskURI": "/x/pv-2"}}
    ]))
    .unwrap();
    let out = d
        .get_volume_ids(&GetVolumeIdsRequest { pv_specs: pvs })
        .await
        .unwrap();
    assert_eq!(
        out.volume_ids,
        vec![
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/pv-1".to_string(),
            "pv-2".into()
        ]
    );
    let e = d.initialize_machine(&request(&class())).await.unwrap_err();
    assert_eq!(e.code, Code::Unimplemented);
}

#[tokio::test]
async fn arm_calls_per_machine_against_the_fake() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    d.create_machine(&req).await.unwrap();
    let create = d.api_calls().snapshot();
    d.api_calls().reset();
    d.get_machine_status(&req).await.unwrap();
    let status = d.api_calls().total();
    d.api_calls().reset();
    d.delete_machine(&req).await.unwrap();
    let delete = d.api_calls().snapshot();
    d.api_calls().reset();
    d.list_machines(&ListMachinesRequest {
        machine_class: class(),
        secret: secret(),
    })
    .await
    .unwrap();
    let list = d.api_calls().total();
    println!("create: {} calls {create:?}", create.values().sum::<u64>());
    println!("status: {status} calls");
    println!("delete: {} calls {delete:?}", delete.values().sum::<u64>());
    println!("list: {list} calls");
    // GET VM (adoption), GET image (marketplace plan), GET subnet, GET NIC,
    // PUT NIC + poll + read-back, PUT VM + poll + read-back.
    assert_eq!(create.values().sum::<u64>(), 10, "{create:?}");
    assert_eq!(status, 1);
    // HEAD RG, GET VM, DELETE VM + poll.
    assert_eq!(delete.values().sum::<u64>(), 4, "{delete:?}");
    assert_eq!(list, 1);
}

#[tokio::test]
async fn a_vm_joins_the_availability_set_of_the_spec_and_a_missing_set_is_an_error() {
    let f = fake().await;
    let d = driver(&f);
    let set = format!(
        "/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Compute/availabilitySets/workers",
        mcm_fake_azure::SUBSCRIPTION
    );
    let mut s = spec(CLUSTER_TAG);
    s["properties"].as_object_mut().unwrap().remove("zone");
    s["properties"]["availabilitySet"] = json!({"id": set});
    let c = class_with("aset", s);
    let e = d.create_machine(&request(&c)).await.unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e:?}");
    assert!(e.message.contains("Availability set"), "{}", e.message);
    f.add_availability_set(RG, "workers");
    let req = request(&c);
    d.create_machine(&req)
        .await
        .expect("create in the availability set");
    let v = &f.vms(RG)[&name(&req)];
    assert_eq!(v["properties"]["availabilitySet"]["id"], json!(set));
    assert!(
        v.get("zones").is_none(),
        "no zone with an availability set: {v}"
    );
}

use mcm_driver::testing::GZIPPED_CLOUD_CONFIG;

#[tokio::test]
async fn gzipped_userdata_reaches_the_vm_custom_data_byte_for_byte() {
    let f = fake().await;
    let d = driver(&f);
    let mut req = request(&class());
    if let Some(data) = req.secret.data.as_mut() {
        data.insert(
            "userData".into(),
            k8s_openapi::ByteString(GZIPPED_CLOUD_CONFIG.to_vec()),
        );
    }
    let vm = name(&req);
    d.create_machine(&req).await.expect("create");
    let sent = base64::engine::general_purpose::STANDARD
        .decode(f.custom_data(RG, &vm).expect("customData"))
        .unwrap();
    assert_eq!(sent, GZIPPED_CLOUD_CONFIG);
}

/// Issue 22, finding 3: the class's location is edited under a Running
/// machine. The listing names the VM by its own location (the providerID the
/// Machine holds), its ARM ID and the identity it was created with, and the
/// orphan collector's rules keep it.
#[tokio::test]
async fn a_running_machines_vm_is_listed_as_its_own_after_the_class_location_is_edited() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let created = d.create_machine(&req).await.expect("create");
    let mut machine = req.machine.clone();
    machine.spec.provider_id = created.provider_id.clone();
    machine.status =
        Some(serde_json::from_value(json!({"currentStatus": {"phase": "Running"}})).unwrap());

    let mut moved = spec(CLUSTER_TAG);
    moved["location"] = json!("northeurope");
    assert_ne!(LOCATION, "northeurope");
    let edited = class_with("test-class", moved);
    let listed = d
        .list_machines(&ListMachinesRequest {
            machine_class: edited.clone(),
            secret: secret(),
        })
        .await
        .expect("list");
    let vm = name(&req);
    assert_eq!(
        listed.machine_list.get(&created.provider_id),
        Some(&vm),
        "listed under its own location: {:?}",
        listed.machine_list
    );
    let facts = listed.facts(&created.provider_id);
    assert_eq!(facts.owner, mcm_driver::MachineOwner::of(&req.machine));
    assert!(
        facts
            .instance_key
            .ends_with(&format!("/virtualmachines/{vm}")),
        "{}",
        facts.instance_key
    );
    for (pid, name) in &listed.machine_list {
        let facts = listed.facts(pid);
        let listed_vm = mcm_core::orphans::ListedVm {
            class: "test-class".into(),
            provider_id: pid.clone(),
            name: name.clone(),
            instance_key: facts.instance_key,
            owner: facts.owner,
        };
        let verdict =
            mcm_core::orphans::judge(&listed_vm, std::slice::from_ref(&machine), "default");
        assert!(!verdict.is_orphan(), "{pid}: {verdict:?}");
    }
    // Deleting through the edited class still finds the VM (by name).
    d.delete_machine(&mcm_driver::MachineRequest {
        machine,
        machine_class: edited,
        secret: secret(),
    })
    .await
    .expect("delete");
    assert!(f.vms(RG).is_empty());
}

// ---- The fake refuses what ARM refuses; our requests pass ----

/// A raw ARM call against the fake, as a client that skipped our driver
/// would send it: the status and ARM's error envelope.
async fn raw(
    f: &mcm_fake_azure::FakeAzure,
    method: reqwest::Method,
    path_and_query: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut r = reqwest::Client::new()
        .request(method, format!("{}{path_and_query}", f.url()))
        .bearer_auth("test-token");
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

fn vm_path(vm: &str, version: &str) -> String {
    format!(
        "/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{vm}?api-version={version}",
        mcm_fake_azure::SUBSCRIPTION
    )
}

/// Creates a machine through the driver (the fake took every request) and
/// answers the stored VM, a body ARM takes, to spoil.
async fn created_vm(f: &mcm_fake_azure::FakeAzure) -> (String, serde_json::Value) {
    let d = driver(f);
    let req = request(&class());
    d.create_machine(&req)
        .await
        .expect("the fake takes our requests");
    let vm = name(&req);
    let body = f.vms(RG).remove(&vm).expect("the VM");
    (vm, body)
}

#[tokio::test]
async fn api_versions_are_checked_per_type_and_ours_are_published_ones() {
    let f = fake().await;
    // Every call of a create carried a version the fake knows.
    let (vm, _) = created_vm(&f).await;
    let (status, body) = raw(&f, reqwest::Method::GET, &vm_path(&vm, "2099-01-01"), None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "NoRegisteredProviderFound");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2023-07-01"),
        "{body}"
    );
    // A disk version is not a VM version: the versions are per type.
    let (status, body) = raw(&f, reqwest::Method::GET, &vm_path(&vm, "2023-04-02"), None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("NoRegisteredProviderFound"))
    );
    let no_version = vm_path(&vm, "").replace("?api-version=", "");
    let (status, body) = raw(&f, reqwest::Method::GET, &no_version, None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("MissingApiVersionParameter"))
    );
    let (status, _) = raw(&f, reqwest::Method::GET, &vm_path(&vm, "2023-07-01"), None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn unknown_vm_members_are_refused_and_our_vm_body_has_none() {
    let f = fake().await;
    let (_, mut body) = created_vm(&f).await;
    body["properties"]["hardwareProfil"] = json!({"vmSize": "Standard_D2s_v3"});
    let (status, answer) = raw(
        &f,
        reqwest::Method::PUT,
        &vm_path("spoiled", "2023-07-01"),
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "InvalidRequestContent");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'hardwareProfil'"));
    body["properties"]
        .as_object_mut()
        .unwrap()
        .remove("hardwareProfil");
    body["sku"] = json!({"name": "x"});
    let (status, answer) = raw(
        &f,
        reqwest::Method::PUT,
        &vm_path("spoiled", "2023-07-01"),
        Some(body),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("InvalidRequestContent"))
    );
    assert!(!f.vms(RG).contains_key("spoiled"), "nothing was created");
}

#[tokio::test]
async fn required_vm_parameters_are_checked_and_our_vm_body_carries_them() {
    let f = fake().await;
    let (_, body) = created_vm(&f).await;
    for (field, target) in [
        ("createOption", "osDisk.createOption"),
        ("adminUsername", "adminUsername"),
    ] {
        let mut b = body.clone();
        let at = if field == "createOption" {
            &mut b["properties"]["storageProfile"]["osDisk"]
        } else {
            &mut b["properties"]["osProfile"]
        };
        at.as_object_mut().unwrap().remove(field);
        let (status, answer) = raw(
            &f,
            reqwest::Method::PUT,
            &vm_path("spoiled", "2023-07-01"),
            Some(b),
        )
        .await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], "InvalidParameter");
        assert_eq!(answer["error"]["target"], target);
    }
}

#[tokio::test]
async fn computer_names_compute_refuses_are_refused_and_the_driver_reports_arms_answer() {
    let f = fake().await;
    let (_, body) = created_vm(&f).await;
    let mut b = body.clone();
    b["properties"]["osProfile"]["computerName"] = json!("under_score");
    let (status, answer) = raw(
        &f,
        reqwest::Method::PUT,
        &vm_path("spoiled", "2023-07-01"),
        Some(b),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["target"].as_str()),
        (400, Some("computerName"))
    );
    // A Machine name longer than Linux allows reaches the VM's computer
    // name; the driver carries ARM's code and message to the Machine.
    let d = driver(&f);
    let mut req = request(&class());
    req.machine.metadata.name = Some(format!("m{}", "x".repeat(70)));
    let e = d.create_machine(&req).await.unwrap_err();
    assert!(
        e.message.contains("InvalidParameter") && e.message.contains("64 characters"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn transient_arm_answers_are_retried_as_the_go_sdk_does_and_persistent_ones_fail() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        503,
        "ServiceUnavailable",
        "try later",
    ));
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        408,
        "RequestTimeout",
        "slow",
    ));
    d.create_machine(&req)
        .await
        .expect("retried through 503 and 408");
    let puts = f
        .requests()
        .iter()
        .filter(|r| *r == &format!("PUT virtualMachines/{vm}"))
        .count();
    assert_eq!(puts, 3, "two transient answers, then the VM");
    assert_eq!(f.vms(RG).len(), 1);

    // More transient answers than the retries: the call fails, Internal.
    let req = request(&class());
    f.inject(Fault::http(
        "GET",
        "virtualMachines",
        4,
        500,
        "InternalServerError",
        "boom",
    ));
    let e = d.create_machine(&req).await.unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e:?}");
    assert!(e.message.contains("InternalServerError"), "{}", e.message);
    // A 400 is not transient: no retry.
    f.clear_faults();
    f.clear_requests();
    f.inject(Fault::http(
        "GET",
        "virtualMachines",
        1,
        400,
        "BadRequest",
        "no",
    ));
    let req = request(&class());
    let e = d.create_machine(&req).await.unwrap_err();
    assert_eq!(
        f.requests(),
        vec![format!("GET virtualMachines/{}", name(&req))],
        "{e:?}"
    );
}

#[tokio::test]
async fn unknown_nic_and_disk_members_are_refused_and_ours_have_none() {
    let f = fake().await;
    let (vm, _) = created_vm(&f).await;
    let sub = mcm_fake_azure::SUBSCRIPTION;
    let mut nic = f.nics(RG).remove(&format!("{vm}-nic")).expect("the NIC");
    nic["properties"]["enableIPForwardin"] = json!(true);
    let nic_path = format!(
        "/subscriptions/{sub}/resourceGroups/{RG}/providers/Microsoft.Network/networkInterfaces/spoiled-nic?api-version=2023-09-01"
    );
    let (status, answer) = raw(&f, reqwest::Method::PUT, &nic_path, Some(nic)).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "InvalidRequestContent");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("'enableIPForwardin'"));
    let disk_path = format!(
        "/subscriptions/{sub}/resourceGroups/{RG}/providers/Microsoft.Compute/disks/spoiled-disk?api-version=2023-04-02"
    );
    let disk = |creation: serde_json::Value| {
        json!({"location": "westeurope", "sku": {"name": "Premium_LRS"},
               "properties": {"diskSizeGB": 10, "creationData": creation}})
    };
    for (spoiled, member) in [
        (
            json!({"createOption": "Empty", "imagReference": {}}),
            "imagReference",
        ),
        (
            json!({"createOption": "FromImage", "galleryImageReference": {"sharedGalleryImage": "/SharedGalleries/g/Images/i/Versions/1"}}),
            "sharedGalleryImage",
        ),
    ] {
        let (status, answer) = raw(&f, reqwest::Method::PUT, &disk_path, Some(disk(spoiled))).await;
        assert_eq!(status, 400, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("'{member}'")),
            "{answer}"
        );
    }
    let (status, answer) = raw(
        &f,
        reqwest::Method::PUT,
        &disk_path,
        Some(disk(json!({"diskSizeGB": 10}))),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        !f.disks(RG).contains_key("spoiled-disk"),
        "nothing was created"
    );
    assert!(
        !f.nics(RG).contains_key("spoiled-nic"),
        "nothing was created"
    );
}
