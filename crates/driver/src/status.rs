//! The status error that every driver call returns, and its text wire form.
//!
//! The text form `machine codes error: code = [<Name>] message = [<msg>]` is
//! what out-of-process providers send; [`Status::parse`] reads it back the way
//! the reference's `status.FromError` does (two top-level bracket groups).

use crate::codes::Code;
use std::fmt;

/// What a provider knows about a VM when it answers with an error code that
/// still identifies the machine (the reference returns a response together with
/// `Uninitialized`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachineIdentity {
    /// The provider ID of the VM, e.g. `aws:///eu-west-1/i-0123`.
    pub provider_id: String,
    /// The name the VM's Node has (or will have).
    pub node_name: String,
    /// The VM's addresses, when the provider knows them.
    pub addresses: Vec<k8s_openapi::api::core::v1::NodeAddress>,
}

/// A machine error: a [`Code`] and a message, optionally with the identity of
/// the VM it concerns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct Status {
    /// The error code.
    pub code: Code,
    /// The provider's message.
    pub message: String,
    /// The VM this error concerns, when the provider knows it (set with `Uninitialized`).
    pub machine: Option<Box<MachineIdentity>>,
}

/// The error returned when a text is not in the status wire form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a machine codes status error: expected 2 bracket groups, found {groups}")]
pub struct ParseStatusError {
    /// How many top-level bracket groups were found.
    pub groups: usize,
}

impl Status {
    /// A status with a code and a message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Status {
            code,
            message: message.into(),
            machine: None,
        }
    }

    /// `Uninitialized`, with the VM's identity: the VM exists but InitializeMachine has not
    /// (yet) succeeded on it.
    pub fn uninitialized(message: impl Into<String>, machine: MachineIdentity) -> Self {
        Status {
            code: Code::Uninitialized,
            message: message.into(),
            machine: Some(Box::new(machine)),
        }
    }

    /// Shorthand for `Unimplemented`.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Status::new(Code::Unimplemented, message)
    }

    /// Shorthand for `NotFound`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Status::new(Code::NotFound, message)
    }

    /// Shorthand for `InvalidArgument`.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Status::new(Code::InvalidArgument, message)
    }

    /// Shorthand for `Internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Status::new(Code::Internal, message)
    }

    /// Parses the wire form. Like the reference, the text must hold exactly two
    /// top-level `[...]` groups (brackets may nest inside a group): the code name
    /// and the message. Never panics.
    pub fn parse(text: &str) -> Result<Status, ParseStatusError> {
        let mut groups: Vec<String> = Vec::new();
        let mut depth = 0usize;
        let mut current = String::new();
        for ch in text.chars() {
            match ch {
                '[' => {
                    if depth > 0 {
                        current.push(ch);
                    }
                    depth += 1;
                }
                ']' if depth > 0 => {
                    depth -= 1;
                    if depth == 0 {
                        groups.push(std::mem::take(&mut current));
                    } else {
                        current.push(ch);
                    }
                }
                _ if depth > 0 => current.push(ch),
                _ => {}
            }
        }
        if groups.len() != 2 {
            return Err(ParseStatusError {
                groups: groups.len(),
            });
        }
        let message = groups.pop().unwrap_or_default();
        let name = groups.pop().unwrap_or_default();
        Ok(Status::new(Code::from_name(&name), message))
    }

    /// Decodes any error text: the wire form gives its code and message, any
    /// other text gives `Unknown` with the whole text as message and `decoded=false`.
    pub fn decode(text: &str) -> (Status, bool) {
        match Status::parse(text) {
            Ok(s) => (s, true),
            Err(_) => (Status::new(Code::Unknown, text), false),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "machine codes error: code = [{}] message = [{}]",
            self.code, self.message
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn renders_the_reference_wire_form() {
        let s = Status::new(Code::Uninitialized, "src/dst check still on");
        assert_eq!(
            s.to_string(),
            "machine codes error: code = [Uninitialized] message = [src/dst check still on]"
        );
    }

    #[test]
    fn parses_nested_brackets_inside_the_message() {
        let s = Status::parse("machine codes error: code = [Internal] message = [a [b] c]")
            .expect("two groups");
        assert_eq!(s.code, Code::Internal);
        assert_eq!(s.message, "a [b] c");
    }

    #[test]
    fn rejects_texts_without_exactly_two_groups() {
        assert_eq!(Status::parse("plain error").unwrap_err().groups, 0);
        assert_eq!(Status::parse("[a] [b] [c]").unwrap_err().groups, 3);
        let (s, ok) = Status::decode("connection refused");
        assert!(!ok);
        assert_eq!(s.code, Code::Unknown);
        assert_eq!(s.message, "connection refused");
    }

    #[test]
    fn an_unknown_code_name_decodes_as_unknown() {
        let s = Status::parse("code = [Bogus] message = [x]").expect("two groups");
        assert_eq!(s.code, Code::Unknown);
    }

    fn any_code() -> impl Strategy<Value = Code> {
        (0u32..40).prop_map(Code::from_value)
    }

    proptest! {
        #[test]
        fn parse_never_panics_on_any_input(text in any::<String>()) {
            let _ = Status::parse(&text);
            let _ = Status::decode(&text);
        }

        #[test]
        fn parse_never_panics_on_bracket_soup(text in "[\\[\\]a-z =:]{0,64}") {
            let _ = Status::parse(&text);
        }

        #[test]
        fn display_then_parse_round_trips(code in any_code(), message in "[^\\[\\]]{0,80}") {
            let s = Status::new(code, message.clone());
            let back = Status::parse(&s.to_string()).expect("round trip");
            prop_assert_eq!(back.code, code);
            prop_assert_eq!(back.message, message);
        }

        #[test]
        fn balanced_brackets_in_messages_round_trip(inner in "[a-z ]{0,10}") {
            let message = format!("x [{inner}] y [[{inner}]]");
            let s = Status::new(Code::Internal, message.clone());
            let back = Status::parse(&s.to_string()).expect("round trip");
            prop_assert_eq!(back.message, message);
        }
    }
}
