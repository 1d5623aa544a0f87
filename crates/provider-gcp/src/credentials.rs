//! Credentials from the MachineClass Secret, checked as the reference checks
//! them before anything is sent: a `service_account` JSON may only carry an
//! allow-listed set of fields; an `external_account` (workload identity)
//! config must use Google's STS endpoint, the JWT subject token type, the
//! Gardener workload-identity token file and, if any, an IAM Credentials
//! `generateAccessToken` impersonation URL. Anything else is refused.

use crate::validation::{
    SECRET_CREDENTIALS_CONFIG, SECRET_PROJECT_ID, SECRET_SERVICE_ACCOUNT_JSON,
    SECRET_SERVICE_ACCOUNT_JSON_ALT,
};
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;
use std::hash::{DefaultHasher, Hash, Hasher};

/// The OAuth scope the driver asks for.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The only STS token URL accepted for workload identity.
pub const ALLOWED_TOKEN_URL: &str = "https://sts.googleapis.com/v1/token";
/// The only subject token type accepted for workload identity.
pub const ALLOWED_SUBJECT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
/// The only subject token file accepted for workload identity.
pub const ALLOWED_TOKEN_FILE: &str = "/var/run/secrets/gardener.cloud/workload-identity/token";
const IMPERSONATION_PREFIX: &str =
    "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/";
const IMPERSONATION_SUFFIX: &str = ":generateAccessToken";

/// The fields a `service_account` JSON may carry.
pub const SERVICE_ACCOUNT_ALLOWED_FIELDS: [&str; 11] = [
    "type",
    "project_id",
    "client_email",
    "universe_domain",
    "auth_uri",
    "auth_provider_x509_cert_url",
    "client_x509_cert_url",
    "client_id",
    "private_key_id",
    "private_key",
    "token_uri",
];

/// Why the Secret's credentials cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// None of the credential keys is present.
    #[error("secret {SECRET_SERVICE_ACCOUNT_JSON}, {SECRET_SERVICE_ACCOUNT_JSON_ALT} or {SECRET_CREDENTIALS_CONFIG} is required field")]
    Missing,
    /// The value is not a JSON object with a `type`.
    #[error("could not get service account from {key:?} field: {reason}")]
    Unreadable {
        /// The Secret key.
        key: &'static str,
        /// What is wrong (never the value).
        reason: String,
    },
    /// A service-account JSON with fields outside the allow-list.
    #[error("forbidden fields are present. Allowed fields are {}", SERVICE_ACCOUNT_ALLOWED_FIELDS.join(", "))]
    ForbiddenFields,
    /// A workload-identity config that points elsewhere.
    #[error("invalid credentials config: {0}")]
    InvalidExternalAccount(String),
    /// Neither `service_account` nor `external_account`.
    #[error("forbidden credential type {0:?} used. Only \"service_account\" or \"external_account\" is allowed")]
    ForbiddenType(String),
    /// The auth library refused the credentials.
    #[error("cannot use the {key:?} credentials: {reason}")]
    Build {
        /// The Secret key.
        key: &'static str,
        /// The library's reason.
        reason: String,
    },
}

/// The kind of credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialsKind {
    /// A service-account key (self-signed JWTs, no token endpoint).
    ServiceAccount,
    /// Workload identity (STS token exchange).
    ExternalAccount,
}

/// Checked credentials of one Secret. `Debug` never shows the JSON.
#[derive(Clone)]
pub struct GcpCredentials {
    json: Value,
    /// The Secret key they came from.
    pub key: &'static str,
    /// Their kind.
    pub kind: CredentialsKind,
    /// The project: the JSON's `project_id`, else the Secret's `projectID`.
    pub project: String,
    /// A hash of the credentials (for client caches; not reversible to the key).
    pub fingerprint: u64,
    /// Keys of the JSON read under another spelling, ignored or unknown
    /// (key names only, never values).
    pub warnings: Vec<mcm_driver::spec_decode::KeyWarning>,
}

/// The fields of a credentials JSON that the reference's Go code decodes
/// with `encoding/json` (keys matched case-insensitively): a service-account
/// key's and an external-account configuration's.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default)]
struct KeyFields {
    #[serde(rename = "type")]
    kind: String,
    project_id: String,
    client_email: String,
    client_id: String,
    private_key_id: String,
    private_key: String,
    auth_uri: String,
    token_uri: String,
    auth_provider_x509_cert_url: String,
    client_x509_cert_url: String,
    universe_domain: String,
    audience: String,
    subject_token_type: String,
    token_url: String,
    token_info_url: String,
    service_account_impersonation_url: String,
    service_account_impersonation: Option<Value>,
    credential_source: Option<CredentialSource>,
    quota_project_id: String,
    workforce_pool_user_project: String,
    client_secret: String,
}

/// An external account's credential source (only `file` is accepted).
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default)]
struct CredentialSource {
    file: String,
    url: String,
    headers: std::collections::BTreeMap<String, String>,
    format: Option<Value>,
    environment_id: String,
    region_url: String,
    regional_cred_verification_url: String,
    imdsv2_session_token_url: String,
    executable: Option<Value>,
    certificate: Option<Value>,
}

impl std::fmt::Debug for GcpCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpCredentials")
            .field("key", &self.key)
            .field("kind", &self.kind)
            .field("project", &self.project)
            .field("json", &"<redacted>")
            .finish()
    }
}

pub use mcm_driver::secret_bytes;

/// A Secret value as text (`data` first, then `stringData`).
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return Some(String::from_utf8_lossy(&v.0).into_owned());
    }
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
}

/// Reads and checks the credentials of a Secret.
pub fn from_secret(secret: &Secret) -> Result<GcpCredentials, CredentialsError> {
    let (key, raw) = [
        SECRET_SERVICE_ACCOUNT_JSON,
        SECRET_SERVICE_ACCOUNT_JSON_ALT,
        SECRET_CREDENTIALS_CONFIG,
    ]
    .into_iter()
    .find_map(|k| secret_value(secret, k).map(|v| (k, v.trim().to_string())))
    .ok_or(CredentialsError::Missing)?;
    let json: Value = serde_json::from_str(&raw).map_err(|e| CredentialsError::Unreadable {
        key,
        reason: format!("not JSON (line {}, column {})", e.line(), e.column()),
    })?;
    let Some(obj) = json.as_object() else {
        return Err(CredentialsError::Unreadable {
            key,
            reason: "not a JSON object".into(),
        });
    };
    // Keys as the reference's `json.Unmarshal` matches them; the auth
    // library reads the canonical spelling, so that is what it is given.
    let root = format!("secretRef.{key}");
    let fields = mcm_driver::spec_decode::decode::<KeyFields>(&json, &root).map_err(|e| {
        // serde's message may quote the value: name the field only.
        CredentialsError::Unreadable {
            key,
            reason: format!("{} has the wrong type", e.field),
        }
    })?;
    let (canonical, _) = mcm_driver::spec_decode::canonical_keys::<KeyFields>(&json, &root);
    let warnings = fields.warnings;
    let fields = fields.value;
    let kind = match fields.kind.as_str() {
        "service_account" => {
            if obj
                .keys()
                .any(|k| !SERVICE_ACCOUNT_ALLOWED_FIELDS.contains(&k.as_str()))
            {
                return Err(CredentialsError::ForbiddenFields);
            }
            CredentialsKind::ServiceAccount
        }
        "external_account" => {
            check_external_account(&fields)?;
            CredentialsKind::ExternalAccount
        }
        other => return Err(CredentialsError::ForbiddenType(other.to_string())),
    };
    let project = match fields.project_id.as_str() {
        "" => secret_value(secret, SECRET_PROJECT_ID).unwrap_or_default(),
        p => p.to_string(),
    };
    let mut h = DefaultHasher::new();
    raw.hash(&mut h);
    project.hash(&mut h);
    let mut json = canonical;
    if kind == CredentialsKind::ServiceAccount && field_missing(&json, "project_id") {
        // The auth library wants a project in the key; the reference takes
        // the Secret's `projectID` for a key without one.
        if let Some(o) = json.as_object_mut() {
            o.insert("project_id".into(), Value::String(project.clone()));
        }
    }
    Ok(GcpCredentials {
        json,
        key,
        kind,
        project,
        fingerprint: h.finish(),
        warnings,
    })
}

fn field_missing(json: &Value, name: &str) -> bool {
    json.get(name)
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
}

fn check_external_account(fields: &KeyFields) -> Result<(), CredentialsError> {
    let bad = |m: String| Err(CredentialsError::InvalidExternalAccount(m));
    if fields.token_url.trim() != ALLOWED_TOKEN_URL {
        return bad(format!(
            "invalid token_url: should equal {ALLOWED_TOKEN_URL}"
        ));
    }
    let imp = fields.service_account_impersonation_url.as_str();
    if !imp.is_empty() {
        let ok = imp
            .strip_prefix(IMPERSONATION_PREFIX)
            .and_then(|rest| rest.strip_suffix(IMPERSONATION_SUFFIX))
            .is_some_and(|account| !account.is_empty());
        if !ok {
            return bad(format!(
                "invalid service_account_impersonation_url: should match reg expression ^{}.+{}$",
                IMPERSONATION_PREFIX.replace('.', "\\."),
                IMPERSONATION_SUFFIX
            ));
        }
    }
    if fields.subject_token_type.trim() != ALLOWED_SUBJECT_TOKEN_TYPE {
        return bad(format!(
            "invalid subject_token_type: should equal {ALLOWED_SUBJECT_TOKEN_TYPE}"
        ));
    }
    let file = fields
        .credential_source
        .as_ref()
        .map(|c| c.file.as_str())
        .unwrap_or_default();
    if file.trim() != ALLOWED_TOKEN_FILE {
        return bad(format!(
            "invalid credential_source: should equal {ALLOWED_TOKEN_FILE}"
        ));
    }
    Ok(())
}

impl GcpCredentials {
    /// The auth library's credentials (scope `cloud-platform`). A service
    /// account signs its own JWTs; no token endpoint is contacted.
    pub fn build(&self) -> Result<google_cloud_auth::credentials::Credentials, CredentialsError> {
        let built = match self.kind {
            CredentialsKind::ServiceAccount => {
                google_cloud_auth::credentials::service_account::Builder::new(self.json.clone())
                    .build()
            }
            CredentialsKind::ExternalAccount => {
                google_cloud_auth::credentials::external_account::Builder::new(self.json.clone())
                    .with_scopes([CLOUD_PLATFORM_SCOPE])
                    .build()
            }
        };
        built.map_err(|e| CredentialsError::Build {
            key: self.key,
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    fn secret(pairs: &[(&str, String)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn sa() -> Value {
        json!({"type": "service_account", "project_id": "p1", "client_email": "a@p1.iam.gserviceaccount.com",
               "private_key_id": "k", "private_key": "-----BEGIN PRIVATE KEY-----\n...", "token_uri": "https://oauth2.googleapis.com/token"})
    }

    fn wif() -> Value {
        json!({"type": "external_account", "audience": "//iam.googleapis.com/x",
               "subject_token_type": ALLOWED_SUBJECT_TOKEN_TYPE, "token_url": ALLOWED_TOKEN_URL,
               "credential_source": {"file": ALLOWED_TOKEN_FILE},
               "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/a@p.iam.gserviceaccount.com:generateAccessToken"})
    }

    #[test]
    fn the_first_present_key_wins_and_the_project_comes_from_the_json() {
        let s = secret(&[
            ("serviceaccount.json", sa().to_string()),
            ("credentialsConfig", wif().to_string()),
            ("projectID", "other".into()),
        ]);
        let c = from_secret(&s).unwrap();
        assert_eq!(c.key, "serviceaccount.json");
        assert_eq!(c.kind, CredentialsKind::ServiceAccount);
        assert_eq!(c.project, "p1");
    }

    #[test]
    fn without_project_id_the_secret_project_is_used() {
        let s = secret(&[
            ("credentialsConfig", wif().to_string()),
            ("projectID", "p2".into()),
        ]);
        let c = from_secret(&s).unwrap();
        assert_eq!(
            (c.kind, c.project.as_str()),
            (CredentialsKind::ExternalAccount, "p2")
        );
    }

    #[test]
    fn service_accounts_with_unknown_fields_are_refused() {
        let mut v = sa();
        v["extra"] = json!("x");
        let e = from_secret(&secret(&[("serviceAccountJSON", v.to_string())])).unwrap_err();
        assert_eq!(e, CredentialsError::ForbiddenFields);
        assert!(e
            .to_string()
            .starts_with("forbidden fields are present. Allowed fields are type, project_id"));
    }

    #[test]
    fn workload_identity_must_point_at_google_and_the_gardener_token() {
        for (field, value, want) in [
            (
                "token_url",
                json!("https://evil.example/token"),
                "invalid token_url",
            ),
            (
                "subject_token_type",
                json!("x"),
                "invalid subject_token_type",
            ),
            (
                "credential_source",
                json!({"file": "/etc/passwd"}),
                "invalid credential_source",
            ),
            (
                "service_account_impersonation_url",
                json!("https://evil.example/x:generateAccessToken"),
                "invalid service_account_impersonation_url",
            ),
        ] {
            let mut v = wif();
            v[field] = value;
            let e = from_secret(&secret(&[("credentialsConfig", v.to_string())])).unwrap_err();
            assert!(e.to_string().contains(want), "{field}: {e}");
        }
    }

    #[test]
    fn other_types_and_garbage_are_refused_without_echoing_the_value() {
        let e = from_secret(&secret(&[(
            "serviceAccountJSON",
            json!({"type": "authorized_user"}).to_string(),
        )]))
        .unwrap_err();
        assert_eq!(e, CredentialsError::ForbiddenType("authorized_user".into()));
        let e =
            from_secret(&secret(&[("serviceAccountJSON", "s3cr3t-not-json".into())])).unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        assert_eq!(
            from_secret(&secret(&[])).unwrap_err(),
            CredentialsError::Missing
        );
    }

    #[test]
    fn debug_redacts_the_json() {
        let c = from_secret(&secret(&[("serviceAccountJSON", sa().to_string())])).unwrap();
        let d = format!("{c:?}");
        assert!(
            !d.contains("PRIVATE KEY") && d.contains("<redacted>"),
            "{d}"
        );
    }
}
