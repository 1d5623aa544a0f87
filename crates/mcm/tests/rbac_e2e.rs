//! The shipped RBAC proven by running the controllers under it, not by a list:
//! the ServiceAccounts get exactly the Roles and Bindings of the YAML files
//! (names and namespaces rewritten to the test's own), the controllers run
//! with clients that authenticate with those ServiceAccounts' tokens
//! (TokenRequest), and every answer is watched for 403 Forbidden. A call the
//! Roles lack fails the test, even where the controller only logs it (Events).
//! Every request is also recorded as RBAC sees it (verb, group, resource,
//! namespace) and held to the calls table `tests/rbac_calls/mod.rs`, which
//! `deploy.rs` holds the shipped RBAC to: a call the table lacks, or a call
//! the table marks as made by this run that it did not make, fails the test.
//! The run forces the stale-copy path of the finalizer removals (machines
//! and nodes: refused, then retried on a fresh GET), which a quiet run never
//! takes ([`Recorder::make_stale`]).
//!
//! Two layouts:
//! - `deploy/rbac.yaml`: one ServiceAccount for the control and target cluster;
//! - `deploy/gardener/rbac.yaml` (seed Role, control namespace) and
//!   `deploy/gardener/shoot-rbac.yaml` (target ClusterRole and kube-system
//!   Role), each for its own ServiceAccount, as Gardener binds them.
//!
//! Both run the machine controller (local provider) and the MachineSet /
//! MachineDeployment controllers, each under its leader Lease, through a
//! scale-up to 2, node-bound Running machines, a scale-down whose machine is
//! drained (its pod evicted) and deleted with its Node, and a scale-down to 0.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::rbac_calls;

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};
use mcm_api::{Machine, MachineClass, MachineDeployment};
use mcm_provider_local::{server, LocalDriver, Tunables};
use mcm_runtime::leader::{run_as_leader, LeaderConfig};
use mcm_runtime::sets::SetsConfig;
use mcm_runtime::{machine, metrics::Metrics, Config, Context, DriverRegistry};
use mcm_testenv::{must_eventually, TestEnv};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

const STEP: Duration = Duration::from_secs(120);

// ----------------------------------------------------------------------
// Clients that record every request and remember every 403

/// The finalizer a forced stale copy claims the object has (it never has).
const STALE_MARK: &str = "mcm-rs.test/stale-copy";

/// What the controllers' clients sent: every request as RBAC sees it, the
/// requests answered 403 Recorder (method and URI), and the answers to the
/// finalizer removals made stale on purpose (resource, status).
#[derive(Clone, Default)]
struct Recorder {
    forbidden: Arc<Mutex<Vec<String>>>,
    requests: Arc<Mutex<BTreeSet<rbac_calls::Request>>>,
    stale: Arc<Mutex<Vec<(String, u16)>>>,
}

impl Recorder {
    fn seen(&self) -> Vec<String> {
        self.forbidden.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Fails the test at once, naming the requests, when any was refused.
    fn assert_none(&self) {
        let seen = self.seen();
        assert!(seen.is_empty(), "403 Forbidden for: {seen:#?}");
    }

    fn requests(&self) -> BTreeSet<rbac_calls::Request> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn stale_answers(&self) -> Vec<(String, u16)> {
        self.stale.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The first finalizer removal of each of `machines` and `nodes` is sent
    /// as from a stale copy: its JSON-patch `test` claims one finalizer more
    /// than the object has, so the API server refuses it as it refuses a stale
    /// cache copy, and the controller takes its retry path (GET, remove again).
    /// Returns the resource when this request was made stale.
    fn make_stale(&self, r: &rbac_calls::Request, req: &mut http::Request<Body>) -> Option<String> {
        if r.verb != "patch" || !["machines", "nodes"].contains(&r.resource.as_str()) {
            return None;
        }
        let mut stale = self.stale.lock().ok()?;
        if stale.iter().any(|(res, _)| *res == r.resource) {
            return None;
        }
        let bytes = req
            .body()
            .try_clone()?
            .collect_bytes()
            .now_or_never()?
            .ok()?;
        let mut patch: Value = serde_json::from_slice(&bytes).ok()?;
        let test = patch.get_mut(0)?;
        if test["op"] != "test" || test["path"] != "/metadata/finalizers" {
            return None;
        }
        test["value"].as_array_mut()?.push(json!(STALE_MARK));
        *req.body_mut() = Body::from(serde_json::to_vec(&patch).ok()?);
        req.headers_mut().remove(http::header::CONTENT_LENGTH);
        stale.push((r.resource.clone(), 0));
        Some(r.resource.clone())
    }

    /// Every request of the run is a listed call, and every call listed as
    /// made by the run was made ([`rbac_calls::CALLS`], which `deploy.rs`
    /// holds the shipped RBAC to).
    fn assert_calls_match_the_table(&self, control: &str) {
        let made = self.requests();
        eprintln!("requests of the run (verb group resource namespace):");
        for r in &made {
            eprintln!(
                "  {} {:?} {} {:?}",
                r.verb, r.group, r.resource, r.namespace
            );
        }
        let unlisted: Vec<_> = made
            .iter()
            .filter(|r| rbac_calls::listed(r, control).is_none())
            .collect();
        assert!(
            unlisted.is_empty(),
            "the run made calls tests/rbac_calls/mod.rs does not list (add them there and to the RBAC): {unlisted:#?}"
        );
        let not_made: Vec<_> = rbac_calls::CALLS
            .iter()
            .filter(|c| c.reached == rbac_calls::Reached::Run)
            .filter(|c| {
                !made
                    .iter()
                    .any(|r| rbac_calls::listed(r, control).is_some_and(|l| std::ptr::eq(l, *c)))
            })
            .map(|c| (c.verb, c.group, c.resource, c.by))
            .collect();
        assert!(
            not_made.is_empty(),
            "tests/rbac_calls/mod.rs lists calls as made by the run that it did not make (mark them `code` with where they are made): {not_made:#?}"
        );
    }
}

impl<S> tower::Layer<S> for Recorder {
    type Service = Watched<S>;

    fn layer(&self, inner: S) -> Watched<S> {
        Watched {
            inner,
            recorder: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Watched<S> {
    inner: S,
    recorder: Recorder,
}

impl<S, ResB> tower::Service<http::Request<Body>> for Watched<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let what = format!("{} {}", req.method(), req.uri());
        let mut made_stale = None;
        if let Some(r) = rbac_calls::classify(req.method().as_str(), req.uri()) {
            made_stale = self.recorder.make_stale(&r, &mut req);
            if let Ok(mut all) = self.recorder.requests.lock() {
                all.insert(r);
            }
        }
        let recorder = self.recorder.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            if let Ok(r) = &res {
                if r.status() == http::StatusCode::FORBIDDEN {
                    recorder.forbidden.lock().expect("lock").push(what);
                }
                if let Some(resource) = made_stale {
                    for (res, status) in recorder.stale.lock().expect("lock").iter_mut() {
                        if *res == resource {
                            *status = r.status().as_u16();
                        }
                    }
                }
            }
            res
        })
    }
}

/// A client for the test control plane that authenticates with `token` only.
async fn client_with_token(token: String, recorder: &Recorder) -> Client {
    let path = mcm_testenv::kubeconfig_path();
    let kc = Kubeconfig::read_from(&path).expect("kubeconfig");
    let mut kube_config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube_config.auth_info = serde_json::from_value(json!({"token": token})).expect("auth info");
    ClientBuilder::try_from(kube_config)
        .expect("client builder")
        .with_layer(recorder)
        .build()
}

/// Creates ServiceAccount `name` in the test namespace and mints a token for it.
async fn service_account_token(env: &TestEnv, name: &str) -> String {
    let sas: Api<ServiceAccount> = env.api();
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("SA");
    sas.create(&PostParams::default(), &sa)
        .await
        .expect("create SA");
    let tr = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    sas.create_token_request(name, &PostParams::default(), &tr)
        .await
        .expect("token request")
        .status
        .and_then(|s| s.token)
        .expect("token")
}

// ----------------------------------------------------------------------
// The shipped RBAC, applied for the test's ServiceAccounts

fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn yaml_docs(rel: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_file(rel)).expect("yaml file");
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| {
            let v: Value = serde::Deserialize::deserialize(d).ok()?;
            (!v.is_null()).then_some(v)
        })
        .collect()
}

/// Applies the Roles, ClusterRoles and their Bindings of `rel`. Namespaces in
/// `control_namespaces` become the test's namespace (kube-system stays); every
/// name gets the namespace as suffix (cluster-scoped objects are shared); each
/// ServiceAccount subject is mapped by `subject(namespace, name)`. Returns the
/// cluster-scoped objects made, for clean-up.
async fn apply_rbac(
    env: &TestEnv,
    rel: &str,
    control_namespaces: &[&str],
    subject: &dyn Fn(&str, &str) -> String,
) -> Vec<(String, String)> {
    let ns = &env.namespace;
    let suffix = |n: &str| format!("{n}-{ns}");
    let map_ns = |n: &str| {
        if control_namespaces.contains(&n) {
            ns.clone()
        } else {
            n.to_string()
        }
    };
    let pp = PostParams::default();
    let mut cluster_scoped = Vec::new();
    for mut doc in yaml_docs(rel) {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        if !["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"].contains(&kind.as_str()) {
            continue;
        }
        let name = suffix(doc["metadata"]["name"].as_str().expect("name"));
        doc["metadata"]["name"] = json!(name);
        if let Some(n) = doc["metadata"]["namespace"].as_str() {
            doc["metadata"]["namespace"] = json!(map_ns(n));
        }
        if let Some(r) = doc["roleRef"]["name"].as_str() {
            doc["roleRef"]["name"] = json!(suffix(r));
        }
        if let Some(subjects) = doc["subjects"].as_array_mut() {
            for s in subjects {
                let sa_ns = s["namespace"].as_str().unwrap_or_default().to_string();
                let sa = s["name"].as_str().unwrap_or_default().to_string();
                s["namespace"] = json!(ns);
                s["name"] = json!(subject(&sa_ns, &sa));
            }
        }
        let at = doc["metadata"]["namespace"].as_str().map(str::to_string);
        let c = env.client.clone();
        match kind.as_str() {
            "Role" => {
                let api: Api<Role> = Api::namespaced(c, at.as_deref().expect("ns"));
                api.create(&pp, &serde_json::from_value(doc).expect("Role"))
                    .await
                    .expect("create Role");
            }
            "RoleBinding" => {
                let api: Api<RoleBinding> = Api::namespaced(c, at.as_deref().expect("ns"));
                api.create(&pp, &serde_json::from_value(doc).expect("RoleBinding"))
                    .await
                    .expect("create RoleBinding");
            }
            "ClusterRole" => {
                Api::<ClusterRole>::all(c)
                    .create(&pp, &serde_json::from_value(doc).expect("ClusterRole"))
                    .await
                    .expect("create ClusterRole");
                cluster_scoped.push((kind, name));
            }
            _ => {
                Api::<ClusterRoleBinding>::all(c)
                    .create(
                        &pp,
                        &serde_json::from_value(doc).expect("ClusterRoleBinding"),
                    )
                    .await
                    .expect("create ClusterRoleBinding");
                cluster_scoped.push((kind, name));
            }
        }
    }
    cluster_scoped
}

async fn remove_cluster_scoped(client: &Client, objs: &[(String, String)]) {
    for (kind, name) in objs {
        let dp = DeleteParams::default();
        if kind == "ClusterRole" {
            let _ = Api::<ClusterRole>::all(client.clone())
                .delete(name, &dp)
                .await;
        } else {
            let _ = Api::<ClusterRoleBinding>::all(client.clone())
                .delete(name, &dp)
                .await;
        }
    }
}

// ----------------------------------------------------------------------
// The run

/// The local cloud (it plays the kubelets with the admin kubeconfig).
async fn local_cloud(env: &TestEnv) -> (String, Box<dyn std::any::Any + Send>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mcm-rbac-{}", env.namespace));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut config = server::CloudConfig::new(dir.join("local-cloud.redb"));
    config.zone = env.namespace.clone();
    config.target_kubeconfig = Some(mcm_testenv::kubeconfig_path());
    config.heartbeat_interval = Duration::from_secs(2);
    config.tunables = Tunables::unlimited();
    let (addr, cloud) = server::spawn(config).await.expect("local cloud");
    (format!("http://{addr}"), Box::new(cloud), dir)
}

async fn create_objects(env: &TestEnv) {
    let ns = &env.namespace;
    let pp = PostParams::default();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "rbac-secret"},
        "stringData": {"userData": "#cloud-config\n"}
    }))
    .expect("Secret");
    env.api::<Secret>()
        .create(&pp, &secret)
        .await
        .expect("secret");
    let class: MachineClass = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": "rbac-class"},
        "provider": "local",
        "providerSpec": {"image": "local-ubuntu", "instanceType": "small",
            "tags": {format!("kubernetes.io/cluster/{ns}"): "1", "kubernetes.io/role/node": "1"}},
        "secretRef": {"name": "rbac-secret", "namespace": ns}
    }))
    .expect("MachineClass");
    env.api::<MachineClass>()
        .create(&pp, &class)
        .await
        .expect("class");
    let mcd: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "pool"},
        "spec": {
            "replicas": 2,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"pool": "pool"}},
            "template": {
                "metadata": {"labels": {"pool": "pool"}},
                "spec": {"class": {"kind": "MachineClass", "name": "rbac-class"}}
            }
        }
    }))
    .expect("MachineDeployment");
    env.api::<MachineDeployment>()
        .create(&pp, &mcd)
        .await
        .expect("deployment");
}

fn phase(m: &Machine) -> String {
    m.status
        .as_ref()
        .map(|s| s.current_status.phase.as_str().to_string())
        .unwrap_or_default()
}

/// Machines by phase, and their node labels.
async fn machines(env: &TestEnv) -> Vec<(String, String, String)> {
    env.api::<Machine>()
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .map(|m| {
                    (
                        m.name_any(),
                        phase(m),
                        m.labels().get("node").cloned().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn scale(env: &TestEnv, replicas: i32) {
    env.api::<MachineDeployment>()
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

/// Plays kubelet for pods: removes the ones being deleted.
fn pod_reaper(env: &TestEnv) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = env.api();
    tokio::spawn(async move {
        loop {
            if let Ok(list) = pods.list(&ListParams::default()).await {
                for p in list
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_some())
                {
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    };
                    let _ = pods.delete(&p.name_any(), &dp).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// Runs both halves under their Leases with `control` and `target` through the
/// scenario, then asserts that no request was answered 403.
async fn run_scenario(env: &TestEnv, control: Client, target: Client, recorder: &Recorder) {
    let ns = env.namespace.clone();
    let (cloud_url, _cloud, dir) = local_cloud(env).await;
    let mut drivers = DriverRegistry::new();
    drivers.register(
        "local",
        Arc::new(LocalDriver::new(&cloud_url).expect("driver")),
    );
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let config = Config {
        namespace: ns.clone(),
        short_retry: Duration::from_secs(1),
        long_retry: Duration::from_secs(5),
        sets: SetsConfig {
            resync_period: Duration::from_secs(10),
            ..SetsConfig::default()
        },
        ..Config::default()
    };
    // One Context for both halves, as `mcm run` has.
    let ctx = Context::new(
        control.clone(),
        Some(target.clone()),
        config,
        drivers,
        metrics,
    );
    let machine_half = tokio::spawn(run_as_leader(
        control.clone(),
        LeaderConfig::new(&ns, "rbac-test"),
        machine::run(ctx.clone(), std::future::pending()),
    ));
    let manager_half = tokio::spawn(run_as_leader(
        control.clone(),
        LeaderConfig {
            name: "machine-controller-manager".into(),
            ..LeaderConfig::new(&ns, "rbac-test")
        },
        mcm_runtime::sets::run_with(ctx, std::future::pending()),
    ));
    let reaper = pod_reaper(env);

    // Scale-up: two node-bound Running machines.
    create_objects(env).await;
    let running = must_eventually(STEP, "2 machines Running with their nodes", || async {
        recorder.assert_none();
        let ms = machines(env).await;
        (ms.len() == 2 && ms.iter().all(|(_, p, n)| p == "Running" && !n.is_empty())).then_some(ms)
    })
    .await;

    // A pod on each node; the scale-down drains one of them.
    let pods: Api<Pod> = env.api();
    for (m, _, node) in &running {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("app-{m}")},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod");
        pods.patch_status(
            &format!("app-{m}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("pod status");
    }
    scale(env, 1).await;
    let (kept, gone) = must_eventually(STEP, "one machine drained and deleted", || async {
        recorder.assert_none();
        let ms = machines(env).await;
        if ms.len() != 1 || ms[0].1 != "Running" {
            return None;
        }
        let kept = ms[0].0.clone();
        let gone = running.iter().find(|(m, _, _)| *m != kept)?.clone();
        Some((kept, gone))
    })
    .await;
    assert!(
        pods.get_opt(&format!("app-{}", gone.0))
            .await
            .expect("get pod")
            .is_none(),
        "the deleted machine's pod was evicted"
    );
    assert!(
        pods.get_opt(&format!("app-{kept}"))
            .await
            .expect("get pod")
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "the other pod stays"
    );
    let nodes: Api<Node> = Api::all(env.client.clone());
    must_eventually(STEP, "the drained machine's node deleted", || async {
        recorder.assert_none();
        nodes
            .get_opt(&gone.2)
            .await
            .ok()
            .and_then(|n| n.is_none().then_some(()))
    })
    .await;

    // Scale to 0: every machine goes.
    scale(env, 0).await;
    must_eventually(STEP, "no machine left", || async {
        recorder.assert_none();
        machines(env).await.is_empty().then_some(())
    })
    .await;

    // Each half held its Lease; Events were written (core/v1).
    let leases: Api<Lease> = env.api();
    for name in ["machine-controller", "machine-controller-manager"] {
        let holder = leases
            .get(name)
            .await
            .expect("lease")
            .spec
            .and_then(|s| s.holder_identity);
        assert_eq!(holder.as_deref(), Some("rbac-test"), "lease {name}");
    }
    let events = env
        .api::<CoreEvent>()
        .list(&ListParams::default())
        .await
        .expect("events")
        .items;
    assert!(
        events
            .iter()
            .any(|e| e.involved_object.kind.as_deref() == Some("Machine")),
        "the machine controller wrote Events"
    );
    recorder.assert_none();

    // The forced stale copies were refused as a stale copy is, and the
    // retries (GET, remove again) went through: every machine is gone.
    let stale = recorder.stale_answers();
    for resource in ["machines", "nodes"] {
        let status = stale.iter().find(|(r, _)| r == resource).map(|(_, s)| *s);
        assert!(
            matches!(status, Some(409 | 422)),
            "the {resource} finalizer removal from a stale copy was refused as stale: {stale:?}"
        );
    }
    recorder.assert_calls_match_the_table(&ns);

    machine_half.abort();
    manager_half.abort();
    reaper.abort();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_controllers_run_a_full_lifecycle_under_deploy_rbac_yaml_without_a_403() {
    let Some(env) = TestEnv::new("rbac-deploy").await else {
        return;
    };
    let sa = "mcm-rs";
    let made = apply_rbac(
        &env,
        "deploy/rbac.yaml",
        &["default", "mcm-system"],
        &|_, n| n.to_string(),
    )
    .await;
    let token = service_account_token(&env, sa).await;
    let recorder = Recorder::default();
    let client = client_with_token(token, &recorder).await;
    run_scenario(&env, client.clone(), client, &recorder).await;
    remove_cluster_scoped(&env.client, &made).await;
}

#[tokio::test]
async fn the_controllers_run_a_full_lifecycle_under_gardeners_seed_and_shoot_rbac_without_a_403() {
    let Some(env) = TestEnv::new("rbac-gardener").await else {
        return;
    };
    // The seed Role binds machine-controller-manager of the control namespace;
    // the shoot's roles bind kube-system/machine-controller-manager of the
    // target, here the ServiceAccount `mcm-target` of the test namespace.
    let subject = |sa_ns: &str, name: &str| {
        if sa_ns == "kube-system" {
            "mcm-target".to_string()
        } else {
            name.to_string()
        }
    };
    let mut made = apply_rbac(
        &env,
        "deploy/gardener/rbac.yaml",
        &["shoot--example"],
        &subject,
    )
    .await;
    made.extend(
        apply_rbac(
            &env,
            "deploy/gardener/shoot-rbac.yaml",
            &["shoot--example"],
            &subject,
        )
        .await,
    );
    let recorder = Recorder::default();
    let control = client_with_token(
        service_account_token(&env, "machine-controller-manager").await,
        &recorder,
    )
    .await;
    let target =
        client_with_token(service_account_token(&env, "mcm-target").await, &recorder).await;
    run_scenario(&env, control, target, &recorder).await;
    remove_cluster_scoped(&env.client, &made).await;
}
