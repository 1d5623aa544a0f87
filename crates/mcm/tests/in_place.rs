//! The InPlaceUpdate strategy end to end on the `local` provider: the real
//! `mcm run` binary against the real control plane, with an in-process local
//! cloud whose simulated kubelets register Ready Nodes and whose simulated
//! node agent applies the new class to an instance in place (design:
//! sets-and-deployments.md and machine.md, "In-place updates").
//!
//! Each test has its own namespace, cloud (zone = namespace) and
//! controllers; their output goes to `$TMPDIR/mcm-in-place-<ns>.log`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::local_scenario::{self, LocalScenario};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachineDeployment, MachinePhase, MachineSet};
use mcm_provider_local::tunables::InPlaceUpdateMode;
use mcm_provider_local::wire::Instance;
use mcm_testenv::{must_eventually, must_hold_for};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `--max-retry-period` of the controllers (the longest requeue of a failed item).
const MAX_RETRY_FLAG: &str = "5s";
const MAX_RETRY: Duration = Duration::from_secs(5);

const STEP: Duration = Duration::from_secs(60);
const MCD: &str = "ipu";

/// One test's world: namespace, cloud, controllers.
/// The local scenario (`local_scenario`) with the classes below.
struct World(LocalScenario);

impl std::ops::Deref for World {
    type Target = LocalScenario;
    fn deref(&self) -> &LocalScenario {
        &self.0
    }
}

fn class(ns: &str, name: &str, image: &str, instance_type: &str) -> MachineClass {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": ns},
        "provider": "local",
        "providerSpec": {
            "image": image,
            "instanceType": instance_type,
            "tags": {format!("kubernetes.io/cluster/{ns}"): "1", "kubernetes.io/role/node": "1"}
        },
        "secretRef": {"name": "ipu-secret", "namespace": ns}
    }))
    .expect("MachineClass")
}

fn deployment(ns: &str, replicas: i32, orchestration: &str) -> MachineDeployment {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": MCD, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "strategy": {
                "type": "InPlaceUpdate",
                "inPlaceUpdate": {
                    "maxSurge": 0,
                    "maxUnavailable": 1,
                    "orchestrationType": orchestration
                }
            },
            "selector": {"matchLabels": {"name": MCD}},
            "template": {
                "metadata": {"labels": {"name": MCD}},
                "spec": {"class": {"kind": "MachineClass", "name": "ipu-v1"}}
            }
        }
    }))
    .expect("MachineDeployment")
}

impl World {
    /// A namespace with classes `ipu-v1` (image-v1, small) and `ipu-v2`
    /// (image-v2, large), a local cloud and the controllers.
    async fn start(test: &str, agent: InPlaceUpdateMode, extra: &[&str]) -> Option<World> {
        let mut args = vec!["--max-retry-period", MAX_RETRY_FLAG];
        args.extend_from_slice(extra);
        let s = local_scenario::start(
            test,
            |config| {
                config.tunables.in_place_update.mode = agent;
                config.tunables.in_place_update.fail_reason =
                    "image-v2 does not fit the disk".into();
            },
            &args,
        )
        .await?;
        s.create_userdata_secret("ipu-secret").await;
        let (env, ns, pp) = (&s.env, &s.ns, PostParams::default());
        let classes: Api<MachineClass> = env.api();
        for (name, image, ty) in [
            ("ipu-v1", "image-v1", "small"),
            ("ipu-v2", "image-v2", "large"),
        ] {
            classes
                .create(&pp, &class(ns, name, image, ty))
                .await
                .expect("MachineClass");
        }
        Some(World(s))
    }

    fn machines(&self) -> Api<Machine> {
        self.env.api()
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.env.client.clone())
    }

    async fn instances(&self) -> Vec<Instance> {
        self.admin.instances().await.expect("instances")
    }

    /// Creates the deployment and waits for `replicas` Running machines with Ready Nodes.
    async fn deploy(&self, replicas: i32, orchestration: &str) -> Vec<Instance> {
        let mcds: Api<MachineDeployment> = self.env.api();
        mcds.create(
            &PostParams::default(),
            &deployment(&self.ns, replicas, orchestration),
        )
        .await
        .expect("MachineDeployment");
        let want = usize::try_from(replicas).unwrap();
        must_eventually(STEP, "all machines Running", || async {
            let list = self
                .machines()
                .list(&ListParams::default())
                .await
                .ok()?
                .items;
            let running = list
                .iter()
                .filter(|m| phase(m) == MachinePhase::Running)
                .count();
            (list.len() == want && running == want).then_some(())
        })
        .await;
        let instances = self.instances().await;
        assert_eq!(instances.len(), want, "one VM per machine");
        instances
    }

    /// Switches the deployment to class `ipu-v2`: a rollout.
    async fn change_class(&self) {
        let mcds: Api<MachineDeployment> = self.env.api();
        let patch = json!({"spec": {"template": {"spec": {"class": {"name": "ipu-v2"}}}}});
        mcds.patch(MCD, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch class");
    }

    /// The name of the set whose template names `class`.
    async fn set_of_class(&self, class: &str) -> Option<MachineSet> {
        let sets: Api<MachineSet> = self.env.api();
        sets.list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|s| s.spec.template.spec.class.name == class)
    }

    async fn node(&self, name: &str) -> Option<Node> {
        self.nodes().get_opt(name).await.ok()?
    }
}

fn phase(m: &Machine) -> MachinePhase {
    m.status.clone().unwrap_or_default().current_status.phase
}

fn owner(m: &Machine) -> Option<String> {
    m.owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.name.clone())
}

fn by_id(instances: &[Instance]) -> BTreeMap<String, Instance> {
    instances
        .iter()
        .map(|i| (i.id.clone(), i.clone()))
        .collect()
}

fn in_place_reason(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|cd| cd.type_ == c::NODE_IN_PLACE_UPDATE_CONDITION)
        .and_then(|cd| cd.reason.clone())
}

#[tokio::test]
async fn an_in_place_rollout_updates_every_machine_without_creating_a_vm() {
    let Some(w) = World::start("in-place-auto", InPlaceUpdateMode::Apply, &[]).await else {
        return;
    };
    let before = by_id(&w.deploy(2, "Auto").await);
    let names: Vec<String> = w
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .collect();
    let started = Instant::now();
    w.change_class().await;
    let new_set = must_eventually(STEP, "the new MachineSet", || w.set_of_class("ipu-v2")).await;
    let new_name = new_set.name_any();
    let most_vms = std::sync::atomic::AtomicUsize::new(0);
    must_eventually(
        STEP,
        "every machine updated in place and in the new set",
        || async {
            let vms = w.instances().await;
            most_vms.fetch_max(vms.len(), std::sync::atomic::Ordering::Relaxed);
            let list = w.machines().list(&ListParams::default()).await.ok()?.items;
            let done = list.len() == 2
                && list.iter().all(|m| {
                    owner(m).as_deref() == Some(new_name.as_str())
                        && phase(m) == MachinePhase::Running
                })
                && vms
                    .iter()
                    .all(|i| i.image == "image-v2" && i.in_place_updates == 1);
            done.then_some(())
        },
    )
    .await;
    eprintln!(
        "in-place rollout of 2 machines: {:.1?} ({:.1?} per machine)",
        started.elapsed(),
        started.elapsed() / 2
    );
    let after = by_id(&w.instances().await);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "the same VMs, none created or deleted"
    );
    let most_vms = most_vms.into_inner();
    assert!(
        most_vms <= 2,
        "never more than 2 VMs during the rollout, saw {most_vms}"
    );
    for i in after.values() {
        assert_eq!(
            i.instance_type, "large",
            "the new class's type, in place: {i:?}"
        );
    }
    let now: Vec<String> = w
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert_eq!(now, names, "the same Machine objects");
    let old = must_eventually(
        STEP,
        "the old set emptied by moving its machines",
        || async {
            w.set_of_class("ipu-v1")
                .await
                .filter(|s| s.spec.replicas == 0)
        },
    )
    .await;
    assert_eq!(
        old.labels()
            .get(c::SCALE_UP_DISABLED_LABEL)
            .map(String::as_str),
        Some("true")
    );
    must_eventually(
        STEP,
        "the nodes lose the protocol labels and are schedulable",
        || async {
            for n in &names {
                let node = w.node(n).await?;
                let l = node.labels();
                let clean = !l.contains_key(c::NODE_CANDIDATE_FOR_UPDATE_LABEL)
                    && !l.contains_key(c::NODE_SELECTED_FOR_UPDATE_LABEL)
                    && !l.contains_key(c::NODE_UPDATE_RESULT_LABEL)
                    && node.spec.as_ref()?.unschedulable != Some(true)
                    && !node
                        .spec
                        .as_ref()?
                        .taints
                        .iter()
                        .flatten()
                        .any(|t| t.key == c::PREFER_NO_SCHEDULE_KEY)
                    && in_place_reason(&node).as_deref() == Some(c::IN_PLACE_UPDATE_SUCCESSFUL);
                if !clean {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

#[tokio::test]
async fn manual_orchestration_waits_for_the_user_to_select_machines() {
    let Some(w) = World::start("in-place-manual", InPlaceUpdateMode::Apply, &[]).await else {
        return;
    };
    w.deploy(2, "Manual").await;
    w.change_class().await;
    let names: Vec<String> = w
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| m.name_any())
        .collect();
    must_eventually(STEP, "both nodes are candidates for update", || async {
        for n in &names {
            let node = w.node(n).await?;
            if !node
                .labels()
                .contains_key(c::NODE_CANDIDATE_FOR_UPDATE_LABEL)
                || in_place_reason(&node).as_deref() != Some(c::IN_PLACE_CANDIDATE_FOR_UPDATE)
            {
                return None;
            }
        }
        Some(())
    })
    .await;
    // The controller selects nothing on its own, through its longest retry
    // period and more.
    must_hold_for(
        MAX_RETRY + Duration::from_secs(3),
        "no node is selected for update without the user",
        || async {
            for n in &names {
                let node = w.node(n).await.expect("node");
                if node
                    .labels()
                    .contains_key(c::NODE_SELECTED_FOR_UPDATE_LABEL)
                {
                    return false;
                }
            }
            true
        },
    )
    .await;
    assert!(w.instances().await.iter().all(|i| i.image == "image-v1"));
    // The user selects the first machine.
    let chosen = &names[0];
    let patch = json!({"metadata": {"labels": {c::NODE_SELECTED_FOR_UPDATE_LABEL: "true"}}});
    w.nodes()
        .patch(chosen, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("select");
    let new_name = w.set_of_class("ipu-v2").await.expect("new set").name_any();
    must_eventually(STEP, "the chosen machine is updated and moved", || async {
        let m = w.machines().get(chosen).await.ok()?;
        (owner(&m).as_deref() == Some(new_name.as_str()) && phase(&m) == MachinePhase::Running)
            .then_some(())
    })
    .await;
    let vms = w.instances().await;
    assert_eq!(vms.len(), 2);
    let updated = vms.iter().filter(|i| i.image == "image-v2").count();
    assert_eq!(updated, 1, "only the selected machine was updated: {vms:?}");
    let other = w.machines().get(&names[1]).await.expect("other machine");
    assert_ne!(owner(&other).as_deref(), Some(new_name.as_str()));
    // Its Node, still in the old set, keeps the rollout's prefer-no-schedule taint.
    let node = w.node(&names[1]).await.expect("node");
    assert!(
        node.spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == c::PREFER_NO_SCHEDULE_KEY && t.effect == "PreferNoSchedule"),
        "old set's node tainted prefer-no-schedule"
    );
}

#[tokio::test]
async fn a_failed_in_place_update_marks_the_machine_in_place_update_failed() {
    let Some(w) = World::start("in-place-failed", InPlaceUpdateMode::Fail, &[]).await else {
        return;
    };
    w.deploy(1, "Auto").await;
    w.change_class().await;
    let m = must_eventually(STEP, "the machine is InPlaceUpdateFailed", || async {
        let list = w.machines().list(&ListParams::default()).await.ok()?.items;
        list.into_iter()
            .find(|m| phase(m) == MachinePhase::InPlaceUpdateFailed)
    })
    .await;
    let op = m.status.clone().unwrap_or_default().last_operation;
    assert!(
        op.description.contains("image-v2 does not fit the disk"),
        "the agent's reason is in the status: {}",
        op.description
    );
    must_eventually(STEP, "the node's condition says UpdateFailed", || async {
        let node = w.node(&m.name_any()).await?;
        (in_place_reason(&node).as_deref() == Some(c::IN_PLACE_UPDATE_FAILED)).then_some(())
    })
    .await;
    let vms = w.instances().await;
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].image, "image-v1", "nothing was applied");
    let old = w.set_of_class("ipu-v1").await.expect("old set");
    assert_eq!(
        owner(&m).as_deref(),
        Some(old.name_any().as_str()),
        "not moved"
    );
}

#[tokio::test]
async fn the_in_place_timeout_fails_a_stuck_update() {
    let Some(w) = World::start(
        "in-place-timeout",
        InPlaceUpdateMode::Hang,
        &["--machine-inplace-update-timeout", "10s"],
    )
    .await
    else {
        return;
    };
    w.deploy(1, "Auto").await;
    w.change_class().await;
    let updating = must_eventually(STEP, "the machine is InPlaceUpdating", || async {
        let list = w.machines().list(&ListParams::default()).await.ok()?.items;
        list.into_iter()
            .find(|m| phase(m) == MachinePhase::InPlaceUpdating)
    })
    .await;
    let m = must_eventually(STEP, "the stuck update times out", || async {
        let m = w.machines().get(&updating.name_any()).await.ok()?;
        (phase(&m) == MachinePhase::InPlaceUpdateFailed).then_some(m)
    })
    .await;
    let op = m.status.clone().unwrap_or_default().last_operation;
    assert!(
        op.description.contains("failed to in-place update in"),
        "{}",
        op.description
    );
}
