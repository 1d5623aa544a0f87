use super::*;
use crate::status::tests::merge;
use serde_json::json;

fn at(s: &str) -> Time {
    Time(s.parse().unwrap())
}

const T1: &str = "2026-01-01T00:00:00Z";
const T2: &str = "2026-01-01T00:01:00Z";

fn transition(phase: Option<MachinePhase>, description: &str) -> Transition {
    Transition::for_tests(
        phase,
        description,
        MachineState::Processing,
        MachineOperationType::Delete,
    )
}

fn patch(change: &MachineStatusChange) -> serde_json::Value {
    serde_json::to_value(change).unwrap()
}

/// A status as stored, with every field the writes touch.
fn stored() -> serde_json::Value {
    json!({
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True"}],
        "lastOperation": {"description": "Machine m successfully joined the cluster",
            "errorCode": "ResourceExhausted", "lastUpdateTime": "2025-12-31T00:00:00Z",
            "state": "Successful", "type": "HealthCheck"},
        "currentStatus": {"phase": "Failed", "timeoutActive": true,
            "lastUpdateTime": "2025-12-31T00:00:00Z",
            "preserveExpiryTime": "2026-02-01T00:00:00Z"},
        "lastKnownState": "vm-1"
    })
}

#[test]
fn a_transition_writes_its_whole_operation_and_its_phase() {
    let mut t = transition(Some(MachinePhase::Running), "Machine m is running");
    t.operation.state = MachineState::Successful;
    t.operation.kind = MachineOperationType::HealthCheck;
    t.timeout_active = Some(false);
    assert_eq!(
        patch(&MachineStatusChange::of_at(&t, at(T1))),
        json!({
            "lastOperation": {"description": "Machine m is running", "errorCode": "",
                "lastUpdateTime": T1, "state": "Successful", "type": "HealthCheck"},
            "currentStatus": {"phase": "Running", "timeoutActive": false, "lastUpdateTime": T1}
        })
    );
}

#[test]
fn a_transition_without_a_phase_writes_only_its_operation() {
    let mut t = transition(None, "Cloud provider message - quota exceeded");
    t.operation.error_code = Some("ResourceExhausted".into());
    t.operation.state = MachineState::Failed;
    t.timeout_active = Some(true);
    assert_eq!(
        patch(&MachineStatusChange::of_at(&t, at(T1))),
        json!({
            "lastOperation": {"description": "Cloud provider message - quota exceeded",
                "errorCode": "ResourceExhausted", "lastUpdateTime": T1,
                "state": "Failed", "type": "Delete"}
        })
    );
}

#[test]
fn a_terminating_transition_clears_the_preserve_expiry() {
    let t = transition(
        Some(MachinePhase::Terminating),
        "Set machine status to termination. Now, getting VM Status",
    );
    let body = patch(&MachineStatusChange::of_at(&t, at(T1)));
    assert_eq!(
        body["currentStatus"],
        json!({"phase": "Terminating", "lastUpdateTime": T1, "preserveExpiryTime": null})
    );
    let mut status = stored();
    merge(&mut status, &body);
    assert!(status["currentStatus"].get("preserveExpiryTime").is_none());
}

#[test]
fn entering_a_phase_writes_the_phase_and_operation_only() {
    let op = LastOperation {
        description: "Deleting machine from cloud provider".into(),
        last_update_time: Some(at(T1)),
        state: MachineState::Processing,
        type_: MachineOperationType::Delete,
        ..Default::default()
    };
    assert_eq!(
        patch(&MachineStatusChange::entering(
            MachinePhase::Terminating,
            op
        )),
        json!({
            "lastOperation": {"description": "Deleting machine from cloud provider",
                "errorCode": "", "lastUpdateTime": T1, "state": "Processing", "type": "Delete"},
            "currentStatus": {"phase": "Terminating", "lastUpdateTime": T1}
        })
    );
}

#[test]
fn extras_are_written_beside_the_operation() {
    let t = transition(None, "Cloud provider message - gone");
    let address = NodeAddress {
        type_: "InternalIP".into(),
        address: "10.0.0.2".into(),
    };
    let change = MachineStatusChange::of_at(&t, at(T1))
        .with_addresses(Some(vec![address]))
        .with_conditions(None)
        .with_last_known_state(String::new());
    let body = patch(&change);
    assert_eq!(
        body["addresses"],
        json!([{"type": "InternalIP", "address": "10.0.0.2"}])
    );
    assert_eq!(body["lastKnownState"], json!(""));
    assert!(body.get("conditions").is_none());
    assert!(body.get("currentStatus").is_none());
}

#[test]
fn the_preservation_expiry_alone_is_set_or_removed() {
    assert_eq!(
        patch(&MachineStatusChange::preserve_expiry(Field::Set(at(T2)))),
        json!({"currentStatus": {"preserveExpiryTime": T2}})
    );
    assert_eq!(
        patch(&MachineStatusChange::preserve_expiry(Field::Remove)),
        json!({"currentStatus": {"preserveExpiryTime": null}})
    );
    assert_eq!(patch(&MachineStatusChange::default()), json!({}));
}

/// Changes a deletion stages one after another in one reconcile.
fn deletion_changes() -> Vec<MachineStatusChange> {
    let terminating = transition(
        Some(MachinePhase::Terminating),
        "Set machine status to termination. Now, getting VM Status",
    );
    let mut vm_deleted = transition(None, "VM deleted");
    vm_deleted.operation.state = MachineState::Successful;
    vm_deleted.operation.error_code = Some(String::new());
    vec![
        MachineStatusChange::of_at(&terminating, at(T1)),
        MachineStatusChange::conditions(vec![NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..Default::default()
        }]),
        MachineStatusChange::of_at(&vm_deleted, at(T2)).with_last_known_state("vm-2".into()),
        MachineStatusChange::preserve_expiry(Field::Set(at(T2))),
    ]
}

#[test]
fn staged_changes_combine_like_successive_writes() {
    let changes = deletion_changes();
    for n in 1..=changes.len() {
        let mut one_by_one = stored();
        for c in &changes[..n] {
            merge(&mut one_by_one, &patch(c));
        }
        let combined = changes[..n]
            .iter()
            .cloned()
            .reduce(MachineStatusChange::then)
            .unwrap();
        let mut at_once = stored();
        merge(&mut at_once, &patch(&combined));
        assert_eq!(one_by_one, at_once, "after {n} changes");
    }
}

#[test]
fn a_change_applied_in_memory_matches_the_servers_merge() {
    for change in deletion_changes() {
        let mut on_server = stored();
        merge(&mut on_server, &patch(&change));
        let on_server: MachineStatus = serde_json::from_value(on_server).unwrap();
        let mut in_memory: MachineStatus = serde_json::from_value(stored()).unwrap();
        change.apply(&mut in_memory);
        assert_eq!(in_memory, on_server);
    }
}

#[test]
fn the_announced_phase_and_description_are_the_latest_written() {
    let changes = deletion_changes();
    let combined = changes
        .into_iter()
        .reduce(MachineStatusChange::then)
        .unwrap();
    assert_eq!(combined.phase(), Some(&MachinePhase::Terminating));
    assert_eq!(combined.description(), "VM deleted");
}
