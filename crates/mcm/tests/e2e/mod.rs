//! The one harness of the provider end-to-end tests (`<provider>_e2e.rs`,
//! `aws_hot_update.rs`). Each runs the same story against its cloud's fake:
//! [`create_example`] applies `examples/<provider>-machine-class.yaml` as a
//! user would, adjusted to the fake; [`start_mcm`] starts `mcm run` (a child
//! process stopped on drop, its log printed when the test fails) and checks it
//! has the provider's driver; [`deploy_available`] applies a MachineDeployment
//! and waits for it to be Available; [`scale_to_zero`] scales it to 0. The
//! tests themselves hold only what is particular to their cloud: the fake's
//! set-up and what they check in it.
#![allow(dead_code)] // each test binary uses a part

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineClass, MachineDeployment, MachineDeploymentStatus};
use mcm_testenv::{eventually, must_eventually, TestEnv};
use serde::Deserialize;
use serde_json::{json, Value};
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

/// The documents of an example file (`examples/<provider>-machine-class.yaml`).
pub fn example_documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("the example parses"))
        .collect()
}

/// Creates an example's Secrets and MachineClass in the test's namespace and
/// returns the class's name. Each document is first moved into the namespace
/// (the class's `secretRef` and `credentialsSecretRef` too), then handed to
/// `adjust`, which points it at the fake (a Secret's credentials, the class's
/// endpoint-specific IDs and its cluster tag); `doc["kind"]` tells which it is.
pub async fn create_example(
    env: &TestEnv,
    yaml: &str,
    mut adjust: impl FnMut(&mut Value),
) -> String {
    let ns = env.namespace.as_str();
    let secrets: Api<Secret> = env.api();
    let classes: Api<MachineClass> = env.api();
    let mut class_name = String::new();
    for mut doc in example_documents(yaml) {
        doc["metadata"]["namespace"] = json!(ns);
        match doc["kind"].as_str() {
            Some("Secret") => {
                adjust(&mut doc);
                let s: Secret = serde_json::from_value(doc).expect("the example's Secret");
                secrets
                    .create(&PostParams::default(), &s)
                    .await
                    .expect("create Secret");
            }
            Some("MachineClass") => {
                doc["secretRef"]["namespace"] = json!(ns);
                doc["credentialsSecretRef"]["namespace"] = json!(ns);
                adjust(&mut doc);
                let class: MachineClass =
                    serde_json::from_value(doc).expect("the example's MachineClass");
                class_name = class.name_any();
                classes
                    .create(&PostParams::default(), &class)
                    .await
                    .expect("create MachineClass");
            }
            other => panic!("unexpected document {other:?} in the example"),
        }
    }
    assert!(!class_name.is_empty(), "the example has a MachineClass");
    class_name
}

/// [`mcm_run`] on a free port, returned once it listens there, is alive and
/// has `provider`'s driver.
pub async fn start_mcm(provider: &str, ns: &str, extra: &[&str]) -> McmRun {
    let port = mcm_testenv::free_port();
    let mut mcm = mcm_run(provider, ns, port, extra);
    must_eventually(
        Duration::from_secs(30),
        "mcm run listens on its /healthz port",
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    mcm.assert_alive();
    assert_has_driver(&mcm, provider).await;
    mcm
}

/// A MachineDeployment `name` of `replicas` machines of class `class_name`
/// (rolling, maxSurge 1, maxUnavailable 0), selecting on `name: <name>`.
pub fn deployment(name: &str, ns: &str, replicas: usize, class_name: &str) -> MachineDeployment {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"name": name}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {"class": {"kind": "MachineClass", "name": class_name}}
            }
        }
    }))
    .expect("MachineDeployment")
}

/// A MachineDeployment that reached Available, and the APIs to look at it.
pub struct Deployed {
    /// The namespace's MachineDeployments.
    pub deployments: Api<MachineDeployment>,
    /// The namespace's Machines.
    pub machines: Api<Machine>,
    /// Its status once every replica was available.
    pub status: MachineDeploymentStatus,
    /// From its creation until its Machines were all Available.
    pub took: Duration,
}

/// Creates the MachineDeployment `name` ([`deployment`]) and waits, up to
/// `timeout`, until its `replicas` Machines are Available, then until its
/// status counts them all available and updated with `Available=True`.
pub async fn deploy_available(
    env: &TestEnv,
    name: &str,
    class_name: &str,
    replicas: usize,
    timeout: Duration,
) -> Deployed {
    let deployments: Api<MachineDeployment> = env.api();
    deployments
        .create(
            &PostParams::default(),
            &deployment(name, &env.namespace, replicas, class_name),
        )
        .await
        .expect("create MachineDeployment");
    let applied = Instant::now();
    let machines: Api<Machine> = env.api();
    wait_for_machines(
        &machines,
        timeout,
        &format!("{replicas} Available machines"),
        |p| p.len() == replicas && p.values().all(|ph| ph == "Available"),
    )
    .await;
    let took = applied.elapsed();
    let status = must_eventually(
        Duration::from_secs(60),
        "the MachineDeployment reports all replicas available and Available=True",
        || async {
            let s = deployments.get(name).await.ok()?.status?;
            let available = s
                .conditions
                .iter()
                .any(|c| c.type_.as_str() == "Available" && c.status.as_str() == "True");
            let n = i32::try_from(replicas).ok()?;
            (s.available_replicas == n && s.updated_replicas == n && available).then_some(s)
        },
    )
    .await;
    Deployed {
        deployments,
        machines,
        status,
        took,
    }
}
