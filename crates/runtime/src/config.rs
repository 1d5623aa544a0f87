//! Controller settings, named and defaulted like the reference's flags.

use mcm_core::machine::{split_conditions, Settings};
use std::time::Duration;

/// Settings of the machine controller (the reference's `machine-controller` flags).
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
    /// `--machine-max-evict-retries` (360).
    pub max_evict_retries: i32,
    /// `--machine-pv-detach-timeout` (2m).
    pub pv_detach_timeout: Duration,
    /// `--machine-preserve-timeout` (96h): how long a machine stays preserved.
    pub preserve_timeout: Duration,
    /// `--node-conditions`.
    pub node_conditions: String,
    /// `--bootstrap-token-auth-extra-groups`.
    pub bootstrap_token_auth_extra_groups: String,
    /// `--concurrent-syncs` (50).
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: "default".into(),
            creation_timeout: Duration::from_secs(20 * 60),
            health_timeout: Duration::from_secs(10 * 60),
            drain_timeout: Duration::from_secs(2 * 3600),
            max_evict_retries: 360,
            pv_detach_timeout: Duration::from_secs(120),
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
