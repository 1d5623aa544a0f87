//! UpdateMachine against the fake: the server's metadata converges on the
//! class's tags (Nova's server metadata API), a second run sends no metadata
//! call, a failure half-way converges on the retry, a value Nova rejects is
//! `InvalidArgument` with Nova's message, and a replacement field is refused
//! without a call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::{class, env, machine, Env, CLUSTER_KEY, ROLE_KEY};
use mcm_api::Machine;
use mcm_driver::{Code, Driver, UpdateMachineRequest};
use mcm_fake_openstack::{Fault, Op};
use mcm_provider_openstack::MACHINE_UID_KEY;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const METADATA_CALLS: [&str; 2] = [
    "nova.servers.metadata.create",
    "nova.servers.metadata.delete",
];

fn metadata_of(env: &Env, id: &str) -> BTreeMap<String, String> {
    env.fake
        .servers()
        .into_iter()
        .find(|s| s["id"] == json!(id))
        .and_then(|s| serde_json::from_value(s["metadata"].clone()).ok())
        .unwrap_or_default()
}

/// A machine created with `spec`, with its provider ID set; and its server ID.
async fn created(env: &Env, spec: &Value) -> (Machine, String) {
    let mut m = machine("hot");
    let out = env
        .driver
        .create_machine(&env.request(&class("c", spec.clone()), m.clone()))
        .await
        .expect("create");
    m.spec.provider_id = out.provider_id.clone();
    let id = out.provider_id.rsplit('/').next().unwrap().to_string();
    (m, id)
}

fn update(env: &Env, m: &Machine, want: &Value, last: &Value) -> UpdateMachineRequest {
    UpdateMachineRequest {
        machine: m.clone(),
        machine_class: class("c", want.clone()),
        secret: env.secret(),
        last_applied_provider_spec: last.clone(),
    }
}

fn metadata_calls(env: &Env) -> Vec<Option<u64>> {
    let calls = env.fake.calls();
    METADATA_CALLS
        .iter()
        .map(|c| calls.get(*c).copied())
        .collect()
}

#[tokio::test]
async fn metadata_converges_in_place_and_a_second_update_sends_no_metadata_call() {
    let env = env().await;
    let mut before = env.spec();
    before["spec"]["tags"]["team"] = json!("a");
    before["spec"]["tags"]["stale"] = json!("s");
    let (m, id) = created(&env, &before).await;
    let mut after = before.clone();
    after["spec"]["tags"]["team"] = json!("b");
    after["spec"]["tags"]["cost"] = json!("x");
    after["spec"]["tags"]
        .as_object_mut()
        .unwrap()
        .remove("stale");
    let changes = env.driver.in_place_changes(&before, &after);
    assert!(changes.all_in_place(), "{changes:?}");

    let req = update(&env, &m, &after, &before);
    env.driver.update_machine(&req).await.expect("update");
    let md = metadata_of(&env, &id);
    assert_eq!(md.get("team").map(String::as_str), Some("b"), "{md:?}");
    assert_eq!(md.get("cost").map(String::as_str), Some("x"), "{md:?}");
    assert!(!md.contains_key("stale"), "removed from the class: {md:?}");
    for kept in [CLUSTER_KEY, ROLE_KEY, MACHINE_UID_KEY, "Name"] {
        assert!(md.contains_key(kept), "{kept} kept: {md:?}");
    }
    assert_eq!(env.fake.servers().len(), 1, "no server created or deleted");

    let calls = metadata_calls(&env);
    let again = env
        .driver
        .update_machine(&req)
        .await
        .expect("second update");
    assert_eq!(metadata_calls(&env), calls, "a second run only looks");
    assert_eq!(again.last_known_state, "");
    assert_eq!(metadata_of(&env, &id), md);
}

#[tokio::test]
async fn a_failure_half_way_converges_on_the_retry() {
    let env = env().await;
    let mut before = env.spec();
    before["spec"]["tags"]["old"] = json!("o");
    let (m, id) = created(&env, &before).await;
    let mut after = before.clone();
    after["spec"]["tags"]["team"] = json!("b");
    after["spec"]["tags"].as_object_mut().unwrap().remove("old");
    env.fake.inject(
        Op::DeleteServerMetadataItem,
        Fault::new(500, "Unexpected API Error.", 1),
    );
    let req = update(&env, &m, &after, &before);
    let e = env
        .driver
        .update_machine(&req)
        .await
        .expect_err("the delete fails");
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(e.message.contains("Unexpected API Error."), "{e}");
    let half = metadata_of(&env, &id);
    assert_eq!(half.get("team").map(String::as_str), Some("b"));
    assert!(half.contains_key("old"), "not deleted yet: {half:?}");

    env.driver.update_machine(&req).await.expect("retry");
    let md = metadata_of(&env, &id);
    assert_eq!(md.get("team").map(String::as_str), Some("b"));
    assert!(!md.contains_key("old"), "{md:?}");
    assert_eq!(
        env.fake.calls().get("nova.servers.metadata.create"),
        Some(&1),
        "the item set before the failure is not sent again"
    );
}

#[tokio::test]
async fn a_value_nova_rejects_is_invalid_argument_with_novas_message() {
    let env = env().await;
    let before = env.spec();
    let (m, id) = created(&env, &before).await;
    let mut after = before.clone();
    after["spec"]["tags"]["team"] = json!("x".repeat(300));
    let e = env
        .driver
        .update_machine(&update(&env, &m, &after, &before))
        .await
        .expect_err("rejected");
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("is too long"), "{e}");
    assert!(!metadata_of(&env, &id).contains_key("team"));
}

#[tokio::test]
async fn a_flavor_change_is_refused_and_changes_nothing() {
    let env = env().await;
    let before = env.spec();
    let (m, id) = created(&env, &before).await;
    let mut after = before.clone();
    after["spec"]["flavorName"] = json!("m1.large");
    after["spec"]["tags"]["team"] = json!("b");
    let changes = env.driver.in_place_changes(&before, &after);
    assert_eq!(changes.need_replacement, vec!["spec.flavorName"]);
    assert_eq!(changes.in_place, vec!["spec.tags.team"]);
    let calls = env.fake.calls();
    let e = env
        .driver
        .update_machine(&update(&env, &m, &after, &before))
        .await
        .expect_err("refused");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    assert!(e.message.contains("spec.flavorName"), "{e}");
    assert_eq!(env.fake.calls(), calls, "no call at all");
    assert!(!metadata_of(&env, &id).contains_key("team"));
}

#[tokio::test]
async fn a_class_that_no_longer_validates_is_reported_and_not_applied() {
    let env = env().await;
    let before = env.spec();
    let (m, id) = created(&env, &before).await;
    let mut after = before.clone();
    after["spec"]["region"] = json!("");
    after["spec"]["tags"]["team"] = json!("b");
    let calls = env.fake.calls();
    let e = env
        .driver
        .update_machine(&update(&env, &m, &after, &before))
        .await
        .expect_err("invalid");
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("spec.region"), "{e}");
    assert_eq!(env.fake.calls(), calls, "no call at all");
    assert!(!metadata_of(&env, &id).contains_key("team"));
}

#[tokio::test]
async fn the_conformance_kits_update_checks_pass() {
    use mcm_driver::conformance::{run_update_checks, Fixture, UpdateFixture};
    use std::sync::Arc;
    let env = env().await;
    let (spec, secret) = (env.spec(), env.secret());
    let mut updated = spec.clone();
    updated["spec"]["tags"]["team"] = json!("blue");
    let other = common::spec_for(&env.network, &env.subnet, "kubernetes.io-cluster-other");
    let Env { fake, driver, .. } = env;
    let fake = Arc::new(fake);
    let (a, b, c) = (fake.clone(), fake.clone(), fake.clone());
    let fixture = Fixture {
        class: class("mine", spec),
        other_class: class("theirs", other),
        secret,
        new_machine: Box::new(|_| machine("upd")),
        invalid_classes: Vec::new(),
    };
    let u = UpdateFixture {
        updated_class: class("mine", updated),
        break_updates: Box::new(move || {
            a.inject(
                Op::UpdateServerMetadata,
                Fault::new(500, "Unexpected API Error.", 1000),
            );
            Box::pin(async {})
        }),
        heal: Box::new(move || {
            b.inject(Op::UpdateServerMetadata, Fault::new(500, "", 0));
            Box::pin(async {})
        }),
        converged: Box::new(move |provider_id| {
            let id = provider_id
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let team = c
                .servers()
                .into_iter()
                .find(|s| s["id"] == json!(id))
                .map(|s| s["metadata"]["team"].clone());
            Box::pin(async move {
                match team {
                    Some(t) if t == json!("blue") => Ok(()),
                    other => Err(format!("server {id}: team is {other:?}")),
                }
            })
        }),
    };
    let failures = run_update_checks(&driver, &fixture, &u).await;
    assert!(failures.is_empty(), "{failures:#?}");
}
