//! Invalid flags stop the binary at start-up, before it connects anywhere: it exits non-zero
//! with a message that names the flag. No control plane is needed (the kubeconfigs point
//! nowhere; a flag that passed validation would fail on them instead, with another message).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use std::process::Command;

/// Runs `mcm <args>` with unusable kubeconfigs; returns (success, stderr).
fn mcm(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(args)
        .args([
            "--control-kubeconfig=/nonexistent/kubeconfig",
            "--target-kubeconfig=/nonexistent/kubeconfig",
            "--leader-elect=false",
            "--port=1",
        ])
        .env_remove("KUBECONFIG")
        .env_remove("MCM_CONTROL_KUBECONFIG")
        .env_remove("MCM_TARGET_KUBECONFIG")
        .output()
        .expect("run the mcm binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rejected(args: &[&str], mentions: &[&str]) {
    let (ok, stderr) = mcm(args);
    assert!(!ok, "{args:?} was accepted");
    for m in mentions {
        assert!(stderr.contains(m), "{args:?}: {m:?} not in:\n{stderr}");
    }
    assert!(
        !stderr.contains("panicked"),
        "{args:?} panicked instead of failing:\n{stderr}"
    );
}

#[test]
fn malformed_and_negative_durations_are_rejected_naming_the_flag() {
    rejected(
        &["run", "--min-retry-period=banana"],
        &["--min-retry-period", "banana"],
    );
    rejected(
        &["run", "--machine-drain-timeout=-5m"],
        &["--machine-drain-timeout", "negative"],
    );
    rejected(
        &["run", "--machine-creation-timeout", " 20m"],
        &["--machine-creation-timeout"],
    );
    rejected(
        &["machine-controller", "--machine-health-timeout=20"],
        &["--machine-health-timeout", "missing unit"],
    );
}

#[test]
fn min_retry_period_above_max_is_an_error_not_a_panic() {
    rejected(
        &["run", "--min-retry-period=10m", "--max-retry-period=5s"],
        &["--min-retry-period (10m0s) must not exceed --max-retry-period (5s)"],
    );
}

#[test]
fn zero_periods_and_timeouts_that_would_spin_or_loop_are_rejected() {
    for (half, flag) in [
        ("run", "min-retry-period"),
        ("run", "machine-creation-timeout"),
        ("machine-controller", "machine-health-timeout"),
        ("machine-controller", "machine-safety-orphan-vms-period"),
        (
            "machine-controller-manager",
            "machine-safety-overshooting-period",
        ),
    ] {
        rejected(
            &[half, &format!("--{flag}=0s")],
            &[&format!("--{flag} must be greater than zero")],
        );
    }
}

#[test]
fn bad_rates_and_counts_are_rejected_naming_the_flag() {
    rejected(&["run", "--kube-api-qps=0"], &["--kube-api-qps"]);
    rejected(&["run", "--kube-api-qps=NaN"], &["--kube-api-qps"]);
    rejected(&["run", "--kube-api-burst=-1"], &["--kube-api-burst"]);
    rejected(&["run", "--concurrent-syncs=0"], &["--concurrent-syncs"]);
    rejected(&["run", "--safety-up=-1"], &["--safety-up"]);
    rejected(
        &["run", "--machine-max-evict-retries=-3"],
        &["--machine-max-evict-retries"],
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    rejected(
        &["run", "--kube-api-qps=0", "--safety-down=-1"],
        &["--kube-api-qps", "--safety-down"],
    );
}

#[test]
fn valid_flags_get_past_validation_to_the_kubeconfig() {
    let (ok, stderr) = mcm(&["run", "--min-retry-period=1s", "--max-retry-period=1s"]);
    assert!(!ok, "no cluster to connect to");
    assert!(
        stderr.contains("/nonexistent/kubeconfig"),
        "valid flags must fail on the kubeconfig only:\n{stderr}"
    );
}

#[test]
fn an_invalid_startup_taint_key_is_rejected_naming_the_flag() {
    rejected(
        &["run", "--node-startup-taint-key=not a key"],
        &["--node-startup-taint-key", "not a valid taint key"],
    );
    rejected(
        &[
            "machine-controller",
            "--node-startup-taint-key=Example.COM/x",
        ],
        &["--node-startup-taint-key"],
    );
    let (ok, stderr) = mcm(&["run", "--node-startup-taint-key=example.com/starting-up"]);
    assert!(!ok, "no cluster to connect to");
    assert!(
        stderr.contains("/nonexistent/kubeconfig"),
        "a valid key must pass validation:\n{stderr}"
    );
}

#[test]
fn a_malformed_driver_endpoint_is_rejected_naming_the_flag() {
    rejected(
        &["run", "--driver-endpoint=unix:///run/x.sock"],
        &["--driver-endpoint", "<provider>=<endpoint>"],
    );
    rejected(
        &["machine-controller", "--driver-endpoint", "aws=run/x.sock"],
        &["--driver-endpoint", "absolute"],
    );
    rejected(
        &["run", "--driver-endpoint=aws=tcp://host"],
        &["--driver-endpoint", "host:port"],
    );
}

#[test]
fn driver_serve_refuses_a_provider_that_is_not_compiled_in() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["driver", "serve", "--provider", "nosuch", "--listen"])
        .arg("unix:///nonexistent/dir/x.sock")
        .output()
        .expect("run the mcm binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("\"nosuch\" is not compiled into this binary"),
        "{stderr}"
    );
    assert!(
        stderr.contains("local"),
        "the available providers are named: {stderr}"
    );
}

/// The test certificates of the gRPC crate (tests/data/tls there).
#[cfg(feature = "grpc")]
fn tls_pem(name: &str) -> String {
    format!(
        "{}/../driver-grpc/tests/data/tls/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[cfg(feature = "grpc")]
#[test]
fn driver_tls_flags_come_together_and_plain_tcp_is_for_loopback_only() {
    rejected(
        &["run", "--driver-endpoint=aws=https://driver:7443"],
        &[
            "--driver-endpoint aws=https://driver:7443",
            "--driver-tls-cert",
        ],
    );
    rejected(
        &[
            "machine-controller",
            "--driver-endpoint=aws=tcp://10.0.0.1:7000",
        ],
        &["--driver-endpoint aws=tcp://10.0.0.1:7000", "loopback"],
    );
    rejected(
        &["run", &format!("--driver-tls-ca={}", tls_pem("ca.pem"))],
        &["--driver-tls-", "go together"],
    );
    let (ca, cert, key) = (
        format!("--driver-tls-ca={}", tls_pem("ca.pem")),
        format!("--driver-tls-cert={}", tls_pem("client.pem")),
        format!("--driver-tls-key={}", tls_pem("client-key.pem")),
    );
    rejected(
        &["run", &ca, &cert, "--driver-tls-key=/nonexistent/key.pem"],
        &["--driver-tls-", "/nonexistent/key.pem"],
    );
    let (ok, stderr) = mcm(&[
        "run",
        "--driver-endpoint=aws=https://driver:7443",
        "--driver-endpoint=local=tcp://127.0.0.1:7000",
        &ca,
        &cert,
        &key,
    ]);
    assert!(!ok, "no cluster to connect to");
    assert!(
        stderr.contains("/nonexistent/kubeconfig"),
        "TLS endpoints with the three files pass validation:\n{stderr}"
    );
}

#[cfg(feature = "grpc")]
#[test]
fn driver_serve_refuses_plain_tcp_off_loopback_and_partial_tls_flags() {
    let serve = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args(["driver", "serve", "--provider", "local"])
            .args(extra)
            .output()
            .expect("run the mcm binary");
        assert!(!out.status.success(), "{extra:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = serve(&["--listen", "tcp://0.0.0.0:0"]);
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("--tls-client-ca"),
        "{stderr}"
    );
    let cert = tls_pem("server.pem");
    let stderr = serve(&["--listen", "tcp://0.0.0.0:0", "--tls-cert", &cert]);
    assert!(stderr.contains("go together"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
