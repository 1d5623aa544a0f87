//! The driver against moto, a local EC2 emulator (`hack/moto.sh` starts it and
//! exports `MCM_AWS_TEST_ENDPOINT`). Without the variable these tests skip
//! visibly, except in CI, where they fail (`mcm_testenv::moto_endpoint`).
//!
//! Each test builds its own dual-stack VPC, subnet, security group, AMI and
//! instance profile through the SDK, and its own cluster tag, so tests can
//! share one moto and run in parallel.
//!
//! What moto does not emulate (covered in `tests/mocks.rs`): IPv6 prefixes,
//! per-interface IPv6 addresses at launch (InitializeMachine assigns them
//! here), EFA interfaces, capacity/throttling errors, eventual consistency,
//! and ClientToken idempotency (the driver's adopt-by-Name-tag covers retries).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

mod common;

use aws_sdk_ec2::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::operation::run_instances::RunInstancesInput;
use aws_sdk_ec2::types::{Filter, InstanceAttributeName};
use common::*;
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver, ListMachinesRequest};
use mcm_provider_aws::{AwsDriver, AwsDriverConfig};
use serde_json::json;
use std::io::{Read, Write};
use std::time::Duration;

/// moto's endpoint, or `None` after the visible skip (a failure in CI).
fn endpoint() -> Option<String> {
    mcm_testenv::moto_endpoint(&mcm_testenv::current_test())
}

/// An unsigned IAM Query call to moto (the test needs an instance profile,
/// and the IAM SDK crate is not worth its build time for one call).
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

struct Env {
    driver: AwsDriver,
    client: aws_sdk_ec2::Client,
    ami: String,
    subnet: String,
    sg: String,
    cluster: String,
    profile: String,
}

impl Env {
    async fn new() -> Option<Env> {
        Self::with_config(|_| {}).await
    }

    async fn with_config(adjust: impl FnOnce(&mut AwsDriverConfig)) -> Option<Env> {
        let endpoint = endpoint()?;
        init_tracing();
        let mut cfg = AwsDriverConfig::with_endpoint(&endpoint);
        cfg.visibility_backoff.initial = Duration::from_millis(50);
        adjust(&mut cfg);
        let driver = AwsDriver::new(cfg);
        let client = driver.ec2_client(REGION, &secret()).expect("client");
        let vpc = client
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
        let subnet = client
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
        let sg = client
            .create_security_group()
            .group_name(unique("sg"))
            .description("mcm test")
            .vpc_id(&vpc_id)
            .send()
            .await
            .expect("CreateSecurityGroup")
            .group_id()
            .expect("sg id")
            .to_string();
        let ami = client
            .register_image()
            .name(unique("mcm-ami"))
            .root_device_name("/dev/xvda")
            .send()
            .await
            .expect("RegisterImage")
            .image_id()
            .expect("ami id")
            .to_string();
        let profile = unique("mcm-profile");
        let body = format!(
            "Action=CreateInstanceProfile&InstanceProfileName={profile}&Version=2010-05-08"
        );
        let answer = moto_iam(&endpoint, &body);
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "CreateInstanceProfile: {answer}"
        );
        Some(Env {
            driver,
            client,
            ami,
            subnet,
            sg,
            cluster: format!("kubernetes.io/cluster/{}", unique("shoot")),
            profile,
        })
    }

    fn spec(&self) -> serde_json::Value {
        json!({
            "ami": self.ami,
            "machineType": "m5.large",
            "region": REGION,
            "iam": {"name": self.profile},
            "blockDevices": [{"ebs": {"volumeSize": 20, "volumeType": "gp3"}}],
            "networkInterfaces": [{"subnetID": self.subnet, "securityGroupIDs": [self.sg]}],
            "tags": {self.cluster.clone(): "1", "kubernetes.io/role/node": "1"}
        })
    }

    async fn instances_named(&self, name: &str) -> Vec<aws_sdk_ec2::types::Instance> {
        let out = self
            .client
            .describe_instances()
            .filters(Filter::builder().name("tag:Name").values(name).build())
            .send()
            .await
            .expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances().iter().cloned())
            .collect()
    }
}

/// Records the RunInstances input the driver sends, after the SDK built it
/// from the driver's request and before it is serialized.
#[derive(Debug, Default, Clone)]
struct RunInstancesRecorder(std::sync::Arc<std::sync::Mutex<Vec<RunInstancesInput>>>);

impl Intercept for RunInstancesRecorder {
    fn name(&self) -> &'static str {
        "RunInstancesRecorder"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(input) = context.input().downcast_ref::<RunInstancesInput>() {
            if let Ok(mut sent) = self.0.lock() {
                sent.push(input.clone());
            }
        }
        Ok(())
    }
}

fn instance_id(provider_id: &str) -> String {
    provider_id.rsplit('/').next().expect("id").to_string()
}

#[tokio::test]
async fn moto_create_sends_every_spec_field() {
    let recorder = RunInstancesRecorder::default();
    let hook = recorder.clone();
    let Some(env) = Env::with_config(move |cfg| {
        cfg.sdk_config_hook = Some(std::sync::Arc::new(move |b| b.interceptor(hook.clone())));
    })
    .await
    else {
        return;
    };
    let mut spec = env.spec();
    spec["keyName"] = json!("test-key");
    spec["blockDevices"] = json!([
        {"deviceName": "/root", "ebs": {"volumeSize": 20, "volumeType": "gp3", "encrypted": true, "throughput": 250, "iops": 3000}},
        {"deviceName": "/dev/sdb", "ebs": {"volumeSize": 10, "volumeType": "gp2",
            "kmsKeyID": "arn:aws:kms:eu-west-1:123456789012:key/test", "deleteOnTermination": false}}
    ]);
    spec["networkInterfaces"] = json!([{"subnetID": env.subnet, "securityGroupIDs": [env.sg],
        "ipv6AddressCount": 1, "associatePublicIPAddress": false, "description": "mcm primary"}]);
    spec["tags"]["team"] = json!("mcm");
    spec["tags"]["Name"] = json!("overridden");
    spec["instanceMetadataOptions"] = json!({"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 2, "httpProtocolIpv6": "enabled"});
    spec["cpuOptions"] = json!({"coreCount": 1, "threadsPerCore": 2});
    // Non-default values, so a dropped field cannot pass by EC2's defaults.
    spec["placement"] = json!({"tenancy": "dedicated", "partitionNumber": 2});
    spec["capacityReservation"] = json!({"capacityReservationPreference": "none"});
    spec["spotPrice"] = json!("0.5");
    spec["ebsOptimized"] = json!(true);
    spec["monitoring"] = json!(true);
    let class = class("full", spec);
    let m = machine("full");
    let name = m.metadata.name.clone().expect("name");
    let req = request(&m, &class, &secret());

    let created = env.driver.create_machine(&req).await.expect("create");
    assert!(
        created.provider_id.starts_with("aws:///eu-west-1/i-"),
        "{}",
        created.provider_id
    );
    assert!(!created.node_name.is_empty());
    let id = instance_id(&created.provider_id);
    let i = env
        .client
        .describe_instances()
        .instance_ids(&id)
        .send()
        .await
        .expect("describe")
        .reservations()[0]
        .instances()[0]
        .clone();
    assert_eq!(i.image_id(), Some(env.ami.as_str()));
    assert_eq!(i.instance_type().map(|t| t.as_str()), Some("m5.large"));
    assert_eq!(i.key_name(), Some("test-key"));
    assert_eq!(i.private_dns_name(), Some(created.node_name.as_str()));
    assert_eq!(
        i.client_token(),
        Some(format!("mcm-{}", m.metadata.uid.as_deref().expect("uid")).as_str())
    );
    let tag = |k: &str| {
        i.tags()
            .iter()
            .find(|t| t.key() == Some(k))
            .and_then(|t| t.value())
            .map(str::to_string)
    };
    assert_eq!(
        tag("Name").as_deref(),
        Some(name.as_str()),
        "Name = machine name"
    );
    assert_eq!(tag(&env.cluster).as_deref(), Some("1"));
    assert_eq!(tag("kubernetes.io/role/node").as_deref(), Some("1"));
    assert_eq!(tag("team").as_deref(), Some("mcm"));
    assert!(i
        .iam_instance_profile()
        .and_then(|p| p.arn())
        .is_some_and(|a| a.ends_with(&env.profile)));
    let md = i.metadata_options().expect("metadata options");
    assert_eq!(md.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(md.http_put_response_hop_limit(), Some(2));
    assert_eq!(md.http_endpoint().map(|t| t.as_str()), Some("enabled"));
    assert_eq!(md.http_protocol_ipv6().map(|t| t.as_str()), Some("enabled"));
    assert_eq!(
        i.instance_lifecycle().map(|l| l.as_str()),
        Some("spot"),
        "spotPrice → spot market"
    );
    assert_eq!(i.ebs_optimized(), Some(true));
    assert_eq!(
        i.monitoring().and_then(|m| m.state()).map(|s| s.as_str()),
        Some("enabled")
    );
    // cpuOptions, placement, capacityReservation: moto accepts them but does
    // not echo them (DescribeInstances has no CpuOptions and no
    // CapacityReservationSpecification, and Placement.Tenancy is always
    // "default"), so they are checked on the RunInstances input the driver
    // sent to moto, recorded by an SDK interceptor.
    let sent = recorder.0.lock().expect("recorder").clone();
    let run: Vec<_> = sent
        .iter()
        .filter(|r| r.client_token() == i.client_token())
        .collect();
    assert_eq!(run.len(), 1, "one RunInstances for the machine: {sent:?}");
    let run = run[0];
    let cpu = run.cpu_options().expect("cpuOptions sent");
    assert_eq!(cpu.core_count(), Some(1));
    assert_eq!(cpu.threads_per_core(), Some(2));
    let placement = run.placement().expect("placement sent");
    assert_eq!(placement.tenancy().map(|t| t.as_str()), Some("dedicated"));
    assert_eq!(placement.partition_number(), Some(2));
    assert_eq!(
        run.capacity_reservation_specification()
            .and_then(|c| c.capacity_reservation_preference())
            .map(|p| p.as_str()),
        Some("none")
    );
    let eni = &i.network_interfaces()[0];
    assert_eq!(eni.subnet_id(), Some(env.subnet.as_str()));
    assert_eq!(eni.groups()[0].group_id(), Some(env.sg.as_str()));
    assert_eq!(
        eni.attachment().and_then(|a| a.delete_on_termination()),
        Some(true)
    );
    // Volumes: root named after the AMI's root device, data disk with KMS and kept.
    let root_name = env
        .client
        .describe_images()
        .image_ids(&env.ami)
        .send()
        .await
        .expect("image")
        .images()[0]
        .root_device_name()
        .expect("root device name")
        .to_string();
    let bdm: Vec<_> = i.block_device_mappings().to_vec();
    let root = bdm
        .iter()
        .find(|b| b.device_name() == Some(root_name.as_str()))
        .unwrap_or_else(|| panic!("root mapping {root_name} in {bdm:?}"));
    let data = bdm
        .iter()
        .find(|b| b.device_name() == Some("/dev/sdb"))
        .expect("data mapping");
    assert_eq!(
        data.ebs().and_then(|e| e.delete_on_termination()),
        Some(false)
    );
    let vols = env
        .client
        .describe_volumes()
        .volume_ids(root.ebs().and_then(|e| e.volume_id()).expect("root vol"))
        .volume_ids(data.ebs().and_then(|e| e.volume_id()).expect("data vol"))
        .send()
        .await
        .expect("volumes");
    let root_vol = vols
        .volumes()
        .iter()
        .find(|v| v.size() == Some(20))
        .expect("root volume");
    assert_eq!(root_vol.volume_type().map(|t| t.as_str()), Some("gp3"));
    assert_eq!(root_vol.encrypted(), Some(true));
    let data_vol = vols
        .volumes()
        .iter()
        .find(|v| v.size() == Some(10))
        .expect("data volume");
    assert_eq!(data_vol.volume_type().map(|t| t.as_str()), Some("gp2"));
    assert_eq!(
        data_vol.encrypted(),
        Some(true),
        "kmsKeyID implies encryption"
    );
    assert_eq!(
        data_vol.kms_key_id(),
        Some("arn:aws:kms:eu-west-1:123456789012:key/test")
    );
    assert!(
        data_vol
            .tags()
            .iter()
            .any(|t| t.key() == Some("Name") && t.value() == Some(name.as_str())),
        "volumes carry the Name tag"
    );
    // User data: base64 of the secret's userData.
    let ud = env
        .client
        .describe_instance_attribute()
        .instance_id(&id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .expect("user data");
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(
            ud.user_data()
                .and_then(|v| v.value())
                .expect("user data value"),
        )
        .expect("base64");
    assert_eq!(decoded, USER_DATA.as_bytes());

    // Delete keeps the data volume marked deleteOnTermination=false.
    let mut req = req;
    req.machine.spec.provider_id = created.provider_id.clone();
    env.driver.delete_machine(&req).await.expect("delete");
    let left = env
        .client
        .describe_volumes()
        .filters(
            Filter::builder()
                .name("volume-id")
                .values(data_vol.volume_id().expect("id"))
                .build(),
        )
        .send()
        .await
        .expect("volumes");
    assert!(
        left.volumes()
            .iter()
            .any(|v| v.state().map(|s| s.as_str()) != Some("deleted")),
        "retained data volume kept: {:?}",
        left.volumes()
    );
}

#[tokio::test]
async fn moto_initialize_disables_src_dst_assigns_ipv6_and_second_call_changes_nothing() {
    let Some(env) = Env::new().await else { return };
    // A second interface in another subnet of the same VPC is not needed for
    // the check; two interfaces on one subnet are enough.
    let mut spec = env.spec();
    spec["srcAndDstChecksEnabled"] = json!(false);
    spec["networkInterfaces"] = json!([
        {"subnetID": env.subnet, "securityGroupIDs": [env.sg], "ipv6AddressCount": 2},
        {"subnetID": env.subnet, "securityGroupIDs": [env.sg]}
    ]);
    let class = class("init", spec);
    let mut m = machine("init");
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let req = request(&m, &class, &secret());

    let before = env
        .driver
        .get_machine_status(&req)
        .await
        .expect_err("uninitialized");
    assert_eq!(before.code, Code::Uninitialized, "{before}");
    let ident = before
        .machine
        .as_deref()
        .expect("identity with Uninitialized");
    assert_eq!(ident.provider_id, created.provider_id);
    assert_eq!(ident.node_name, created.node_name);

    let init = env
        .driver
        .initialize_machine(&req)
        .await
        .expect("initialize");
    assert_eq!(init.provider_id, created.provider_id);
    let enis = env
        .client
        .describe_network_interfaces()
        .filters(
            Filter::builder()
                .name("attachment.instance-id")
                .values(instance_id(&created.provider_id))
                .build(),
        )
        .send()
        .await
        .expect("enis");
    assert_eq!(enis.network_interfaces().len(), 2);
    for n in enis.network_interfaces() {
        assert_eq!(
            n.source_dest_check(),
            Some(false),
            "check off on {:?}",
            n.network_interface_id()
        );
        if n.attachment().and_then(|a| a.device_index()) == Some(0) {
            assert_eq!(
                n.ipv6_addresses().len(),
                2,
                "two IPv6 addresses on the primary interface"
            );
        }
    }
    let v6 = init
        .addresses
        .iter()
        .filter(|a| a.address.contains(':'))
        .count();
    assert_eq!(
        v6, 2,
        "the response carries the new IPv6 addresses: {:?}",
        init.addresses
    );

    env.driver
        .get_machine_status(&req)
        .await
        .expect("OK after initialize");
    let calls = env.driver.api_calls();
    let again = env
        .driver
        .initialize_machine(&req)
        .await
        .expect("second initialize");
    let diff = env.driver.api_calls().since(&calls);
    assert_eq!(
        diff.mutating(),
        0,
        "second InitializeMachine made mutating calls: {diff:?}"
    );
    assert_eq!(again.provider_id, created.provider_id);
    env.driver.delete_machine(&req).await.expect("delete");
}

#[tokio::test]
async fn moto_delete_twice_then_status_not_found() {
    let Some(env) = Env::new().await else { return };
    let class = class("del", env.spec());
    let mut m = machine("del");
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let req = request(&m, &class, &secret());
    env.driver.delete_machine(&req).await.expect("first delete");
    env.driver
        .delete_machine(&req)
        .await
        .expect("second delete is OK");
    let s = env.driver.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(s.code, Code::NotFound, "{s}");
    // Without a provider ID too.
    m.spec.provider_id.clear();
    let req = request(&m, &class, &secret());
    env.driver
        .delete_machine(&req)
        .await
        .expect("delete by tags of a gone VM");
    assert_eq!(
        env.driver
            .get_machine_status(&req)
            .await
            .expect_err("gone")
            .code,
        Code::NotFound
    );
}

#[tokio::test]
async fn moto_list_by_cluster_and_role_tags() {
    let Some(env) = Env::new().await else { return };
    let class_a = class("list", env.spec());
    let mut spec_b = env.spec();
    spec_b["tags"] =
        json!({"kubernetes.io/cluster/other-shoot-x": "1", "kubernetes.io/role/node": "1"});
    let class_b = class("list-other", spec_b);
    // Same cluster, another role: listed only if the role tag is ignored.
    let mut spec_c = env.spec();
    spec_c["tags"] = json!({env.cluster.clone(): "1", "kubernetes.io/role/bastion": "1"});
    let class_c = class("list-other-role", spec_c);
    let mut mine = Vec::new();
    for _ in 0..3 {
        let m = machine("list");
        let c = env
            .driver
            .create_machine(&request(&m, &class_a, &secret()))
            .await
            .expect("create");
        mine.push((c.provider_id, m));
    }
    let other = machine("other");
    let other_created = env
        .driver
        .create_machine(&request(&other, &class_b, &secret()))
        .await
        .expect("create other");
    let other_role = machine("other-role");
    let other_role_created = env
        .driver
        .create_machine(&request(&other_role, &class_c, &secret()))
        .await
        .expect("create other role");
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: class_a.clone(),
            secret: secret(),
        })
        .await
        .expect("list");
    assert_eq!(listed.machine_list.len(), 3, "{:?}", listed.machine_list);
    for (pid, m) in &mine {
        assert_eq!(listed.machine_list.get(pid), m.metadata.name.as_ref());
    }
    assert!(
        !listed.machine_list.contains_key(&other_created.provider_id),
        "another cluster's machine is not listed"
    );
    assert!(
        !listed
            .machine_list
            .contains_key(&other_role_created.provider_id),
        "the same cluster's machine of another role is not listed"
    );
    // The other role's class lists exactly its own machine.
    let listed_c = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: class_c.clone(),
            secret: secret(),
        })
        .await
        .expect("list other role");
    assert_eq!(
        listed_c.machine_list.keys().collect::<Vec<_>>(),
        vec![&other_role_created.provider_id],
        "{:?}",
        listed_c.machine_list
    );
    for (_, m) in &mine {
        env.driver
            .delete_machine(&request(m, &class_a, &secret()))
            .await
            .expect("delete");
    }
    env.driver
        .delete_machine(&request(&other, &class_b, &secret()))
        .await
        .expect("delete");
    env.driver
        .delete_machine(&request(&other_role, &class_c, &secret()))
        .await
        .expect("delete other role");
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: class_a,
            secret: secret(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.is_empty(),
        "terminated VMs are not listed"
    );
}

#[tokio::test]
async fn moto_retried_create_with_the_same_uid_gives_one_instance() {
    let Some(env) = Env::new().await else { return };
    let class = class("retry", env.spec());
    let m = machine("retry");
    let req = request(&m, &class, &secret());
    let first = env.driver.create_machine(&req).await.expect("create");
    let second = env
        .driver
        .create_machine(&req)
        .await
        .expect("retried create");
    assert_eq!(first.provider_id, second.provider_id);
    // Concurrent retries of the same machine too.
    let (a, b) = tokio::join!(
        env.driver.create_machine(&req),
        env.driver.create_machine(&req)
    );
    assert_eq!(a.expect("a").provider_id, first.provider_id);
    assert_eq!(b.expect("b").provider_id, first.provider_id);
    let name = m.metadata.name.as_deref().expect("name");
    let live: Vec<_> = env
        .instances_named(name)
        .await
        .into_iter()
        .filter(|i| i.state().and_then(|s| s.name()).map(|s| s.as_str()) != Some("terminated"))
        .collect();
    assert_eq!(live.len(), 1, "exactly one instance for the machine");
    assert_eq!(
        live[0].client_token(),
        Some(format!("mcm-{}", m.metadata.uid.as_deref().expect("uid")).as_str())
    );
    env.driver.delete_machine(&req).await.expect("delete");
}

#[tokio::test]
async fn moto_concurrent_status_calls_share_one_describe_instances() {
    let Some(env) = Env::new().await else { return };
    let class = class("batch", env.spec());
    let mut reqs = Vec::new();
    for _ in 0..8 {
        let mut m = machine("batch");
        let c = env
            .driver
            .create_machine(&request(&m, &class, &secret()))
            .await
            .expect("create");
        m.spec.provider_id = c.provider_id;
        reqs.push(request(&m, &class, &secret()));
    }
    let before = env.driver.api_calls();
    let answers =
        futures::future::join_all(reqs.iter().map(|r| env.driver.get_machine_status(r))).await;
    for a in &answers {
        a.as_ref().expect("status OK");
    }
    let diff = env.driver.api_calls().since(&before);
    assert_eq!(
        diff.count("DescribeInstances"),
        1,
        "8 concurrent GetMachineStatus calls → one DescribeInstances: {diff:?}"
    );
    for r in &reqs {
        env.driver.delete_machine(r).await.expect("delete");
    }
}

#[tokio::test]
async fn moto_retained_volume_and_interface_survive_the_machine_with_their_tags() {
    let Some(env) = Env::new().await else { return };
    let mut spec = env.spec();
    spec["blockDevices"] = json!([
        {"deviceName": "/root", "ebs": {"volumeSize": 20, "volumeType": "gp3"}},
        {"deviceName": "/dev/sdf", "ebs": {"volumeSize": 5, "volumeType": "gp2", "deleteOnTermination": false}}
    ]);
    spec["networkInterfaces"] = json!([
        {"subnetID": env.subnet, "securityGroupIDs": [env.sg]},
        {"subnetID": env.subnet, "securityGroupIDs": [env.sg], "deleteOnTermination": false}
    ]);
    let class = class("keep", spec);
    let m = machine("keep");
    let name = m.metadata.name.clone().expect("name");
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    let id = instance_id(&created.provider_id);
    let instance = env
        .client
        .describe_instances()
        .instance_ids(&id)
        .send()
        .await
        .expect("instance");
    let kept_volume = instance
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .flat_map(|i| i.block_device_mappings())
        .find(|b| b.device_name() == Some("/dev/sdf"))
        .and_then(|b| b.ebs())
        .and_then(|e| e.volume_id())
        .expect("data volume")
        .to_string();
    let enis = env
        .client
        .describe_network_interfaces()
        .filters(
            Filter::builder()
                .name("attachment.instance-id")
                .values(&id)
                .build(),
        )
        .send()
        .await
        .expect("enis");
    let kept_eni = enis
        .network_interfaces()
        .iter()
        .find(|n| n.attachment().and_then(|a| a.device_index()) == Some(1))
        .and_then(|n| n.network_interface_id())
        .expect("second interface")
        .to_string();
    // Without provider ID: found by tags, terminated.
    env.driver
        .delete_machine(&request(&m, &class, &secret()))
        .await
        .expect("delete");
    let gone = env.instances_named(&name).await;
    assert!(
        gone.iter()
            .all(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("running")),
        "the VM is terminated"
    );
    // The volume survives the machine, with the machine's tags.
    let vols = env
        .client
        .describe_volumes()
        .volume_ids(&kept_volume)
        .send()
        .await
        .expect("volumes");
    let vol = vols
        .volumes()
        .first()
        .expect("the retained volume still exists");
    assert_ne!(vol.state().map(|s| s.as_str()), Some("deleted"));
    let tag = |k: &str| {
        vol.tags()
            .iter()
            .find(|t| t.key() == Some(k))
            .and_then(|t| t.value())
            .map(str::to_string)
    };
    assert_eq!(tag("Name").as_deref(), Some(name.as_str()));
    assert_eq!(tag(&env.cluster).as_deref(), Some("1"));
    // So does the interface.
    let left = env
        .client
        .describe_network_interfaces()
        .network_interface_ids(&kept_eni)
        .send()
        .await
        .expect("enis");
    assert_eq!(
        left.network_interfaces().len(),
        1,
        "kept interface survives"
    );
    // A second DeleteMachine (retried deletion) still leaves them.
    env.driver
        .delete_machine(&request(&m, &class, &secret()))
        .await
        .expect("second delete");
    let vols = env
        .client
        .describe_volumes()
        .volume_ids(&kept_volume)
        .send()
        .await
        .expect("volumes");
    assert_eq!(vols.volumes().len(), 1);
}

#[tokio::test]
async fn moto_invalid_spec_and_wrong_provider_are_invalid_argument() {
    let Some(env) = Env::new().await else { return };
    let mut spec = env.spec();
    spec.as_object_mut().expect("object").remove("ami");
    spec["blockDevices"][0]["ebs"]["volumeType"] = json!("io2");
    let bad = class("bad", spec);
    let req = request(&machine("bad"), &bad, &secret());
    let e = env.driver.create_machine(&req).await.expect_err("invalid");
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message.contains("providerSpec.ami: Required value"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("providerSpec.blockDevices[0].ebs.volumeType"),
        "{}",
        e.message
    );
    let mut wrong = class("azure", env.spec());
    wrong.provider = "Azure".into();
    let e = env
        .driver
        .create_machine(&request(&machine("x"), &wrong, &secret()))
        .await
        .expect_err("wrong provider");
    assert_eq!(e.code, Code::InvalidArgument);
    let mut spec = env.spec();
    spec["ami"] = json!("ami-00000000deadbeef");
    let e = env
        .driver
        .create_machine(&request(
            &machine("noami"),
            &class("noami", spec),
            &secret(),
        ))
        .await
        .expect_err("unknown AMI");
    assert_eq!(e.code, Code::NotFound, "{e}");
    // The alternative secret key spellings work as well.
    let alt = secret_with(&[
        ("accessKeyID", "testing"),
        ("secretAccessKey", "testing"),
        ("userData", "x"),
    ]);
    let ok = class("alt", env.spec());
    let m = machine("alt");
    env.driver
        .create_machine(&request(&m, &ok, &alt))
        .await
        .expect("create with alt keys");
    env.driver
        .delete_machine(&request(&m, &ok, &alt))
        .await
        .expect("delete");
}

#[tokio::test]
async fn moto_conformance_kit_passes() {
    let Some(env) = Env::new().await else { return };
    let class = class("conformance", env.spec());
    let mut other_spec = env.spec();
    other_spec["tags"] =
        json!({"kubernetes.io/cluster/conformance-other": "1", "kubernetes.io/role/node": "1"});
    let other = common::class("conformance-other", other_spec);
    let mut bad_volume = env.spec();
    bad_volume["blockDevices"][0]["ebs"]["volumeType"] = json!("bogus");
    let fixture = Fixture {
        class,
        other_class: other,
        secret: secret(),
        new_machine: Box::new(|_| machine("kit")),
        invalid_classes: vec![
            (
                common::class("empty", json!({})),
                "providerSpec.ami".to_string(),
            ),
            (
                common::class("null", serde_json::Value::Null),
                "providerSpec.ami".to_string(),
            ),
            (
                common::class("garbage", json!("garbage")),
                "providerSpec".to_string(),
            ),
            (
                common::class("wrong-types", json!({"ami": 5})),
                "providerSpec".to_string(),
            ),
            (
                common::class("bad-volume", bad_volume),
                "providerSpec.blockDevices[0].ebs.volumeType".to_string(),
            ),
        ],
    };
    let failures = run_all(&env.driver, &fixture).await;
    assert!(failures.is_empty(), "conformance failures: {failures:#?}");
}

#[tokio::test]
async fn moto_ec2_calls_per_machine() {
    let Some(env) = Env::new().await else { return };
    let mut spec = env.spec();
    spec["srcAndDstChecksEnabled"] = json!(false);
    spec["networkInterfaces"] =
        json!([{"subnetID": env.subnet, "securityGroupIDs": [env.sg], "ipv6AddressCount": 1}]);
    let class = class("budget", spec);
    // Warm the AMI cache with one machine, as in any real scale-up.
    let warm = machine("warm");
    env.driver
        .create_machine(&request(&warm, &class, &secret()))
        .await
        .expect("create");
    env.driver
        .delete_machine(&request(&warm, &class, &secret()))
        .await
        .expect("delete");

    let mut m = machine("budget");
    let t0 = env.driver.api_calls();
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    let t1 = env.driver.api_calls();
    m.spec.provider_id = created.provider_id.clone();
    let req = request(&m, &class, &secret());
    env.driver
        .initialize_machine(&req)
        .await
        .expect("initialize");
    let t2 = env.driver.api_calls();
    env.driver
        .get_machine_status(&req)
        .await
        .expect("status OK");
    let t3 = env.driver.api_calls();
    env.driver.delete_machine(&req).await.expect("delete");
    let t4 = env.driver.api_calls();
    let show = |what: &str, c: &mcm_provider_aws::ApiCalls| {
        println!(
            "EC2 calls for {what}: {:?} (total {})",
            c.operations,
            c.total()
        );
    };
    show("CreateMachine", &t1.since(&t0));
    show("InitializeMachine", &t2.since(&t1));
    show("GetMachineStatus", &t3.since(&t2));
    show("DeleteMachine", &t4.since(&t3));
    let all = t4.since(&t0);
    show("create+initialize+status+delete", &all);
    assert_eq!(all.count("RunInstances"), 1);
    assert_eq!(all.count("TerminateInstances"), 1);
    assert_eq!(all.count("ModifyNetworkInterfaceAttribute"), 1);
    assert_eq!(all.count("AssignIpv6Addresses"), 1);
    assert_eq!(all.count("DescribeImages"), 0, "AMI cached");
    assert!(all.total() <= 9, "{all:?}");
}

/// Issue 17, finding 3: a class moved to another region must not make the
/// VMs it created look gone. Status and delete look the VM up in the region
/// its providerID names; the instance in the old region is terminated.
#[tokio::test]
async fn moto_delete_after_the_class_moved_region_terminates_the_vm_where_it_lives() {
    let Some(env) = Env::new().await else { return };
    let name = unique("moved");
    let class_a = class("moved-a", env.spec());
    let mut m = machine(&name);
    let created = env
        .driver
        .create_machine(&request(&m, &class_a, &secret()))
        .await
        .expect("create in region A");
    assert!(
        created
            .provider_id
            .starts_with(&format!("aws:///{REGION}/")),
        "{}",
        created.provider_id
    );
    m.spec.provider_id = created.provider_id.clone();
    assert_eq!(
        live_states(&env, &instance_id(&created.provider_id)).await,
        vec!["running".to_string()]
    );
    let mut spec_b = env.spec();
    spec_b["region"] = json!("us-east-1");
    let class_b = class("moved-b", spec_b);
    let req_b = request(&m, &class_b, &secret());
    let status = env
        .driver
        .get_machine_status(&req_b)
        .await
        .expect("the VM is found in the region its providerID names");
    assert_eq!(status.provider_id, created.provider_id);
    env.driver
        .delete_machine(&req_b)
        .await
        .expect("delete with the moved class");
    let id = instance_id(&created.provider_id);
    let states = live_states(&env, &id).await;
    assert!(
        states
            .iter()
            .all(|s| s == "shutting-down" || s == "terminated"),
        "the instance in region A was terminated: {states:?}"
    );
}

/// The states of an instance in the test's region (none once EC2 forgets it).
async fn live_states(env: &Env, id: &str) -> Vec<String> {
    let out = env
        .client
        .describe_instances()
        .filters(Filter::builder().name("instance-id").values(id).build())
        .send()
        .await
        .expect("DescribeInstances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances().iter())
        .filter_map(|i| {
            i.state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
        })
        .collect()
}
