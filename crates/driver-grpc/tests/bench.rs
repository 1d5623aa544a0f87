//! The overhead of the gRPC hop per call over a Unix socket: a driver that
//! answers at once, called in sequence, p50 and p99 per operation. A
//! benchmark, not a test: run it with
//! `cargo test -p mcm-driver-grpc --release --test bench -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use async_trait::async_trait;
use common::*;
use mcm_driver::{
    CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, ListMachinesRequest,
    ListMachinesResponse,
};
use mcm_driver_grpc::ClientOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Answers every call at once, with answers of realistic size.
struct Instant0;

#[async_trait]
impl Driver for Instant0 {
    async fn create_machine(
        &self,
        r: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        Ok(CreateMachineResponse {
            provider_id: "local:///z/i-0123456789abcdef".into(),
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
            provider_id: "local:///z/i-0123456789abcdef".into(),
            node_name: r.machine.metadata.name.clone().unwrap_or_default(),
            addresses: Vec::new(),
        })
    }
    async fn list_machines(&self, _: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let mut r = ListMachinesResponse::default();
        for i in 0..50 {
            r.machine_list
                .insert(format!("local:///z/i-{i:016x}"), format!("machine-{i}"));
        }
        Ok(r)
    }
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

async fn measure<F, Fut>(n: usize, mut f: F) -> (Duration, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..200 {
        f().await;
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f().await;
        v.push(t.elapsed());
    }
    percentiles(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored --nocapture, in release"]
async fn per_call_overhead_over_a_unix_socket() {
    let dir = tempfile::tempdir().expect("dir");
    let socket = socket_in(dir.path());
    let (_stop, _task) = serve_on(Arc::new(Instant0), local_info(), &socket).await;
    let d = client("local", &socket, ClientOptions::default());
    let req = request(&machine("bench"), &class("bench"));
    let list = list_request(&class("bench"));
    let n = 5000;
    let direct = Instant0;
    let (p50, p99) = measure(n, || async {
        direct.get_machine_status(&req).await.expect("ok");
    })
    .await;
    println!("in process        GetMachineStatus p50 {p50:>9.1?} p99 {p99:>9.1?}");
    let (p50, p99) = measure(n, || async {
        d.get_machine_status(&req).await.expect("ok");
    })
    .await;
    println!("over a Unix socket GetMachineStatus p50 {p50:>9.1?} p99 {p99:>9.1?}");
    let (p50, p99) = measure(n, || async {
        d.create_machine(&req).await.expect("ok");
    })
    .await;
    println!("over a Unix socket CreateMachine    p50 {p50:>9.1?} p99 {p99:>9.1?}");
    let (p50, p99) = measure(n, || async {
        d.delete_machine(&req).await.expect("ok");
    })
    .await;
    println!("over a Unix socket DeleteMachine    p50 {p50:>9.1?} p99 {p99:>9.1?}");
    let (p50, p99) = measure(n, || async {
        d.list_machines(&list).await.expect("ok");
    })
    .await;
    println!("over a Unix socket ListMachines(50) p50 {p50:>9.1?} p99 {p99:>9.1?}");
}
