//! Shared helpers of the MachineSet / MachineDeployment tests against the real
//! control plane. No machine controller runs: [`FakeMachineController`] plays
//! it by writing Machine phases.
#![allow(dead_code)]

use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineDeployment, MachinePhase, MachineSet};
use mcm_runtime::sets::{self, SetsConfig};
use mcm_testenv::TestEnv;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long the tests wait for a state.
pub const WAIT: Duration = Duration::from_secs(60);

/// Fast settings for tests.
pub fn config() -> SetsConfig {
    SetsConfig {
        overshooting_period: Duration::from_millis(300),
        resync_period: Duration::from_secs(30),
        ..SetsConfig::default()
    }
}

/// The controllers, running in the background until stopped.
pub use crate::machine_common::Running;

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_logs() {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
}

/// Starts the set controllers in the test's namespace.
pub fn start(env: &TestEnv, cfg: SetsConfig) -> Running {
    init_logs();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(sets::run_until(
        env.client.clone(),
        env.namespace.clone(),
        cfg,
        async move {
            let _ = rx.await;
        },
    ));
    Running::new(tx, task)
}

/// Plays the machine controller: every machine without a phase becomes
/// Running after it has been seen for `delay`.
pub struct FakeMachineController {
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl FakeMachineController {
    /// Starts it.
    pub fn start(env: &TestEnv, delay: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let api: Api<Machine> = env.api();
        let task = tokio::spawn(async move {
            let mut first_seen: HashMap<String, Instant> = HashMap::new();
            while !s.load(Ordering::Relaxed) {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for m in list.items {
                        if m.metadata.deletion_timestamp.is_some()
                            || phase(&m) != MachinePhase::Empty
                        {
                            continue;
                        }
                        let seen = *first_seen.entry(m.name_any()).or_insert_with(Instant::now);
                        if seen.elapsed() >= delay {
                            let _ = set_phase(&api, &m.name_any(), "Running").await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        FakeMachineController { stop, task }
    }

    /// Stops it.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
    }
}

/// Writes a machine's phase (and a matching last operation).
pub async fn set_phase(
    api: &Api<Machine>,
    name: &str,
    phase: &str,
) -> Result<Machine, kube::Error> {
    let state = if phase == "Failed" {
        "Failed"
    } else {
        "Successful"
    };
    let patch = json!({"status": {
        "currentStatus": {"phase": phase},
        "lastOperation": {"type": "Create", "state": state, "description": format!("test: {phase}")}
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// The phase of a machine.
pub fn phase(m: &Machine) -> MachinePhase {
    m.status.clone().unwrap_or_default().current_status.phase
}

/// All machines of the namespace (a consistent LIST).
pub async fn machines(env: &TestEnv) -> Vec<Machine> {
    env.api::<Machine>()
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Machines without deletion timestamp.
pub fn live(ms: &[Machine]) -> Vec<&Machine> {
    ms.iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Live Running machines.
pub fn running(ms: &[Machine]) -> usize {
    live(ms)
        .iter()
        .filter(|m| phase(m) == MachinePhase::Running)
        .count()
}

/// The name of a machine's controller.
pub fn owner(m: &Machine) -> Option<String> {
    m.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.name.clone())
}

/// All MachineSets of the namespace.
pub async fn sets_of(env: &TestEnv) -> Vec<MachineSet> {
    env.api::<MachineSet>()
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// A MachineDeployment of `replicas` machines of class `class`.
pub fn deployment(
    name: &str,
    replicas: i32,
    class: &str,
    strategy: serde_json::Value,
) -> MachineDeployment {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"test-label": name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"test-label": name}},
                "spec": {"class": {"kind": "MachineClass", "name": class}}
            }
        }
    }))
    .unwrap_or_default()
}

/// RollingUpdate with the given fence-posts.
pub fn rolling(max_surge: i32, max_unavailable: i32) -> serde_json::Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}})
}

/// Creates a MachineDeployment.
pub async fn create_deployment(env: &TestEnv, d: &MachineDeployment) -> MachineDeployment {
    env.api::<MachineDeployment>()
        .create(&PostParams::default(), d)
        .await
        .unwrap_or_else(|e| panic!("create deployment: {e}"))
}

/// Merge-patches a MachineDeployment's spec.
pub async fn patch_deployment(env: &TestEnv, name: &str, patch: serde_json::Value) {
    env.api::<MachineDeployment>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch deployment: {e}"));
}

/// A MachineDeployment as stored.
pub async fn get_deployment(env: &TestEnv, name: &str) -> Option<MachineDeployment> {
    env.api::<MachineDeployment>()
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// Events (events.k8s.io) of the namespace with that reason.
pub async fn events_with_reason(env: &TestEnv, reason: &str) -> Vec<K8sEvent> {
    env.api::<K8sEvent>()
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// How many times an event with that reason was recorded (series counted).
pub async fn event_count(env: &TestEnv, reason: &str) -> i32 {
    events_with_reason(env, reason)
        .await
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// The count of Events with `reason` once it has reached `at_least` (Events are
/// published after the write they report, so a check right after that write
/// must wait for them), or the count at the deadline.
pub async fn event_count_reaching(env: &TestEnv, reason: &str, at_least: i32) -> i32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n = event_count(env, reason).await;
        if n >= at_least || tokio::time::Instant::now() >= deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes a machine (ignoring NotFound).
pub async fn delete_machine(env: &TestEnv, name: &str) {
    let _ = env
        .api::<Machine>()
        .delete(name, &DeleteParams::default())
        .await;
}

/// Removes all finalizers of a machine.
pub async fn drop_finalizers(env: &TestEnv, name: &str) {
    let _ = env
        .api::<Machine>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

/// The class name of a machine.
pub fn class_of(m: &Machine) -> String {
    m.spec.class.name.clone()
}

/// Waits until the deployment has `n` Running machines of `class`, nothing
/// else, and a status that says so.
pub async fn wait_settled(env: &TestEnv, name: &str, n: usize, class: &str) {
    let what = format!("{name}: {n} running machines of {class} and a complete status");
    mcm_testenv::must_eventually(WAIT, &what, || async {
        let ms = machines(env).await;
        let d = get_deployment(env, name).await?;
        let st = d.status.clone().unwrap_or_default();
        let n32 = i32::try_from(n).ok()?;
        let ok = ms.len() == n
            && running(&ms) == n
            && ms.iter().all(|m| class_of(m) == class)
            && st.replicas == n32
            && st.updated_replicas == n32
            && st.available_replicas == n32
            && st.observed_generation >= d.metadata.generation.unwrap_or(0);
        ok.then_some(())
    })
    .await;
}

/// The machines of the namespace after one watch event.
#[derive(Clone, Debug)]
pub struct MachineState {
    /// Machines without a deletion timestamp.
    pub live: usize,
    /// Live Running machines.
    pub running: usize,
    /// The classes of the live machines.
    pub classes: std::collections::BTreeSet<String>,
}

/// A watch of every Machine change in the test namespace: after its initial
/// list, the state after each event is recorded, so an invariant is checked
/// on every state the API server went through, not on samples.
pub struct MachineWatch {
    states: Arc<std::sync::Mutex<Vec<MachineState>>>,
    task: JoinHandle<()>,
}

impl MachineWatch {
    /// Starts the watch and returns once its initial list is in.
    pub async fn start(env: &TestEnv) -> MachineWatch {
        use futures::StreamExt;
        use kube::runtime::watcher::{self, Event};
        let states: Arc<std::sync::Mutex<Vec<MachineState>>> = Arc::default();
        let (synced_tx, synced_rx) = oneshot::channel::<()>();
        let api: Api<Machine> = env.api();
        let s = states.clone();
        let task = tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let mut all: HashMap<String, Machine> = HashMap::new();
            let mut init: HashMap<String, Machine> = HashMap::new();
            let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::Init) => init.clear(),
                    Ok(Event::InitApply(m)) => {
                        init.insert(m.name_any(), m);
                    }
                    Ok(Event::InitDone) => {
                        all = std::mem::take(&mut init);
                        if let Some(tx) = synced_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Event::Apply(m)) => {
                        all.insert(m.name_any(), m);
                    }
                    Ok(Event::Delete(m)) => {
                        all.remove(&m.name_any());
                    }
                    Err(_) => continue,
                }
                if synced_tx.is_some() {
                    continue;
                }
                let ms: Vec<Machine> = all.values().cloned().collect();
                let live_ms = live(&ms);
                let state = MachineState {
                    live: live_ms.len(),
                    running: running(&ms),
                    classes: live_ms.iter().map(|m| class_of(m)).collect(),
                };
                if let Ok(mut v) = s.lock() {
                    v.push(state);
                }
            }
        });
        let _ = tokio::time::timeout(WAIT, synced_rx).await;
        MachineWatch { states, task }
    }

    /// Stops the watch and returns the state after every event, in order.
    pub fn finish(self) -> Vec<MachineState> {
        self.task.abort();
        self.states.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Records every write of `K` objects in the test namespace after the
/// watch's initial list, by resourceVersion, also across a re-list of the
/// watch: "<Kind> <name> created", "… written (rv …)" or "… deleted".
pub struct WriteWatch {
    writes: Arc<std::sync::Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl WriteWatch {
    /// Starts the watch and returns once its initial list is in.
    pub async fn start<K>(env: &TestEnv) -> WriteWatch
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        use futures::StreamExt;
        use kube::runtime::watcher::{self, Event};
        let writes: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let (synced_tx, synced_rx) = oneshot::channel::<()>();
        let api: Api<K> = env.api();
        let w = writes.clone();
        let task = tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let kind = K::kind(&()).to_string();
            let rv = |o: &K| o.meta().resource_version.clone().unwrap_or_default();
            let mut known: HashMap<String, String> = HashMap::new();
            let mut init: HashMap<String, String> = HashMap::new();
            let record = |what: String| {
                if let Ok(mut v) = w.lock() {
                    v.push(what);
                }
            };
            let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::Init) => init.clear(),
                    Ok(Event::InitApply(o)) => {
                        init.insert(o.name_any(), rv(&o));
                    }
                    Ok(Event::InitDone) => {
                        let fresh = std::mem::take(&mut init);
                        if synced_tx.take().map(|tx| tx.send(())).is_none() {
                            for (name, v) in &fresh {
                                match known.get(name) {
                                    None => record(format!("{kind} {name} created")),
                                    Some(old) if old != v => {
                                        record(format!("{kind} {name} written (rv {v})"))
                                    }
                                    Some(_) => {}
                                }
                            }
                            for name in known.keys().filter(|n| !fresh.contains_key(*n)) {
                                record(format!("{kind} {name} deleted"));
                            }
                        }
                        known = fresh;
                    }
                    Ok(Event::Apply(o)) => {
                        let (name, v) = (o.name_any(), rv(&o));
                        match known.get(&name) {
                            None => record(format!("{kind} {name} created")),
                            Some(old) if *old != v => {
                                record(format!("{kind} {name} written (rv {v})"))
                            }
                            Some(_) => continue,
                        }
                        known.insert(name, v);
                    }
                    Ok(Event::Delete(o)) => {
                        record(format!("{kind} {} deleted", o.name_any()));
                        known.remove(&o.name_any());
                    }
                    Err(_) => {}
                }
            }
        });
        let _ = tokio::time::timeout(WAIT, synced_rx).await;
        WriteWatch { writes, task }
    }

    /// Stops the watch and returns the writes it saw, in order.
    pub fn finish(self) -> Vec<String> {
        self.task.abort();
        self.writes.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// The set controllers' resync period in the "nothing happens" tests: each
/// such test watches for longer than this, so a periodic reconcile of every
/// object has run in the window.
pub const SHORT_RESYNC: Duration = Duration::from_secs(2);

/// [`config`] with the short resync period.
pub fn config_short_resync() -> SetsConfig {
    SetsConfig {
        resync_period: SHORT_RESYNC,
        ..config()
    }
}

/// Watches the `K` named `name` for `period` and checks `holds` on its
/// state at the start and after every change; the first state that breaks it
/// is the error (a deletion counts as breaking it).
pub async fn holds_throughout<K>(
    env: &TestEnv,
    name: &str,
    period: Duration,
    holds: impl Fn(&K) -> bool,
) -> Result<(), String>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(env.api::<K>(), cfg).boxed();
    let check = async {
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) if !holds(&o) => {
                    return Err(format!("{name} broke the rule: {o:?}"));
                }
                Ok(Event::Delete(_)) => return Err(format!("{name} was deleted")),
                _ => {}
            }
        }
        Ok(())
    };
    tokio::time::timeout(period, check).await.unwrap_or(Ok(()))
}
