//! # mcm-testenv: tests against the real control plane
//!
//! mcm-rs is tested against a real kube-apiserver and etcd (and
//! kube-controller-manager), built from the Go module proxy and started on
//! loopback by `hack/testenv.sh up`. This crate connects to it, installs the
//! project's CRDs, gives each test its own namespace and offers "eventually"
//! helpers; [`moto`] builds each AWS test's network in moto.
//!
//! The kubeconfig is found in `$KUBECONFIG`, else in
//! `$MCM_TESTENV_DIR/kubeconfig`, else in `<repo>/.mcm/testenv/kubeconfig`.
//! When no control plane answers, [`TestEnv::new`] returns `None` so a test can
//! skip, except in CI and under `hack/test.sh`, where it panics with a message
//! naming the command to run: those runs can never go green without the
//! control plane. A control plane that answers but is unusable (it rejects the
//! CRDs, a namespace) fails the test everywhere ([`TestEnvError::unavailable`]).
//! Every test that needs a service decides "skip or fail" through [`skip`]
//! ([`require`], [`require_classified`], [`skip_or_fail`]), which also defines
//! what counts as a strict run.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

pub mod fixtures;
pub mod moto;
pub mod process;
pub mod skip;
pub use moto::MotoNetwork;
pub use process::{free_port, KillOnDrop, TempDir};
pub use skip::{
    current_test, is_ci, is_strict, moto_endpoint, require, require_classified, service,
    skip_or_fail, Unavailable,
};

/// The command that starts the control plane, named in every "not reachable" message.
pub const START_COMMAND: &str =
    "hack/testenv.sh up (or: bash hack/test.sh, which starts everything)";

/// Errors of the test support.
#[derive(Debug, thiserror::Error)]
pub enum TestEnvError {
    /// No kubeconfig file was found.
    #[error(
        "no kubeconfig for the test control plane (looked at {0}); start it with: {START_COMMAND}"
    )]
    NoKubeconfig(String),
    /// The kubeconfig could not be read.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        source: kube::config::KubeconfigError,
    },
    /// The API server did not answer.
    #[error("the test control plane does not answer ({0}); start it with: {START_COMMAND}")]
    Unreachable(String),
    /// A Kubernetes call failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A test object did not fit its type.
    #[error("test object: {0}")]
    Json(#[from] serde_json::Error),
    /// Waiting for a condition timed out.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
    /// Watching for a condition failed.
    #[error("watching for {0} failed: {1}")]
    Watch(String, String),
}

impl TestEnvError {
    /// Whether the control plane is missing (no kubeconfig, nothing answers:
    /// a test may skip outside strict runs) or answers but is unusable (it
    /// rejected the CRDs or a namespace, never established a CRD, the
    /// kubeconfig is broken: a setup error that fails the test everywhere).
    pub fn unavailable(&self) -> Unavailable {
        match self {
            TestEnvError::NoKubeconfig(_) | TestEnvError::Unreachable(_) => Unavailable::Missing,
            TestEnvError::Kubeconfig { .. }
            | TestEnvError::Kube(_)
            | TestEnvError::Json(_)
            | TestEnvError::Timeout(..)
            | TestEnvError::Watch(..) => Unavailable::Unusable,
        }
    }
}

/// The kubeconfig path the tests use.
pub fn kubeconfig_path() -> PathBuf {
    if let Ok(p) = std::env::var("KUBECONFIG") {
        if !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    if let Ok(d) = std::env::var("MCM_TESTENV_DIR") {
        return PathBuf::from(d).join("kubeconfig");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.mcm/testenv/kubeconfig")
}

/// Selects rustls' ring provider for the process, as the `mcm` binary does at
/// start-up: with every provider compiled in, rustls sees two crypto
/// back-ends and refuses to pick one by itself. Idempotent.
pub fn init_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Connects to the test control plane and checks that it answers.
pub async fn connect() -> Result<Client, TestEnvError> {
    init_crypto();
    let path = kubeconfig_path();
    if !path.exists() {
        return Err(TestEnvError::NoKubeconfig(path.display().to_string()));
    }
    let kc = Kubeconfig::read_from(&path).map_err(|source| TestEnvError::Kubeconfig {
        path: path.display().to_string(),
        source,
    })?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|source| TestEnvError::Kubeconfig {
            path: path.display().to_string(),
            source,
        })?;
    let client = Client::try_from(config)?;
    client
        .apiserver_version()
        .await
        .map_err(|e| TestEnvError::Unreachable(e.to_string()))?;
    Ok(client)
}

/// Installs (server-side apply) the project's CRDs and waits until each is established.
pub async fn install_crds(client: &Client) -> Result<(), TestEnvError> {
    install_crd_list(client, &mcm_api::crds()).await
}

/// Applies the given CRDs and waits until each is established.
pub async fn install_crd_list(
    client: &Client,
    crds: &[CustomResourceDefinition],
) -> Result<(), TestEnvError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("mcm-testenv").force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &pp, &Patch::Apply(crd)).await?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let what = format!("CRD {name} established");
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .map_err(|_| TestEnvError::Timeout(Duration::from_secs(30), what.clone()))?
        .map_err(|e| TestEnvError::Watch(what.clone(), e.to_string()))?;
    }
    Ok(())
}

/// One test's view of the control plane: a client and a fresh namespace.
#[derive(Clone)]
pub struct TestEnv {
    /// A client with admin rights.
    pub client: Client,
    /// A namespace that belongs to this test alone.
    pub namespace: String,
}

impl TestEnv {
    /// Connects, installs the CRDs and creates a namespace named after `test`.
    ///
    /// Returns `None` (after printing `SKIPPED: <test> needs ...`) when no
    /// control plane answers, so the test can skip; in strict runs (CI,
    /// `hack/test.sh`) it panics instead ([`skip_or_fail`]). A control plane
    /// that answers but is unusable panics everywhere ([`TestEnvError::unavailable`]).
    pub async fn new(test: &str) -> Option<TestEnv> {
        require_classified(
            test,
            service::CONTROL_PLANE,
            Self::try_new(test).await,
            TestEnvError::unavailable,
        )
    }

    /// Like [`TestEnv::new`], but returns the error.
    pub async fn try_new(test: &str) -> Result<TestEnv, TestEnvError> {
        let client = connect().await?;
        install_crds(&client).await?;
        let namespace = create_namespace(&client, test).await?;
        Ok(TestEnv { client, namespace })
    }

    /// A namespaced API in this test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a Secret `name` in this namespace whose `userData` key holds
    /// `user_data` (the shape every MachineClass's secretRef points to).
    pub async fn create_user_data_secret(
        &self,
        name: &str,
        user_data: &str,
    ) -> Result<(), TestEnvError> {
        let secret = k8s_openapi::api::core::v1::Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            string_data: Some([("userData".to_string(), user_data.to_string())].into()),
            ..Default::default()
        };
        self.api::<k8s_openapi::api::core::v1::Secret>()
            .create(&PostParams::default(), &secret)
            .await?;
        Ok(())
    }

    /// Creates a MachineClass `name` of `provider` in this namespace with
    /// `provider_spec`, its secretRef pointing to the Secret `secret` here.
    pub async fn create_class(
        &self,
        name: &str,
        provider: &str,
        secret: &str,
        provider_spec: serde_json::Value,
    ) -> Result<(), TestEnvError> {
        let class: mcm_api::MachineClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": name},
            "provider": provider,
            "providerSpec": provider_spec,
            "secretRef": {"name": secret, "namespace": self.namespace},
        }))?;
        self.api::<mcm_api::MachineClass>()
            .create(&PostParams::default(), &class)
            .await?;
        Ok(())
    }
}

/// Creates a namespace `<prefix>-<random>` (the prefix sanitized to DNS-1123).
pub async fn create_namespace(client: &Client, prefix: &str) -> Result<String, TestEnvError> {
    let mut p: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    p.truncate(40);
    let p = p.trim_matches('-');
    let name = format!("{p}-{:08x}", rand::random::<u32>());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([("mcm-rs.test".to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

/// Polls `check` every 100 ms until it returns `Some`, or fails after `timeout`.
pub async fn eventually<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut check: F,
) -> Result<T, TestEnvError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(TestEnvError::Timeout(timeout, what.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Like [`eventually`] but panics with the description on timeout: for tests.
#[allow(clippy::panic, reason = "fails the calling test, by design")]
pub async fn must_eventually<T, F, Fut>(timeout: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match eventually(timeout, what, check).await {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// Waits until the test namespace's `events.k8s.io/v1` Events include every
/// reason in `reasons`, and returns the Events of that listing. An Event is
/// posted after the status write that a test usually waits for, so listing
/// them once right after that write races them; panics on timeout.
pub async fn must_see_events(
    env: &TestEnv,
    timeout: Duration,
    reasons: &[&str],
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = env.api();
    must_eventually(
        timeout,
        &format!("Events with the reasons {reasons:?}"),
        || async {
            let items = events
                .list(&kube::api::ListParams::default())
                .await
                .ok()?
                .items;
            reasons
                .iter()
                .all(|r| items.iter().any(|e| e.reason.as_deref() == Some(*r)))
                .then_some(items)
        },
    )
    .await
}

/// A negative check: `holds` stays true for all of `period` (polled every
/// 100 ms, and once more at its end); panics with `what` and the elapsed time
/// as soon as it does not. `period` must cover at least one retry or resync
/// period of the controller under test (derive it from the config the test
/// sets), so that "X does not happen" means "X did not happen on the pass
/// that would have done it".
#[allow(clippy::panic, reason = "fails the calling test, by design")]
pub async fn must_hold_for<F, Fut>(period: Duration, what: &str, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    let deadline = start + period;
    loop {
        let last = tokio::time::Instant::now() >= deadline;
        if !holds().await {
            panic!(
                "{what}: did not hold after {:?} of {period:?}",
                start.elapsed()
            );
        }
        if last {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
