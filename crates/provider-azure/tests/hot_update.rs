//! UpdateMachine against the ARM fake: the class's tags converge on the VM,
//! its NIC and its disks (one tag PATCH per resource that differs); a second
//! run sends no PATCH; a failure half-way converges on the retry; a tag ARM
//! rejects is `InvalidArgument` with ARM's message; a VM size change is
//! refused without a call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use mcm_driver::{Code, Driver, MachineRequest, UpdateMachineRequest};
use mcm_fake_azure::{Fault, FaultResponse};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn update(req: &MachineRequest, want: &Value, last: &Value) -> UpdateMachineRequest {
    UpdateMachineRequest {
        machine: req.machine.clone(),
        machine_class: class_with("azure-class", want.clone()),
        secret: secret(),
        last_applied_provider_spec: last.clone(),
    }
}

fn tags(v: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(v["tags"].clone()).unwrap_or_default()
}

/// The tags of the VM, its NIC and its two disks.
fn all_tags(f: &mcm_fake_azure::FakeAzure, vm: &str) -> Vec<BTreeMap<String, String>> {
    let disks = f.disks(RG);
    let data = disks
        .iter()
        .find(|(n, _)| n.ends_with("-data-disk"))
        .map(|(_, d)| tags(d))
        .expect("the data disk");
    vec![
        tags(&f.vms(RG)[vm]),
        tags(&f.nics(RG)[&format!("{vm}-nic")]),
        tags(&disks[&format!("{vm}-os-disk")]),
        data,
    ]
}

fn patches(f: &mcm_fake_azure::FakeAzure) -> usize {
    f.requests()
        .iter()
        .filter(|r| r.starts_with("PATCH"))
        .count()
}

/// A created machine, its VM name, and the specs before and after an edit
/// of every kind of tag change.
async fn created(f: &mcm_fake_azure::FakeAzure) -> (MachineRequest, String, Value, Value) {
    let mut before = spec(CLUSTER_TAG);
    before["tags"]["team"] = json!("a");
    before["tags"]["stale"] = json!("s");
    let req = request(&class_with("azure-class", before.clone()));
    driver(f).create_machine(&req).await.expect("create");
    let mut after = before.clone();
    after["tags"]["team"] = json!("b");
    after["tags"]["cost"] = json!("x");
    after["tags"].as_object_mut().unwrap().remove("stale");
    let vm = name(&req);
    (req, vm, before, after)
}

fn assert_converged(t: &BTreeMap<String, String>, what: &str) {
    assert_eq!(
        t.get("team").map(String::as_str),
        Some("b"),
        "{what}: {t:?}"
    );
    assert_eq!(
        t.get("cost").map(String::as_str),
        Some("x"),
        "{what}: {t:?}"
    );
    assert!(!t.contains_key("stale"), "{what}: {t:?}");
}

#[tokio::test]
async fn tags_converge_on_the_vm_nic_and_disks_and_a_second_run_sends_no_patch() {
    let f = fake().await;
    let d = driver(&f);
    let (req, vm, before, after) = created(&f).await;
    assert!(d.in_place_changes(&before, &after).all_in_place());
    f.clear_requests();
    d.update_machine(&update(&req, &after, &before))
        .await
        .expect("update");
    let now = all_tags(&f, &vm);
    for (t, what) in now.iter().zip(["VM", "NIC", "OS disk", "data disk"]) {
        assert_converged(t, what);
    }
    for t in &now[..2] {
        assert!(t.contains_key(CLUSTER_TAG), "membership kept: {t:?}");
        assert!(t.contains_key("mcm.gardener.cloud-machine-uid"), "{t:?}");
    }
    assert!(
        !now[2].contains_key(CLUSTER_TAG),
        "a disk made with its VM gets no membership tag: {:?}",
        now[2]
    );
    assert_eq!(f.vms(RG).len(), 1, "no VM created or deleted");

    f.clear_requests();
    d.update_machine(&update(&req, &after, &before))
        .await
        .expect("second update");
    assert_eq!(
        patches(&f),
        0,
        "a second run only reads: {:?}",
        f.requests()
    );
    assert_eq!(all_tags(&f, &vm), now);
}

#[tokio::test]
async fn a_failure_half_way_converges_on_the_retry() {
    let f = fake().await;
    let d = driver(&f);
    let (req, vm, before, after) = created(&f).await;
    f.inject(Fault {
        method: "PATCH".into(),
        kind: "disks".into(),
        name: None,
        times: 1,
        response: FaultResponse::LroFailed {
            code: "InternalOperationError".into(),
            message: "An internal execution error occurred.".into(),
        },
    });
    let e = d
        .update_machine(&update(&req, &after, &before))
        .await
        .expect_err("the first disk PATCH fails");
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(
        e.message.contains("An internal execution error occurred."),
        "{e}"
    );
    let half = all_tags(&f, &vm);
    assert_converged(&half[0], "VM");
    assert!(
        !half[2].contains_key("team"),
        "not tagged yet: {:?}",
        half[2]
    );

    f.clear_requests();
    d.update_machine(&update(&req, &after, &before))
        .await
        .expect("retry");
    for (t, what) in all_tags(&f, &vm)
        .iter()
        .zip(["VM", "NIC", "OS disk", "data disk"])
    {
        assert_converged(t, what);
    }
    assert_eq!(patches(&f), 2, "only the two disks: {:?}", f.requests());
}

#[tokio::test]
async fn a_tag_arm_rejects_is_invalid_argument_with_its_message() {
    let f = fake().await;
    let d = driver(&f);
    let (req, vm, before, _) = created(&f).await;
    let mut want = before.clone();
    want["tags"]["team/name"] = json!("b");
    let e = d
        .update_machine(&update(&req, &want, &before))
        .await
        .expect_err("rejected");
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("InvalidTagNameCharacters"), "{e}");
    assert!(e.message.contains("reserved characters"), "{e}");
    assert!(!tags(&f.vms(RG)[&vm]).contains_key("team/name"));
}

#[tokio::test]
async fn a_vm_size_change_is_refused_without_a_call() {
    let f = fake().await;
    let d = driver(&f);
    let (req, _, before, mut after) = created(&f).await;
    after["properties"]["hardwareProfile"]["vmSize"] = json!("Standard_D4s_v3");
    let changes = d.in_place_changes(&before, &after);
    assert_eq!(
        changes.need_replacement,
        vec!["properties.hardwareProfile.vmSize"]
    );
    f.clear_requests();
    let e = d
        .update_machine(&update(&req, &after, &before))
        .await
        .expect_err("refused");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    assert!(e.message.contains("vmSize"), "{e}");
    assert!(f.requests().is_empty(), "no call: {:?}", f.requests());
}

#[tokio::test]
async fn a_class_that_no_longer_validates_is_reported_and_not_applied() {
    let f = fake().await;
    let d = driver(&f);
    let (req, _, before, mut after) = created(&f).await;
    after["location"] = json!("");
    f.clear_requests();
    let e = d
        .update_machine(&update(&req, &after, &before))
        .await
        .expect_err("invalid");
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("location"), "{e}");
    assert!(f.requests().is_empty(), "no call: {:?}", f.requests());
}

#[tokio::test]
async fn the_conformance_kits_update_checks_pass() {
    use mcm_driver::conformance::{run_update_checks, Fixture, UpdateFixture};
    use std::sync::Arc;
    let f = Arc::new(fake().await);
    let d = driver(&f);
    let mut updated = spec(CLUSTER_TAG);
    updated["tags"]["team"] = json!("blue");
    let fixture = Fixture {
        class: class(),
        other_class: class_with("other", spec("kubernetes.io-cluster-other")),
        secret: secret(),
        new_machine: Box::new(machine),
        invalid_classes: Vec::new(),
    };
    let (a, b, c) = (f.clone(), f.clone(), f.clone());
    let u = UpdateFixture {
        updated_class: class_with("azure-class", updated),
        break_updates: Box::new(move || {
            a.inject(Fault {
                method: "PATCH".into(),
                kind: "virtualMachines".into(),
                name: None,
                times: 1000,
                response: FaultResponse::Http {
                    status: 500,
                    code: "InternalServerError".into(),
                    message: "Internal error".into(),
                    retry_after: None,
                },
            });
            Box::pin(async {})
        }),
        heal: Box::new(move || {
            b.clear_faults();
            Box::pin(async {})
        }),
        converged: Box::new(move |provider_id| {
            let vm = provider_id
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let team = c.vms(RG).get(&vm).map(|v| tags(v).get("team").cloned());
            Box::pin(async move {
                match team {
                    Some(Some(t)) if t == "blue" => Ok(()),
                    other => Err(format!("VM {vm}: team is {other:?}")),
                }
            })
        }),
    };
    let failures = run_update_checks(&d, &fixture, &u).await;
    assert!(failures.is_empty(), "{failures:#?}");
}
