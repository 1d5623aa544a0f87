//! The committed CRD manifests under `deploy/crds/` must equal the generated ones.
//!
//! Regenerate them with `MCM_UPDATE_CRDS=1 cargo test -p mcm-api --test integration crds::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use std::path::PathBuf;

use mcm_api::{crd_file_name, crd_yaml, crds, crds_yaml};

const HEADER: &str = "\
# Generated from the Rust types of crates/api (mcm_api::crds()); do not edit.
# Regenerate with: MCM_UPDATE_CRDS=1 cargo test -p mcm-api --test integration crds::
";

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

/// The committed file content for one CRD.
fn file_content(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> String {
    format!("{HEADER}---\n{}", crd_yaml(crd))
}

#[test]
fn committed_crds_match_generated() {
    let dir = crds_dir();
    let update = std::env::var("MCM_UPDATE_CRDS").is_ok_and(|value| value == "1");
    let mut stale = Vec::new();
    for crd in crds() {
        let path = dir.join(crd_file_name(&crd));
        let expected = file_content(&crd);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &expected).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(actual) if actual == expected => {}
            Ok(_) => stale.push(format!("{} (differs)", path.display())),
            Err(error) => stale.push(format!("{} ({error})", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "the committed CRDs are out of date: {stale:#?}\n\
         Regenerate them with `MCM_UPDATE_CRDS=1 cargo test -p mcm-api --test integration crds::` and commit the result."
    );
}

#[test]
fn committed_crd_files_are_exactly_the_generated_set() {
    if std::env::var("MCM_UPDATE_CRDS").is_ok_and(|value| value == "1") {
        return; // the files are being rewritten concurrently by committed_crds_match_generated
    }
    let expected: Vec<String> = crds().iter().map(crd_file_name).collect();
    let mut actual: Vec<String> = std::fs::read_dir(crds_dir())
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    actual.sort();
    let mut sorted = expected.clone();
    sorted.sort();
    assert_eq!(
        actual, sorted,
        "deploy/crds/ holds unexpected or missing files"
    );
    assert_eq!(
        expected,
        [
            "machineclasses.machine.sapcloud.io.yaml",
            "machines.machine.sapcloud.io.yaml",
            "machinesets.machine.sapcloud.io.yaml",
            "machinedeployments.machine.sapcloud.io.yaml"
        ]
    );
}

#[test]
fn crds_yaml_concatenates_the_committed_documents_in_order() {
    let stream = crds_yaml();
    let documents: Vec<String> = crds()
        .iter()
        .map(|crd| format!("---\n{}", crd_yaml(crd)))
        .collect();
    assert_eq!(stream, documents.concat());
    let kinds: Vec<String> = serde_yaml::Deserializer::from_str(&stream)
        .map(|document| {
            let value: serde_yaml::Value = serde::Deserialize::deserialize(document).unwrap();
            value["spec"]["names"]["kind"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        ["MachineClass", "Machine", "MachineSet", "MachineDeployment"]
    );
}
