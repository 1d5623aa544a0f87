//! Two `machine-controller` processes on one Lease: both answer `/healthz`,
//! `/readyz` and `/metrics`, only one holds the Lease, and SIGTERM on the
//! holder releases it so the standby takes over long before the 15 s lease
//! duration (design: docs/design/leader-election.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

mod dropin;

use dropin::{http_get, Proc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use mcm_testenv::{must_eventually, TestEnv};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcm_testenv::free_port;

fn replica(env: &TestEnv, name: &str, port: u16) -> Proc {
    let ns = &env.namespace;
    let kubeconfig = mcm_testenv::kubeconfig_path();
    let log = std::env::temp_dir().join(format!("mcm-handover-{ns}-{name}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    eprintln!("{name} log: {}", log.display());
    let child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args([
            "machine-controller".to_string(),
            format!("--namespace={ns}"),
            format!("--port={port}"),
            "--address=127.0.0.1".into(),
            format!("--control-kubeconfig={}", kubeconfig.display()),
            "--target-kubeconfig=none".into(),
        ])
        .env("POD_NAME", name)
        .env_remove("RUST_LOG")
        .stdout(Stdio::from(file.try_clone().expect("log")))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("spawn");
    Proc { child, log }
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("machine-controller")
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
