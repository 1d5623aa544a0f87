//! The configuration of the local cloud server: `mcm local-cloud serve`'s
//! flags ([`ServeArgs`]) and what [`super::spawn`] takes ([`CloudConfig`]).

use crate::tunables::{Op, Tunables};
use crate::Error;
use k8s_openapi::api::core::v1::Taint;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The default port of `mcm local-cloud serve`.
pub const DEFAULT_PORT: u16 = 7070;
/// The default zone of instances whose spec names none.
pub const DEFAULT_ZONE: &str = "local-1a";

/// Parses a duration: `250ms`, `10s`, `2m`, `1h`, or a plain number of milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 500ms, 10s, 2m)"))?;
    let ms = match unit.trim() {
        "" | "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("{text:?}: unknown unit (use ms, s, m or h)")),
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Arguments of `mcm local-cloud serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// The address to listen on. The API has no authentication: keep it on loopback.
    #[arg(
        long,
        env = "MCM_LOCAL_CLOUD_LISTEN_ADDRESS",
        default_value = "127.0.0.1"
    )]
    pub listen_address: IpAddr,
    /// A host name requests may use besides loopback names and addresses and
    /// the listen address (repeatable; requests naming another Host are refused).
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// The port to listen on (0 picks a free one).
    #[arg(long, env = "MCM_LOCAL_CLOUD_PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The redb file holding the cloud's state (created when missing).
    #[arg(
        long,
        env = "MCM_LOCAL_CLOUD_STORE",
        default_value = ".mcm/local-cloud.redb"
    )]
    pub store: PathBuf,
    /// The kubeconfig of the cluster where the simulated kubelets register Nodes
    /// and renew Leases; `none` turns the kubelet simulation off.
    #[arg(long, env = "MCM_LOCAL_CLOUD_TARGET_KUBECONFIG")]
    pub target_kubeconfig: Option<PathBuf>,
    /// The zone of instances whose providerSpec names none.
    #[arg(long, default_value = DEFAULT_ZONE)]
    pub zone: String,
    /// A JSON tunables file (see `GET /admin/faults` for the format), merged onto the defaults.
    #[arg(long, env = "MCM_LOCAL_CLOUD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Time from launch to running and Node registration (overrides the config file).
    #[arg(long, value_parser = parse_duration)]
    pub boot_delay: Option<Duration>,
    /// How long a new instance stays invisible to status/list/initialize (overrides the config file).
    #[arg(long, value_parser = parse_duration)]
    pub eventual_consistency: Option<Duration>,
    /// Lift all rate limits (the defaults mirror EC2's published API limits).
    #[arg(long)]
    pub no_rate_limits: bool,
    /// How often a simulated kubelet renews its Lease.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub heartbeat_interval: Duration,
    /// How often a simulated kubelet refreshes its Node's Ready condition (default: the heartbeat interval).
    #[arg(long, value_parser = parse_duration)]
    pub node_status_interval: Option<Duration>,
    /// The simulated kubelets' `--register-with-taints` (`key=value:Effect`, comma-separated; empty for none): the startup taint by default.
    #[arg(long, default_value = DEFAULT_REGISTER_WITH_TAINTS, value_parser = parse_taints)]
    pub register_with_taints: Taints,
}

/// The default `--register-with-taints`: the startup taint mcm-rs removes.
pub const DEFAULT_REGISTER_WITH_TAINTS: &str =
    "node.machine.sapcloud.io/not-initialized=:NoSchedule";

/// A parsed `--register-with-taints` list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Taints(pub Vec<Taint>);

/// Parses the kubelet's `--register-with-taints` syntax: `key=value:Effect`
/// or `key:Effect`, comma-separated; the empty string is no taint.
pub fn parse_taints(s: &str) -> Result<Taints, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (kv, effect) = item
            .rsplit_once(':')
            .ok_or_else(|| format!("taint {item:?} has no effect (key=value:Effect)"))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!("taint {item:?}: unknown effect {effect:?}"));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, (!v.is_empty()).then(|| v.to_string())),
            None => (kv, None),
        };
        if key.is_empty() {
            return Err(format!("taint {item:?} has no key"));
        }
        out.push(Taint {
            key: key.to_string(),
            value,
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(Taints(out))
}

impl ServeArgs {
    /// The server configuration these arguments describe (reads the config file).
    pub fn to_config(&self) -> Result<CloudConfig, Error> {
        let mut tunables = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| Error::Config {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                let doc: serde_json::Value =
                    serde_json::from_str(&text).map_err(|e| Error::Config {
                        path: path.clone(),
                        message: e.to_string(),
                    })?;
                Tunables::merged(&Tunables::default(), &doc).map_err(|e| Error::Config {
                    path: path.clone(),
                    message: e.to_string(),
                })?
            }
            None => Tunables::default(),
        };
        if let Some(d) = self.boot_delay {
            tunables.boot_delay_ms = millis(d);
        }
        if let Some(d) = self.eventual_consistency {
            tunables.eventual_consistency_ms = millis(d);
        }
        if self.no_rate_limits {
            for op in Op::ALL {
                tunables.op_mut(op).rate_limit = None;
            }
        }
        Ok(CloudConfig {
            listen: SocketAddr::new(self.listen_address, self.port),
            allowed_hosts: self.allowed_hosts.clone(),
            store_path: self.store.clone(),
            zone: self.zone.clone(),
            target_kubeconfig: self
                .target_kubeconfig
                .clone()
                .filter(|p| !p.as_os_str().is_empty() && p.as_os_str() != "none"),
            heartbeat_interval: self.heartbeat_interval,
            node_status_interval: self.node_status_interval,
            tunables,
            register_with_taints: self.register_with_taints.0.clone(),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The configuration of a server started with [`spawn`].
#[derive(Debug, Clone)]
pub struct CloudConfig {
    /// Where to listen (port 0 picks a free one).
    pub listen: SocketAddr,
    /// Host names requests may use besides loopback ones and the listen address.
    pub allowed_hosts: Vec<String>,
    /// The redb store file.
    pub store_path: PathBuf,
    /// The zone of instances whose spec names none.
    pub zone: String,
    /// The target cluster of the simulated kubelets (`None` = off).
    pub target_kubeconfig: Option<PathBuf>,
    /// Lease renewal period of the simulated kubelets.
    pub heartbeat_interval: Duration,
    /// Node Ready-condition refresh period (default: `heartbeat_interval`).
    pub node_status_interval: Option<Duration>,
    /// Latency, rate limits, faults, boot delay, eventual consistency.
    pub tunables: Tunables,
    /// The taints the simulated kubelets register new Nodes with (default:
    /// the startup taint `node.machine.sapcloud.io/not-initialized:NoSchedule`).
    pub register_with_taints: Vec<Taint>,
}

impl CloudConfig {
    /// 127.0.0.1 on a free port, the given store, default tunables, no kubelets.
    pub fn new(store_path: impl Into<PathBuf>) -> Self {
        CloudConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            allowed_hosts: Vec::new(),
            store_path: store_path.into(),
            zone: DEFAULT_ZONE.to_string(),
            target_kubeconfig: None,
            heartbeat_interval: Duration::from_secs(10),
            node_status_interval: None,
            tunables: Tunables::default(),
            register_with_taints: parse_taints(DEFAULT_REGISTER_WITH_TAINTS)
                .map(|t| t.0)
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("42"), Ok(Duration::from_millis(42)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn register_with_taints_parses_the_kubelet_syntax() {
        let t = parse_taints(DEFAULT_REGISTER_WITH_TAINTS)
            .expect("default")
            .0;
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].key, "node.machine.sapcloud.io/not-initialized");
        assert_eq!(t[0].value, None);
        assert_eq!(t[0].effect, "NoSchedule");
        let t = parse_taints("a=b:NoExecute, c:NoSchedule").expect("two").0;
        assert_eq!((t[0].value.as_deref(), t[1].key.as_str()), (Some("b"), "c"));
        assert_eq!(parse_taints("").expect("none").0, vec![]);
        assert!(parse_taints("a=b").is_err());
        assert!(parse_taints("a:Sometimes").is_err());
        assert!(parse_taints("=x:NoSchedule").is_err());
    }

    #[test]
    fn serve_args_parse_with_defaults() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let cli =
            Cli::try_parse_from(["x", "--port", "0", "--boot-delay", "1s", "--no-rate-limits"])
                .expect("parses");
        assert_eq!(cli.serve.target_kubeconfig, None);
        let c = cli.serve.to_config().expect("config");
        assert_eq!(c.tunables.boot_delay_ms, 1000);
        assert!(c.tunables.create.rate_limit.is_none());
        assert_eq!(c.listen.port(), 0);
        let cli = Cli::try_parse_from(["x", "--target-kubeconfig", "/k"]).expect("parses");
        assert_eq!(
            cli.serve.to_config().expect("config").target_kubeconfig,
            Some(PathBuf::from("/k"))
        );
        let cli = Cli::try_parse_from(["x", "--target-kubeconfig", "none"]).expect("parses");
        assert_eq!(
            cli.serve.to_config().expect("config").target_kubeconfig,
            None
        );
    }
}
