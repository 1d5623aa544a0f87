//! The end-to-end scenario of an out-of-process driver, shared by
//! `grpc_local.rs` (`mcm driver serve`) and `go_bridge.rs` (the Go bridge):
//! `mcm run` whose machine controller reaches the `local` provider only
//! through `--driver-endpoint` (its own local-cloud URL points nowhere). The
//! controllers start first, so the driver is absent at start-up and must be
//! reported and retried. A MachineDeployment of 3 goes to Running, then back
//! to 0 with every VM deleted.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::local_scenario;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcm_api::{Machine, MachineClass, MachineDeployment, MachinePhase};
use mcm_provider_local::AdminClient;
use mcm_testenv::{free_port, must_eventually, KillOnDrop, TempDir, TestEnv};
use serde_json::json;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

pub const STEP: Duration = Duration::from_secs(120);

/// Where the driver under test listens and what it reaches.
pub struct DriverSite {
    /// `unix:///…` for `--driver-endpoint local=…`.
    pub endpoint: String,
    /// The local cloud's base URL.
    pub cloud_url: String,
    /// The log file both processes write to.
    pub log: File,
}

/// Runs the scenario in `env`; `start_driver` starts the driver process
/// (after the controllers, so that they see it absent first). `name` names
/// the temporary folder and the log `$TMPDIR/mcm-<name>-<ns>.log`.
pub async fn scale_3_and_back_to_0(
    env: &TestEnv,
    name: &str,
    start_driver: impl FnOnce(DriverSite) -> KillOnDrop,
) {
    let ns = env.namespace.clone();
    let kubeconfig = mcm_testenv::kubeconfig_path();
    let kubeconfig_str = kubeconfig.to_string_lossy().to_string();

    let dir = TempDir(std::env::temp_dir().join(format!("mcm-{name}-{ns}")));
    let (url, _cloud) = local_scenario::local_cloud(&dir, &ns, |_| {}).await;
    let admin = AdminClient::new(&url).expect("admin client");
    let socket: PathBuf = dir.0.join("sock").join("local.sock");
    let endpoint = format!("unix://{}", socket.display());

    let log_path = std::env::temp_dir().join(format!("mcm-{name}-{ns}.log"));
    let log = File::create(&log_path).expect("log file");
    eprintln!("processes' log: {}", log_path.display());
    let _controllers = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args(["run", "--control-kubeconfig", &kubeconfig_str])
            .args(["--target-kubeconfig", &kubeconfig_str])
            .args(["--namespace", &ns])
            // The in-process local driver could reach no cloud: every
            // machine call must go through the endpoint.
            .args(["--local-cloud-url", "http://127.0.0.1:9"])
            .args(["--driver-endpoint", &format!("local={endpoint}")])
            .args(["--driver-call-timeout", "20s"])
            .args(["--leader-elect=false", "--address", "127.0.0.1"])
            .args(["--port", &free_port().to_string()])
            .args(["--min-retry-period", "1s", "--max-retry-period", "5s"])
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log.try_clone().expect("log file")))
            .spawn()
            .expect("spawn mcm run"),
    );

    let pp = PostParams::default();
    local_scenario::create_userdata_secret(env, "userdata").await;
    let class: MachineClass = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "local", "namespace": ns},
        "provider": "local",
        "providerSpec": {"image": "local-ubuntu", "instanceType": "small",
                         "srcAndDstChecksEnabled": false,
                         "tags": {format!("kubernetes.io/cluster/{ns}"): "1", "kubernetes.io/role/node": "1"}},
        "secretRef": {"name": "userdata", "namespace": ns}
    }))
    .expect("MachineClass");
    env.api::<MachineClass>()
        .create(&pp, &class)
        .await
        .expect("create MachineClass");
    let mcd: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "pool", "namespace": ns},
        "spec": {
            "replicas": 3,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"pool": "p"}},
            "template": {"metadata": {"labels": {"pool": "p"}},
                         "spec": {"class": {"kind": "MachineClass", "name": "local"}}}
        }
    }))
    .expect("MachineDeployment");
    let mcds = env.api::<MachineDeployment>();
    mcds.create(&pp, &mcd)
        .await
        .expect("create MachineDeployment");

    // The driver is absent: machines exist, no VM does, and the controller
    // says why.
    let machines: Api<Machine> = env.api();
    must_eventually(STEP, "3 machines wait for the absent driver", || async {
        let n = machines.list(&Default::default()).await.ok()?.items.len();
        (n == 3).then_some(())
    })
    .await;
    must_eventually(STEP, "the absent driver is reported", || async {
        let text = std::fs::read_to_string(&log_path).ok()?;
        text.contains("out-of-process driver not ready")
            .then_some(())
    })
    .await;
    assert!(admin.instances().await.expect("instances").is_empty());

    let _driver = start_driver(DriverSite {
        endpoint: endpoint.clone(),
        cloud_url: url.clone(),
        log,
    });

    must_eventually(STEP, "3 Running machines", || async {
        let all = machines.list(&Default::default()).await.ok()?.items;
        let running = all
            .iter()
            .filter(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| s.current_status.phase == MachinePhase::Running)
            })
            .count();
        (all.len() == 3 && running == 3).then_some(())
    })
    .await;
    let vms = admin.instances().await.expect("instances");
    assert_eq!(vms.len(), 3, "one VM per machine: {vms:?}");
    // The Info retry backs off on its own clock: machines may reach Running
    // through the driver before it asks again.
    must_eventually(STEP, "the retried Info succeeded", || async {
        let text = std::fs::read_to_string(&log_path).ok()?;
        text.contains("out-of-process driver registered")
            .then_some(())
    })
    .await;

    mcds.patch(
        "pool",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await
    .expect("scale to 0");
    must_eventually(STEP, "no machine and no VM left", || async {
        let all = machines.list(&Default::default()).await.ok()?.items;
        let vms = admin.instances().await.ok()?;
        (all.is_empty() && vms.is_empty()).then_some(())
    })
    .await;
}
