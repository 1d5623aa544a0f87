//! What the provider end-to-end tests (`<provider>_e2e.rs`, `aws_hot_update.rs`)
//! share: `mcm run` as a child process stopped on drop (its log printed when
//! the test fails), the check that it has the provider's driver, and reading
//! the Machines back.
#![allow(dead_code)] // each test binary uses a part

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineDeployment};
use mcm_testenv::{eventually, must_eventually};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `--resource-exhausted-retry` of the e2e runs: a creation answered
/// `ResourceExhausted` is tried again this much later (`gcp_e2e.rs` checks it).
pub const RESOURCE_EXHAUSTED_RETRY: &str = "2s";

/// `mcm run`, stopped (SIGTERM, then SIGKILL) when dropped. When the test
/// panics, the end of its log is printed.
pub struct McmRun {
    pub child: Child,
    pub log: PathBuf,
}

impl McmRun {
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "mcm run exited with {status}; its log ({}):\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
    }
}

impl Drop for McmRun {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- the last lines of the mcm run log ({}) ---\n{}",
                self.log.display(),
                self.log_tail(80)
            );
        }
    }
}

/// The phase and last operation of every Machine in the namespace.
pub async fn machine_states(machines: &Api<Machine>) -> BTreeMap<String, (String, String)> {
    machines
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let (phase, op) = m
                .status
                .as_ref()
                .map(|s| {
                    (
                        s.current_status.phase.as_str().to_string(),
                        s.last_operation.description.clone(),
                    )
                })
                .unwrap_or_default();
            (m.name_any(), (phase, op))
        })
        .collect()
}

/// Waits until `done` holds for the Machines' phases (name → phase); on
/// timeout, fails with every Machine's phase and last operation.
pub async fn wait_for_machines(
    machines: &Api<Machine>,
    timeout: Duration,
    what: &str,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) {
    let done = &done;
    let reached = eventually(timeout, what, || async move {
        let phases: BTreeMap<String, String> = machine_states(machines)
            .await
            .into_iter()
            .map(|(name, (phase, _))| (name, phase))
            .collect();
        done(&phases).then_some(())
    })
    .await;
    if let Err(e) = reached {
        panic!(
            "{e}; the machines (phase, last operation): {:#?}",
            machine_states(machines).await
        );
    }
}

pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// `mcm run` without a target cluster in namespace `ns`, metrics on `port`,
/// with the provider's own flags (`extra`); its log goes to
/// `$TMPDIR/mcm-<provider>-e2e-<ns>.log`.
pub fn mcm_run(provider: &str, ns: &str, port: u16, extra: &[&str]) -> McmRun {
    let log = std::env::temp_dir().join(format!("mcm-{provider}-e2e-{ns}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .arg("run")
        .arg("--control-kubeconfig")
        .arg(mcm_testenv::kubeconfig_path())
        .args(["--target-kubeconfig", "none", "--namespace", ns])
        .args(extra)
        .args(["--leader-elect=false", "--address", "127.0.0.1"])
        .args(["--port", &port.to_string()])
        .args(["--min-retry-period", "1s", "--max-retry-period", "5s"])
        .args(["--resource-exhausted-retry", RESOURCE_EXHAUSTED_RETRY])
        .env("NO_COLOR", "1")
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info,kube=warn,hyper=warn".into()),
        )
        .stdout(Stdio::from(file.try_clone().expect("log file")))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("spawn mcm run");
    McmRun { child, log }
}

/// Fails unless `mcm run`'s start-up line lists `provider` among its drivers.
/// `CARGO_BIN_EXE_mcm` is target/<profile>/mcm, which a concurrent
/// `--no-default-features` build in the same target folder overwrites.
pub async fn assert_has_driver(mcm: &McmRun, provider: &str) {
    let started = must_eventually(
        Duration::from_secs(10),
        "mcm run logs its providers",
        || async {
            std::fs::read_to_string(&mcm.log)
                .ok()?
                .lines()
                .find(|l| l.contains("starting") && l.contains("providers"))
                .map(str::to_string)
        },
    )
    .await;
    // klog quotes a field's value and escapes the quotes inside it.
    assert!(
        started
            .replace('\\', "")
            .contains(&format!("\"{provider}\"")),
        "{} has no {provider} driver (built without its feature, e.g. by a concurrent \
         `cargo build --no-default-features` in the same target folder): {started}",
        env!("CARGO_BIN_EXE_mcm")
    );
}

/// Scales the MachineDeployment `name` to 0 through its scale subresource,
/// as `kubectl scale` does, and waits until no Machine is left.
pub async fn scale_to_zero(
    deployments: &Api<MachineDeployment>,
    name: &str,
    machines: &Api<Machine>,
) {
    deployments
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale to 0");
    wait_for_machines(
        machines,
        Duration::from_secs(120),
        "no Machine left",
        BTreeMap::is_empty,
    )
    .await;
}
