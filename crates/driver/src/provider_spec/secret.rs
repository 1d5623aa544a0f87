//! Reading a class's (merged) Secret for validation: values by key, trimmed
//! text, and the required-key check every provider makes. `Debug` shows the
//! keys only.

use super::FieldError;
use crate::{secret_bytes, RedactedSecret};
use k8s_openapi::api::core::v1::Secret;
use std::fmt;

/// What a call needs of the Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretUse {
    /// CreateMachine (and `mcm validate`): credentials and user data.
    Create,
    /// A call on existing VMs (DeleteMachine, GetMachineStatus,
    /// ListMachines, UpdateMachine): credentials only; user data matters to
    /// a new VM alone.
    Existing,
}

impl SecretUse {
    /// Whether the call needs the user data.
    pub fn needs_user_data(self) -> bool {
        self == SecretUse::Create
    }
}

/// A Secret as validation reads it: `data` first, then `stringData`, as the
/// API server merges them. Never prints a value.
#[derive(Clone, Copy)]
pub struct SecretData<'a>(pub &'a Secret);

impl fmt::Debug for SecretData<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        RedactedSecret(self.0).fmt(f)
    }
}

impl SecretData<'_> {
    /// The value of `key` as bytes.
    pub fn bytes(&self, key: &str) -> Option<Vec<u8>> {
        secret_bytes(self.0, key)
    }

    /// Whether `key` is there (in `data` or `stringData`), even empty.
    pub fn has(&self, key: &str) -> bool {
        self.0.data.as_ref().is_some_and(|d| d.contains_key(key))
            || self
                .0
                .string_data
                .as_ref()
                .is_some_and(|d| d.contains_key(key))
    }

    /// The value of `key` as text, trimmed ("" when missing).
    pub fn text(&self, key: &str) -> String {
        self.bytes(key)
            .map(|v| String::from_utf8_lossy(&v).trim().to_string())
            .unwrap_or_default()
    }

    /// The first non-empty trimmed text among `keys` (spellings of one
    /// value, preferred first), "" when none has one.
    pub fn first_text(&self, keys: &[&str]) -> String {
        keys.iter()
            .map(|k| self.text(k))
            .find(|v| !v.is_empty())
            .unwrap_or_default()
    }

    /// Whether `key` holds at least one byte.
    pub fn is_set(&self, key: &str) -> bool {
        self.bytes(key).is_some_and(|v| !v.is_empty())
    }

    /// Adds a `Required value` finding about `field` when none of `keys`
    /// (spellings of one value) has a non-blank value. The finding names
    /// keys, never values.
    pub fn require(
        &self,
        errs: &mut Vec<FieldError>,
        field: impl Into<String>,
        keys: &[&str],
        detail: impl Into<String>,
    ) {
        if self.first_text(keys).is_empty() {
            errs.push(FieldError::required(field, detail));
        }
    }
}
