use super::*;
use kube::runtime::watcher;

fn machine(name: &str, generation: i64, phase: &str) -> Machine {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "namespace": "ns", "generation": generation},
        "spec": {"class": {"name": "c"}},
        "status": {"currentStatus": {"phase": phase}}
    }))
    .unwrap()
}

fn store_of(objs: &[Machine]) -> Store<Machine> {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objs {
        writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

fn generation(m: &Machine) -> Option<u64> {
    m.metadata.generation.map(|g| g as u64)
}

fn names(v: &[Arc<Machine>]) -> Vec<String> {
    let mut n: Vec<String> = v
        .iter()
        .map(|m| m.metadata.name.clone().unwrap_or_default())
        .collect();
    n.sort();
    n
}

#[test]
fn a_change_that_leaves_the_trigger_hash_alone_is_not_a_trigger() {
    let store = store_of(&[]);
    let mut t = Triggers::new(generation);
    let first = t.filter(Change::Applied(Arc::new(machine("a", 1, ""))), &store);
    assert_eq!(names(&first), ["a"]);
    // Only the status moved: same generation, no reconcile.
    let status_only = t.filter(
        Change::Applied(Arc::new(machine("a", 1, "Running"))),
        &store,
    );
    assert!(status_only.is_empty());
    let spec_change = t.filter(
        Change::Applied(Arc::new(machine("a", 2, "Running"))),
        &store,
    );
    assert_eq!(names(&spec_change), ["a"]);
}

#[test]
fn a_relist_passes_every_cached_object_and_forgets_the_gone_ones() {
    let mut t = Triggers::new(generation);
    let empty = store_of(&[]);
    t.filter(Change::Applied(Arc::new(machine("gone", 1, ""))), &empty);
    let store = store_of(&[machine("a", 1, ""), machine("b", 1, "")]);
    let all = t.filter(Change::Listed, &store);
    assert_eq!(names(&all), ["a", "b"]);
    assert!(!t.seen.contains_key(&ObjectRef::new("gone").within("ns")));
    // After the list, an unchanged object is not a trigger again.
    assert!(t
        .filter(
            Change::Applied(Arc::new(machine("a", 1, "Running"))),
            &store
        )
        .is_empty());
}

#[test]
fn a_deleted_object_triggers_again_when_it_comes_back() {
    let store = store_of(&[]);
    let mut t = Triggers::new(generation);
    t.filter(Change::Applied(Arc::new(machine("a", 1, ""))), &store);
    assert!(t
        .filter(Change::Deleted(Arc::new(machine("a", 1, ""))), &store)
        .is_empty());
    let back = t.filter(Change::Applied(Arc::new(machine("a", 1, ""))), &store);
    assert_eq!(names(&back), ["a"]);
}

#[test]
fn every_subscriber_gets_every_change_and_dropped_ones_are_forgotten() {
    let hub: Hub<Machine> = Hub {
        subscribers: Mutex::new(Vec::new()),
    };
    let (a_tx, mut a_rx) = unbounded();
    let (b_tx, b_rx) = unbounded();
    hub.subscribers.lock().unwrap().extend([a_tx, b_tx]);
    drop(b_rx);
    hub.send(|| Change::Listed);
    assert!(matches!(a_rx.try_recv(), Ok(Change::Listed)));
    assert_eq!(hub.subscribers.lock().unwrap().len(), 1);
}

#[test]
fn cached_objects_keep_no_managed_fields_and_nodes_no_image_list() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    let mut node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1", "labels": {"a": "b"}},
        "status": {
            "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1}],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("node");
    node.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kubelet".into()),
        ..Default::default()
    }]);
    node.trim();
    assert!(node.metadata.managed_fields.is_none());
    let status = node.status.clone().unwrap_or_default();
    assert!(status.images.is_none());
    assert_eq!(
        status.conditions.map(|c| c.len()),
        Some(1),
        "conditions kept"
    );
    assert_eq!(
        node.metadata.labels.map(|l| l.len()),
        Some(1),
        "labels kept"
    );

    let mut m = Machine::new("m1", Default::default());
    m.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
    m.trim();
    assert!(m.metadata.managed_fields.is_none());
}
