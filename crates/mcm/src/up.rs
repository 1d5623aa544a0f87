//! `mcm up`: one command from a fresh clone to Running machines.
//!
//! Starts the test control plane (building it on first use), installs the
//! CRDs, starts the local cloud and the controllers as child processes,
//! applies the example MachineClass and MachineDeployment, prints how to use
//! kubectl, and shows a live summary until Ctrl-C, which tears everything down.

use anyhow::{bail, Context as _};
use clap::Args;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use kube::{Client, Config, ResourceExt};
use mcm_api::Machine;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod crds;

/// Flags of `mcm up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Machines in the example MachineDeployment.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Where state, kubeconfig and logs go.
    #[arg(long, default_value = ".mcm/up")]
    pub dir: PathBuf,
    /// Port of the local cloud.
    #[arg(long, default_value_t = 7070)]
    pub cloud_port: u16,
    /// Port of the controllers' /metrics endpoint.
    #[arg(long, default_value_t = 10259)]
    pub metrics_port: u16,
    /// Health timeout of the demo machines (short, so a killed instance is replaced quickly).
    #[arg(long, default_value = "1m")]
    pub machine_health_timeout: String,
    /// Seconds an instance takes to boot.
    #[arg(long, default_value = "3s")]
    pub boot_delay: String,
    /// Exit after all machines are Running (for scripts and tests) instead of showing a live summary.
    #[arg(long)]
    pub exit_when_running: bool,
    /// Print the usage hints (the commands shown once everything runs) and exit (for tests).
    #[arg(long, hide = true)]
    pub print_hints: bool,
}

/// The commands `mcm up` suggests once everything runs, one per line.
fn hints(kubeconfig: &str, cloud_url: &str) -> Vec<String> {
    let kill =
        mcm_provider_local::admin::kill_hint(&mcm_provider_local::admin::invocation(), cloud_url);
    vec![
        format!("  export KUBECONFIG={kubeconfig}"),
        "  kubectl get machinedeployments,machinesets,machines,nodes".to_string(),
        "  kubectl scale mcd/local-machine-deployment --replicas=5".to_string(),
        format!("  {kill}   # watch it go Unknown, Failed, replaced"),
        "  Ctrl-C stops everything.".to_string(),
    ]
}

fn cloud_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

fn repo_root() -> anyhow::Result<PathBuf> {
    let mut dir = std::env::current_dir()?;
    loop {
        if dir.join("hack/testenv.sh").exists() {
            return Ok(dir);
        }
        if !dir.pop() {
            bail!("run `mcm up` from a clone of mcm-rs (hack/testenv.sh was not found above the current folder)");
        }
    }
}

async fn testenv(root: &Path, dir: &Path, action: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut child = Command::new("bash")
        .arg(root.join("hack/testenv.sh"))
        .arg(action)
        .env("MCM_TESTENV_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting hack/testenv.sh")?;
    if let Some(err) = child.stderr.take() {
        let mut lines = BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("  [{:>4}s] {line}", start.elapsed().as_secs());
        }
    }
    let status = child.wait().await?;
    if !status.success() {
        bail!("hack/testenv.sh {action} failed ({status}); see the logs above");
    }
    Ok(())
}

fn spawn_logged(args: &[&str], log: &Path) -> anyhow::Result<Child> {
    let exe = std::env::current_exe()?;
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = file.try_clone()?;
    let child = Command::new(exe)
        .args(args)
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()?;
    Ok(child)
}

async fn apply_file(
    client: &Client,
    path: &Path,
    replicas: u32,
    health_timeout: &str,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        if value["kind"] == "MachineDeployment" {
            value["spec"]["replicas"] = serde_json::json!(replicas);
            // The demo's health timeout wins over the example's, so that a killed
            // instance is replaced within a minute or two.
            value["spec"]["template"]["spec"]["healthTimeout"] = serde_json::json!(health_timeout);
        }
        let obj: DynamicObject = serde_json::from_value(value)?;
        let types = obj
            .types
            .clone()
            .context("object without apiVersion/kind")?;
        let gvk = GroupVersionKind::try_from(&types)?;
        let (ar, _caps) = pinned_kind(client, &gvk).await?;
        let ns = obj.namespace().unwrap_or_else(|| "default".into());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        api.patch(
            &obj.name_any(),
            &PatchParams::apply("mcm-up").force(),
            &Patch::Apply(&obj),
        )
        .await?;
    }
    Ok(())
}

/// The machine phases, Running machines, Ready Nodes and Nodes still
/// carrying the startup taint (docs/design/startup-taint.md).
async fn summary(client: &Client) -> anyhow::Result<(String, usize, usize, usize)> {
    let machines: Api<Machine> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    let list = machines.list(&ListParams::default()).await?.items;
    for m in &list {
        let p = m.status.clone().unwrap_or_default().current_status.phase;
        *phases
            .entry(if p.is_empty() {
                "(new)".into()
            } else {
                p.to_string()
            })
            .or_default() += 1;
    }
    let node_list = nodes.list(&ListParams::default()).await?.items;
    let tainted = node_list
        .iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| {
                    ts.iter()
                        .any(|t| t.key == mcm_api::constants::STARTUP_TAINT_KEY)
                })
        })
        .count();
    let ready = node_list
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    let text = phases
        .iter()
        .map(|(p, n)| format!("{p}={n}"))
        .collect::<Vec<_>>()
        .join(" ");
    let running = phases.get("Running").copied().unwrap_or(0);
    Ok((text, running, ready, tainted))
}

/// Runs the local environment.
pub async fn up(args: UpArgs) -> anyhow::Result<()> {
    if args.print_hints {
        let kubeconfig = args.dir.join("testenv/kubeconfig");
        for line in hints(&kubeconfig.to_string_lossy(), &cloud_url(args.cloud_port)) {
            println!("{line}");
        }
        return Ok(());
    }
    let root = repo_root()?;
    let dir = if args.dir.is_absolute() {
        args.dir.clone()
    } else {
        root.join(&args.dir)
    };
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let env_dir = dir.join("testenv");
    eprintln!("mcm up: starting the control plane (the first run builds kube-apiserver, etcd and kube-controller-manager with Go: ~10 min on 2 cores)");
    testenv(&root, &env_dir, "up").await?;
    let result = run_env(&args, &root, &dir, &logs, &env_dir).await;
    eprintln!("mcm up: stopping the control plane");
    testenv(&root, &env_dir, "down").await?;
    result
}

async fn run_env(
    args: &UpArgs,
    root: &Path,
    dir: &Path,
    logs: &Path,
    env_dir: &Path,
) -> anyhow::Result<()> {
    let kubeconfig = env_dir.join("kubeconfig");
    let kc = Kubeconfig::read_from(&kubeconfig)?;
    let client =
        Client::try_from(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)?;
    eprintln!("mcm up: installing the CRDs");
    crds::install(&client).await?;
    let kc_str = kubeconfig.to_string_lossy().to_string();
    let store = dir.join("local-cloud.redb").to_string_lossy().to_string();
    let cloud_port = args.cloud_port.to_string();
    eprintln!(
        "mcm up: starting the local cloud on 127.0.0.1:{cloud_port} (logs: {}/local-cloud.log)",
        logs.display()
    );
    let mut cloud = spawn_logged(
        &[
            "local-cloud",
            "serve",
            "--port",
            &cloud_port,
            "--store",
            &store,
            "--target-kubeconfig",
            &kc_str,
            "--boot-delay",
            &args.boot_delay,
        ],
        &logs.join("local-cloud.log"),
    )?;
    let url = cloud_url(args.cloud_port);
    let metrics_port = args.metrics_port.to_string();
    eprintln!("mcm up: starting the controllers (logs: {}/mcm.log, metrics: http://127.0.0.1:{metrics_port}/metrics)", logs.display());
    let mut controllers = spawn_logged(
        &[
            "run",
            "--control-kubeconfig",
            &kc_str,
            "--target-kubeconfig",
            &kc_str,
            "--namespace",
            "default",
            "--local-cloud-url",
            &url,
            "--address",
            "127.0.0.1",
            "--port",
            &metrics_port,
            "--machine-health-timeout",
            &args.machine_health_timeout,
            "--leader-elect=false",
            "--machine-safety-orphan-vms-period",
            "1m",
            "--machine-safety-orphan-vms-grace",
            "1m",
        ],
        &logs.join("mcm.log"),
    )?;
    eprintln!("mcm up: applying examples/machine-class.yaml and examples/machine-deployment.yaml ({} replicas)", args.replicas);
    for example in [
        "examples/machine-class.yaml",
        "examples/machine-deployment.yaml",
    ] {
        apply_file(
            &client,
            &root.join(example),
            args.replicas,
            &args.machine_health_timeout,
        )
        .await?;
    }
    println!();
    for line in hints(&kc_str, &url) {
        println!("{line}");
    }
    println!();
    let started = Instant::now();
    let mut last = String::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(2));
    // One listener for the whole loop: a `ctrl_c()` made per iteration
    // misses a Ctrl-C that arrives while the summary is being fetched.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            s = cloud.wait() => { eprintln!("mcm up: the local cloud exited ({s:?}); see its log"); break; }
            s = controllers.wait() => { eprintln!("mcm up: the controllers exited ({s:?}); see {}/mcm.log", logs.display()); break; }
            _ = ticker.tick() => {
                match tokio::time::timeout(Duration::from_secs(10), summary(&client)).await {
                    Err(_) => eprintln!("mcm up: summary took over 10 s; the API server may be overloaded"),
                    Ok(Err(e)) => eprintln!("mcm up: summary failed: {e}"),
                    Ok(Ok((text, running, ready, tainted))) => {
                        let line = format!("machines: {text:<40} nodes Ready: {ready}, not yet schedulable (startup taint): {tainted}");
                        if line != last {
                            println!("[{:>4}s] {line}", started.elapsed().as_secs());
                            last = line;
                        }
                        if args.exit_when_running && running >= args.replicas as usize && ready >= args.replicas as usize {
                            println!("mcm up: all {} machines are Running with Ready nodes after {} s", args.replicas, started.elapsed().as_secs());
                            break;
                        }
                    }
                }
            }
        }
    }
    eprintln!("mcm up: stopping the controllers and the local cloud");
    for child in [&mut controllers, &mut cloud] {
        if let Some(pid) = child.id() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
    Ok(())
}
