//! Shared helpers of the gRPC tests: a local cloud, a driver served on a
//! Unix socket in a temporary directory, classes and machines.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::{Driver, ListMachinesRequest, MachineRequest};
use mcm_driver_grpc::{ClientOptions, Endpoint, GrpcDriver, ServeOptions, ServerInfo};
use mcm_provider_local::server::{spawn, CloudConfig, ServerHandle};
use mcm_provider_local::{AdminClient, LocalDriver, Tunables};
use serde_json::{json, Value};
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

/// A spec of cluster `cluster` that wants srcDstCheck off (so the machine
/// is Uninitialized until InitializeMachine).
pub fn spec(cluster: &str) -> Value {
    json!({
        "image": "local/ubuntu-24.04",
        "instanceType": "local.medium",
        "srcAndDstChecksEnabled": false,
        "ipv6AddressCount": 2,
        "ipv6PrefixCount": 1,
        "tags": {
            format!("kubernetes.io/cluster/{cluster}"): "1",
            "kubernetes.io/role/node": "1"
        }
    })
}

pub fn class_with(name: &str, provider_spec: Value) -> MachineClass {
    MachineClass {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".to_string()),
            ..Default::default()
        },
        provider_spec,
        provider: "local".to_string(),
        ..Default::default()
    }
}

pub fn class(cluster: &str) -> MachineClass {
    class_with(&format!("class-{cluster}"), spec(cluster))
}

pub fn machine(prefix: &str) -> Machine {
    let suffix = format!("{:08x}", rand::random::<u32>());
    let mut m = Machine::new(&format!("{prefix}-{suffix}"), MachineSpec::default());
    m.metadata.namespace = Some("default".to_string());
    m.metadata.uid = Some(format!("uid-{suffix}-{:08x}", rand::random::<u32>()));
    m
}

pub fn request(machine: &Machine, class: &MachineClass) -> MachineRequest {
    MachineRequest {
        machine: machine.clone(),
        machine_class: class.clone(),
        secret: Secret::default(),
    }
}

pub fn list_request(class: &MachineClass) -> ListMachinesRequest {
    ListMachinesRequest {
        machine_class: class.clone(),
        secret: Secret::default(),
    }
}

pub fn local_driver(url: &str) -> Arc<dyn Driver> {
    Arc::new(LocalDriver::new(url).expect("local driver"))
}
