//! An out-of-process driver end to end: `mcm driver serve --provider local`
//! on a Unix socket, and `mcm run` whose machine controller reaches the
//! `local` provider only through `--driver-endpoint` (its own local-cloud
//! URL points nowhere). The controllers start first, so the driver is absent
//! at start-up and must be reported and retried. A MachineDeployment of 3
//! goes to Running, then back to 0 with every VM deleted.
//!
//! The processes' output goes to `$TMPDIR/mcm-grpc-local-<ns>.log`. The
//! scenario itself is `grpc_scenario`, shared with the Go bridge's test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::grpc_scenario;

use mcm_testenv::{KillOnDrop, TestEnv};
use std::process::{Command, Stdio};

#[tokio::test]
async fn a_machine_deployment_scales_to_3_and_back_to_0_through_an_out_of_process_local_driver() {
    let Some(env) = TestEnv::new("grpc-local").await else {
        return;
    };
    grpc_scenario::scale_3_and_back_to_0(&env, "grpc-local", |site| {
        KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_mcm"))
                .args(["driver", "serve", "--provider", "local"])
                .args(["--listen", &site.endpoint])
                .args(["--local-cloud-url", &site.cloud_url])
                .stdout(Stdio::from(site.log.try_clone().expect("log file")))
                .stderr(Stdio::from(site.log))
                .spawn()
                .expect("spawn mcm driver serve"),
        )
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
