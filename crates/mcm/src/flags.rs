//! The command-line flags of the two halves, named and defaulted like the
//! reference's (`machine-controller-manager` and the provider
//! `machine-controller`), plus component-base's log flags and the leader
//! election flags. Flags are parsed the pflag way: `--flag=value` or
//! `--flag value`, and a boolean flag alone (`--leader-elect`) means true.
//!
//! Flags that mcm-rs accepts but does not act on are listed in the README
//! ("Migrating from Gardener MCM") with the reason.

use clap::Args;
use mcm_core::defaults;
use std::time::Duration;

/// Parses a Go duration (`20m`, `1h30m`, `90s`, `0s`) strictly: no blanks, a unit on every
/// number, not negative. clap names the flag in the error and the binary exits non-zero.
pub fn duration(s: &str) -> Result<Duration, String> {
    match mcm_api::parse_duration(s) {
        Ok(d) => Ok(d),
        Err(mcm_api::DurationError::Negative(_)) => Err(format!(
            "{s:?} is negative; a duration here must be 0s or more"
        )),
        Err(e) => Err(format!("{e} (use Go syntax: 20m, 1h30m, 90s)")),
    }
}

/// Errors for the duration flags that must be greater than zero (`0s` would spin a
/// loop, or fail every machine at once).
fn positive(flags: &[(&str, Duration)], errs: &mut Vec<String>) {
    for (flag, value) in flags {
        if value.is_zero() {
            errs.push(format!("--{flag} must be greater than zero: got: 0s"));
        }
    }
}

fn ip(s: &str) -> Result<String, String> {
    listen_addr(s, 0).map(|_| s.to_string())
}

/// The socket address of `--address` and `--port`: an IPv4 or IPv6 literal
/// (`::` serves every interface of both families; `[::1]:port` is how it
/// is written).
pub fn listen_addr(address: &str, port: u16) -> Result<std::net::SocketAddr, String> {
    let ip = address
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .map_err(|_| format!("invalid IP address provided: got {address:?}"))?;
    Ok(std::net::SocketAddr::new(ip, port))
}

fn media_type(s: &str) -> Result<String, String> {
    let essence = s.split(';').next().unwrap_or_default().trim();
    match essence.split_once('/') {
        Some((t, sub)) if !t.is_empty() && !sub.is_empty() && !sub.contains('/') => {
            Ok(s.to_string())
        }
        _ => Err(format!("kube api content type cannot be parsed: {s:?}")),
    }
}

/// A taint key as the API server accepts it (a qualified name): an optional
/// DNS-subdomain prefix and `/`, then a name of at most 63 alphanumerics,
/// `-`, `_`, `.`, starting and ending alphanumeric.
pub fn taint_key(s: &str) -> Result<String, String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    if name_ok && prefix_ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a valid taint key (an optional DNS subdomain and '/', then at most 63 characters [A-Za-z0-9-_.] starting and ending alphanumeric)"
        ))
    }
}

/// Flags both halves have (the reference's shared options, component-base's
/// log flags, leader election) and mcm-rs's own process flags.
#[derive(Args, Debug, Clone)]
pub struct CommonFlags {
    /// Port of /metrics and /healthz (10258 for machine-controller-manager, 10259 for machine-controller and `mcm run`).
    #[arg(long)]
    pub port: Option<u16>,
    /// The IP address to serve on (0.0.0.0 for all interfaces).
    #[arg(long, default_value = "0.0.0.0", value_parser = ip)]
    pub address: String,
    /// The provider for cloud services (accepted, unused: the MachineClass selects the driver).
    #[arg(long, default_value = "")]
    pub cloud_provider: String,
    /// Objects reconciled concurrently per controller (10 for machine-controller-manager, 50 for machine-controller and `mcm run`).
    #[arg(long)]
    pub concurrent_syncs: Option<u16>,
    /// Resync period of the informers (accepted; mcm-rs watches and re-lists on its own schedule).
    #[arg(long, default_value = "12h", value_parser = duration)]
    pub min_resync_period: Duration,
    /// Enable profiling via host:port/debug/pprof/ (accepted; no pprof endpoint).
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set)]
    pub profiling: bool,
    /// Enable lock contention profiling, if profiling is enabled.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set)]
    pub contention_profiling: bool,
    /// Kubeconfig of the cluster whose Nodes the machines become; empty: in-cluster; `none`: no target cluster.
    #[arg(long, env = "MCM_TARGET_KUBECONFIG", default_value = "")]
    pub target_kubeconfig: String,
    /// Kubeconfig of the cluster holding the Machines; `inClusterConfig`: the pod's service account; empty: the same as the target.
    #[arg(long, env = "MCM_CONTROL_KUBECONFIG", default_value = "")]
    pub control_kubeconfig: String,
    /// The control namespace (Machines, MachineClasses, Secrets, the Lease).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Content type of requests to the API server (accepted, validated; mcm-rs speaks JSON).
    #[arg(long, default_value = "application/vnd.kubernetes.protobuf", value_parser = media_type)]
    pub kube_api_content_type: String,
    /// Client-side rate limit of API-server requests per second (both clusters).
    #[arg(long, default_value_t = 20.0)]
    pub kube_api_qps: f32,
    /// Burst of the client-side rate limit (both clusters).
    #[arg(long, default_value_t = 30)]
    pub kube_api_burst: i32,
    /// Interval between starting controller managers (accepted, unused as in the reference).
    #[arg(long, default_value = "0s", value_parser = duration)]
    pub controller_start_interval: Duration,
    /// Log verbosity: 0-2 info, 3-4 debug for mcm-rs's modules, 5 and more trace.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: i32,
    /// Per-module verbosity, `pattern=N,...` (patterns are tracing targets, e.g. `mcm_runtime=4`).
    #[arg(long, default_value = "")]
    pub vmodule: String,
    /// Maximum seconds between log flushes (accepted; logs are written unbuffered).
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub log_flush_frequency: Duration,
    /// Leader election through a Lease before running the controllers.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "true", default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a non-leader waits after the last renewal before taking over.
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader tries to renew before it stops leading.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_elect_renew_deadline: Duration,
    /// Time between acquisition and renewal attempts.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub leader_elect_retry_period: Duration,
    /// The lock object of leader election: only `leases` is supported.
    #[arg(long, default_value = "leases")]
    pub leader_elect_resource_lock: String,
    /// mcm-rs: the first retry period of the per-object backoff.
    #[arg(long, default_value = defaults::MIN_RETRY_PERIOD.flag, value_parser = duration)]
    pub min_retry_period: Duration,
    /// mcm-rs: the last retry period of the per-object backoff.
    #[arg(long, default_value = defaults::MAX_RETRY_PERIOD.flag, value_parser = duration)]
    pub max_retry_period: Duration,
    /// mcm-rs: log as JSON.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set)]
    pub log_json: bool,
}

/// The flags only `machine-controller-manager` has (MachineSets, MachineDeployments, overshoot safety).
#[derive(Args, Debug, Clone)]
pub struct SetFlags {
    /// Extra machines permitted above desired + maxSurge before a set is frozen.
    #[arg(long, default_value_t = defaults::SAFETY_UP)]
    pub safety_up: i32,
    /// How far below the freeze limit the count must fall to unfreeze.
    #[arg(long, default_value_t = defaults::SAFETY_DOWN)]
    pub safety_down: i32,
    /// Period of the overshoot check.
    #[arg(long, default_value = defaults::OVERSHOOTING_PERIOD.flag, value_parser = duration)]
    pub machine_safety_overshooting_period: Duration,
    /// Add the cluster-autoscaler scale-down-disabled annotation (and its `-by-mcm` marker) to the nodes of a MachineDeployment during a rollout (needs a target cluster).
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "true", default_missing_value = "true", action = clap::ArgAction::Set)]
    pub autoscaler_scaledown_annotation_during_rollout: bool,
}

/// The flags only `machine-controller` has (Machines, MachineClasses, orphan and API-server safety).
#[derive(Args, Debug, Clone)]
pub struct MachineFlags {
    /// Time for a new machine to join before it is declared Failed.
    #[arg(long, default_value = defaults::CREATION_TIMEOUT.flag, value_parser = duration)]
    pub machine_creation_timeout: Duration,
    /// Time an unhealthy machine may take to recover before it is declared Failed.
    #[arg(long, default_value = defaults::HEALTH_TIMEOUT.flag, value_parser = duration)]
    pub machine_health_timeout: Duration,
    /// Time to drain a node before the machine is deleted anyway.
    #[arg(long, default_value = defaults::DRAIN_TIMEOUT.flag, value_parser = duration)]
    pub machine_drain_timeout: Duration,
    /// Time an InPlaceUpdating machine may take before it is declared InPlaceUpdateFailed.
    #[arg(long, default_value = defaults::INPLACE_UPDATE_TIMEOUT.flag, value_parser = duration)]
    pub machine_inplace_update_timeout: Duration,
    /// Evictions tried per pod (capped at drain timeout / 20 s) before the drain fails; pods are deleted only by a forced drain.
    #[arg(long, default_value_t = defaults::MAX_EVICT_RETRIES)]
    pub machine_max_evict_retries: i32,
    /// How long a pod's volumes may take to detach.
    #[arg(long, default_value = defaults::PV_DETACH_TIMEOUT.flag, value_parser = duration)]
    pub machine_pv_detach_timeout: Duration,
    /// How long a drain waits for an evicted pod's volumes to attach to another node.
    #[arg(long, default_value = defaults::PV_REATTACH_TIMEOUT.flag, value_parser = duration)]
    pub machine_pv_reattach_timeout: Duration,
    /// How long an API server may be unreachable before machine reconciliation freezes.
    #[arg(long, default_value = defaults::APISERVER_STATUSCHECK_TIMEOUT.flag, value_parser = duration)]
    pub machine_safety_apiserver_statuscheck_timeout: Duration,
    /// How often the API servers are probed.
    #[arg(long, default_value = defaults::APISERVER_STATUSCHECK_PERIOD.flag, value_parser = duration)]
    pub machine_safety_apiserver_statuscheck_period: Duration,
    /// How long a machine annotated `node.machine.sapcloud.io/preserve` is preserved (its spec's `machinePreserveTimeout` wins).
    #[arg(long, default_value = defaults::PRESERVE_TIMEOUT.flag, value_parser = duration)]
    pub machine_preserve_timeout: Duration,
    /// How often orphan VMs are collected.
    #[arg(long, default_value = defaults::ORPHAN_VMS_PERIOD.flag, value_parser = duration)]
    pub machine_safety_orphan_vms_period: Duration,
    /// mcm-rs: how long a VM must be seen without Machine before it is deleted.
    #[arg(long, default_value = defaults::ORPHAN_VMS_GRACE.flag, value_parser = duration)]
    pub machine_safety_orphan_vms_grace: Duration,
    /// Node conditions that make a machine unhealthy unless False.
    #[arg(
        long,
        default_value = defaults::NODE_CONDITIONS
    )]
    pub node_conditions: String,
    /// Extra groups of the bootstrap tokens (`auth-extra-groups`).
    #[arg(long, default_value = "")]
    pub bootstrap_token_auth_extra_groups: String,
    /// Retry period of a creation answered ResourceExhausted (0: the reference's LongRetry, 10m).
    #[arg(long, default_value = defaults::RESOURCE_EXHAUSTED_RETRY.flag, value_parser = duration)]
    pub resource_exhausted_retry: Duration,
    /// mcm-rs: the `NoSchedule` taint a Node registers with and the controller removes once the machine is initialized and its node template is on the Node.
    #[arg(long, default_value = mcm_api::constants::STARTUP_TAINT_KEY, value_parser = taint_key)]
    pub node_startup_taint_key: String,
    /// Provider settings (endpoints of the compiled-in drivers).
    #[command(flatten)]
    pub providers: crate::drivers::ProviderArgs,
}

/// A flag value the reference rejects at start-up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidFlags(pub String);

impl CommonFlags {
    /// The reference's validation of the shared flags.
    pub fn validate(&self) -> Result<(), InvalidFlags> {
        let mut errs = Vec::new();
        if self.port == Some(0) {
            errs.push("--port: invalid port number provided: got 0".to_string());
        }
        if self.concurrent_syncs == Some(0) {
            errs.push(
                "--concurrent-syncs: concurrent syncs should be greater than zero: got: 0".into(),
            );
        }
        if self.contention_profiling && !self.profiling {
            errs.push("contention-profiling cannot be enabled without enabling profiling".into());
        }
        if !self.kube_api_qps.is_finite() || self.kube_api_qps <= 0.0 {
            errs.push(format!(
                "--kube-api-qps: kube api qps should be greater than zero: got: {}",
                self.kube_api_qps
            ));
        }
        if self.kube_api_burst < 0 {
            errs.push(format!(
                "--kube-api-burst: kube api burst should not be a negative value: got: {}",
                self.kube_api_burst
            ));
        }
        if self.control_kubeconfig.is_empty() && self.target_kubeconfig == "none" {
            errs.push(
                "--control-kubeconfig cannot be empty if --target-kubeconfig=none is specified"
                    .into(),
            );
        }
        if self.leader_elect_resource_lock != "leases" {
            errs.push(format!(
                "--leader-elect-resource-lock={}: mcm-rs supports only \"leases\" (the reference's default)",
                self.leader_elect_resource_lock
            ));
        }
        if self.leader_elect {
            let durations = mcm_runtime::leader::election::Durations {
                lease_duration: self.leader_elect_lease_duration,
                renew_deadline: self.leader_elect_renew_deadline,
                retry_period: self.leader_elect_retry_period,
            };
            if let Err(e) = durations.validate() {
                errs.push(e.to_string());
            }
        }
        positive(
            &[
                ("min-retry-period", self.min_retry_period),
                ("max-retry-period", self.max_retry_period),
            ],
            &mut errs,
        );
        if self.min_retry_period > self.max_retry_period {
            errs.push(format!(
                "--min-retry-period ({}) must not exceed --max-retry-period ({})",
                mcm_api::format_duration(self.min_retry_period),
                mcm_api::format_duration(self.max_retry_period)
            ));
        }
        into_result(errs)
    }
}

impl SetFlags {
    /// The reference's validation of the machine-controller-manager flags.
    pub fn validate(&self) -> Result<(), InvalidFlags> {
        let mut errs = Vec::new();
        if self.safety_up < 0 {
            errs.push(format!(
                "--safety-up: safety up should be a non negative value: got: {}",
                self.safety_up
            ));
        }
        if self.safety_down < 0 {
            errs.push(format!(
                "--safety-down: safety down should be a non negative value: got: {}",
                self.safety_down
            ));
        }
        positive(
            &[(
                "machine-safety-overshooting-period",
                self.machine_safety_overshooting_period,
            )],
            &mut errs,
        );
        into_result(errs)
    }
}

impl MachineFlags {
    /// The reference's validation of the machine-controller flags.
    pub fn validate(&self) -> Result<(), InvalidFlags> {
        let mut errs = Vec::new();
        if self.machine_max_evict_retries < 0 {
            errs.push(format!(
                "--machine-max-evict-retries: max evict retries should be a non negative value: got: {}",
                self.machine_max_evict_retries
            ));
        }
        if self.machine_safety_apiserver_statuscheck_period
            < self.machine_safety_apiserver_statuscheck_timeout
        {
            errs.push("--machine-safety-apiserver-statuscheck-period: machine safety APIServer status check period should be greater than or equal to the timeout".into());
        }
        positive(
            &[
                ("machine-creation-timeout", self.machine_creation_timeout),
                ("machine-health-timeout", self.machine_health_timeout),
                (
                    "machine-safety-apiserver-statuscheck-timeout",
                    self.machine_safety_apiserver_statuscheck_timeout,
                ),
                (
                    "machine-safety-apiserver-statuscheck-period",
                    self.machine_safety_apiserver_statuscheck_period,
                ),
                (
                    "machine-safety-orphan-vms-period",
                    self.machine_safety_orphan_vms_period,
                ),
                // 0s would collect a VM the first time it is seen without
                // a Machine (e.g. between CreateMachine and the Machine's
                // providerID write), force every drain at once (pods deleted
                // without eviction), not wait for volumes to detach before
                // the VM goes, or end every preservation as it starts.
                (
                    "machine-safety-orphan-vms-grace",
                    self.machine_safety_orphan_vms_grace,
                ),
                ("machine-drain-timeout", self.machine_drain_timeout),
                ("machine-pv-detach-timeout", self.machine_pv_detach_timeout),
                ("machine-preserve-timeout", self.machine_preserve_timeout),
            ],
            &mut errs,
        );
        errs.extend(self.providers.endpoint_problems());
        into_result(errs)
    }
}

fn into_result(errs: Vec<String>) -> Result<(), InvalidFlags> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(InvalidFlags(errs.join("; ")))
    }
}

/// The `tracing` filter for `--v` and `--vmodule` (`RUST_LOG` wins when set).
pub fn log_filter(verbosity: i32, vmodule: &str) -> String {
    const OURS: [&str; 6] = [
        "mcm",
        "mcm_runtime",
        "mcm_core",
        "mcm_driver",
        "mcm_provider_local",
        "mcm_provider_aws",
    ];
    let ours = |level: &str| {
        OURS.iter()
            .map(|m| format!("{m}={level}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut filter = match verbosity {
        i32::MIN..=2 => "info,kube=warn,hyper=warn".to_string(),
        3..=4 => format!("info,{},kube=warn,hyper=warn", ours("debug")),
        _ => format!("debug,{},hyper=info,h2=info,rustls=info", ours("trace")),
    };
    for part in vmodule.split(',').filter(|p| !p.trim().is_empty()) {
        if let Some((module, level)) = part.split_once('=') {
            let level = match level.trim().parse::<i32>().unwrap_or(0) {
                i32::MIN..=2 => "info",
                3..=4 => "debug",
                _ => "trace",
            };
            filter.push_str(&format!(",{}={level}", module.trim()));
        }
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_takes_ipv4_and_ipv6_literals() {
        assert_eq!(
            listen_addr("::", 10258).map(|a| a.to_string()),
            Ok("[::]:10258".to_string())
        );
        assert_eq!(
            listen_addr("[::1]", 10259).map(|a| a.to_string()),
            Ok("[::1]:10259".to_string())
        );
        assert_eq!(
            listen_addr("0.0.0.0", 10258).map(|a| a.to_string()),
            Ok("0.0.0.0:10258".to_string())
        );
        assert!(listen_addr("localhost", 1).is_err());
    }

    #[test]
    fn startup_taint_keys_are_checked_like_the_api_server_checks_taint_keys() {
        for ok in [
            "node.machine.sapcloud.io/not-initialized",
            "not-initialized",
            "example.com/a_b.c",
        ] {
            assert!(taint_key(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a/",
            "/a",
            "Example.com/a",
            "a b",
            "-a",
            "a/b/c",
            &"x".repeat(64),
        ] {
            assert!(taint_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn verbosity_maps_onto_tracing_levels() {
        assert!(log_filter(2, "").starts_with("info,"));
        assert!(log_filter(3, "").contains("mcm_runtime=debug"));
        assert!(log_filter(5, "").contains("mcm_runtime=trace"));
        assert!(log_filter(0, "mcm_core=4").ends_with(",mcm_core=debug"));
    }

    fn common(args: &[&str]) -> CommonFlags {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            common: CommonFlags,
        }
        let argv = std::iter::once("mcm").chain(args.iter().copied());
        match <Cli as clap::Parser>::try_parse_from(argv) {
            Ok(cli) => cli.common,
            Err(e) => panic!("flags {args:?}: {e}"),
        }
    }

    #[test]
    fn leader_election_durations_are_checked_at_start_up_like_client_go() {
        assert!(common(&[]).validate().is_ok(), "15s / 10s / 2s");
        let err = common(&["--leader-elect-renew-deadline=20s"])
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("--leader-elect-lease-duration (15s) must be greater than --leader-elect-renew-deadline (20s)"),
            "{err}"
        );
        let err = common(&["--leader-elect-retry-period=9s"])
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("--leader-elect-retry-period (9s) times 1.2"),
            "{err}"
        );
        let err = common(&["--leader-elect-retry-period=0s"])
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("--leader-elect-retry-period must be greater than zero"),
            "{err}"
        );
        assert!(
            common(&["--leader-elect=false", "--leader-elect-renew-deadline=20s"])
                .validate()
                .is_ok(),
            "without leader election the durations are unused"
        );
    }

    fn machine(args: &[&str]) -> MachineFlags {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            machine: MachineFlags,
        }
        let argv = std::iter::once("mcm").chain(args.iter().copied());
        match <Cli as clap::Parser>::try_parse_from(argv) {
            Ok(cli) => cli.machine,
            Err(e) => panic!("flags {args:?}: {e}"),
        }
    }

    #[test]
    fn zero_safety_periods_and_timeouts_are_refused_at_start_up() {
        assert!(machine(&[]).validate().is_ok(), "the defaults");
        for flag in [
            "machine-safety-orphan-vms-grace",
            "machine-safety-orphan-vms-period",
            "machine-drain-timeout",
            "machine-pv-detach-timeout",
            "machine-preserve-timeout",
            "machine-creation-timeout",
            "machine-health-timeout",
        ] {
            let arg = format!("--{flag}=0s");
            let err = machine(&[arg.as_str()])
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert_eq!(
                err,
                format!("--{flag} must be greater than zero: got: 0s"),
                "{arg}"
            );
        }
        // Where 0 has a documented meaning it stays accepted.
        assert!(machine(&["--resource-exhausted-retry=0s"])
            .validate()
            .is_ok());
    }

    #[test]
    fn content_type_must_be_a_media_type() {
        assert!(media_type("application/vnd.kubernetes.protobuf").is_ok());
        assert!(media_type("application/json; charset=utf-8").is_ok());
        assert!(media_type("json").is_err());
    }
}
