//! What the controller records when a machine's inputs (its class
//! reference, class, Secret or driver) are unusable (design: machine.md, "Inputs").

use super::{MachineView, OpState, OpType, Operation, Transition};
use mcm_driver::Code;

/// Why `spec.class` cannot name a MachineClass: an empty name, or a kind
/// other than `MachineClass` (an empty kind means `MachineClass`). `None`
/// when the reference is well-formed.
pub fn class_reference_problem(kind: &str, name: &str) -> Option<String> {
    (name.is_empty() || (!kind.is_empty() && kind != "MachineClass")).then(|| {
        format!(
            "Invalid machine: spec.class must name a MachineClass (kind {kind:?}, name {name:?})"
        )
    })
}

/// The status that records an input problem: `lastOperation` Failed with
/// `InvalidArgument`, of the Delete type while the machine is being
/// deleted and of the Create type otherwise; the phase stays. `None` when
/// the same message is recorded already (no write, no Event).
pub fn input_problem(m: &MachineView, message: &str) -> Option<Transition> {
    let recorded = m
        .last_operation
        .as_ref()
        .is_some_and(|(d, _, _)| d == message);
    if recorded {
        return None;
    }
    let kind = if m.is_deleting() {
        OpType::Delete
    } else {
        OpType::Create
    };
    Some(Transition {
        phase: None,
        operation: Operation {
            description: message.to_string(),
            error_code: Some(Code::InvalidArgument.name()),
            state: OpState::Failed,
            kind,
        },
        timeout_active: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::tests::{t0, view};
    use mcm_api::MachinePhase as Phase;

    #[test]
    fn a_class_reference_must_name_a_machine_class() {
        assert_eq!(class_reference_problem("", "c"), None);
        assert_eq!(class_reference_problem("MachineClass", "c"), None);
        assert!(class_reference_problem("AWSMachineClass", "c")
            .is_some_and(|m| m.contains("AWSMachineClass")));
        assert!(class_reference_problem("MachineClass", "").is_some());
    }

    #[test]
    fn an_input_problem_is_recorded_once_as_a_failed_operation_of_the_flow_in_progress() {
        let m = view(Phase::Pending);
        let t = input_problem(&m, "MachineClass ns/c not found");
        let op = t.map(|t| (t.phase, t.operation));
        assert!(
            matches!(&op, Some((None, o)) if o.kind == OpType::Create && o.state == OpState::Failed && o.error_code.as_deref() == Some("InvalidArgument"))
        );
        let deleting = MachineView {
            deleting_since: Some(t0()),
            ..view(Phase::Terminating)
        };
        assert!(input_problem(&deleting, "x").is_some_and(|t| t.operation.kind == OpType::Delete));
        let recorded = MachineView {
            last_operation: Some(("x".into(), OpState::Failed, OpType::Create)),
            ..view(Phase::Pending)
        };
        assert_eq!(input_problem(&recorded, "x"), None);
    }
}
