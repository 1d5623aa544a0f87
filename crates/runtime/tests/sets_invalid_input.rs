//! Malformed durations on a MachineDeployment (finding 9) against the real control plane:
//! the controller writes a `ReplicaFailure` condition with reason `InvalidSpec` and a Warning
//! Event naming the field, and creates no MachineSet and no Machine (so no VM is ever
//! created and deleted in a loop). Fixing the field lets the rollout start.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

mod sets_common;

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
