//! Which program a start of the binary is, from its name and its arguments.
//!
//! One container image serves every container Gardener and the chart run
//! (docs/design/process-contract.md, "One image"):
//!
//! - Gardener's main container: `command: ./machine-controller-manager …`
//!   from the image's working directory `/` → the name says the half;
//! - Gardener's provider sidecar: bare flags to the image's entrypoint
//!   (`/usr/local/bin/mcm --control-kubeconfig=… --port=10259 …`) → flags
//!   with no subcommand are the machine-controller half, the reference's
//!   provider image (whose entrypoint is its machine-controller);
//! - the chart's all-in-one: `run …` (also the image's default command).

use std::ffi::OsString;
use std::path::Path;

use crate::run::{CONTROLLER, MANAGER};

/// What one start of the binary runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The machine-controller-manager half; its flags from the first argument on.
    Manager,
    /// The machine-controller half; its flags from the first argument on.
    Controller,
    /// `mcm` with a subcommand (`run`, `up`, `crds`, …).
    Mcm,
}

/// The file name of `argv[0]` (`./machine-controller-manager` → `machine-controller-manager`).
pub fn invoked_as(argv0: Option<&OsString>) -> String {
    argv0
        .map(Path::new)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The program of a start with `argv` (`argv[0]` included).
pub fn route(argv: &[OsString]) -> Program {
    match invoked_as(argv.first()).as_str() {
        MANAGER => return Program::Manager,
        CONTROLLER => return Program::Controller,
        _ => {}
    }
    let Some(first) = argv.get(1).map(|a| a.to_string_lossy()) else {
        return Program::Mcm;
    };
    let mcm_own = ["-h", "--help", "-V", "--version"];
    if first.starts_with('-') && !mcm_own.contains(&first.as_ref()) {
        Program::Controller
    } else {
        Program::Mcm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn gardeners_main_container_command_is_the_manager_half_by_its_name() {
        let a = argv(&["./machine-controller-manager", "--namespace=shoot", "--v=3"]);
        assert_eq!(route(&a), Program::Manager);
        let a = argv(&["/machine-controller-manager"]);
        assert_eq!(route(&a), Program::Manager);
    }

    #[test]
    fn a_link_named_machine_controller_is_the_controller_half() {
        let a = argv(&["/machine-controller", "--port=10259"]);
        assert_eq!(route(&a), Program::Controller);
    }

    #[test]
    fn bare_flags_to_the_entrypoint_are_the_sidecar_so_the_controller_half() {
        let a = argv(&[
            "/usr/local/bin/mcm",
            "--control-kubeconfig=inClusterConfig",
            "--port=10259",
        ]);
        assert_eq!(route(&a), Program::Controller);
    }

    #[test]
    fn subcommands_help_and_version_stay_with_mcm() {
        for words in [
            &["/usr/local/bin/mcm", "run", "--port=10259"][..],
            &["mcm", "machine-controller-manager", "--port=1"],
            &["mcm", "--help"],
            &["mcm", "-V"],
            &["mcm"],
        ] {
            assert_eq!(route(&argv(words)), Program::Mcm, "{words:?}");
        }
    }

    #[test]
    fn a_missing_argv0_is_mcm() {
        assert_eq!(route(&[]), Program::Mcm);
        assert_eq!(invoked_as(None), "");
    }
}
