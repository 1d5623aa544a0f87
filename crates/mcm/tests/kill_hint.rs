//! The kill command `mcm up` prints works as printed: the test takes the
//! line `mcm up` prints (`--print-hints` prints the same lines and exits),
//! fills in a machine name, runs it, and the instance is killed; then the
//! same with an instance ID. (Multi-threaded: the commands block this thread
//! while the in-process cloud answers them.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use mcm_provider_local::admin::KILL_HINT_PLACEHOLDER;
use mcm_provider_local::server::{spawn, CloudConfig};
use mcm_provider_local::wire::{Instance, InstanceState};
use mcm_provider_local::{AdminClient, Tunables};
use std::net::SocketAddr;
use std::process::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Launches an instance for machine `name` (a raw JSON POST, as the driver sends it).
async fn launch(addr: SocketAddr, name: &str) -> Instance {
    let body = serde_json::json!({
        "clientToken": format!("uid-{name}"),
        "machineName": name,
        "providerSpec": {
            "image": "local/ubuntu-24.04",
            "instanceType": "local.medium",
            "tags": {"kubernetes.io/cluster/hint": "1", "kubernetes.io/role/node": "1"}
        }
    })
    .to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /v1/instances HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.expect("read");
    let json = answer.split("\r\n\r\n").nth(1).expect("a body");
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// The kill line `mcm up` prints for a cloud on `port`, without its comment.
fn printed_kill_command(port: u16) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["up", "--print-hints", "--cloud-port", &port.to_string()])
        .output()
        .expect("mcm up --print-hints");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let line = stdout
        .lines()
        .find(|l| l.contains("local-cloud kill"))
        .unwrap_or_else(|| panic!("no kill hint in {stdout}"));
    let command = line.split('#').next().unwrap_or("").trim().to_string();
    assert!(command.contains(KILL_HINT_PLACEHOLDER), "{command}");
    command
}

/// Runs a printed command line with the placeholder replaced by `target`.
fn run_filled_in(command: &str, target: &str) {
    let filled = command.replace(KILL_HINT_PLACEHOLDER, target);
    let argv: Vec<&str> = filled.split_whitespace().collect();
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("running {filled:?}: {e}"));
    assert!(
        out.status.success(),
        "{filled:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn state_of(admin: &AdminClient, id: &str) -> InstanceState {
    admin
        .instances()
        .await
        .expect("instances")
        .into_iter()
        .find(|i| i.id == id)
        .map(|i| i.state)
        .expect("the instance")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_kill_command_kills_by_machine_name_and_by_instance_id() {
    let dir = std::env::temp_dir().join(format!("mcm-kill-hint-{}", std::process::id()));
    let mut config = CloudConfig::new(dir.join("cloud.redb"));
    config.tunables = Tunables::unlimited();
    config.tunables.boot_delay_ms = 0;
    let (addr, handle) = spawn(config).await.expect("cloud");
    let admin = AdminClient::new(format!("http://{addr}")).expect("admin");
    let by_name = launch(addr, "hint-machine-a").await;
    let by_id = launch(addr, "hint-machine-b").await;

    let command = printed_kill_command(addr.port());
    run_filled_in(&command, "hint-machine-a");
    assert_eq!(state_of(&admin, &by_name.id).await, InstanceState::Killed);
    assert_eq!(state_of(&admin, &by_id.id).await, InstanceState::Running);

    run_filled_in(&command, &by_id.id);
    assert_eq!(state_of(&admin, &by_id.id).await, InstanceState::Killed);

    handle.shutdown().await.expect("shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
