//! One test per transition of the deletion decisions that depend on the VM record.

use super::*;
use crate::machine::{markers, OpState};
use mcm_api::MachineSpec;
use serde_json::json;

fn machine(v: serde_json::Value) -> Machine {
    let mut base = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m"}, "spec": {"class": {"name": "c"}},
    });
    if let (Some(b), Some(extra)) = (base.as_object_mut(), v.as_object()) {
        for (k, val) in extra {
            if let (Some(bo), Some(eo)) = (
                b.get_mut(k).and_then(|x| x.as_object_mut()),
                val.as_object(),
            ) {
                bo.extend(eo.clone());
            } else {
                b.insert(k.clone(), val.clone());
            }
        }
    }
    serde_json::from_value(base).unwrap_or_else(|_| Machine::new("m", MachineSpec::default()))
}

fn recorded(value: &str) -> Machine {
    machine(json!({"metadata": {"annotations": {CLOUD_CREATE_ANNOTATION: value}}}))
}

fn invalid() -> Result<GetMachineStatusResponse, Status> {
    Err(Status::invalid_argument("providerSpec: cannot decode"))
}

#[test]
fn the_record_reads_provider_id_node_label_and_annotation() {
    assert_eq!(VmRecord::of(&machine(json!({}))), VmRecord::Unknown);
    assert_eq!(VmRecord::of(&recorded("never")), VmRecord::NeverCreated);
    assert_eq!(
        VmRecord::of(&recorded("attempted")),
        VmRecord::CreateAttempted
    );
    assert_eq!(VmRecord::of(&recorded("garbage")), VmRecord::Unknown);
    let with_pid = machine(json!({
        "metadata": {"annotations": {CLOUD_CREATE_ANNOTATION: "never"}},
        "spec": {"providerID": "aws:///r/i-1"},
    }));
    assert_eq!(
        VmRecord::of(&with_pid),
        VmRecord::HasVm,
        "a providerID beats the record"
    );
    let with_node = machine(json!({
        "metadata": {"labels": {"node": "n1"}, "annotations": {CLOUD_CREATE_ANNOTATION: "never"}},
    }));
    assert_eq!(VmRecord::of(&with_node), VmRecord::HasVm);
}

#[test]
fn only_a_fresh_machine_is_recorded_as_never_created() {
    assert!(record_never_created(&machine(json!({}))));
    let seen_before =
        machine(json!({"metadata": {"finalizers": [mcm_api::constants::MCM_FINALIZER]}}));
    assert!(
        !record_never_created(&seen_before),
        "a machine with the finalizer may have been handled by the Go controller"
    );
    let with_phase = machine(json!({"status": {"currentStatus": {"phase": "CrashLoopBackOff"}}}));
    assert!(!record_never_created(&with_phase));
    assert!(!record_never_created(&machine(
        json!({"spec": {"providerID": "x:///a/b"}})
    )));
    assert!(!record_never_created(&recorded("attempted")));
}

#[test]
fn the_create_attempt_is_recorded_once() {
    assert!(must_record_create_attempt(&machine(json!({}))));
    assert!(must_record_create_attempt(&recorded("never")));
    assert!(!must_record_create_attempt(&recorded("attempted")));
}

#[test]
fn status_invalid_argument_for_a_never_created_machine_skips_to_node_deletion() {
    let t = after_get_vm_status(true, false, Some(&invalid()), VmRecord::NeverCreated);
    assert_eq!(t.operation.state, OpState::Processing);
    assert!(t
        .operation
        .description
        .ends_with(markers::INITIATE_NODE_DELETION));
    assert!(t.operation.description.contains("No VM was ever created"));
}

#[test]
fn status_invalid_argument_when_a_vm_may_exist_blocks_with_what_to_fix() {
    for record in [
        VmRecord::HasVm,
        VmRecord::CreateAttempted,
        VmRecord::Unknown,
    ] {
        let t = after_get_vm_status(true, false, Some(&invalid()), record);
        assert_eq!(t.operation.state, OpState::Failed, "{record:?}");
        assert_eq!(t.operation.error_code.as_deref(), Some("InvalidArgument"));
        let d = &t.operation.description;
        assert!(d.ends_with(markers::GET_VM_STATUS), "{d}");
        assert!(d.contains("fix the MachineClass"), "{d}");
        assert!(d.contains(record.why_a_vm_may_exist()), "{d}");
        assert!(!d.contains("without retry"), "{d}");
    }
}

#[test]
fn status_transient_error_is_retried_even_for_a_recorded_machine() {
    let e = Err(Status::new(Code::Unavailable, "down"));
    let t = after_get_vm_status(true, false, Some(&e), VmRecord::Unknown);
    assert_eq!(t.operation.state, OpState::Failed);
    assert!(t.operation.description.ends_with(markers::GET_VM_STATUS));
    let t = after_get_vm_status(true, false, Some(&e), VmRecord::NeverCreated);
    assert!(t
        .operation
        .description
        .ends_with(markers::INITIATE_NODE_DELETION));
}

#[test]
fn status_not_found_goes_to_drain_whatever_the_record() {
    let nf = Err(Status::not_found("x"));
    for record in [VmRecord::NeverCreated, VmRecord::Unknown] {
        let t = after_get_vm_status(true, false, Some(&nf), record);
        assert!(t.operation.description.ends_with(markers::INITIATE_DRAIN));
    }
}

#[test]
fn delete_refused_for_a_never_created_machine_goes_on_to_node_deletion() {
    let t = after_delete_vm::<()>(
        &Err(Status::invalid_argument("cannot decode")),
        VmRecord::NeverCreated,
    );
    assert_eq!(t.operation.state, OpState::Processing);
    assert!(t
        .operation
        .description
        .ends_with(markers::INITIATE_NODE_DELETION));
}

#[test]
fn delete_refused_when_a_vm_may_exist_keeps_the_machine() {
    for record in [
        VmRecord::HasVm,
        VmRecord::CreateAttempted,
        VmRecord::Unknown,
    ] {
        let t = after_delete_vm::<()>(&Err(Status::invalid_argument("cannot decode")), record);
        assert_eq!(t.operation.state, OpState::Failed);
        assert!(t
            .operation
            .description
            .ends_with(markers::INITIATE_VM_DELETION));
        assert!(t.operation.description.contains("fix the MachineClass"));
    }
}

#[test]
fn no_vm_transition_names_the_reason_and_the_next_marker() {
    let t = no_vm_ever_created("MachineClass c not found");
    assert!(t.operation.description.contains("MachineClass c not found"));
    assert!(t
        .operation
        .description
        .ends_with(markers::INITIATE_NODE_DELETION));
    assert_eq!(t.phase, None);
}
