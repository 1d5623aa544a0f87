//! Controller settings, named and defaulted like the reference's flags.

pub use crate::sets::SetsConfig;
use mcm_core::machine::{split_conditions, Settings};
use std::time::Duration;

/// Settings of every controller: the reference's `machine-controller` flags,
/// the shared ones (namespace, concurrency, retry periods) and, in
/// [`Config::sets`], those of `machine-controller-manager`.
#[derive(Debug, Clone)]
pub struct Config {
    /// The control namespace (`--namespace`).
    pub namespace: String,
    /// `--machine-creation-timeout` (20m).
    pub creation_timeout: Duration,
    /// `--machine-health-timeout` (10m).
    pub health_timeout: Duration,
    /// `--machine-drain-timeout` (2h).
    pub drain_timeout: Duration,
    /// `--machine-inplace-update-timeout` (20m).
    pub in_place_update_timeout: Duration,
    /// `--machine-max-evict-retries` (360).
    pub max_evict_retries: i32,
    /// `--machine-pv-detach-timeout` (2m).
    pub pv_detach_timeout: Duration,
    /// `--machine-pv-reattach-timeout` (90s): how long a drain waits for an
    /// evicted pod's volumes to attach to another Node.
    pub pv_reattach_timeout: Duration,
    /// `--resource-exhausted-retry` (10m; 0 = 10m): when a creation answered
    /// `ResourceExhausted` is tried again.
    pub resource_exhausted_retry: Duration,
    /// `--machine-preserve-timeout` (96h): how long a machine stays preserved.
    pub preserve_timeout: Duration,
    /// `--node-conditions`.
    pub node_conditions: String,
    /// `--bootstrap-token-auth-extra-groups`.
    pub bootstrap_token_auth_extra_groups: String,
    /// `--concurrent-syncs`: reconciles running at once per controller (50
    /// for machines in the reference, 10 for sets; one value per process).
    pub concurrent_syncs: u16,
    /// `--machine-safety-orphan-vms-period` (15m).
    pub orphan_vms_period: Duration,
    /// `--machine-safety-apiserver-statuscheck-timeout` (30s).
    pub apiserver_statuscheck_timeout: Duration,
    /// The eviction retry interval (20s in the reference).
    pub eviction_retry_interval: Duration,
    /// The shortest retry period (5s); backoff starts here.
    pub short_retry: Duration,
    /// The longest retry period (10m); backoff stops here.
    pub long_retry: Duration,
    /// The MachineSet / MachineDeployment / overshoot-safety settings.
    pub sets: SetsConfig,
    /// mcm-rs `--node-startup-taint-key`: the `NoSchedule` taint removed from
    /// a machine's Node once it is initialized and its node template is on it
    /// (design: startup-taint.md).
    pub startup_taint_key: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: "default".into(),
            creation_timeout: Duration::from_secs(20 * 60),
            health_timeout: Duration::from_secs(10 * 60),
            drain_timeout: Duration::from_secs(2 * 3600),
            in_place_update_timeout: Duration::from_secs(20 * 60),
            max_evict_retries: 360,
            pv_detach_timeout: Duration::from_secs(120),
            pv_reattach_timeout: Duration::from_secs(90),
            resource_exhausted_retry: Duration::from_secs(600),
            preserve_timeout: Duration::from_secs(96 * 3600),
            node_conditions: "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
                .into(),
            bootstrap_token_auth_extra_groups: String::new(),
            concurrent_syncs: 50,
            orphan_vms_period: Duration::from_secs(15 * 60),
            apiserver_statuscheck_timeout: Duration::from_secs(30),
            eviction_retry_interval: Duration::from_secs(20),
            short_retry: Duration::from_secs(5),
            long_retry: Duration::from_secs(600),
            sets: SetsConfig::default(),
            startup_taint_key: mcm_api::constants::STARTUP_TAINT_KEY.into(),
        }
    }
}

impl Config {
    /// The settings for machines that do not override them.
    pub fn default_settings(&self) -> Settings {
        Settings {
            creation_timeout: self.creation_timeout,
            health_timeout: self.health_timeout,
            drain_timeout: self.drain_timeout,
            max_evict_retries: self.max_evict_retries,
            node_conditions: split_conditions(&self.node_conditions),
            disable_health_timeout: false,
        }
    }
}
