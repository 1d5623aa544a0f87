use super::finalizer;
use super::MetaPatch;
use k8s_openapi::api::core::v1::{ConfigMap, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::json;

fn object(finalizers: &[&str], rv: Option<&str>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("o".into()),
            finalizers: Some(finalizers.iter().map(|s| s.to_string()).collect()),
            resource_version: rv.map(Into::into),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn labels_and_annotations_are_set_and_removed_with_null() {
    let body = MetaPatch::new()
        .label("a", "1")
        .remove_label("b")
        .annotation("x", "y")
        .remove_annotation("z")
        .body();
    assert_eq!(
        body,
        json!({"metadata": {
            "labels": {"a": "1", "b": null},
            "annotations": {"x": "y", "z": null},
        }})
    );
}

#[test]
fn a_guarded_write_carries_the_resource_version_and_an_unguarded_one_none() {
    let guarded = MetaPatch::new()
        .annotation("k", "v")
        .guarded_by(Some("7".into()))
        .body();
    assert_eq!(
        guarded,
        json!({"metadata": {"annotations": {"k": "v"}, "resourceVersion": "7"}})
    );
    let unguarded = MetaPatch::new()
        .annotation("k", "v")
        .guarded_by(None)
        .body();
    assert_eq!(unguarded, json!({"metadata": {"annotations": {"k": "v"}}}));
}

#[test]
fn spec_fields_go_beside_the_metadata() {
    let body = MetaPatch::new()
        .label("node", "n1")
        .provider_id("aws:///i-1")
        .body();
    assert_eq!(
        body,
        json!({"metadata": {"labels": {"node": "n1"}}, "spec": {"providerID": "aws:///i-1"}})
    );
    let taint = Taint {
        key: "k".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let node = MetaPatch::new()
        .guarded_by(Some("3".into()))
        .taints(vec![taint])
        .unschedulable(false)
        .body();
    assert_eq!(
        node,
        json!({"metadata": {"resourceVersion": "3"},
               "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": false}})
    );
    let scale = MetaPatch::new().replicas(4).body();
    assert_eq!(scale, json!({"spec": {"replicas": 4}}));
}

#[test]
fn an_empty_owner_reference_list_removes_the_field() {
    let r = OwnerReference {
        api_version: "v1".into(),
        kind: "K".into(),
        name: "n".into(),
        uid: "u".into(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let set = MetaPatch::new().owner_references(vec![r]).body();
    assert_eq!(
        set["metadata"]["ownerReferences"][0]["uid"],
        json!("u"),
        "{set}"
    );
    let gone = MetaPatch::new().owner_references(vec![]).body();
    assert_eq!(gone, json!({"metadata": {"ownerReferences": null}}));
}

#[test]
fn an_empty_write_is_empty_even_with_a_guard() {
    assert!(MetaPatch::new().guarded_by(Some("1".into())).is_empty());
    assert!(!MetaPatch::new().remove_label("a").is_empty());
}

#[test]
fn adding_a_finalizer_writes_the_whole_list_guarded_by_the_resource_version() {
    let obj = object(&["other"], Some("9"));
    let body = finalizer::add_body(&obj, "mine", MetaPatch::new())
        .expect("missing finalizer is added")
        .body();
    assert_eq!(
        body,
        json!({"metadata": {"finalizers": ["other", "mine"], "resourceVersion": "9"}})
    );
    let with = finalizer::add_body(&obj, "mine", MetaPatch::new().annotation("a", "b"))
        .expect("added")
        .body();
    assert_eq!(
        with,
        json!({"metadata": {"finalizers": ["other", "mine"], "annotations": {"a": "b"},
                            "resourceVersion": "9"}})
    );
    let present = object(&["mine"], Some("9"));
    assert!(finalizer::add_body(&present, "mine", MetaPatch::new()).is_none());
}

#[test]
fn removing_a_finalizer_is_guarded_by_the_list_not_the_resource_version() {
    let obj = object(&["a", "mine", "b"], Some("9"));
    let body = finalizer::remove_body(&obj, "mine").expect("present finalizer is removed");
    assert_eq!(
        body,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["a", "mine", "b"]},
            {"op": "replace", "path": "/metadata/finalizers", "value": ["a", "b"]},
        ])
    );
    assert!(finalizer::remove_body(&object(&["a"], None), "mine").is_none());
}
