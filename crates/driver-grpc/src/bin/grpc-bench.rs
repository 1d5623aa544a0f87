//! The overhead of the gRPC hop per call over a Unix socket: a driver that
//! answers at once, called in sequence from one client, p50 and p99 per
//! operation, next to the same calls in process. A benchmark, not a test:
//!
//! `cargo run -p mcm-driver-grpc --release --features bench --bin grpc-bench [calls]`

use async_trait::async_trait;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::{
    CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, ListMachinesRequest,
    ListMachinesResponse, MachineRequest,
};
use mcm_driver_grpc::{ClientOptions, Endpoint, GrpcDriver, ServeOptions, ServerInfo};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Answers every call at once, with answers of realistic size.
struct Immediate;

const PROVIDER_ID: &str = "local:///zone-a/i-0123456789abcdef0";

#[async_trait]
impl Driver for Immediate {
    async fn create_machine(
        &self,
        r: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        Ok(CreateMachineResponse {
            provider_id: PROVIDER_ID.into(),
            node_name: r.machine.metadata.name.clone().unwrap_or_default(),
            ..Default::default()
        })
    }
    async fn delete_machine(
        &self,
        _: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        Ok(DeleteMachineResponse::default())
    }
    async fn get_machine_status(
        &self,
        r: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        Ok(GetMachineStatusResponse {
            provider_id: PROVIDER_ID.into(),
            node_name: r.machine.metadata.name.clone().unwrap_or_default(),
            addresses: Vec::new(),
        })
    }
    async fn list_machines(&self, _: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let mut r = ListMachinesResponse::default();
        for i in 0..50 {
            r.machine_list.insert(
                format!("local:///zone-a/i-{i:017x}"),
                format!("machine-{i}"),
            );
        }
        Ok(r)
    }
}

fn request() -> Result<MachineRequest, serde_json::Error> {
    let mut machine = Machine::new("bench-machine-7f9c2", MachineSpec::default());
    machine.metadata.namespace = Some("shoot--project--cluster".into());
    machine.metadata.uid = Some("2b6f0cc9-8f3a-4c1e-9d55-0f1e2d3c4b5a".into());
    let machine_class: MachineClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "bench", "namespace": "shoot--project--cluster"},
        "provider": "local",
        "providerSpec": {"image": "local/ubuntu-24.04", "instanceType": "local.medium",
                         "tags": {"kubernetes.io/cluster/shoot--project--cluster": "1",
                                  "kubernetes.io/role/node": "1"}}
    }))?;
    let secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bench"},
        "data": {"userData": "I2Nsb3VkLWNv".repeat(200)}
    }))?;
    Ok(MachineRequest {
        machine,
        machine_class,
        secret,
    })
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

async fn measure<F, Fut>(what: &str, n: usize, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..n.min(500) {
        f().await;
    }
    let mut v = Vec::with_capacity(n);
    let mut failed = 0;
    for _ in 0..n {
        let t = Instant::now();
        if !f().await {
            failed += 1;
        }
        v.push(t.elapsed());
    }
    let (p50, p99) = percentiles(v);
    println!("{what:<40} p50 {p50:>10.1?}  p99 {p99:>10.1?}  ({n} calls, {failed} failed)");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5000);
    let dir = std::env::temp_dir().join(format!("mcm-grpc-bench-{}", std::process::id()));
    let socket = dir.join("driver.sock");
    let info = ServerInfo {
        name: "bench".into(),
        version: "0".into(),
        providers: vec!["local".into()],
        ..Default::default()
    };
    let listen = Endpoint::Unix(socket.clone());
    let server = tokio::spawn(mcm_driver_grpc::serve(
        Arc::new(Immediate),
        info,
        ServeOptions::new(listen.clone()),
    ));
    while tokio::net::UnixStream::connect(&socket).await.is_err() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let d = GrpcDriver::new("local", &listen, ClientOptions::default())?;
    let req = request()?;
    let list = ListMachinesRequest {
        machine_class: req.machine_class.clone(),
        secret: req.secret.clone(),
    };
    let direct = Immediate;
    measure("in process: GetMachineStatus", n, || async {
        direct.get_machine_status(&req).await.is_ok()
    })
    .await;
    measure("Unix socket: GetMachineStatus", n, || async {
        d.get_machine_status(&req).await.is_ok()
    })
    .await;
    measure("Unix socket: CreateMachine", n, || async {
        d.create_machine(&req).await.is_ok()
    })
    .await;
    measure("Unix socket: DeleteMachine", n, || async {
        d.delete_machine(&req).await.is_ok()
    })
    .await;
    measure("Unix socket: ListMachines (50 VMs)", n, || async {
        d.list_machines(&list).await.is_ok()
    })
    .await;
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
