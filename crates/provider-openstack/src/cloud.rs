//! One authenticated OpenStack session (`openstack_sdk::AsyncOpenStack`) with
//! the client-side budget and call counting around every request.

use crate::config::{OpClass, OpenStackDriverConfig};
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
    os: AsyncOpenStack,
    limiter: Arc<Limiter<OpClass>>,
    calls: ApiCallRecorder,
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

/// openstack_sdk reads a CA bundle from a file: the Secret's `caCert` is
/// written once per content under the temporary directory.
fn ca_file(pem: &[u8]) -> Result<PathBuf, OsError> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    pem.hash(&mut h);
    let path = std::env::temp_dir().join(format!("mcm-openstack-ca-{:016x}.pem", h.finish()));
    if !path.exists() {
        std::fs::write(&path, pem).map_err(|e| {
            OsError::Connect(format!("cannot write caCert to {}: {e}", path.display()))
        })?;
    }
    Ok(path)
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
        other => OsError::Transport {
            op,
            message: other.to_string(),
        },
    }
}

impl Cloud {
    /// Authenticates (Keystone v3, no on-disk token cache) and discovers
    /// Nova's microversion range.
    pub async fn connect(
        creds: &Credentials,
        region: &str,
        config: &OpenStackDriverConfig,
        limiter: Arc<Limiter<OpClass>>,
        calls: ApiCallRecorder,
    ) -> Result<Cloud, OsError> {
        if creds.client_cert {
            return Err(OsError::Unsupported(
                "TLS client certificates (clientCert/clientKey) are not supported by this provider"
                    .into(),
            ));
        }
        // openstack_sdk finds its auth plugins through link-time registration,
        // and its generated anchors are empty in the published crate: without
        // a reference the linker drops the application-credential plugin.
        std::hint::black_box(&openstack_sdk_auth_password::ANCHOR);
        std::hint::black_box(&openstack_sdk_auth_applicationcredential::ANCHOR);
        let ca = creds.ca_cert.as_deref().map(ca_file).transpose()?;
        let cfg = cloud_config(creds, region, ca)?;
        limiter.acquire(OpClass::Read).await;
        calls.bump("keystone.tokens.create");
        let os = AsyncOpenStack::builder(&cfg)
            .disable_auth_cache(true)
            .http_timeout(config.http_timeout)
            .connect()
            .await
            .map_err(|e| OsError::Connect(connect_error(&e)))?;
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
        Ok(Cloud { os, limiter, calls })
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
        let r = observe(op, ep.query_async(&self.os)).await;
        self.after(op, class, r).await
    }

    /// Every page of a list.
    pub async fn list<T, E>(&self, op: &'static str, ep: E) -> Result<Vec<T>, OsError>
    where
        E: RestEndpoint + Pageable + Sync + Send,
        T: DeserializeOwned + Send + 'static,
    {
        self.before(op, OpClass::Read).await;
        let r = observe(op, paged(ep, Pagination::All).query_async(&self.os)).await;
        self.after(op, OpClass::Read, r).await
    }

    /// A call whose answer has no body of interest (deletes, tags).
    pub async fn send<E>(&self, op: &'static str, class: OpClass, ep: E) -> Result<(), OsError>
    where
        E: RestEndpoint + Sync + Send,
    {
        self.before(op, class).await;
        let r = observe(op, ignore(ep).query_async(&self.os)).await;
        self.after(op, class, r).await
    }
}

/// Runs one call and reports it to [`mcm_driver::cloud_api`] with provider
/// `openstack` and the reference's service label: the service of the
/// operation (`nova`, `neutron`, `cinder`: `op` starts with it).
async fn observe<T, E>(
    op: &'static str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let service = op.split('.').next().unwrap_or(op);
    mcm_driver::cloud_api::observe("openstack", service, call).await
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
