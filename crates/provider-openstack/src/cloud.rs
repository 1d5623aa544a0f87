//! One authenticated OpenStack session (`openstack_sdk::AsyncOpenStack`) with
//! the client-side budget and call counting around every request.

use crate::config::{OpClass, OpenStackDriverConfig};
use crate::direct::{DirectError, DirectSession};
use crate::errors::{error_message, OsError};
use crate::secret::{Credentials, Method};
use mcm_driver::budget::Limiter;
use openstack_sdk::api::{ignore, paged, ApiError, Pageable, Pagination, QueryAsync, RestEndpoint};
use openstack_sdk::config::CloudConfig;
use openstack_sdk::types::ServiceType;
use openstack_sdk::{AsyncOpenStack, RestError};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// OpenStack calls made by the driver, per operation (e.g. `nova.servers.create`).
#[derive(Clone, Debug, Default)]
pub struct ApiCallRecorder {
    calls: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl ApiCallRecorder {
    /// A snapshot of the counts.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub(crate) fn bump(&self, op: &str) {
        if let Ok(mut c) = self.calls.lock() {
            *c.entry(op.to_string()).or_default() += 1;
        }
    }
}

/// An authenticated session for one identity, project and region.
pub(crate) struct Cloud {
    session: Session,
    limiter: Arc<Limiter<OpClass>>,
    calls: ApiCallRecorder,
    cloud_api: mcm_driver::cloud_api::CloudApi,
}

/// openstack_sdk's session, or ours where the cloud wants a TLS client
/// certificate (which openstack_sdk's session cannot present).
enum Session {
    Sdk(Box<AsyncOpenStack>),
    Direct(Box<DirectSession>),
}

/// The pause after a throttled answer, doubled per consecutive one.
const THROTTLE_PAUSE: Duration = Duration::from_secs(2);
const THROTTLE_PAUSE_MAX: Duration = Duration::from_secs(60);

/// The openstack_sdk configuration of a Secret's credentials.
fn cloud_config(
    creds: &Credentials,
    region: &str,
    ca_file: Option<PathBuf>,
) -> Result<CloudConfig, OsError> {
    let mut auth = Map::new();
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            auth.insert(k.to_string(), json!(v));
        }
    };
    put("auth_url", &creds.auth_url);
    let (user_domain_name, user_domain_id) =
        if creds.user_domain_name.is_empty() && creds.user_domain_id.is_empty() {
            (&creds.domain_name, &creds.domain_id)
        } else {
            (&creds.user_domain_name, &creds.user_domain_id)
        };
    let auth_type = match &creds.method {
        Method::Password { username, password } => {
            put("username", username);
            put("password", password);
            put("user_domain_name", user_domain_name);
            if user_domain_name.is_empty() {
                put("user_domain_id", user_domain_id);
            }
            if creds.tenant_id.is_empty() {
                put("project_name", &creds.tenant_name);
                put("project_domain_name", &creds.domain_name);
                if creds.domain_name.is_empty() {
                    put("project_domain_id", &creds.domain_id);
                }
            } else {
                put("project_id", &creds.tenant_id);
            }
            "v3password"
        }
        Method::ApplicationCredential {
            id,
            name,
            username,
            secret,
        } => {
            put("application_credential_secret", secret);
            if id.is_empty() {
                put("application_credential_name", name);
                put("username", username);
                put("user_domain_name", user_domain_name);
                if user_domain_name.is_empty() {
                    put("user_domain_id", user_domain_id);
                }
            } else {
                put("application_credential_id", id);
            }
            "v3applicationcredential"
        }
    };
    let mut cfg = json!({
        "auth": Value::Object(auth),
        "auth_type": auth_type,
        "region_name": region,
        "interface": "public",
        "auth_cache": false,
    });
    if creds.insecure {
        cfg["verify"] = json!(false);
    }
    if let Some(f) = ca_file {
        cfg["cacert"] = json!(f.to_string_lossy());
    }
    serde_json::from_value(cfg).map_err(|e| OsError::Connect(format!("invalid configuration: {e}")))
}

/// openstack_sdk reads a CA bundle from a path, once, while it connects:
/// the Secret's `caCert` goes into a file this process creates itself (a
/// unique name, created exclusively, mode 0600), which is removed when the
/// returned handle drops, after the connect. Never a predictable path: a file
/// another local user planted there would be trusted as the CA.
fn ca_file(pem: &[u8]) -> Result<tempfile::NamedTempFile, OsError> {
    use std::io::Write;
    let failed = |e: std::io::Error| OsError::Connect(format!("cannot write caCert: {e}"));
    let mut file = tempfile::Builder::new()
        .prefix("mcm-openstack-ca-")
        .suffix(".pem")
        .tempfile()
        .map_err(failed)?;
    file.write_all(pem).map_err(failed)?;
    file.flush().map_err(failed)?;
    Ok(file)
}

/// Whether an endpoint of the session's catalog names `region` in its
/// `region` field (what openstack_sdk matches); an empty catalog counts as yes.
fn names_region(os: &AsyncOpenStack, region: &str) -> bool {
    let Some(catalog) = os.get_token_catalog() else {
        return true;
    };
    region.is_empty()
        || catalog.is_empty()
        || catalog.iter().any(|s| {
            s.endpoints
                .iter()
                .any(|e| e.region.as_deref() == Some(region))
        })
}

/// The error of a failed openstack_sdk call.
pub(crate) fn convert(op: &'static str, e: ApiError<RestError>) -> OsError {
    let from_value = |v: &Value| error_message(v).unwrap_or_else(|| v.to_string());
    match e {
        ApiError::OpenStack { status, msg, .. } => {
            let message = serde_json::from_str::<Value>(&msg)
                .map(|v| from_value(&v))
                .unwrap_or(msg);
            OsError::Api {
                op,
                status: status.as_u16(),
                message,
            }
        }
        ApiError::OpenStackUnrecognized { status, obj, .. } => OsError::Api {
            op,
            status: status.as_u16(),
            message: from_value(&obj),
        },
        ApiError::OpenStackService { status, data, .. } => OsError::Api {
            op,
            status: status.as_u16(),
            message: data.chars().take(300).collect(),
        },
        // The catalog lists no endpoint for a service the call needs (e.g.
        // no block storage for a root volume): waiting will not change it.
        ApiError::Catalog { source } => OsError::Failed(format!("{op}: {source}")),
        other => OsError::Transport {
            op,
            message: other.to_string(),
        },
    }
}

impl Cloud {
    /// Reports every call to `api` (the driver's handle).
    pub(crate) fn with_cloud_api(mut self, api: mcm_driver::cloud_api::CloudApi) -> Self {
        self.cloud_api = api;
        self
    }

    /// Authenticates (Keystone v3, no on-disk token cache) and discovers
    /// Nova's microversion range.
    pub async fn connect(
        creds: &Credentials,
        region: &str,
        config: &OpenStackDriverConfig,
        limiter: Arc<Limiter<OpClass>>,
        calls: ApiCallRecorder,
    ) -> Result<Cloud, OsError> {
        if creds.client_cert.is_some() && creds.client_key.is_some() {
            return Cloud::connect_direct(creds, region, config, limiter, calls).await;
        }
        // openstack_sdk finds its auth plugins through link-time registration,
        // and its generated anchors are empty in the published crate: without
        // a reference the linker drops the application-credential plugin.
        std::hint::black_box(&openstack_sdk_auth_password::ANCHOR);
        std::hint::black_box(&openstack_sdk_auth_applicationcredential::ANCHOR);
        // Kept until the session is made (openstack_sdk reads it while connecting).
        let ca = creds.ca_cert.as_deref().map(ca_file).transpose()?;
        let cfg = cloud_config(creds, region, ca.as_ref().map(|f| f.path().to_path_buf()))?;
        limiter.acquire(OpClass::Read).await;
        calls.bump("keystone.tokens.create");
        let os = AsyncOpenStack::builder(&cfg)
            .disable_auth_cache(true)
            .http_timeout(config.http_timeout)
            .connect()
            .await
            .map_err(|e| OsError::Connect(connect_error(&e)))?;
        drop(ca);
        if !names_region(&os, region) {
            // The catalog names the region by `region_id` only (or not at
            // all): our own session matches `region_id` as gophercloud does.
            tracing::info!(
                region,
                "no catalog endpoint names the region; matching region_id"
            );
            return Cloud::connect_direct(creds, region, config, limiter, calls).await;
        }
        // Version discovery: Nova's microversion range, and the versioned
        // endpoints of Neutron and Cinder (catalogs often list them unversioned).
        for (service, op) in [
            (ServiceType::Compute, "nova.versions.get"),
            (ServiceType::Network, "neutron.versions.get"),
            (ServiceType::BlockStorage, "cinder.versions.get"),
        ] {
            calls.bump(op);
            os.discover_service_endpoint(&service)
                .await
                .map_err(|e| OsError::Connect(format!("{service} version discovery: {e}")))?;
        }
        Ok(Cloud {
            session: Session::Sdk(Box::new(os)),
            limiter,
            calls,
            cloud_api: Default::default(),
        })
    }

    /// A session of our own ([`DirectSession`]): with the Secret's client
    /// certificate, or for a catalog that names the region by `region_id`.
    async fn connect_direct(
        creds: &Credentials,
        region: &str,
        config: &OpenStackDriverConfig,
        limiter: Arc<Limiter<OpClass>>,
        calls: ApiCallRecorder,
    ) -> Result<Cloud, OsError> {
        limiter.acquire(OpClass::Read).await;
        calls.bump("keystone.tokens.create");
        let session = DirectSession::connect(creds, region, config.http_timeout)
            .await
            .map_err(|e| match e {
                DirectError::Material(m) => {
                    OsError::InvalidSecret(format!("invalid TLS material in the Secret: {m}"))
                }
                DirectError::Auth(m) => OsError::Connect(m),
            })?;
        Ok(Cloud {
            session: Session::Direct(Box::new(session)),
            limiter,
            calls,
            cloud_api: Default::default(),
        })
    }

    async fn before(&self, op: &'static str, class: OpClass) {
        self.limiter.acquire(class).await;
        self.calls.bump(op);
    }

    async fn after<T>(
        &self,
        op: &'static str,
        class: OpClass,
        r: Result<T, ApiError<RestError>>,
    ) -> Result<T, OsError> {
        match r {
            Ok(v) => {
                self.limiter.succeeded(class).await;
                Ok(v)
            }
            Err(e) => {
                let err = convert(op, e);
                if matches!(err.status(), Some(429 | 503)) {
                    let pause = self
                        .limiter
                        .penalize(class, THROTTLE_PAUSE, THROTTLE_PAUSE_MAX)
                        .await;
                    tracing::warn!(
                        op,
                        ?pause,
                        "OpenStack throttled the call; pausing the class"
                    );
                }
                Err(err)
            }
        }
    }

    /// One call whose answer is deserialized (under the endpoint's response key).
    pub async fn run<T, E>(&self, op: &'static str, class: OpClass, ep: E) -> Result<T, OsError>
    where
        E: RestEndpoint + Sync + Send,
        T: DeserializeOwned + Send + 'static,
    {
        self.before(op, class).await;
        let r = match &self.session {
            Session::Sdk(os) => observe(&self.cloud_api, op, ep.query_async(os.as_ref())).await,
            Session::Direct(m) => observe(&self.cloud_api, op, ep.query_async(m.as_ref())).await,
        };
        self.after(op, class, r).await
    }

    /// Every page of a list.
    pub async fn list<T, E>(&self, op: &'static str, ep: E) -> Result<Vec<T>, OsError>
    where
        E: RestEndpoint + Pageable + Sync + Send,
        T: DeserializeOwned + Send + 'static,
    {
        self.before(op, OpClass::Read).await;
        let pages = paged(ep, Pagination::All);
        let r = match &self.session {
            Session::Sdk(os) => observe(&self.cloud_api, op, pages.query_async(os.as_ref())).await,
            Session::Direct(m) => observe(&self.cloud_api, op, pages.query_async(m.as_ref())).await,
        };
        self.after(op, OpClass::Read, r).await
    }

    /// A call whose answer has no body of interest (deletes, tags).
    pub async fn send<E>(&self, op: &'static str, class: OpClass, ep: E) -> Result<(), OsError>
    where
        E: RestEndpoint + Sync + Send,
    {
        self.before(op, class).await;
        let ep = ignore(ep);
        let r = match &self.session {
            Session::Sdk(os) => observe(&self.cloud_api, op, ep.query_async(os.as_ref())).await,
            Session::Direct(m) => observe(&self.cloud_api, op, ep.query_async(m.as_ref())).await,
        };
        self.after(op, class, r).await
    }
}

/// Runs one call and reports it to the driver's `api` with provider
/// `openstack` and the reference's service label: the service of the
/// operation (`nova`, `neutron`, `cinder`: `op` starts with it).
async fn observe<T, E>(
    api: &mcm_driver::cloud_api::CloudApi,
    op: &'static str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let service = op.split('.').next().unwrap_or(op);
    api.observe("openstack", service, call).await
}

/// The message of a failed connection with its causes, tagged with the
/// HTTP status when Keystone refused the credentials.
fn connect_error(e: &openstack_sdk::OpenStackError) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    let refused = matches!(
        e,
        openstack_sdk::OpenStackError::AuthError { .. } | openstack_sdk::OpenStackError::NoAuth
    );
    if text.contains("401") || (refused && text.contains("identity service error")) {
        format!("HTTP 401: {text}")
    } else if text.contains("403") {
        format!("HTTP 403: {text}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
    use super::*;

    const PEM: &[u8] = b"-----BEGIN CERTIFICATE-----\nours\n-----END CERTIFICATE-----\n";

    /// The path the CA used to be written to (and trusted from, if present).
    fn old_predictable_path(pem: &[u8]) -> PathBuf {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        pem.hash(&mut h);
        std::env::temp_dir().join(format!("mcm-openstack-ca-{:016x}.pem", h.finish()))
    }

    #[test]
    fn a_ca_file_planted_at_the_old_predictable_path_is_not_trusted() {
        let planted = old_predictable_path(PEM);
        let attacker = b"-----BEGIN CERTIFICATE-----\nattacker\n-----END CERTIFICATE-----\n";
        std::fs::write(&planted, attacker).expect("plant");

        let ours = ca_file(PEM).expect("ca file");
        let creds = Credentials::from_secret(&k8s_openapi::api::core::v1::Secret::default());
        let cfg = cloud_config(&creds, "r", Some(ours.path().to_path_buf())).expect("config");
        let _ = std::fs::remove_file(&planted);

        assert_ne!(ours.path(), planted.as_path());
        assert_eq!(cfg.cacert.as_deref(), ours.path().to_str());
        assert_eq!(std::fs::read(ours.path()).expect("read"), PEM);
    }

    #[cfg(unix)]
    #[test]
    fn the_ca_file_is_private_unique_and_removed_after_use() {
        use std::os::unix::fs::PermissionsExt;
        let a = ca_file(PEM).expect("a");
        let b = ca_file(PEM).expect("b");
        assert_ne!(
            a.path(),
            b.path(),
            "one file per connect, never a shared name"
        );
        let mode = std::fs::metadata(a.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());
    }
}
