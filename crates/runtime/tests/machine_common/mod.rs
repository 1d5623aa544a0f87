//! The one set-up of the tests that run the machine controller against the
//! real control plane (`machine_controller.rs`, `machine_deletion.rs`,
//! `machine_retries.rs`, `drain.rs`, `hot_update.rs`, `preservation.rs`):
//! starting and stopping the controller with a test driver, Machines by
//! name, waiting for a phase, and playing kubelet by writing Node objects.
#![allow(dead_code)] // each test file uses a part

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use mcm_api::constants as c;
use mcm_api::{Machine, MachinePhase};
use mcm_driver::Driver;
use mcm_runtime::{machine, metrics::Metrics, Config, Context, DriverRegistry};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a test waits for the controller to get somewhere.
pub const WAIT: Duration = Duration::from_secs(30);

/// A controller of one test (the machine controller here, the set
/// controllers in `sets_common`), running until [`Running::stop`].
pub struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Running {
    /// The controller run by `task`, which ends once `stop` has been sent on.
    pub fn new(stop: oneshot::Sender<()>, task: JoinHandle<()>) -> Running {
        Running { stop, task }
    }

    /// Stops the controller and waits (up to 10 s) until it has.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

/// The configuration most tests run with: the test's namespace and short
/// retries (200 ms after a short failure, 3 s after a long one).
pub fn config(ns: &str) -> Config {
    Config {
        namespace: ns.into(),
        short_retry: Duration::from_millis(200),
        long_retry: Duration::from_secs(3),
        ..Config::default()
    }
}

/// Starts the machine controller with `cfg` and `driver` as the driver of
/// `provider`; with `target`, the control plane is also the target cluster
/// (Nodes, drain), else there is none (machines become Available).
pub fn start(
    env: &TestEnv,
    provider: &str,
    driver: Arc<dyn Driver>,
    target: bool,
    cfg: Config,
) -> Running {
    run(context(env, provider, driver, target, cfg))
}

/// Runs the machine controller of `ctx` until [`Running::stop`].
pub fn run(ctx: Arc<Context>) -> Running {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(machine::run(ctx, async move {
        let _ = stopped.await;
    }));
    Running { stop, task }
}

/// The machine controller's context with `cfg` and `driver` as the driver
/// of `provider` (see [`start`]), for a test that runs the controller itself.
pub fn context(
    env: &TestEnv,
    provider: &str,
    driver: Arc<dyn Driver>,
    target: bool,
    cfg: Config,
) -> Arc<Context> {
    let mut drivers = DriverRegistry::new();
    drivers.register(provider, driver);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let target = target.then(|| env.client.clone());
    Context::new(env.client.clone(), target, cfg, drivers, metrics)
}

/// The test's namespace with the user-data Secret `creds` holding `user_data`.
pub async fn namespace_with_secret(test: &str, user_data: &str) -> Option<TestEnv> {
    let env = TestEnv::new(test).await?;
    env.create_user_data_secret("creds", user_data)
        .await
        .expect("create secret");
    Some(env)
}

/// Creates the Machine `name` (label `name: pool`) of MachineClass `class`;
/// `extra` is merged into its spec.
pub async fn create_machine(
    env: &TestEnv,
    name: &str,
    class: &str,
    extra: serde_json::Value,
) -> Machine {
    let mut m = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": {"name": "pool"}},
        "spec": {"class": {"kind": "MachineClass", "name": class}},
    });
    if let (Some(spec), Some(more)) = (m["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(more.clone());
    }
    let m: Machine = serde_json::from_value(m).expect("machine");
    env.api::<Machine>()
        .create(&PostParams::default(), &m)
        .await
        .expect("create machine")
}

/// The Machine `name`, if it exists.
pub async fn get(env: &TestEnv, name: &str) -> Option<Machine> {
    env.api::<Machine>()
        .get_opt(name)
        .await
        .expect("get machine")
}

/// A Machine's phase (the default one before it has a status).
pub fn phase(m: &Machine) -> MachinePhase {
    m.status.clone().unwrap_or_default().current_status.phase
}

/// Waits until the Machine `name` is in phase `want`.
pub async fn wait_phase(env: &TestEnv, name: &str, want: MachinePhase) -> Machine {
    wait_for(env, name, &format!("in phase {want}"), |m| phase(m) == want).await
}

/// Waits until the Machine `name` satisfies `check` (`what` names it in the failure).
pub async fn wait_for(
    env: &TestEnv,
    name: &str,
    what: &str,
    check: impl Fn(&Machine) -> bool,
) -> Machine {
    let check = &check;
    must_eventually(WAIT, &format!("machine {name} {what}"), || async move {
        get(env, name).await.filter(check)
    })
    .await
}

/// Waits until the Machine `name` is gone.
pub async fn wait_gone(env: &TestEnv, name: &str) {
    must_eventually(WAIT, &format!("machine {name} deleted"), || async {
        get(env, name).await.is_none().then_some(())
    })
    .await;
}

/// The Node of a Machine: Nodes are cluster-scoped, so they are named after
/// the test's namespace (the test driver's `node_prefix`).
pub fn node_of(env: &TestEnv, machine: &str) -> String {
    format!("{}-{machine}", env.namespace)
}

/// Plays kubelet: registers the Node `node` of `machine` if it does not
/// exist yet, and reports it Ready or not.
pub async fn kubelet(client: &Client, node: &str, machine: &str, ready: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    if nodes.get_opt(node).await.expect("get node").is_none() {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": node, "labels": {c::MACHINE_NAME_NODE_LABEL: machine}},
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &n)
            .await
            .expect("create node");
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {"conditions": [{
        "type": "Ready", "status": if ready {"True"} else {"False"},
        "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .expect("patch node status");
}
