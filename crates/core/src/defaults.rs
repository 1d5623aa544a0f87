//! The one source of every default setting: the reference's flag defaults.
//!
//! Each duration is written once, in the flags' Go syntax, and parsed at
//! compile time ([`GoDefault::go`]): the binary's flags show `flag`, the
//! runtime's `Config::default` and a machine's [`Settings`](crate::machine::Settings)
//! use `value`, so the two cannot drift (design: process-contract.md, "Flags").

use std::time::Duration;

/// A default duration: its flag text and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDefault {
    /// The text a flag shows and parses (`20m`).
    pub flag: &'static str,
    /// The parsed value.
    pub value: Duration,
}

impl GoDefault {
    /// Parses a Go duration of whole numbers with the units `h`, `m`, `s` and
    /// `ms` (`96h`, `1h30m`, `90s`, `0s`). Private and used in the `const`
    /// items below only, so a malformed default fails the build, never a run.
    #[allow(
        clippy::panic,
        reason = "evaluated at compile time only: a panic here is a build error"
    )]
    const fn go(flag: &'static str) -> GoDefault {
        let b = flag.as_bytes();
        assert!(!b.is_empty(), "empty duration");
        let mut i = 0;
        let mut millis: u64 = 0;
        while i < b.len() {
            let mut n: u64 = 0;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                n = n * 10 + (b[i] - b'0') as u64;
                i += 1;
            }
            assert!(i > start, "a number must come before each unit");
            assert!(i < b.len(), "a unit must follow each number");
            let unit: u64 = match b[i] {
                b'h' => 3_600_000,
                b'm' if i + 1 < b.len() && b[i + 1] == b's' => {
                    i += 1;
                    1
                }
                b'm' => 60_000,
                b's' => 1000,
                _ => panic!("unknown unit"),
            };
            i += 1;
            millis += n * unit;
        }
        GoDefault {
            flag,
            value: Duration::from_millis(millis),
        }
    }
}

// The machine controller (`machine-controller`).

/// `--machine-creation-timeout`.
pub const CREATION_TIMEOUT: GoDefault = GoDefault::go("20m");
/// `--machine-health-timeout`.
pub const HEALTH_TIMEOUT: GoDefault = GoDefault::go("10m");
/// `--machine-drain-timeout`.
pub const DRAIN_TIMEOUT: GoDefault = GoDefault::go("2h");
/// `--machine-inplace-update-timeout`.
pub const INPLACE_UPDATE_TIMEOUT: GoDefault = GoDefault::go("20m");
/// `--machine-max-evict-retries`.
pub const MAX_EVICT_RETRIES: i32 = 360;
/// `--machine-pv-detach-timeout`.
pub const PV_DETACH_TIMEOUT: GoDefault = GoDefault::go("2m");
/// `--machine-pv-reattach-timeout`.
pub const PV_REATTACH_TIMEOUT: GoDefault = GoDefault::go("90s");
/// `--resource-exhausted-retry`.
pub const RESOURCE_EXHAUSTED_RETRY: GoDefault = GoDefault::go("10m");
/// `--machine-preserve-timeout`.
pub const PRESERVE_TIMEOUT: GoDefault = GoDefault::go("96h");
/// `--node-conditions`.
pub const NODE_CONDITIONS: &str =
    "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable";
/// `--machine-safety-orphan-vms-period`.
pub const ORPHAN_VMS_PERIOD: GoDefault = GoDefault::go("15m");
/// mcm-rs `--machine-safety-orphan-vms-grace`.
pub const ORPHAN_VMS_GRACE: GoDefault = GoDefault::go("10m");
/// `--machine-safety-apiserver-statuscheck-timeout`.
pub const APISERVER_STATUSCHECK_TIMEOUT: GoDefault = GoDefault::go("30s");
/// `--machine-safety-apiserver-statuscheck-period`.
pub const APISERVER_STATUSCHECK_PERIOD: GoDefault = GoDefault::go("1m");
/// `--concurrent-syncs` of the machine controller.
pub const CONCURRENT_SYNCS_MACHINES: u16 = 50;
/// The reference's eviction retry interval (no flag).
pub const EVICTION_RETRY_INTERVAL: GoDefault = GoDefault::go("20s");

// The set controllers (`machine-controller-manager`).

/// `--safety-up`.
pub const SAFETY_UP: i32 = 2;
/// `--safety-down`.
pub const SAFETY_DOWN: i32 = 1;
/// `--machine-safety-overshooting-period`.
pub const OVERSHOOTING_PERIOD: GoDefault = GoDefault::go("1m");
/// The periodic re-reconcile of every set and deployment (no flag).
pub const RESYNC_PERIOD: GoDefault = GoDefault::go("10m");
/// `--concurrent-syncs` of the set controllers.
pub const CONCURRENT_SYNCS_SETS: u16 = 10;

// Both halves.

/// `--min-retry-period`: the shortest retry; backoff starts here.
pub const MIN_RETRY_PERIOD: GoDefault = GoDefault::go("5s");
/// `--max-retry-period`: the longest retry; backoff stops here.
pub const MAX_RETRY_PERIOD: GoDefault = GoDefault::go("10m");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_defaults_parse_every_unit_and_sums_of_them() {
        assert_eq!(GoDefault::go("96h").value, Duration::from_secs(96 * 3600));
        assert_eq!(GoDefault::go("1h30m").value, Duration::from_secs(5400));
        assert_eq!(GoDefault::go("90s").value, Duration::from_secs(90));
        assert_eq!(GoDefault::go("250ms").value, Duration::from_millis(250));
        assert_eq!(GoDefault::go("0s").value, Duration::ZERO);
    }

    #[test]
    fn go_defaults_agree_with_the_runtime_duration_parser() {
        for d in [
            CREATION_TIMEOUT,
            HEALTH_TIMEOUT,
            DRAIN_TIMEOUT,
            INPLACE_UPDATE_TIMEOUT,
            PV_DETACH_TIMEOUT,
            PV_REATTACH_TIMEOUT,
            RESOURCE_EXHAUSTED_RETRY,
            PRESERVE_TIMEOUT,
            ORPHAN_VMS_PERIOD,
            ORPHAN_VMS_GRACE,
            APISERVER_STATUSCHECK_TIMEOUT,
            APISERVER_STATUSCHECK_PERIOD,
            EVICTION_RETRY_INTERVAL,
            OVERSHOOTING_PERIOD,
            RESYNC_PERIOD,
            MIN_RETRY_PERIOD,
            MAX_RETRY_PERIOD,
        ] {
            assert_eq!(
                crate::machine::parse_go_duration(d.flag),
                Some(d.value),
                "{}",
                d.flag
            );
        }
    }
}
