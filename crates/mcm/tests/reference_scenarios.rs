//! The reference's integration scenarios (its `pkg/test/integration/common`),
//! end to end on the `local` provider: the real `mcm run` binary
//! against the real control plane, with an in-process local cloud whose
//! simulated kubelets register Ready Nodes.
//!
//! Nodes are cluster-wide and other tests share the control plane, so this
//! test counts only the Nodes of its own cloud: the cloud's zone is the test
//! namespace, and every instance's provider ID is `local:///<zone>/<id>`.
//!
//! The controllers' output goes to `$TMPDIR/mcm-reference-scenarios-<ns>.log`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_provider_local::{server, AdminClient, Tunables};
use mcm_testenv::{must_eventually, must_hold_for, TestEnv};
use serde_json::json;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bound of every step (the reference waits up to 300 s).
const STEP: Duration = Duration::from_secs(180);
const FREEZE_REASON: &str = "FrozeMachineSet";
const UNFREEZE_REASON: &str = "UnfrozeMachineSet";
const MCD: &str = "test-machine-deployment";

use mcm_testenv::{free_port, KillOnDrop, TempDir};

/// Nodes of this test's cloud: (all, Ready).
async fn node_counts(nodes: &Api<Node>, provider_prefix: &str) -> Option<(usize, usize)> {
    let list = nodes.list(&ListParams::default()).await.ok()?.items;
    let ours: Vec<&Node> = list
        .iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| p.starts_with(provider_prefix))
        })
        .collect();
    let ready = ours
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    Some((ours.len(), ready))
}

/// Occurrences of MachineSet events with `reason` in the namespace (a repeated
/// event is one object with a series count).
async fn event_count(events: &Api<Event>, reason: &str) -> Option<i32> {
    let list = events.list(&ListParams::default()).await.ok()?.items;
    Some(
        list.iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| {
                e.regarding
                    .as_ref()
                    .is_some_and(|r| r.kind.as_deref() == Some("MachineSet"))
            })
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum(),
    )
}

fn class(ns: &str, name: &str, cluster_tag: &str) -> MachineClass {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": ns},
        "provider": "local",
        "providerSpec": {
            "image": "local-ubuntu",
            "instanceType": "small",
            "srcAndDstChecksEnabled": false,
            "ipv6AddressCount": 1,
            "ipv6PrefixCount": 1,
            "tags": {cluster_tag: "1", "kubernetes.io/role/node": "1"}
        },
        "secretRef": {"name": "test-mc-secret", "namespace": ns}
    }))
    .expect("MachineClass")
}

fn deployment(ns: &str, replicas: i32) -> MachineDeployment {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": MCD, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": 500,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1}
            },
            "selector": {"matchLabels": {"test-label": "test-label"}},
            "template": {
                "metadata": {"labels": {"test-label": "test-label"}},
                "spec": {
                    "class": {"kind": "MachineClass", "name": "test-mc-v1"},
                    "nodeTemplate": {"metadata": {"labels": {
                        "worker.gardener.cloud/gardener-node-agent-secret-name": "test-gna-secret"
                    }}}
                }
            }
        }
    }))
    .expect("MachineDeployment")
}

/// Logs and records how long a step took.
fn step_done(timings: &mut Vec<(String, Duration)>, what: &str, started: Instant) {
    let took = started.elapsed();
    eprintln!("step done in {took:>8.1?}: {what}");
    timings.push((what.to_string(), took));
}

#[tokio::test]
async fn reference_integration_scenarios_create_scale_roll_and_delete_without_orphans() {
    let Some(env) = TestEnv::new("reference-scenarios").await else {
        return;
    };
    let ns = env.namespace.clone();
    let kubeconfig = mcm_testenv::kubeconfig_path();
    let kubeconfig_str = kubeconfig.to_string_lossy().to_string();
    let cluster_tag = format!("kubernetes.io/cluster/{ns}");
    // The cloud's zone is the namespace: the provider IDs of this test's instances are unique.
    let provider_prefix = format!("local:///{ns}/");

    // The local cloud, in process, with simulated kubelets on the same cluster.
    let dir = TempDir(std::env::temp_dir().join(format!("mcm-reference-scenarios-{ns}")));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let mut config = server::CloudConfig::new(dir.0.join("local-cloud.redb"));
    config.zone = ns.clone();
    config.target_kubeconfig = Some(kubeconfig.clone());
    config.heartbeat_interval = Duration::from_secs(2);
    config.tunables = Tunables::unlimited();
    config.tunables.boot_delay_ms = 1_000;
    // A VM takes a moment to go, as in a real cloud: step 7's freeze exists
    // only while the machines being deleted still count. Without it a whole
    // deletion completes in one reconcile, within milliseconds, and whether
    // the safety loop sees the overshoot before the machines are gone is luck.
    config.tunables.delete.latency_ms = 1_500;
    let (addr, cloud) = server::spawn(config).await.expect("local cloud");
    let url = format!("http://{addr}");
    let admin = AdminClient::new(&url).expect("admin client");

    // The controllers binary, watching this test's namespace only.
    let log_path = std::env::temp_dir().join(format!("mcm-reference-scenarios-{ns}.log"));
    let log = std::fs::File::create(&log_path).expect("log file");
    eprintln!("controllers' log: {}", log_path.display());
    let controllers = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args(["run", "--control-kubeconfig", &kubeconfig_str])
            .args(["--target-kubeconfig", &kubeconfig_str])
            .args(["--namespace", &ns, "--local-cloud-url", &url])
            .args(["--leader-elect=false", "--address", "127.0.0.1"])
            .args(["--port", &free_port().to_string()])
            .args(["--min-retry-period", "1s", "--max-retry-period", "5s"])
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn mcm run"),
    );

    let client = env.client.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let machines: Api<Machine> = env.api();
    let sets: Api<MachineSet> = env.api();
    let mcds: Api<MachineDeployment> = env.api();
    let classes: Api<MachineClass> = env.api();
    let events: Api<Event> = env.api();
    let pp = PostParams::default();
    let mut timings: Vec<(String, Duration)> = Vec::new();

    // Setup: the userData Secret and the classes test-mc-v1 / test-mc-v2.
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "test-mc-secret", "namespace": ns},
        "stringData": {"userData": "#cloud-config\nruncmd:\n- echo reference-scenarios\n"}
    }))
    .expect("Secret");
    env.api::<Secret>()
        .create(&pp, &secret)
        .await
        .expect("create Secret");
    for name in ["test-mc-v1", "test-mc-v2"] {
        classes
            .create(&pp, &class(&ns, name, &cluster_tag))
            .await
            .expect("create MachineClass");
    }
    let (initial, initial_ready) = node_counts(&nodes, &provider_prefix)
        .await
        .expect("list nodes");
    assert_eq!(initial, initial_ready, "all of this test's nodes are Ready");
    let nodes_are = |want: usize, ready: bool| {
        let nodes = nodes.clone();
        let prefix = provider_prefix.clone();
        move || {
            let nodes = nodes.clone();
            let prefix = prefix.clone();
            async move {
                let (all, r) = node_counts(&nodes, &prefix).await?;
                (all == want && (!ready || r == want)).then_some(())
            }
        }
    };

    // 1. Machine test-machine (class v1): one more node, Ready.
    let t = Instant::now();
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "test-machine", "namespace": ns},
        "spec": {
            "class": {"kind": "MachineClass", "name": "test-mc-v1"},
            "nodeTemplate": {"metadata": {"labels": {
                "worker.gardener.cloud/gardener-node-agent-secret-name": "test-gna-secret"
            }}}
        }
    }))
    .expect("Machine");
    machines
        .create(&pp, &machine)
        .await
        .expect("create Machine");
    must_eventually(
        STEP,
        "1: test-machine's node joins and is Ready",
        nodes_are(initial + 1, true),
    )
    .await;
    step_done(&mut timings, "1 machine created, +1 Ready node", t);

    // 2. Deleting it removes the Machine object and its node.
    let t = Instant::now();
    machines
        .delete("test-machine", &DeleteParams::default())
        .await
        .expect("delete Machine");
    must_eventually(STEP, "2: test-machine is gone", || async {
        machines
            .get_opt("test-machine")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    must_eventually(
        STEP,
        "2: node count back to the initial one",
        nodes_are(initial, false),
    )
    .await;
    step_done(&mut timings, "2 machine deleted, nodes back to initial", t);

    // 3. Deleting a machine that does not exist fails (404) and changes nothing.
    let t = Instant::now();
    match machines
        .delete("test-machine-dummy", &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        other => panic!("3: deleting a missing machine must answer 404, got {other:?}"),
    }
    assert_eq!(
        node_counts(&nodes, &provider_prefix).await.map(|c| c.0),
        Some(initial),
        "3: the node count is unchanged"
    );
    step_done(&mut timings, "3 missing machine: 404, nothing changed", t);

    // 4. MachineDeployment with 0 replicas: exactly one MachineSet; scaled to 1:
    //    Available + Progressing conditions, one available machine, one more node.
    let t = Instant::now();
    mcds.create(&pp, &deployment(&ns, 0))
        .await
        .expect("create MachineDeployment");
    must_eventually(STEP, "4: exactly one MachineSet", || async {
        (sets.list(&ListParams::default()).await.ok()?.items.len() == 1).then_some(())
    })
    .await;
    // Give a second set the chance to appear (there must never be one): the
    // deployment's status says the controller has seen this generation, and
    // no second set appears for two of the shortest retry periods
    // (`--min-retry-period 1s`) after that.
    must_eventually(STEP, "4: the deployment's generation observed", || async {
        let d = mcds.get_opt(MCD).await.ok()??;
        let generation = d.metadata.generation?;
        (d.status?.observed_generation >= generation).then_some(())
    })
    .await;
    must_hold_for(
        Duration::from_secs(2),
        "4: exactly one MachineSet for a deployment with 0 replicas",
        || async {
            sets.list(&ListParams::default())
                .await
                .expect("list sets")
                .items
                .len()
                == 1
        },
    )
    .await;
    let scale = |replicas: i32| {
        let mcds = mcds.clone();
        async move {
            mcds.patch(
                MCD,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .expect("scale MachineDeployment");
        }
    };
    scale(1).await;
    let want: BTreeSet<(String, String, String)> = [
        ("Available", "True", "MinimumReplicasAvailable"),
        ("Progressing", "True", "NewMachineSetAvailable"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    let last_conditions = std::sync::Mutex::new(BTreeSet::new());
    let seen = mcm_testenv::eventually(
        STEP,
        "4: Available/MinimumReplicasAvailable and Progressing/NewMachineSetAvailable, 1 available",
        || {
            let mcds = mcds.clone();
            let want = want.clone();
            let last = &last_conditions;
            async move {
                let d = mcds.get(MCD).await.ok()?;
                let status = d.status.unwrap_or_default();
                let got: BTreeSet<(String, String, String)> = status
                    .conditions
                    .iter()
                    .map(|c| (c.type_.to_string(), c.status.to_string(), c.reason.clone()))
                    .collect();
                *last.lock().expect("lock") = got.clone();
                (got == want && status.available_replicas == 1).then_some(())
            }
        },
    )
    .await;
    assert!(
        seen.is_ok(),
        "4: conditions never became exactly {want:?}; last seen {:?}",
        last_conditions.lock().expect("lock")
    );
    must_eventually(STEP, "4: one more Ready node", nodes_are(initial + 1, true)).await;
    let froze_before = event_count(&events, FREEZE_REASON).await.expect("events");
    let unfroze_before = event_count(&events, UNFREEZE_REASON).await.expect("events");
    step_done(
        &mut timings,
        "4 deployment: one set, scaled to 1, conditions, +1 node",
        t,
    );

    // 5. Scale up to 6.
    let t = Instant::now();
    scale(6).await;
    must_eventually(STEP, "5: six Ready nodes", nodes_are(initial + 6, true)).await;
    step_done(&mut timings, "5 scaled to 6, +6 Ready nodes", t);

    // 6. Scale down to 2.
    let t = Instant::now();
    scale(2).await;
    must_eventually(STEP, "6: two nodes", nodes_are(initial + 2, false)).await;
    step_done(&mut timings, "6 scaled to 2, +2 nodes", t);

    // 7. Freeze/unfreeze during the scale-down: the overshoot safety loop freezes
    //    the set while the machines being deleted still count (6 ≥ 2 + maxSurge 2
    //    + safetyUp 2) and unfreezes it once they are gone: exactly two new events
    //    (the reference's assertion), and nothing stays frozen.
    let t = Instant::now();
    let (froze, unfroze) = must_eventually(STEP, "7: every freeze is undone", || async {
        let f = event_count(&events, FREEZE_REASON).await? - froze_before;
        let u = event_count(&events, UNFREEZE_REASON).await? - unfroze_before;
        let frozen_label = |l: &std::collections::BTreeMap<String, String>| {
            l.get("freeze").is_some_and(|v| v == "True")
        };
        let any_set_frozen = sets
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .any(|s| frozen_label(s.labels()));
        let d = mcds.get(MCD).await.ok()?;
        (f == u && !any_set_frozen && !frozen_label(d.labels())).then_some((f, u))
    })
    .await;
    eprintln!("7: {froze} new {FREEZE_REASON}, {unfroze} new {UNFREEZE_REASON} events");
    assert_eq!(
        (froze, unfroze),
        (1, 1),
        "7: the scale-down from 6 to 2 overshoots the freeze limit once (6 machines ≥ 2 + maxSurge 2 + safetyUp 2): exactly one {FREEZE_REASON} and one {UNFREEZE_REASON} event, as in the reference"
    );
    step_done(&mut timings, "7 freeze/unfreeze events balanced", t);

    // 8. Roll to class v2 with 4 replicas.
    let t = Instant::now();
    mcds.patch(
        MCD,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "replicas": 4,
            "template": {"spec": {"class": {"name": "test-mc-v2"}}}
        }})),
    )
    .await
    .expect("update MachineDeployment");
    must_eventually(
        STEP,
        "8: updatedReplicas 4 and availableReplicas 4",
        || async {
            let s = mcds.get(MCD).await.ok()?.status.unwrap_or_default();
            (s.updated_replicas == 4 && s.available_replicas == 4).then_some(())
        },
    )
    .await;
    must_eventually(STEP, "8: four nodes", nodes_are(initial + 4, false)).await;
    let classes_in_use: BTreeSet<String> = machines
        .list(&ListParams::default())
        .await
        .expect("list machines")
        .items
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(|m| m.spec.class.name.clone())
        .collect();
    assert_eq!(
        classes_in_use,
        BTreeSet::from(["test-mc-v2".to_string()]),
        "8: all live machines use the new class"
    );
    step_done(&mut timings, "8 rolled to class v2 with 4 replicas", t);

    // 9. Deleting the deployment removes its machines, sets and nodes.
    let t = Instant::now();
    mcds.delete(MCD, &DeleteParams::default())
        .await
        .expect("delete MachineDeployment");
    must_eventually(
        STEP,
        "9: node count back to the initial one",
        nodes_are(initial, false),
    )
    .await;
    must_eventually(
        STEP,
        "9: no MachineDeployment, MachineSet or Machine left",
        || async {
            let lp = ListParams::default();
            (mcds.list(&lp).await.ok()?.items.is_empty()
                && sets.list(&lp).await.ok()?.items.is_empty()
                && machines.list(&lp).await.ok()?.items.is_empty())
            .then_some(())
        },
    )
    .await;
    step_done(
        &mut timings,
        "9 deployment deleted, nodes back to initial",
        t,
    );

    // 10. No orphans: the cloud has no instance of this test's cluster left.
    let t = Instant::now();
    let orphans: Vec<String> = admin
        .instances()
        .await
        .expect("list instances")
        .into_iter()
        .filter(|i| i.tags.contains_key(&cluster_tag))
        .map(|i| format!("{} ({})", i.id, i.machine_name))
        .collect();
    assert!(orphans.is_empty(), "10: orphan instances: {orphans:?}");
    step_done(&mut timings, "10 no orphan instances", t);

    // Cleanup: the classes are released (their finalizers removed) once unused.
    for name in ["test-mc-v1", "test-mc-v2"] {
        classes
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete MachineClass");
    }
    must_eventually(
        Duration::from_secs(60),
        "the classes are deleted",
        || async {
            classes
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    drop(controllers);
    cloud.shutdown().await.expect("cloud shutdown");
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await;
    eprintln!("timings:");
    for (what, took) in &timings {
        eprintln!("  {took:>8.1?}  {what}");
    }
}
