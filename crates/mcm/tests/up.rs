//! `mcm up` tried as a new user would: 3 Running machines with Ready nodes,
//! `kubectl scale` to 5 adds two, a killed instance's machine goes Unknown,
//! then Failed, and is replaced, and Ctrl-C leaves no process behind.
//!
//! It runs the real binary, which starts its own control plane (from the
//! binaries that `hack/test.sh` built), the local cloud and the controllers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use futures::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Config, ResourceExt};
use mcm_api::{Machine, MachineDeployment, MachinePhase};
use mcm_provider_local::admin::KILL_HINT_PLACEHOLDER;
use mcm_provider_local::wire::InstanceState;
use mcm_provider_local::AdminClient;
use mcm_testenv::{must_eventually, service, skip_or_fail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcm_testenv::free_port;

struct Up {
    child: Child,
    dir: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .arg("-INT")
                .arg(self.child.id().to_string())
                .status();
            let _ = self.child.wait();
        }
    }
}

fn control_plane_binaries_built() -> bool {
    std::env::var("HOME")
        .map(|h| Path::new(&h).join(".cache/mcm-kube-testenv").exists())
        .unwrap_or(false)
}

async fn phases(client: &Client) -> BTreeMap<String, usize> {
    let machines: Api<Machine> = Api::namespaced(client.clone(), "default");
    let mut out = BTreeMap::new();
    for m in machines
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        *out.entry(
            m.status
                .unwrap_or_default()
                .current_status
                .phase
                .to_string(),
        )
        .or_insert(0) += 1;
    }
    out
}

async fn running(client: &Client, n: usize) -> Option<()> {
    (phases(client).await.get("Running").copied().unwrap_or(0) == n
        && phases(client).await.values().sum::<usize>() == n)
        .then_some(())
}

fn pid_alive(pid: &str) -> bool {
    Path::new("/proc").join(pid.trim()).exists()
}

#[tokio::test]
async fn mcm_up_runs_scales_replaces_a_killed_machine_and_cleans_up() {
    if !control_plane_binaries_built() {
        skip_or_fail(
            "mcm_up_runs_scales_replaces_a_killed_machine_and_cleans_up",
            service::CONTROL_PLANE_BINARIES,
            "~/.cache/mcm-kube-testenv does not exist",
        );
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("mcm-up-test-{}", std::process::id()));
    let cloud_port = free_port();
    // One log per run: tests running at the same time (CI and a person) must not read each other's.
    let log_path = std::env::temp_dir().join(format!("mcm-up-test-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["up", "--dir"])
        .arg(&dir)
        .args([
            "--cloud-port",
            &cloud_port.to_string(),
            "--metrics-port",
            &free_port().to_string(),
        ])
        .args(["--machine-health-timeout", "10s", "--boot-delay", "1s"])
        .current_dir(&root)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn mcm up");
    let up = Up {
        child,
        dir: dir.clone(),
    };
    let kubeconfig = up.dir.join("testenv/kubeconfig");
    must_eventually(
        Duration::from_secs(120),
        "mcm up wrote a kubeconfig",
        || async { kubeconfig.exists().then_some(()) },
    )
    .await;
    mcm_testenv::init_crypto();
    let client = must_eventually(
        Duration::from_secs(60),
        "the control plane answers",
        || async {
            let kc = Kubeconfig::read_from(&kubeconfig).ok()?;
            let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .ok()?;
            let c = Client::try_from(cfg).ok()?;
            c.apiserver_version().await.ok().map(|_| c)
        },
    )
    .await;

    // 3 Running machines with Ready nodes.
    must_eventually(Duration::from_secs(180), "3 Running machines", || {
        running(&client, 3)
    })
    .await;

    // kubectl scale mcd/<name> --replicas=5 adds two (through the scale subresource).
    let mcds: Api<MachineDeployment> = Api::namespaced(client.clone(), "default");
    mcds.patch_scale(
        "local-machine-deployment",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("scale");
    must_eventually(Duration::from_secs(180), "5 Running machines", || {
        running(&client, 5)
    })
    .await;

    // Kill one instance: Unknown, then Failed, then replaced.
    let admin = AdminClient::new(format!("http://127.0.0.1:{cloud_port}")).expect("admin");
    let victim = admin
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .next()
        .expect("an instance");
    // With the command `mcm up` printed, filled in with the machine name.
    let printed = std::fs::read_to_string(&log_path)
        .expect("log")
        .lines()
        .find(|l| l.contains("local-cloud kill"))
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .expect("mcm up printed a kill command");
    let filled = printed.replace(KILL_HINT_PLACEHOLDER, &victim.machine_name);
    let argv: Vec<&str> = filled.split_whitespace().collect();
    // Every phase the victim's Machine passes through, from a watch started
    // before the kill, so a skipped phase cannot hide behind a poll.
    let machines: Api<Machine> = Api::namespaced(client.clone(), "default");
    let phases_seen: Arc<Mutex<Vec<MachinePhase>>> = Arc::default();
    let watch = {
        let phases_seen = phases_seen.clone();
        let cfg =
            watcher::Config::default().fields(&format!("metadata.name={}", victim.machine_name));
        let mut events = watcher(machines.clone(), cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Ok(m) = event else { continue };
                let p = m.status.unwrap_or_default().current_status.phase;
                if let Ok(mut seen) = phases_seen.lock() {
                    if seen.last() != Some(&p) {
                        seen.push(p);
                    }
                }
            }
        })
    };
    must_eventually(
        Duration::from_secs(30),
        "the watch saw the victim Running",
        || async {
            let seen = phases_seen.lock().ok()?;
            seen.contains(&MachinePhase::Running).then_some(())
        },
    )
    .await;
    let killed = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(&root)
        .output()
        .expect("run the printed kill command");
    assert!(killed.status.success(), "{filled}: {killed:?}");
    let state = admin
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .find(|i| i.id == victim.id)
        .map(|i| i.state);
    assert_eq!(state, Some(InstanceState::Killed), "{filled}");
    // Running → Unknown (health check fails) → Failed (after the 10 s
    // health timeout), in that order.
    must_eventually(
        Duration::from_secs(180),
        &format!("{} Unknown, then Failed", victim.machine_name),
        || async {
            let seen = phases_seen.lock().ok()?;
            let unknown = seen.iter().position(|p| *p == MachinePhase::Unknown)?;
            seen[unknown..]
                .contains(&MachinePhase::Failed)
                .then_some(())
        },
    )
    .await;
    watch.abort();
    must_eventually(
        Duration::from_secs(240),
        "the killed machine is replaced",
        || async {
            let names: Vec<String> = machines
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .map(|m| m.name_any())
                .collect();
            (!names.contains(&victim.machine_name)).then_some(())?;
            running(&client, 5).await
        },
    )
    .await;

    // Ctrl-C leaves no process behind.
    let pids: Vec<String> = ["etcd", "kube-apiserver", "kube-controller-manager"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(up.dir.join(format!("testenv/{p}.pid"))).ok())
        .collect();
    assert_eq!(pids.len(), 3);
    let mut up = up;
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(up.child.id().to_string())
        .status();
    let status = up.child.wait().expect("wait");
    assert!(
        status.success(),
        "mcm up exits cleanly on Ctrl-C: {status:?}"
    );
    for pid in &pids {
        assert!(!pid_alive(pid), "control-plane process {pid} still running");
    }
    let port = cloud_port.to_string();
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| {
            c.contains("mcm")
                && (c.contains(&port) || c.contains(&dir.to_string_lossy().to_string()))
        })
        .collect();
    assert!(leftovers.is_empty(), "processes left behind: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
