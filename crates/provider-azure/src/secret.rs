//! The provider Secret: service principal or workload identity, subscription,
//! tenant and user data, with the reference's key aliases and messages.

use k8s_openapi::api::core::v1::Secret;
use mcm_driver::provider_spec::{FieldError, SecretData, SecretUse};
use std::fmt;
use std::path::PathBuf;

/// Secret key of the client (application) ID; alias [`AZURE_CLIENT_ID`].
pub const CLIENT_ID: &str = "clientID";
/// Deprecated alias of [`CLIENT_ID`].
pub const AZURE_CLIENT_ID: &str = "azureClientId";
/// Secret key of the client secret; alias [`AZURE_CLIENT_SECRET`].
pub const CLIENT_SECRET: &str = "clientSecret";
/// Deprecated alias of [`CLIENT_SECRET`].
pub const AZURE_CLIENT_SECRET: &str = "azureClientSecret";
/// Secret key of the subscription ID; alias [`AZURE_SUBSCRIPTION_ID`].
pub const SUBSCRIPTION_ID: &str = "subscriptionID";
/// Deprecated alias of [`SUBSCRIPTION_ID`].
pub const AZURE_SUBSCRIPTION_ID: &str = "azureSubscriptionId";
/// Secret key of the tenant ID; alias [`AZURE_TENANT_ID`].
pub const TENANT_ID: &str = "tenantID";
/// Deprecated alias of [`TENANT_ID`].
pub const AZURE_TENANT_ID: &str = "azureTenantId";
/// Secret key of the path of a projected service account token (workload identity).
pub const WORKLOAD_IDENTITY_TOKEN_FILE: &str = "workloadIdentityTokenFile";
/// Secret key of the user data.
pub const USER_DATA: &str = "userData";

/// How the driver authenticates.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Auth {
    /// A service principal's client secret.
    ClientSecret(String),
    /// A federated token read from this file (workload identity).
    WorkloadIdentity(PathBuf),
}

/// What the Secret says. `Debug` never shows the client secret or the user data.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Client (application) ID.
    pub client_id: String,
    /// Tenant ID.
    pub tenant_id: String,
    /// Subscription ID.
    pub subscription_id: String,
    /// Client secret or workload identity.
    pub auth: Auth,
    /// The user data (sent base64-encoded as the VM's customData).
    pub user_data: Vec<u8>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::ClientSecret(_) => f.write_str("ClientSecret(<redacted>)"),
            Auth::WorkloadIdentity(p) => write!(f, "WorkloadIdentity({})", p.display()),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            Auth::ClientSecret(_) => "clientSecret(<redacted>)".to_string(),
            Auth::WorkloadIdentity(p) => format!("workloadIdentityTokenFile({})", p.display()),
        };
        f.debug_struct("Credentials")
            .field("client_id", &self.client_id)
            .field("tenant_id", &self.tenant_id)
            .field("subscription_id", &self.subscription_id)
            .field("auth", &auth)
            .field(
                "user_data",
                &format_args!("<{} bytes>", self.user_data.len()),
            )
            .finish()
    }
}

/// The Secret's findings for a call of `purpose`, in the reference's order
/// and words: the service principal or workload identity, subscription and
/// tenant (each key or its deprecated alias) and, for a new VM, the user data.
pub fn validate_secret(secret: SecretData<'_>, purpose: SecretUse) -> Vec<FieldError> {
    let mut errs = Vec::new();
    secret.require(
        &mut errs,
        "data.clientID",
        &[CLIENT_ID, AZURE_CLIENT_ID],
        "must provide clientID",
    );
    let client_secret = secret.first_text(&[CLIENT_SECRET, AZURE_CLIENT_SECRET]);
    let token_file = secret.text(WORKLOAD_IDENTITY_TOKEN_FILE);
    match (client_secret.is_empty(), token_file.is_empty()) {
        (false, false) => errs.push(FieldError::required(
            "data.clientSecret",
            "clientSecret is mutually exclusive with workloadIdentityTokenFile",
        )),
        (true, true) => errs.push(FieldError::required(
            "data.clientSecret",
            "must provide clientSecret or workloadIdentityTokenFile",
        )),
        _ => {}
    }
    secret.require(
        &mut errs,
        "data.subscriptionID",
        &[SUBSCRIPTION_ID, AZURE_SUBSCRIPTION_ID],
        "must provide subscriptionID",
    );
    secret.require(
        &mut errs,
        "data.tenantID",
        &[TENANT_ID, AZURE_TENANT_ID],
        "must provide tenantID",
    );
    if purpose.needs_user_data() {
        secret.require(
            &mut errs,
            "data.userData",
            &[USER_DATA],
            "must provide userData",
        );
    }
    errs
}

/// The credentials of a Secret that passed [`validate_secret`] (each key or
/// its deprecated alias, trimmed; the user data as bytes).
pub fn credentials(secret: &Secret) -> Credentials {
    let s = SecretData(secret);
    let client_secret = s.first_text(&[CLIENT_SECRET, AZURE_CLIENT_SECRET]);
    let auth = if client_secret.is_empty() {
        Auth::WorkloadIdentity(PathBuf::from(s.text(WORKLOAD_IDENTITY_TOKEN_FILE)))
    } else {
        Auth::ClientSecret(client_secret)
    };
    Credentials {
        client_id: s.first_text(&[CLIENT_ID, AZURE_CLIENT_ID]),
        tenant_id: s.first_text(&[TENANT_ID, AZURE_TENANT_ID]),
        subscription_id: s.first_text(&[SUBSCRIPTION_ID, AZURE_SUBSCRIPTION_ID]),
        auth,
        user_data: s.bytes(USER_DATA).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use mcm_driver::testing::secret_with as secret;

    #[test]
    fn both_spellings_of_every_key_are_read_and_trimmed() {
        let a = credentials(&secret(&[
            ("clientID", " c "),
            ("clientSecret", "s\n"),
            ("subscriptionID", "sub"),
            ("tenantID", "t"),
            ("userData", "#!"),
        ]));
        let b = credentials(&secret(&[
            ("azureClientId", "c"),
            ("azureClientSecret", "s"),
            ("azureSubscriptionId", "sub"),
            ("azureTenantId", "t"),
            ("userData", "#!"),
        ]));
        assert_eq!(a, b);
        assert_eq!(a.auth, Auth::ClientSecret("s".into()));
    }

    #[test]
    fn workload_identity_replaces_the_client_secret() {
        let c = credentials(&secret(&[
            ("clientID", "c"),
            ("workloadIdentityTokenFile", "/var/run/token"),
            ("subscriptionID", "sub"),
            ("tenantID", "t"),
            ("userData", "#!"),
        ]));
        assert_eq!(c.auth, Auth::WorkloadIdentity("/var/run/token".into()));
    }

    fn refused(s: &Secret) -> String {
        mcm_driver::provider_spec::Join::GoSlice
            .apply(&validate_secret(SecretData(s), SecretUse::Create))
    }

    #[test]
    fn missing_keys_give_the_references_messages() {
        assert_eq!(
            refused(&secret(&[])),
            "[data.clientID: Required value: must provide clientID \
             data.clientSecret: Required value: must provide clientSecret or workloadIdentityTokenFile \
             data.subscriptionID: Required value: must provide subscriptionID \
             data.tenantID: Required value: must provide tenantID \
             data.userData: Required value: must provide userData]"
        );
        let both = refused(&secret(&[
            ("clientID", "c"),
            ("clientSecret", "s"),
            ("workloadIdentityTokenFile", "/t"),
            ("subscriptionID", "sub"),
            ("tenantID", "t"),
            ("userData", "#!"),
        ]));
        assert!(both.contains("clientSecret is mutually exclusive with workloadIdentityTokenFile"));
    }

    #[test]
    fn debug_never_shows_the_client_secret_or_user_data() {
        let c = credentials(&secret(&[
            ("clientID", "c"),
            ("clientSecret", "hunter2"),
            ("subscriptionID", "sub"),
            ("tenantID", "t"),
            ("userData", "password=swordfish"),
        ]));
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2") && !d.contains("swordfish"), "{d}");
    }
}
