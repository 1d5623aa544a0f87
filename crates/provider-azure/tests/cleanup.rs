//! Clean-up against the ARM fake: a failed create (the VM PUT refused, or its
//! operation ending `Failed`) and a delete leave no NIC, OS disk or data disk
//! of the machine; clean-up is idempotent and retried by the next call; a NIC
//! or disk of the machine's name that another VM holds is kept; a VM that was
//! there before the create is not deleted by it.

use crate::common::*;
use mcm_driver::{Code, Driver};
use mcm_fake_azure::Fault;
use serde_json::json;

/// What the fake still holds of machine `vm` (VM, NICs, disks by name prefix).
fn leftovers(f: &mcm_fake_azure::FakeAzure, vm: &str) -> Vec<String> {
    let p = format!("{vm}-");
    let mut out: Vec<String> = f.vms(RG).into_keys().filter(|n| n == vm).collect();
    out.extend(f.nics(RG).into_keys().filter(|n| n.starts_with(&p)));
    out.extend(f.disks(RG).into_keys().filter(|n| n.starts_with(&p)));
    out
}

fn vm_id(vm: &str) -> String {
    format!(
        "/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/{vm}",
        mcm_fake_azure::SUBSCRIPTION
    )
}

#[tokio::test]
async fn a_vm_put_arm_refuses_leaves_no_nic_or_disk_and_the_retry_creates_the_machine() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        400,
        "InvalidParameter",
        "The value of parameter imageReference.sku is invalid.",
    ));
    let e = d
        .create_machine(&req)
        .await
        .expect_err("the PUT is refused");
    assert_eq!(e.code, Code::Internal, "{e:?}");
    assert!(e.message.contains("InvalidParameter"), "{}", e.message);
    assert!(f
        .requests()
        .contains(&format!("DELETE networkInterfaces/{vm}-nic")));
    assert_eq!(leftovers(&f, &vm), Vec::<String>::new());
    d.create_machine(&req).await.expect("the retry creates it");
    assert_eq!(f.vms(RG).len(), 1);
}

#[tokio::test]
async fn a_vm_whose_provisioning_fails_is_deleted_with_its_nic_and_disks_on_every_try() {
    let f = fake().await;
    f.set_lro_polls(2);
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    for _ in 0..2 {
        f.inject(Fault::lro_failed(
            "PUT",
            "virtualMachines",
            "OSProvisioningInternalError",
            "OS Provisioning failed for VM due to an internal error.",
        ));
        let e = d
            .create_machine(&req)
            .await
            .expect_err("provisioning fails");
        assert_eq!(e.code, Code::Internal, "{e:?}");
        assert!(
            e.message.contains("OSProvisioningInternalError"),
            "{}",
            e.message
        );
        assert_eq!(leftovers(&f, &vm), Vec::<String>::new());
    }
}

#[tokio::test]
async fn disks_made_from_images_before_a_failed_vm_put_are_deleted_too() {
    let f = fake().await;
    let d = driver(&f);
    let mut s = spec(CLUSTER_TAG);
    s["properties"]["storageProfile"]["dataDisks"] = json!([
        {"name": "etcd", "lun": 0, "diskSizeGB": 20, "storageAccountType": "Premium_LRS"},
        {"name": "img", "lun": 1, "diskSizeGB": 30, "storageAccountType": "Premium_LRS",
         "imageRef": {"id": format!("/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Compute/images/data", mcm_fake_azure::SUBSCRIPTION)}}
    ]);
    let req = request(&class_with("img", s));
    let vm = name(&req);
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        409,
        "OperationNotAllowed",
        "The VM is being deleted.",
    ));
    d.create_machine(&req)
        .await
        .expect_err("the PUT is refused");
    assert!(
        f.requests()
            .contains(&format!("PUT disks/{vm}-img-1-data-disk")),
        "the image disk was made first: {:?}",
        f.requests()
    );
    assert_eq!(leftovers(&f, &vm), Vec::<String>::new());
}

#[tokio::test]
async fn a_failed_clean_up_is_reported_and_finished_by_delete() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        400,
        "InvalidParameter",
        "bad",
    ));
    f.inject(Fault::http(
        "DELETE",
        "networkInterfaces",
        1,
        409,
        "Conflict",
        "Another operation on this NIC is in progress.",
    ));
    let e = d.create_machine(&req).await.expect_err("create fails");
    assert!(e.message.contains("cleanup"), "{}", e.message);
    assert_eq!(leftovers(&f, &vm), vec![format!("{vm}-nic")]);
    d.delete_machine(&req).await.expect("delete");
    assert_eq!(leftovers(&f, &vm), Vec::<String>::new());
    d.delete_machine(&req).await.expect("a second delete");
}

#[tokio::test]
async fn a_nic_of_the_machines_name_attached_to_another_vm_is_kept() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    let nic = format!("{vm}-nic");
    f.put_raw(
        "networkInterfaces",
        RG,
        &nic,
        json!({"location": LOCATION, "properties": {"provisioningState": "Succeeded",
               "ipConfigurations": [], "virtualMachine": {"id": vm_id("someone-else")}}}),
    );
    let e = d
        .create_machine(&req)
        .await
        .expect_err("ARM refuses the NIC");
    assert!(e.message.contains("NicInUse"), "{}", e.message);
    assert!(!e.message.contains("cleanup"), "{}", e.message);
    assert!(f.nics(RG).contains_key(&nic), "kept after the create");
    d.delete_machine(&req).await.expect("delete");
    assert!(f.nics(RG).contains_key(&nic), "kept after the delete");
    assert_eq!(
        f.nics(RG)[&nic]["properties"]["virtualMachine"]["id"],
        json!(vm_id("someone-else"))
    );
}

#[tokio::test]
async fn a_vm_of_this_machine_that_was_being_made_is_not_deleted_by_a_failed_create() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    let uid = req.machine.metadata.uid.clone().unwrap();
    f.put_raw(
        "virtualMachines",
        RG,
        &vm,
        json!({"location": LOCATION,
               "tags": {CLUSTER_TAG: "1", "kubernetes.io-role-node": "1", "mcm.gardener.cloud-machine-uid": uid},
               "properties": {"provisioningState": "Creating"}}),
    );
    f.inject(Fault::http(
        "PUT",
        "virtualMachines",
        1,
        409,
        "OperationNotAllowed",
        "Another operation is in progress on the VM.",
    ));
    d.create_machine(&req)
        .await
        .expect_err("the PUT is refused");
    assert!(f.vms(RG).contains_key(&vm), "the VM is left for the retry");
    assert!(
        !f.requests()
            .contains(&format!("DELETE virtualMachines/{vm}")),
        "{:?}",
        f.requests()
    );
}

#[tokio::test]
async fn deleting_a_failed_vm_removes_the_disks_it_lists_even_when_the_class_changed() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    d.create_machine(&req).await.expect("create");
    // The VM failed, its data disk is detached rather than deleted with it,
    // and the class no longer has that data disk.
    let mut v = f.vms(RG)[&vm].clone();
    v["properties"]["provisioningState"] = json!("Failed");
    v["properties"]["storageProfile"]["dataDisks"][0]["deleteOption"] = json!("Detach");
    f.put_raw("virtualMachines", RG, &vm, v);
    let mut s = spec(CLUSTER_TAG);
    s["properties"]["storageProfile"]["dataDisks"] = json!([]);
    let mut now = req.clone();
    now.machine_class = class_with("azure-class", s);
    d.delete_machine(&now).await.expect("delete");
    assert_eq!(leftovers(&f, &vm), Vec::<String>::new());
}

#[tokio::test]
async fn deleting_a_failed_vm_keeps_a_persistent_volume_attached_to_it() {
    let f = fake().await;
    let d = driver(&f);
    let req = request(&class());
    let vm = name(&req);
    d.create_machine(&req).await.expect("create");
    // A volume the CSI driver attached (detached, not deleted, with the VM).
    let pv = "pvc-5b1f0c2e-data";
    f.put_raw(
        "disks",
        RG,
        pv,
        json!({"location": LOCATION, "managedBy": vm_id(&vm), "properties": {"diskSizeGB": 10}}),
    );
    let mut v = f.vms(RG)[&vm].clone();
    v["properties"]["provisioningState"] = json!("Failed");
    v["properties"]["storageProfile"]["dataDisks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"lun": 9, "name": pv, "createOption": "Attach", "deleteOption": "Detach",
                     "managedDisk": {"id": format!("/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Compute/disks/{pv}", mcm_fake_azure::SUBSCRIPTION)}}));
    f.put_raw("virtualMachines", RG, &vm, v);
    d.delete_machine(&req).await.expect("delete");
    assert_eq!(leftovers(&f, &vm), Vec::<String>::new());
    assert!(f.disks(RG).contains_key(pv), "the volume is kept");
    assert!(
        !f.requests().contains(&format!("DELETE disks/{pv}")),
        "{:?}",
        f.requests()
    );
}
