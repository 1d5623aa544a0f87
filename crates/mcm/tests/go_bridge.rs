//! The Go bridge (`hack/reference/cmd/driver-bridge`, docs/design/driver.md,
//! "The Go bridge"): Gardener's Go drivers served over `mcm.driver.v1`.
//!
//! - the conformance kit against the reference's own fake driver;
//! - the codes a Go driver answers (ResourceExhausted, Uninitialized with the
//!   VM's identity) arrive unchanged in the Rust client's error;
//! - the bridge killed mid-call: `Unavailable` within a bound, and no second
//!   VM once it is back;
//! - end to end: `mcm run` → gRPC → bridge → Go local driver → local cloud,
//!   a MachineDeployment of 3 to Running and back to 0;
//! - the committed Go code of the proto is not stale.
//!
//! The bridge binary comes from `MCM_DRIVER_BRIDGE` (its path, or `build`:
//! this test runs `hack/build-reference.sh`, cached by the module's hash);
//! unset, the tests that need it skip visibly (and fail under CI=true).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::grpc_scenario;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::conformance::{run_all, update_unimplemented_claims_nothing_in_place, Fixture};
use mcm_driver::{Code, Driver, MachineRequest};
use mcm_driver_grpc::{ClientOptions, Endpoint, GrpcDriver};
use mcm_provider_local::server::{self, CloudConfig, ServerHandle};
use mcm_provider_local::{AdminClient, Tunables};
use mcm_testenv::skip::{current_test, service, skip_or_fail};
use mcm_testenv::{KillOnDrop, TempDir, TestEnv};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const BRIDGE_VAR: &str = "MCM_DRIVER_BRIDGE";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The bridge binary, built once per test binary when asked to.
fn build_once() -> &'static Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/build-reference.sh"))
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run hack/build-reference.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!("hack/build-reference.sh failed: {}", out.status));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let bin = stdout.lines().last().unwrap_or_default().trim();
        Ok(PathBuf::from(bin).join("driver-bridge"))
    })
}

/// The bridge binary from `MCM_DRIVER_BRIDGE`, or `None` after the visible
/// skip (a failure in strict runs). A path that is given but absent, or a
/// build that fails, fails the test: that is a setup error.
fn bridge_binary() -> Option<PathBuf> {
    match std::env::var(BRIDGE_VAR)
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        None => {
            skip_or_fail(
                &current_test(),
                service::DRIVER_BRIDGE,
                format!("{BRIDGE_VAR} is not set"),
            );
            None
        }
        Some(v) if v.trim() == "build" => match build_once() {
            Ok(p) => Some(p.clone()),
            Err(e) => panic!("{e}"),
        },
        Some(v) => {
            let p = PathBuf::from(v.trim());
            assert!(p.is_file(), "{BRIDGE_VAR}={} is not a file", p.display());
            Some(p)
        }
    }
}

/// A bridge process on a Unix socket; killed when dropped.
struct Bridge {
    child: Option<KillOnDrop>,
    socket: PathBuf,
    log: PathBuf,
}

impl Bridge {
    fn start(bin: &Path, socket: &Path, args: &[&str]) -> Bridge {
        // Beside the socket's folder, which the bridge creates (mode 0700).
        let dir = socket
            .parent()
            .and_then(Path::parent)
            .expect("socket in a folder");
        let name = socket.file_name().expect("socket name").to_string_lossy();
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("bridge log");
        let child = Command::new(bin)
            .args(args)
            .args(["--listen", &format!("unix://{}", socket.display()), "-v"])
            .stdout(Stdio::from(file.try_clone().expect("log")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("spawn driver-bridge");
        Bridge {
            child: Some(KillOnDrop(child)),
            socket: socket.to_path_buf(),
            log,
        }
    }

    async fn ready(self) -> Bridge {
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::UnixStream::connect(&self.socket).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "the bridge never listened on {}; its log {}:\n{}",
                self.socket.display(),
                self.log.display(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self
    }

    /// SIGKILL, as a crashed or OOM-killed driver.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.0.kill();
            let _ = c.0.wait();
        }
    }
}

fn client(provider: &str, socket: &Path, call_timeout: Duration) -> GrpcDriver {
    let options = ClientOptions {
        call_timeout,
        info_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    GrpcDriver::new(provider, &Endpoint::Unix(socket.to_path_buf()), options).expect("client")
}

fn temp_dir(tag: &str) -> TempDir {
    let dir = TempDir(
        std::env::temp_dir().join(format!("mcm-go-bridge-{tag}-{:08x}", rand::random::<u32>())),
    );
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    dir
}

fn class(provider: &str, cluster: &str) -> MachineClass {
    MachineClass {
        metadata: ObjectMeta {
            name: Some(format!("class-{cluster}")),
            namespace: Some("default".to_string()),
            ..Default::default()
        },
        // What the local cloud needs; the fake reads none of it.
        provider_spec: json!({
            "image": "local/ubuntu-24.04",
            "instanceType": "local.medium",
            "srcAndDstChecksEnabled": false,
            "tags": {format!("kubernetes.io/cluster/{cluster}"): "1", "kubernetes.io/role/node": "1"}
        }),
        provider: provider.to_string(),
        ..Default::default()
    }
}

fn machine(prefix: &str) -> Machine {
    let suffix = format!("{:08x}", rand::random::<u32>());
    let mut m = Machine::new(&format!("{prefix}-{suffix}"), MachineSpec::default());
    m.metadata.namespace = Some("default".to_string());
    m.metadata.uid = Some(format!("uid-{suffix}-{:08x}", rand::random::<u32>()));
    m
}

fn request(machine: &Machine, class: &MachineClass) -> MachineRequest {
    MachineRequest {
        machine: machine.clone(),
        machine_class: class.clone(),
        secret: serde_json::from_value(json!({
            "metadata": {"name": "s"},
            "stringData": {"userData": "#cloud-config\n"}
        }))
        .expect("Secret"),
    }
}

async fn local_cloud(dir: &Path) -> (ServerHandle, String, AdminClient) {
    let mut config = CloudConfig::new(dir.join("cloud.redb"));
    config.tunables = Tunables::unlimited();
    let (addr, handle) = server::spawn(config).await.expect("local cloud starts");
    let url = format!("http://{addr}");
    let admin = AdminClient::new(&url).expect("admin client");
    (handle, url, admin)
}

#[test]
fn the_committed_go_code_of_the_proto_is_generated_from_the_proto_as_it_is() {
    let root = repo_root();
    let proto = std::fs::read(root.join("proto/mcm/driver/v1/driver.proto")).expect("proto");
    let want = hex::encode(Sha256::digest(&proto));
    for file in ["driver.pb.go", "driver_grpc.pb.go"] {
        let path = root.join("hack/reference/driverpb").join(file);
        let text = std::fs::read_to_string(&path).expect("generated Go file");
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.contains(&format!("(sha256 {want})")),
            "{} is stale (its first line: {first:?}, the proto's sha256 {want}): run hack/gen-go-proto.sh",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_kit_passes_against_the_references_fake_driver_through_the_bridge() {
    let Some(bin) = bridge_binary() else { return };
    let dir = temp_dir("fake");
    let socket = dir.0.join("run").join("fake.sock");
    let _bridge = Bridge::start(&bin, &socket, &["--driver", "fake"])
        .ready()
        .await;
    let d = client("fake", &socket, Duration::from_secs(20));

    let h = d.handshake().await.expect("Info");
    assert_eq!(h.info.name, "driver-bridge/fake");
    assert_eq!(h.info.providers, ["fake"]);
    assert_eq!(h.info.protocol_version, "1.0");
    assert!(h.implements("InitializeMachine") && h.implements("GetVolumeIDs"));
    assert!(!h.implements("UpdateMachine") && !h.implements("InPlaceChanges"));

    let fixture = Fixture {
        class: class("fake", "conformance-a"),
        other_class: class("fake", "conformance-b"),
        secret: Secret::default(),
        new_machine: Box::new(|_| machine("conf")),
        // The reference's fake validates no providerSpec: it has no invalid
        // class to offer (docs/design/driver.md, "The Go bridge").
        invalid_classes: Vec::new(),
    };
    let failures = run_all(&d, &fixture).await;
    assert!(failures.is_empty(), "conformance failures: {failures:#?}");
    assert_eq!(
        update_unimplemented_claims_nothing_in_place(&d, &fixture).await,
        Ok(())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_drivers_machine_codes_arrive_unchanged_in_the_rust_clients_error() {
    let Some(bin) = bridge_binary() else { return };
    let dir = temp_dir("codes");

    // The reference's fake, made with an error: its code and text as they are.
    for (code, name) in [
        (Code::ResourceExhausted, "ResourceExhausted"),
        (Code::Uninitialized, "17"),
    ] {
        let socket = dir.0.join("run").join(format!("fake-{name}.sock"));
        let _bridge = Bridge::start(
            &bin,
            &socket,
            &[
                "--driver",
                "fake",
                "--fake-error-code",
                name,
                "--fake-error-message",
                "quota [of fake VMs] exceeded",
            ],
        )
        .ready()
        .await;
        let d = client("fake", &socket, Duration::from_secs(20));
        let err = d
            .create_machine(&request(&machine("code"), &class("fake", "codes")))
            .await
            .expect_err("the fake answers its error");
        assert_eq!(err.code, code, "{err}");
        assert_eq!(err.message, "quota [of fake VMs] exceeded");
        assert_eq!(
            err.to_string(),
            format!(
                "machine codes error: code = [{code}] message = [quota [of fake VMs] exceeded]"
            ),
            "the reference's text form"
        );
    }

    // The Go local driver: Uninitialized with the VM's identity, and the
    // cloud's ResourceExhausted.
    let (_cloud, url, admin) = local_cloud(&dir.0).await;
    let socket = dir.0.join("run").join("local.sock");
    let _bridge = Bridge::start(
        &bin,
        &socket,
        &["--driver", "local", "--local-cloud-url", &url],
    )
    .ready()
    .await;
    let d = client("local", &socket, Duration::from_secs(20));
    let c = class("local", "codes");
    let req = request(&machine("init"), &c);
    let created = d.create_machine(&req).await.expect("create");
    let err = d.get_machine_status(&req).await.expect_err("uninitialized");
    assert_eq!(err.code, Code::Uninitialized, "{err}");
    let id = created
        .last_known_state
        .trim_start_matches(r#"{"instanceId":""#)
        .trim_end_matches(r#""}"#)
        .to_string();
    assert_eq!(
        err.message,
        format!("instance {id} is not initialized"),
        "the Go driver's text"
    );
    let identity = err.machine.expect("the VM's identity travels with it");
    assert_eq!(identity.provider_id, created.provider_id);
    assert_eq!(identity.node_name, created.node_name);
    d.initialize_machine(&req).await.expect("initialize");
    let ok = d.get_machine_status(&req).await.expect("initialized");
    assert_eq!(ok.provider_id, created.provider_id);

    admin
        .patch_tunables(&json!({"create": {"errorRate": 1.0, "errorCode": "ResourceExhausted"}}))
        .await
        .expect("tunables");
    let err = d
        .create_machine(&request(&machine("quota"), &c))
        .await
        .expect_err("the cloud refuses");
    assert_eq!(err.code, Code::ResourceExhausted, "{err}");
    assert!(err.message.contains("injected fault"), "{}", err.message);
    d.delete_machine(&req).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_killed_mid_call_is_unavailable_within_a_bound_and_no_second_vm_is_made() {
    let Some(bin) = bridge_binary() else { return };
    let dir = temp_dir("kill");
    let (_cloud, url, admin) = local_cloud(&dir.0).await;
    let socket = dir.0.join("run").join("local.sock");
    let args = ["--driver", "local", "--local-cloud-url", url.as_str()];
    let mut bridge = Bridge::start(&bin, &socket, &args).ready().await;
    let d = Arc::new(client("local", &socket, Duration::from_secs(30)));
    let req = request(&machine("killed"), &class("local", "killed"));

    // The VM exists, the controller's answer was lost, it retries the create:
    // the cloud holds that retry, and the bridge dies while it waits.
    let first = d.create_machine(&req).await.expect("create");
    admin
        .patch_tunables(&json!({"create": {"latencyMs": 20000}}))
        .await
        .expect("tunables");
    let call = {
        let (d, req) = (d.clone(), req.clone());
        tokio::spawn(async move { d.create_machine(&req).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!call.is_finished(), "the retried create is pending");
    let killed_at = Instant::now();
    bridge.kill();
    let err = call.await.expect("no panic").expect_err("the bridge died");
    assert_eq!(err.code, Code::Unavailable, "{err}");
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "ended promptly: {:?}",
        killed_at.elapsed()
    );
    let err = d.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(err.code, Code::Unavailable, "{err}");

    admin
        .patch_tunables(&json!({"create": {"latencyMs": 0}}))
        .await
        .expect("tunables");
    let _back = Bridge::start(&bin, &socket, &args).ready().await;
    let again = d.create_machine(&req).await.expect("create after restart");
    assert_eq!(again.provider_id, first.provider_id, "the same VM");
    let vms = admin.instances().await.expect("instances");
    assert_eq!(vms.len(), 1, "one VM for the machine: {vms:?}");
    d.delete_machine(&req).await.expect("delete");
}

#[tokio::test]
async fn a_machine_deployment_scales_to_3_and_back_to_0_through_the_go_bridge_and_the_go_local_driver(
) {
    let Some(bin) = bridge_binary() else { return };
    let Some(env) = TestEnv::new("go-bridge").await else {
        return;
    };
    grpc_scenario::scale_3_and_back_to_0(&env, "go-bridge", |site| {
        KillOnDrop(
            Command::new(&bin)
                .args(["--driver", "local", "--listen", &site.endpoint])
                .args(["--local-cloud-url", &site.cloud_url])
                .stdout(Stdio::from(site.log.try_clone().expect("log file")))
                .stderr(Stdio::from(site.log))
                .spawn()
                .expect("spawn driver-bridge"),
        )
    })
    .await;
}

/// The bridge's own checks: a socket of mode 0600, garbage in a request is
/// InvalidArgument (never a crash of the bridge), and the Secret's data is
/// in no line of its log, even with every call logged (`-v`).
/// The bridge has no TLS: plain TCP, which would carry Secrets in the
/// clear, is served on loopback only; another address ends the process
/// with a message saying why.
#[test]
fn the_bridge_refuses_plain_tcp_off_loopback() {
    use std::io::Read;
    let Some(bin) = bridge_binary() else { return };
    for endpoint in [
        "tcp://0.0.0.0:0",
        "tcp://10.1.2.3:7000",
        "tcp://driver.example:7000",
    ] {
        let mut child = KillOnDrop(
            Command::new(&bin)
                .args(["--driver", "fake", "--listen", endpoint])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run driver-bridge"),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.0.try_wait().expect("wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{endpoint}: the bridge still serves after 20 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut text = String::new();
        if let Some(mut err) = child.0.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        assert!(!status.success(), "{endpoint}: {text}");
        assert!(text.contains("loopback address only"), "{endpoint}: {text}");
    }
}

#[tokio::test]
async fn the_bridge_socket_is_private_and_garbage_requests_are_invalid_argument() {
    use mcm_driver_grpc::pb::driver_client::DriverClient;
    use std::os::unix::fs::PermissionsExt;
    let Some(bin) = bridge_binary() else { return };
    let dir = temp_dir("garbage");
    let socket = dir.0.join("run").join("fake.sock");
    let _bridge = Bridge::start(&bin, &socket, &["--driver", "fake"])
        .ready()
        .await;
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let path = socket.clone();
    let channel = tonic::transport::Endpoint::from_static("http://driver.local")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .expect("connect");
    let mut raw = DriverClient::new(channel);
    let err = raw
        .create_machine(mcm_driver_grpc::pb::MachineRequest {
            machine_json: b"{not json".to_vec(),
            machine_class_json: b"{}".to_vec(),
            secret_json: format!(
                r#"{{"data":{{"k":"{SECRET_B64}"}},"stringData":{{"u":"{SECRET}"}}}}"#
            )
            .into_bytes(),
        })
        .await
        .expect_err("garbage");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(err.message().contains("machine_json"), "{}", err.message());
    let back = mcm_driver_grpc::wire::from_grpc(&err, "test");
    assert_eq!(back.code, Code::InvalidArgument);
    // A Secret that does not decode.
    let err = raw
        .create_machine(mcm_driver_grpc::pb::MachineRequest {
            machine_json: b"{\"metadata\":{\"name\":\"m\"}}".to_vec(),
            machine_class_json: b"{}".to_vec(),
            secret_json: format!(r#"{{"data":{{"k":"{SECRET}"}}}}"#).into_bytes(),
        })
        .await
        .expect_err("a Secret whose data is not base64");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(!err.message().contains(SECRET), "{}", err.message());

    // Still serving, and a whole machine's life with the secret in it.
    let d = client("fake", &socket, Duration::from_secs(5));
    d.handshake().await.expect("Info after garbage");
    let mut req = request(&machine("secret"), &class("fake", "secret"));
    req.secret.string_data = Some([("userData".to_string(), SECRET.to_string())].into());
    d.create_machine(&req).await.expect("create");
    d.get_machine_status(&req).await.expect("status");
    d.delete_machine(&req).await.expect("delete");
    drop(d);
    let log = std::fs::read_to_string(dir.0.join("fake.sock.log")).expect("bridge log");
    assert!(
        log.contains("driver call served"),
        "every call is logged: {log}"
    );
    for needle in [SECRET, SECRET_B64] {
        assert!(!log.contains(needle), "the bridge logged the Secret: {log}");
    }
}

/// A Secret value, and its base64 form as a Secret's `data` holds it.
const SECRET: &str = "s3cr3t-Do-Not-Log";
const SECRET_B64: &str = "czNjcjN0LURvLU5vdC1Mb2c=";

/// A Go driver's code in the Machine's status: `mcm run` with the provider
/// `fake` at the bridge, whose reference fakes answer ResourceExhausted; the
/// Machine's last operation carries the reference's text and code unchanged.
#[tokio::test]
async fn a_go_drivers_code_arrives_unchanged_in_the_machines_status() {
    use kube::api::{Api, PostParams};
    use mcm_testenv::{free_port, must_eventually};
    let Some(bin) = bridge_binary() else { return };
    let Some(env) = TestEnv::new("go-bridge-code").await else {
        return;
    };
    let ns = env.namespace.clone();
    let kubeconfig = mcm_testenv::kubeconfig_path().to_string_lossy().to_string();
    let dir = temp_dir("status");
    let socket = dir.0.join("run").join("fake.sock");
    let _bridge = Bridge::start(
        &bin,
        &socket,
        &[
            "--driver",
            "fake",
            "--fake-error-code",
            "ResourceExhausted",
            "--fake-error-message",
            "quota [of fake VMs] exceeded",
        ],
    )
    .ready()
    .await;
    let log_path = dir.0.join("mcm.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    eprintln!("mcm's log: {}", log_path.display());
    let _controllers = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args(["run", "--control-kubeconfig", &kubeconfig])
            .args(["--target-kubeconfig", &kubeconfig])
            .args(["--namespace", &ns])
            .args(["--local-cloud-url", "http://127.0.0.1:9"])
            .args([
                "--driver-endpoint",
                &format!("fake=unix://{}", socket.display()),
            ])
            .args(["--driver-call-timeout", "20s"])
            .args(["--leader-elect=false", "--address", "127.0.0.1"])
            .args(["--port", &free_port().to_string()])
            .args(["--min-retry-period", "1s", "--max-retry-period", "5s"])
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn mcm run"),
    );

    let pp = PostParams::default();
    let class: MachineClass = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "fake", "namespace": ns},
        "provider": "fake",
        "providerSpec": {"any": "thing"},
        "secretRef": {"name": "userdata", "namespace": ns}
    }))
    .expect("MachineClass");
    crate::local_scenario::create_userdata_secret(&env, "userdata").await;
    env.api::<MachineClass>()
        .create(&pp, &class)
        .await
        .expect("create MachineClass");
    let m: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": "quota", "namespace": ns},
        "spec": {"class": {"kind": "MachineClass", "name": "fake"}}
    }))
    .expect("Machine");
    let machines: Api<Machine> = env.api();
    machines.create(&pp, &m).await.expect("create Machine");

    let want =
        "machine codes error: code = [ResourceExhausted] message = [quota [of fake VMs] exceeded]";
    let op = must_eventually(
        grpc_scenario::STEP,
        "the Go driver's error in the Machine's status",
        || async {
            let m = machines.get("quota").await.ok()?;
            let op = m.status?.last_operation;
            op.description.contains(want).then_some(op)
        },
    )
    .await;
    assert_eq!(op.error_code, "ResourceExhausted", "{op:?}");
}
