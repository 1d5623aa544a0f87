//! Shared helpers of the gRPC tests: a local cloud, a driver served on a
//! Unix socket in a temporary directory, classes and machines.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcm_driver::Driver;
use mcm_driver_grpc::{ClientOptions, Endpoint, GrpcDriver, ServeOptions, ServerInfo};
use mcm_provider_local::server::{spawn, CloudConfig, ServerHandle};
use mcm_provider_local::{AdminClient, LocalDriver, Tunables};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

pub struct Cloud {
    pub handle: ServerHandle,
    pub url: String,
    pub admin: AdminClient,
    pub dir: tempfile::TempDir,
}

pub async fn cloud() -> Cloud {
    init_tracing();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = CloudConfig::new(dir.path().join("cloud.redb"));
    config.tunables = Tunables::unlimited();
    let (addr, handle) = spawn(config).await.expect("local cloud starts");
    let url = format!("http://{addr}");
    let admin = AdminClient::new(&url).expect("admin client");
    Cloud {
        handle,
        url,
        admin,
        dir,
    }
}

pub fn local_info() -> ServerInfo {
    ServerInfo {
        name: "mcm-provider-local".into(),
        version: "test".into(),
        providers: vec!["local".into()],
        ..Default::default()
    }
}

/// A socket path in `dir`, in a subdirectory the server creates.
pub fn socket_in(dir: &Path) -> PathBuf {
    dir.join("run").join("driver.sock")
}

/// Serves `driver` on `socket` in a task of the current runtime; returns
/// once the socket accepts connections.
pub async fn serve_on(
    driver: Arc<dyn Driver>,
    info: ServerInfo,
    socket: &Path,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let opts = ServeOptions::new(Endpoint::Unix(socket.to_path_buf()));
    let task = tokio::spawn(async move {
        mcm_driver_grpc::serve_with_shutdown(driver, info, opts, async {
            let _ = rx.await;
        })
        .await
        .expect("serve");
    });
    wait_for_socket(socket).await;
    (tx, task)
}

pub async fn wait_for_socket(socket: &Path) {
    for _ in 0..200 {
        if tokio::net::UnixStream::connect(socket).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("socket {} never accepted", socket.display());
}

pub fn client(provider: &str, socket: &Path, options: ClientOptions) -> GrpcDriver {
    GrpcDriver::new(provider, &Endpoint::Unix(socket.to_path_buf()), options).expect("client")
}

/// The local cloud's fixtures, shared with the other crate's driver tests.
#[allow(unused_imports)] // each test binary uses a part
pub use mcm_testenv::fixtures::{
    list_request, local_class as class, local_class_with as class_with, local_spec as spec,
    machine, request,
};

pub fn local_driver(url: &str) -> Arc<dyn Driver> {
    Arc::new(LocalDriver::new(url).expect("local driver"))
}
