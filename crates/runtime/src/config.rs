//! Controller settings, named like the reference's flags. Every default
//! comes from `mcm_core::defaults`, which the binary's flags show too, and
//! the binary builds the one [`Config`] of a process from its flags in one
//! function (`runtime_config` in `crates/mcm/src/run.rs`).

pub(crate) use crate::sets::SetsConfig;
use mcm_core::defaults as d;
use mcm_core::machine::{split_conditions, Settings};
use std::time::Duration;

/// Settings of the safety loops (orphan VMs, the API-server freeze).
#[derive(Debug, Clone, PartialEq)]
pub struct SafetyConfig {
    /// How often orphan VMs are looked for (`--machine-safety-orphan-vms-period`).
    pub orphan_period: Duration,
    /// How long a VM must be seen orphaned before it is deleted
    /// (mcm-rs `--machine-safety-orphan-vms-grace`).
    pub orphan_grace: Duration,
    /// How often the API servers are probed (`--machine-safety-apiserver-statuscheck-period`).
    pub apiserver_check_period: Duration,
    /// How long an API server may be unreachable before machine
    /// reconciliation freezes (`--machine-safety-apiserver-statuscheck-timeout`).
    pub apiserver_statuscheck_timeout: Duration,
}

impl Default for SafetyConfig {
    fn default() -> Self {
        SafetyConfig {
            orphan_period: d::ORPHAN_VMS_PERIOD.value,
            orphan_grace: d::ORPHAN_VMS_GRACE.value,
            apiserver_check_period: d::APISERVER_STATUSCHECK_PERIOD.value,
            apiserver_statuscheck_timeout: d::APISERVER_STATUSCHECK_TIMEOUT.value,
        }
    }
}

/// Settings of every controller: the reference's `machine-controller` flags,
/// the shared ones (namespace, concurrency, retry periods) and, in
/// [`Config::sets`], those of `machine-controller-manager`.
#[derive(Debug, Clone, PartialEq)]
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
    /// The safety loops' settings.
    pub safety: SafetyConfig,
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
            creation_timeout: d::CREATION_TIMEOUT.value,
            health_timeout: d::HEALTH_TIMEOUT.value,
            drain_timeout: d::DRAIN_TIMEOUT.value,
            in_place_update_timeout: d::INPLACE_UPDATE_TIMEOUT.value,
            max_evict_retries: d::MAX_EVICT_RETRIES,
            pv_detach_timeout: d::PV_DETACH_TIMEOUT.value,
            pv_reattach_timeout: d::PV_REATTACH_TIMEOUT.value,
            resource_exhausted_retry: d::RESOURCE_EXHAUSTED_RETRY.value,
            preserve_timeout: d::PRESERVE_TIMEOUT.value,
            node_conditions: d::NODE_CONDITIONS.into(),
            bootstrap_token_auth_extra_groups: String::new(),
            concurrent_syncs: d::CONCURRENT_SYNCS_MACHINES,
            safety: SafetyConfig::default(),
            eviction_retry_interval: d::EVICTION_RETRY_INTERVAL.value,
            short_retry: d::MIN_RETRY_PERIOD.value,
            long_retry: d::MAX_RETRY_PERIOD.value,
            sets: SetsConfig::default(),
            startup_taint_key: mcm_api::constants::STARTUP_TAINT_KEY.into(),
        }
    }
}

impl Config {
    /// The settings for machines that do not override them.
    pub(crate) fn default_settings(&self) -> Settings {
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
