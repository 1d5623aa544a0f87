//! The two halves of the reference, and both in one process:
//!
//! - `machine-controller-manager`: MachineSets, MachineDeployments and the
//!   overshoot safety, under the Lease `machine-controller-manager`, `/metrics`
//!   on port 10258.
//! - `machine-controller`: Machines, MachineClasses, orphan-VM and API-server
//!   safety, under the Lease `machine-controller`, `/metrics` on port 10259.
//! - `mcm run`: both, each under its own Lease, one `/metrics` (port 10259).
//!
//! Each half only touches what the reference's half touches, so either can
//! run next to the reference's other half.
//!
//! Leader election, probes and metrics caches: docs/design/leader-election.md
//! and docs/design/process-contract.md.

use crate::flags::{log_filter, CommonFlags, MachineFlags, SetFlags};
use crate::kubeclient;
use anyhow::Context as _;
use clap::Args;
use futures::StreamExt;
use kube::Client;
use mcm_api::{Machine, MachineDeployment, MachineSet};
use mcm_runtime::caches::{Caches, Shared};
use mcm_runtime::healthz::{self as health, Half, Health, HealthConfig};
use mcm_runtime::metrics::{Metrics, ProcessMetrics, ScrapeMetrics, SetMetrics};
use mcm_runtime::{leader, safety, Context};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// How long the controllers may take to stop after SIGTERM before they are
/// dropped (then the Leases are released).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How often a running half proves it is polled (`/healthz`).
const HEARTBEAT: Duration = Duration::from_secs(5);

/// The name (and Lease) of the MachineSet/MachineDeployment half.
pub const MANAGER: &str = "machine-controller-manager";
/// The name (and Lease) of the Machine half.
pub const CONTROLLER: &str = "machine-controller";

/// Flags of `machine-controller-manager`.
#[derive(Args, Debug, Clone)]
pub struct ManagerArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonFlags,
    /// MachineSet / MachineDeployment flags.
    #[command(flatten)]
    pub sets: SetFlags,
}

/// Flags of `machine-controller`.
#[derive(Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonFlags,
    /// Machine flags.
    #[command(flatten)]
    pub machines: MachineFlags,
}

/// Flags of `mcm run` (both halves).
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonFlags,
    /// MachineSet / MachineDeployment flags.
    #[command(flatten)]
    pub sets: SetFlags,
    /// Machine flags.
    #[command(flatten)]
    pub machines: MachineFlags,
}

/// What one process runs.
struct Plan {
    /// The process's name (events, logs, `binary` label).
    name: &'static str,
    common: CommonFlags,
    sets: Option<SetFlags>,
    machines: Option<MachineFlags>,
}

/// Sets up logging from `--v`, `--vmodule` and `--log-json` (`RUST_LOG` wins):
/// klog text lines by default, JSON with `--log-json`, never colour codes.
pub fn init_logging(common: &CommonFlags) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(log_filter(common.verbosity, &common.vmodule)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    if common.log_json {
        builder.json().init();
    } else {
        // klog's text lines, as the reference writes (crate::klog).
        builder.event_format(crate::klog::Klog::new()).init();
    }
}

/// Runs `machine-controller-manager`.
pub async fn run_manager(args: ManagerArgs) -> anyhow::Result<()> {
    serve(Plan {
        name: MANAGER,
        common: args.common,
        sets: Some(args.sets),
        machines: None,
    })
    .await
}

/// Runs `machine-controller`.
pub async fn run_controller(args: ControllerArgs) -> anyhow::Result<()> {
    serve(Plan {
        name: CONTROLLER,
        common: args.common,
        sets: None,
        machines: Some(args.machines),
    })
    .await
}

/// Runs both halves (`mcm run`).
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    serve(Plan {
        name: "mcm",
        common: args.common,
        sets: Some(args.sets),
        machines: Some(args.machines),
    })
    .await
}

/// What `/metrics` collects on every scrape: from the caches, no API call.
struct Scrape {
    registry: Registry,
    namespace: String,
    machines: Option<(Arc<Metrics>, Shared<Machine>)>,
    sets: Option<(
        Arc<SetMetrics>,
        Shared<MachineSet>,
        Shared<MachineDeployment>,
    )>,
    process: ProcessMetrics,
    misc: ScrapeMetrics,
}

impl Scrape {
    fn render(&self) -> String {
        self.misc.begin();
        let text = self.collect();
        self.misc.end(200);
        text
    }

    /// Per-object series come from the caches once they are synced (while
    /// this replica leads); a standby reports the families without series.
    fn collect(&self) -> String {
        if let Some((m, machines)) = &self.machines {
            if let Some(machines) = machines.synced_state() {
                m.fill(&machines, &self.namespace);
            }
        }
        if let Some((m, sets, deployments)) = &self.sets {
            if let (Some(sets), Some(deployments)) =
                (sets.synced_state(), deployments.synced_state())
            {
                m.fill(&sets, &deployments, &self.namespace);
            }
        }
        self.process.refresh();
        mcm_runtime::metrics::encode(&self.registry)
    }
}

/// A probe's answer, as the reference's `handlers.Healthz`: `200 OK`, or
/// `500` with `Unhealthy` (and, mcm-rs, the reason after a colon).
fn probe_answer(r: Result<(), String>) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    match r {
        Ok(()) => (StatusCode::OK, "OK".to_string()),
        Err(reason) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Unhealthy: {reason}"),
        ),
    }
}

async fn serve_http(
    addr: SocketAddr,
    scrape: Arc<Scrape>,
    health: Arc<Health>,
) -> anyhow::Result<()> {
    use axum::http::header;
    use axum::routing::get;
    let answer = probe_answer;
    let live = health.clone();
    let healthz = move || {
        let live = live.clone();
        async move { answer(live.liveness()) }
    };
    let readyz = move || {
        let health = health.clone();
        async move { answer(health.readiness()) }
    };
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let scrape = scrape.clone();
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        scrape.render(),
                    )
                }
            }),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    info!(%addr, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, app).await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One half as `serve` runs it: its Lease, its work, its state for the
/// probes and the tenure gate its cloud calls and drains check.
struct HalfRun {
    lease: &'static str,
    work: Work,
    leading: Arc<AtomicBool>,
    half: Arc<Half>,
    tenure: leader::TenureGate,
}

/// A stop signal every controller of a half can wait on.
fn stopper(
    rx: &tokio::sync::watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + Sync + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// This replica's leader-election identity: the pod (or host) name and a
/// random suffix, so two processes on one host never share an identity.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "mcm".into());
    format!("{host}_{:08x}", rand::random::<u32>())
}

/// The process's kube clients: one per role, each with its own request
/// budget of `qps`/`burst`, as the reference's clientsets (design:
/// docs/design/runtime.md, "Clients and their budgets").
struct RoleClients {
    control: Client,
    events: Client,
    leases: Client,
    target: Option<Client>,
    /// `/healthz`'s `/version` probe and the API-server status check: a
    /// busy control client never makes a healthy API server look dead.
    probe: Client,
    /// The status check's probe of the target cluster.
    target_probe: Option<Client>,
}

/// The clients of the program `program` (a half's name, or `mcm`): the
/// reference's User-Agents, the half's name for its clients and
/// `machine-leader-election` for the Leases.
async fn role_clients(
    program: &str,
    control_src: &kubeclient::Source,
    target_src: Option<&kubeclient::Source>,
    qps: f32,
    burst: i32,
    rest: &mcm_runtime::metrics::rest::RestMetrics,
) -> anyhow::Result<RoleClients> {
    let ua = kubeclient::user_agent(program, program);
    let control = kubeclient::client(control_src, qps, burst, &ua, rest)
        .await
        .context("control cluster")?;
    let events = kubeclient::client(control_src, qps, burst, &ua, rest)
        .await
        .context("control cluster (events)")?;
    let election = kubeclient::user_agent(program, "machine-leader-election");
    let leases = kubeclient::client(control_src, qps, burst, &election, rest)
        .await
        .context("control cluster (leader election)")?;
    let probe = kubeclient::client(control_src, qps, burst, &ua, rest)
        .await
        .context("control cluster (probes)")?;
    let (target, target_probe) = match target_src {
        None => (None, None),
        Some(src) => (
            Some(
                kubeclient::client(src, qps, burst, &ua, rest)
                    .await
                    .context("target cluster")?,
            ),
            Some(
                kubeclient::client(src, qps, burst, &ua, rest)
                    .await
                    .context("target cluster (probes)")?,
            ),
        ),
    };
    Ok(RoleClients {
        control,
        events,
        leases,
        target,
        probe,
        target_probe,
    })
}

/// Runs `work` under the Lease `lease` (or directly without leader election)
/// until it ends, leadership is lost or `shutdown` completes (then the work
/// gets [`SHUTDOWN_GRACE`] and the Lease is released). `tenure` is the gate
/// the half's cloud calls and drain requests check (left unbounded without
/// leader election).
async fn lead(
    common: &CommonFlags,
    control: Client,
    lease: &str,
    work: Work,
    leading: Arc<AtomicBool>,
    tenure: leader::TenureGate,
    shutdown: impl Future<Output = ()>,
) -> Result<(), leader::LeaderError> {
    if !common.leader_elect {
        use std::sync::atomic::Ordering;
        leading.store(true, Ordering::SeqCst);
        tokio::pin!(work);
        tokio::select! {
            _ = &mut work => {}
            _ = shutdown => { let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut work).await; }
        }
        leading.store(false, Ordering::SeqCst);
        return Ok(());
    }
    let lc = leader::LeaderConfig {
        name: lease.to_string(),
        lease_duration: common.leader_elect_lease_duration,
        renew_deadline: common.leader_elect_renew_deadline,
        retry_period: common.leader_elect_retry_period,
        shutdown_grace: SHUTDOWN_GRACE,
        leading,
        tenure,
        ..leader::LeaderConfig::new(&common.namespace, &identity())
    };
    leader::lead(control, lc, work, shutdown).await.map(|_| ())
}

/// Runs `controllers` with `companions` (cache watches, the heartbeat) that
/// never end on their own: the work ends when the controllers do.
fn with_companions(
    controllers: impl Future<Output = ()> + Send + 'static,
    companions: Vec<Work>,
) -> Work {
    Box::pin(async move {
        tokio::select! {
            _ = controllers => {}
            _ = futures::future::join_all(companions) => {}
        }
    })
}

/// The one [`mcm_runtime::Config`] of a process, from its flags: every
/// controller of the process reads its settings here, so a flag reaches
/// every controller that has it (`--concurrent-syncs` and the retry periods
/// included).
fn runtime_config(plan: &Plan) -> mcm_runtime::Config {
    let common = &plan.common;
    let concurrent_syncs = common
        .concurrent_syncs
        .unwrap_or(if plan.machines.is_some() {
            mcm_core::defaults::CONCURRENT_SYNCS_MACHINES
        } else {
            mcm_core::defaults::CONCURRENT_SYNCS_SETS
        });
    let mut config = mcm_runtime::Config {
        namespace: common.namespace.clone(),
        concurrent_syncs,
        short_retry: common.min_retry_period,
        long_retry: common.max_retry_period,
        ..Default::default()
    };
    if let Some(mf) = &plan.machines {
        config.creation_timeout = mf.machine_creation_timeout;
        config.health_timeout = mf.machine_health_timeout;
        config.drain_timeout = mf.machine_drain_timeout;
        config.in_place_update_timeout = mf.machine_inplace_update_timeout;
        config.max_evict_retries = mf.machine_max_evict_retries;
        config.pv_detach_timeout = mf.machine_pv_detach_timeout;
        config.pv_reattach_timeout = mf.machine_pv_reattach_timeout;
        config.resource_exhausted_retry = mf.resource_exhausted_retry;
        config.preserve_timeout = mf.machine_preserve_timeout;
        config.node_conditions = mf.node_conditions.clone();
        config.bootstrap_token_auth_extra_groups = mf.bootstrap_token_auth_extra_groups.clone();
        config.safety = mcm_runtime::safety::SafetyConfig {
            orphan_period: mf.machine_safety_orphan_vms_period,
            orphan_grace: mf.machine_safety_orphan_vms_grace,
            apiserver_check_period: mf.machine_safety_apiserver_statuscheck_period,
            apiserver_statuscheck_timeout: mf.machine_safety_apiserver_statuscheck_timeout,
        };
        config.startup_taint_key = mf.node_startup_taint_key.clone();
    }
    if let Some(sf) = &plan.sets {
        config.sets = mcm_runtime::sets::SetsConfig {
            safety_up: sf.safety_up,
            safety_down: sf.safety_down,
            overshooting_period: sf.machine_safety_overshooting_period,
            reporting_instance: std::env::var("POD_NAME").ok(),
            autoscaler_scaledown_annotation_during_rollout: sf
                .autoscaler_scaledown_annotation_during_rollout,
            ..Default::default()
        };
    }
    config
}

async fn serve(plan: Plan) -> anyhow::Result<()> {
    let common = &plan.common;
    // Every invalid flag at once, each named, before anything connects.
    let problems: Vec<String> = [
        Some(common.validate()),
        plan.sets.as_ref().map(SetFlags::validate),
        plan.machines.as_ref().map(MachineFlags::validate),
    ]
    .into_iter()
    .flatten()
    .filter_map(|r| r.err().map(|e| e.to_string()))
    .collect();
    if !problems.is_empty() {
        return Err(crate::flags::InvalidFlags(problems.join("; ")).into());
    }
    let (control_src, target_src) =
        kubeclient::resolve(&common.control_kubeconfig, &common.target_kubeconfig)?;
    // The clients' REST series: written by their layer, owned by the Context.
    let rest = mcm_runtime::metrics::rest::RestMetrics::default();
    let RoleClients {
        control,
        events,
        leases,
        target,
        probe,
        target_probe,
    } = role_clients(
        plan.name,
        &control_src,
        target_src.as_ref(),
        common.kube_api_qps,
        common.kube_api_burst,
        &rest,
    )
    .await?;
    let ns = common.namespace.clone();
    let port = common.port.unwrap_or(if plan.machines.is_some() {
        10259
    } else {
        10258
    });
    let mut registry = Registry::default();
    let process = ProcessMetrics::new(&mut registry);
    rest.register(&mut registry);
    let misc = ScrapeMetrics::new(&mut registry);
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut halves: Vec<HalfRun> = Vec::new();
    let health = Health::new(HealthConfig::default());
    let mut machine_metrics = None;
    let mut set_metrics = None;

    // One cache per kind and one Context for every controller of the
    // process (docs/design/runtime.md).
    let caches = Caches::new(&control, target.as_ref(), &ns);
    let config = runtime_config(&plan);
    // Machine metrics are served by the half that runs machines only.
    let metrics = Arc::new(if plan.machines.is_some() {
        Metrics::new(&mut registry)
    } else {
        Metrics::new(&mut Registry::default())
    });
    let (drivers, endpoint_drivers) = match &plan.machines {
        Some(mf) => crate::drivers::registry_with_endpoints(&mf.providers)?,
        None => (mcm_runtime::DriverRegistry::new(), Default::default()),
    };
    let clients = mcm_runtime::Clients {
        control: control.clone(),
        events,
        target: target.clone(),
        probes: Some(mcm_runtime::ProbeClients {
            control: probe.clone(),
            target: target_probe,
        }),
        rest,
    };
    let ctx = Context::with_clients(clients, config, drivers, metrics.clone(), caches.clone());
    mcm_runtime::metrics::workqueue::register(&mut registry, ctx.workqueues.clone());
    crate::drivers::check_endpoints(ctx.clone(), endpoint_drivers);

    if plan.machines.is_some() {
        info!(half = CONTROLLER, providers = ?ctx.drivers.providers(), namespace = %ns, target = target.is_some(), "starting");
        let (machines_stop, classes_stop, safety_stop) = (stopper(&rx), stopper(&rx), stopper(&rx));
        let leading = Arc::new(AtomicBool::new(false));
        let half = Half::new(
            CONTROLLER,
            leading.clone(),
            vec![caches.machines.synced_flag()],
        );
        health.add(half.clone());
        machine_metrics = Some((metrics, caches.machines.clone()));
        // The Context's gate: its cloud calls and drains check this half's tenure.
        let tenure = ctx.tenure.clone();
        let ctx = ctx.clone();
        let controllers = async move {
            let machines = mcm_runtime::machine::run(ctx.clone(), machines_stop);
            let classes = mcm_runtime::class::run(ctx.clone(), classes_stop);
            let safety_loop = async {
                tokio::select! {
                    _ = safety::run(ctx.clone()) => {},
                    _ = safety_stop => {},
                }
            };
            tokio::join!(machines, classes, safety_loop);
        };
        let companions: Vec<Work> = vec![Box::pin(half.clone().heartbeat(HEARTBEAT))];
        halves.push(HalfRun {
            lease: CONTROLLER,
            work: with_companions(controllers, companions),
            leading,
            half,
            tenure,
        });
    }
    if plan.sets.is_some() {
        let set_metric_families = SetMetrics::new(&mut registry, ctx.stale_machines());
        info!(half = MANAGER, namespace = %ns, target = target.is_some(), "starting");
        let stop = stopper(&rx);
        let leading = Arc::new(AtomicBool::new(false));
        let half = Half::new(
            MANAGER,
            leading.clone(),
            vec![caches.sets.synced_flag(), caches.deployments.synced_flag()],
        );
        health.add(half.clone());
        set_metrics = Some((
            set_metric_families,
            caches.sets.clone(),
            caches.deployments.clone(),
        ));
        let controllers = mcm_runtime::sets::run_with(ctx.clone(), stop);
        let companions: Vec<Work> = vec![Box::pin(half.clone().heartbeat(HEARTBEAT))];
        halves.push(HalfRun {
            lease: MANAGER,
            work: with_companions(controllers, companions),
            leading,
            half,
            // The set half makes no cloud call and no drain request.
            tenure: leader::TenureGate::closed(),
        });
    }

    let scrape = Arc::new(Scrape {
        registry,
        namespace: ns.clone(),
        machines: machine_metrics,
        sets: set_metrics,
        process,
        misc,
    });
    let addr: SocketAddr = crate::flags::listen_addr(&common.address, port)
        .map_err(anyhow::Error::msg)
        .context("--address/--port")?;
    let http = tokio::spawn(serve_http(addr, scrape, health.clone()));
    // The /version probe: a task and a client of its own.
    let probe = tokio::spawn(health::probe_api(probe, health.clone()));
    info!(name = plan.name, %addr, "started");

    // Each half campaigns for (and then renews) its own Lease. A half that
    // ends before shutdown (it lost its Lease, or its controllers stopped)
    // ends the process with an error, as the reference does, so the pod
    // restarts and campaigns again; /healthz fails from that moment.
    let mut led: futures::stream::FuturesUnordered<_> = halves
        .into_iter()
        .map(|h| {
            let leases = leases.clone();
            let shutdown = stopper(&rx);
            async move {
                let r = lead(
                    common, leases, h.lease, h.work, h.leading, h.tenure, shutdown,
                )
                .await;
                h.half.election_ended();
                (h.lease, r)
            }
        })
        .collect();
    // Each half: the grace, then the release (bounded by the renew deadline).
    let bound = SHUTDOWN_GRACE + common.leader_elect_renew_deadline + Duration::from_secs(1);
    let outcome = tokio::select! {
        first = led.next() => {
            let reason = match first {
                Some((lease, Err(e))) => format!("{lease}: {e}"),
                Some((lease, Ok(()))) => format!("{lease}: the controllers stopped"),
                None => "no controllers to run".to_string(),
            };
            error!(%reason, "a half is neither leading nor campaigning: stopping the others, then exiting");
            let _ = tx.send(true);
            if tokio::time::timeout(bound, async { while led.next().await.is_some() {} }).await.is_err() {
                warn!("the other controllers did not stop in time");
            }
            Err(anyhow::anyhow!("leader election: {reason}"))
        }
        r = http => {
            match r {
                Ok(Ok(())) => Err(anyhow::anyhow!("the HTTP server stopped")),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(anyhow::anyhow!("the HTTP server failed: {e}")),
            }
        }
        _ = shutdown_signal() => {
            info!("shutting down: letting reconciles in flight finish, then releasing the leases");
            health.stopping();
            let _ = tx.send(true);
            if tokio::time::timeout(bound, async { while led.next().await.is_some() {} }).await.is_err() {
                warn!("the controllers did not stop in time");
            }
            Ok(())
        }
    };
    probe.abort();
    outcome
}

#[cfg(test)]
mod tests;
