//! The provider Secret: credentials (static keys or workload identity) and user data.

use super::validate::{required, FieldError};
use super::{
    SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID, SECRET_ALT_SECRET_ACCESS_KEY, SECRET_ROLE_ARN,
    SECRET_SECRET_ACCESS_KEY, SECRET_USER_DATA, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE,
};
use k8s_openapi::api::core::v1::Secret;
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

fn secret_string(secret: &Secret, key: &str) -> String {
    secret_value(secret, key)
        .map(|v| String::from_utf8_lossy(&v).trim().to_string())
        .unwrap_or_default()
}

/// Validates the provider secret (credentials and userData).
pub fn validate_secret(secret: &Secret) -> Vec<FieldError> {
    let f = "secretRef";
    let mut errs = Vec::new();
    let user_data_missing = secret_value(secret, SECRET_USER_DATA).is_none_or(|v| v.is_empty());
    if secret_value(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE).is_some() {
        if secret_string(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE).is_empty() {
            errs.push(required(
                format!("{f}.workloadIdentityTokenFile"),
                "Workload identity token file is required",
            ));
        }
        if secret_string(secret, SECRET_ROLE_ARN).is_empty() {
            errs.push(required(
                format!("{f}.roleARN"),
                "Role ARN is required when workload identity is used",
            ));
        }
    } else {
        if secret_string(secret, SECRET_ACCESS_KEY_ID).is_empty()
            && secret_string(secret, SECRET_ALT_ACCESS_KEY_ID).is_empty()
        {
            errs.push(required(
                format!("{f}.AWSAccessKeyID"),
                format!("Mention atleast {SECRET_ACCESS_KEY_ID} or {SECRET_ALT_ACCESS_KEY_ID}"),
            ));
        }
        if secret_string(secret, SECRET_SECRET_ACCESS_KEY).is_empty()
            && secret_string(secret, SECRET_ALT_SECRET_ACCESS_KEY).is_empty()
        {
            errs.push(required(
                format!("{f}.AWSSecretAccessKey"),
                format!(
                    "Mention atleast {SECRET_SECRET_ACCESS_KEY} or {SECRET_ALT_SECRET_ACCESS_KEY}"
                ),
            ));
        }
    }
    if user_data_missing {
        errs.push(required(format!("{f}.userData"), "Mention userData"));
    }
    errs
}

/// The credentials of a (validated) secret.
pub fn credentials(secret: &Secret) -> Credentials {
    if secret_value(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE).is_some() {
        return Credentials::WebIdentity {
            token_file: secret_string(secret, SECRET_WORKLOAD_IDENTITY_TOKEN_FILE),
            role_arn: secret_string(secret, SECRET_ROLE_ARN),
        };
    }
    let first = |a: &str, b: &str| {
        let v = secret_string(secret, a);
        if v.is_empty() {
            secret_string(secret, b)
        } else {
            v
        }
    };
    Credentials::Static {
        access_key_id: first(SECRET_ACCESS_KEY_ID, SECRET_ALT_ACCESS_KEY_ID),
        secret_access_key: first(SECRET_SECRET_ACCESS_KEY, SECRET_ALT_SECRET_ACCESS_KEY),
    }
}
