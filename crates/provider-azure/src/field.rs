//! Field errors in the wording of Kubernetes' `field.Error`, which the
//! reference provider's validation messages are made of:
//! `<path>: Required value: <detail>`, `<path>: Invalid value: <value>: <detail>`,
//! `<path>: Forbidden: <detail>`, `<path>: Unsupported value: "<v>": supported values: "a", "b"`.

use std::fmt;

/// One validation finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `providerSpec.location`.
    pub path: String,
    /// What is wrong.
    pub kind: FieldErrorKind,
}

/// The kinds of findings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A required value is missing.
    Required(String),
    /// The value is wrong; the value as Go's `%q`/`%d` prints it, and why.
    Invalid(String, String),
    /// The value is not allowed here.
    Forbidden(String),
    /// The value is not one of the supported values.
    NotSupported(String, Vec<String>),
}

impl FieldError {
    /// A missing value.
    pub fn required(path: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::Required(detail.into()),
        }
    }

    /// A wrong string value (printed quoted).
    pub fn invalid_str(path: impl Into<String>, value: &str, detail: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::Invalid(format!("{value:?}"), detail.into()),
        }
    }

    /// A wrong number.
    pub fn invalid_num(path: impl Into<String>, value: i64, detail: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::Invalid(value.to_string(), detail.into()),
        }
    }

    /// A value that is not allowed.
    pub fn forbidden(path: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::Forbidden(detail.into()),
        }
    }

    /// A value outside the supported set.
    pub fn not_supported(path: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        FieldError {
            path: path.into(),
            kind: FieldErrorKind::NotSupported(
                value.to_string(),
                supported.iter().map(|s| s.to_string()).collect(),
            ),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FieldErrorKind::Required(d) => write!(f, "{}: Required value: {d}", self.path),
            FieldErrorKind::Invalid(v, d) => write!(f, "{}: Invalid value: {v}: {d}", self.path),
            FieldErrorKind::Forbidden(d) => write!(f, "{}: Forbidden: {d}", self.path),
            FieldErrorKind::NotSupported(v, supported) => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "{}: Unsupported value: {v:?}: supported values: {}",
                    self.path,
                    list.join(", ")
                )
            }
        }
    }
}

/// A list of findings as Go's `%v` prints a `field.ErrorList`: `[e1 e2 …]`.
pub fn format_list(errors: &[FieldError]) -> String {
    let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(" "))
}
