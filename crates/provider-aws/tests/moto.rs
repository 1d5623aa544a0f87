//! The driver against moto (create, initialize, validation, the conformance
//! kit; deletion, listing and call counts are in `tests/moto_lifecycle.rs`), a local EC2 emulator (`hack/moto.sh` starts it and
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

use crate::common;

use aws_sdk_ec2::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::operation::run_instances::RunInstancesInput;
use aws_sdk_ec2::types::{Filter, InstanceAttributeName};
use common::moto::*;
use common::*;
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver};
use serde_json::json;

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

use mcm_driver::testing::GZIPPED_CLOUD_CONFIG;

#[tokio::test]
async fn moto_gzipped_userdata_reaches_the_instance_byte_for_byte() {
    let Some(env) = Env::new().await else { return };
    let class = class("gzip", env.spec());
    let m = machine("gzip");
    let mut s = secret();
    if let Some(data) = s.data.as_mut() {
        data.insert(
            "userData".into(),
            k8s_openapi::ByteString(GZIPPED_CLOUD_CONFIG.to_vec()),
        );
    }
    let created = env
        .driver
        .create_machine(&request(&m, &class, &s))
        .await
        .expect("create");
    let ud = env
        .client
        .describe_instance_attribute()
        .instance_id(instance_id(&created.provider_id))
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .expect("user data");
    use base64::Engine;
    let sent = base64::engine::general_purpose::STANDARD
        .decode(
            ud.user_data()
                .and_then(|v| v.value())
                .expect("user data value"),
        )
        .expect("base64");
    assert_eq!(sent, GZIPPED_CLOUD_CONFIG);
}

/// A secret whose credentials belong to another account: moto keeps one
/// backend per account and gives STS-assumed credentials the role's account.
fn other_account_secret(endpoint: &str) -> k8s_openapi::api::core::v1::Secret {
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let body = "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A111122223333%3Arole%2Fother&RoleSessionName=mcm-test";
    let mut s = std::net::TcpStream::connect(host).expect("connect to moto");
    let req = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    use std::io::{Read, Write};
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let field = |name: &str| {
        let open = format!("<{name}>");
        let start = out
            .find(&open)
            .unwrap_or_else(|| panic!("no {name} in {out}"))
            + open.len();
        let end = out[start..].find('<').expect("closing tag") + start;
        out[start..end].to_string()
    };
    let (key, secret_key) = (field("AccessKeyId"), field("SecretAccessKey"));
    secret_with(&[
        ("providerAccessKeyId", key.as_str()),
        ("providerSecretAccessKey", secret_key.as_str()),
        ("userData", USER_DATA),
    ])
}

#[tokio::test]
async fn moto_a_vm_is_not_gone_when_the_class_credentials_name_another_account() {
    let Some(env) = Env::new().await else { return };
    let endpoint = endpoint().expect("moto");
    let class = class("account", env.spec());
    let mut m = machine("account");
    let created = env
        .driver
        .create_machine(&request(&m, &class, &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let other = other_account_secret(&endpoint);
    let e = env
        .driver
        .get_machine_status(&request(&m, &class, &other))
        .await
        .expect_err("the other account sees no VM");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    let e = env
        .driver
        .delete_machine(&request(&m, &class, &other))
        .await
        .expect_err("not deleted as gone");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    // The VM still runs in its own account.
    env.driver
        .get_machine_status(&request(&m, &class, &secret()))
        .await
        .expect("still there");
    env.driver
        .delete_machine(&request(&m, &class, &secret()))
        .await
        .expect("clean up");
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

/// The kit's fixture for a moto environment.
fn conformance_fixture(env: &Env) -> Fixture {
    let class = class("conformance", env.spec());
    let mut other_spec = env.spec();
    other_spec["tags"] =
        json!({"kubernetes.io/cluster/conformance-other": "1", "kubernetes.io/role/node": "1"});
    let other = common::class("conformance-other", other_spec);
    let mut bad_volume = env.spec();
    bad_volume["blockDevices"][0]["ebs"]["volumeType"] = json!("bogus");
    Fixture {
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
    }
}

#[tokio::test]
async fn moto_conformance_kit_passes() {
    let Some(env) = Env::new().await else { return };
    let fixture = conformance_fixture(&env);
    let failures = run_all(&env.driver, &fixture).await;
    assert!(failures.is_empty(), "conformance failures: {failures:#?}");
}

/// The same kit with the driver out of process: `mcm driver serve`'s server
/// on a Unix socket, the controller's `GrpcDriver` in front of it.
#[tokio::test]
async fn moto_conformance_kit_passes_over_grpc() {
    let Some(env) = Env::new().await else { return };
    let fixture = conformance_fixture(&env);
    let served = mcm_driver_grpc::Loopback::start(std::sync::Arc::new(env.driver), "aws")
        .await
        .expect("served");
    let failures = run_all(&served.client, &fixture).await;
    served.stop().await;
    assert!(
        failures.is_empty(),
        "conformance failures over gRPC: {failures:#?}"
    );
}
