//! `mcm validate -f <files…>` on fixture files: each error and warning with
//! its field, the exit code, and no Secret value in the output.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use std::path::PathBuf;
use std::process::Command;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/validate")
        .join(name)
}

/// Words of the fixture Secret's values that must never be printed.
const SECRET_WORDS: [&str; 4] = [
    "SUPER-SECRET-USERDATA-7f3a",
    "PRIVATE-KEY-ID-93b1c",
    "TOPSECRETKEYMATERIAL0123456789",
    "BEGIN PRIVATE KEY",
];

fn validate(files: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .arg("validate")
        .args(files.iter().flat_map(|f| ["-f".into(), data(f)]))
        .output()
        .expect("mcm runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_invalid_class_fails_with_each_finding_named_by_its_field_and_no_secret_value() {
    let (code, stdout, stderr) = validate(&["gcp-class.yaml", "gcp-secret.yaml"]);
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("MachineClass shoot--x/gcp-case (provider \"GCP\""),
        "{stdout}"
    );
    assert!(stdout.contains("INVALID"), "{stdout}");
    for line in [
        "  warning: providerSpec.canIPForward: read as canIpForward",
        "  warning: providerSpec.minCPUPlatform: read as minCpuPlatform",
        "  warning: providerSpec.disks[0].sizeGB: read as sizeGb",
        "  warning: providerSpec.machineTyp: unknown field",
        "  error:   spec.disks[1].interface",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(
        stdout.contains("MachineClass shoot--x/gcp-fine (provider \"GCP\", ")
            && stdout.contains("): ok, 0 error(s), 0 warning(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 MachineClass(es) checked, 1 with errors"),
        "{stdout}"
    );
    for w in SECRET_WORDS {
        assert!(!stdout.contains(w), "{w:?} printed:\n{stdout}");
        assert!(!stderr.contains(w), "{w:?} printed:\n{stderr}");
    }
}

#[test]
fn valid_classes_pass_with_exit_code_zero() {
    let (code, stdout, stderr) = validate(&["fine.yaml", "gcp-secret.yaml"]);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("1 MachineClass(es) checked, 0 with errors"),
        "{stdout}"
    );
}

#[test]
fn a_secret_missing_from_the_files_is_an_error_naming_the_reference() {
    let (code, stdout, _) = validate(&["fine.yaml"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "  error:   secretRef: Secret shoot--x/gcp-secret is not among the given files"
        ),
        "{stdout}"
    );
}

#[test]
fn an_unreadable_file_fails_with_its_name() {
    let (code, _, stderr) = validate(&["no-such-file.yaml"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no-such-file.yaml"), "{stderr}");
}
