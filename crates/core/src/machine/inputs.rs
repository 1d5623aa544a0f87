//! What the controller records when a machine's inputs (its class
//! reference, class, Secret or driver) are unusable (design: machine.md, "Inputs").

use super::{MachineView, OpState, OpType, Operation, Transition};
use mcm_driver::Code;

/// Why a machine's inputs are unusable: the Warning Event's reason
/// ([`InputProblem::reason`]) and the text recorded in `lastOperation`
/// (its `Display`). Texts of mcm-rs only; the reference has none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputProblem {
    /// `spec.class` does not name a MachineClass ([`class_reference_problem`]).
    #[error("Invalid machine: spec.class must name a MachineClass (kind {kind:?}, name {name:?})")]
    ClassReference {
        /// `spec.class.kind`.
        kind: String,
        /// `spec.class.name`.
        name: String,
    },
    /// A timeout or `maxEvictRetries` of the machine is invalid (the
    /// validation's aggregated text).
    #[error("Invalid machine: {0}")]
    InvalidMachine(String),
    /// The class is not in the cache.
    #[error("MachineClass {namespace}/{name} not found")]
    ClassNotFound {
        /// The machine's namespace.
        namespace: String,
        /// The class name.
        name: String,
    },
    /// The class fails validation.
    #[error("Invalid MachineClass {class}: {}", .errors.join("; "))]
    InvalidClass {
        /// The class name.
        class: String,
        /// The validation errors.
        errors: Vec<String>,
    },
    /// A Secret the class references is missing.
    #[error("Secret {secret} referenced by MachineClass {class} not found")]
    SecretNotFound {
        /// The Secret (`namespace/name`).
        secret: String,
        /// The class name.
        class: String,
    },
    /// No driver is compiled in for the class's provider.
    #[error("No driver for provider {provider:?} of MachineClass {class} (compiled in: {})", .compiled_in.join(", "))]
    UnknownProvider {
        /// The class's `provider`.
        provider: String,
        /// The class name.
        class: String,
        /// The providers compiled in.
        compiled_in: Vec<String>,
    },
    /// The merged Secret has no `userData`.
    #[error(transparent)]
    UserData(#[from] super::UserDataError),
}

impl InputProblem {
    /// The Warning Event's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            InputProblem::ClassReference { .. } | InputProblem::InvalidMachine(_) => {
                "InvalidMachine"
            }
            InputProblem::ClassNotFound { .. } => "MachineClassNotFound",
            InputProblem::InvalidClass { .. } => "InvalidMachineClass",
            InputProblem::SecretNotFound { .. } => "SecretNotFound",
            InputProblem::UnknownProvider { .. } => "UnknownProvider",
            InputProblem::UserData(_) => "UserDataMissing",
        }
    }
}

/// Why `spec.class` cannot name a MachineClass: an empty name, or a kind
/// other than `MachineClass` (an empty kind means `MachineClass`). `None`
/// when the reference is well-formed.
pub fn class_reference_problem(kind: &str, name: &str) -> Option<InputProblem> {
    (name.is_empty() || (!kind.is_empty() && kind != "MachineClass")).then(|| {
        InputProblem::ClassReference {
            kind: kind.to_string(),
            name: name.to_string(),
        }
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
        let problem = class_reference_problem("AWSMachineClass", "c");
        assert_eq!(
            problem.as_ref().map(InputProblem::reason),
            Some("InvalidMachine")
        );
        assert!(problem.is_some_and(|p| p.to_string()
            == r#"Invalid machine: spec.class must name a MachineClass (kind "AWSMachineClass", name "c")"#));
        assert!(class_reference_problem("MachineClass", "").is_some());
    }

    #[test]
    fn each_input_problem_has_its_reason_and_text() {
        let cases = [
            (
                InputProblem::ClassNotFound {
                    namespace: "ns".into(),
                    name: "c".into(),
                },
                "MachineClassNotFound",
                "MachineClass ns/c not found",
            ),
            (
                InputProblem::InvalidClass {
                    class: "c".into(),
                    errors: vec!["a".into(), "b".into()],
                },
                "InvalidMachineClass",
                "Invalid MachineClass c: a; b",
            ),
            (
                InputProblem::SecretNotFound {
                    secret: "ns/s".into(),
                    class: "c".into(),
                },
                "SecretNotFound",
                "Secret ns/s referenced by MachineClass c not found",
            ),
            (
                InputProblem::UnknownProvider {
                    provider: "x".into(),
                    class: "c".into(),
                    compiled_in: vec!["aws".into(), "local".into()],
                },
                "UnknownProvider",
                r#"No driver for provider "x" of MachineClass c (compiled in: aws, local)"#,
            ),
            (
                InputProblem::InvalidMachine("spec.creationTimeout: bad".into()),
                "InvalidMachine",
                "Invalid machine: spec.creationTimeout: bad",
            ),
            (
                InputProblem::from(crate::machine::UserDataError::Missing("m1".into())),
                "UserDataMissing",
                r#"userdata field not found in secret for machine "m1""#,
            ),
        ];
        for (problem, reason, text) in cases {
            assert_eq!(
                (problem.reason(), problem.to_string().as_str()),
                (reason, text)
            );
        }
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
