//! The MachineDeployment controller (with the MachineSet controller under it)
//! against the real control plane. The tests play the machine controller by
//! writing Machine phases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::sets_common;

use chrono::{SecondsFormat, Utc};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{MachineDeployment, MachineDeploymentConditionType};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use sets_common::*;
use std::time::Duration;

fn conditions(d: &MachineDeployment) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = d
        .status
        .clone()
        .unwrap_or_default()
        .conditions
        .into_iter()
        .map(|c| (c.type_.to_string(), c.status.to_string(), c.reason))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_scales_0_1_6_2_with_exact_machine_counts() {
    let Some(env) = TestEnv::new("sets-scale").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_deployment(&env, &deployment("pool", 0, "class-v1", rolling(2, 1))).await;
    must_eventually(WAIT, "one MachineSet for 0 replicas", || async {
        (sets_of(&env).await.len() == 1).then_some(())
    })
    .await;
    wait_settled(&env, "pool", 0, "class-v1").await;
    let mut previous = 0usize;
    for target in [1usize, 6, 2] {
        let scaling = MachineWatch::start(&env).await;
        if target == 2 {
            // The way `kubectl scale mcd` does it: through the scale subresource.
            env.api::<MachineDeployment>()
                .patch_scale(
                    "pool",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"replicas": target}})),
                )
                .await
                .unwrap_or_else(|e| panic!("scale subresource: {e}"));
        } else {
            patch_deployment(&env, "pool", json!({"spec": {"replicas": target}})).await;
        }
        wait_settled(&env, "pool", target, "class-v1").await;
        // No overshoot: on every Machine event of the scaling, at most the
        // larger of the old and the new count.
        for (i, st) in scaling.finish().iter().enumerate() {
            assert!(
                st.live <= previous.max(target),
                "scaling {previous} -> {target}, event {i}: {} machines",
                st.live
            );
        }
        // No late extra (or missing) machine: exactly `target` on every
        // event for more than a resync period after settling.
        let settled = MachineWatch::start(&env).await;
        tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
        for (i, st) in settled.finish().iter().enumerate() {
            assert_eq!(
                st.live, target,
                "after scaling to {target}, event {i}: {st:?}"
            );
        }
        previous = target;
        if target == 1 {
            let want: Vec<(String, String, String)> = vec![
                (
                    "Available".into(),
                    "True".into(),
                    c::MINIMUM_REPLICAS_AVAILABLE.into(),
                ),
                (
                    "Progressing".into(),
                    "True".into(),
                    c::NEW_MACHINE_SET_AVAILABLE_REASON.into(),
                ),
            ];
            must_eventually(
                WAIT,
                "exactly Available and Progressing conditions",
                || async {
                    let d = get_deployment(&env, "pool").await?;
                    (conditions(&d) == want).then_some(())
                },
            )
            .await;
        }
    }
    assert_eq!(
        sets_of(&env).await.len(),
        1,
        "scaling never creates another MachineSet"
    );
    let scale = env
        .api::<MachineDeployment>()
        .get_scale("pool")
        .await
        .unwrap_or_else(|e| panic!("get scale: {e}"));
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(scale.status.map(|s| s.replicas), Some(2));
    let d = get_deployment(&env, "pool").await.unwrap_or_default();
    assert!(d.finalizers().iter().any(|f| f == c::MCM_FINALIZER));
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_with_max_surge_one_keeps_every_desired_machine_available() {
    let Some(env) = TestEnv::new("sets-rolling").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::from_millis(300));
    create_deployment(&env, &deployment("roll", 3, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "roll", 3, "class-v1").await;

    let watch = MachineWatch::start(&env).await;
    patch_deployment(
        &env,
        "roll",
        json!({"spec": {"template": {"spec": {"class": {"name": "class-v2"}}}}}),
    )
    .await;
    wait_settled(&env, "roll", 3, "class-v2").await;
    // The state after every Machine event of the rollout: replicas 3,
    // maxSurge 1, maxUnavailable 0.
    let states = watch.finish();
    assert!(
        states.iter().any(|s| s.classes.len() > 1),
        "old and new machines coexisted during the rollout: {states:?}"
    );
    for (i, s) in states.iter().enumerate() {
        assert!(
            s.live <= 3 + 1,
            "event {i}: {} machines at once, more than replicas + maxSurge: {s:?}",
            s.live
        );
        assert!(
            s.running >= 3,
            "event {i}: available machines dropped to {}, fewer than replicas - maxUnavailable: {s:?}",
            s.running
        );
    }

    let sets = sets_of(&env).await;
    assert_eq!(sets.len(), 2, "the old MachineSet is kept for rollback");
    let old = sets
        .iter()
        .find(|s| s.spec.template.spec.class.name == "class-v1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(old.spec.replicas, 0);
    let new = sets
        .iter()
        .find(|s| s.spec.template.spec.class.name == "class-v2")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        new.annotations()
            .get(c::REVISION_ANNOTATION)
            .map(String::as_str),
        Some("2")
    );
    let d = get_deployment(&env, "roll").await.unwrap_or_default();
    assert_eq!(
        d.annotations()
            .get(c::REVISION_ANNOTATION)
            .map(String::as_str),
        Some("2")
    );
    let progressing = d
        .status
        .clone()
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == MachineDeploymentConditionType::Progressing)
        .map(|c| c.reason);
    assert_eq!(
        progressing.as_deref(),
        Some(c::NEW_MACHINE_SET_AVAILABLE_REASON)
    );
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_removes_every_old_machine_before_creating_new_ones() {
    let Some(env) = TestEnv::new("sets-recreate").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::from_millis(100));
    create_deployment(
        &env,
        &deployment("rec", 2, "class-v1", json!({"type": "Recreate"})),
    )
    .await;
    wait_settled(&env, "rec", 2, "class-v1").await;

    let watch = MachineWatch::start(&env).await;
    patch_deployment(
        &env,
        "rec",
        json!({"spec": {"template": {"spec": {"class": {"name": "class-v2"}}}}}),
    )
    .await;
    wait_settled(&env, "rec", 2, "class-v2").await;
    // The state after every Machine event of the Recreate.
    let states = watch.finish();
    assert!(
        states.iter().any(|s| s.live == 0),
        "every old machine was gone at one point: {states:?}"
    );
    for (i, s) in states.iter().enumerate() {
        assert!(
            s.classes.len() <= 1,
            "event {i}: old and new machines existed at the same time: {s:?}"
        );
        assert!(
            s.live <= 2,
            "event {i}: {} machines at once during a Recreate",
            s.live
        );
    }
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_an_earlier_revision_restores_its_template_and_set() {
    let Some(env) = TestEnv::new("sets-rollback").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::from_millis(100));
    create_deployment(&env, &deployment("rb", 2, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "rb", 2, "class-v1").await;
    let first_set = sets_of(&env)
        .await
        .first()
        .map(|s| s.name_any())
        .unwrap_or_default();
    patch_deployment(
        &env,
        "rb",
        json!({"spec": {"template": {"spec": {"class": {"name": "class-v2"}}}}}),
    )
    .await;
    wait_settled(&env, "rb", 2, "class-v2").await;

    patch_deployment(&env, "rb", json!({"spec": {"rollbackTo": {"revision": 1}}})).await;
    must_eventually(
        WAIT,
        "template back to class-v1 and rollbackTo cleared",
        || async {
            let d = get_deployment(&env, "rb").await?;
            (d.spec.template.spec.class.name == "class-v1" && d.spec.rollback_to.is_none())
                .then_some(())
        },
    )
    .await;
    wait_settled(&env, "rb", 2, "class-v1").await;
    let sets = sets_of(&env).await;
    assert_eq!(sets.len(), 2, "the revision-1 set is reused, no third set");
    let reused = sets
        .iter()
        .find(|s| s.name_any() == first_set)
        .cloned()
        .unwrap_or_default();
    assert_eq!(reused.spec.replicas, 2);
    must_eventually(
        WAIT,
        "revision 3 with history 1 on the reused set, revision 3 on the deployment",
        || async {
            let s = env
                .api::<mcm_api::MachineSet>()
                .get_opt(&first_set)
                .await
                .ok()??;
            let d = get_deployment(&env, "rb").await?;
            let ok = s
                .annotations()
                .get(c::REVISION_ANNOTATION)
                .map(String::as_str)
                == Some("3")
                && s.annotations()
                    .get(c::REVISION_HISTORY_ANNOTATION)
                    .map(String::as_str)
                    == Some("1")
                && d.annotations()
                    .get(c::REVISION_ANNOTATION)
                    .map(String::as_str)
                    == Some("3");
            ok.then_some(())
        },
    )
    .await;
    assert_eq!(event_count_reaching(&env, c::ROLLBACK_DONE, 1).await, 1);
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_template_change_is_pushed_into_machines_without_a_rollout() {
    let Some(env) = TestEnv::new("sets-nodetemplate").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_deployment(&env, &deployment("nt", 2, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "nt", 2, "class-v1").await;
    let mut before: Vec<String> = machines(&env).await.iter().map(|m| m.name_any()).collect();
    before.sort();
    patch_deployment(
        &env,
        "nt",
        json!({"spec": {"template": {"spec": {
            "nodeTemplate": {"metadata": {"labels": {"pool": "blue"}}},
            "drainTimeout": "5m"
        }}}}),
    )
    .await;
    must_eventually(
        WAIT,
        "nodeTemplate and drainTimeout in every machine",
        || async {
            let ms = machines(&env).await;
            let ok = ms.len() == 2
                && ms.iter().all(|m| {
                    m.spec
                        .node_template
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("pool"))
                        .map(String::as_str)
                        == Some("blue")
                        && m.spec.configuration.drain_timeout.as_deref() == Some("5m")
                });
            ok.then_some(())
        },
    )
    .await;
    let mut after: Vec<String> = machines(&env).await.iter().map(|m| m.name_any()).collect();
    after.sort();
    assert_eq!(before, after, "the same machines, updated in place");
    assert_eq!(sets_of(&env).await.len(), 1, "no new MachineSet");
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscaler_marked_machine_is_the_one_removed() {
    let Some(env) = TestEnv::new("sets-autoscaler").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_deployment(&env, &deployment("ca", 3, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "ca", 3, "class-v1").await;
    let victim = machines(&env)
        .await
        .get(1)
        .map(|m| m.name_any())
        .unwrap_or_default();
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    // What the cluster-autoscaler does: name the machine and lower the replicas at once.
    patch_deployment(
        &env,
        "ca",
        json!({
            "metadata": {"annotations": {c::TRIGGER_DELETION_BY_MCM_ANNOTATION: format!("{victim}~{now}")}},
            "spec": {"replicas": 2}
        }),
    )
    .await;
    wait_settled(&env, "ca", 2, "class-v1").await;
    let left: Vec<String> = machines(&env).await.iter().map(|m| m.name_any()).collect();
    assert!(
        !left.contains(&victim),
        "{victim} was marked but {left:?} remain"
    );
    must_eventually(
        WAIT,
        "the trigger annotation dropped once the machine is gone",
        || async {
            let d = get_deployment(&env, "ca").await?;
            (!d.annotations()
                .contains_key(c::TRIGGER_DELETION_BY_MCM_ANNOTATION))
            .then_some(())
        },
    )
    .await;
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_deletes_its_sets_and_machines() {
    let Some(env) = TestEnv::new("sets-mcd-delete").await else {
        return;
    };
    let controllers = start(&env, config());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_deployment(&env, &deployment("gone", 2, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "gone", 2, "class-v1").await;
    env.api::<MachineDeployment>()
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    must_eventually(WAIT, "deployment, sets and machines gone", || async {
        let d = get_deployment(&env, "gone").await;
        let sets = env
            .api::<mcm_api::MachineSet>()
            .list(&ListParams::default())
            .await
            .ok()?;
        (d.is_none() && sets.items.is_empty() && machines(&env).await.is_empty()).then_some(())
    })
    .await;
    fake.stop().await;
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_deployment_causes_no_further_writes() {
    let Some(env) = TestEnv::new("sets-steady").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let fake = FakeMachineController::start(&env, Duration::ZERO);
    create_deployment(&env, &deployment("steady", 3, "class-v1", rolling(1, 0))).await;
    wait_settled(&env, "steady", 3, "class-v1").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let watches = [
        WriteWatch::start::<MachineDeployment>(&env).await,
        WriteWatch::start::<mcm_api::MachineSet>(&env).await,
        WriteWatch::start::<mcm_api::Machine>(&env).await,
    ];
    // Every write for longer than the controllers' (shortened) resync
    // period, so each object went through a periodic reconcile.
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let writes: Vec<String> = watches.into_iter().flat_map(|w| w.finish()).collect();
    assert!(
        writes.is_empty(),
        "a settled deployment must not be rewritten (hot loop): {writes:?}"
    );
    fake.stop().await;
    controllers.stop().await;
}

/// The runaway-creation finding for deployments: a selector that does not
/// select the deployment's own template is rejected before any MachineSet or
/// Machine exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_whose_selector_does_not_select_its_template_creates_nothing() {
    let Some(env) = TestEnv::new("md-runaway").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let created = [
        WriteWatch::start::<mcm_api::MachineSet>(&env).await,
        WriteWatch::start::<mcm_api::Machine>(&env).await,
    ];
    let mut d = deployment("runaway", 2, "class-v1", rolling(1, 0));
    d.spec.selector = serde_json::from_value(json!({"matchLabels": {"test-label": "runaway"},
               "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}))
    .ok();
    create_deployment(&env, &d).await;
    let condition = must_eventually(WAIT, "an InvalidSpec ReplicaFailure condition", || async {
        get_deployment(&env, "runaway")
            .await?
            .status?
            .conditions
            .into_iter()
            .find(|c| c.reason == "InvalidSpec")
    })
    .await;
    assert!(
        condition.message.contains("spec.selector.matchExpressions"),
        "{}",
        condition.message
    );
    // Watched from before the deployment existed until more than a resync
    // period after it was found invalid.
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let writes: Vec<String> = created.into_iter().flat_map(|w| w.finish()).collect();
    assert!(writes.is_empty(), "no MachineSet, no Machine: {writes:?}");
    controllers.stop().await;
}
