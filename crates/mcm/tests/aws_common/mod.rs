//! Shared by the AWS end-to-end tests (`aws_e2e.rs`, `aws_hot_update.rs`) on
//! top of the provider harness (`e2e`): the moto set-up for the example
//! MachineClass and reading the instances back.
#![allow(dead_code)] // each test binary uses a part

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_provider_aws::{AwsDriver, AwsDriverConfig};
use mcm_testenv::TestEnv;
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub use crate::e2e::unique;

/// The region of `examples/aws-machine-class.yaml`.
pub const REGION: &str = "eu-west-1";
const EXAMPLE: &str = include_str!("../../../../examples/aws-machine-class.yaml");

/// What the test creates in moto for the MachineClass, and a driver whose
/// SDK client (`ec2_client`) the test uses to look at moto. The SDK's types
/// are never named: `aws-sdk-ec2` as a dev-dependency would make
/// `cargo test -p mcm --no-default-features` build the SDK.
pub struct Cloud {
    pub driver: AwsDriver,
    pub secret: Secret,
    pub ami: String,
    pub subnet: String,
    pub sg: String,
    pub profile: String,
}

pub async fn moto_setup(endpoint: &str) -> Cloud {
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
    let net = mcm_testenv::MotoNetwork::create(endpoint, REGION, "mcm-e2e")
        .await
        .expect("moto set-up");
    Cloud {
        driver,
        secret,
        ami: net.ami,
        subnet: net.subnet,
        sg: net.sg,
        profile: net.profile,
    }
}

/// Points the example's MachineClass document at `cloud` and tags it with
/// `cluster_tag` instead of the example's cluster, with the subnet under
/// `subnetId`, a spelling that only Go's case-insensitive key matching
/// accepts (the canonical key is `subnetID`).
fn point_class_at(doc: &mut Value, cloud: &Cloud, cluster_tag: &str) {
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
}

impl Cloud {
    /// Live (pending or running) instances carrying `cluster_tag`: instance ID → `Name` tag.
    pub async fn live_instances(&self, cluster_tag: &str) -> BTreeMap<String, String> {
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
    pub async fn interfaces_of(&self, instance_id: &str) -> Vec<Nic> {
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
pub struct Nic {
    pub id: String,
    pub source_dest_check: Option<bool>,
    pub ipv6: Vec<String>,
}

/// Creates the example's two Secrets and its MachineClass (pointed at
/// `cloud`, tagged with `cluster_tag`) in the test's namespace; returns the
/// class's name.
pub async fn create_example(env: &TestEnv, cloud: &Cloud, cluster_tag: &str) -> String {
    crate::e2e::create_example(env, EXAMPLE, |doc| {
        if doc["kind"] == "MachineClass" {
            point_class_at(doc, cloud, cluster_tag);
        }
    })
    .await
}
