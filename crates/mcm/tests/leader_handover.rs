//! Two `machine-controller` processes on one Lease: both answer `/healthz`,
//! `/readyz` and `/metrics`, only one holds the Lease, and SIGTERM on the
//! holder releases it so the standby takes over long before the 15 s lease
//! duration. A process (`mcm run` or one half alone) whose Lease is taken
//! away exits with a non-zero code, so its pod restarts (design:
//! docs/design/leader-election.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::dropin;

use dropin::{http_get, Proc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use mcm_testenv::{must_eventually, TestEnv};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcm_testenv::free_port;

fn replica(env: &TestEnv, name: &str, port: u16) -> Proc {
    spawn(env, name, port, "machine-controller", &[])
}

/// `mcm <command> <extra>` in the test's namespace.
fn spawn(env: &TestEnv, name: &str, port: u16, command: &str, extra: &[&str]) -> Proc {
    let ns = &env.namespace;
    let kubeconfig = mcm_testenv::kubeconfig_path();
    let log = std::env::temp_dir().join(format!("mcm-handover-{ns}-{name}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    eprintln!("{name} log: {}", log.display());
    let mut args = vec![
        command.to_string(),
        format!("--namespace={ns}"),
        format!("--port={port}"),
        "--address=127.0.0.1".into(),
        format!("--control-kubeconfig={}", kubeconfig.display()),
        "--target-kubeconfig=none".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(args)
        .env("POD_NAME", name)
        .env_remove("RUST_LOG")
        .stdout(Stdio::from(file.try_clone().expect("log")))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("spawn");
    Proc { child, log }
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    holder_of(leases, "machine-controller").await
}

async fn holder_of(leases: &Api<Lease>, lease: &str) -> Option<String> {
    leases
        .get_opt(lease)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

fn status(port: u16, path: &str) -> Option<u16> {
    http_get(port, path).map(|(status, _, _)| status)
}

#[tokio::test]
async fn sigterm_releases_the_lease_and_the_standby_takes_over_long_before_the_lease_duration() {
    // Both ring and aws-lc-rs are compiled in: pick one for this process's client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(env) = TestEnv::new("handover").await else {
        return;
    };
    let leases: Api<Lease> = env.api();
    let (port_a, port_b) = (free_port(), free_port());
    let mut a = replica(&env, "replica-a", port_a);
    must_eventually(Duration::from_secs(60), "replica-a leads", || async {
        holder(&leases)
            .await
            .filter(|h| h.starts_with("replica-a_"))
    })
    .await;
    let mut b = replica(&env, "replica-b", port_b);
    for port in [port_a, port_b] {
        must_eventually(
            Duration::from_secs(60),
            "/healthz and /readyz answer 200",
            || async move {
                (status(port, "/healthz")? == 200 && status(port, "/readyz")? == 200).then_some(())
            },
        )
        .await;
        let (code, _, body) = http_get(port, "/metrics").expect("scrape");
        assert_eq!(code, 200);
        assert!(
            body.contains("# TYPE mcm_machine_items_total gauge"),
            "{body}"
        );
    }
    assert!(holder(&leases)
        .await
        .is_some_and(|h| h.starts_with("replica-a_")));

    let sent = Instant::now();
    let pid = a.child.id().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(kill.success());
    let took = must_eventually(Duration::from_secs(14), "replica-b takes over", || async {
        holder(&leases)
            .await
            .filter(|h| h.starts_with("replica-b_"))
            .map(|_| sent.elapsed())
    })
    .await;
    eprintln!("replica-b took over {took:?} after SIGTERM to replica-a");
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Ok(Some(exit)) = a.child.try_wait() {
            break exit;
        }
        assert!(Instant::now() < deadline, "replica-a exits after SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        exit.success(),
        "a clean shutdown: {exit:?}\n{}",
        a.log_text()
    );
    assert!(
        a.log_text().contains("released the leader lease"),
        "{}",
        a.log_text()
    );
    assert!(b.running());
}

/// Fast election settings: a lost Lease is noticed within a retry period.
const FAST: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=500ms",
];

/// Starts `mcm <command>` leading `lease`, then another holder writes the
/// Lease for a moment; the process must exit with a non-zero code.
async fn a_taken_lease_ends_the_process(test: &str, command: &str, lease: &str) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Some(env) = TestEnv::new(test).await else {
        return;
    };
    let leases: Api<Lease> = env.api();
    let port = free_port();
    let mut p = spawn(&env, "victim", port, command, &FAST);
    must_eventually(Duration::from_secs(60), "the process leads", || async {
        holder_of(&leases, lease)
            .await
            .filter(|h| h.starts_with("victim_"))
    })
    .await;
    must_eventually(Duration::from_secs(60), "/healthz answers 200", || async {
        (status(port, "/healthz")? == 200).then_some(())
    })
    .await;
    // Another holder writes the Lease (as a replica that took it over
    // during an API-server blip would).
    let mut l = leases.get(lease).await.expect("lease");
    let spec = l.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("thief".into());
    spec.lease_duration_seconds = Some(60);
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    let taken = Instant::now();
    leases
        .replace(lease, &Default::default(), &l)
        .await
        .expect("take the lease");
    // Its next renewal (within a retry period) finds another holder; the
    // other half (if any) gets its shutdown grace (10 s) and releases.
    let deadline = taken + Duration::from_secs(30);
    let exit = loop {
        if let Ok(Some(exit)) = p.child.try_wait() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the process still runs {:?} after its Lease was taken\n{}",
            taken.elapsed(),
            p.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "exited {:?} after the Lease was taken: {exit:?}",
        taken.elapsed()
    );
    assert!(
        !exit.success(),
        "a non-zero exit code: {exit:?}\n{}",
        p.log_text()
    );
    assert!(
        p.log_text().contains(lease),
        "the reason names the Lease\n{}",
        p.log_text()
    );
}

#[tokio::test]
async fn mcm_run_exits_non_zero_when_the_machine_controller_lease_is_taken_away() {
    a_taken_lease_ends_the_process("lost-run", "run", "machine-controller").await;
}

#[tokio::test]
async fn machine_controller_exits_non_zero_when_its_lease_is_taken_away() {
    a_taken_lease_ends_the_process("lost-mc", "machine-controller", "machine-controller").await;
}

#[tokio::test]
async fn machine_controller_manager_exits_non_zero_when_its_lease_is_taken_away() {
    a_taken_lease_ends_the_process(
        "lost-mcm",
        "machine-controller-manager",
        "machine-controller-manager",
    )
    .await;
}
