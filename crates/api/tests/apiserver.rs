//! Live checks against a real kube-apiserver (the workspace's test control plane, started by
//! `hack/test.sh`). Without a control plane the test skips visibly, except in CI, where it
//! fails (`mcm_testenv::require`).
//!
//! The generated CRDs are installed (server-side apply) and must become Established with a
//! structural schema; the examples are created in a fresh namespace and read back into the
//! typed structs; a Go-style status is written through the status subresource; the scale
//! subresource works; unknown providerSpec fields survive the apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use mcm_api::{
    Machine, MachineClass, MachineDeployment, MachineOperationType, MachinePhase, MachineSet,
    MachineState,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MANAGER: &str = "mcm-api-tests";

async fn install_crds(client: &Client) -> Result<(), BoxError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in mcm_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    for crd in mcm_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut established = false;
        for _ in 0..100 {
            let current = api.get(&name).await?;
            let conditions = current
                .status
                .and_then(|status| status.conditions)
                .unwrap_or_default();
            if let Some(non_structural) = conditions
                .iter()
                .find(|c| c.type_ == "NonStructuralSchema" && c.status == "True")
            {
                return Err(format!(
                    "{name}: non-structural schema: {:?}",
                    non_structural.message
                )
                .into());
            }
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                established = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !established {
            return Err(format!("{name} did not become Established").into());
        }
    }
    Ok(())
}

fn example_documents(file: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            serde_json::to_value(serde_yaml::Value::deserialize(document).unwrap()).unwrap()
        })
        .filter(|value| !value.is_null())
        .collect()
}

/// Creates `document` (namespace replaced) and reads it back; returns (sent, stored) typed.
async fn create_and_get<K>(
    client: &Client,
    namespace: &str,
    document: &Value,
) -> Result<(K, K), BoxError>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Serialize + DeserializeOwned,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let mut document = document.clone();
    document["metadata"]["namespace"] = json!(namespace);
    let object: K = serde_json::from_value(document)?;
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &object).await?;
    let name = object.meta().name.clone().unwrap_or_default();
    let stored = api.get(&name).await?;
    Ok((object, stored))
}

async fn scenario(client: &Client, namespace: &str) -> Result<(), BoxError> {
    // Secrets and MachineClasses.
    for file in ["machine-class.yaml", "aws-machine-class.yaml"] {
        for document in example_documents(file) {
            match document["kind"].as_str() {
                Some("Secret") => {
                    create_and_get::<Secret>(client, namespace, &document).await?;
                }
                Some("MachineClass") => {
                    let (sent, stored) =
                        create_and_get::<MachineClass>(client, namespace, &document).await?;
                    assert_eq!(stored.provider_spec, sent.provider_spec, "{file}");
                    assert_eq!(stored.node_template, sent.node_template, "{file}");
                    assert_eq!(stored.secret_ref, sent.secret_ref, "{file}");
                    assert_eq!(stored.provider, sent.provider, "{file}");
                }
                other => return Err(format!("unexpected kind {other:?} in {file}").into()),
            }
        }
    }

    // An unknown providerSpec field is kept by the apiserver (preserve-unknown-fields).
    let mut class = MachineClass::new("future", json!({"image": "x", "future": {"deep": [1, 2]}}));
    class.provider = "local".into();
    let classes: Api<MachineClass> = Api::namespaced(client.clone(), namespace);
    classes.create(&PostParams::default(), &class).await?;
    let stored = classes.get("future").await?;
    assert_eq!(stored.provider_spec["future"], json!({"deep": [1, 2]}));

    // Machine, MachineSet, MachineDeployment.
    let machine_doc = example_documents("machine.yaml").remove(0);
    let (sent, stored) = create_and_get::<Machine>(client, namespace, &machine_doc).await?;
    assert_eq!(stored.spec, sent.spec);
    let set_doc = example_documents("machine-set.yaml").remove(0);
    let (sent, stored) = create_and_get::<MachineSet>(client, namespace, &set_doc).await?;
    assert_eq!(stored.spec, sent.spec);
    let deployment_doc = example_documents("machine-deployment.yaml").remove(0);
    let (sent, stored) =
        create_and_get::<MachineDeployment>(client, namespace, &deployment_doc).await?;
    assert_eq!(stored.spec, sent.spec);

    // A Go-style status through the status subresource.
    let machines: Api<Machine> = Api::namespaced(client.clone(), namespace);
    let status = json!({
        "status": {
            "lastOperation": {
                "description": "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [no capacity]",
                "errorCode": "ResourceExhausted",
                "lastUpdateTime": "2026-08-20T09:10:12Z",
                "state": "Failed",
                "type": "Create"
            },
            "currentStatus": {"phase": "CrashLoopBackOff", "timeoutActive": true, "lastUpdateTime": null}
        }
    });
    machines
        .patch_status(
            "local-machine",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    let machine = machines.get("local-machine").await?;
    assert_eq!(machine.phase(), MachinePhase::CrashLoopBackOff);
    let machine_status = machine.status.clone().unwrap_or_default();
    assert_eq!(machine_status.last_operation.state, MachineState::Failed);
    assert_eq!(
        machine_status.last_operation.type_,
        MachineOperationType::Create
    );

    // Writing the typed status back (replace) keeps it.
    let mut updated = machine.clone();
    if let Some(status) = updated.status.as_mut() {
        status.current_status.phase = MachinePhase::Pending;
    }
    machines
        .replace_status("local-machine", &PostParams::default(), &updated)
        .await?;
    assert_eq!(
        machines.get("local-machine").await?.phase(),
        MachinePhase::Pending
    );

    // Scale subresources.
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), namespace);
    sets.patch_scale(
        "local-machine-set",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 4}})),
    )
    .await?;
    assert_eq!(sets.get("local-machine-set").await?.spec.replicas, 4);
    let deployments: Api<MachineDeployment> = Api::namespaced(client.clone(), namespace);
    let scale = deployments.get_scale("local-machine-deployment").await?;
    assert_eq!(scale.spec.and_then(|spec| spec.replicas), Some(3));
    Ok(())
}

#[tokio::test]
async fn crds_install_and_examples_round_trip_on_the_apiserver() {
    let test = "crds_install_and_examples_round_trip_on_the_apiserver";
    let found = mcm_testenv::connect().await;
    let Some(client) = mcm_testenv::require_classified(
        test,
        mcm_testenv::service::CONTROL_PLANE,
        found,
        mcm_testenv::TestEnvError::unavailable,
    ) else {
        return;
    };
    install_crds(&client).await.unwrap();

    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let namespace = format!("mcm-api-test-{}-{nanos}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    let result = scenario(&client, &namespace).await;
    let _ = namespaces
        .delete(&namespace, &DeleteParams::default())
        .await;
    if let Err(error) = result {
        panic!("live apiserver scenario failed: {error}");
    }
}
