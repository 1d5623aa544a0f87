//! Hot update end to end on the `local` provider (design: hot-update.md):
//! the real `mcm run` binary against the real control plane, an in-process
//! local cloud whose simulated kubelets register Ready Nodes, a
//! MachineDeployment of 20 Running machines, and edits of its class.
//!
//! - tags edited with 30 % injected UpdateMachine faults: every machine
//!   converges (its last-applied annotation and its VM's tags), none is
//!   replaced;
//! - tags edited while every UpdateMachine fails: the calls stay within what
//!   the machines' backoff allows (no fast retry loop), the machines stay
//!   Running with `lastOperation` Update/Failed, and converge once the fault
//!   is gone;
//! - the image edited (the local cloud cannot change it live): every
//!   machine gets the condition and an Event naming `image`; no VM is
//!   created or deleted.
//!
//! The controllers' output goes to `$TMPDIR/mcm-hot-update-<ns>.log`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::local_scenario::{self, LocalScenario};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{
    Machine, MachineClass, MachineDeployment, MachineOperationType, MachinePhase, MachineState,
};
use mcm_core::machine::update::AppliedSpec;
use mcm_provider_local::wire::Instance;
use mcm_testenv::must_eventually;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const REPLICAS: usize = 20;
const CLASS: &str = "hot";
const MCD: &str = "hot";
/// `--min-retry-period` / `--max-retry-period` of the controllers.
const MIN_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(5);
const STEP: Duration = Duration::from_secs(90);

/// The local scenario (`local_scenario`) with the class `hot`.
struct World(LocalScenario);

impl std::ops::Deref for World {
    type Target = LocalScenario;
    fn deref(&self) -> &LocalScenario {
        &self.0
    }
}

fn spec(ns: &str, image: &str, team: &str) -> Value {
    json!({
        "image": image,
        "instanceType": "small",
        "tags": {
            format!("kubernetes.io/cluster/{ns}"): "1",
            "kubernetes.io/role/node": "1",
            "team": team
        }
    })
}

impl World {
    async fn start() -> Option<World> {
        let s = local_scenario::start(
            "hot-update",
            |_| {},
            &["--max-retry-period", &format!("{}s", MAX_RETRY.as_secs())],
        )
        .await?;
        s.create_userdata_secret("hot-secret").await;
        let ns = &s.ns;
        let class: MachineClass = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": CLASS, "namespace": ns},
            "provider": "local",
            "providerSpec": spec(ns, "image-1", "a"),
            "secretRef": {"name": "hot-secret", "namespace": ns}
        }))
        .expect("MachineClass");
        s.env
            .api::<MachineClass>()
            .create(&PostParams::default(), &class)
            .await
            .expect("MachineClass");
        Some(World(s))
    }

    fn machines(&self) -> Api<Machine> {
        self.env.api()
    }

    async fn list(&self) -> Vec<Machine> {
        self.machines()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    async fn instances(&self) -> Vec<Instance> {
        self.admin.instances().await.expect("instances")
    }

    async fn deploy(&self) {
        let mcd: MachineDeployment = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineDeployment",
            "metadata": {"name": MCD, "namespace": self.ns},
            "spec": {
                "replicas": REPLICAS,
                "strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "selector": {"matchLabels": {"name": MCD}},
                "template": {
                    "metadata": {"labels": {"name": MCD}},
                    "spec": {"class": {"kind": "MachineClass", "name": CLASS}}
                }
            }
        }))
        .expect("MachineDeployment");
        self.env
            .api::<MachineDeployment>()
            .create(&PostParams::default(), &mcd)
            .await
            .expect("MachineDeployment");
        must_eventually(STEP, "20 Running machines", || async {
            let list = self.list().await;
            let running = list
                .iter()
                .filter(|m| phase(m) == MachinePhase::Running)
                .count();
            (list.len() == REPLICAS && running == REPLICAS).then_some(())
        })
        .await;
    }

    /// Replaces the class's providerSpec.
    async fn set_spec(&self, spec: &Value) {
        let patch = json!({"providerSpec": spec});
        self.env
            .api::<MachineClass>()
            .patch(CLASS, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch class");
    }

    async fn fault_rate(&self, rate: f64) {
        self.admin
            .patch_tunables(&json!({"update": {"errorRate": rate}}))
            .await
            .expect("faults");
    }

    async fn update_calls(&self) -> u64 {
        let stats = self.admin.stats().await.expect("stats");
        stats.operations.get("update").map_or(0, |s| s.calls)
    }

    /// Waits until every machine records `spec` as last applied and every VM
    /// carries `team`; returns nothing, panics on timeout.
    async fn converged(&self, spec: &Value, team: &str, what: &str) {
        let want = AppliedSpec::of(CLASS, spec).hash;
        must_eventually(STEP, what, || async {
            let list = self.list().await;
            let recorded = list.len() == REPLICAS
                && list.iter().all(|m| {
                    m.annotations()
                        .get(c::LAST_APPLIED_PROVIDER_SPEC_HASH_ANNOTATION)
                        == Some(&want)
                });
            let vms = self.instances().await;
            let tagged = vms.len() == REPLICAS
                && vms
                    .iter()
                    .all(|i| i.tags.get("team").map(String::as_str) == Some(team));
            (recorded && tagged).then_some(())
        })
        .await;
    }
}

fn phase(m: &Machine) -> MachinePhase {
    m.status.clone().unwrap_or_default().current_status.phase
}

fn ids(instances: &[Instance]) -> BTreeSet<String> {
    instances.iter().map(|i| i.id.clone()).collect()
}

/// The most calls one machine can make in `window` when every call fails
/// and each retry waits at least its backoff's floor (`min · 2^(n-1)`,
/// capped at `max`, less the 20 % jitter, never below `min`), plus one for
/// a call already under way when the window opened.
fn most_calls_per_machine(window: Duration) -> u64 {
    let (min, max) = (MIN_RETRY.as_secs_f64(), MAX_RETRY.as_secs_f64());
    let mut t = 0.0;
    let mut calls = 1;
    let mut n = 1u32;
    loop {
        let floor = (min * 2f64.powi(n as i32 - 1)).min(max) * 0.8;
        t += floor.max(min);
        if t > window.as_secs_f64() {
            return calls + 1;
        }
        calls += 1;
        n += 1;
    }
}

#[tokio::test]
async fn class_edits_update_running_machines_in_place_without_replacing_any() {
    let Some(w) = World::start().await else {
        return;
    };
    let started = Instant::now();
    w.deploy().await;
    let original = spec(&w.ns, "image-1", "a");
    w.converged(
        &original,
        "a",
        "every machine records the spec it was created with",
    )
    .await;
    let vms = ids(&w.instances().await);
    assert_eq!(vms.len(), REPLICAS);
    eprintln!("20 Running machines after {:.1?}", started.elapsed());

    // 1. New tags, 30 % of UpdateMachine calls failing.
    let t1 = Instant::now();
    w.fault_rate(0.3).await;
    let tags_b = spec(&w.ns, "image-1", "b");
    w.set_spec(&tags_b).await;
    w.converged(
        &tags_b,
        "b",
        "every machine updated in place despite the faults",
    )
    .await;
    let after = w.instances().await;
    assert_eq!(ids(&after), vms, "the same VMs: none created, none deleted");
    assert!(after.iter().all(|i| i.image == "image-1"));
    let calls = w.update_calls().await;
    eprintln!(
        "tags converged in {:.1?} with {calls} UpdateMachine calls (30 % failing)",
        t1.elapsed()
    );
    assert!(
        calls >= REPLICAS as u64,
        "at least one call per machine: {calls}"
    );
    let list = w.list().await;
    assert!(list.iter().all(|m| phase(m) == MachinePhase::Running));
    // The annotation is written before the status (a crash between the two
    // finishes without a second call), so the status may trail it briefly.
    must_eventually(
        STEP,
        "lastOperation Update/Successful everywhere",
        || async {
            w.list()
                .await
                .iter()
                .all(|m| {
                    let op = m.status.clone().unwrap_or_default().last_operation;
                    op.type_ == MachineOperationType::Update && op.state == MachineState::Successful
                })
                .then_some(())
        },
    )
    .await;

    // 2. New tags while every call fails: bounded by the backoff, machines
    //    stay Running and say why; then the fault goes and they converge.
    w.fault_rate(1.0).await;
    let before = w.update_calls().await;
    let window_start = Instant::now();
    let tags_c = spec(&w.ns, "image-1", "c");
    w.set_spec(&tags_c).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = w.update_calls().await - before;
    let window = window_start.elapsed();
    let bound = most_calls_per_machine(window) * REPLICAS as u64;
    eprintln!("{during} failing calls in {window:.1?} (backoff bound {bound})");
    assert!(during >= REPLICAS as u64, "every machine tried: {during}");
    assert!(
        during <= bound,
        "no fast retry loop: {during} calls in {window:?} exceed the backoff's {bound}"
    );
    let list = w.list().await;
    assert!(
        list.iter().all(|m| phase(m) == MachinePhase::Running),
        "still Running"
    );
    let failed = list
        .iter()
        .filter(|m| {
            let op = m.status.clone().unwrap_or_default().last_operation;
            op.type_ == MachineOperationType::Update
                && op.state == MachineState::Failed
                && op.description.contains("injected fault")
        })
        .count();
    assert!(failed > 0, "the failure is visible in lastOperation");
    w.fault_rate(0.0).await;
    w.converged(
        &tags_c,
        "c",
        "every machine converges once the fault is gone",
    )
    .await;
    assert_eq!(ids(&w.instances().await), vms, "still the same VMs");

    // 3. A new image: the local cloud cannot change it live.
    let image_2 = spec(&w.ns, "image-2", "c");
    w.set_spec(&image_2).await;
    must_eventually(
        STEP,
        "every machine says the image needs a new VM",
        || async {
            let list = w.list().await;
            let all = list.len() == REPLICAS
                && list.iter().all(|m| {
                    m.status
                        .clone()
                        .unwrap_or_default()
                        .conditions
                        .iter()
                        .any(|x| {
                            x.type_ == c::HOT_UPDATE_CONDITION
                                && x.status == "False"
                                && x.message.as_deref().is_some_and(|t| t.contains("image"))
                        })
                });
            all.then_some(())
        },
    )
    .await;
    must_eventually(
        STEP,
        "an UpdateNeedsReplacement Event naming image",
        || async {
            let events: Api<Event> = w.env.api();
            let list = events.list(&ListParams::default()).await.ok()?.items;
            list.iter()
                .any(|e| {
                    e.reason.as_deref() == Some("UpdateNeedsReplacement")
                        && e.note.as_deref().is_some_and(|n| n.contains("image"))
                })
                .then_some(())
        },
    )
    .await;
    // Give a wrong create/delete the time to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = w.instances().await;
    assert_eq!(
        ids(&now),
        vms,
        "no VM created or deleted for the image change"
    );
    assert!(
        now.iter().all(|i| i.image == "image-1"),
        "nothing changed on the VMs"
    );
    let names: BTreeSet<String> = w.list().await.iter().map(|m| m.name_any()).collect();
    assert_eq!(names.len(), REPLICAS, "no machine replaced");
    eprintln!("scenario done in {:.1?}", started.elapsed());
}

#[test]
fn the_backoff_bound_counts_the_floors_of_the_ladder() {
    // 1 s, then 1.6, 3.2, 4, 4 ... (floors): in 10 s: 0, 1, 2.6, 5.8, 9.8 → 5, +1 under way.
    assert_eq!(most_calls_per_machine(Duration::from_secs(10)), 6);
}
