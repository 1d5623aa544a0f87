//! The Helm chart `charts/mcm-rs` in both layouts: `helm lint`, `helm
//! template`, the binary accepts every rendered command line (it stops only
//! at the missing in-cluster environment, never with a usage error), and the
//! API server accepts every rendered object in a server-side dry run.
//!
//! helm is built from the Go module proxy by `hack/build-helm.sh` (cached
//! under `~/.cache/mcm-helm/`); `MCM_HELM` may name another binary. Without
//! helm or the control plane the tests skip visibly, except in CI (`mcm_testenv::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use mcm_testenv::{require, service, TestEnv};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn helm(test: &str) -> Option<PathBuf> {
    let path = std::env::var("MCM_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/mcm-helm/v4.3.2/helm")
        });
    let found = if path.exists() {
        Ok(path)
    } else {
        Err(format!("no helm at {}", path.display()))
    };
    require(test, service::HELM, found)
}

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/mcm-rs")
}

fn run_helm(helm: &PathBuf, args: &[&str]) -> String {
    let out = Command::new(helm)
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("mcm-helm-cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("mcm-helm-config"),
        )
        .env("HELM_DATA_HOME", std::env::temp_dir().join("mcm-helm-data"))
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn render(helm: &PathBuf, layout: &str, namespace: &str) -> Vec<Value> {
    let chart = chart();
    let text = run_helm(
        helm,
        &[
            "template",
            "mcm",
            &chart.to_string_lossy(),
            "--namespace",
            namespace,
            "--include-crds",
            "--set",
            &format!("layout={layout}"),
        ],
    );
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn deployment(objects: &[Value]) -> Deployment {
    let d = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    serde_json::from_value(d.clone()).expect("Deployment")
}

/// Runs the binary as `argv0` with `args` and no in-cluster environment:
/// it must get past flag parsing (exit 1 at the in-cluster config, not 2).
fn accepts(argv0: &str, args: &[String]) {
    use std::os::unix::process::CommandExt as _;
    let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .arg0(argv0)
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("MCM_SERVICEACCOUNT_DIR")
        .output()
        .expect("run mcm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{argv0} {args:?}: {stderr}");
    assert!(
        stderr.contains("inClusterConfig"),
        "{argv0} {args:?} stopped before the in-cluster config: {stderr}"
    );
}

#[test]
fn chart_lints_and_renders_both_layouts_with_command_lines_the_binary_accepts() {
    let Some(helm) =
        helm("chart_lints_and_renders_both_layouts_with_command_lines_the_binary_accepts")
    else {
        return;
    };
    let chart = chart().to_string_lossy().to_string();
    run_helm(&helm, &["lint", &chart]);
    run_helm(&helm, &["lint", &chart, "--set", "layout=gardener"]);

    let all = deployment(&render(&helm, "allInOne", "mcm-system"));
    let containers = all
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod")
        .containers;
    assert_eq!(containers.len(), 1);
    let args = containers[0].args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("run"));
    accepts("mcm", &args);

    let gardener = deployment(&render(&helm, "gardener", "shoot--x"));
    let containers = gardener
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod")
        .containers;
    assert_eq!(
        containers.len(),
        2,
        "machine-controller-manager and its sidecar"
    );
    let command = containers[0].command.clone().unwrap_or_default();
    assert_eq!(
        command.first().map(String::as_str),
        Some("./machine-controller-manager")
    );
    accepts("./machine-controller-manager", &command[1..]);
    assert!(
        containers[1].command.is_none(),
        "the sidecar runs the image's entrypoint"
    );
    accepts(
        "/machine-controller",
        &containers[1].args.clone().unwrap_or_default(),
    );
}

#[tokio::test]
async fn api_server_accepts_every_rendered_object_in_a_server_side_dry_run() {
    let Some(helm) = helm("api_server_accepts_every_rendered_object_in_a_server_side_dry_run")
    else {
        return;
    };
    let Some(env) = TestEnv::new("helm-chart").await else {
        return;
    };
    for layout in ["allInOne", "gardener"] {
        for obj in render(&helm, layout, &env.namespace) {
            let gvk = GroupVersionKind::try_from(&kube::api::TypeMeta {
                api_version: obj["apiVersion"].as_str().expect("apiVersion").into(),
                kind: obj["kind"].as_str().expect("kind").into(),
            })
            .expect("gvk");
            let (ar, caps) = pinned_kind(&env.client, &gvk).await.expect("discovery");
            let name = obj["metadata"]["name"].as_str().expect("name").to_string();
            let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
                Api::namespaced_with(env.client.clone(), &env.namespace, &ar)
            } else {
                Api::all_with(env.client.clone(), &ar)
            };
            let pp = PatchParams::apply("mcm-helm-test").force().dry_run();
            api.patch(&name, &pp, &Patch::Apply(&obj))
                .await
                .unwrap_or_else(|e| panic!("{layout}: {} {name}: {e}", gvk.kind));
        }
    }
}
