//! The offline check of a MachineClass and its Secret
//! ([`crate::Driver::check_class`]): what `mcm validate` prints.

use crate::spec_decode::{DecodeError, KeyWarning};
use std::fmt;

/// One error or warning about a class or its Secret, with the field it concerns.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Finding {
    /// The field, e.g. `providerSpec.disks[0].sizeGb` or `secretRef.userData`.
    pub field: String,
    /// What is wrong with it. Never a Secret value.
    pub message: String,
}

impl Finding {
    /// A finding about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl From<KeyWarning> for Finding {
    fn from(w: KeyWarning) -> Self {
        Finding {
            field: w.field,
            message: w.message,
        }
    }
}

/// What the offline check of a class found: errors (the provider refuses to
/// create machines of the class) and warnings (it works, but not as written).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassCheck {
    /// What makes CreateMachine refuse the class.
    pub errors: Vec<Finding>,
    /// Keys read under another spelling, ignored or unknown.
    pub warnings: Vec<Finding>,
}

impl ClassCheck {
    /// Whether the class would be accepted.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Adds a decode failure: its message as an error, its warnings as warnings.
    pub fn decode_failed(&mut self, e: DecodeError) {
        self.warnings
            .extend(e.warnings.into_iter().map(Finding::from));
        self.errors.push(Finding::new(e.field, e.message));
    }

    /// Adds decode warnings.
    pub fn warn(&mut self, warnings: impl IntoIterator<Item = KeyWarning>) {
        self.warnings
            .extend(warnings.into_iter().map(Finding::from));
    }
}
