//! A session of our own (Keystone v3 token, catalog look-up, transport) for
//! the two cases openstack_sdk's session cannot serve:
//!
//! - clouds that require a TLS client certificate (the Secret's
//!   `clientCert`/`clientKey`): openstack_sdk builds its HTTP client itself,
//!   with no way to add an identity;
//! - catalogs whose endpoints name the spec's region only in `region_id`
//!   (gophercloud, the reference's client, matches `region` or `region_id`;
//!   openstack_sdk reads `region` alone).
//!
//! [`DirectSession`] implements openstack_sdk's `AsyncClient`, so the driver's
//! requests are the SDK's endpoint types as on every other cloud; only the
//! transport, the token and the endpoint selection ([`crate::catalog`]) are
//! ours (design: providers/openstack.md, "Session"). The certificate and key
//! stay in memory: never written to disk, never logged.

use crate::catalog::{pick, versioned_url};
use crate::secret::{Credentials, Method};
use async_trait::async_trait;
use bytes::Bytes;
use openstack_sdk::api::{ApiError, AsyncClient, RestClient};
use openstack_sdk::catalog::CatalogError;
use openstack_sdk::types::{ApiVersion, BoxedAsyncRead, ServiceType};
use openstack_sdk::RestError;
use openstack_sdk_auth_core::types::Project;
use openstack_sdk_core::catalog::ServiceEndpoint;
use serde_json::{json, Map, Value};
use std::time::Duration;
use tokio::sync::{Mutex, RwLock};

/// A Keystone token with what came with it.
#[derive(Clone)]
struct Token {
    id: String,
    project: Option<Value>,
    catalog: Vec<Value>,
}

/// An authenticated session; with a client certificate, every request presents it.
pub(crate) struct DirectSession {
    http: reqwest_tls::Client,
    identity_url: String,
    creds: Credentials,
    region: String,
    token: RwLock<Token>,
    reauth: Mutex<()>,
}

/// Why a session could not be made (the message never holds key material).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DirectError {
    /// The certificate, key or CA could not be used.
    #[error("{0}")]
    Material(String),
    /// Keystone refused the credentials or could not be reached.
    #[error("{0}")]
    Auth(String),
}

/// The Keystone v3 URL of a Secret's `authURL`, in the forms gophercloud
/// accepts: with or without `/v3`, with or without a trailing slash.
pub(crate) fn identity_v3_url(auth_url: &str) -> String {
    let base = auth_url.trim().trim_end_matches('/');
    if base.ends_with("/v3") {
        base.to_string()
    } else {
        format!("{base}/v3")
    }
}

/// The token request of the Secret's credentials (Keystone v3).
fn auth_body(creds: &Credentials) -> Value {
    let domain = |name: &str, id: &str| {
        if name.is_empty() {
            json!({ "id": id })
        } else {
            json!({ "name": name })
        }
    };
    let (user_domain_name, user_domain_id) =
        if creds.user_domain_name.is_empty() && creds.user_domain_id.is_empty() {
            (&creds.domain_name, &creds.domain_id)
        } else {
            (&creds.user_domain_name, &creds.user_domain_id)
        };
    let mut auth = Map::new();
    match &creds.method {
        Method::Password { username, password } => {
            auth.insert(
                "identity".into(),
                json!({"methods": ["password"], "password": {"user": {
                    "name": username, "password": password,
                    "domain": domain(user_domain_name, user_domain_id)
                }}}),
            );
            let project = if creds.tenant_id.is_empty() {
                json!({"name": creds.tenant_name, "domain": domain(&creds.domain_name, &creds.domain_id)})
            } else {
                json!({ "id": creds.tenant_id })
            };
            auth.insert("scope".into(), json!({ "project": project }));
        }
        Method::ApplicationCredential {
            id,
            name,
            username,
            secret,
        } => {
            let credential = if id.is_empty() {
                json!({"name": name, "secret": secret, "user": {
                    "name": username, "domain": domain(user_domain_name, user_domain_id)
                }})
            } else {
                json!({ "id": id, "secret": secret })
            };
            auth.insert(
                "identity".into(),
                json!({"methods": ["application_credential"], "application_credential": credential}),
            );
        }
    }
    json!({ "auth": Value::Object(auth) })
}

/// The HTTP client: the Secret's client certificate and key (if any), its
/// CA bundle added to the trusted roots, `insecure` honoured.
fn http_client(creds: &Credentials, timeout: Duration) -> Result<reqwest_tls::Client, DirectError> {
    let mut b = reqwest_tls::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5));
    if let (Some(cert), Some(key)) = (&creds.client_cert, &creds.client_key) {
        // reqwest reads the certificate chain and the key from one PEM buffer.
        let mut pem = cert.clone();
        if !pem.ends_with(b"\n") {
            pem.push(b'\n');
        }
        pem.extend_from_slice(key);
        let identity = reqwest_tls::Identity::from_pem(&pem).map_err(|_| {
            DirectError::Material("clientCert/clientKey is not a PEM certificate and key".into())
        })?;
        b = b.identity(identity);
    }
    if let Some(ca) = &creds.ca_cert {
        let roots = reqwest_tls::Certificate::from_pem_bundle(ca)
            .map_err(|_| DirectError::Material("caCert is not a PEM certificate bundle".into()))?;
        for root in roots {
            b = b.add_root_certificate(root);
        }
    }
    if creds.insecure {
        b = b.danger_accept_invalid_certs(true);
    }
    b.build()
        .map_err(|e| DirectError::Material(format!("cannot build the TLS client: {e}")))
}

impl DirectSession {
    /// Authenticates with Keystone (over mutual TLS with a client certificate).
    pub async fn connect(
        creds: &Credentials,
        region: &str,
        timeout: Duration,
    ) -> Result<DirectSession, DirectError> {
        let session = DirectSession {
            http: http_client(creds, timeout)?,
            identity_url: identity_v3_url(&creds.auth_url),
            creds: creds.clone(),
            region: region.to_string(),
            token: RwLock::new(Token {
                id: String::new(),
                project: None,
                catalog: Vec::new(),
            }),
            reauth: Mutex::new(()),
        };
        let token = session.issue_token().await?;
        *session.token.write().await = token;
        Ok(session)
    }

    async fn issue_token(&self) -> Result<Token, DirectError> {
        let url = format!("{}/auth/tokens", self.identity_url);
        let rsp = self
            .http
            .post(&url)
            .json(&auth_body(&self.creds))
            .send()
            .await
            .map_err(|e| DirectError::Auth(format!("identity service error: {}", chain(&e))))?;
        let status = rsp.status();
        let id = rsp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body: Value = rsp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let msg = crate::errors::error_message(&body)
                .or_else(|| body["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_default();
            return Err(DirectError::Auth(format!(
                "HTTP {}: identity service error: {msg}",
                status.as_u16()
            )));
        }
        let id = id.ok_or_else(|| {
            DirectError::Auth("identity service error: no X-Subject-Token in the answer".into())
        })?;
        Ok(Token {
            id,
            project: body["token"].get("project").cloned(),
            catalog: body["token"]["catalog"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        })
    }

    /// A new token after a 401, unless another request got one meanwhile.
    async fn reauthenticate(&self, rejected: &str) -> Result<(), DirectError> {
        let _one = self.reauth.lock().await;
        if self.token.read().await.id != rejected {
            return Ok(());
        }
        let token = self.issue_token().await?;
        *self.token.write().await = token;
        Ok(())
    }

    async fn send_once(
        &self,
        parts: &http::request::Parts,
        body: &[u8],
        token: &str,
    ) -> Result<http::Response<Bytes>, ApiError<RestError>> {
        let mut req = http::Request::builder()
            .method(parts.method.clone())
            .uri(parts.uri.clone());
        for (k, v) in &parts.headers {
            req = req.header(k, v);
        }
        let req = req
            .header("x-auth-token", token)
            .body(body.to_vec())
            .map_err(|e| ApiError::client(RestError::from(e)))?;
        let req = reqwest_tls::Request::try_from(req)
            .map_err(|e| ApiError::client(RestError::from(e)))?;
        let rsp = self
            .http
            .execute(req)
            .await
            .map_err(|e| ApiError::client(RestError::from(e)))?;
        let mut out = http::Response::builder().status(rsp.status());
        for (k, v) in rsp.headers() {
            out = out.header(k, v);
        }
        let bytes = rsp
            .bytes()
            .await
            .map_err(|e| ApiError::client(RestError::from(e)))?;
        out.body(bytes)
            .map_err(|e| ApiError::client(RestError::from(e)))
    }
}

/// An error with its causes (reqwest puts the TLS reason in a source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

impl RestClient for DirectSession {
    type Error = RestError;

    fn get_current_project(&self) -> Option<Project> {
        let token = self.token.try_read().ok()?;
        serde_json::from_value(token.project.clone()?).ok()
    }
}

#[async_trait]
impl AsyncClient for DirectSession {
    async fn rest_async(
        &self,
        request: http::request::Builder,
        body: Vec<u8>,
    ) -> Result<http::Response<Bytes>, ApiError<RestError>> {
        let (parts, _) = request
            .body(())
            .map_err(|e| ApiError::client(RestError::from(e)))?
            .into_parts();
        let token = self.token.read().await.id.clone();
        let rsp = self.send_once(&parts, &body, &token).await?;
        if rsp.status() != http::StatusCode::UNAUTHORIZED {
            return Ok(rsp);
        }
        // The token expired or was revoked: one new token, one retry.
        if let Err(e) = self.reauthenticate(&token).await {
            tracing::warn!(error = %e, "re-authentication after a 401 failed");
            return Ok(rsp);
        }
        let token = self.token.read().await.id.clone();
        self.send_once(&parts, &body, &token).await
    }

    async fn rest_read_body_async(
        &self,
        _request: http::request::Builder,
        _body: BoxedAsyncRead,
    ) -> Result<http::Response<Bytes>, ApiError<RestError>> {
        Err(unsupported("streamed request bodies"))
    }

    async fn download_async(
        &self,
        _request: http::request::Builder,
        _body: Vec<u8>,
    ) -> Result<(http::HeaderMap, BoxedAsyncRead), ApiError<RestError>> {
        Err(unsupported("downloads"))
    }

    async fn get_service_endpoint(
        &self,
        service_type: &ServiceType,
        _version: Option<&ApiVersion>,
    ) -> Result<ServiceEndpoint, ApiError<RestError>> {
        let token = self.token.read().await.clone();
        let url = if *service_type == ServiceType::Identity {
            format!("{}/", self.identity_url)
        } else {
            let found = pick(&token.catalog, service_type, &self.region).ok_or_else(|| {
                ApiError::catalog(CatalogError::ServiceNotConfigured {
                    srv_type: service_type.to_string(),
                    region: Some(self.region.clone()),
                    interface: Some("public".into()),
                })
            })?;
            versioned_url(service_type, &found)
        };
        let project_id = token
            .project
            .as_ref()
            .and_then(|p| p["id"].as_str())
            .map(str::to_string);
        ServiceEndpoint::from_url_string(&url, project_id.as_deref()).map_err(ApiError::catalog)
    }
}

/// The answer of the calls the driver never makes on this session.
fn unsupported(what: &str) -> ApiError<RestError> {
    ApiError::InvalidHeader {
        header: String::new(),
        message: format!("{what} are not supported by the client-certificate session"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_url_takes_the_auth_url_forms_gophercloud_takes() {
        for url in [
            "https://k:5000/v3",
            "https://k:5000/v3/",
            "https://k:5000",
            "https://k:5000/",
            " https://k:5000/v3 ",
        ] {
            assert_eq!(identity_v3_url(url), "https://k:5000/v3", "{url}");
        }
        assert_eq!(
            identity_v3_url("https://cloud/identity"),
            "https://cloud/identity/v3"
        );
    }

    #[test]
    fn the_token_request_scopes_a_password_to_the_project_and_not_a_credential() {
        let secret = mcm_driver::testing::secret_with;
        let pw = Credentials::from_secret(&secret(&[
            ("authURL", "https://k/v3"),
            ("username", "u"),
            ("password", "p"),
            ("domainName", "d"),
            ("tenantName", "t"),
        ]));
        let b = auth_body(&pw);
        assert_eq!(b["auth"]["identity"]["methods"], json!(["password"]));
        assert_eq!(
            b["auth"]["identity"]["password"]["user"],
            json!({"name": "u", "password": "p", "domain": {"name": "d"}})
        );
        assert_eq!(
            b["auth"]["scope"],
            json!({"project": {"name": "t", "domain": {"name": "d"}}})
        );
        let ac = Credentials::from_secret(&secret(&[
            ("authURL", "https://k/v3"),
            ("applicationCredentialID", "id"),
            ("applicationCredentialSecret", "s"),
        ]));
        let b = auth_body(&ac);
        assert_eq!(
            b["auth"]["identity"]["application_credential"],
            json!({"id": "id", "secret": "s"})
        );
        assert!(b["auth"].get("scope").is_none());
    }
}
