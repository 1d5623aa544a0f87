//! The one rule for tests that need a service from outside the test binary
//! (the control plane, moto, helm, downloaded samples, ...):
//!
//! - a service that is **missing** (nothing answers, not installed) fails the
//!   test in strict runs and skips it, visibly, elsewhere;
//! - a service that answers but is **unusable** (the API server rejects the
//!   CRDs, moto answers errors) always fails the test: that is a setup error,
//!   never a reason to go green.
//!
//! A run is strict in CI and under the README's test command: "CI" is the
//! `CI` variable set to any non-empty value other than `false` or `0`
//! (`CI=true`, `CI=1`, `CI=yes` all count), so no CI system can go green on
//! skipped tests; `hack/test.sh`, which starts every service, exports
//! [`REQUIRE_SERVICES_VAR`]`=1`, so a service it started and that then is not
//! there fails its tests on a developer's machine too. A skip prints one line
//! to stderr: `SKIPPED: <test> needs <service>: <why>` (`cargo test --
//! --nocapture` or a failing neighbour shows it; `grep SKIPPED` finds them all).

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
    /// The Go driver bridge binary (docs/design/driver.md, "The Go bridge").
    pub const DRIVER_BRIDGE: &str =
        "the Go driver bridge (MCM_DRIVER_BRIDGE=<path of driver-bridge>, or MCM_DRIVER_BRIDGE=build to run hack/build-reference.sh)";
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

/// Set (to anything but empty, `0` or `false`) by `hack/test.sh`, the README's
/// test command, which starts every service: a missing service fails the test
/// as in CI.
pub const REQUIRE_SERVICES_VAR: &str = "MCM_TEST_REQUIRE_SERVICES";

/// Whether this run is strict: CI, or the README's test command
/// ([`REQUIRE_SERVICES_VAR`]). A missing service fails the test there.
pub fn is_strict() -> bool {
    is_ci() || ci_value_means_ci(std::env::var(REQUIRE_SERVICES_VAR).ok().as_deref())
}

/// Why a test cannot use its service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Nothing answers, or it is not installed.
    Missing,
    /// It answers but is not usable (it rejected the setup, answered errors).
    Unusable,
}

/// What happens to the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The test returns early, after the visible `SKIPPED:` line.
    Skip,
    /// The test fails.
    Fail,
}

/// The rule: only a missing service outside strict runs skips.
pub fn verdict(strict: bool, why: Unavailable) -> Verdict {
    match (why, strict) {
        (Unavailable::Missing, false) => Verdict::Skip,
        (Unavailable::Missing, true) | (Unavailable::Unusable, _) => Verdict::Fail,
    }
}

/// The decision for a test whose `service` is missing: panics (with the
/// reason and the command that provides the service) in strict runs, else
/// prints `SKIPPED: <test> needs <service>: <why>` to stderr and returns, so
/// the caller returns from the test.
pub fn skip_or_fail(test: &str, service: &str, why: impl Display) {
    decide(is_strict(), Unavailable::Missing, test, service, why)
}

/// [`skip_or_fail`] with the strictness given (for its own tests).
pub fn skip_or_fail_in(strict: bool, test: &str, service: &str, why: impl Display) {
    decide(strict, Unavailable::Missing, test, service, why)
}

/// Applies [`verdict`]: panics on [`Verdict::Fail`], prints the `SKIPPED:` line otherwise.
#[allow(clippy::panic, reason = "failing the calling test is the point")]
pub fn decide(strict: bool, why: Unavailable, test: &str, service: &str, reason: impl Display) {
    match (verdict(strict, why), why) {
        (Verdict::Skip, _) => eprintln!("SKIPPED: {test} needs {service}: {reason}"),
        (Verdict::Fail, Unavailable::Missing) => panic!(
            "{test} needs {service} and this run may not skip (CI or {REQUIRE_SERVICES_VAR} is set): {reason}"
        ),
        (Verdict::Fail, Unavailable::Unusable) => panic!(
            "{test}: {service} answers but is not usable (a setup error, never a skip): {reason}"
        ),
    }
}

/// Like [`require`], for errors that say whether the service is missing or
/// unusable (`classify`): an unusable service fails the test everywhere.
pub fn require_classified<T, E: Display>(
    test: &str,
    service: &str,
    found: Result<T, E>,
    classify: impl FnOnce(&E) -> Unavailable,
) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(e) => {
            decide(is_strict(), classify(&e), test, service, e);
            None
        }
    }
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
/// [`skip_or_fail`] and `None`. A moto that is announced but answers errors
/// is unusable, not missing: the tests' set-up calls fail on it.
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
    fn only_a_missing_service_outside_strict_runs_skips() {
        assert_eq!(verdict(false, Unavailable::Missing), Verdict::Skip);
        assert_eq!(verdict(true, Unavailable::Missing), Verdict::Fail);
        assert_eq!(verdict(false, Unavailable::Unusable), Verdict::Fail);
        assert_eq!(verdict(true, Unavailable::Unusable), Verdict::Fail);
    }

    #[test]
    #[should_panic(
        expected = "a_test needs moto (source hack/moto.sh; start_moto) and this run may not skip"
    )]
    fn a_missing_service_fails_the_test_in_a_strict_run() {
        skip_or_fail_in(
            true,
            "a_test",
            service::MOTO,
            "MCM_AWS_TEST_ENDPOINT is not set",
        );
    }

    #[test]
    fn a_missing_service_outside_strict_runs_returns_so_the_test_can_skip() {
        skip_or_fail_in(false, "a_test", service::HELM, "not built");
    }

    #[test]
    #[should_panic(expected = "answers but is not usable")]
    fn an_unusable_service_fails_the_test_also_outside_strict_runs() {
        decide(
            false,
            Unavailable::Unusable,
            "a_test",
            service::CONTROL_PLANE,
            "the API server rejected a CRD",
        );
    }

    #[test]
    fn the_readme_command_makes_the_run_strict_like_ci() {
        // hack/test.sh exports exactly this variable; its value follows CI's rule.
        let script = include_str!("../../../hack/test.sh");
        assert!(
            script.contains(&format!("export {REQUIRE_SERVICES_VAR}=1")),
            "hack/test.sh must export {REQUIRE_SERVICES_VAR}=1"
        );
        assert!(ci_value_means_ci(Some("1")));
    }

    #[test]
    fn require_passes_a_found_service_through() {
        assert_eq!(
            require::<_, String>("a_test", service::HELM, Ok(3)),
            Some(3)
        );
    }
}
