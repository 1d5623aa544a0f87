//! Malformed durations on a MachineDeployment (finding 9) against the real control plane:
//! the controller writes a `ReplicaFailure` condition with reason `InvalidSpec` and a Warning
//! Event naming the field, and creates no MachineSet and no Machine (so no VM is ever
//! created and deleted in a loop). Fixing the field lets the rollout start.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::sets_common;

use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams, Patch, PatchParams};
use mcm_api::{ConditionStatus, MachineDeployment, MachineDeploymentConditionType, MachineSet};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use sets_common::*;
use std::time::Duration;

/// A deployment whose template has `creationTimeout: <value>`.
fn with_creation_timeout(name: &str, value: &str) -> MachineDeployment {
    let mut d = deployment(name, 2, "class-a", rolling(1, 0));
    d.spec.template.spec.configuration.creation_timeout = Some(value.to_string());
    d
}

/// The InvalidSpec ReplicaFailure message of a deployment, once written.
async fn invalid_spec_message(env: &TestEnv, name: &str) -> Option<String> {
    let d = get_deployment(env, name).await?;
    d.status?
        .conditions
        .into_iter()
        .find(|c| {
            c.type_ == MachineDeploymentConditionType::ReplicaFailure
                && c.status == ConditionStatus::True
                && c.reason == "InvalidSpec"
        })
        .map(|c| c.message)
}

async fn invalid_spec_event_note(env: &TestEnv, name: &str) -> Option<String> {
    env.api::<K8sEvent>()
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some("InvalidSpec")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .and_then(|e| e.note)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_with_creation_timeout_banana_reports_invalid_spec_and_creates_no_machine() {
    let Some(env) = TestEnv::new("md-bad-duration").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let created = [
        WriteWatch::start::<mcm_api::MachineSet>(&env).await,
        WriteWatch::start::<mcm_api::Machine>(&env).await,
    ];
    let cases = [
        ("banana", "banana", "must be a duration"),
        ("negative", "-5m", "must not be negative"),
        ("zero", "0s", "must be greater than zero"),
    ];
    for (name, value, _) in cases {
        create_deployment(&env, &with_creation_timeout(name, value)).await;
    }
    for (name, value, detail) in cases {
        let field = format!("spec.template.spec.creationTimeout: Invalid value: \"{value}\"");
        let message = must_eventually(WAIT, &format!("{name}: ReplicaFailure/InvalidSpec"), || {
            invalid_spec_message(&env, name)
        })
        .await;
        assert!(
            message.contains(&field) && message.contains(detail),
            "{name}: {message}"
        );
        let note = must_eventually(WAIT, &format!("{name}: InvalidSpec Warning Event"), || {
            invalid_spec_event_note(&env, name)
        })
        .await;
        assert!(note.contains(&field), "{name}: {note}");
    }
    // Watched from before the deployments existed until more than a resync
    // period after they were found invalid: nothing was created.
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let writes: Vec<String> = created.into_iter().flat_map(|w| w.finish()).collect();
    assert!(
        writes.is_empty(),
        "no MachineSet, no Machine for an invalid deployment: {writes:?}"
    );

    // Fixing the field lets the deployment roll out.
    env.api::<MachineDeployment>()
        .patch(
            "banana",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": {"spec": {"creationTimeout": "20m"}}}})),
        )
        .await
        .expect("fix the deployment");
    must_eventually(
        WAIT,
        "a MachineSet with 2 machines after the fix",
        || async {
            let sets: Api<MachineSet> = env.api();
            let sets = sets.list(&ListParams::default()).await.ok()?.items;
            (sets.len() == 1 && machines(&env).await.len() == 2).then_some(())
        },
    )
    .await;

    // Broken again while it has a finalizer and machines: reported, and its deletion
    // still completes (a bad timeout never keeps a deployment or its sets alive).
    env.api::<MachineDeployment>()
        .patch(
            "banana",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": {"spec": {"creationTimeout": "banana"}}}})),
        )
        .await
        .expect("break the deployment");
    must_eventually(WAIT, "InvalidSpec again", || {
        invalid_spec_message(&env, "banana")
    })
    .await;
    env.api::<MachineDeployment>()
        .delete("banana", &Default::default())
        .await
        .expect("delete the deployment");
    must_eventually(
        WAIT,
        "the deployment, its set and machines gone",
        || async {
            let gone = get_deployment(&env, "banana").await.is_none()
                && sets_of(&env).await.is_empty()
                && machines(&env).await.is_empty();
            gone.then_some(())
        },
    )
    .await;
    controllers.stop().await;
}

// ---- Label keys the controllers own (issue 22, finding 1) ------------------------------

/// The InvalidSpec ReplicaFailure message of a MachineSet, once written.
async fn set_invalid_spec_message(env: &TestEnv, name: &str) -> Option<String> {
    let s = env.api::<MachineSet>().get_opt(name).await.ok()??;
    s.status?
        .conditions
        .into_iter()
        .find(|c| {
            c.type_ == mcm_api::MachineSetConditionType::ReplicaFailure
                && c.status == ConditionStatus::True
                && c.reason == "InvalidSpec"
        })
        .map(|c| c.message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_set_selecting_on_the_node_label_creates_no_machine_and_names_the_key() {
    // Tried as a new user would: `node: pool-a` in selector and template made
    // 82 Machines in 40 s, because the machine controller writes the real Node
    // name into `node` right after CreateMachine.
    let Some(env) = TestEnv::new("ms-node-label").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let created = WriteWatch::start::<mcm_api::Machine>(&env).await;
    let set: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "pool-a"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"node": "pool-a"}},
            "template": {
                "metadata": {"labels": {"node": "pool-a"}},
                "spec": {"class": {"kind": "MachineClass", "name": "class-a"}}
            }
        }
    }))
    .unwrap();
    env.api::<MachineSet>()
        .create(&Default::default(), &set)
        .await
        .expect("the API server takes the set");
    let field = "spec.selector.matchLabels[node]: Invalid value: \"node\"";
    let message = must_eventually(WAIT, "ReplicaFailure/InvalidSpec", || {
        set_invalid_spec_message(&env, "pool-a")
    })
    .await;
    assert!(
        message.contains(field) && message.contains("spec.template.metadata.labels[node]"),
        "{message}"
    );
    let note = must_eventually(WAIT, "InvalidSpec Warning Event", || {
        invalid_spec_event_note(&env, "pool-a")
    })
    .await;
    assert!(note.contains(field), "{note}");
    // Watched from before the set existed until more than a resync period
    // after it was found invalid.
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let writes = created.finish();
    assert!(writes.is_empty(), "no Machine for the set: {writes:?}");
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_with_does_not_exist_on_the_template_hash_creates_no_set_and_names_the_key() {
    // Every set a deployment creates carries `machine-template-hash`: its own
    // selector would release each one and the deployment create another.
    let Some(env) = TestEnv::new("md-hash-dne").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    let created = [
        WriteWatch::start::<mcm_api::MachineSet>(&env).await,
        WriteWatch::start::<mcm_api::Machine>(&env).await,
    ];
    let mut d = deployment("no-hash", 2, "class-a", rolling(1, 0));
    if let Some(sel) = d.spec.selector.as_mut() {
        sel.match_expressions = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: "machine-template-hash".into(),
                operator: "DoesNotExist".into(),
                values: None,
            },
        ]);
    }
    create_deployment(&env, &d).await;
    let field = "spec.selector.matchExpressions[0].key: Invalid value: \"machine-template-hash\"";
    let message = must_eventually(WAIT, "ReplicaFailure/InvalidSpec", || {
        invalid_spec_message(&env, "no-hash")
    })
    .await;
    assert!(message.contains(field), "{message}");
    let note = must_eventually(WAIT, "InvalidSpec Warning Event", || {
        invalid_spec_event_note(&env, "no-hash")
    })
    .await;
    assert!(note.contains(field), "{note}");
    tokio::time::sleep(SHORT_RESYNC * 2 + Duration::from_millis(500)).await;
    let writes: Vec<String> = created.into_iter().flat_map(|w| w.finish()).collect();
    assert!(
        writes.is_empty(),
        "no MachineSet, no Machine for the deployment: {writes:?}"
    );
    controllers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_that_stopped_matching_on_a_controller_written_label_is_kept_not_replaced() {
    // Defence in depth, independent of validation: a controller rewrites a
    // label the set's selector uses (here `machine-template-hash`, which the
    // deployment's sets select on and an in-place move rewrites). The set
    // keeps and counts its machine: no release, no replacement.
    let Some(env) = TestEnv::new("ms-kept").await else {
        return;
    };
    let controllers = start(&env, config_short_resync());
    create_deployment(&env, &deployment("kept", 2, "class-a", rolling(1, 0))).await;
    let names = must_eventually(WAIT, "2 machines of one set", || async {
        let ms = machines(&env).await;
        let owned = ms.iter().filter(|m| owner(m).is_some()).count();
        (ms.len() == 2 && owned == 2 && sets_of(&env).await.len() == 1).then(|| {
            ms.iter()
                .map(|m| m.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        })
    })
    .await;
    let set = sets_of(&env).await.remove(0);
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let created = WriteWatch::start::<mcm_api::Machine>(&env).await;
    env.api::<mcm_api::Machine>()
        .patch(
            &names[0],
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"machine-template-hash": "rewritten"}}})),
        )
        .await
        .expect("rewrite the label");
    // For more than two resync periods, the machine keeps its controller.
    let kept = holds_throughout::<mcm_api::Machine>(
        &env,
        &names[0],
        SHORT_RESYNC * 2 + Duration::from_millis(500),
        |m| owner(m).as_deref() == Some(set_name.as_str()),
    )
    .await;
    let writes = created.finish();
    let creations: Vec<&String> = writes.iter().filter(|w| w.ends_with(" created")).collect();
    assert!(creations.is_empty(), "no replacement machine: {writes:?}");
    kept.unwrap_or_else(|e| panic!("the machine stays the set's: {e}"));
    assert_eq!(live(&machines(&env).await).len(), 2);
    controllers.stop().await;
}
