//! `mcm run`: the controllers, with the reference's flag names and defaults.

use anyhow::{bail, Context as _};
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use mcm_runtime::{leader, metrics::Metrics, safety, Context, DriverRegistry};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

fn duration(s: &str) -> Result<Duration, String> {
    mcm_core::machine::parse_go_duration(s)
        .ok_or_else(|| format!("invalid duration {s:?} (use Go syntax: 20m, 1h30m, 90s)"))
}

/// Flags of `mcm run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Kubeconfig of the cluster holding Machines (default: in-cluster / $KUBECONFIG).
    #[arg(long, env = "MCM_CONTROL_KUBECONFIG", default_value = "")]
    pub control_kubeconfig: String,
    /// Kubeconfig of the cluster whose Nodes the machines become; `none` runs without one.
    #[arg(long, env = "MCM_TARGET_KUBECONFIG", default_value = "")]
    pub target_kubeconfig: String,
    /// The control namespace.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Address of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, default_value = "0.0.0.0")]
    pub address: String,
    /// Port of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, default_value_t = 10259)]
    pub port: u16,
    /// Concurrent machine reconciles.
    #[arg(long, default_value_t = 50)]
    pub concurrent_syncs: u16,
    /// Creation timeout.
    #[arg(long, default_value = "20m", value_parser = duration)]
    pub machine_creation_timeout: Duration,
    /// Health timeout.
    #[arg(long, default_value = "10m", value_parser = duration)]
    pub machine_health_timeout: Duration,
    /// Drain timeout.
    #[arg(long, default_value = "2h", value_parser = duration)]
    pub machine_drain_timeout: Duration,
    /// Eviction retries.
    #[arg(long, default_value_t = 360)]
    pub machine_max_evict_retries: i32,
    /// How long a pod's volumes may take to detach.
    #[arg(long, default_value = "2m", value_parser = duration)]
    pub machine_pv_detach_timeout: Duration,
    /// How long an API server may be unreachable before machine reconciliation freezes.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub machine_safety_apiserver_statuscheck_timeout: Duration,
    /// How often the API servers are probed.
    #[arg(long, default_value = "1m", value_parser = duration)]
    pub machine_safety_apiserver_statuscheck_period: Duration,
    /// How often orphan VMs are collected.
    #[arg(long, default_value = "15m", value_parser = duration)]
    pub machine_safety_orphan_vms_period: Duration,
    /// How long a VM must be seen without Machine before it is deleted.
    #[arg(long, default_value = "10m", value_parser = duration)]
    pub machine_safety_orphan_vms_grace: Duration,
    /// Node conditions that make a machine unhealthy unless False.
    #[arg(
        long,
        default_value = "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
    )]
    pub node_conditions: String,
    /// Extra groups of the bootstrap tokens.
    #[arg(long, default_value = "")]
    pub bootstrap_token_auth_extra_groups: String,
    /// The first retry period of the per-machine backoff.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub min_retry_period: Duration,
    /// The last retry period of the per-machine backoff.
    #[arg(long, default_value = "10m", value_parser = duration)]
    pub max_retry_period: Duration,
    /// Leader election through a Lease.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Lease duration.
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_elect_lease_duration: Duration,
    /// Renew deadline.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_elect_renew_deadline: Duration,
    /// Retry period.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub leader_elect_retry_period: Duration,
    /// URL of the local cloud (the `local` provider).
    #[arg(
        long,
        env = "MCM_LOCAL_CLOUD_URL",
        default_value = "http://127.0.0.1:7070"
    )]
    pub local_cloud_url: String,
    /// EC2 endpoint override (moto, EC2-compatible clouds).
    #[arg(long, env = "MCM_AWS_ENDPOINT")]
    pub aws_endpoint: Option<String>,
    /// Log as JSON.
    #[arg(long)]
    pub log_json: bool,
}

async fn client_from(path: &str) -> anyhow::Result<Client> {
    let config = if path.is_empty() {
        Config::infer()
            .await
            .context("no kubeconfig: pass --control-kubeconfig or set KUBECONFIG")?
    } else {
        let kc = Kubeconfig::read_from(PathBuf::from(path))
            .with_context(|| format!("reading kubeconfig {path}"))?;
        Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
    };
    Ok(Client::try_from(config)?)
}

fn drivers(args: &RunArgs) -> anyhow::Result<DriverRegistry> {
    let mut reg = DriverRegistry::new();
    reg.register(
        "local",
        Arc::new(mcm_provider_local::LocalDriver::new(&args.local_cloud_url)?),
    );
    #[cfg(feature = "aws")]
    {
        let config = mcm_provider_aws::AwsDriverConfig {
            endpoint_url: args.aws_endpoint.clone(),
            ..Default::default()
        };
        reg.register("aws", Arc::new(mcm_provider_aws::AwsDriver::new(config)));
    }
    Ok(reg)
}

async fn serve_http(
    addr: SocketAddr,
    registry: Arc<Registry>,
    sets: Arc<mcm_runtime::metrics::SetMetrics>,
    client: Client,
    namespace: String,
) -> anyhow::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let (r, sets, client, ns) = (
                    registry.clone(),
                    sets.clone(),
                    client.clone(),
                    namespace.clone(),
                );
                async move {
                    // MachineSet/MachineDeployment series are collected on scrape.
                    if let Err(e) = sets.refresh(&client, &ns).await {
                        warn!(error = %e, "collecting MachineSet/MachineDeployment metrics failed");
                    }
                    mcm_runtime::metrics::encode(&r)
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }));
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

/// Runs all controllers until SIGINT/SIGTERM (or lost leadership).
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.target_kubeconfig == "none" && args.control_kubeconfig.is_empty() {
        bail!("--control-kubeconfig is required when --target-kubeconfig is none");
    }
    if args.machine_safety_apiserver_statuscheck_period
        < args.machine_safety_apiserver_statuscheck_timeout
    {
        bail!("--machine-safety-apiserver-statuscheck-period must be at least the status-check timeout");
    }
    let control = client_from(&args.control_kubeconfig).await?;
    let target = match args.target_kubeconfig.as_str() {
        "none" => None,
        "" => Some(control.clone()),
        path => Some(client_from(path).await?),
    };
    let config = mcm_runtime::Config {
        namespace: args.namespace.clone(),
        creation_timeout: args.machine_creation_timeout,
        health_timeout: args.machine_health_timeout,
        drain_timeout: args.machine_drain_timeout,
        max_evict_retries: args.machine_max_evict_retries,
        pv_detach_timeout: args.machine_pv_detach_timeout,
        node_conditions: args.node_conditions.clone(),
        bootstrap_token_auth_extra_groups: args.bootstrap_token_auth_extra_groups.clone(),
        concurrent_syncs: args.concurrent_syncs,
        orphan_vms_period: args.machine_safety_orphan_vms_period,
        apiserver_statuscheck_timeout: args.machine_safety_apiserver_statuscheck_timeout,
        short_retry: args.min_retry_period,
        long_retry: args.max_retry_period,
        ..Default::default()
    };
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let set_metrics = mcm_runtime::metrics::SetMetrics::new(&mut registry);
    let registry = Arc::new(registry);
    let drivers = drivers(&args)?;
    info!(providers = ?drivers.providers(), namespace = %args.namespace, target = target.is_some(), "starting mcm");
    let ctx = Context::new(control.clone(), target, config, drivers, metrics);
    let addr: SocketAddr = format!("{}:{}", args.address, args.port)
        .parse()
        .context("--address/--port")?;
    let http = tokio::spawn(serve_http(
        addr,
        registry,
        set_metrics,
        control.clone(),
        args.namespace.clone(),
    ));
    let safety_cfg = safety::SafetyConfig {
        orphan_period: args.machine_safety_orphan_vms_period,
        orphan_grace: args.machine_safety_orphan_vms_grace,
        apiserver_check_period: args.machine_safety_apiserver_statuscheck_period,
    };
    let ns = args.namespace.clone();
    let controllers = {
        let ctx = ctx.clone();
        let control = control.clone();
        async move {
            let (tx, rx) = tokio::sync::watch::channel(false);
            let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
                let _ = rx.wait_for(|v| *v).await;
            };
            let machines = mcm_runtime::machine::run(ctx.clone(), stop(rx.clone()));
            let classes = mcm_runtime::class::run(control.clone(), ns.clone(), stop(rx.clone()));
            let sets = mcm_runtime::sets::run_until(
                control.clone(),
                ns.clone(),
                mcm_runtime::sets::SetsConfig::default(),
                stop(rx.clone()),
            );
            let safety_loop = safety::run(ctx.clone(), safety_cfg);
            let all = async { tokio::join!(machines, classes, sets) };
            tokio::pin!(all);
            tokio::select! {
                _ = &mut all => warn!("controllers stopped"),
                _ = safety_loop => {},
                _ = shutdown_signal() => {
                    info!("shutting down: letting reconciles in flight finish");
                    let _ = tx.send(true);
                    let _ = tokio::time::timeout(Duration::from_secs(10), all).await;
                }
            }
        }
    };
    let result = if args.leader_elect {
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("mcm-{:08x}", rand::random::<u32>()));
        let lc = leader::LeaderConfig {
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
            ..leader::LeaderConfig::new(&args.namespace, &identity)
        };
        tokio::select! {
            r = leader::run_as_leader(control, lc, controllers) => r.map_err(anyhow::Error::from),
            _ = shutdown_signal() => Ok(()),
        }
    } else {
        controllers.await;
        Ok(())
    };
    http.abort();
    result
}
