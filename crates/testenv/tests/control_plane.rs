//! The harness itself, against the real kube-apiserver: CRDs get established,
//! watches deliver, the status subresource is separate from spec, and stale
//! resourceVersions conflict.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::{watcher, WatchStreamExt};
use mcm_testenv::{create_namespace, install_crd_list, TestEnv};
use serde_json::json;
use std::time::Duration;

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.testenv.mcm.invalid"},
        "spec": {
            "group": "testenv.mcm.invalid",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                }}}
            }]
        }
    }))
    .expect("static CRD is valid")
}

fn widgets(env: &TestEnv) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("testenv.mcm.invalid", "v1", "Widget");
    Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource::from_gvk(&gvk),
    )
}

fn widget(name: &str, size: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "testenv.mcm.invalid/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": {"size": size}
    }))
    .expect("static object is valid")
}

#[tokio::test]
async fn crd_is_established_and_objects_arrive_through_a_watch() {
    let Some(env) = TestEnv::new("cp-watch").await else {
        return;
    };
    install_crd_list(&env.client, &[widget_crd()])
        .await
        .expect("CRD established");
    let api = widgets(&env);
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    // The watcher starts with a (still empty) list; create after it is running.
    let creator = {
        let api = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            api.create(&PostParams::default(), &widget("w1", 1)).await
        })
    };
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(obj) = stream.try_next().await.expect("watch stream") {
            if obj.metadata.name.as_deref() == Some("w1") {
                return obj;
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the created object arrives through the watch");
    assert_eq!(seen.data["spec"]["size"], 1);
    creator.await.expect("join").expect("create");
}

#[tokio::test]
async fn status_subresource_is_separate_and_stale_updates_conflict() {
    let Some(env) = TestEnv::new("cp-status").await else {
        return;
    };
    install_crd_list(&env.client, &[widget_crd()])
        .await
        .expect("CRD established");
    let api = widgets(&env);
    let created = api
        .create(&PostParams::default(), &widget("w2", 2))
        .await
        .expect("create");

    // Status goes through the status subresource.
    api.patch_status(
        "w2",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Ready"}})),
    )
    .await
    .expect("status patch");

    // A spec update that carries a different status must not change status.
    let mut current = api.get("w2").await.expect("get");
    current.data["spec"]["size"] = json!(3);
    current.data["status"] = json!({"phase": "Overwritten"});
    let updated = api
        .replace("w2", &PostParams::default(), &current)
        .await
        .expect("replace");
    assert_eq!(updated.data["spec"]["size"], 3);
    assert_eq!(
        updated.data["status"]["phase"], "Ready",
        "spec update changed status"
    );

    // An update with the stale resourceVersion of the first create answers 409.
    let mut stale = created.clone();
    stale.data["spec"]["size"] = json!(9);
    match api.replace("w2", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409, "expected Conflict, got {s:?}"),
        other => panic!("expected 409 Conflict, got {other:?}"),
    }
}

#[tokio::test]
async fn every_test_gets_its_own_namespace() {
    let Some(env) = TestEnv::new("cp-ns").await else {
        return;
    };
    let other = create_namespace(&env.client, "cp-ns")
        .await
        .expect("namespace");
    assert_ne!(env.namespace, other);
    assert!(env.namespace.starts_with("cp-ns-"));
}
