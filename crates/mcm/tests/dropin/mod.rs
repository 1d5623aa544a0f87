//! Support for the drop-in tests: an in-cluster environment for a process
//! (`KUBERNETES_SERVICE_HOST/PORT` and a ServiceAccount's token, CA and
//! namespace in a folder, found through `MCM_SERVICEACCOUNT_DIR`), Gardener's
//! seed RBAC for that ServiceAccount, the container image as
//! `deploy/Dockerfile` declares it (`image`), the
//! in-process local cloud and the objects of a MachineDeployment.

#![allow(dead_code)]

pub mod image;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use mcm_api::{Machine, MachineClass, MachineDeployment};
use mcm_provider_local::{server, Tunables};
use mcm_testenv::TestEnv;
use serde_json::json;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The ServiceAccount (and Role) name Gardener uses.
pub const SA: &str = "machine-controller-manager";

/// Removes a folder on drop.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A controller process, killed on drop (also when the test panics).
pub struct Proc {
    /// The child.
    pub child: Child,
    /// Its log file.
    pub log: PathBuf,
}

impl Proc {
    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One test's world: namespace, in-cluster folder, image layout, local cloud.
pub struct World {
    pub env: TestEnv,
    /// The admin kubeconfig: the `--target-kubeconfig=<file>`.
    pub kubeconfig: PathBuf,
    /// `KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`.
    pub service: (String, String),
    /// The ServiceAccount folder (token, ca.crt, namespace).
    pub sa_dir: PathBuf,
    /// The container image of `deploy/Dockerfile`, laid out in a folder.
    pub image: image::ImageRoot,
    /// The local cloud's URL.
    pub cloud_url: String,
    _dir: TempDir,
    _cloud: Box<dyn std::any::Any + Send>,
}

fn server_of(kubeconfig: &Path) -> (String, String, PathBuf) {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server in kubeconfig")
        .trim()
        .to_string();
    let ca = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority: "))
        .expect("certificate-authority in kubeconfig")
        .trim()
        .to_string();
    let hostport = server.trim_start_matches("https://");
    let (host, port) = hostport.rsplit_once(':').expect("host:port");
    (host.to_string(), port.to_string(), PathBuf::from(ca))
}

/// Gardener's seed Role for the ServiceAccount `machine-controller-manager`
/// (from `pkg/component/nodemanagement/machinecontrollermanager`), and its binding.
pub fn gardener_seed_role(ns: &str) -> (Role, RoleBinding) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": SA, "namespace": ns},
        "rules": [
            {"apiGroups": ["machine.sapcloud.io"], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["configmaps", "secrets", "endpoints", "events", "pods"], "verbs": ["*"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["machine-controller", "machine-controller-manager"],
             "verbs": ["get", "watch", "update"]}
        ]
    }))
    .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": SA, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}]
    }))
    .expect("RoleBinding");
    (role, binding)
}

impl World {
    /// Sets everything up; `None` when the control plane is missing (skip).
    pub async fn new(test: &str) -> Option<World> {
        let env = TestEnv::new(test).await?;
        let ns = env.namespace.clone();
        let kubeconfig = mcm_testenv::kubeconfig_path();
        let (host, port, ca) = server_of(&kubeconfig);
        let dir = TempDir(std::env::temp_dir().join(format!("mcm-dropin-{ns}")));
        let sa_dir = dir.0.join("serviceaccount");
        std::fs::create_dir_all(&sa_dir).expect("sa dir");
        let image = image::ImageRoot::install(
            image::repository_image(),
            &dir.0.join("image"),
            Path::new(env!("CARGO_BIN_EXE_mcm")),
        );

        // The ServiceAccount with Gardener's seed Role, and its token.
        let pp = PostParams::default();
        let sas: Api<ServiceAccount> = env.api();
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": SA}})).expect("SA");
        sas.create(&pp, &sa).await.expect("create SA");
        let (role, binding) = gardener_seed_role(&ns);
        env.api::<Role>()
            .create(&pp, &role)
            .await
            .expect("create Role");
        env.api::<RoleBinding>()
            .create(&pp, &binding)
            .await
            .expect("create RoleBinding");
        let tr = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = sas
            .create_token_request(SA, &pp, &tr)
            .await
            .expect("token request")
            .status
            .expect("token")
            .token
            .expect("token value");
        std::fs::write(sa_dir.join("token"), token).expect("token file");
        std::fs::copy(&ca, sa_dir.join("ca.crt")).expect("ca.crt");
        std::fs::write(sa_dir.join("namespace"), &ns).expect("namespace file");

        // The local cloud, in process; its zone is the namespace.
        let mut config = server::CloudConfig::new(dir.0.join("local-cloud.redb"));
        config.zone = ns.clone();
        config.target_kubeconfig = Some(kubeconfig.clone());
        config.heartbeat_interval = Duration::from_secs(2);
        config.tunables = Tunables::unlimited();
        config.tunables.boot_delay_ms = 500;
        let (addr, cloud) = server::spawn(config).await.expect("local cloud");

        Some(World {
            env,
            kubeconfig,
            service: (host, port),
            sa_dir,
            image,
            cloud_url: format!("http://{addr}"),
            _dir: dir,
            _cloud: Box::new(cloud),
        })
    }

    /// Starts the binary with `args`, invoked as `argv0`, in an in-cluster
    /// environment, logging to a file.
    pub fn spawn(&self, argv0: &str, args: &[String], log_name: &str) -> Proc {
        self.spawn_at(
            Path::new(env!("CARGO_BIN_EXE_mcm")),
            argv0,
            args,
            &std::env::temp_dir(),
            log_name,
        )
    }

    /// Starts a container of the image with Kubernetes' `command` and `args`
    /// and no `workingDir`, as a container runtime would (entrypoint, CMD and
    /// working directory from `deploy/Dockerfile`).
    pub fn spawn_container(&self, command: &[String], args: &[String], log_name: &str) -> Proc {
        let start = self
            .image
            .start(command, args, None)
            .unwrap_or_else(|e| panic!("{log_name}: the container does not start: {e}"));
        self.spawn_at(
            &start.program,
            &start.argv0,
            &start.args,
            &start.cwd,
            log_name,
        )
    }

    fn spawn_at(
        &self,
        program: &Path,
        argv0: &str,
        args: &[String],
        cwd: &Path,
        log_name: &str,
    ) -> Proc {
        let ns = &self.env.namespace;
        let log = std::env::temp_dir().join(format!("mcm-dropin-{ns}-{log_name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        eprintln!("{log_name} log: {}", log.display());
        let child = Command::new(program)
            .arg0(argv0)
            .args(args)
            .current_dir(cwd)
            .env_remove("KUBECONFIG")
            .env_remove("MCM_CONTROL_KUBECONFIG")
            .env_remove("MCM_TARGET_KUBECONFIG")
            .env_remove("RUST_LOG")
            .env("KUBERNETES_SERVICE_HOST", &self.service.0)
            .env("KUBERNETES_SERVICE_PORT", &self.service.1)
            .env("MCM_SERVICEACCOUNT_DIR", &self.sa_dir)
            .stdout(Stdio::from(file.try_clone().expect("log")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("spawn");
        Proc { child, log }
    }

    /// Gardener's machine-controller-manager command line, verbatim but for `<ns>` and `<file>`.
    pub fn manager_args(&self) -> Vec<String> {
        let ns = &self.env.namespace;
        let file = self.kubeconfig.display();
        [
            "--control-kubeconfig=inClusterConfig".to_string(),
            "--machine-safety-overshooting-period=1m".into(),
            format!("--namespace={ns}"),
            "--port=10258".into(),
            "--safety-up=2".into(),
            "--safety-down=1".into(),
            format!("--target-kubeconfig={file}"),
            "--concurrent-syncs=30".into(),
            "--kube-api-qps=150".into(),
            "--kube-api-burst=200".into(),
            "--v=3".into(),
        ]
        .to_vec()
    }

    /// Gardener's provider sidecar arguments, verbatim but for `<ns>` and
    /// `<file>`, plus mcm-rs's flag for the local cloud's address.
    pub fn controller_args(&self) -> Vec<String> {
        let ns = &self.env.namespace;
        let file = self.kubeconfig.display();
        [
            "--control-kubeconfig=inClusterConfig".to_string(),
            "--kube-api-qps=100".into(),
            "--kube-api-burst=200".into(),
            "--machine-creation-timeout=20m".into(),
            "--machine-drain-timeout=2h".into(),
            "--machine-health-timeout=10m".into(),
            "--machine-safety-apiserver-statuscheck-timeout=30s".into(),
            "--machine-safety-apiserver-statuscheck-period=1m".into(),
            "--machine-safety-orphan-vms-period=30m".into(),
            format!("--namespace={ns}"),
            "--port=10259".into(),
            format!("--target-kubeconfig={file}"),
            "--v=3".into(),
            format!("--local-cloud-url={}", self.cloud_url),
        ]
        .to_vec()
    }

    /// The userData Secret, a `local` MachineClass and a MachineDeployment of `replicas`.
    pub async fn create_deployment(&self, name: &str, replicas: i32) {
        let ns = &self.env.namespace;
        let pp = PostParams::default();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "dropin-secret", "namespace": ns},
            "stringData": {"userData": "#cloud-config\n"}
        }))
        .expect("Secret");
        let _ = self.env.api::<Secret>().create(&pp, &secret).await;
        let class: MachineClass = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": "dropin-class", "namespace": ns},
            "provider": "local",
            "providerSpec": {"image": "local-ubuntu", "instanceType": "small",
                "tags": {format!("kubernetes.io/cluster/{ns}"): "1", "kubernetes.io/role/node": "1"}},
            "secretRef": {"name": "dropin-secret", "namespace": ns},
            "nodeTemplate": {"capacity": {"cpu": "2", "gpu": "0", "memory": "4Gi"},
                "instanceType": "small", "region": "local", "zone": ns}
        }))
        .expect("MachineClass");
        let _ = self.env.api::<MachineClass>().create(&pp, &class).await;
        let mcd: MachineDeployment = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": replicas,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "selector": {"matchLabels": {"pool": name}},
                "template": {
                    // `name`: the MachineDeployment, as Gardener labels machines
                    // (the duration metrics' `machine_deployment`).
                    "metadata": {"labels": {"pool": name, "name": name}},
                    "spec": {"class": {"kind": "MachineClass", "name": "dropin-class"}}
                }
            }
        }))
        .expect("MachineDeployment");
        self.env
            .api::<MachineDeployment>()
            .create(&pp, &mcd)
            .await
            .expect("create MachineDeployment");
    }

    /// Machines of the namespace by phase: (all, Running).
    pub async fn machine_phases(&self) -> Option<(usize, usize)> {
        let list = self
            .env
            .api::<Machine>()
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        let running = list
            .iter()
            .filter(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| s.current_status.phase.as_str() == "Running")
            })
            .count();
        Some((list.len(), running))
    }
}

/// Gardener's fluent-bit parser for the machine-controller-manager pod's
/// containers (gardener/gardener,
/// `pkg/component/nodemanagement/machinecontrollermanager/logging.go`):
/// its `Regex`; its `Time_Format` is `%m%d %H:%M:%S.%L`.
pub const GARDENER_PARSER: &str =
    r"^(?<severity>\w)(?<time>\d{4} [^\s]*)\s+(?<pid>\d+)\s+(?<source>[^ \]]+)\] (?<log>.*)$";

/// Every line of `log` is parsed by Gardener's parser into a klog severity,
/// a time of its `Time_Format`, a pid and a `file:line` source; no line
/// carries colour codes. Returns the number of lines.
pub fn assert_gardener_parses(log: &str, half: &str) -> usize {
    let parser = regex::Regex::new(GARDENER_PARSER).expect("Gardener's regex");
    let time = regex::Regex::new(r"^(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.\d{1,9}$").expect("time");
    let mut n = 0;
    for line in log.lines() {
        n += 1;
        assert!(!line.contains('\x1b'), "{half}: colour codes in {line:?}");
        let c = parser
            .captures(line)
            .unwrap_or_else(|| panic!("{half}: Gardener's parser does not match {line:?}"));
        assert!(
            matches!(&c["severity"], "I" | "W" | "E" | "F"),
            "{half}: severity of {line:?}"
        );
        let t = time
            .captures(&c["time"])
            .unwrap_or_else(|| panic!("{half}: time (%m%d %H:%M:%S.%L) of {line:?}"));
        let num = |i: usize| t[i].parse::<u32>().unwrap_or(99);
        assert!(
            (1..=12).contains(&num(1))
                && (1..=31).contains(&num(2))
                && num(3) < 24
                && num(4) < 60
                && num(5) < 61,
            "{half}: time of {line:?}"
        );
        assert!(
            c["source"]
                .rsplit_once(':')
                .is_some_and(|(f, l)| !f.is_empty() && l.parse::<u32>().is_ok()),
            "{half}: source file:line of {line:?}"
        );
    }
    n
}

/// The metric names the Grafana dashboard `deploy/grafana/machine-controller-manager.json`
/// queries (every `mcm_…` name in its panels' expressions and its variables' queries).
pub fn dashboard_metric_names() -> std::collections::BTreeSet<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/grafana/machine-controller-manager.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("JSON");
    let mut queries: Vec<String> = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().expect("targets") {
            queries.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    for v in dash["templating"]["list"].as_array().expect("variables") {
        if v["type"] == "query" {
            queries.push(v["query"].as_str().expect("query").to_string());
        }
    }
    let name = regex::Regex::new(r"\bmcm_[a-z0-9_]+").expect("regex");
    queries
        .iter()
        .flat_map(|q| name.find_iter(q).map(|m| m.as_str().to_string()))
        .collect()
}

/// The family a sample name belongs to among `families` (a histogram's
/// `_bucket`, `_sum`, `_count`).
pub fn family_of(sample: &str, families: &std::collections::BTreeSet<String>) -> Option<String> {
    if families.contains(sample) {
        return Some(sample.to_string());
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|s| sample.strip_suffix(s))
        .find(|f| families.contains(*f))
        .map(str::to_string)
}

/// `GET http://127.0.0.1:<port><path>` (blocking, short): (status, content type, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    Some((status, content_type, body.to_string()))
}

/// The metric family names of a Prometheus text scrape (from `# TYPE` lines).
pub fn family_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// A committed list of the reference's family names (comments and blank lines skipped).
pub fn reference_names(list: &str) -> std::collections::BTreeSet<String> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}
