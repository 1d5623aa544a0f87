//! The moto environment of the tests against moto: each test builds its own
//! dual-stack VPC, subnet, security group, AMI and instance profile, and its
//! own cluster tag, so tests can share one moto and run in parallel.

use super::*;
use aws_sdk_ec2::types::Filter;
use mcm_provider_aws::{AwsDriver, AwsDriverConfig};
use serde_json::json;
use std::io::{Read, Write};
use std::time::Duration;

/// moto's endpoint, or `None` after the visible skip (a failure in CI).
pub fn endpoint() -> Option<String> {
    mcm_testenv::moto_endpoint(&mcm_testenv::current_test())
}

/// An unsigned IAM Query call to moto (the test needs an instance profile,
/// and the IAM SDK crate is not worth its build time for one call).
pub fn moto_iam(endpoint: &str, body: &str) -> String {
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

pub struct Env {
    pub driver: AwsDriver,
    pub client: aws_sdk_ec2::Client,
    pub ami: String,
    pub subnet: String,
    pub sg: String,
    pub cluster: String,
    pub profile: String,
}

impl Env {
    pub async fn new() -> Option<Env> {
        Self::with_config(|_| {}).await
    }

    pub async fn with_config(adjust: impl FnOnce(&mut AwsDriverConfig)) -> Option<Env> {
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

    pub fn spec(&self) -> serde_json::Value {
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

    pub async fn instances_named(&self, name: &str) -> Vec<aws_sdk_ec2::types::Instance> {
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

pub fn instance_id(provider_id: &str) -> String {
    provider_id.rsplit('/').next().expect("id").to_string()
}

/// The states of an instance in the test's region (none once EC2 forgets it).
pub async fn live_states(env: &Env, id: &str) -> Vec<String> {
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
