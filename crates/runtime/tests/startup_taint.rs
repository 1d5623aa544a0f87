//! The startup taint against the real control plane (design:
//! startup-taint.md), on the `local` provider: an in-process local cloud
//! whose simulated kubelets register the Nodes with
//! `node.machine.sapcloud.io/not-initialized:NoSchedule`, and the Machine
//! controller in process.
//!
//! The shared control plane runs no kube-scheduler, so "no pod can be bound
//! before initialization and label sync" is asserted on the Node's watch
//! history: every version of the Node without the taint already carries the
//! node template's labels, and the taint is still there after
//! InitializeMachine has failed for a while; it goes only after it succeeds.
//!
//! Nodes are cluster-wide and other tests share the control plane; every Node
//! here belongs to a Machine of this test's namespace.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Taint};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachinePhase};
use mcm_testenv::must_eventually;
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

use crate::local_world::{World, SHORT_RETRY, WAIT};

const KEY: &str = c::STARTUP_TAINT_KEY;

/// The local world whose simulated kubelets register Nodes with
/// `register_with_taints` (`None`: the default, the startup taint), and the
/// MachineClass `local-class`.
async fn start(test: &str, register_with_taints: Option<Vec<Taint>>) -> Option<World> {
    let w = World::start(test, |cloud| {
        if let Some(t) = register_with_taints {
            cloud.register_with_taints = t;
        }
    })
    .await?;
    let ns = &w.env.namespace;
    let class: MachineClass = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "local-class"},
        "provider": "local",
        "providerSpec": {
            "image": "local-ubuntu", "instanceType": "small",
            "tags": {format!("kubernetes.io/cluster/{ns}"): "1", "kubernetes.io/role/node": "1"}
        },
        "secretRef": {"name": "creds", "namespace": ns},
    }))
    .expect("class");
    w.env
        .api::<MachineClass>()
        .create(&PostParams::default(), &class)
        .await
        .expect("create class");
    Some(w)
}

impl World {
    /// A machine of deployment `pool` whose node template labels its Node `pool=<pool>`.
    async fn create_pool_machine(&self, name: &str, pool: &str) {
        let m: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "labels": {"name": pool}},
            "spec": {
                "class": {"kind": "MachineClass", "name": "local-class"},
                "nodeTemplate": {"metadata": {"labels": {"pool": pool}}}
            },
        }))
        .expect("machine");
        self.env
            .api::<Machine>()
            .create(&PostParams::default(), &m)
            .await
            .expect("create machine");
    }

    async fn machine(&self, name: &str) -> Option<Machine> {
        self.env.api::<Machine>().get_opt(name).await.ok()?
    }

    async fn running(&self, name: &str) {
        must_eventually(WAIT, &format!("machine {name} Running"), || async {
            let m = self.machine(name).await?;
            (phase(&m) == MachinePhase::Running).then_some(())
        })
        .await;
    }

    async fn warning_event(&self, machine: &str, reason: &str) -> K8sEvent {
        let events: Api<K8sEvent> = self.env.api();
        must_eventually(WAIT, &format!("a {reason} event on {machine}"), || async {
            let list = events.list(&ListParams::default()).await.ok()?.items;
            list.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(machine)
            })
        })
        .await
    }

    fn scrape(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("encode");
        text
    }
}

fn phase(m: &Machine) -> MachinePhase {
    m.status
        .as_ref()
        .map(|s| s.current_status.phase.clone())
        .unwrap_or_default()
}

fn description(m: &Machine) -> String {
    m.status
        .as_ref()
        .map(|s| s.last_operation.description.clone())
        .unwrap_or_default()
}

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == KEY && t.effect == "NoSchedule"))
}

fn label(n: &Node, k: &str) -> Option<String> {
    n.metadata.labels.as_ref()?.get(k).cloned()
}

/// Records every version of Node `name` the API server sends.
fn record_node(nodes: Api<Node>, name: &str) -> (Arc<Mutex<Vec<Node>>>, JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(nodes, cfg).boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev {
                sink.lock().expect("lock").push(n);
            }
        }
    });
    (seen, task)
}

#[tokio::test]
async fn no_node_version_is_schedulable_before_initialization_and_label_sync_completed() {
    let Some(w) = start("startup-taint-order", None).await else {
        return;
    };
    // InitializeMachine fails until the fault is lifted.
    w.admin
        .patch_tunables(&json!({"failInitialization": {"global": 100000}}))
        .await
        .expect("inject init faults");
    let m = w.unique("m-order");
    let (history, recorder) = record_node(w.nodes(), &m);
    w.create_pool_machine(&m, "pool-a").await;

    // The Node registers with the taint; node sync puts the template's labels
    // on it while InitializeMachine keeps failing.
    let nodes = w.nodes();
    must_eventually(
        WAIT,
        "the node labelled while initialization fails",
        || async {
            let n = nodes.get_opt(&m).await.ok()??;
            (label(&n, "pool").as_deref() == Some("pool-a")).then_some(())
        },
    )
    .await;
    let failing = must_eventually(WAIT, "a failed InitializeMachine recorded", || async {
        let mm = w.machine(&m).await?;
        description(&mm)
            .ends_with(c::INSTANCE_INITIALIZATION)
            .then_some(mm)
    })
    .await;
    // Several retry periods of failing initialization: still tainted, not Running.
    for _ in 0..3 {
        tokio::time::sleep(SHORT_RETRY * 4).await;
        let n = nodes.get(&m).await.expect("node");
        assert!(
            tainted(&n),
            "the taint must stay while InitializeMachine fails"
        );
        let mm = w.machine(&m).await.expect("machine");
        assert_ne!(phase(&mm), MachinePhase::Running, "{}", description(&mm));
    }
    assert_ne!(phase(&failing), MachinePhase::Running);

    // Initialization succeeds: the taint goes, the machine runs.
    w.admin
        .patch_tunables(&json!({"failInitialization": {"global": 0}}))
        .await
        .expect("lift init faults");
    w.running(&m).await;
    let n = must_eventually(WAIT, "the startup taint removed", || async {
        nodes.get_opt(&m).await.ok()?.filter(|n| !tainted(n))
    })
    .await;
    assert_eq!(label(&n, "pool").as_deref(), Some("pool-a"));
    recorder.abort();

    // The watch history: tainted from registration; the first untainted
    // version already carries the template's labels and the machine-name label.
    let versions = history.lock().expect("lock").clone();
    assert!(!versions.is_empty(), "the node's versions were recorded");
    assert!(tainted(&versions[0]), "the node registered with the taint");
    let first_free = versions
        .iter()
        .position(|n| !tainted(n))
        .expect("an untainted version was seen");
    let free = &versions[first_free];
    assert_eq!(label(free, "pool").as_deref(), Some("pool-a"));
    assert_eq!(
        label(free, c::MACHINE_NAME_NODE_LABEL).as_deref(),
        Some(m.as_str())
    );
    assert!(
        versions[..first_free].iter().all(tainted),
        "every earlier version is tainted"
    );
    // No version was untainted while InitializeMachine failed: the node was
    // checked tainted after failures were recorded, and the history has one
    // transition from tainted to untainted.
    assert!(
        versions[first_free..].iter().all(|n| !tainted(n)),
        "the taint never came back"
    );

    // The time to schedulable is observed per MachineDeployment.
    let text = w.scrape();
    let count = format!(
        "mcm_machine_startup_taint_removal_seconds_count{{namespace=\"{}\",machine_deployment=\"pool-a\"}} 1",
        w.env.namespace
    );
    assert!(text.contains(&count), "{count} not in:\n{text}");
    w.stop().await;
}

#[tokio::test]
async fn an_initialized_machines_startup_taint_goes_in_the_node_template_write() {
    let Some(w) = start("startup-taint-one-write", None).await else {
        return;
    };
    let m = w.unique("m-one");
    let (history, recorder) = record_node(w.nodes(), &m);
    w.create_pool_machine(&m, "pool-c").await;
    w.running(&m).await;
    let nodes = w.nodes();
    must_eventually(WAIT, "the untainted, labelled node", || async {
        let n = nodes.get_opt(&m).await.ok()??;
        (!tainted(&n) && label(&n, "pool").is_some()).then_some(())
    })
    .await;
    recorder.abort();
    // InitializeMachine succeeded before the Node registered: no version of
    // the Node carries the template's label and the taint together, since
    // one write put the label on and took the taint off.
    let versions = history.lock().expect("lock").clone();
    assert!(tainted(&versions[0]), "the node registered with the taint");
    assert!(
        versions
            .iter()
            .all(|n| !(tainted(n) && label(n, "pool").is_some())),
        "a labelled version still carried the taint: two writes"
    );
    // One Event: the Running phase change tells the removal too.
    // The Event is posted after the status write: wait for the Running one.
    let events: Api<K8sEvent> = w.env.api();
    let mine: Vec<K8sEvent> = must_eventually(WAIT, "a Running Event on the machine", || async {
        let mine: Vec<K8sEvent> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(m.as_str()))
            .collect();
        mine.iter()
            .any(|e| e.reason.as_deref() == Some("Running"))
            .then_some(mine)
    })
    .await;
    let running = mine
        .iter()
        .find(|e| e.reason.as_deref() == Some("Running"))
        .expect("a Running event");
    let note = running.note.clone().unwrap_or_default();
    assert!(note.contains("Removed the startup taint"), "{note}");
    assert!(
        !mine
            .iter()
            .any(|e| e.reason.as_deref() == Some("StartupTaintRemoved")),
        "no separate Event for the removal"
    );
    let text = w.scrape();
    assert!(text.contains("mcm_machine_startup_taint_removal_seconds_count{"));
    w.stop().await;
}

#[tokio::test]
async fn a_node_registered_without_the_startup_taint_runs_as_before() {
    let Some(w) = start("startup-taint-none", Some(vec![])).await else {
        return;
    };
    let m = w.unique("m-plain");
    w.create_pool_machine(&m, "pool-b").await;
    w.running(&m).await;
    let nodes = w.nodes();
    let n = must_eventually(WAIT, "the template's label on the node", || async {
        let n = nodes.get_opt(&m).await.ok()??;
        (label(&n, "pool").as_deref() == Some("pool-b")).then_some(n)
    })
    .await;
    assert!(!tainted(&n));
    let mm = w.machine(&m).await.expect("machine");
    assert!(
        description(&mm).contains("successfully joined"),
        "{}",
        description(&mm)
    );
    // Nothing removed, nothing observed.
    assert!(!w
        .scrape()
        .contains("mcm_machine_startup_taint_removal_seconds_count{"));
    w.stop().await;
}

/// A policy refusing (403 Forbidden) every Node update that drops the
/// startup taint from Nodes labelled `pool=<pool>`.
async fn refuse_taint_removal(
    client: &kube::Client,
    name: &str,
    pool: &str,
) -> (
    Api<ValidatingAdmissionPolicy>,
    Api<ValidatingAdmissionPolicyBinding>,
) {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let has = |o: &str| {
        format!("has({o}.spec.taints) && {o}.spec.taints.exists(t, t.key == '{KEY}' && t.effect == 'NoSchedule')")
    };
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["nodes"]
            }]},
            "validations": [{
                "expression": format!("!({}) || ({})", has("oldObject"), has("object")),
                "message": "test: the startup taint may not be removed",
                "reason": "Forbidden"
            }]
        }
    }))
    .expect("policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"objectSelector": {"matchLabels": {"pool": pool}}}
        }
    }))
    .expect("binding");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create policy");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
    (policies, bindings)
}

#[tokio::test]
async fn a_refused_startup_taint_removal_is_retried_with_backoff_and_reported() {
    let Some(w) = start("startup-taint-refused", None).await else {
        return;
    };
    let m = w.unique("m-refused");
    let pool = w.unique("pool-c");
    let (policies, bindings) = refuse_taint_removal(&w.env.client, &m, &pool).await;
    // Wait until the API server enforces the policy: a dry-run removal on a
    // probe Node of that pool is refused.
    let nodes = w.nodes();
    let probe = format!("{m}-probe");
    let probe_node: Node = serde_json::from_value(json!({
        "metadata": {"name": probe, "labels": {"pool": pool}},
        "spec": {"taints": [{"key": KEY, "effect": "NoSchedule"}]}
    }))
    .expect("probe");
    nodes
        .create(&PostParams::default(), &probe_node)
        .await
        .expect("probe node");
    must_eventually(WAIT, "the policy enforced", || async {
        let dry = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        let r = nodes
            .patch(&probe, &dry, &Patch::Merge(json!({"spec": {"taints": []}})))
            .await;
        matches!(r, Err(kube::Error::Api(s)) if s.code == 403).then_some(())
    })
    .await;
    let _ = nodes.delete(&probe, &DeleteParams::default()).await;

    w.create_pool_machine(&m, &pool).await;
    // Reported: a Warning Event naming the error, the reason in status.
    let ev = w.warning_event(&m, "StartupTaintRemovalFailed").await;
    assert!(
        ev.note.as_deref().unwrap_or_default().contains(KEY),
        "{:?}",
        ev.note
    );
    let held = must_eventually(WAIT, "the refusal in the machine's status", || async {
        let mm = w.machine(&m).await?;
        description(&mm)
            .contains("removing it failed (Forbidden)")
            .then_some(mm)
    })
    .await;
    assert_eq!(
        phase(&held),
        MachinePhase::Pending,
        "not Running while tainted"
    );
    // Still refused and still tainted after several retry periods, retried
    // with backoff: over 20 short retry periods a fixed-period retry would
    // try 20 times; the backoff (300 ms doubling, capped at 3 s) about 6.
    tokio::time::sleep(SHORT_RETRY * 20).await;
    assert!(tainted(&nodes.get(&m).await.expect("node")));
    assert_ne!(
        phase(&w.machine(&m).await.expect("machine")),
        MachinePhase::Running
    );
    let core_events: Api<CoreEvent> = w.env.api();
    let attempts: i32 = core_events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("StartupTaintRemovalFailed")
                && e.involved_object.name.as_deref() == Some(m.as_str())
        })
        .map(|e| e.count.unwrap_or(1))
        .sum();
    eprintln!("removal attempts in {:?}: {attempts}", SHORT_RETRY * 20);
    assert!(
        (2..=12).contains(&attempts),
        "retried with backoff, not in a fast loop: {attempts} attempts"
    );
    // Once the API server allows it, the retry removes the taint.
    bindings
        .delete(&m, &DeleteParams::default())
        .await
        .expect("delete binding");
    let _ = policies.delete(&m, &DeleteParams::default()).await;
    w.running(&m).await;
    assert!(!tainted(&nodes.get(&m).await.expect("node")));
    w.stop().await;
}
