//! Shared helpers of the provider-local tests: an in-process server on
//! 127.0.0.1:0 with a temporary store, classes, machines and requests.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::{ListMachinesRequest, MachineRequest};
use mcm_provider_local::server::{spawn, CloudConfig, ServerHandle};
use mcm_provider_local::{AdminClient, LocalDriver, Tunables};
use serde_json::{json, Value};
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

/// A spec of cluster `cluster` that wants srcDstCheck off, 2 IPv6 addresses and 1 prefix.
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
