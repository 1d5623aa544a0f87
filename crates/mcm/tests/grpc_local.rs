//! An out-of-process driver end to end: `mcm driver serve --provider local`
//! on a Unix socket, and `mcm run` whose machine controller reaches the
//! `local` provider only through `--driver-endpoint` (its own local-cloud
//! URL points nowhere). The controllers start first, so the driver is absent
//! at start-up and must be reported and retried. A MachineDeployment of 3
//! goes to Running, then back to 0 with every VM deleted.
//!
//! The processes' output goes to `$TMPDIR/mcm-grpc-local-<ns>.log`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcm_api::{Machine, MachineClass, MachineDeployment, MachinePhase};
use mcm_provider_local::{server, AdminClient, Tunables};
use mcm_testenv::{free_port, must_eventually, KillOnDrop, TempDir, TestEnv};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

const STEP: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_machine_deployment_scales_to_3_and_back_to_0_through_an_out_of_process_local_driver() {
    let Some(env) = TestEnv::new("grpc-local").await else {
        return;
    };
    let ns = env.namespace.clone();
    let kubeconfig = mcm_testenv::kubeconfig_path();
    let kubeconfig_str = kubeconfig.to_string_lossy().to_string();

    let dir = TempDir(std::env::temp_dir().join(format!("mcm-grpc-local-{ns}")));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let mut config = server::CloudConfig::new(dir.0.join("local-cloud.redb"));
    config.zone = ns.clone();
    config.target_kubeconfig = Some(kubeconfig.clone());
    config.heartbeat_interval = Duration::from_secs(2);
    config.tunables = Tunables::unlimited();
    let (addr, _cloud) = server::spawn(config).await.expect("local cloud");
    let url = format!("http://{addr}");
    let admin = AdminClient::new(&url).expect("admin client");
    let socket = dir.0.join("sock").join("local.sock");
    let endpoint = format!("unix://{}", socket.display());

    let log_path = std::env::temp_dir().join(format!("mcm-grpc-local-{ns}.log"));
    let log = std::fs::File::create(&log_path).expect("log file");
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
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "userdata", "namespace": ns},
        "stringData": {"userData": "#cloud-config\n"}
    }))
    .expect("Secret");
    env.api::<Secret>()
        .create(&pp, &secret)
        .await
        .expect("create Secret");
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

    let _driver = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args([
                "driver",
                "serve",
                "--provider",
                "local",
                "--listen",
                &endpoint,
            ])
            .args(["--local-cloud-url", &url])
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn mcm driver serve"),
    );

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
    let text = std::fs::read_to_string(&log_path).expect("log");
    assert!(
        text.contains("out-of-process driver registered"),
        "the retried Info succeeded"
    );

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

/// `deploy/driver-sidecar/`: both containers' command lines are ones the
/// binary accepts, and they name the same socket on the shared volume.
#[test]
fn the_sidecar_layout_runs_command_lines_the_binary_accepts_on_one_socket() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/driver-sidecar/sidecar.yaml");
    let text = std::fs::read_to_string(&path).expect("sidecar.yaml");
    let patch: serde_json::Value = serde_yaml::from_str(&text).expect("yaml");
    let containers = patch["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    let args = |name: &str| -> Vec<String> {
        containers
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["args"].as_array())
            .expect("container args")
            .iter()
            .map(|a| a.as_str().expect("string arg").to_string())
            .collect()
    };
    let (controller, driver) = (args("mcm"), args("driver-aws"));
    let endpoint = controller
        .iter()
        .find_map(|a| a.strip_prefix("--driver-endpoint=aws="))
        .expect("the controller names the driver's endpoint");
    assert!(
        driver.contains(&format!("--listen={endpoint}")),
        "the driver listens where the controller calls: {driver:?}"
    );
    let mount = patch["spec"]["template"]["spec"]["volumes"][0]["name"].clone();
    for c in containers {
        assert_eq!(
            c["volumeMounts"][0]["name"], mount,
            "{} mounts the socket volume",
            c["name"]
        );
    }
    for line in [controller, driver] {
        // clap checks every value before it reaches --help.
        let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args(&line)
            .arg("--help")
            .output()
            .expect("run mcm");
        assert!(
            out.status.success(),
            "{line:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
