//! Shared helpers of the provider-local tests: an in-process server on
//! 127.0.0.1:0 with a temporary store, classes, machines and requests.
#![allow(dead_code)]

use mcm_provider_local::server::{spawn, CloudConfig, ServerHandle};
use mcm_provider_local::{AdminClient, LocalDriver, Tunables};
use std::path::{Path, PathBuf};

pub struct Cloud {
    pub handle: ServerHandle,
    pub driver: LocalDriver,
    pub admin: AdminClient,
    pub store: PathBuf,
    pub dir: tempfile::TempDir,
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

pub async fn start_at(
    store: &Path,
    tunables: Tunables,
) -> (ServerHandle, LocalDriver, AdminClient) {
    let mut config = CloudConfig::new(store);
    config.tunables = tunables;
    start_with(config).await
}

pub async fn start_with(config: CloudConfig) -> (ServerHandle, LocalDriver, AdminClient) {
    init_tracing();
    let (addr, handle) = spawn(config).await.expect("server starts");
    let url = format!("http://{addr}");
    let driver = LocalDriver::new(&url).expect("driver");
    let admin = AdminClient::new(&url).expect("admin client");
    (handle, driver, admin)
}

pub async fn start(tunables: Tunables) -> Cloud {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("cloud.redb");
    let (handle, driver, admin) = start_at(&store, tunables).await;
    Cloud {
        handle,
        driver,
        admin,
        store,
        dir,
    }
}

/// The local cloud's fixtures, shared with the other crate's driver tests.
#[allow(unused_imports)] // each test binary uses a part
pub use mcm_testenv::fixtures::{
    list_request, local_class as class, local_class_with as class_with, local_spec as spec,
    machine, request,
};
