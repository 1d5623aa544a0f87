#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking
#![cfg(feature = "aws")]
//! The AWS provider end to end: the real `mcm run` binary, without a target
//! cluster, against the real control plane and moto (the EC2 emulator that
//! `hack/moto.sh` starts and announces in `MCM_AWS_TEST_ENDPOINT`).
//!
//! The MachineClass and its two Secrets are `examples/aws-machine-class.yaml`
//! as a user applies it, with the IDs replaced by the VPC, subnet, security
//! group, AMI and instance profile this test creates in moto, a cluster tag of
//! its own (moto is shared with tests running in parallel), and without
//! `ipv6PrefixCount`, since moto does not emulate IPv6 prefixes (the driver's
//! prefix handling is covered by `crates/provider-aws/tests/mocks.rs`).
//!
//! The binary reaches moto through [`ec2_proxy`], which counts its EC2 calls
//! per action and answers beyond EC2's published request buckets with
//! `RequestLimitExceeded`, as EC2 does: the test asserts the EC2 calls per
//! machine for create + initialize + delete and that none was throttled.
//!
//! Without the control plane or moto the test skips visibly, except in CI,
//! where it fails (`mcm_testenv::skip`).

mod ec2_proxy;

use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineClass, MachineDeployment};
use mcm_provider_aws::{AwsDriver, AwsDriverConfig};
use mcm_testenv::{eventually, moto_endpoint, must_eventually, TestEnv};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The region of `examples/aws-machine-class.yaml`.
const REGION: &str = "eu-west-1";
const EXAMPLE: &str = include_str!("../../../examples/aws-machine-class.yaml");
const DEPLOYMENT: &str = "aws-e2e";
/// Machines of the MachineDeployment.
const MACHINES: usize = 20;
/// The target: EC2 calls per machine for create + initialize + delete.
const MAX_EC2_CALLS_PER_MACHINE: f64 = 6.0;

use mcm_testenv::free_port;

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// An unsigned IAM Query call to moto (RunInstances needs an existing
/// instance profile, and the IAM SDK is not worth its build time for one call).
fn moto_iam(endpoint: &str, body: &str) -> String {
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(host).expect("connect to moto");
    let req = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}

/// What the test creates in moto for the MachineClass, and a driver whose
/// SDK client (`ec2_client`) the test uses to look at moto. The SDK's types
/// are never named: `aws-sdk-ec2` as a dev-dependency would make
/// `cargo test -p mcm --no-default-features` build the SDK.
struct Cloud {
    driver: AwsDriver,
    secret: Secret,
    ami: String,
    subnet: String,
    sg: String,
    profile: String,
}

async fn moto_setup(endpoint: &str) -> Cloud {
    let driver = AwsDriver::new(AwsDriverConfig::with_endpoint(endpoint));
    let secret = Secret {
        data: Some(
            [
                ("providerAccessKeyId", "testing"),
                ("providerSecretAccessKey", "testing"),
                ("userData", "#cloud-config\n"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect(),
        ),
        ..Default::default()
    };
    let ec2 = driver.ec2_client(REGION, &secret).expect("EC2 client");
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .amazon_provided_ipv6_cidr_block(true)
        .send()
        .await
        .expect("CreateVpc");
    let vpc = vpc.vpc().expect("vpc");
    let vpc_id = vpc.vpc_id().expect("vpc id").to_string();
    let v6 = vpc
        .ipv6_cidr_block_association_set()
        .iter()
        .find_map(|a| a.ipv6_cidr_block())
        .expect("the VPC has an IPv6 block")
        .replace("/56", "/64");
    let subnet = ec2
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.0.1.0/24")
        .ipv6_cidr_block(v6)
        .availability_zone(format!("{REGION}a"))
        .send()
        .await
        .expect("CreateSubnet")
        .subnet()
        .and_then(|s| s.subnet_id())
        .expect("subnet id")
        .to_string();
    let sg = ec2
        .create_security_group()
        .group_name(unique("mcm-e2e"))
        .description("mcm e2e")
        .vpc_id(&vpc_id)
        .send()
        .await
        .expect("CreateSecurityGroup")
        .group_id()
        .expect("sg id")
        .to_string();
    let ami = ec2
        .register_image()
        .name(unique("mcm-e2e-ami"))
        .root_device_name("/dev/xvda")
        .send()
        .await
        .expect("RegisterImage")
        .image_id()
        .expect("ami id")
        .to_string();
    let profile = unique("mcm-e2e-nodes");
    let answer = moto_iam(
        endpoint,
        &format!("Action=CreateInstanceProfile&InstanceProfileName={profile}&Version=2010-05-08"),
    );
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "CreateInstanceProfile: {answer}"
    );
    Cloud {
        driver,
        secret,
        ami,
        subnet,
        sg,
        profile,
    }
}

/// The documents of `examples/aws-machine-class.yaml`.
fn example_documents() -> Vec<Value> {
    serde_yaml::Deserializer::from_str(EXAMPLE)
        .map(|doc| Value::deserialize(doc).expect("examples/aws-machine-class.yaml parses"))
        .collect()
}

/// The example's MachineClass pointed at `cloud`, in namespace `ns`, tagged
/// with `cluster_tag` instead of the example's cluster, and with the subnet
/// under `subnetId`, a spelling that only Go's case-insensitive key matching
/// accepts (the canonical key is `subnetID`).
fn example_class(doc: &Value, cloud: &Cloud, ns: &str, cluster_tag: &str) -> MachineClass {
    let mut doc = doc.clone();
    doc["metadata"]["namespace"] = json!(ns);
    doc["secretRef"]["namespace"] = json!(ns);
    doc["credentialsSecretRef"]["namespace"] = json!(ns);
    let spec = &mut doc["providerSpec"];
    assert_eq!(spec["region"], json!(REGION), "the example's region");
    spec["ami"] = json!(cloud.ami);
    spec["iam"] = json!({"name": cloud.profile});
    let nic = &mut spec["networkInterfaces"][0];
    let obj = nic.as_object_mut().expect("network interface");
    obj.remove("subnetID");
    obj.insert("subnetId".into(), json!(cloud.subnet));
    nic["securityGroupIDs"] = json!([cloud.sg]);
    nic.as_object_mut()
        .expect("network interface")
        .remove("ipv6PrefixCount");
    assert!(
        nic["ipv6AddressCount"].as_i64().unwrap_or(0) >= 1,
        "the example asks for IPv6 addresses"
    );
    assert_eq!(spec["srcAndDstChecksEnabled"], json!(false));
    let tags = spec["tags"].as_object_mut().expect("tags");
    tags.retain(|k, _| !k.starts_with("kubernetes.io/cluster/"));
    tags.insert(cluster_tag.to_string(), json!("1"));
    assert!(tags.contains_key("kubernetes.io/role/node"));
    serde_json::from_value(doc).expect("the example's MachineClass")
}

/// `mcm run`, stopped (SIGTERM, then SIGKILL) when dropped. When the test
/// panics, the end of its log is printed.
struct McmRun {
    child: Child,
    log: PathBuf,
}

impl McmRun {
    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "mcm run exited with {status}; its log ({}):\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
    }
}

impl Drop for McmRun {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- the last lines of the mcm run log ({}) ---\n{}",
                self.log.display(),
                self.log_tail(80)
            );
        }
    }
}

fn mcm_run(ns: &str, moto: &str, port: u16) -> McmRun {
    let log = std::env::temp_dir().join(format!("mcm-aws-e2e-{ns}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .arg("run")
        .arg("--control-kubeconfig")
        .arg(mcm_testenv::kubeconfig_path())
        .args(["--target-kubeconfig", "none", "--namespace", ns])
        .args(["--aws-endpoint", moto])
        .args(["--leader-elect=false", "--address", "127.0.0.1"])
        .args(["--port", &port.to_string()])
        .args(["--min-retry-period", "1s", "--max-retry-period", "5s"])
        .env("NO_COLOR", "1")
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info,kube=warn,hyper=warn".into()),
        )
        .stdout(Stdio::from(file.try_clone().expect("log file")))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("spawn mcm run");
    McmRun { child, log }
}

/// The phase and last operation of every Machine in the namespace.
async fn machine_states(machines: &Api<Machine>) -> BTreeMap<String, (String, String)> {
    machines
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let (phase, op) = m
                .status
                .as_ref()
                .map(|s| {
                    (
                        s.current_status.phase.as_str().to_string(),
                        s.last_operation.description.clone(),
                    )
                })
                .unwrap_or_default();
            (m.name_any(), (phase, op))
        })
        .collect()
}

/// Waits until `done` holds for the Machines' phases (name → phase); on
/// timeout, fails with every Machine's phase and last operation.
async fn wait_for_machines(
    machines: &Api<Machine>,
    timeout: Duration,
    what: &str,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) {
    let done = &done;
    let reached = eventually(timeout, what, || async move {
        let phases: BTreeMap<String, String> = machine_states(machines)
            .await
            .into_iter()
            .map(|(name, (phase, _))| (name, phase))
            .collect();
        done(&phases).then_some(())
    })
    .await;
    if let Err(e) = reached {
        panic!(
            "{e}; the machines (phase, last operation): {:#?}",
            machine_states(machines).await
        );
    }
}

impl Cloud {
    /// Live (pending or running) instances carrying `cluster_tag`: instance ID → `Name` tag.
    async fn live_instances(&self, cluster_tag: &str) -> BTreeMap<String, String> {
        let ec2 = self
            .driver
            .ec2_client(REGION, &self.secret)
            .expect("client");
        let mut out = BTreeMap::new();
        let mut token: Option<String> = None;
        loop {
            let page = ec2
                .describe_instances()
                .set_next_token(token.clone())
                .send()
                .await
                .expect("DescribeInstances");
            for i in page.reservations().iter().flat_map(|r| r.instances()) {
                let tag = |k: &str| {
                    i.tags()
                        .iter()
                        .find(|t| t.key() == Some(k))
                        .map(|t| t.value().unwrap_or_default().to_string())
                };
                let state = i.state().and_then(|s| s.name()).map(|s| s.as_str());
                if tag(cluster_tag).is_some() && matches!(state, Some("pending" | "running")) {
                    out.insert(
                        i.instance_id().unwrap_or_default().to_string(),
                        tag("Name").unwrap_or_default(),
                    );
                }
            }
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                return out;
            }
        }
    }

    /// The network interfaces attached to an instance.
    async fn interfaces_of(&self, instance_id: &str) -> Vec<Nic> {
        let ec2 = self
            .driver
            .ec2_client(REGION, &self.secret)
            .expect("client");
        let out = ec2
            .describe_network_interfaces()
            .send()
            .await
            .expect("DescribeNetworkInterfaces");
        out.network_interfaces()
            .iter()
            .filter(|n| n.attachment().and_then(|a| a.instance_id()) == Some(instance_id))
            .map(|n| Nic {
                id: n.network_interface_id().unwrap_or_default().to_string(),
                source_dest_check: n.source_dest_check(),
                ipv6: n
                    .ipv6_addresses()
                    .iter()
                    .filter_map(|a| a.ipv6_address())
                    .map(str::to_string)
                    .collect(),
            })
            .collect()
    }
}

#[derive(Debug)]
struct Nic {
    id: String,
    source_dest_check: Option<bool>,
    ipv6: Vec<String>,
}

#[tokio::test]
async fn mcm_run_on_moto_brings_20_aws_machines_to_available_initialized_and_scales_to_0_within_6_ec2_calls_per_machine(
) {
    let t0 = Instant::now();
    let Some(moto) = moto_endpoint("mcm_run_on_moto_brings_20_aws_machines_to_available") else {
        return;
    };
    let Some(env) = TestEnv::new("aws-e2e").await else {
        return;
    };
    let ns = env.namespace.clone();
    let cloud = moto_setup(&moto).await;
    let cluster_tag = format!("kubernetes.io/cluster/{}", unique("shoot--e2e"));

    // The example's Secrets and MachineClass, pointed at moto.
    let docs = example_documents();
    let secrets: Api<Secret> = env.api();
    let classes: Api<MachineClass> = env.api();
    let mut class_name = String::new();
    for doc in &docs {
        match doc["kind"].as_str() {
            Some("Secret") => {
                let mut doc = doc.clone();
                doc["metadata"]["namespace"] = json!(ns);
                let s: Secret = serde_json::from_value(doc).expect("the example's Secret");
                secrets
                    .create(&PostParams::default(), &s)
                    .await
                    .expect("create Secret");
            }
            Some("MachineClass") => {
                let class = example_class(doc, &cloud, &ns, &cluster_tag);
                class_name = class.name_any();
                classes
                    .create(&PostParams::default(), &class)
                    .await
                    .expect("create MachineClass");
            }
            other => panic!("unexpected document {other:?} in examples/aws-machine-class.yaml"),
        }
    }
    assert!(!class_name.is_empty(), "the example has a MachineClass");
    println!(
        "[{:>5.1?}] moto and the control plane are set up",
        t0.elapsed()
    );

    let proxy = ec2_proxy::Ec2Proxy::start(&moto);
    let port = free_port();
    let mut mcm = mcm_run(&ns, &proxy.url, port);
    must_eventually(
        Duration::from_secs(30),
        "mcm run listens on its /healthz port",
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    mcm.assert_alive();
    // CARGO_BIN_EXE_mcm is target/<profile>/mcm, which a concurrent
    // `--no-default-features` build in the same target folder overwrites.
    let started = must_eventually(
        Duration::from_secs(10),
        "mcm run logs its providers",
        || async {
            std::fs::read_to_string(&mcm.log)
                .ok()?
                .lines()
                .find(|l| l.contains("starting") && l.contains("providers"))
                .map(str::to_string)
        },
    )
    .await;
    assert!(
        started.replace('\\', "").contains("\"aws\""),
        "{} has no AWS driver (built without the `aws` feature, e.g. by a concurrent \
         `cargo build --no-default-features` in the same target folder): {started}",
        env!("CARGO_BIN_EXE_mcm")
    );

    // The class's `subnetId` works and is reported on the class, naming the canonical key.
    let events: Api<Event> = env.api();
    let warning = must_eventually(
        Duration::from_secs(60),
        "a ProviderSpecWarning Event on the MachineClass naming subnetID",
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.involved_object.kind.as_deref() == Some("MachineClass")
                        && e.involved_object.name.as_deref() == Some(class_name.as_str())
                        && e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("ProviderSpecWarning")
                })
        },
    )
    .await;
    let message = warning.message.unwrap_or_default();
    assert!(
        message.contains("networkInterfaces[0].subnetId") && message.contains("subnetID"),
        "the warning names the key and its canonical spelling: {message}"
    );
    println!("[{:>5.1?}] MachineClass warning: {message}", t0.elapsed());

    // A MachineDeployment of MACHINES.
    let deployments: Api<MachineDeployment> = env.api();
    let md: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": ns},
        "spec": {
            "replicas": MACHINES,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"name": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"name": DEPLOYMENT}},
                "spec": {"class": {"kind": "MachineClass", "name": class_name}}
            }
        }
    }))
    .expect("MachineDeployment");
    deployments
        .create(&PostParams::default(), &md)
        .await
        .expect("create MachineDeployment");
    let t_apply = Instant::now();

    let machines: Api<Machine> = env.api();
    wait_for_machines(
        &machines,
        Duration::from_secs(300),
        &format!("{MACHINES} Available machines"),
        |p| p.len() == MACHINES && p.values().all(|ph| ph == "Available"),
    )
    .await;
    let md_status = must_eventually(
        Duration::from_secs(60),
        "the MachineDeployment reports all replicas available and Available=True",
        || async {
            let s = deployments.get(DEPLOYMENT).await.ok()?.status?;
            let available = s
                .conditions
                .iter()
                .any(|c| c.type_.as_str() == "Available" && c.status.as_str() == "True");
            let n = MACHINES as i32;
            (s.available_replicas == n && s.updated_replicas == n && available).then_some(s)
        },
    )
    .await;
    mcm.assert_alive();
    println!(
        "[{:>5.1?}] {MACHINES} machines Available {:.1?} after the MachineDeployment was applied (status: replicas {}, available {})",
        t0.elapsed(),
        t_apply.elapsed(),
        md_status.replicas,
        md_status.available_replicas
    );

    // The machines and the instances in moto are the same.
    let list = machines
        .list(&ListParams::default())
        .await
        .expect("list Machines")
        .items;
    let mut by_instance = BTreeMap::new();
    for m in &list {
        let pid = m.spec.provider_id.clone();
        assert!(
            pid.starts_with(&format!("aws:///{REGION}/i-")),
            "providerID of {}: {pid:?}",
            m.name_any()
        );
        let addresses = &m.status.as_ref().expect("status").addresses;
        assert!(
            addresses.iter().any(|a| a.address.contains(':')),
            "{} reports its IPv6 address: {addresses:?}",
            m.name_any()
        );
        let id = pid.rsplit('/').next().expect("instance id").to_string();
        by_instance.insert(id, m.name_any());
    }
    let live = cloud.live_instances(&cluster_tag).await;
    assert_eq!(
        live, by_instance,
        "one live instance per Machine, tagged Name=<machine> (instance → name)"
    );

    // InitializeMachine's work, as moto sees it.
    for id in live.keys() {
        let nics = cloud.interfaces_of(id).await;
        assert_eq!(
            nics.len(),
            1,
            "{id} has the example's one interface: {nics:?}"
        );
        for n in &nics {
            assert_eq!(
                n.source_dest_check,
                Some(false),
                "source/destination check off on {} of {id}",
                n.id
            );
            assert!(
                !n.ipv6.is_empty(),
                "an IPv6 address assigned to {} of {id}",
                n.id
            );
        }
    }
    println!(
        "[{:>5.1?}] moto: {} instances, source/destination check off, IPv6 assigned",
        t0.elapsed(),
        live.len()
    );
    let up = proxy.counts();

    // Scale to 0 through the scale subresource, as `kubectl scale` does.
    let t_scale = Instant::now();
    deployments
        .patch_scale(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale to 0");
    wait_for_machines(
        &machines,
        Duration::from_secs(120),
        "no Machine left",
        BTreeMap::is_empty,
    )
    .await;
    let terminated: BTreeSet<String> = by_instance.keys().cloned().collect();
    must_eventually(
        Duration::from_secs(60),
        "no pending or running instance with the cluster tag in moto",
        || async {
            cloud
                .live_instances(&cluster_tag)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    mcm.assert_alive();
    println!(
        "[{:>5.1?}] scaled to 0 in {:.1?}: no Machine, {} instances no longer running",
        t0.elapsed(),
        t_scale.elapsed(),
        terminated.len()
    );
    drop(mcm);

    // The EC2 calls of `mcm run`, as the proxy saw them.
    let all = proxy.counts();
    let per_machine = all.total() as f64 / MACHINES as f64;
    println!("EC2 calls of mcm run for {MACHINES} machines (create + initialize + delete):");
    for (action, n) in &all.calls {
        let scale_up = up.calls.get(action).copied().unwrap_or(0);
        println!(
            "  {action:<34} {n:>4}  ({:.2} per machine; {scale_up} until all Available)",
            *n as f64 / MACHINES as f64
        );
    }
    println!(
        "  total {} = {per_machine:.2} per machine; throttled {}",
        all.total(),
        all.total_throttled()
    );
    if all.total_throttled() > 0 {
        let first = all.run_instances.first().map(|r| r.0).unwrap_or_default();
        let arrivals: Vec<String> = all
            .run_instances
            .iter()
            .map(|(t, thr)| format!("{:.2}{}", t - first, if *thr { "!" } else { "" }))
            .collect();
        println!(
            "RunInstances arrivals (s, ! = throttled): {}",
            arrivals.join(" ")
        );
    }
    assert_eq!(
        all.total_throttled(),
        0,
        "no EC2 call beyond EC2's request buckets: {:?}",
        all.throttled
    );
    assert_eq!(
        all.calls.get("RunInstances").copied(),
        Some(MACHINES as u64),
        "one RunInstances per machine"
    );
    assert!(
        per_machine <= MAX_EC2_CALLS_PER_MACHINE,
        "{per_machine:.2} EC2 calls per machine (target {MAX_EC2_CALLS_PER_MACHINE}): {:?}",
        all.calls
    );
}
