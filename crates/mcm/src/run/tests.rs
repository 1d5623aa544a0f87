use super::*;
use clap::Parser;
use std::time::Duration;

fn manager(args: &[&str]) -> Plan {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ManagerArgs,
    }
    let argv = std::iter::once("machine-controller-manager").chain(args.iter().copied());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => panic!("flags {args:?}: {e}"),
    };
    Plan {
        name: MANAGER,
        common: cli.args.common,
        sets: Some(cli.args.sets),
        machines: None,
    }
}

fn all_in_one(args: &[&str]) -> Plan {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
    }
    let argv = std::iter::once("mcm").chain(args.iter().copied());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => panic!("flags {args:?}: {e}"),
    };
    Plan {
        name: "mcm",
        common: cli.args.common,
        sets: Some(cli.args.sets),
        machines: Some(cli.args.machines),
    }
}

#[test]
fn concurrent_syncs_and_the_retry_periods_reach_the_set_controllers() {
    let c = runtime_config(&manager(&[
        "--namespace=shoot--a--b",
        "--concurrent-syncs=7",
        "--min-retry-period=3s",
        "--max-retry-period=90s",
        "--safety-up=4",
        "--safety-down=2",
        "--machine-safety-overshooting-period=45s",
        "--autoscaler-scaledown-annotation-during-rollout=false",
    ]));
    // `sets::run_with` reads exactly these fields of the one Config.
    assert_eq!(c.namespace, "shoot--a--b");
    assert_eq!(c.concurrent_syncs, 7);
    assert_eq!(c.short_retry, Duration::from_secs(3));
    assert_eq!(c.long_retry, Duration::from_secs(90));
    assert_eq!(c.sets.safety_up, 4);
    assert_eq!(c.sets.safety_down, 2);
    assert_eq!(c.sets.overshooting_period, Duration::from_secs(45));
    assert!(!c.sets.autoscaler_scaledown_annotation_during_rollout);
}

#[test]
fn without_flags_every_setting_is_the_one_default_of_the_runtime_config() {
    let defaults = mcm_runtime::Config::default();
    let c = runtime_config(&all_in_one(&[]));
    // What the process sets apart from the flags (the Events' reporting
    // instance comes from the pod's environment).
    let c = mcm_runtime::Config {
        sets: mcm_runtime::sets::SetsConfig {
            reporting_instance: None,
            ..c.sets
        },
        ..c
    };
    assert_eq!(c, defaults);
    let m = runtime_config(&manager(&[]));
    assert_eq!(m.short_retry, defaults.short_retry);
    assert_eq!(m.long_retry, defaults.long_retry);
    assert_eq!(m.sets.safety_up, defaults.sets.safety_up);
    assert_eq!(
        m.sets.overshooting_period,
        defaults.sets.overshooting_period
    );
}

#[test]
fn each_half_defaults_concurrent_syncs_as_the_reference() {
    assert_eq!(runtime_config(&manager(&[])).concurrent_syncs, 10);
    assert_eq!(runtime_config(&all_in_one(&[])).concurrent_syncs, 50);
}

#[test]
fn all_in_one_gives_machines_and_sets_the_same_flags() {
    let c = runtime_config(&all_in_one(&[
        "--concurrent-syncs=3",
        "--machine-creation-timeout=7m",
        "--safety-up=5",
    ]));
    assert_eq!(c.concurrent_syncs, 3);
    assert_eq!(c.creation_timeout, Duration::from_secs(420));
    assert_eq!(c.sets.safety_up, 5);
}

/// A stand-in API server that answers `GET /version`, and a kubeconfig for it.
async fn version_server() -> (mcm_testenv::TempDir, kubeclient::Source) {
    let app = axum::Router::new().route(
        "/version",
        axum::routing::get(|| async {
            axum::Json(serde_json::json!({
                "major": "1", "minor": "36", "gitVersion": "v1.36.0", "gitCommit": "",
                "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "",
                "platform": "linux/amd64"
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = mcm_testenv::TempDir(
        std::env::temp_dir().join(format!("mcm-role-clients-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let path = dir.0.join("kubeconfig");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://{addr}\"}}}}]\n\
         users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
         current-context: x\n"
    );
    std::fs::write(&path, kubeconfig).expect("kubeconfig");
    (dir, kubeclient::Source::File(path))
}

#[tokio::test]
async fn each_client_role_has_its_own_request_budget() {
    // The binary installs its TLS provider in main; a unit test does it here.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_dir, src) = version_server().await;
    // One token, then one every 5 s.
    let rest = mcm_runtime::metrics::rest::RestMetrics::default();
    let clients = role_clients("mcm", &src, Some(&src), 0.2, 1, &rest)
        .await
        .expect("clients");
    clients
        .control
        .apiserver_version()
        .await
        .expect("the first request takes the control client's one token");
    let control = clients.control.clone();
    let waiting = tokio::spawn(async move { control.apiserver_version().await });

    // The control client's bucket is empty; every other role still answers
    // at once (a Lease renewal never queues behind Machine writes).
    let target = clients.target.clone().expect("target client");
    let target_probe = clients.target_probe.clone().expect("target probe client");
    for (role, client) in [
        ("leases", clients.leases.clone()),
        ("events", clients.events.clone()),
        ("target", target),
        ("probe", clients.probe.clone()),
        ("target probe", target_probe),
    ] {
        let answered =
            tokio::time::timeout(Duration::from_secs(2), client.apiserver_version()).await;
        assert!(
            matches!(answered, Ok(Ok(_))),
            "the {role} client waited on another role's budget: {answered:?}"
        );
    }
    assert!(
        !waiting.is_finished(),
        "the control client's second request waits for its own bucket"
    );
    waiting.abort();
}

#[test]
fn probes_answer_200_ok_or_500_unhealthy_as_the_reference() {
    let (code, body) = probe_answer(Ok(()));
    assert_eq!((code.as_u16(), body.as_str()), (200, "OK"));
    let (code, body) = probe_answer(Err("shutting down".into()));
    assert_eq!(code.as_u16(), 500);
    assert_eq!(body, "Unhealthy: shutting down");
}
