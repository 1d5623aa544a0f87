//! Field errors in the wording of Kubernetes' `field.Error`, which the
//! reference providers' validation messages are made of, and the two ways
//! they join a list of them into one message.

use crate::Finding;
use std::fmt;

/// One validation finding about a providerSpec or Secret field. Printed as
/// Kubernetes prints a `field.Error`: `<field>: <kind>`. Never carries a
/// Secret value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.text())]
pub struct FieldError {
    /// The field path, e.g. `providerSpec.ami`, `spec.region`, `data[authURL]`.
    pub field: String,
    /// What is wrong with it.
    pub kind: FieldErrorKind,
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Required value: <detail>`.
    Required(String),
    /// `Invalid value: <value>: <detail>`; the value as Go's `%q` (a string)
    /// or `%d` (a number) prints it.
    Invalid {
        /// The rejected value, already quoted when it is a string.
        value: String,
        /// Why.
        detail: String,
    },
    /// `Forbidden: <detail>`.
    Forbidden(String),
    /// `Unsupported value: "<value>": supported values: "a", "b"`.
    NotSupported {
        /// The rejected value.
        value: String,
        /// The accepted values.
        supported: Vec<String>,
    },
    /// A finding the reference words without the field-error form: printed
    /// alone, the field only names it for `mcm validate`.
    Unworded(String),
}

impl FieldError {
    /// A missing value.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Required(detail.into()),
        }
    }

    /// A wrong value, printed with `Debug` (a string quoted, a number as is).
    pub fn invalid(
        field: impl Into<String>,
        value: impl fmt::Debug,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Invalid {
                value: format!("{value:?}"),
                detail: detail.into(),
            },
        }
    }

    /// A value that is not allowed here.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Forbidden(detail.into()),
        }
    }

    /// A value outside the supported set.
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::NotSupported {
                value: value.to_string(),
                supported: supported.iter().map(|s| s.to_string()).collect(),
            },
        }
    }

    /// A finding printed as `text` alone (about `field`).
    pub fn unworded(field: impl Into<String>, text: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Unworded(text.into()),
        }
    }

    /// Whether the finding is about `key` (the last segment of its field:
    /// `secretRef.userData`, `data[userData]`, `data.userData`).
    pub fn is_about(&self, key: &str) -> bool {
        let f = self.field.as_str();
        f == key
            || f.strip_suffix(key).is_some_and(|head| head.ends_with('.'))
            || f.ends_with(&format!("[{key}]"))
    }

    fn text(&self) -> String {
        match &self.kind {
            FieldErrorKind::Unworded(text) => text.clone(),
            kind => format!("{}: {kind}", self.field),
        }
    }
}

impl fmt::Display for FieldErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldErrorKind::Required(d) => write!(f, "Required value: {d}"),
            FieldErrorKind::Invalid { value, detail } => {
                write!(f, "Invalid value: {value}: {detail}")
            }
            FieldErrorKind::Forbidden(d) => write!(f, "Forbidden: {d}"),
            FieldErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "Unsupported value: {value:?}: supported values: {}",
                    list.join(", ")
                )
            }
            FieldErrorKind::Unworded(text) => f.write_str(text),
        }
    }
}

impl From<FieldError> for Finding {
    fn from(e: FieldError) -> Self {
        Finding::new(e.field, e.kind.to_string())
    }
}

/// How a list of findings becomes one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// As Kubernetes' `ErrorList.ToAggregate()`: one finding as is, several
    /// as `[a, b]`, a repeated finding once.
    Aggregate,
    /// As Go's `%v` prints a slice of errors: `[a b]`, also for one.
    GoSlice,
}

impl Join {
    /// The findings as one message.
    pub fn apply(self, errors: &[FieldError]) -> String {
        match self {
            Join::Aggregate => mcm_api::validation::aggregate(errors),
            Join::GoSlice => {
                let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
                format!("[{}]", texts.join(" "))
            }
        }
    }
}
