//! UpdateMachine against the ECS fake: the instance's tags converge on the
//! class's (TagResources/UntagResources, signed and checked against the ECS
//! metadata like every call), a second run sends no tag call, and a
//! replacement field is refused without a change.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::*;
use mcm_driver::{Code, Driver, UpdateMachineRequest};
use serde_json::json;
use std::collections::BTreeMap;

fn tags_of(fake: &mcm_fake_alicloud::FakeEcs, id: &str) -> BTreeMap<String, String> {
    fake.instances()
        .get(id)
        .map(|i| i.tags.iter().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn tags_converge_in_place_and_a_second_update_sends_no_tag_call() {
    let (fake, driver) = setup().await;
    let mut before = spec("shoot--hot");
    before["tags"]["stale"] = json!("s");
    let m = machine("hot");
    let created = driver
        .create_machine(&request(&m, &class("c", before.clone()), &secret()))
        .await
        .expect("create");
    let id = mcm_provider_alicloud::driver::instance_id_of(&created.provider_id).to_string();
    assert!(fake.instances().contains_key(&id));
    let mut after = before.clone();
    after["tags"]["team"] = json!("platform");
    after["tags"]["cost"] = json!("x");
    if let Some(t) = after["tags"].as_object_mut() {
        t.remove("stale");
    }
    let changes = driver.in_place_changes(&before, &after);
    assert!(changes.all_in_place(), "{changes:?}");
    let req = UpdateMachineRequest {
        machine: m.clone(),
        machine_class: class("c", after.clone()),
        secret: secret(),
        last_applied_provider_spec: before.clone(),
    };
    driver.update_machine(&req).await.expect("update");
    let tags = tags_of(&fake, &id);
    assert_eq!(tags.get("team").map(String::as_str), Some("platform"));
    assert_eq!(tags.get("cost").map(String::as_str), Some("x"));
    assert!(!tags.contains_key("stale"), "{tags:?}");
    assert!(tags.contains_key("machine.sapcloud.io/uid"), "{tags:?}");
    assert!(tags.contains_key("kubernetes.io/cluster/shoot--hot"));
    assert_eq!(fake.instances().len(), 1, "no instance created or deleted");

    let calls = fake.calls();
    driver.update_machine(&req).await.expect("second update");
    let again = fake.calls();
    for action in ["TagResources", "UntagResources"] {
        assert_eq!(calls.get(action), again.get(action), "{action} sent again");
    }
    assert_eq!(tags_of(&fake, &id), tags);
}

#[tokio::test]
async fn an_instance_type_change_is_refused_and_changes_nothing() {
    let (fake, driver) = setup().await;
    let before = spec("shoot--hot-type");
    let m = machine("hot");
    driver
        .create_machine(&request(&m, &class("c", before.clone()), &secret()))
        .await
        .expect("create");
    let mut after = before.clone();
    after["instanceType"] = json!("ecs.g7.xlarge");
    after["tags"]["team"] = json!("other");
    let changes = driver.in_place_changes(&before, &after);
    assert_eq!(changes.need_replacement, vec!["instanceType"]);
    let calls = fake.calls();
    let e = driver
        .update_machine(&UpdateMachineRequest {
            machine: m,
            machine_class: class("c", after),
            secret: secret(),
            last_applied_provider_spec: before,
        })
        .await
        .expect_err("refused");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    assert_eq!(fake.calls(), calls, "no call at all");
}
