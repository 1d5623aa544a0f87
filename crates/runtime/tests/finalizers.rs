//! Finalizer removal against the real API server: it is guarded by the
//! finalizer list, not the resourceVersion, so a copy from a cache that is
//! stale only elsewhere (a Node's status heartbeat, a label) still works,
//! while a changed list is never overwritten.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_runtime::metadata::finalizer;
use mcm_testenv::TestEnv;
use serde_json::json;

async fn object_with_finalizers(env: &TestEnv, name: &str, finalizers: &[&str]) -> ConfigMap {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..Default::default()
        },
        ..Default::default()
    };
    env.api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .expect("create")
}

async fn relabel(env: &TestEnv, name: &str) {
    env.api::<ConfigMap>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"changed": "yes"}}})),
        )
        .await
        .expect("label");
}

#[tokio::test]
async fn a_copy_stale_only_outside_the_finalizers_removes_the_finalizer() {
    let Some(env) = TestEnv::new("finalizer-stale-copy").await else {
        return;
    };
    let stale = object_with_finalizers(&env, "cm", &["a/one", "b/two"]).await;
    relabel(&env, "cm").await;

    let after = finalizer::remove(&env.api(), &stale, "a/one")
        .await
        .expect("a label change is no conflict for the finalizer list")
        .expect("updated");
    assert_eq!(after.finalizers(), ["b/two"]);
    assert_eq!(
        after.labels().get("changed").map(String::as_str),
        Some("yes")
    );

    finalizer::remove(&env.api(), &after, "b/two")
        .await
        .expect("last one");
}

#[tokio::test]
async fn a_changed_finalizer_list_is_never_overwritten_and_the_retry_reads_it_fresh() {
    let Some(env) = TestEnv::new("finalizer-changed-list").await else {
        return;
    };
    let stale = object_with_finalizers(&env, "cm", &["a/one"]).await;
    // Someone adds a finalizer after our copy was taken.
    let fresh = finalizer::add(&env.api::<ConfigMap>(), &stale, "c/three")
        .await
        .expect("add")
        .expect("added");
    assert_eq!(fresh.finalizers(), ["a/one", "c/three"]);

    let err = finalizer::remove(&env.api(), &stale, "a/one").await;
    assert!(
        matches!(&err, Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422),
        "a stale list must not be written back: {err:?}"
    );
    let after = finalizer::remove_retrying_stale(&env.api(), &stale, "a/one")
        .await
        .expect("retried on a fresh copy")
        .expect("updated");
    assert_eq!(
        after.finalizers(),
        ["c/three"],
        "the other finalizer is kept"
    );

    finalizer::remove(&env.api(), &after, "c/three")
        .await
        .expect("last one");
}
