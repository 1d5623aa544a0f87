//! A driver process that dies, hangs, answers garbage or speaks another
//! version: every call ends with a clear status within its bound, never a
//! panic, and creation stays idempotent across the boundary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use async_trait::async_trait;
use common::*;
use mcm_driver::{
    Code, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, ListMachinesRequest,
    ListMachinesResponse,
};
use mcm_driver_grpc::{pb, ClientOptions, Endpoint, ServeOptions};
use prost::Message;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

fn short() -> ClientOptions {
    ClientOptions {
        call_timeout: Duration::from_millis(500),
        info_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..Default::default()
    }
}

/// The local driver, with a pause after each CreateMachine: the VM exists
/// when the answer is still on its way.
struct SlowAnswer {
    inner: Arc<dyn Driver>,
    pause: Duration,
}

#[async_trait]
impl Driver for SlowAnswer {
    async fn create_machine(
        &self,
        r: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let out = self.inner.create_machine(r).await;
        tokio::time::sleep(self.pause).await;
        out
    }
    async fn delete_machine(
        &self,
        r: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        self.inner.delete_machine(r).await
    }
    async fn get_machine_status(
        &self,
        r: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.inner.get_machine_status(r).await
    }
    async fn list_machines(&self, r: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        self.inner.list_machines(r).await
    }
}

/// A driver process: its own runtime on its own threads, so that killing it
/// drops every connection at once, as a process exit does.
struct Process(Option<tokio::runtime::Runtime>);

impl Process {
    fn start(url: String, pause: Duration, socket: PathBuf) -> Process {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.spawn(async move {
            let driver: Arc<dyn Driver> = Arc::new(SlowAnswer {
                inner: local_driver(&url),
                pause,
            });
            let _ = mcm_driver_grpc::serve(
                driver,
                local_info(),
                ServeOptions::new(Endpoint::Unix(socket)),
            )
            .await;
        });
        Process(Some(rt))
    }

    fn kill(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_killed_mid_create_is_unavailable_and_after_a_restart_no_second_vm_is_made() {
    let cloud = cloud().await;
    let socket = socket_in(cloud.dir.path());
    let mut process = Process::start(cloud.url.clone(), Duration::from_secs(30), socket.clone());
    wait_for_socket(&socket).await;
    let mut options = short();
    options.call_timeout = Duration::from_secs(20);
    let d = Arc::new(client("local", &socket, options));
    let req = request(&machine("killed"), &class("killed"));

    let call = {
        let (d, req) = (d.clone(), req.clone());
        tokio::spawn(async move { d.create_machine(&req).await })
    };
    // Kill once the VM exists (the answer is still pending).
    let deadline = Instant::now() + Duration::from_secs(10);
    while cloud.admin.instances().await.expect("instances").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the create never reached the cloud"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed_at = Instant::now();
    process.kill();
    let err = call.await.expect("no panic").expect_err("the driver died");
    assert_eq!(err.code, Code::Unavailable, "{err}");
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "ended promptly: {:?}",
        killed_at.elapsed()
    );

    // While it is gone: Unavailable, quickly.
    let err = d.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(err.code, Code::Unavailable, "{err}");

    let _restarted = Process::start(cloud.url.clone(), Duration::ZERO, socket.clone());
    wait_for_socket(&socket).await;
    let again = d.create_machine(&req).await.expect("create after restart");
    let vms = cloud.admin.instances().await.expect("instances");
    assert_eq!(vms.len(), 1, "one VM for the machine: {vms:?}");
    let status = match d.get_machine_status(&req).await {
        Ok(s) => s.provider_id,
        Err(e) => e.machine.expect("identity").provider_id,
    };
    assert_eq!(status, again.provider_id);
}

/// A driver whose calls never return.
struct Hung;

#[async_trait]
impl Driver for Hung {
    async fn create_machine(
        &self,
        _: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        std::future::pending().await
    }
    async fn delete_machine(
        &self,
        _: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        std::future::pending().await
    }
    async fn get_machine_status(
        &self,
        _: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        std::future::pending().await
    }
    async fn list_machines(&self, _: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_hung_driver_ends_in_deadline_exceeded_within_the_bound() {
    init_tracing();
    let dir = tempfile::tempdir().expect("dir");
    let socket = socket_in(dir.path());
    let (_stop, _task) = serve_on(Arc::new(Hung), local_info(), &socket).await;
    let d = client("local", &socket, short());
    let started = Instant::now();
    let err = d
        .create_machine(&request(&machine("hung"), &class("hung")))
        .await
        .expect_err("hung");
    assert_eq!(err.code, Code::DeadlineExceeded, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_absent_driver_is_unavailable_and_naming_its_endpoint() {
    init_tracing();
    let dir = tempfile::tempdir().expect("dir");
    let socket = socket_in(dir.path());
    let d = client("local", &socket, short());
    let err = d
        .get_machine_status(&request(&machine("absent"), &class("absent")))
        .await
        .expect_err("absent");
    assert_eq!(err.code, Code::Unavailable, "{err}");
    assert!(
        err.message.contains(&socket.display().to_string()),
        "{}",
        err.message
    );
    assert!(d.rate_limits().await.is_empty());
}

/// A raw HTTP/2 service in place of an mcm.driver.v1 server: `Info`
/// answers the given message, `CreateMachine` bytes that are no protobuf,
/// `GetMachineStatus` a status with machine code 99, `DeleteMachine` one
/// with the code "banana".
#[derive(Clone)]
struct Raw {
    info: pb::InfoResponse,
}

impl tonic::server::NamedService for Raw {
    const NAME: &'static str = "mcm.driver.v1.Driver";
}

fn frame(msg: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

impl tower::Service<http::Request<tonic::body::Body>> for Raw {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let resp = match req.uri().path() {
            "/mcm.driver.v1.Driver/Info" => grpc_body(frame(&self.info.encode_to_vec())),
            "/mcm.driver.v1.Driver/GetMachineStatus" => status_only("99"),
            "/mcm.driver.v1.Driver/DeleteMachine" => status_only("banana"),
            _ => grpc_body(frame(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02])),
        };
        std::future::ready(Ok(resp.expect("response")))
    }
}

/// A trailers-only answer: gRPC status 13 with the given machine code.
fn status_only(code: &str) -> Result<http::Response<tonic::body::Body>, http::Error> {
    http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", "13")
        .header("grpc-message", "boom")
        .header("mcm-machine-code", code)
        .body(tonic::body::Body::empty())
}

fn grpc_body(bytes: Vec<u8>) -> Result<http::Response<tonic::body::Body>, http::Error> {
    use http_body_util::BodyExt;
    let trailers = {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", http::HeaderValue::from_static("0"));
        t
    };
    let body = http_body_util::Full::new(bytes::Bytes::from(bytes))
        .map_err(|e: Infallible| -> std::io::Error { match e {} })
        .with_trailers(async move { Some(Ok(trailers)) });
    http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(tonic::body::Body::new(body))
}

async fn serve_raw(info: pb::InfoResponse, socket: &Path) -> tokio::task::JoinHandle<()> {
    std::fs::create_dir_all(socket.parent().expect("dir")).expect("dir");
    let listener = tokio::net::UnixListener::bind(socket).expect("bind");
    let task = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(Raw { info })
            .serve_with_incoming(incoming)
            .await;
    });
    wait_for_socket(socket).await;
    task
}

fn good_info() -> pb::InfoResponse {
    pb::InfoResponse {
        name: "raw".into(),
        version: "0".into(),
        providers: vec!["local".into()],
        protocol_version: "1.3".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn garbage_and_unknown_codes_give_clear_errors_and_never_panic() {
    init_tracing();
    let dir = tempfile::tempdir().expect("dir");
    let socket = socket_in(dir.path());
    let _server = serve_raw(good_info(), &socket).await;
    let d = client("local", &socket, short());
    let req = request(&machine("raw"), &class("raw"));

    let err = d.create_machine(&req).await.expect_err("garbage");
    assert!(matches!(err.code, Code::Internal | Code::Unknown), "{err}");
    assert!(err.message.contains("decode"), "{}", err.message);

    let err = d.get_machine_status(&req).await.expect_err("code 99");
    assert_eq!(err.code, Code::Unknown, "{err}");
    assert!(
        err.message.contains("unknown machine code \"99\""),
        "{}",
        err.message
    );

    let err = d.delete_machine(&req).await.expect_err("banana");
    assert_eq!(err.code, Code::Unknown, "{err}");
    assert!(err.message.contains("banana"), "{}", err.message);
}

#[tokio::test]
async fn a_driver_of_another_protocol_major_version_is_refused() {
    init_tracing();
    for version in ["2.0", "", "one"] {
        let dir = tempfile::tempdir().expect("dir");
        let socket = socket_in(dir.path());
        let mut info = good_info();
        info.protocol_version = version.into();
        let _server = serve_raw(info, &socket).await;
        let d = client("local", &socket, short());
        let err = d
            .list_machines(&list_request(&class("v")))
            .await
            .expect_err("refused");
        assert_eq!(err.code, Code::FailedPrecondition, "{err}");
        assert!(
            err.message.contains("the major versions must match"),
            "{}",
            err.message
        );
    }
}

#[tokio::test]
async fn declared_rate_limits_reach_the_controller_and_unusable_ones_are_dropped() {
    init_tracing();
    let dir = tempfile::tempdir().expect("dir");
    let socket = socket_in(dir.path());
    let mut info = good_info();
    info.rate_limits = vec![
        pb::RateLimit {
            op: pb::CloudOp::Create as i32,
            capacity: 5,
            refill_per_sec: 2.0,
        },
        pb::RateLimit {
            op: 42,
            capacity: 5,
            refill_per_sec: 2.0,
        },
        pb::RateLimit {
            op: pb::CloudOp::Delete as i32,
            capacity: 0,
            refill_per_sec: 1.0,
        },
    ];
    info.rate_limit_scope = Some(pb::RateLimitScope {
        provider_spec_fields: vec!["region".into()],
        secret_keys: vec![],
    });
    let _server = serve_raw(info, &socket).await;
    let d = client("local", &socket, short());
    let limits = d.rate_limits().await;
    assert_eq!(
        limits,
        vec![(
            mcm_driver::CloudOp::Create,
            mcm_driver::budget::BucketLimit::new(5, 2.0)
        )]
    );
    let mut c = class("scope");
    c.provider_spec["region"] = serde_json::json!("eu-1");
    assert_eq!(d.rate_limit_scope(&request(&machine("s"), &c)), "eu-1");
}
