//! What the `local`-cloud scenarios (`hot_update.rs`, `in_place.rs`,
//! `preservation_local.rs`; the cloud and the Secret also `grpc_scenario`) share: a namespace of the test control plane, an
//! in-process local cloud whose simulated kubelets register Ready Nodes in
//! it, and the real `mcm run` binary for that namespace, its output in
//! `$TMPDIR/mcm-<test>-<namespace>.log`. Everything stops on drop.

use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use mcm_provider_local::{server, AdminClient, Tunables};
use mcm_testenv::{free_port, KillOnDrop, TempDir, TestEnv};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct LocalScenario {
    pub env: TestEnv,
    pub ns: String,
    pub admin: AdminClient,
    _controllers: KillOnDrop,
    _cloud: server::ServerHandle,
    _dir: TempDir,
}

/// Starts the scenario `test`: the cloud has no rate limits and a 2 s
/// heartbeat before `tune` adjusts it; `mcm run` gets the namespace, the
/// cloud, no leader election, a free metrics port and `--min-retry-period
/// 1s`, then `run_args`. `None` when the control plane is absent (a visible
/// skip, or a failure under CI).
pub async fn start(
    test: &str,
    tune: impl FnOnce(&mut server::CloudConfig),
    run_args: &[&str],
) -> Option<LocalScenario> {
    let env = TestEnv::new(test).await?;
    let ns = env.namespace.clone();
    let kubeconfig = mcm_testenv::kubeconfig_path();
    let kc = kubeconfig.to_string_lossy().to_string();
    let dir = TempDir(std::env::temp_dir().join(format!("mcm-{test}-{ns}")));
    let (url, cloud) = local_cloud(&dir, &ns, tune).await;
    let log_path = std::env::temp_dir().join(format!("mcm-{test}-{ns}.log"));
    let log = std::fs::File::create(&log_path).expect("log file");
    eprintln!("controllers' log: {}", log_path.display());
    let controllers = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args([
                "run",
                "--control-kubeconfig",
                &kc,
                "--target-kubeconfig",
                &kc,
            ])
            .args(["--namespace", &ns, "--local-cloud-url", &url])
            .args(["--leader-elect=false", "--address", "127.0.0.1"])
            .args(["--port", &free_port().to_string()])
            .args(["--min-retry-period", "1s"])
            .args(run_args)
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn mcm run"),
    );
    Some(LocalScenario {
        admin: AdminClient::new(&url).expect("admin client"),
        env,
        ns,
        _controllers: controllers,
        _cloud: cloud,
        _dir: dir,
    })
}

impl LocalScenario {
    /// A userData Secret `name` in the scenario's namespace.
    pub async fn create_userdata_secret(&self, name: &str) {
        create_userdata_secret(&self.env, name).await;
    }
}

/// A local cloud in `dir` for the namespace `ns` (its zone, and where its
/// simulated kubelets register Nodes): no rate limits and a 2 s heartbeat
/// before `tune` adjusts it. Its URL and the handle that stops it on drop.
pub async fn local_cloud(
    dir: &TempDir,
    ns: &str,
    tune: impl FnOnce(&mut server::CloudConfig),
) -> (String, server::ServerHandle) {
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let mut config = server::CloudConfig::new(dir.0.join("local-cloud.redb"));
    config.zone = ns.to_string();
    config.target_kubeconfig = Some(mcm_testenv::kubeconfig_path());
    config.heartbeat_interval = Duration::from_secs(2);
    config.tunables = Tunables::unlimited();
    tune(&mut config);
    let (addr, cloud) = server::spawn(config).await.expect("local cloud");
    (format!("http://{addr}"), cloud)
}

/// A userData Secret `name` in the test's namespace.
pub async fn create_userdata_secret(env: &TestEnv, name: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": env.namespace},
        "stringData": {"userData": "#cloud-config\n"}
    }))
    .expect("Secret");
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("Secret");
}
