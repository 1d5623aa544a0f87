//! The `local` provider world of `node_sync.rs` and `startup_taint.rs`: an
//! in-process local cloud whose simulated kubelets register the Nodes on
//! the test control plane, the machine controller in process, and the
//! user-data Secret `creds`. Each test file adds its own methods to
//! [`World`].
#![allow(dead_code)] // each test file uses a part

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ListParams, PostParams};
use mcm_api::Machine;
use mcm_provider_local::{server, AdminClient, LocalDriver, Tunables};
use mcm_runtime::{metrics::Metrics, Config, Context, DriverRegistry};
use mcm_testenv::TestEnv;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::machine_common::{self as mc, Running};

/// How long a test waits: the simulated kubelets take seconds.
pub const WAIT: Duration = Duration::from_secs(90);
/// The controller's short retry in this world.
pub const SHORT_RETRY: Duration = Duration::from_millis(300);

/// The local cloud and the machine controller of one test.
pub struct World {
    pub env: TestEnv,
    pub admin: AdminClient,
    /// The controller's metrics.
    pub registry: prometheus_client::registry::Registry,
    controller: Option<Running>,
    cloud: Option<server::ServerHandle>,
    dir: PathBuf,
}

impl World {
    /// Starts the local cloud (zone = the test's namespace, booting in
    /// 300 ms; `tweak` changes its configuration first) and the machine
    /// controller on it, and creates the Secret `creds`.
    pub async fn start(test: &str, tweak: impl FnOnce(&mut server::CloudConfig)) -> Option<World> {
        if std::env::var("RUST_LOG").is_ok() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .try_init();
        }
        let env = TestEnv::new(test).await?;
        let ns = env.namespace.clone();
        let dir = std::env::temp_dir().join(format!("mcm-{test}-{ns}"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut cloud = server::CloudConfig::new(dir.join("local-cloud.redb"));
        cloud.zone = ns.clone();
        cloud.target_kubeconfig = Some(mcm_testenv::kubeconfig_path());
        cloud.heartbeat_interval = Duration::from_secs(2);
        cloud.tunables = Tunables::unlimited();
        cloud.tunables.boot_delay_ms = 300;
        tweak(&mut cloud);
        let (addr, handle) = server::spawn(cloud).await.expect("local cloud");
        let url = format!("http://{addr}");
        let driver = LocalDriver::new(&url).expect("driver");
        let admin = AdminClient::new(&url).expect("admin client");
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        let cfg = Config {
            short_retry: SHORT_RETRY,
            ..mc::config(&ns)
        };
        let mut drivers = DriverRegistry::new();
        drivers.register("local", Arc::new(driver));
        let target = Some(env.client.clone());
        let ctx = Context::new(env.client.clone(), target, cfg, drivers, metrics);
        let controller = mc::run(ctx);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "creds"},
            "stringData": {"userData": "#cloud-config\n"}
        }))
        .expect("secret");
        env.api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
        Some(World {
            env,
            admin,
            registry,
            controller: Some(controller),
            cloud: Some(handle),
            dir,
        })
    }

    /// A machine name unique across runs (Nodes are cluster-wide and named
    /// after their machine by the local cloud).
    pub fn unique(&self, name: &str) -> String {
        let suffix = self.env.namespace.rsplit('-').next().unwrap_or_default();
        format!("{name}-{suffix}")
    }

    /// Every Node of the control plane.
    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.env.client.clone())
    }

    /// Deletes the machines (and so their Nodes) while the controller still
    /// runs, then stops everything.
    pub async fn stop(mut self) {
        let machines = self.env.api::<Machine>();
        let _ = machines
            .delete_collection(&Default::default(), &ListParams::default())
            .await;
        let gone = mcm_testenv::eventually(WAIT, "machines gone", || async {
            machines
                .list(&ListParams::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
        })
        .await;
        if gone.is_err() {
            eprintln!("machines of {} not gone; leaving them", self.env.namespace);
        }
        if let Some(controller) = self.controller.take() {
            controller.stop().await;
        }
        if let Some(cloud) = self.cloud.take() {
            let _ = cloud.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
