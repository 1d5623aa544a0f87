//! The provider Secret: credentials (static keys or workload identity) and user data.

use super::{
    SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID, SECRET_ALT_SECRET_ACCESS_KEY, SECRET_ROLE_ARN,
    SECRET_SECRET_ACCESS_KEY, SECRET_USER_DATA, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE,
};
use k8s_openapi::api::core::v1::Secret;
use mcm_driver::provider_spec::{FieldError, SecretData, SecretUse};
use std::fmt;

/// The credentials a secret carries.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// Static access keys.
    Static {
        /// Access key ID.
        access_key_id: String,
        /// Secret access key.
        secret_access_key: String,
    },
    /// AssumeRoleWithWebIdentity with a projected token file.
    WebIdentity {
        /// Path of the token file.
        token_file: String,
        /// Role to assume.
        role_arn: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret key.
        match self {
            Credentials::Static { access_key_id, .. } => f
                .debug_struct("Static")
                .field("access_key_id", access_key_id)
                .finish_non_exhaustive(),
            Credentials::WebIdentity { role_arn, .. } => f
                .debug_struct("WebIdentity")
                .field("role_arn", role_arn)
                .finish_non_exhaustive(),
        }
    }
}

pub use mcm_driver::secret_bytes as secret_value;

/// The Secret's findings for a call of `purpose`: the credentials (static
/// keys or workload identity) and, for a new VM, the user data.
pub fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
    let f = "secretRef";
    let mut errs = Vec::new();
    if secret.has(SECRET_WORKLOAD_IDENTITY_TOKEN_FILE) {
        secret.require(
            &mut errs,
            format!("{f}.workloadIdentityTokenFile"),
            &[SECRET_WORKLOAD_IDENTITY_TOKEN_FILE],
            "Workload identity token file is required",
        );
        secret.require(
            &mut errs,
            format!("{f}.roleARN"),
            &[SECRET_ROLE_ARN],
            "Role ARN is required when workload identity is used",
        );
    } else {
        secret.require(
            &mut errs,
            format!("{f}.AWSAccessKeyID"),
            &[SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID],
            format!("Mention atleast {SECRET_ACCESS_KEY_ID} or {SECRET_ALT_ACCESS_KEY_ID}"),
        );
        secret.require(
            &mut errs,
            format!("{f}.AWSSecretAccessKey"),
            &[SECRET_SECRET_ACCESS_KEY, SECRET_ALT_SECRET_ACCESS_KEY],
            format!("Mention atleast {SECRET_SECRET_ACCESS_KEY} or {SECRET_ALT_SECRET_ACCESS_KEY}"),
        );
    }
    if purpose.needs_user_data() && !secret.is_set(SECRET_USER_DATA) {
        errs.push(FieldError::required(
            format!("{f}.userData"),
            "Mention userData",
        ));
    }
    errs
}

/// The credentials of a (validated) secret.
pub fn credentials(secret: &Secret) -> Credentials {
    let s = SecretData(secret);
    if s.has(SECRET_WORKLOAD_IDENTITY_TOKEN_FILE) {
        return Credentials::WebIdentity {
            token_file: s.text(SECRET_WORKLOAD_IDENTITY_TOKEN_FILE),
            role_arn: s.text(SECRET_ROLE_ARN),
        };
    }
    Credentials::Static {
        access_key_id: s.first_text(&[SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID]),
        secret_access_key: s.first_text(&[SECRET_SECRET_ACCESS_KEY, SECRET_ALT_SECRET_ACCESS_KEY]),
    }
}
