//! Access tokens for ARM.
//!
//! [`TokenSource`] is what the ARM client asks for a bearer token; tests give
//! it a [`StaticToken`]. In production [`IdentityTokens`] wraps the official
//! `azure_identity` credentials (client secret, or workload identity with a
//! federated token file), which cache and refresh tokens themselves. Their
//! HTTP goes through [`ReqwestTransport`], the workspace's reqwest 0.12 (so
//! `azure_core` needs no HTTP client of its own), which can also redirect the
//! token endpoint to a local fake (`azure_identity` only accepts HTTPS
//! authority hosts).

use crate::secret::{Auth, Credentials};
use async_trait::async_trait;
use azure_core::credentials::{Secret, TokenCredential};
use azure_core::error::ErrorKind;
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{
    AsyncRawResponse, Body, ClientOptions, HttpClient, Method, Request, Transport,
};
use azure_identity::{
    ClientAssertionCredentialOptions, ClientSecretCredential, ClientSecretCredentialOptions,
    WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A failure to get a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("getting an Azure AD token: {0}")]
pub struct AuthError(pub String);

/// Gives bearer tokens for the ARM scope.
#[async_trait]
pub trait TokenSource: Send + Sync {
    /// A valid token (cached by the implementation).
    async fn token(&self) -> Result<String, AuthError>;
}

/// A fixed token, for tests.
#[derive(Clone)]
pub struct StaticToken(pub String);

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticToken(<redacted>)")
    }
}

#[async_trait]
impl TokenSource for StaticToken {
    async fn token(&self) -> Result<String, AuthError> {
        Ok(self.0.clone())
    }
}

/// Which Azure cloud: login host and ARM audience.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Cloud {
    /// Azure public cloud.
    #[default]
    Public,
    /// Azure China.
    China,
    /// Azure US Government.
    Government,
}

impl Cloud {
    /// From `cloudConfiguration.name` (case-insensitive; unknown = public, as the reference).
    pub fn from_name(name: Option<&str>) -> Cloud {
        match name {
            Some(n) if n.eq_ignore_ascii_case("AzureChina") => Cloud::China,
            Some(n) if n.eq_ignore_ascii_case("AzureGovernment") => Cloud::Government,
            _ => Cloud::Public,
        }
    }

    /// The ARM endpoint.
    pub fn resource_manager(self) -> &'static str {
        match self {
            Cloud::Public => "https://management.azure.com",
            Cloud::China => "https://management.chinacloudapi.cn",
            Cloud::Government => "https://management.usgovcloudapi.net",
        }
    }

    /// The token scope of ARM.
    pub fn scope(self) -> &'static str {
        match self {
            Cloud::Public => "https://management.core.windows.net//.default",
            Cloud::China => "https://management.core.chinacloudapi.cn/.default",
            Cloud::Government => "https://management.core.usgovcloudapi.net/.default",
        }
    }

    fn configuration(self) -> azure_core::cloud::CloudConfiguration {
        match self {
            Cloud::Public => azure_core::cloud::CloudConfiguration::AzurePublic,
            Cloud::China => azure_core::cloud::CloudConfiguration::AzureChina,
            Cloud::Government => azure_core::cloud::CloudConfiguration::AzureGovernment,
        }
    }
}

/// `azure_core`'s HTTP client trait on the workspace's reqwest; with
/// `redirect_to`, every request goes to that origin instead (tests and fakes).
#[derive(Clone, Debug)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    redirect_to: Option<String>,
}

impl ReqwestTransport {
    /// A transport on `client`, optionally redirected to `redirect_to` (`http://127.0.0.1:port`).
    pub fn new(client: reqwest::Client, redirect_to: Option<String>) -> Self {
        ReqwestTransport {
            client,
            redirect_to: redirect_to.map(|s| s.trim_end_matches('/').to_string()),
        }
    }
}

fn io_error(message: String) -> azure_core::Error {
    azure_core::Error::with_message(ErrorKind::Io, message)
}

#[async_trait]
impl HttpClient for ReqwestTransport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let url = match &self.redirect_to {
            Some(origin) => {
                let u = request.url();
                let query = u.query().map(|q| format!("?{q}")).unwrap_or_default();
                format!("{origin}{}{query}", u.path())
            }
            None => request.url().to_string(),
        };
        let method = match request.method() {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Delete => reqwest::Method::DELETE,
            Method::Head => reqwest::Method::HEAD,
            Method::Patch => reqwest::Method::PATCH,
            other => return Err(io_error(format!("unsupported method {other:?}"))),
        };
        let mut req = self.client.request(method, url);
        for (name, value) in request.headers().iter() {
            req = req.header(name.as_str(), value.as_str());
        }
        req = match request.body() {
            Body::Bytes(b) => req.body(b.to_vec()),
            _ => {
                return Err(io_error(
                    "streaming request bodies are not supported".into(),
                ))
            }
        };
        let rsp = req
            .send()
            .await
            .map_err(|e| io_error(format!("token request failed: {e}")))?;
        let status = rsp.status().as_u16();
        let headers: HashMap<HeaderName, HeaderValue> = rsp
            .headers()
            .iter()
            .filter_map(|(k, v)| {
                v.to_str().ok().map(|v| {
                    (
                        HeaderName::from(k.as_str().to_owned()),
                        HeaderValue::from(v.to_owned()),
                    )
                })
            })
            .collect();
        let body = rsp
            .bytes()
            .await
            .map_err(|e| io_error(format!("reading the token response: {e}")))?;
        Ok(AsyncRawResponse::from_bytes(
            status.into(),
            Headers::from(headers),
            body.to_vec(),
        ))
    }
}

/// Tokens from an `azure_identity` credential.
pub struct IdentityTokens {
    credential: Arc<dyn TokenCredential>,
    scope: &'static str,
}

impl fmt::Debug for IdentityTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityTokens")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl IdentityTokens {
    /// A credential for the Secret's service principal or workload identity.
    pub fn new(
        creds: &Credentials,
        cloud: Cloud,
        transport: ReqwestTransport,
    ) -> Result<Self, AuthError> {
        let client_options = || ClientOptions {
            transport: Some(Transport::new(Arc::new(transport.clone()))),
            cloud: Some(Arc::new(cloud.configuration())),
            ..Default::default()
        };
        let credential: Arc<dyn TokenCredential> = match &creds.auth {
            Auth::ClientSecret(secret) => ClientSecretCredential::new(
                &creds.tenant_id,
                creds.client_id.clone(),
                Secret::new(secret.clone()),
                Some(ClientSecretCredentialOptions {
                    client_options: client_options(),
                }),
            )
            .map_err(|e| AuthError(e.to_string()))?,
            Auth::WorkloadIdentity(path) => {
                WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
                    credential_options: ClientAssertionCredentialOptions {
                        client_options: client_options(),
                    },
                    client_id: Some(creds.client_id.clone()),
                    tenant_id: Some(creds.tenant_id.clone()),
                    token_file_path: Some(path.clone()),
                }))
                .map_err(|e| AuthError(e.to_string()))?
            }
        };
        Ok(IdentityTokens {
            credential,
            scope: cloud.scope(),
        })
    }
}

#[async_trait]
impl TokenSource for IdentityTokens {
    async fn token(&self) -> Result<String, AuthError> {
        let t = self
            .credential
            .get_token(&[self.scope], None)
            .await
            .map_err(|e| AuthError(e.to_string()))?;
        Ok(t.token.secret().to_string())
    }
}
