//! The MachineSet controller against the real control plane. The tests play
//! the machine controller by writing Machine phases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::sets_common;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineSet};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use sets_common::*;
use std::time::Duration;

fn machine_set(name: &str, replicas: i32) -> MachineSet {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"set": name}},
            "template": {
                "metadata": {"labels": {"set": name, "extra": "x"}, "annotations": {"team": "a"}},
                "spec": {"class": {"kind": "MachineClass", "name": "class-v1"}}
            }
        }
    }))
    .unwrap_or_default()
}

async fn create_set(env: &TestEnv, ms: &MachineSet) {
    env.api::<MachineSet>()
        .create(&PostParams::default(), ms)
        .await
        .unwrap_or_else(|e| panic!("create set: {e}"));
}

async fn scale_set(env: &TestEnv, name: &str, replicas: i32) {
    env.api::<MachineSet>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scale set: {e}"));
}

/// Waits for `n` live Running machines owned by `set`, and a matching status.
async fn wait_running(env: &TestEnv, set: &str, n: usize) -> Vec<Machine> {
    let what = format!("{n} running machines owned by {set}");
    must_eventually(WAIT, &what, || async {
        let ms = machines(env).await;
        let owned: Vec<Machine> = ms
            .iter()
            .filter(|m| owner(m).as_deref() == Some(set))
            .cloned()
            .collect();
        let s = env.api::<MachineSet>().get_opt(set).await.ok()??;
        let st = s.status.clone().unwrap_or_default();
        let ok = owned.len() == n
            && running(&owned) == n
            && usize::try_from(st.available_replicas).ok() == Some(n)
            && usize::try_from(st.replicas).ok() == Some(n);
        ok.then_some(owned)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machineset_creates_machines_from_its_template_and_scales_down() {
    let Some(env) = TestEnv::new("ms-basic").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_set(&env, &machine_set("basic", 3)).await;
    let ms = wait_running(&env, "basic", 3).await;
    for m in &ms {
        assert!(
            m.name_any().starts_with("basic-"),
            "generateName <set>-: {}",
            m.name_any()
        );
        assert_eq!(m.labels().get("extra").map(String::as_str), Some("x"));
        assert_eq!(m.annotations().get("team").map(String::as_str), Some("a"));
        assert_eq!(m.spec.class.name, "class-v1");
    }
    let set = env
        .api::<MachineSet>()
        .get_opt("basic")
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    assert!(set.finalizers().iter().any(|f| f == c::MCM_FINALIZER));
    let st = set.status.clone().unwrap_or_default();
    assert_eq!((st.fully_labeled_replicas, st.ready_replicas), (3, 3));
    assert_eq!(st.observed_generation, set.metadata.generation.unwrap_or(0));

    scale_set(&env, "basic", 1).await;
    wait_running(&env, "basic", 1).await;
    // Exactly one machine on every event for more than a resync period.
    let settled = MachineWatch::start(&env).await;
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    for (i, st) in settled.finish().iter().enumerate() {
        assert_eq!(st.live, 1, "after scaling to 1, event {i}: {st:?}");
    }
    assert_eq!(machines(&env).await.len(), 1);
    assert_eq!(event_count_reaching(&env, "SuccessfulCreate", 3).await, 3);
    assert_eq!(event_count_reaching(&env, "SuccessfulDelete", 2).await, 2);
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_annotation_picks_the_machine_removed_on_scale_down() {
    let Some(env) = TestEnv::new("ms-priority").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_set(&env, &machine_set("prio", 3)).await;
    let ms = wait_running(&env, "prio", 3).await;
    // The oldest-first and phase rules would not pick this one by themselves: pick the newest.
    let mut names: Vec<(String, String)> = ms
        .iter()
        .map(|m| {
            (
                m.creation_timestamp()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
                m.name_any(),
            )
        })
        .collect();
    names.sort();
    let victim = names.last().map(|n| n.1.clone()).unwrap_or_default();
    env.api::<Machine>()
        .patch(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {c::PRIORITY_ANNOTATION: "1"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate: {e}"));
    // Let the cache see the annotation before the scale-down.
    must_eventually(WAIT, "annotation visible", || async {
        let m = env.api::<Machine>().get_opt(&victim).await.ok()??;
        m.annotations()
            .contains_key(c::PRIORITY_ANNOTATION)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    scale_set(&env, "prio", 2).await;
    let left = wait_running(&env, "prio", 2).await;
    let left: Vec<String> = left.iter().map(|m| m.name_any()).collect();
    assert!(
        !left.contains(&victim),
        "priority-1 machine {victim} should be gone, left: {left:?}"
    );
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_machine_is_replaced() {
    let Some(env) = TestEnv::new("ms-failed").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_set(&env, &machine_set("fail", 2)).await;
    let ms = wait_running(&env, "fail", 2).await;
    let broken = ms.first().map(|m| m.name_any()).unwrap_or_default();
    set_phase(&env.api(), &broken, "Failed")
        .await
        .unwrap_or_else(|e| panic!("fail machine: {e}"));
    must_eventually(WAIT, "failed machine deleted and replaced", || async {
        let ms = machines(&env).await;
        let names: Vec<String> = ms.iter().map(|m| m.name_any()).collect();
        (!names.contains(&broken) && running(&ms) == 2 && ms.len() == 2).then_some(())
    })
    .await;
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relabelled_machine_is_released_and_replaced() {
    let Some(env) = TestEnv::new("ms-release").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_set(&env, &machine_set("rel", 2)).await;
    let ms = wait_running(&env, "rel", 2).await;
    let moved = ms.first().map(|m| m.name_any()).unwrap_or_default();
    env.api::<Machine>()
        .patch(
            &moved,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"set": "elsewhere"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("relabel: {e}"));
    must_eventually(WAIT, "released machine has no owner any more", || async {
        let m = env.api::<Machine>().get_opt(&moved).await.ok()??;
        m.metadata
            .owner_references
            .as_ref()
            .is_none_or(|o| o.is_empty())
            .then_some(())
    })
    .await;
    wait_running(&env, "rel", 2).await;
    assert_eq!(
        machines(&env).await.len(),
        3,
        "the released machine stays, a replacement was created"
    );
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_orphan_is_adopted_instead_of_creating_a_machine() {
    let Some(env) = TestEnv::new("ms-adopt").await else {
        return;
    };
    let orphan: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "orphan", "labels": {"set": "adopt"}},
        "spec": {"class": {"kind": "MachineClass", "name": "class-v1"}}
    }))
    .unwrap_or_default();
    env.api::<Machine>()
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap_or_else(|e| panic!("create orphan: {e}"));
    let controllers = start(&env, config_short_resync());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    let writes = WriteWatch::start::<Machine>(&env).await;
    create_set(&env, &machine_set("adopt", 1)).await;
    let ms = wait_running(&env, "adopt", 1).await;
    assert_eq!(ms.first().map(|m| m.name_any()).as_deref(), Some("orphan"));
    // Watched from before the set existed until more than a resync period
    // after the adoption: the orphan is written (adopted, Running), nothing
    // is created.
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let created: Vec<String> = writes
        .finish()
        .into_iter()
        .filter(|w| w.ends_with(" created"))
        .collect();
    assert!(
        created.is_empty(),
        "no machine created next to the adopted one: {created:?}"
    );
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_machineset_deletes_its_machines_then_itself() {
    let Some(env) = TestEnv::new("ms-delete").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_set(&env, &machine_set("del", 2)).await;
    wait_running(&env, "del", 2).await;
    env.api::<MachineSet>()
        .delete("del", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete set: {e}"));
    must_eventually(WAIT, "machines and set gone", || async {
        let set = env.api::<MachineSet>().get_opt("del").await.ok()?;
        (set.is_none() && machines(&env).await.is_empty()).then_some(())
    })
    .await;
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_machineset_is_reported_and_left_alone() {
    let Some(env) = TestEnv::new("ms-invalid").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let created = WriteWatch::start::<Machine>(&env).await;
    let mut bad = machine_set("bad", 2);
    // The selector does not match the template labels.
    bad.spec.selector = serde_json::from_value(json!({"matchLabels": {"set": "other"}})).ok();
    create_set(&env, &bad).await;
    must_eventually(WAIT, "an InvalidSpec warning", || async {
        (event_count(&env, "InvalidSpec").await >= 1).then_some(())
    })
    .await;
    // Watched from before the set existed until more than a resync period
    // after it was reported.
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let writes = created.finish();
    assert!(
        writes.is_empty(),
        "no machine for an invalid set: {writes:?}"
    );
    let set = env
        .api::<MachineSet>()
        .get_opt("bad")
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    assert!(set.finalizers().is_empty(), "an invalid set is not touched");
    controllers.stop().await;
}

/// The runaway-creation finding: a selector value `""` for a label the template
/// lacks used to pass validation but never select the set's own machines, so
/// every sync created more Machines (and VMs) and released them at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machineset_whose_selector_does_not_select_its_template_creates_no_machine() {
    let Some(env) = TestEnv::new("ms-runaway").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let created = WriteWatch::start::<Machine>(&env).await;
    let mut bad = machine_set("runaway", 2);
    bad.spec.selector =
        serde_json::from_value(json!({"matchLabels": {"set": "runaway", "x": ""}})).ok();
    create_set(&env, &bad).await;
    let condition = must_eventually(WAIT, "an InvalidSpec ReplicaFailure condition", || async {
        let set = env.api::<MachineSet>().get_opt("runaway").await.ok()??;
        set.status?
            .conditions
            .into_iter()
            .find(|c| c.reason == "InvalidSpec")
    })
    .await;
    assert!(
        condition.message.contains("spec.selector.matchLabels"),
        "the condition names the field: {}",
        condition.message
    );
    assert!(
        event_count(&env, "InvalidSpec").await >= 1,
        "an InvalidSpec Event"
    );
    // Watched from before the set existed until more than a resync period
    // after it was found invalid: not one Machine written.
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let writes = created.finish();
    assert!(
        writes.is_empty(),
        "a set whose selector does not select its template must create no Machine: {writes:?}"
    );
    controllers.stop().await;
}
