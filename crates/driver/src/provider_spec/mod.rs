//! The front half every provider's calls share (design:
//! docs/design/driver.md, "Provider skeleton"): check the class's provider,
//! decode its providerSpec ([`crate::spec_decode`]), validate it and the
//! Secret, collecting every finding, and refuse with one `InvalidArgument`
//! whose message is the provider's reference wording ([`Messages`]). A
//! provider implements [`ProviderSpec`] for its spec type; the calls use
//! [`decode`] (CreateMachine), [`decode_existing`] (calls on existing VMs)
//! and [`decode_class`]; `Driver::check_class` and
//! `Driver::provider_spec_warnings` are [`check_class`] and [`warnings`].

mod field;
mod secret;
#[cfg(test)]
mod tests;

pub use field::{FieldError, FieldErrorKind, Join};
pub use secret::{SecretData, SecretUse};

use crate::spec_decode::{self, DecodeError, Decoded};
use crate::{ClassCheck, Finding, Status};
use k8s_openapi::api::core::v1::Secret;
use mcm_api::MachineClass;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What warnings and errors call the providerSpec.
pub const ROOT: &str = "providerSpec";

/// The wording of a provider's refusals: the reference provider's, so a
/// Machine's `lastOperation` reads as it did with the Go controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Messages {
    /// How a list of findings is joined.
    pub join: Join,
    /// Before a decode error (`providerSpec: cannot decode the AWS providerSpec: `).
    pub decode: &'static str,
    /// Before the spec's findings (`error while validating ProviderSpec `).
    pub spec: &'static str,
    /// Before the Secret's findings; `None`: they join the spec's findings
    /// in one list under [`Messages::spec`]. With a prefix of their own the
    /// spec's findings are reported first, as the reference checks the
    /// spec before the Secret.
    pub secret: Option<&'static str>,
}

/// A provider's typed providerSpec: how it decodes, validates, and what its
/// Secret must hold.
pub trait ProviderSpec: DeserializeOwned {
    /// The `provider` a MachineClass of this driver carries (`AWS`).
    const PROVIDER: &'static str;
    /// The wording of refusals.
    const MESSAGES: Messages;

    /// Whether a class's `provider` is this driver's. Default: exactly
    /// [`ProviderSpec::PROVIDER`].
    fn serves(provider: &str) -> bool {
        provider == Self::PROVIDER
    }

    /// The refusal of a class of another provider.
    fn wrong_provider(found: &str) -> String {
        format!(
            "requested for Provider '{found}', we only support '{}'",
            Self::PROVIDER
        )
    }

    /// Decodes a providerSpec with Go's key matching; `null` is the empty
    /// spec (which validation then rejects field by field).
    fn decode(value: &Value) -> Result<Decoded<Self>, DecodeError> {
        match value {
            Value::Null => spec_decode::decode(&Value::Object(Default::default()), ROOT),
            v => spec_decode::decode(v, ROOT),
        }
    }

    /// The refusal of a providerSpec that does not decode.
    fn decode_failed(e: &DecodeError) -> String {
        format!("{}{e}", Self::MESSAGES.decode)
    }

    /// Every finding about the spec (empty: valid), in the reference's order.
    fn validate(&self) -> Vec<FieldError>;

    /// Every finding about the Secret for a call of `purpose`. Names keys,
    /// never values.
    fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError>;
}

/// Which step refused a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The class names another provider.
    Provider,
    /// The providerSpec does not decode.
    Decode,
    /// The providerSpec does not validate.
    Spec,
    /// The Secret lacks what the call needs.
    Secret,
}

/// A class or Secret refused, with the provider's message. Becomes an
/// `InvalidArgument` [`Status`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// The step that refused.
    pub stage: Stage,
    /// The message, in the provider's wording.
    pub message: String,
}

impl From<Invalid> for Status {
    fn from(e: Invalid) -> Self {
        Status::invalid_argument(e.message)
    }
}

/// Checks the provider and decodes the providerSpec, without validating it.
pub fn decode_class<T: ProviderSpec>(class: &MachineClass) -> Result<Decoded<T>, Invalid> {
    if !T::serves(&class.provider) {
        return Err(Invalid {
            stage: Stage::Provider,
            message: T::wrong_provider(&class.provider),
        });
    }
    T::decode(&class.provider_spec).map_err(|e| Invalid {
        stage: Stage::Decode,
        message: T::decode_failed(&e),
    })
}

/// The findings step alone: the spec's (when `validate_spec`) and the
/// Secret's for `purpose`, one refusal in the provider's wording.
pub fn validate<T: ProviderSpec>(
    spec: &T,
    validate_spec: bool,
    secret: &Secret,
    purpose: SecretUse,
) -> Result<(), Invalid> {
    let m = T::MESSAGES;
    let mut spec_errs = if validate_spec {
        spec.validate()
    } else {
        Vec::new()
    };
    let secret_errs = T::validate_secret(SecretData(secret), purpose);
    match m.secret {
        None => {
            spec_errs.extend(secret_errs);
            refuse(Stage::Spec, m.spec, m.join, &spec_errs)
        }
        Some(secret_prefix) => {
            refuse(Stage::Spec, m.spec, m.join, &spec_errs)?;
            refuse(Stage::Secret, secret_prefix, m.join, &secret_errs)
        }
    }
}

fn refuse(stage: Stage, prefix: &str, join: Join, errs: &[FieldError]) -> Result<(), Invalid> {
    if errs.is_empty() {
        return Ok(());
    }
    Err(Invalid {
        stage,
        message: format!("{prefix}{}", join.apply(errs)),
    })
}

/// CreateMachine's check: provider, decode, and every finding of the spec
/// and the Secret (credentials and user data).
pub fn decode<T: ProviderSpec>(
    class: &MachineClass,
    secret: &Secret,
) -> Result<Decoded<T>, Invalid> {
    let d = decode_class::<T>(class)?;
    validate(&d.value, true, secret, SecretUse::Create)?;
    Ok(d)
}

/// The check of a call on existing VMs: provider, decode and the Secret's
/// credentials; the spec is not validated, so that a class that no longer
/// validates still lets its machines be found and deleted.
pub fn decode_existing<T: ProviderSpec>(
    class: &MachineClass,
    secret: &Secret,
) -> Result<Decoded<T>, Invalid> {
    let d = decode_class::<T>(class)?;
    validate(&d.value, false, secret, SecretUse::Existing)?;
    Ok(d)
}

/// The decoder's warnings about a providerSpec, as sentences
/// (`Driver::provider_spec_warnings`).
pub fn warnings<T: ProviderSpec>(provider_spec: &Value) -> Vec<String> {
    let warnings = match T::decode(provider_spec) {
        Ok(d) => d.warnings,
        Err(e) => e.warnings,
    };
    warnings.iter().map(ToString::to_string).collect()
}

/// What CreateMachine would refuse about a class and its Secret, and the
/// decoder's warnings, offline (`Driver::check_class`): every finding with
/// its field, never a Secret value.
pub fn check_class<T: ProviderSpec>(class: &MachineClass, secret: &Secret) -> ClassCheck {
    let mut check = ClassCheck::default();
    if !T::serves(&class.provider) {
        check.errors.push(Finding::new(
            "provider",
            format!("{:?}: this driver serves {:?}", class.provider, T::PROVIDER),
        ));
    }
    match T::decode(&class.provider_spec) {
        Ok(d) => {
            check.warn(d.warnings);
            check
                .errors
                .extend(d.value.validate().into_iter().map(Finding::from));
        }
        Err(e) => check.decode_failed(e),
    }
    check.errors.extend(
        T::validate_secret(SecretData(secret), SecretUse::Create)
            .into_iter()
            .map(Finding::from),
    );
    check
}
