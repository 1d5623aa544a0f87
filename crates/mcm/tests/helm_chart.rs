//! The Helm chart `charts/mcm-rs` in both layouts, with and without driver
//! sidecars: `helm lint`, `helm template`, the binary accepts every rendered
//! command line (it stops only at the missing in-cluster environment, never
//! with a usage error), and the API server accepts every rendered object in
//! a server-side dry run.
//!
//! An installed release of the default layout (`allInOne`, in-cluster
//! target) grants its ServiceAccount every call of the controllers: the calls
//! table `tests/rbac_calls` (held to a real run of the controllers by
//! `rbac_e2e.rs`), each asked of the API server as a SubjectAccessReview.
//!
//! helm is built from the Go module proxy by `hack/build-helm.sh` (cached
//! under `~/.cache/mcm-helm/`); `MCM_HELM` may name another binary. Without
//! helm or the control plane the tests skip visibly, except in CI (`mcm_testenv::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::rbac_calls;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
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

/// The values that add an out-of-process AWS driver as a sidecar.
const AWS_SIDECAR: [&str; 2] = ["--set-json", r#"drivers.sidecars=[{"provider":"aws"}]"#];

fn render(helm: &PathBuf, layout: &str, namespace: &str) -> Vec<Value> {
    render_with(helm, layout, namespace, &[])
}

fn render_with(helm: &PathBuf, layout: &str, namespace: &str, values: &[&str]) -> Vec<Value> {
    let chart = chart();
    let layout = format!("layout={layout}");
    let mut args = vec![
        "template",
        "mcm",
        chart.to_str().expect("UTF-8 path"),
        "--namespace",
        namespace,
        "--include-crds",
        "--set",
        &layout,
    ];
    args.extend_from_slice(values);
    let text = run_helm(helm, &args);
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
    // The image's entrypoint (deploy/Dockerfile) with the sidecar's bare flags.
    accepts(
        "/usr/local/bin/mcm",
        &containers[1].args.clone().unwrap_or_default(),
    );

    // With an out-of-process AWS driver: the machine controller of either
    // layout calls the socket the sidecar serves, on the volume both mount.
    run_helm(&helm, &["lint", &chart, AWS_SIDECAR[0], AWS_SIDECAR[1]]);
    for (layout, controller, argv0) in [
        ("allInOne", "mcm", "mcm"),
        (
            "gardener",
            "machine-controller-manager-provider",
            "/usr/local/bin/mcm",
        ),
    ] {
        let pod = deployment(&render_with(&helm, layout, "mcm-system", &AWS_SIDECAR))
            .spec
            .expect("spec")
            .template
            .spec
            .expect("pod");
        let find = |name: &str| {
            pod.containers
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("{layout}: no container {name}"))
                .clone()
        };
        let (ctl, drv) = (find(controller), find("driver-aws"));
        let ctl_args = ctl.args.clone().unwrap_or_default();
        let socket = ctl_args
            .iter()
            .find_map(|a| a.strip_prefix("--driver-endpoint=aws=unix://"))
            .unwrap_or_else(|| panic!("{layout}: the controller names no AWS driver"));
        let drv_args = drv.args.clone().unwrap_or_default();
        assert_eq!(drv_args[..3], ["driver", "serve", "--provider=aws"]);
        assert!(
            drv_args.contains(&format!("--listen=unix://{socket}")),
            "{layout}: the driver listens where the controller calls: {drv_args:?}"
        );
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "driver-socket")
            .expect("the socket volume");
        assert_eq!(
            volume.empty_dir.as_ref().and_then(|e| e.medium.as_deref()),
            Some("Memory"),
            "the socket stays off the node's disk"
        );
        let dir = std::path::Path::new(socket).parent().expect("socket dir");
        for c in [&ctl, &drv] {
            assert!(
                c.volume_mounts.iter().flatten().any(
                    |m| m.name == "driver-socket" && std::path::Path::new(&m.mount_path) == dir
                ),
                "{layout}: {} mounts the socket volume at {}",
                c.name,
                dir.display()
            );
        }
        accepts(argv0, &ctl_args);
        // `driver serve` needs no cluster: clap checks every value before
        // it reaches --help.
        let out = Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args(&drv_args)
            .arg("--help")
            .output()
            .expect("run mcm");
        assert!(
            out.status.success(),
            "{layout}: {drv_args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
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
    for (layout, values) in [
        ("allInOne", &[][..]),
        ("gardener", &[][..]),
        ("allInOne", &AWS_SIDECAR[..]),
        ("gardener", &AWS_SIDECAR[..]),
    ] {
        for obj in render_with(&helm, layout, &env.namespace, values) {
            let gvk = GroupVersionKind::try_from(&kube::api::TypeMeta {
                api_version: obj["apiVersion"].as_str().expect("apiVersion").into(),
                kind: obj["kind"].as_str().expect("kind").into(),
            })
            .expect("gvk");
            let (ar, caps) = pinned_kind(&env.client, &gvk).await.expect("discovery");
            let name = obj["metadata"]["name"].as_str().expect("name").to_string();
            let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
                // The kube-system Role of the target's bootstrap tokens
                // names its namespace; the rest are the release's.
                let ns = obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(&env.namespace);
                Api::namespaced_with(env.client.clone(), ns, &ar)
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

/// `helm uninstall` on drop (the release's ClusterRole and kube-system Role
/// outlive the test's namespace otherwise).
struct Release {
    helm: PathBuf,
    name: String,
    namespace: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = Command::new(&self.helm)
            .args(["uninstall", &self.name, "--namespace", &self.namespace])
            .env("KUBECONFIG", mcm_testenv::kubeconfig_path())
            .env(
                "HELM_CACHE_HOME",
                std::env::temp_dir().join("mcm-helm-cache"),
            )
            .env(
                "HELM_CONFIG_HOME",
                std::env::temp_dir().join("mcm-helm-config"),
            )
            .env("HELM_DATA_HOME", std::env::temp_dir().join("mcm-helm-data"))
            .output();
    }
}

/// Whether the API server allows `verb` on `group`/`resource` (`res/sub`)
/// in `namespace` ("" cluster-wide), optionally on the object `name`, to the
/// ServiceAccount `sa` of `sa_ns`.
async fn allowed(
    client: &kube::Client,
    (sa, sa_ns): (&str, &str),
    (verb, group, resource): (&str, &str, &str),
    namespace: &str,
    name: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        metadata: Default::default(),
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{sa_ns}:{sa}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{sa_ns}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: (!namespace.is_empty()).then(|| namespace.into()),
                name: name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        status: None,
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    api.create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn installed_all_in_one_release_grants_its_service_account_every_call_of_the_controllers() {
    let test =
        "installed_all_in_one_release_grants_its_service_account_every_call_of_the_controllers";
    let Some(helm) = helm(test) else {
        return;
    };
    let Some(env) = TestEnv::new("helm-install").await else {
        return;
    };
    let ns = env.namespace.clone();
    let chart = chart().to_string_lossy().to_string();
    let kubeconfig = mcm_testenv::kubeconfig_path().to_string_lossy().to_string();
    // The default values: layout allInOne, target in-cluster. The CRDs are
    // the shared control plane's already; no kubelet runs the pod.
    run_helm(
        &helm,
        &[
            "install",
            "mcm",
            &chart,
            "--namespace",
            &ns,
            "--kubeconfig",
            &kubeconfig,
            "--skip-crds",
        ],
    );
    let _release = Release {
        helm: helm.clone(),
        name: "mcm".into(),
        namespace: ns.clone(),
    };
    let sa = ("machine-controller-manager", ns.as_str());
    let mut denied = Vec::new();
    for call in rbac_calls::CALLS {
        let namespace = match call.scope {
            rbac_calls::Scope::Control => ns.as_str(),
            rbac_calls::Scope::KubeSystem => "kube-system",
            // A drained pod's namespace: any, e.g. `default`.
            rbac_calls::Scope::AnyNamespace => "default",
            rbac_calls::Scope::Cluster => "",
        };
        // The Leases are granted by name (Gardener's seed Role); the
        // controllers get and update only their own.
        let names: &[Option<&str>] = match (call.resource, call.verb) {
            ("leases", "get" | "update") => &[
                Some("machine-controller"),
                Some("machine-controller-manager"),
            ],
            _ => &[None],
        };
        for name in names {
            let what = (call.verb, call.group, call.resource);
            if !allowed(&env.client, sa, what, namespace, *name).await {
                denied.push(format!(
                    "{} {}/{} in {namespace:?} {name:?} ({})",
                    call.verb, call.group, call.resource, call.by
                ));
            }
        }
    }
    assert!(
        denied.is_empty(),
        "the chart's ServiceAccount is denied calls the controllers make:\n{}",
        denied.join("\n")
    );
    // Still least privilege: nothing beyond what a drain needs.
    for what in [
        ("update", "", "nodes"),
        ("create", "", "pods"),
        ("list", "", "secrets"),
    ] {
        assert!(
            !allowed(&env.client, sa, what, "", None).await,
            "the chart grants {what:?} cluster-wide"
        );
    }
}
