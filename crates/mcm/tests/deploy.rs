//! The in-cluster installation under `deploy/`: that kustomize installs every
//! manifest, that the Deployment runs `mcm run` with flags it accepts and a
//! hardened pod, that the RBAC grants exactly the calls the controllers make,
//! and, against the real control plane, that the API server accepts the
//! manifests and authorizes exactly those calls for the ServiceAccount.
//!
//! [`CALLS`] (`tests/rbac_calls/mod.rs`) is the list of API calls of `mcm
//! run`, derived from what the controllers call in `tests/rbac_e2e.rs` (which
//! fails when the run makes a call the list lacks, or no longer makes one it
//! marks as made), plus the calls of paths that run does not reach, read off
//! the code. When a controller starts making a new call, add it there and to
//! `deploy/rbac.yaml`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Container, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use kube::{Client, ResourceExt};
use mcm_testenv::TestEnv;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::rbac_calls;
use rbac_calls::{Call, Scope, CALLS, CORE, LEASES, MCM};
use Scope::{AnyNamespace, Cluster, Control, KubeSystem};

/// Calls the ServiceAccount must never be allowed, whatever else changes.
/// `None` as namespace: another namespace than control and kube-system.
const FORBIDDEN: &[(&str, &str, &str, Option<&str>)] = &[
    ("get", CORE, "secrets", None),
    ("delete", CORE, "secrets", None),
    ("list", CORE, "secrets", Some("")),
    ("list", CORE, "secrets", Some("kube-system")),
    ("watch", CORE, "secrets", Some("kube-system")),
    ("create", CORE, "serviceaccounts/token", Some("mcm-system")),
    ("create", CORE, "pods", None),
    ("create", CORE, "pods/exec", None),
    ("update", CORE, "nodes", Some("")),
    ("create", CORE, "nodes", Some("")),
    (
        "create",
        "rbac.authorization.k8s.io",
        "clusterroles",
        Some(""),
    ),
    (
        "bind",
        "rbac.authorization.k8s.io",
        "clusterroles",
        Some(""),
    ),
    (
        "escalate",
        "rbac.authorization.k8s.io",
        "roles",
        Some("default"),
    ),
    (
        "create",
        "rbac.authorization.k8s.io",
        "rolebindings",
        Some("default"),
    ),
    ("impersonate", CORE, "serviceaccounts", Some("")),
    ("update", "apps", "deployments", Some("mcm-system")),
    (
        "create",
        "certificates.k8s.io",
        "certificatesigningrequests",
        Some(""),
    ),
    ("patch", MCM, "machines", None),
    ("update", MCM, "machinedeployments/scale", Some("default")),
    ("update", LEASES, "leases", Some("kube-system")),
    ("update", LEASES, "leases", Some("kube-node-lease")),
];

const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

// ----------------------------------------------------------------------
// The manifests

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The YAML files under `deploy/` and `deploy/crds/`, relative to `deploy/`,
/// without the kustomization itself.
fn manifest_files() -> BTreeSet<String> {
    let mut files = BTreeSet::new();
    for sub in ["", "crds"] {
        let dir = deploy_dir().join(sub);
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let name = entry
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .to_string();
            if (name.ends_with(".yaml") || name.ends_with(".yml")) && name != "kustomization.yaml" {
                files.insert(if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                });
            }
        }
    }
    files
}

fn read_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Every object of every manifest, in file order.
fn objects() -> Vec<Value> {
    manifest_files()
        .iter()
        .flat_map(|f| read_docs(&deploy_dir().join(f)))
        .collect()
}

fn typed<K: serde::de::DeserializeOwned>(kind: &str) -> Vec<K> {
    objects()
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .map(|o| serde_json::from_value(o).unwrap_or_else(|e| panic!("{kind}: {e}")))
        .collect()
}

fn one<K: serde::de::DeserializeOwned>(kind: &str) -> K {
    let mut all = typed::<K>(kind);
    assert_eq!(all.len(), 1, "deploy/ must hold exactly one {kind}");
    all.remove(0)
}

fn deployment() -> Deployment {
    one("Deployment")
}

fn container(d: &Deployment) -> Container {
    let spec = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .expect("pod spec");
    assert_eq!(spec.containers.len(), 1, "one container");
    spec.containers[0].clone()
}

/// `--name=value` from the container's args.
fn flag(c: &Container, name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    c.args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_string))
}

/// The ServiceAccount (name, namespace).
fn service_account() -> (String, String) {
    let sa: ServiceAccount = one("ServiceAccount");
    (
        sa.name_any(),
        sa.namespace().expect("ServiceAccount namespace"),
    )
}

fn control_namespace() -> String {
    flag(&container(&deployment()), "namespace").expect("the Deployment passes --namespace")
}

fn scope_namespace(scope: Scope, other: &str) -> String {
    match scope {
        Control => control_namespace(),
        KubeSystem => "kube-system".into(),
        AnyNamespace => other.into(),
        Cluster => String::new(),
    }
}

/// Where a rule is granted: a Role's namespace, or `*` for a ClusterRole.
type Grant = (String, String, String, String); // (where, group, resource, verb)

fn grant_of(c: &Call) -> Grant {
    let at = match c.scope {
        Control => control_namespace(),
        KubeSystem => "kube-system".into(),
        AnyNamespace | Cluster => "*".into(),
    };
    (at, c.group.into(), c.resource.into(), c.verb.into())
}

fn expand(at: &str, rules: &[PolicyRule], out: &mut BTreeSet<Grant>) {
    for r in rules {
        assert!(r.resource_names.is_none(), "rule {r:?} names resources");
        assert!(
            r.non_resource_urls.is_none(),
            "rule {r:?} grants non-resource URLs"
        );
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    assert!(
                        ![g, res, v].iter().any(|s| s.contains('*')),
                        "wildcard in rule {r:?}"
                    );
                    out.insert((at.into(), g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
}

fn binds_sa(subjects: &Option<Vec<Subject>>, sa: &(String, String)) -> bool {
    subjects.iter().flatten().any(|s| {
        s.kind == "ServiceAccount"
            && s.name == sa.0
            && s.namespace.as_deref() == Some(sa.1.as_str())
    })
}

/// What the manifests grant the ServiceAccount.
fn granted() -> BTreeSet<Grant> {
    let sa = service_account();
    let roles: Vec<Role> = typed("Role");
    let cluster_roles: Vec<ClusterRole> = typed("ClusterRole");
    let mut out = BTreeSet::new();
    for b in typed::<RoleBinding>("RoleBinding") {
        assert!(
            binds_sa(&b.subjects, &sa),
            "RoleBinding {} binds someone else",
            b.name_any()
        );
        assert_eq!(
            b.subjects.as_ref().map(Vec::len),
            Some(1),
            "RoleBinding {} binds one subject",
            b.name_any()
        );
        let ns = b.namespace().expect("RoleBinding namespace");
        let rules = match b.role_ref.kind.as_str() {
            "Role" => roles
                .iter()
                .find(|r| {
                    r.name_any() == b.role_ref.name && r.namespace().as_deref() == Some(ns.as_str())
                })
                .unwrap_or_else(|| {
                    panic!("RoleBinding {ns}/{} refers to a missing Role", b.name_any())
                })
                .rules
                .clone(),
            _ => panic!("RoleBinding {ns}/{} must refer to a Role", b.name_any()),
        };
        expand(&ns, rules.as_deref().unwrap_or_default(), &mut out);
    }
    for b in typed::<ClusterRoleBinding>("ClusterRoleBinding") {
        assert!(
            binds_sa(&b.subjects, &sa),
            "ClusterRoleBinding {} binds someone else",
            b.name_any()
        );
        assert_eq!(
            b.subjects.as_ref().map(Vec::len),
            Some(1),
            "ClusterRoleBinding {} binds one subject",
            b.name_any()
        );
        let role = cluster_roles
            .iter()
            .find(|r| r.name_any() == b.role_ref.name && b.role_ref.kind == "ClusterRole")
            .unwrap_or_else(|| {
                panic!(
                    "ClusterRoleBinding {} refers to a missing ClusterRole",
                    b.name_any()
                )
            });
        assert!(
            role.aggregation_rule.is_none(),
            "no aggregated ClusterRoles"
        );
        expand("*", role.rules.as_deref().unwrap_or_default(), &mut out);
    }
    out
}

fn sar(
    user: &(String, String),
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> SubjectAccessReview {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    SubjectAccessReview {
        metadata: ObjectMeta::default(),
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{}:{}", user.1, user.0)),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", user.1),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: (!namespace.is_empty()).then(|| namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        status: None,
    }
}

// ----------------------------------------------------------------------
// Without a control plane

#[test]
fn kustomization_installs_every_manifest_in_deploy() {
    let k = read_docs(&deploy_dir().join("kustomization.yaml")).remove(0);
    assert!(
        k.get("namespace").is_none(),
        "a kustomize namespace would move the Roles out of the control namespace and kube-system"
    );
    let listed: Vec<String> = k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("resource path").to_string())
        .collect();
    let set: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(set.len(), listed.len(), "a resource is listed twice");
    assert_eq!(
        set,
        manifest_files(),
        "deploy/kustomization.yaml must list exactly the manifests in deploy/ and deploy/crds/"
    );
}

#[tokio::test]
async fn deployment_runs_mcm_run_with_flags_it_accepts() {
    let c = container(&deployment());
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(
        args.first().map(String::as_str),
        Some("run"),
        "the container runs `mcm run`: {args:?}"
    );
    assert!(c.command.is_none(), "the image's entrypoint is mcm");
    // The flags get past argument parsing: the binary stops only at the
    // (missing) kubeconfig, not with a usage error (exit code 2).
    let missing = "/nonexistent/mcm-rs-deploy-test/kubeconfig";
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcm"));
    cmd.args(&args)
        .arg(format!("--control-kubeconfig={missing}"))
        .env_remove("MCM_CONTROL_KUBECONFIG")
        .env_remove("MCM_TARGET_KUBECONFIG")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("mcm run did not stop at the missing kubeconfig")
        .expect("running mcm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "mcm {args:?}: {stderr}");
    assert!(
        stderr.contains(&format!("reading kubeconfig {missing}")),
        "mcm {args:?} failed before reading the kubeconfig: {stderr}"
    );
    // In-cluster: the target is the control cluster; leader election stays on.
    assert_eq!(flag(&c, "target-kubeconfig").as_deref(), Some(""));
    assert!(flag(&c, "control-kubeconfig").is_none());
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--leader-elect=") && a != "--leader-elect=true"),
        "leader election must stay on"
    );
}

#[test]
fn deployment_is_hardened_probed_and_wired_to_the_service_account_and_control_namespace() {
    let d = deployment();
    let spec = d.spec.clone().expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.clone().expect("pod spec");
    let sa = service_account();
    assert_eq!(pod.service_account_name.as_deref(), Some(sa.0.as_str()));
    assert_eq!(
        d.namespace().as_deref(),
        Some(sa.1.as_str()),
        "the Deployment runs in the ServiceAccount's namespace"
    );
    assert_ne!(
        pod.automount_service_account_token,
        Some(false),
        "the in-cluster config needs the token"
    );
    // The Role for the control namespace is where --namespace points.
    let ns = control_namespace();
    assert!(
        typed::<RoleBinding>("RoleBinding")
            .iter()
            .any(|b| b.namespace().as_deref() == Some(ns.as_str())),
        "no RoleBinding in the control namespace {ns}"
    );

    let c = container(&d);
    let image = c.image.clone().unwrap_or_default();
    assert!(image.starts_with("mcm-rs:"), "image {image}");
    let env = c.env.clone().unwrap_or_default();
    let pod_name = env
        .iter()
        .find(|e| e.name == "POD_NAME")
        .expect("POD_NAME (the leader-election identity)");
    let field = pod_name
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(
        field,
        Some("metadata.name"),
        "POD_NAME from the downward API"
    );

    let port: i32 = flag(&c, "port").map_or(10259, |p| p.parse().expect("--port"));
    assert_eq!(port, 10259);
    let ports = c.ports.clone().unwrap_or_default();
    let resolve = |p: &IntOrString| match p {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            ports
                .iter()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .unwrap_or_else(|| panic!("no container port named {name}"))
                .container_port
        }
    };
    for (what, probe, path) in [
        ("liveness", &c.liveness_probe, "/healthz"),
        ("readiness", &c.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{what} probe"));
        assert_eq!(get.path.as_deref(), Some(path), "{what} probe path");
        assert_eq!(resolve(&get.port), port, "{what} probe port");
    }

    let resources = c.resources.clone().expect("resources");
    for k in ["cpu", "memory"] {
        assert!(
            resources
                .requests
                .as_ref()
                .is_some_and(|r| r.contains_key(k)),
            "requests.{k}"
        );
    }
    assert!(
        resources
            .limits
            .as_ref()
            .is_some_and(|r| r.contains_key("memory")),
        "limits.memory"
    );

    let psc = pod.security_context.clone().expect("pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(
        psc.run_as_user.is_some_and(|u| u != 0),
        "a numeric non-root user, so runAsNonRoot can be verified"
    );
    assert_eq!(
        psc.seccomp_profile.map(|s| s.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let sc = c
        .security_context
        .clone()
        .expect("container securityContext");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert!(!sc.privileged.unwrap_or(false), "not privileged");
    let drop = sc
        .capabilities
        .as_ref()
        .and_then(|c| c.drop.clone())
        .unwrap_or_default();
    assert_eq!(drop, vec!["ALL".to_string()]);
    assert!(
        sc.capabilities
            .and_then(|c| c.add)
            .unwrap_or_default()
            .is_empty(),
        "no added capabilities"
    );
}

/// The `rules:` block of the first Role in a (possibly templated) YAML file.
fn first_role_rules(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let role = text
        .split("\n---")
        .find(|doc| doc.contains("\nkind: Role\n"))
        .unwrap_or_else(|| panic!("{rel}: no Role"));
    role.split_once("\nrules:\n")
        .unwrap_or_else(|| panic!("{rel}: Role without rules"))
        .1
        .trim_end()
        .to_string()
}

#[test]
fn chart_seed_role_has_the_rules_of_the_tested_gardener_seed_role() {
    // rbac_e2e.rs runs the controllers under deploy/gardener/rbac.yaml; the
    // chart ships the same seed Role (both layouts use it).
    assert_eq!(
        first_role_rules("charts/mcm-rs/templates/rbac.yaml"),
        first_role_rules("deploy/gardener/rbac.yaml")
    );
}

#[test]
fn rbac_grants_exactly_the_calls_the_controllers_make() {
    let wanted: BTreeSet<Grant> = CALLS.iter().map(grant_of).collect();
    assert_eq!(wanted.len(), CALLS.len(), "a call is listed twice");
    let granted = granted();
    let missing: Vec<_> = wanted.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&wanted).collect();
    assert!(missing.is_empty() && extra.is_empty(), "deploy/rbac.yaml\n  lacks (where, group, resource, verb): {missing:#?}\n  grants more: {extra:#?}");
}

// ----------------------------------------------------------------------
// Against the control plane

/// One SubjectAccessReview and its expected answer.
struct Check {
    what: String,
    verb: String,
    group: String,
    resource: String,
    /// Empty: cluster-wide.
    namespace: String,
    allowed: bool,
}

impl Check {
    fn new(
        what: &str,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: String,
        allowed: bool,
    ) -> Self {
        Check {
            what: what.into(),
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace,
            allowed,
        }
    }
}

const MANAGER: &str = "mcm-rs-deploy-test";

/// Server-side applies every manifest: the namespace, ServiceAccount and RBAC
/// for real; the CRDs (shared with every other test) and the Deployment
/// (there is no kubelet, nor an image) as a dry run. Returns the Deployment.
async fn apply_manifests(client: &Client) -> DynamicObject {
    let mut objs = objects();
    let order = |o: &Value| match o["kind"].as_str().unwrap_or_default() {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "ServiceAccount" => 2,
        "ClusterRole" | "Role" => 3,
        "ClusterRoleBinding" | "RoleBinding" => 4,
        _ => 5,
    };
    objs.sort_by_key(order);
    let mut deployment = None;
    for value in objs {
        let obj: DynamicObject = serde_json::from_value(value).expect("object");
        let types = obj.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).expect("gvk");
        let (ar, caps) = pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("discovery of {gvk:?}: {e}"));
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), &ns, &ar),
            None => {
                assert_eq!(
                    caps.scope,
                    kube::discovery::Scope::Cluster,
                    "{} {} has no namespace",
                    types.kind,
                    obj.name_any()
                );
                Api::all_with(client.clone(), &ar)
            }
        };
        let mut pp = PatchParams::apply(MANAGER).force().validation_strict();
        if matches!(
            types.kind.as_str(),
            "CustomResourceDefinition" | "Deployment"
        ) {
            pp = pp.dry_run();
        }
        let applied = api
            .patch(&obj.name_any(), &pp, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("applying {} {}: {e}", types.kind, obj.name_any()));
        if types.kind == "Deployment" {
            deployment = Some(applied);
        }
    }
    deployment.expect("a Deployment")
}

#[tokio::test]
async fn api_server_accepts_the_manifests_and_admits_the_pod_under_restricted_pod_security() {
    let Some(env) = TestEnv::new("deploy-apply").await else {
        return;
    };
    let applied = apply_manifests(&env.client).await;
    let applied: Deployment =
        serde_json::from_value(serde_json::to_value(applied).expect("json")).expect("Deployment");
    assert_eq!(applied.spec.as_ref().and_then(|s| s.replicas), Some(2));
    // The namespace enforces the restricted Pod Security Standard; a pod of the
    // template must be admitted there (dry run: nothing is scheduled).
    let template = applied.spec.expect("spec").template;
    let (sa_name, sa_ns) = service_account();
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("mcm-rs-admission-dry-run".into()),
            namespace: Some(sa_ns.clone()),
            labels: template.metadata.and_then(|m| m.labels),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    };
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &sa_ns);
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let created = pods.create(&pp, &pod).await.unwrap_or_else(|e| {
        panic!("a pod of the Deployment's template is rejected in {sa_ns}: {e}")
    });
    assert_eq!(
        created.spec.and_then(|s| s.service_account_name).as_deref(),
        Some(sa_name.as_str())
    );
}

#[tokio::test]
async fn api_server_authorizes_the_service_account_for_exactly_the_controllers_calls() {
    let Some(env) = TestEnv::new("deploy-rbac").await else {
        return;
    };
    apply_manifests(&env.client).await;
    let sa = service_account();
    let other = env.namespace.clone();
    let control = control_namespace();

    let mut checks: Vec<Check> = Vec::new();
    for c in CALLS {
        let ns = scope_namespace(c.scope, &other);
        checks.push(Check::new(c.by, c.verb, c.group, c.resource, ns, true));
    }
    // Every other verb on the same resources is denied, where it is granted
    // and in another namespace.
    let mut by_resource: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for (at, group, resource, verb) in CALLS.iter().map(grant_of) {
        by_resource
            .entry((at, group, resource))
            .or_default()
            .insert(verb);
    }
    for ((at, group, resource), verbs) in &by_resource {
        let places: Vec<String> = match at.as_str() {
            "*" => vec![String::new(), other.clone()],
            ns => vec![ns.to_string(), other.clone()],
        };
        for ns in places {
            for v in VERBS {
                let allowed_here = if ns == *at || (at == "*") {
                    verbs.contains(*v)
                } else {
                    false
                };
                if !allowed_here {
                    checks.push(Check::new(
                        "not used by the controllers",
                        v,
                        group,
                        resource,
                        ns.clone(),
                        false,
                    ));
                }
            }
        }
    }
    for (verb, group, resource, ns) in FORBIDDEN {
        let ns = ns.map_or_else(|| other.clone(), str::to_string);
        checks.push(Check::new(
            "must never be allowed",
            verb,
            group,
            resource,
            ns,
            false,
        ));
    }
    assert!(
        checks.iter().any(|c| c.namespace == control && c.allowed),
        "checks in the control namespace"
    );

    let api: Api<SubjectAccessReview> = Api::all(env.client.clone());
    // RBAC changes reach the authorizer through its informers: retry briefly.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let wrong: Vec<String> = futures::stream::iter(checks.iter())
            .map(|c| {
                let api = api.clone();
                let review = sar(&sa, &c.verb, &c.group, &c.resource, &c.namespace);
                async move {
                    let (what, verb, resource, ns, want) =
                        (&c.what, &c.verb, &c.resource, &c.namespace, c.allowed);
                    let got = api
                        .create(&PostParams::default(), &review)
                        .await
                        .unwrap_or_else(|e| panic!("SubjectAccessReview: {e}"))
                        .status
                        .is_some_and(|s| s.allowed);
                    (got != want).then(|| {
                        let at = if ns.is_empty() {
                            "cluster-wide".to_string()
                        } else {
                            format!("in {ns}")
                        };
                        let g = if c.group.is_empty() {
                            "core"
                        } else {
                            c.group.as_str()
                        };
                        format!(
                            "{} {verb} {g}/{resource} {at} ({what})",
                            if want { "DENIED" } else { "ALLOWED" }
                        )
                    })
                }
            })
            .buffer_unordered(16)
            .filter_map(|x| async move { x })
            .collect()
            .await;
        if wrong.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the API server disagrees with the table of calls:\n{}",
            wrong.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
