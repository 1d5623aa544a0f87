//! The provider Secret: service principal or workload identity, subscription,
//! tenant and user data, with the reference's key aliases and messages.

use crate::field::{format_list, FieldError};
use k8s_openapi::api::core::v1::Secret;
use mcm_driver::Status;
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

/// The value of the first key present (the reference reads `data`; `stringData`
/// is honoured too), whitespace-trimmed.
fn value(secret: &Secret, keys: &[&str]) -> Option<Vec<u8>> {
    for k in keys {
        if let Some(v) = secret.data.as_ref().and_then(|d| d.get(*k)) {
            return Some(v.0.clone());
        }
        if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(*k)) {
            return Some(v.as_bytes().to_vec());
        }
    }
    None
}

fn text(secret: &Secret, keys: &[&str]) -> String {
    value(secret, keys)
        .map(|v| String::from_utf8_lossy(&v).trim().to_string())
        .unwrap_or_default()
}

/// Validates the Secret and reads the credentials; `InvalidArgument` with
/// the reference's message (`error in validating secret: [...]`) otherwise.
pub fn credentials(secret: &Secret) -> Result<Credentials, Status> {
    let client_id = text(secret, &[CLIENT_ID, AZURE_CLIENT_ID]);
    let client_secret = text(secret, &[CLIENT_SECRET, AZURE_CLIENT_SECRET]);
    let subscription_id = text(secret, &[SUBSCRIPTION_ID, AZURE_SUBSCRIPTION_ID]);
    let tenant_id = text(secret, &[TENANT_ID, AZURE_TENANT_ID]);
    let token_file = text(secret, &[WORKLOAD_IDENTITY_TOKEN_FILE]);
    let user_data = value(secret, &[USER_DATA]).unwrap_or_default();

    let mut errs = Vec::new();
    if client_id.is_empty() {
        errs.push(FieldError::required(
            "data.clientID",
            "must provide clientID",
        ));
    }
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
    if subscription_id.is_empty() {
        errs.push(FieldError::required(
            "data.subscriptionID",
            "must provide subscriptionID",
        ));
    }
    if tenant_id.is_empty() {
        errs.push(FieldError::required(
            "data.tenantID",
            "must provide tenantID",
        ));
    }
    if String::from_utf8_lossy(&user_data).trim().is_empty() {
        errs.push(FieldError::required(
            "data.userData",
            "must provide userData",
        ));
    }
    if !errs.is_empty() {
        return Err(Status::invalid_argument(format!(
            "error in validating secret: {}",
            format_list(&errs)
        )));
    }
    let auth = if client_secret.is_empty() {
        Auth::WorkloadIdentity(PathBuf::from(token_file))
    } else {
        Auth::ClientSecret(client_secret)
    };
    Ok(Credentials {
        client_id,
        tenant_id,
        subscription_id,
        auth,
        user_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(pairs: &[(&str, &str)]) -> Secret {
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

    #[test]
    fn both_spellings_of_every_key_are_read_and_trimmed() {
        let a = credentials(&secret(&[
            ("clientID", " c "),
            ("clientSecret", "s\n"),
            ("subscriptionID", "sub"),
            ("tenantID", "t"),
            ("userData", "#!"),
        ]))
        .unwrap();
        let b = credentials(&secret(&[
            ("azureClientId", "c"),
            ("azureClientSecret", "s"),
            ("azureSubscriptionId", "sub"),
            ("azureTenantId", "t"),
            ("userData", "#!"),
        ]))
        .unwrap();
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
        ]))
        .unwrap();
        assert_eq!(c.auth, Auth::WorkloadIdentity("/var/run/token".into()));
    }

    #[test]
    fn missing_keys_give_the_references_messages() {
        let e = credentials(&secret(&[])).unwrap_err();
        assert_eq!(e.code, mcm_driver::Code::InvalidArgument);
        assert_eq!(
            e.message,
            "error in validating secret: [data.clientID: Required value: must provide clientID \
             data.clientSecret: Required value: must provide clientSecret or workloadIdentityTokenFile \
             data.subscriptionID: Required value: must provide subscriptionID \
             data.tenantID: Required value: must provide tenantID \
             data.userData: Required value: must provide userData]"
        );
        let both = credentials(&secret(&[
            ("clientID", "c"),
            ("clientSecret", "s"),
            ("workloadIdentityTokenFile", "/t"),
            ("subscriptionID", "sub"),
            ("tenantID", "t"),
            ("userData", "#!"),
        ]))
        .unwrap_err();
        assert!(both
            .message
            .contains("clientSecret is mutually exclusive with workloadIdentityTokenFile"));
    }

    #[test]
    fn debug_never_shows_the_client_secret_or_user_data() {
        let c = credentials(&secret(&[
            ("clientID", "c"),
            ("clientSecret", "hunter2"),
            ("subscriptionID", "sub"),
            ("tenantID", "t"),
            ("userData", "password=swordfish"),
        ]))
        .unwrap();
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2") && !d.contains("swordfish"), "{d}");
    }
}
