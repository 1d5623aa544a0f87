use super::*;
use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: (!value.is_empty()).then(|| value.into()),
        effect: effect.into(),
        time_added: None,
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn template(
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    taints: Vec<Taint>,
) -> NodeTemplateSpec {
    NodeTemplateSpec {
        metadata: ObjectMeta {
            labels: (!labels.is_empty()).then(|| map(labels)),
            annotations: (!annotations.is_empty()).then(|| map(annotations)),
            ..ObjectMeta::default()
        },
        spec: NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        },
    }
}

fn node(
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    taints: Vec<Taint>,
) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: Some(vec![c::NODE_FINALIZER.into()]),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: Some(taints),
            ..NodeSpec::default()
        }),
        status: None,
    }
}

/// A node on which `t` has been applied completely.
fn synced(t: &NodeTemplateSpec, extra_labels: &[(&str, &str)], extra_taints: Vec<Taint>) -> Node {
    let mut labels = t.metadata.labels.clone().unwrap_or_default();
    labels.extend(map(extra_labels));
    labels.insert(c::MACHINE_NAME_NODE_LABEL.into(), "m1".into());
    let mut annotations = t.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(
        c::LAST_APPLIED_ALT_ANNOTATION.into(),
        serde_json::to_string(t).unwrap(),
    );
    let mut taints = extra_taints;
    taints.extend(t.spec.taints.clone().unwrap_or_default());
    node(labels, annotations, taints)
}

fn input<'a>(t: &'a NodeTemplateSpec, cap: &'a BTreeMap<String, Quantity>) -> NodeSyncInput<'a> {
    NodeSyncInput {
        machine_name: "m1",
        template: t,
        virtual_capacity: cap,
    }
}

#[test]
fn fresh_node_gets_template_machine_label_finalizer_and_bookkeeping() {
    let t = template(
        &[("pool", "a")],
        &[("note", "x")],
        vec![taint("dedicated", "db", "NoSchedule")],
    );
    let mut n = node(
        map(&[("kubernetes.io/hostname", "n1")]),
        BTreeMap::new(),
        vec![],
    );
    n.metadata.finalizers = None;
    let none = BTreeMap::new();
    let p = plan(&input(&t, &none), &n);
    assert_eq!(p.labels.get("pool"), Some(&Some("a".into())));
    assert_eq!(
        p.labels.get(c::MACHINE_NAME_NODE_LABEL),
        Some(&Some("m1".into()))
    );
    assert!(!p.labels.contains_key("kubernetes.io/hostname"));
    assert_eq!(p.annotations.get("note"), Some(&Some("x".into())));
    let alt = p.annotations[c::LAST_APPLIED_ALT_ANNOTATION]
        .clone()
        .unwrap();
    let recorded: NodeTemplateSpec = serde_json::from_str(&alt).unwrap();
    assert_eq!(recorded, t);
    assert_eq!(p.taints, Some(vec![taint("dedicated", "db", "NoSchedule")]));
    assert_eq!(p.finalizers, Some(vec![c::NODE_FINALIZER.to_string()]));
    assert!(p.capacity.is_empty());
}

#[test]
fn synced_node_needs_nothing() {
    let t = template(
        &[("pool", "a")],
        &[("note", "x")],
        vec![taint("dedicated", "db", "NoSchedule")],
    );
    let n = synced(
        &t,
        &[("other", "1")],
        vec![taint("node.kubernetes.io/not-ready", "", "NoExecute")],
    );
    let none = BTreeMap::new();
    let p = plan(&input(&t, &none), &n);
    assert!(p.is_empty(), "{p:?}");
    assert!(!p.has_metadata_changes(), "no Node object write: {p:?}");
}

#[test]
fn removed_template_entries_leave_the_node_but_others_stay() {
    let old = template(
        &[("pool", "a"), ("gone", "1")],
        &[("note", "x"), ("gone-anno", "y")],
        vec![
            taint("dedicated", "db", "NoSchedule"),
            taint("gone", "", "NoExecute"),
        ],
    );
    let n = synced(
        &old,
        &[("other", "1")],
        vec![taint(
            c::CRITICAL_COMPONENTS_NOT_READY_TAINT,
            "",
            "NoSchedule",
        )],
    );
    let new = template(
        &[("pool", "a")],
        &[("note", "x")],
        vec![taint("dedicated", "db", "NoSchedule")],
    );
    let none = BTreeMap::new();
    let p = plan(&input(&new, &none), &n);
    assert_eq!(p.labels, BTreeMap::from([("gone".to_string(), None)]));
    assert_eq!(p.annotations.get("gone-anno"), Some(&None));
    assert!(p.annotations.contains_key(c::LAST_APPLIED_ALT_ANNOTATION));
    assert_eq!(
        p.taints,
        Some(vec![
            taint(c::CRITICAL_COMPONENTS_NOT_READY_TAINT, "", "NoSchedule"),
            taint("dedicated", "db", "NoSchedule"),
        ])
    );
}

#[test]
fn changed_taint_value_replaces_the_taint_with_the_same_key_and_effect() {
    let old = template(
        &[],
        &[],
        vec![
            taint("dedicated", "db", "NoSchedule"),
            taint("dedicated", "x", "NoExecute"),
        ],
    );
    let n = synced(&old, &[], vec![]);
    let new = template(
        &[],
        &[],
        vec![
            taint("dedicated", "web", "NoSchedule"),
            taint("dedicated", "x", "NoExecute"),
        ],
    );
    let none = BTreeMap::new();
    let p = plan(&input(&new, &none), &n);
    let taints = p.taints.unwrap();
    assert_eq!(
        taints,
        vec![
            taint("dedicated", "web", "NoSchedule"),
            taint("dedicated", "x", "NoExecute")
        ]
    );
}

#[test]
fn duplicate_template_taints_become_one_with_the_last_value() {
    let t = template(
        &[],
        &[],
        vec![taint("k", "1", "NoSchedule"), taint("k", "2", "NoSchedule")],
    );
    let n = node(BTreeMap::new(), BTreeMap::new(), vec![]);
    let none = BTreeMap::new();
    assert_eq!(
        plan(&input(&t, &none), &n).taints,
        Some(vec![taint("k", "2", "NoSchedule")])
    );
}

#[test]
fn values_others_changed_since_are_not_removed() {
    let old = template(
        &[("pool", "a")],
        &[],
        vec![taint("dedicated", "db", "NoSchedule")],
    );
    let mut n = synced(&old, &[], vec![]);
    n.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("pool".into(), "theirs".into());
    n.spec.as_mut().unwrap().taints = Some(vec![taint("dedicated", "theirs", "NoSchedule")]);
    let empty = NodeTemplateSpec::default();
    let none = BTreeMap::new();
    let p = plan(&input(&empty, &none), &n);
    assert!(!p.labels.contains_key("pool"));
    assert_eq!(p.taints, None);
    // The bookkeeping forgets them, so they are never removed later either.
    let alt = p.annotations[c::LAST_APPLIED_ALT_ANNOTATION]
        .clone()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<NodeTemplateSpec>(&alt).unwrap(),
        empty
    );
}

#[test]
fn template_values_win_over_node_values_for_keys_it_names() {
    let t = template(&[("pool", "a")], &[], vec![]);
    let n = node(
        map(&[("pool", "b"), (c::MACHINE_NAME_NODE_LABEL, "m1")]),
        BTreeMap::new(),
        vec![],
    );
    let none = BTreeMap::new();
    let p = plan(&input(&t, &none), &n);
    assert_eq!(
        p.labels,
        BTreeMap::from([("pool".to_string(), Some("a".to_string()))])
    );
}

#[test]
fn go_written_bookkeeping_is_read_and_not_rewritten() {
    // As the Go controller marshals NodeTemplateSpec.
    let go = r#"{"metadata":{"creationTimestamp":null,"labels":{"pool":"a"}},"spec":{"taints":[{"key":"dedicated","value":"db","effect":"NoSchedule"}]}}"#;
    let t = template(
        &[("pool", "a")],
        &[],
        vec![taint("dedicated", "db", "NoSchedule")],
    );
    let mut n = synced(&t, &[], vec![]);
    n.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(c::LAST_APPLIED_ALT_ANNOTATION.into(), go.into());
    let none = BTreeMap::new();
    assert!(plan(&input(&t, &none), &n).is_empty());
    // …and its entries are removed when the template drops them.
    let empty = NodeTemplateSpec::default();
    let p = plan(&input(&empty, &none), &n);
    assert_eq!(p.labels.get("pool"), Some(&None));
    assert_eq!(p.taints, Some(vec![]));
}

#[test]
fn unreadable_bookkeeping_is_reported_and_rewritten() {
    let t = template(&[("pool", "a")], &[], vec![]);
    let mut n = synced(&t, &[], vec![]);
    n.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(c::LAST_APPLIED_ALT_ANNOTATION.into(), "{not json".into());
    let none = BTreeMap::new();
    let p = plan(&input(&t, &none), &n);
    assert_eq!(p.unreadable, vec![c::LAST_APPLIED_ALT_ANNOTATION]);
    assert!(p.annotations[c::LAST_APPLIED_ALT_ANNOTATION].is_some());
    assert!(p.labels.is_empty());
}

#[test]
fn virtual_capacity_is_set_recorded_replaced_and_removed() {
    let t = NodeTemplateSpec::default();
    let mut n = synced(&t, &[], vec![]);
    n.status = Some(NodeStatus {
        capacity: Some(BTreeMap::from([("cpu".to_string(), Quantity("2".into()))])),
        ..NodeStatus::default()
    });
    let cap = BTreeMap::from([("example.com/gpu-slices".to_string(), Quantity("4".into()))]);
    let p = plan(&input(&t, &cap), &n);
    assert_eq!(
        p.capacity,
        BTreeMap::from([(
            "example.com/gpu-slices".to_string(),
            Some(Quantity("4".into()))
        )])
    );
    assert_eq!(
        p.annotations[c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION],
        Some(r#"{"example.com/gpu-slices":"4"}"#.to_string())
    );

    // Applied: nothing more to do.
    let caps = n.status.as_mut().unwrap().capacity.as_mut().unwrap();
    caps.insert("example.com/gpu-slices".into(), Quantity("4".into()));
    n.metadata.annotations.as_mut().unwrap().insert(
        c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION.into(),
        r#"{"example.com/gpu-slices":"4"}"#.into(),
    );
    assert!(plan(&input(&t, &cap), &n).is_empty());

    // Removed from the class: the key and the bookkeeping go, the kubelet's cpu stays.
    let none = BTreeMap::new();
    let p = plan(&input(&t, &none), &n);
    assert_eq!(
        p.capacity,
        BTreeMap::from([("example.com/gpu-slices".to_string(), None)])
    );
    assert_eq!(
        p.annotations[c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION],
        None
    );
}

#[test]
fn capacity_in_canonical_form_counts_as_applied() {
    let t = NodeTemplateSpec::default();
    let mut n = synced(&t, &[], vec![]);
    n.status = Some(NodeStatus {
        capacity: Some(BTreeMap::from([("x/y".to_string(), Quantity("1".into()))])),
        ..NodeStatus::default()
    });
    n.metadata.annotations.as_mut().unwrap().insert(
        c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION.into(),
        r#"{"x/y":"1000m"}"#.into(),
    );
    let cap = BTreeMap::from([("x/y".to_string(), Quantity("1000m".into()))]);
    assert!(plan(&input(&t, &cap), &n).is_empty());
}

#[test]
fn quantities_compare_by_value() {
    let q = |s: &str| Quantity(s.into());
    assert!(same_quantity(&q("1000m"), &q("1")));
    assert!(same_quantity(&q("1Ki"), &q("1024")));
    assert!(same_quantity(&q("1e3"), &q("1k")));
    assert!(same_quantity(&q("0.5Gi"), &q("512Mi")));
    assert!(!same_quantity(&q("1"), &q("2")));
    assert!(!same_quantity(&q("1Q"), &q("1")));
    assert_eq!(quantity_value("bogus"), None);
}

#[test]
fn a_label_the_template_dropped_is_planned_as_a_removal_and_taints_stay_alone() {
    let old = template(&[("gone", "1")], &[], vec![]);
    let n = synced(&old, &[], vec![]);
    let empty = NodeTemplateSpec::default();
    let none = BTreeMap::new();
    let p = plan(&input(&empty, &none), &n);
    assert_eq!(p.labels.get("gone"), Some(&None));
    assert!(p.taints.is_none());
}

#[test]
fn template_applied_only_once_labels_annotations_taints_and_bookkeeping_are_on_the_node() {
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    let template: NodeTemplateSpec = serde_json::from_value(serde_json::json!({
        "metadata": {"labels": {"pool": "a"}, "annotations": {"x": "1"}},
        "spec": {"taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]}
    }))
    .expect("template");
    let empty = BTreeMap::new();
    let input = NodeSyncInput {
        machine_name: "m1",
        template: &template,
        virtual_capacity: &empty,
    };
    let mut node = Node::default();
    node.metadata.name = Some("n1".into());
    assert!(!template_applied(&input, &node), "nothing applied yet");
    // Labels, annotations and the finalizer, but not the taint.
    let p = plan(&input, &node);
    let labels: BTreeMap<String, String> = p
        .labels
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect();
    let annotations: BTreeMap<String, String> = p
        .annotations
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect();
    node.metadata.labels = Some(labels);
    node.metadata.annotations = Some(annotations);
    node.metadata.finalizers = p.finalizers.clone();
    assert!(!template_applied(&input, &node), "the taint is missing");
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: "dedicated".into(),
            value: Some("a".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    assert!(template_applied(&input, &node));
}

#[test]
fn the_startup_taint_is_dropped_from_the_new_taint_list_or_from_the_nodes() {
    let startup = taint("startup", "", "NoSchedule");
    let other = taint("other", "x", "NoExecute");
    // The plan writes no taints: the Node's list without the startup taint.
    let mut p = NodeSyncPlan::default();
    assert!(p.drop_startup_taint("startup", &[startup.clone(), other.clone()]));
    assert_eq!(p.taints, Some(vec![other.clone()]));
    // The plan already replaces the taints: its list loses the startup taint.
    let added = taint("template", "y", "NoSchedule");
    let mut p = NodeSyncPlan {
        taints: Some(vec![startup.clone(), added.clone()]),
        ..Default::default()
    };
    assert!(p.drop_startup_taint("startup", std::slice::from_ref(&startup)));
    assert_eq!(p.taints, Some(vec![added]));
    // Nothing to drop: the plan is unchanged.
    let mut p = NodeSyncPlan::default();
    assert!(!p.drop_startup_taint("startup", &[other]));
    assert_eq!(p, NodeSyncPlan::default());
}
