//! mcm-rs as a drop-in for Gardener's machine-controller-manager, against the
//! real control plane and the in-process local cloud:
//!
//! - both halves start with Gardener's two command lines (only `<ns>` and
//!   `<file>` substituted, plus `--local-cloud-url`), started as a container
//!   runtime starts them from the image `deploy/Dockerfile` declares (its
//!   WORKDIR, ENTRYPOINT and files; the main container's `command` with no
//!   `workingDir`, the sidecar's bare `args` to the entrypoint),
//!   in an in-cluster environment whose ServiceAccount has exactly Gardener's
//!   seed Role; a MachineDeployment of 3 goes create → initialize → Running →
//!   delete; each half holds its own Lease; the metric names on both ports are
//!   the reference's (committed lists in `tests/data/`); every line the two
//!   halves print parses with Gardener's fluent-bit parser;
//! - the machine-controller-manager half next to a separate machine-controller
//!   process that may not even read MachineSets: every MachineSet is
//!   reconciled by the manager alone, and no machine is created twice.
//!
//! Logs go to `$TMPDIR/mcm-dropin-<ns>-<half>.log`. Without the control plane
//! the tests skip, except in CI (`CI` set and not `false`/`0`), where they fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::dropin;

use dropin::{
    assert_gardener_parses, dashboard_metric_names, family_names, family_of, http_get,
    reference_names, World,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineDeployment, MachineSet};
use mcm_testenv::{must_eventually, must_hold_for};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const STEP: Duration = Duration::from_secs(180);
const MANAGER_REFERENCE: &str =
    include_str!("data/reference-metrics-machine-controller-manager.txt");
const CONTROLLER_REFERENCE: &str = include_str!("data/reference-metrics-machine-controller.txt");
/// Families mcm-rs adds (documented in the README), allowed besides the reference's.
const MCM_RS_ONLY: &str = include_str!("data/mcm-rs-only-metrics.txt");

/// Gardener's command lines use the fixed ports 10258 and 10259: one such test at a time.
static FIXED_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

use mcm_testenv::free_port;

async fn healthz(port: u16) {
    must_eventually(
        Duration::from_secs(60),
        &format!("/healthz on {port}"),
        || async move {
            let (status, _, body) = http_get(port, "/healthz")?;
            (status == 200 && body.trim() == "OK").then_some(())
        },
    )
    .await;
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

fn assert_reference_names(port: u16, reference: &str, half: &str) -> String {
    let (status, content_type, body) = http_get(port, "/metrics").expect("scrape");
    assert_eq!(status, 200, "{half} /metrics");
    assert!(
        content_type.starts_with("text/plain") && content_type.contains("version=0.0.4"),
        "{half}: the Prometheus text format, got {content_type:?}"
    );
    let ours = family_names(&body);
    let theirs = reference_names(reference);
    let missing: Vec<_> = theirs.difference(&ours).cloned().collect();
    assert!(
        missing.is_empty(),
        "{half} on port {port} lacks the reference's families {missing:?}; it serves {ours:?}"
    );
    // None renamed: every family served is one of the reference's, or one
    // that mcm-rs adds and lists.
    let added = reference_names(MCM_RS_ONLY);
    let extra: Vec<_> = ours
        .difference(&theirs)
        .filter(|f| !added.contains(*f))
        .cloned()
        .collect();
    assert!(
        extra.is_empty(),
        "{half} on port {port} serves families the reference does not: {extra:?}"
    );
    body
}

/// The value of one series of a scrape (`name{labels}` exactly as served).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The series of the cloud API, workqueues and REST client carry the
/// reference's label values and have moved once a deployment has run.
fn assert_process_series_written(text: &str, half: &str, queues: &[&str]) {
    for q in queues {
        let adds = format!("mcm_workqueue_adds_total{{name=\"{q}\"}}");
        assert!(sample(text, &adds).is_some(), "{half}: {adds} in:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("rest_client_requests_total{code=\"200\",method=\"GET\",host=")),
        "{half}: REST client requests counted:\n{text}"
    );
    assert!(
        text.lines().any(|l| l
            .starts_with("rest_client_request_latency_seconds_count{verb=\"GET\",url=\"https://")
            && l.contains("%7Bnamespace%7D")),
        "{half}: REST client latency by URL template:\n{text}"
    );
}

/// The dashboard in deploy/ is over the reference's metric names: each name
/// it queries is a family of the reference's lists (or a histogram sample of
/// one), and it shows machines per phase, failed machines, cloud API calls
/// and failures, the five durations and the workqueue depth.
#[test]
fn the_grafana_dashboard_queries_only_the_reference_metric_names() {
    let reference: BTreeSet<String> = reference_names(MANAGER_REFERENCE)
        .union(&reference_names(CONTROLLER_REFERENCE))
        .cloned()
        .collect();
    let queried = dashboard_metric_names();
    let foreign: Vec<&String> = queried
        .iter()
        .filter(|m| family_of(m, &reference).is_none())
        .collect();
    assert!(foreign.is_empty(), "not the reference's: {foreign:?}");
    for needed in [
        "mcm_machine_current_status_phase",
        "mcm_machine_deployment_failed_machines",
        "mcm_cloud_api_requests_total",
        "mcm_cloud_api_requests_failed_total",
        "mcm_machine_create_duration_seconds",
        "mcm_machine_initialize_duration_seconds",
        "mcm_machine_join_duration_seconds",
        "mcm_machine_drain_duration_seconds",
        "mcm_machine_delete_duration_seconds",
        "mcm_workqueue_depth",
    ] {
        assert!(queried.contains(needed), "the dashboard shows {needed}");
    }
}

/// Without a cluster: the image of `deploy/Dockerfile` starts Gardener's main
/// container (`./machine-controller-manager` and no `workingDir`), the
/// sidecar (bare flags to the entrypoint) and the chart's all-in-one (`run`),
/// and each gets past flag parsing as the half it is meant to be.
#[test]
fn the_dockerfiles_image_starts_gardeners_two_containers_and_the_all_in_one() {
    use dropin::image::{repository_image, ImageRoot};
    let dir = dropin::TempDir(
        std::env::temp_dir().join(format!("mcm-dropin-image-{}", std::process::id())),
    );
    let image = ImageRoot::install(
        repository_image(),
        &dir.0,
        std::path::Path::new(env!("CARGO_BIN_EXE_mcm")),
    );
    assert_eq!(image.spec.workdir, "/", "Gardener sets no workingDir");
    let flags = |port: &str| {
        vec![
            "--control-kubeconfig=inClusterConfig".to_string(),
            format!("--port={port}"),
            "--namespace=shoot--x".into(),
        ]
    };
    let mut main = vec!["./machine-controller-manager".to_string()];
    main.extend(flags("10258"));
    let mut all_in_one = vec!["run".to_string()];
    all_in_one.extend(flags("10259"));
    for (what, command, args, help_name) in [
        ("main container", main, vec![], "machine-controller-manager"),
        ("sidecar", vec![], flags("10259"), "machine-controller"),
        ("all-in-one", vec![], all_in_one, "mcm run"),
    ] {
        let start = image
            .start(&command, &args, None)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let run = |extra: &[&str]| {
            use std::os::unix::process::CommandExt as _;
            std::process::Command::new(&start.program)
                .arg0(&start.argv0)
                .args(&start.args)
                .args(extra)
                .current_dir(&start.cwd)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .env_remove("MCM_SERVICEACCOUNT_DIR")
                .output()
                .expect("run")
        };
        let out = run(&[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        assert!(
            stderr.contains("inClusterConfig"),
            "{what} stopped before the in-cluster config: {stderr}"
        );
        // Which program it is: its usage line names it.
        let help = run(&["--help"]);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(
            text.contains(&format!("Usage: {help_name} ")),
            "{what} is {help_name}:\n{text}"
        );
    }
}

#[tokio::test]
async fn gardeners_command_lines_start_both_halves_which_run_a_deployment_of_3_as_the_service_account(
) {
    let Some(world) = World::new("dropin-gardener").await else {
        return;
    };
    let _ports = FIXED_PORTS.lock().await;
    let ns = world.env.namespace.clone();
    // Gardener's main container: `command`, no `args`, no `workingDir`.
    let mut command = vec!["./machine-controller-manager".to_string()];
    command.extend(world.manager_args());
    let mut manager = world.spawn_container(&command, &[], "machine-controller-manager");
    // Gardener's provider sidecar: `args` only, to the image's entrypoint.
    let mut controller = world.spawn_container(&[], &world.controller_args(), "machine-controller");
    healthz(10258).await;
    healthz(10259).await;

    world.create_deployment("dropin", 3).await;
    must_eventually(STEP, "3 machines Running", || async {
        let (all, running) = world.machine_phases().await?;
        (all == 3 && running == 3).then_some(())
    })
    .await;
    assert!(
        manager.running(),
        "machine-controller-manager exited:\n{}",
        manager.log_text()
    );
    assert!(
        controller.running(),
        "machine-controller exited:\n{}",
        controller.log_text()
    );

    // Events are core/v1 (Gardener's Role grants no events.k8s.io), with the
    // reference's component per kind of object: machineset-controller on the
    // MachineSet, machine-controller-manager on the MachineDeployment,
    // machine-controller on the Machine.
    let events: Api<CoreEvent> = world.env.api();
    let want: BTreeSet<(String, String)> = [
        ("MachineSet", "machineset-controller"),
        ("MachineDeployment", "machine-controller-manager"),
        ("Machine", "machine-controller"),
    ]
    .into_iter()
    .map(|(k, c)| (k.to_string(), c.to_string()))
    .collect();
    let sources = must_eventually(
        Duration::from_secs(30),
        "core/v1 events on the MachineSet, MachineDeployment and Machines",
        || async {
            let sources: BTreeSet<(String, String)> = events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|e| Some((e.involved_object.kind?, e.source?.component?)))
                .collect();
            let kinds: BTreeSet<&String> = sources.iter().map(|(k, _)| k).collect();
            want.iter()
                .all(|(k, _)| kinds.contains(k))
                .then_some(sources)
        },
    )
    .await;
    let ours: BTreeSet<(String, String)> = sources
        .into_iter()
        .filter(|(k, _)| want.iter().any(|(w, _)| w == k))
        .collect();
    assert_eq!(
        ours, want,
        "each kind's Events carry the reference's source.component"
    );

    // Each half holds its own Lease.
    let leases: Api<Lease> = world.env.api();
    let holders = must_eventually(Duration::from_secs(30), "both Leases held", || async {
        let m = lease_holder(&leases, "machine-controller-manager").await?;
        let c = lease_holder(&leases, "machine-controller").await?;
        Some((m, c))
    })
    .await;
    assert_ne!(holders.0, holders.1, "two processes, two holders");

    // The reference's metric names on each half's port; per-machine series for every machine.
    // The deployment's counts reach its status within a second of the last
    // move (counts-only status writes are paced, sets-and-deployments.md).
    let replicas =
        format!("mcm_machine_deployment_status_replicas{{name=\"dropin\",namespace=\"{ns}\"}} 3");
    must_eventually(
        Duration::from_secs(30),
        "the deployment's status replicas of 3 on port 10258",
        || async {
            let (_, _, body) = http_get(10258, "/metrics")?;
            body.contains(&replicas).then_some(())
        },
    )
    .await;
    let mcm_text = assert_reference_names(10258, MANAGER_REFERENCE, "machine-controller-manager");
    let mc_text = assert_reference_names(10259, CONTROLLER_REFERENCE, "machine-controller");
    assert!(
        !mcm_text.contains("mcm_machine_current_status_phase"),
        "machine series belong to port 10259"
    );
    assert!(
        !mc_text.contains("mcm_machine_set_"),
        "set series belong to port 10258"
    );
    assert_process_series_written(
        &mcm_text,
        "machine-controller-manager",
        &[
            "machineset",
            "machinedeployment",
            "machinesafetyovershooting",
        ],
    );
    assert_process_series_written(
        &mc_text,
        "machine-controller",
        &[
            "machine",
            "machineclass",
            "machinesafetyorphanvms",
            "machinesafetyapiserver",
        ],
    );
    // Each half's clients send the reference's User-Agent: the API server
    // names the field managers of their writes after its program part.
    let managers = |fields: Option<
        Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>,
    >|
     -> BTreeSet<String> {
        fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|f| f.manager)
            .collect()
    };
    let machines = world
        .env
        .api::<Machine>()
        .list(&ListParams::default())
        .await
        .expect("machines");
    let m = managers(machines.items[0].metadata.managed_fields.clone());
    assert!(m.contains("machine-controller"), "Machine managers {m:?}");
    let sets = world
        .env
        .api::<MachineSet>()
        .list(&ListParams::default())
        .await
        .expect("sets");
    let m = managers(sets.items[0].metadata.managed_fields.clone());
    assert!(
        m.contains("machine-controller-manager"),
        "MachineSet managers {m:?}"
    );
    // Upstream #1104: the create and join durations of the deployment, with
    // the class's instance type.
    for activity in ["create", "join"] {
        let series = format!(
            "mcm_machine_{activity}_duration_seconds{{namespace=\"{ns}\",machine_deployment=\"dropin\",instance_type=\"small\",zone=\"\"}}"
        );
        assert!(
            sample(&mc_text, &series).is_some(),
            "{series} in:\n{mc_text}"
        );
    }
    // The Grafana dashboard in deploy/ queries only metrics this live scrape has.
    let live: BTreeSet<String> = family_names(&mcm_text)
        .union(&family_names(&mc_text))
        .cloned()
        .collect();
    let absent: Vec<String> = dashboard_metric_names()
        .into_iter()
        .filter(|m| family_of(m, &live).is_none())
        .collect();
    assert!(
        absent.is_empty(),
        "the dashboard queries metrics the halves do not serve: {absent:?}"
    );
    for q in ["machineset", "machinedeployment"] {
        let adds = sample(
            &mcm_text,
            &format!("mcm_workqueue_adds_total{{name=\"{q}\"}}"),
        );
        assert!(
            adds.unwrap_or(0.0) >= 1.0,
            "{q} reconciled at least once:\n{mcm_text}"
        );
    }
    for (text, foreign) in [(&mcm_text, "machineclass"), (&mc_text, "machineset")] {
        assert!(
            !text.contains(&format!("mcm_workqueue_adds_total{{name=\"{foreign}\"}}")),
            "each half has only its own queues:\n{text}"
        );
    }
    let machine_adds = sample(&mc_text, "mcm_workqueue_adds_total{name=\"machine\"}");
    assert!(
        machine_adds.unwrap_or(0.0) >= 3.0,
        "machines reconciled:\n{mc_text}"
    );
    // The cloud API calls, counted where they happen (the local cloud's create per machine).
    let creates = sample(
        &mc_text,
        "mcm_cloud_api_requests_total{provider=\"local\",service=\"create\"}",
    );
    assert!(creates.unwrap_or(0.0) >= 3.0, "{mc_text}");
    let timed = sample(
        &mc_text,
        "mcm_cloud_api_api_request_duration_seconds_count{provider=\"local\",service=\"create\"}",
    );
    assert_eq!(timed, creates, "every successful call is timed:\n{mc_text}");
    assert!(
        mc_text.contains(
            "mcm_cloud_api_driver_request_duration_seconds_count{provider=\"local\",operation=\"create_machine\"}"
        ),
        "{mc_text}"
    );

    // Delete: the machines and their VMs go.
    world
        .env
        .api::<MachineDeployment>()
        .delete("dropin", &DeleteParams::default())
        .await
        .expect("delete MachineDeployment");
    must_eventually(STEP, "machines gone", || async {
        let (all, _) = world.machine_phases().await?;
        (all == 0).then_some(())
    })
    .await;
    assert!(
        manager.running(),
        "machine-controller-manager exited:\n{}",
        manager.log_text()
    );
    assert!(
        controller.running(),
        "machine-controller exited:\n{}",
        controller.log_text()
    );

    // Every line either half printed through create, Running and delete is
    // one Gardener's logging stack parses (klog text, no colour codes).
    for (half, p) in [
        ("machine-controller-manager", &manager),
        ("machine-controller", &controller),
    ] {
        let lines = assert_gardener_parses(&p.log_text(), half);
        assert!(lines > 0, "{half} logged nothing at --v=3");
    }
}

/// A ServiceAccount that may use Machines, MachineClasses, Secrets, Events and
/// the `machine-controller` Lease, but not MachineSets or MachineDeployments.
async fn machines_only_kubeconfig(world: &World) -> std::path::PathBuf {
    let ns = &world.env.namespace;
    let pp = PostParams::default();
    let name = "machines-only";
    let sas: Api<ServiceAccount> = world.env.api();
    sas.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": name}})).expect("SA"),
    )
    .await
    .expect("create SA");
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["machine.sapcloud.io"], "resources": ["machines", "machines/status", "machineclasses"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["secrets", "events"], "verbs": ["*"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["machine-controller"], "verbs": ["get", "watch", "update"]}
        ]
    }))
    .expect("Role");
    world
        .env
        .api::<Role>()
        .create(&pp, &role)
        .await
        .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    }))
    .expect("RoleBinding");
    world
        .env
        .api::<RoleBinding>()
        .create(&pp, &binding)
        .await
        .expect("RoleBinding");
    let token = sas
        .create_token_request(name, &pp, &Default::default())
        .await
        .expect("token")
        .status
        .expect("token status")
        .token
        .expect("token value");
    let (host, port) = &world.service;
    let path = world.sa_dir.join("machines-only.kubeconfig");
    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{host}:{port}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        world.sa_dir.join("ca.crt").display()
    );
    std::fs::write(&path, kc).expect("kubeconfig");
    path
}

#[tokio::test]
async fn manager_half_next_to_a_separate_machine_controller_reconciles_every_machine_set_alone() {
    let Some(world) = World::new("dropin-split").await else {
        return;
    };
    let ns = world.env.namespace.clone();
    let kc = world.kubeconfig.display().to_string();
    let (mcm_port, mc_port) = (free_port(), free_port());
    let mut manager = world.spawn(
        "mcm",
        &[
            "machine-controller-manager".to_string(),
            format!("--namespace={ns}"),
            format!("--port={mcm_port}"),
            "--address=127.0.0.1".into(),
            "--control-kubeconfig=inClusterConfig".into(),
            format!("--target-kubeconfig={kc}"),
            "--min-retry-period=1s".into(),
            "--max-retry-period=5s".into(),
        ],
        "split-manager",
    );
    let restricted = machines_only_kubeconfig(&world).await;
    let mut controller = world.spawn(
        "mcm",
        &[
            "machine-controller".to_string(),
            format!("--namespace={ns}"),
            format!("--port={mc_port}"),
            "--address=127.0.0.1".into(),
            format!("--control-kubeconfig={}", restricted.display()),
            format!("--target-kubeconfig={kc}"),
            format!("--local-cloud-url={}", world.cloud_url),
            "--min-retry-period=1s".into(),
            "--max-retry-period=5s".into(),
        ],
        "split-controller",
    );
    healthz(mcm_port).await;
    healthz(mc_port).await;

    // Every Machine ever created, from the start.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::<String>::new()));
    let watch = {
        use futures::StreamExt;
        let seen = seen.clone();
        let api: Api<Machine> = world.env.api();
        tokio::spawn(async move {
            let stream = kube::runtime::watcher(api, Default::default());
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(
                    kube::runtime::watcher::Event::Apply(m)
                    | kube::runtime::watcher::Event::InitApply(m),
                ) = ev
                {
                    seen.lock().expect("seen").insert(m.name_any());
                }
            }
        })
    };

    world.create_deployment("split", 3).await;
    must_eventually(STEP, "3 machines Running", || async {
        let (all, running) = world.machine_phases().await?;
        (all == 3 && running == 3).then_some(())
    })
    .await;
    // Settle, then look: one MachineSet, three machines ever, both processes
    // alive. No fourth machine through the longest retry period of the flags
    // above (`--max-retry-period=5s`) and more.
    must_hold_for(
        Duration::from_secs(5 + 2),
        "no machine beyond the deployment's 3",
        || async { seen.lock().expect("seen").len() <= 3 },
    )
    .await;
    watch.abort();
    let sets = world
        .env
        .api::<MachineSet>()
        .list(&ListParams::default())
        .await
        .expect("sets")
        .items;
    assert_eq!(sets.len(), 1, "one MachineSet for the deployment");
    assert_eq!(
        seen.lock().expect("seen").len(),
        3,
        "no machine was created twice: {:?}",
        seen.lock().expect("seen")
    );
    assert!(manager.running(), "manager exited:\n{}", manager.log_text());
    assert!(
        controller.running(),
        "controller exited:\n{}",
        controller.log_text()
    );
    let log = controller.log_text();
    assert!(
        !log.contains("machinesets") && !log.contains("machinedeployments"),
        "the machine-controller never touches MachineSets or MachineDeployments:\n{log}"
    );
    let leases: Api<Lease> = world.env.api();
    assert!(lease_holder(&leases, "machine-controller-manager")
        .await
        .is_some());
    assert!(lease_holder(&leases, "machine-controller").await.is_some());
}
