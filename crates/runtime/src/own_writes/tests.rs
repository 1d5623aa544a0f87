#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use super::*;
use crate::keys::Kind;

fn machine(rv: &str, uid: &str, description: &str) -> Machine {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "ns", "resourceVersion": rv, "uid": uid},
        "spec": {},
        "status": {"lastOperation": {"description": description}},
    }))
    .expect("machine")
}

fn key() -> ObjectKey {
    ObjectKey::new(Kind::Machine, "ns", "m1")
}

fn description(m: &Machine) -> String {
    m.status
        .clone()
        .unwrap_or_default()
        .last_operation
        .description
}

#[test]
fn a_reconcile_of_a_copy_our_write_superseded_starts_from_the_write_s_answer() {
    let w = OwnWrites::default();
    w.wrote(
        &key(),
        &["1".into()],
        &machine("2", "u", "drain started"),
        |_| true,
    );
    let got = w.newest(&key(), Arc::new(machine("1", "u", "running")));
    assert_eq!(description(&got), "drain started");
    // Still so until the cache catches up.
    let again = w.newest(&key(), Arc::new(machine("1", "u", "running")));
    assert_eq!(description(&again), "drain started");
}

#[test]
fn the_cache_catching_up_or_moving_on_ends_the_entry() {
    let w = OwnWrites::default();
    w.wrote(&key(), &["1".into()], &machine("2", "u", "ours"), |_| true);
    let caught_up = w.newest(&key(), Arc::new(machine("2", "u", "ours")));
    assert_eq!(caught_up.resource_version().as_deref(), Some("2"));
    // The entry is gone: even the old copy is now read as cached.
    let old = w.newest(&key(), Arc::new(machine("1", "u", "old")));
    assert_eq!(description(&old), "old");

    w.wrote(&key(), &["3".into()], &machine("4", "u", "ours"), |_| true);
    let theirs = w.newest(&key(), Arc::new(machine("5", "u", "someone else's change")));
    assert_eq!(description(&theirs), "someone else's change");
}

#[test]
fn a_new_object_of_the_same_name_is_never_replaced_by_the_old_ones_write() {
    let w = OwnWrites::default();
    w.wrote(
        &key(),
        &["1".into()],
        &machine("2", "old-uid", "old"),
        |_| true,
    );
    let got = w.newest(&key(), Arc::new(machine("1", "new-uid", "new")));
    assert_eq!(description(&got), "new");
}

#[test]
fn every_copy_a_chain_of_writes_superseded_is_replaced_by_the_last_answer() {
    let w = OwnWrites::default();
    w.wrote(&key(), &["1".into()], &machine("2", "u", "first"), |_| true);
    w.wrote(&key(), &["2".into()], &machine("3", "u", "second"), |_| {
        true
    });
    for rv in ["1", "2"] {
        let got = w.newest(&key(), Arc::new(machine(rv, "u", "stale")));
        assert_eq!(description(&got), "second", "copy {rv}");
    }
}
