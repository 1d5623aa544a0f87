use super::finalizer;
use super::{version_of, MetaPatch};
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::Status;
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

fn node_with(labels: &[(&str, &str)], taints: &[&str]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            resource_version: Some("5".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|k| Taint {
                        key: k.to_string(),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ops(patch: &MetaPatch) -> serde_json::Value {
    match patch.request() {
        Ok(kube::api::Patch::Json(p)) => serde_json::to_value(p).expect("ops"),
        other => panic!("not a JSON patch: {other:?}"),
    }
}

#[test]
fn a_write_guarded_by_its_read_tests_the_old_value_of_each_key_it_changes() {
    let node = node_with(&[("a", "1"), ("b", "2"), ("x/y", "3")], &[]);
    let write = MetaPatch::new()
        .label("a", "1")
        .label("c", "3")
        .remove_label("b")
        .label("x/y", "4")
        .guarded_by_read(&node);
    assert_eq!(
        ops(&write),
        json!([
            {"op": "test", "path": "/metadata/labels/b", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/b"},
            {"op": "test", "path": "/metadata/labels/c", "value": null},
            {"op": "add", "path": "/metadata/labels/c", "value": "3"},
            {"op": "test", "path": "/metadata/labels/x~1y", "value": "3"},
            {"op": "add", "path": "/metadata/labels/x~1y", "value": "4"},
        ]),
        "an unchanged key is neither tested nor written; `/` is escaped"
    );
}

#[test]
fn a_map_the_read_lacks_is_tested_absent_and_written_whole() {
    let node = node_with(&[("a", "1")], &[]);
    let write = MetaPatch::new()
        .annotation("k", "v")
        .remove_annotation("gone")
        .guarded_by_read(&node);
    assert_eq!(
        ops(&write),
        json!([
            {"op": "test", "path": "/metadata/annotations", "value": null},
            {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
        ])
    );
}

#[test]
fn a_taint_list_write_removes_each_old_taint_where_it_was_and_appends_the_new() {
    let node = node_with(&[], &["a", "startup", "b", "old"]);
    let keep = |k: &str| Taint {
        key: k.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let write = MetaPatch::new()
        .taints(vec![keep("a"), keep("b"), keep("new")])
        .guarded_by_read(&node);
    let taint = |k: &str| json!({"key": k, "effect": "NoSchedule"});
    assert_eq!(
        ops(&write),
        json!([
            {"op": "test", "path": "/spec/taints/3", "value": taint("old")},
            {"op": "remove", "path": "/spec/taints/3"},
            {"op": "test", "path": "/spec/taints/1", "value": taint("startup")},
            {"op": "remove", "path": "/spec/taints/1"},
            {"op": "add", "path": "/spec/taints/-", "value": taint("new")},
        ]),
        "highest index first, so that each removal finds the next where it was"
    );
    let bare = node_with(&[], &[]);
    let first = MetaPatch::new()
        .taints(vec![keep("new")])
        .guarded_by_read(&Node { spec: None, ..bare });
    assert_eq!(
        ops(&first),
        json!([
            {"op": "test", "path": "/spec/taints", "value": null},
            {"op": "add", "path": "/spec/taints", "value": [taint("new")]},
        ])
    );
}

#[test]
fn finalizers_and_scalar_fields_are_tested_and_replaced_whole() {
    let node = node_with(&[], &[]);
    let write = MetaPatch::new()
        .finalizers(vec!["f".into()])
        .unschedulable(true)
        .guarded_by_read(&node);
    assert_eq!(
        ops(&write),
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
            {"op": "test", "path": "/spec/unschedulable", "value": null},
            {"op": "add", "path": "/spec/unschedulable", "value": true},
        ])
    );
}

#[test]
fn a_resource_version_guard_or_none_stays_a_merge_patch() {
    for write in [
        MetaPatch::new().label("a", "1"),
        MetaPatch::new()
            .label("a", "1")
            .guarded_by(Some("4".into())),
    ] {
        assert!(matches!(write.request(), Ok(kube::api::Patch::Merge(_))));
    }
}

/// The API server's answer `body`, as the client reports it.
fn api_error(body: serde_json::Value) -> kube::Error {
    kube::Error::Api(Box::new(
        serde_json::from_value::<Status>(body).expect("a Status"),
    ))
}

#[test]
fn a_failed_json_patch_test_is_a_conflict_and_a_validation_error_is_not() {
    // What the API server answers to a failed `test` (kube-apiserver 1.36).
    let failed_test = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "reason": "Invalid", "details": {}, "code": 422,
        "message": "the server rejected our request due to an error in our request"});
    assert!(crate::is_conflict(&api_error(failed_test)));
    let conflict = json!({"status": "Failure", "reason": "Conflict", "code": 409,
        "details": {"name": "n1", "kind": "nodes"}, "message": "the object has been modified"});
    assert!(crate::is_conflict(&api_error(conflict)));
    // A validation error names the object and its causes.
    let invalid = json!({"status": "Failure", "reason": "Invalid", "code": 422,
        "message": "Node \"n1\" is invalid: metadata.labels: Invalid value",
        "details": {"name": "n1", "kind": "Node",
                    "causes": [{"reason": "FieldValueInvalid", "field": "metadata.labels"}]}});
    assert!(!crate::is_conflict(&api_error(invalid)));
    let unavailable = json!({"status": "Failure", "reason": "ServiceUnavailable", "code": 503});
    assert!(!crate::is_conflict(&api_error(unavailable)));
}

/// Against the real API server: a kubelet's status write in between does
/// not stop a write guarded by what it read, where a resourceVersion guard
/// conflicts; a changed tested part refuses it (a conflict); an invalid
/// value is an error, not a conflict.
#[tokio::test]
async fn a_node_write_guarded_by_its_read_survives_a_status_heartbeat_but_not_a_changed_part() {
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
    let Some(env) = mcm_testenv::TestEnv::new("metapatch-parts").await else {
        return;
    };
    let nodes: Api<Node> = Api::all(env.client.clone());
    let name = format!("metapatch-{}", env.namespace);
    let mut node = node_with(&[("a", "1")], &[]);
    node.metadata.name = Some(name.clone());
    node.metadata.resource_version = None;
    node.spec = None;
    let read = nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
    // The kubelet's heartbeat moves the resourceVersion.
    let beat = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}});
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&beat))
        .await
        .expect("heartbeat");
    let by_version = MetaPatch::new()
        .label("b", "2")
        .guarded_by(version_of(&read))
        .send(&nodes, &name)
        .await;
    assert!(
        by_version.as_ref().is_err_and(crate::is_conflict),
        "{by_version:?}"
    );
    // (Not the taints: the node lifecycle controller taints a Node without
    // a Ready condition at any moment.)
    let written = MetaPatch::new()
        .label("b", "2")
        .annotation("k", "v")
        .guarded_by_read(&read)
        .send(&nodes, &name)
        .await
        .expect("guarded by the parts it read: no conflict with the status");
    assert_eq!(
        written.metadata.labels.clone().unwrap_or_default().get("b"),
        Some(&"2".to_string())
    );
    // A key set meanwhile: the stale copy's write of it is refused; a write
    // of another key is not.
    let stale = MetaPatch::new()
        .label("b", "3")
        .guarded_by_read(&read)
        .send(&nodes, &name)
        .await;
    assert!(stale.as_ref().is_err_and(crate::is_conflict), "{stale:?}");
    MetaPatch::new()
        .label("c", "3")
        .guarded_by_read(&read)
        .send(&nodes, &name)
        .await
        .expect("another key is no conflict");
    // Taints: one appended by someone else after ours is no conflict for
    // removing ours; ours removed meanwhile is.
    let ours = Taint {
        key: "ours".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let mut with_ours = written
        .spec
        .clone()
        .and_then(|s| s.taints)
        .unwrap_or_default();
    with_ours.push(ours);
    let tainted = MetaPatch::new()
        .taints(with_ours)
        .guarded_by_read(&written)
        .send(&nodes, &name)
        .await
        .expect("taint");
    let theirs = json!({"key": "theirs", "effect": "NoExecute"});
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "add", "path": "/spec/taints/-", "value": theirs}
                ]))
                .expect("patch"),
            ),
        )
        .await
        .expect("their taint");
    let without_ours: Vec<Taint> = tainted
        .spec
        .clone()
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != "ours")
        .collect();
    let untainted = MetaPatch::new()
        .taints(without_ours.clone())
        .guarded_by_read(&tainted)
        .send(&nodes, &name)
        .await
        .expect("removing ours: theirs was appended after it");
    let keys: Vec<String> = untainted
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert!(
        keys.contains(&"theirs".to_string()) && !keys.contains(&"ours".to_string()),
        "{keys:?}"
    );
    let again = MetaPatch::new()
        .taints(without_ours)
        .guarded_by_read(&tainted)
        .send(&nodes, &name)
        .await;
    assert!(again.as_ref().is_err_and(crate::is_conflict), "{again:?}");
    // An invalid label is an error to report, not a conflict to retry.
    let invalid = MetaPatch::new()
        .label("not a valid key!", "1")
        .guarded_by_read(&written)
        .send(&nodes, &name)
        .await;
    assert!(
        invalid.as_ref().is_err_and(|e| !crate::is_conflict(e)),
        "{invalid:?}"
    );
    let _ = nodes.delete(&name, &DeleteParams::default()).await;
}
