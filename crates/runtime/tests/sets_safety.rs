//! The overshoot safety loop against the real control plane: machines beyond
//! the limit freeze their MachineSet (and its MachineDeployment) until the
//! count falls or the unfreeze annotation is set.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::sets_common;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineDeployment, MachineSet, MachineSetConditionType};
use mcm_runtime::sets::SetsConfig;
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use sets_common::*;
use std::time::Duration;

fn set_frozen(s: &MachineSet) -> (bool, bool) {
    let label = s.labels().get(c::FREEZE_LABEL).map(String::as_str) == Some(c::FREEZE_LABEL_VALUE);
    let cond = s.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|c| c.type_ == MachineSetConditionType::Frozen)
    });
    (label, cond)
}

fn deployment_frozen(d: &MachineDeployment) -> bool {
    d.labels().get(c::FREEZE_LABEL).map(String::as_str) == Some(c::FREEZE_LABEL_VALUE)
}

async fn only_set(env: &TestEnv) -> MachineSet {
    must_eventually(WAIT, "exactly one MachineSet", || async {
        let sets = sets_of(env).await;
        (sets.len() == 1).then(|| sets.into_iter().next()).flatten()
    })
    .await
}

async fn wait_frozen(env: &TestEnv, set: &str, deployment: &str, frozen: bool) {
    let what = format!("{set} and {deployment} frozen={frozen}");
    must_eventually(WAIT, &what, || async {
        let s = env.api::<MachineSet>().get_opt(set).await.ok()??;
        let d = get_deployment(env, deployment).await?;
        (set_frozen(&s) == (frozen, frozen) && deployment_frozen(&d) == frozen).then_some(())
    })
    .await;
}

/// Creates `n` machines with the set's template labels, controlled by a
/// ConfigMap named like the set: counted by the safety loop, not claimable by
/// the set.
async fn machines_behind_the_back(env: &TestEnv, set: &MachineSet, n: usize) -> Vec<String> {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": set.name_any()}})).unwrap_or_default();
    let cms = env.api::<ConfigMap>();
    let cm = match cms.create(&PostParams::default(), &cm).await {
        Ok(cm) => cm,
        Err(_) => cms
            .get(&set.name_any())
            .await
            .unwrap_or_else(|e| panic!("configmap: {e}")),
    };
    let labels = set
        .spec
        .template
        .metadata
        .labels
        .clone()
        .unwrap_or_default();
    let mut names = Vec::new();
    for i in 0..n {
        let m: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {
                "name": format!("intruder-{i}"),
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": set.name_any(),
                    "uid": cm.uid().unwrap_or_default(), "controller": true
                }]
            },
            "spec": {"class": {"kind": "MachineClass", "name": "class-v1"}}
        }))
        .unwrap_or_default();
        let created = env
            .api::<Machine>()
            .create(&PostParams::default(), &m)
            .await
            .unwrap_or_else(|e| panic!("create intruder: {e}"));
        names.push(created.name_any());
    }
    names
}

/// Live machines controlled by the MachineSet `set` (not by the ConfigMap of the same name).
fn owned_by<'a>(ms: &'a [Machine], set: &str) -> Vec<&'a Machine> {
    live(ms)
        .into_iter()
        .filter(|m| {
            m.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.kind == "MachineSet" && o.name == set)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_created_behind_the_controllers_back_freeze_the_set_until_they_are_gone() {
    let Some(env) = TestEnv::new("safety-overshoot").await else {
        return;
    };
    // replicas 2 + maxSurge 1 + safetyUp 2 = 5 freezes; 5 - 3 = 2 unfreezes.
    let controllers = start(
        &env,
        SetsConfig {
            safety_down: 3,
            ..config_short_resync()
        },
    );
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_deployment(&env, &deployment("safe", 2, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "safe", 2, "class-v1").await;
    let set = only_set(&env).await;
    let set_name = set.name_any();
    let intruders = machines_behind_the_back(&env, &set, 3).await;
    wait_frozen(&env, &set_name, "safe", true).await;
    assert_eq!(
        event_count_reaching(&env, c::MACHINE_SET_FREEZE_EVENT, 1).await,
        1
    );

    // Frozen: a scale-up raises the set's replicas but creates nothing
    // (limit now 6, unfreeze at 3; the count is 5). Every Machine write is
    // watched from before the scale-up until more than a resync period
    // after the set asked for 3.
    let writes = WriteWatch::start::<Machine>(&env).await;
    patch_deployment(&env, "safe", json!({"spec": {"replicas": 3}})).await;
    must_eventually(WAIT, "the set asks for 3 machines", || async {
        let s = env.api::<MachineSet>().get_opt(&set_name).await.ok()??;
        (s.spec.replicas == 3).then_some(())
    })
    .await;
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let created: Vec<String> = writes
        .finish()
        .into_iter()
        .filter(|w| w.ends_with(" created"))
        .collect();
    assert!(
        created.is_empty(),
        "a frozen set created a machine: {created:?}"
    );
    assert_eq!(owned_by(&machines(&env).await, &set_name).len(), 2);
    let s = env
        .api::<MachineSet>()
        .get_opt(&set_name)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    assert_eq!(set_frozen(&s), (true, true));

    for n in &intruders {
        delete_machine(&env, n).await;
    }
    wait_frozen(&env, &set_name, "safe", false).await;
    wait_settled(&env, "safe", 3, "class-v1").await;
    assert_eq!(
        event_count_reaching(&env, c::MACHINE_SET_UNFREEZE_EVENT, 1).await,
        1
    );
    assert_eq!(
        event_count_reaching(&env, c::MACHINE_SET_FREEZE_EVENT, 1).await,
        1
    );
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfreeze_annotation_unfreezes_a_frozen_deployment_and_its_set() {
    let Some(env) = TestEnv::new("safety-annotation").await else {
        return;
    };
    // Freeze at 5 machines, never unfreeze by count (5 - 10 < 0).
    let controllers = start(
        &env,
        SetsConfig {
            safety_down: 10,
            ..config_short_resync()
        },
    );
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_deployment(&env, &deployment("ann", 2, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "ann", 2, "class-v1").await;
    let set = only_set(&env).await;
    let set_name = set.name_any();
    let intruders = machines_behind_the_back(&env, &set, 3).await;
    wait_frozen(&env, &set_name, "ann", true).await;
    // Below the limit again, but still frozen: only the annotation helps.
    if let Some(first) = intruders.first() {
        delete_machine(&env, first).await;
    }
    // Every state of the set for more than a resync period stays frozen.
    let still = holds_throughout::<MachineSet>(
        &env,
        &set_name,
        SHORT_RESYNC * 2 + Duration::from_millis(500),
        |s| set_frozen(s) == (true, true),
    )
    .await;
    assert_eq!(still, Ok(()), "below the limit the set stays frozen");

    env.api::<MachineDeployment>()
        .patch(
            "ann",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {c::UNFREEZE_ANNOTATION: "True"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate: {e}"));
    wait_frozen(&env, &set_name, "ann", false).await;
    must_eventually(WAIT, "the unfreeze annotation is consumed", || async {
        let d = get_deployment(&env, "ann").await?;
        (!d.annotations().contains_key(c::UNFREEZE_ANNOTATION)).then_some(())
    })
    .await;
    let stays = holds_throughout::<MachineSet>(
        &env,
        &set_name,
        SHORT_RESYNC * 2 + Duration::from_millis(500),
        |s| set_frozen(s) == (false, false),
    )
    .await;
    assert_eq!(stays, Ok(()), "stays unfrozen below the limit");
    fake.stop().await;
    controllers.stop().await;
}

/// A MachineSet's own unfreeze annotation wakes the overshoot pass: with a
/// ten-minute period, the set is unfrozen within half a minute. The set has
/// no deployment, whose writes would wake the pass too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sets_unfreeze_annotation_is_acted_on_long_before_the_overshoot_period() {
    let Some(env) = TestEnv::new("safety-set-annotation").await else {
        return;
    };
    // 2 replicas without a deployment: 2 × 2 + safetyUp 2 = 6 freezes;
    // never unfrozen by count (6 - 10 < 0). Passes run only when woken: the
    // period, and the resync, are far beyond the test.
    let controllers = start(
        &env,
        SetsConfig {
            safety_down: 10,
            overshooting_period: Duration::from_secs(600),
            resync_period: Duration::from_secs(600),
            ..config()
        },
    );
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    let set: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "bare"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"set": "bare"}},
            "template": {
                "metadata": {"labels": {"set": "bare"}},
                "spec": {"class": {"kind": "MachineClass", "name": "class-v1"}}
            }
        }
    }))
    .unwrap_or_default();
    let set = env
        .api::<MachineSet>()
        .create(&PostParams::default(), &set)
        .await
        .unwrap_or_else(|e| panic!("create set: {e}"));
    must_eventually(WAIT, "the set's 2 machines run", || async {
        (running(&machines(&env).await) == 2).then_some(())
    })
    .await;
    // Machine changes wake the pass: the set freezes.
    let intruders = machines_behind_the_back(&env, &set, 4).await;
    let frozen = |want: bool| {
        let env = &env;
        async move {
            must_eventually(WAIT, &format!("the set frozen={want}"), || async {
                let s = env.api::<MachineSet>().get_opt("bare").await.ok()??;
                (set_frozen(&s) == (want, want)).then_some(())
            })
            .await;
        }
    };
    frozen(true).await;
    // Below the limit again (5 < 6), still frozen; nothing else moves.
    if let Some(first) = intruders.first() {
        delete_machine(&env, first).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    frozen(true).await;

    env.api::<MachineSet>()
        .patch(
            "bare",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {c::UNFREEZE_ANNOTATION: "True"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate: {e}"));
    must_eventually(
        Duration::from_secs(30),
        "the set is unfrozen and its annotation consumed",
        || async {
            let s = env.api::<MachineSet>().get_opt("bare").await.ok()??;
            (set_frozen(&s) == (false, false)
                && !s.annotations().contains_key(c::UNFREEZE_ANNOTATION))
            .then_some(())
        },
    )
    .await;
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_with_lingering_terminating_machines_freezes_once_and_unfreezes_once() {
    let Some(env) = TestEnv::new("safety-linger").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    // The reference's integration scenario: 6 → 2 with maxSurge 2 while the
    // deleted machines linger (here: a finalizer nobody removes).
    let mut d = deployment("linger", 6, "class-v1", rolling(2, 1));
    d.spec.template.metadata.finalizers = Some(vec!["test.mcm-rs/hold".into()]);
    create_deployment(&env, &d).await;
    must_eventually(WAIT, "6 running machines", || async {
        let ms = machines(&env).await;
        (ms.len() == 6 && running(&ms) == 6).then_some(())
    })
    .await;
    let set_name = only_set(&env).await.name_any();
    patch_deployment(&env, "linger", json!({"spec": {"replicas": 2}})).await;
    // 2 + 2 + safetyUp 2 = 6 machines still exist: frozen.
    wait_frozen(&env, &set_name, "linger", true).await;
    let ms = machines(&env).await;
    assert_eq!(ms.len(), 6);
    assert_eq!(live(&ms).len(), 2, "4 machines are terminating");
    for m in ms
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
    {
        drop_finalizers(&env, &m.name_any()).await;
    }
    wait_frozen(&env, &set_name, "linger", false).await;
    must_eventually(WAIT, "2 machines left", || async {
        let ms = machines(&env).await;
        (ms.len() == 2).then_some(())
    })
    .await;
    assert_eq!(
        event_count_reaching(&env, c::MACHINE_SET_FREEZE_EVENT, 1).await,
        1
    );
    assert_eq!(
        event_count_reaching(&env, c::MACHINE_SET_UNFREEZE_EVENT, 1).await,
        1
    );
    for m in machines(&env).await {
        drop_finalizers(&env, &m.name_any()).await;
    }
    fake.stop().await;
    controllers.stop().await;
}
