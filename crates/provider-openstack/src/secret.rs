//! The Secret of an OpenStack MachineClass: credentials and user data.
//!
//! Keys (as the reference reads them): `authURL`; `username` + `password`, or
//! `applicationCredentialSecret` with `applicationCredentialID` (or
//! `applicationCredentialName` + `username`); `domainName`/`domainID`;
//! `tenantName`/`tenantID`; optional `userDomainName`/`userDomainID`,
//! `caCert`, `clientCert` + `clientKey`, `insecure` (`"true"`/`"false"`); and
//! `userData`. Values are trimmed; none is ever logged.

use k8s_openapi::api::core::v1::Secret;
use mcm_driver::provider_spec::{FieldError, SecretData, SecretUse};
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};

/// `authURL`.
pub const AUTH_URL: &str = "authURL";
/// `caCert` (PEM).
pub const CA_CERT: &str = "caCert";
/// `insecure`.
pub const INSECURE: &str = "insecure";
/// `domainName`.
pub const DOMAIN_NAME: &str = "domainName";
/// `domainID`.
pub const DOMAIN_ID: &str = "domainID";
/// `tenantName`.
pub const TENANT_NAME: &str = "tenantName";
/// `tenantID`.
pub const TENANT_ID: &str = "tenantID";
/// `userDomainName`.
pub const USER_DOMAIN_NAME: &str = "userDomainName";
/// `userDomainID`.
pub const USER_DOMAIN_ID: &str = "userDomainID";
/// `username`.
pub const USERNAME: &str = "username";
/// `password`.
pub const PASSWORD: &str = "password";
/// `applicationCredentialID`.
pub const APP_CRED_ID: &str = "applicationCredentialID";
/// `applicationCredentialName`.
pub const APP_CRED_NAME: &str = "applicationCredentialName";
/// `applicationCredentialSecret`.
pub const APP_CRED_SECRET: &str = "applicationCredentialSecret";
/// `clientCert`.
pub const CLIENT_CERT: &str = "clientCert";
/// `clientKey`.
pub const CLIENT_KEY: &str = "clientKey";
/// `userData`.
pub const USER_DATA: &str = "userData";

pub use mcm_driver::secret_bytes as value;

/// The trimmed text of a key ("" when missing).
pub fn text(secret: &Secret, key: &str) -> String {
    value(secret, key)
        .map(|v| String::from_utf8_lossy(&v).trim().to_string())
        .unwrap_or_default()
}

/// Validates the Secret like the reference (credentials, then `userData`
/// when a new server needs it).
pub fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
    let empty = |k: &str| secret.text(k).is_empty();
    let mut errs = Vec::new();
    let key = |k: &str| format!("data[{k}]");
    if empty(AUTH_URL) {
        errs.push(FieldError::required(
            key(AUTH_URL),
            format!("{AUTH_URL} is required"),
        ));
    }
    if !empty(PASSWORD) {
        if !empty(APP_CRED_SECRET) {
            let msg = format!("cannot specify both '{PASSWORD}' and '{APP_CRED_SECRET}'");
            errs.push(FieldError::forbidden(key(PASSWORD), msg.clone()));
            errs.push(FieldError::forbidden(key(APP_CRED_SECRET), msg));
        }
        if empty(USERNAME) {
            errs.push(FieldError::required(
                key(USERNAME),
                format!("{USERNAME} is required if '{PASSWORD}' is given"),
            ));
        }
    } else {
        if empty(APP_CRED_SECRET) {
            let msg = format!("must either specify '{PASSWORD}' or '{APP_CRED_SECRET}'");
            errs.push(FieldError::required(key(PASSWORD), msg.clone()));
            errs.push(FieldError::required(key(APP_CRED_SECRET), msg));
        }
        if empty(APP_CRED_ID) && (empty(APP_CRED_NAME) || empty(USERNAME)) {
            let msg = format!(
                "{APP_CRED_ID} or {APP_CRED_NAME} and {USERNAME} are required if {APP_CRED_SECRET} present"
            );
            errs.push(FieldError::required(key(APP_CRED_ID), msg.clone()));
            if empty(APP_CRED_NAME) {
                errs.push(FieldError::required(key(APP_CRED_NAME), msg.clone()));
            }
            if empty(USERNAME) {
                errs.push(FieldError::required(key(USERNAME), msg));
            }
        }
    }
    if empty(DOMAIN_NAME) && empty(DOMAIN_ID) {
        errs.push(FieldError::required(
            key(DOMAIN_NAME),
            format!("one of the following keys is required [{DOMAIN_NAME}|{DOMAIN_ID}]"),
        ));
    }
    if empty(TENANT_NAME) && empty(TENANT_ID) {
        errs.push(FieldError::required(
            key(TENANT_NAME),
            format!("one of the following keys is required [{TENANT_NAME}|{TENANT_ID}]"),
        ));
    }
    if secret.is_set(CLIENT_CERT) && !secret.is_set(CLIENT_KEY) {
        errs.push(FieldError::required(
            key(CLIENT_KEY),
            format!("{CLIENT_KEY} is required, if {CLIENT_CERT} is present"),
        ));
    }
    if let Some(v) = secret.bytes(INSECURE) {
        let s = String::from_utf8_lossy(&v).to_string();
        if s != "true" && s != "false" {
            errs.push(FieldError::invalid(
                key(INSECURE),
                &s,
                "value does not match expected boolean value [\"true\"|\"false\"]",
            ));
        }
    }
    if purpose.needs_user_data() && empty(USER_DATA) {
        errs.push(FieldError::required(
            key(USER_DATA),
            format!("{USER_DATA} is required"),
        ));
    }
    errs
}

/// How the driver authenticates.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Method {
    /// User name and password.
    Password {
        /// The user.
        username: String,
        /// The password.
        password: String,
    },
    /// An application credential, by ID or by name (with the user name).
    ApplicationCredential {
        /// The credential ID.
        id: String,
        /// The credential name (with `username`).
        name: String,
        /// The owner, when the credential is named.
        username: String,
        /// The secret.
        secret: String,
    },
}

/// The credentials of a validated Secret. `Debug` never shows secrets.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// Keystone URL.
    pub auth_url: String,
    /// Password or application credential.
    pub method: Method,
    /// Domain name (project scope, and user domain unless `userDomain*` is set).
    pub domain_name: String,
    /// Domain ID.
    pub domain_id: String,
    /// User domain name.
    pub user_domain_name: String,
    /// User domain ID.
    pub user_domain_id: String,
    /// Project name.
    pub tenant_name: String,
    /// Project ID.
    pub tenant_id: String,
    /// A CA bundle (PEM) to trust.
    pub ca_cert: Option<Vec<u8>>,
    /// A TLS client certificate (PEM) to present, with [`Credentials::client_key`].
    pub client_cert: Option<Vec<u8>>,
    /// The key of [`Credentials::client_cert`] (PEM).
    pub client_key: Option<Vec<u8>>,
    /// Skip TLS verification.
    pub insecure: bool,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let method = match &self.method {
            Method::Password { username, .. } => format!("password(user={username})"),
            Method::ApplicationCredential { id, name, .. } => {
                format!("application_credential(id={id}, name={name})")
            }
        };
        f.debug_struct("Credentials")
            .field("auth_url", &self.auth_url)
            .field("method", &method)
            .field("secret", &"<redacted>")
            .field("domain_name", &self.domain_name)
            .field("tenant_name", &self.tenant_name)
            .field("tenant_id", &self.tenant_id)
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The credentials of a Secret that passed [`validate_secret`].
    pub fn from_secret(secret: &Secret) -> Credentials {
        let t = |k: &str| text(secret, k);
        let method = if !t(PASSWORD).is_empty() {
            Method::Password {
                username: t(USERNAME),
                password: t(PASSWORD),
            }
        } else {
            Method::ApplicationCredential {
                id: t(APP_CRED_ID),
                name: t(APP_CRED_NAME),
                username: t(USERNAME),
                secret: t(APP_CRED_SECRET),
            }
        };
        Credentials {
            auth_url: t(AUTH_URL),
            method,
            domain_name: t(DOMAIN_NAME),
            domain_id: t(DOMAIN_ID),
            user_domain_name: t(USER_DOMAIN_NAME),
            user_domain_id: t(USER_DOMAIN_ID),
            tenant_name: t(TENANT_NAME),
            tenant_id: t(TENANT_ID),
            ca_cert: value(secret, CA_CERT).filter(|v| !v.is_empty()),
            client_cert: value(secret, CLIENT_CERT).filter(|v| !v.is_empty()),
            client_key: value(secret, CLIENT_KEY).filter(|v| !v.is_empty()),
            insecure: t(INSECURE) == "true",
        }
    }

    /// A hash of everything, secrets included: the key of the client cache.
    pub fn fingerprint(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }

    /// The identity without secrets, for rate-limit scopes and logs:
    /// Keystone URL, user or credential, and project.
    pub fn scope_name(&self) -> String {
        let who = match &self.method {
            Method::Password { username, .. } => username.clone(),
            Method::ApplicationCredential { id, name, .. } => {
                if id.is_empty() {
                    name.clone()
                } else {
                    id.clone()
                }
            }
        };
        let project = if self.tenant_id.is_empty() {
            &self.tenant_name
        } else {
            &self.tenant_id
        };
        format!("{}|{who}|{project}", self.auth_url)
    }
}
