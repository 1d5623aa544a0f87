//! The one rule for tests that need a service from outside the test binary
//! (the control plane, moto, helm, downloaded samples, ...): in CI a missing
//! service fails the test; elsewhere the test is skipped, visibly.
//!
//! "CI" is the `CI` variable set to any non-empty value other than `false` or
//! `0` (`CI=true`, `CI=1`, `CI=yes` all count), so no CI system can go green on
//! skipped tests. A skip prints one line to stderr:
//! `SKIPPED: <test> needs <service>: <why>` (`cargo test -- --nocapture` or a
//! failing neighbour shows it; `grep SKIPPED` finds them all).

use std::fmt::Display;

/// The services the tests need, as the skip and failure messages name them
/// (each with the command that provides it).
pub mod service {
    /// The kube-apiserver/etcd control plane.
    pub const CONTROL_PLANE: &str =
        "the test control plane (hack/testenv.sh up, or bash hack/test.sh)";
    /// moto, the AWS fake, announced in `MCM_AWS_TEST_ENDPOINT`.
    pub const MOTO: &str = "moto (source hack/moto.sh; start_moto)";
    /// helm, for the chart tests.
    pub const HELM: &str = "helm (bash hack/build-helm.sh)";
    /// The control-plane binaries built into `~/.cache/mcm-kube-testenv`.
    pub const CONTROL_PLANE_BINARIES: &str =
        "the control-plane binaries (hack/testenv.sh up builds them)";
    /// The OpenStack API samples (pip download of the nova/neutron sources).
    pub const OPENSTACK_SAMPLES: &str =
        "the OpenStack API samples (pip download nova, neutron-lib)";
}

/// Whether `value` (the `CI` variable, if set) means "this is CI".
pub fn ci_value_means_ci(value: Option<&str>) -> bool {
    match value.map(str::trim) {
        None | Some("") | Some("0") => false,
        Some(v) => !v.eq_ignore_ascii_case("false"),
    }
}

/// Whether this run is CI, where a missing service fails the test.
pub fn is_ci() -> bool {
    ci_value_means_ci(std::env::var("CI").ok().as_deref())
}

/// The decision for a test whose `service` is missing: panics (with the
/// reason and the command that provides the service) in CI, else prints
/// `SKIPPED: <test> needs <service>: <why>` to stderr and returns, so the
/// caller returns from the test.
pub fn skip_or_fail(test: &str, service: &str, why: impl Display) {
    skip_or_fail_in(is_ci(), test, service, why)
}

/// [`skip_or_fail`] with the CI decision given (for its own tests).
#[allow(clippy::panic, reason = "failing the calling test is the point in CI")]
pub fn skip_or_fail_in(ci: bool, test: &str, service: &str, why: impl Display) {
    if ci {
        panic!("{test} needs {service} and CI is set, so it may not skip: {why}");
    }
    eprintln!("SKIPPED: {test} needs {service}: {why}");
}

/// `Some(value)` when the service was found; otherwise [`skip_or_fail`] and `None`:
/// `let Some(x) = require("my_test", service::HELM, find_helm()) else { return };`
pub fn require<T, E: Display>(test: &str, service: &str, found: Result<T, E>) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(why) => {
            skip_or_fail(test, service, why);
            None
        }
    }
}

/// The name of the running test: libtest names each test's thread after it
/// (`module::test_name`); `"this test"` elsewhere.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("this test")
        .to_string()
}

/// The moto endpoint from `MCM_AWS_TEST_ENDPOINT` (set by `start_moto`), or
/// [`skip_or_fail`] and `None`.
pub fn moto_endpoint(test: &str) -> Option<String> {
    let found = match std::env::var("MCM_AWS_TEST_ENDPOINT") {
        Ok(e) if !e.is_empty() => Ok(e),
        _ => Err("MCM_AWS_TEST_ENDPOINT is not set"),
    };
    require(test, service::MOTO, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_ci_value_but_false_or_zero_means_ci() {
        for v in ["true", "1", "yes", "TRUE", "gitlab"] {
            assert!(ci_value_means_ci(Some(v)), "{v}");
        }
        for v in [
            None,
            Some(""),
            Some("0"),
            Some("false"),
            Some("False"),
            Some(" "),
        ] {
            assert!(!ci_value_means_ci(v), "{v:?}");
        }
    }

    #[test]
    #[should_panic(expected = "a_test needs moto (source hack/moto.sh; start_moto) and CI is set")]
    fn a_missing_service_fails_the_test_in_ci() {
        skip_or_fail_in(
            true,
            "a_test",
            service::MOTO,
            "MCM_AWS_TEST_ENDPOINT is not set",
        );
    }

    #[test]
    fn a_missing_service_outside_ci_returns_so_the_test_can_skip() {
        skip_or_fail_in(false, "a_test", service::HELM, "not built");
    }

    #[test]
    fn require_passes_a_found_service_through() {
        assert_eq!(
            require::<_, String>("a_test", service::HELM, Ok(3)),
            Some(3)
        );
    }
}
