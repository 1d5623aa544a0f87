//! The moto environment of the tests against moto: each test builds its own
//! dual-stack VPC, subnet, security group, AMI and instance profile, and its
//! own cluster tag, so tests can share one moto and run in parallel.

use super::*;
use aws_sdk_ec2::types::Filter;
use mcm_provider_aws::{AwsDriver, AwsDriverConfig};
use serde_json::json;
use std::time::Duration;

/// moto's endpoint, or `None` after the visible skip (a failure in CI).
pub fn endpoint() -> Option<String> {
    mcm_testenv::moto_endpoint(&mcm_testenv::current_test())
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
        let net = mcm_testenv::MotoNetwork::create(&endpoint, REGION, "mcm")
            .await
            .expect("moto set-up");
        Some(Env {
            driver,
            client,
            ami: net.ami,
            subnet: net.subnet,
            sg: net.sg,
            cluster: format!("kubernetes.io/cluster/{}", unique("shoot")),
            profile: net.profile,
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
