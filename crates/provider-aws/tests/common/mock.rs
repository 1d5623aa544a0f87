//! Helpers of the tests against `aws-smithy-mocks`: a driver whose EC2
//! clients answer from mock rules, and the EC2 shapes the rules return.

use super::*;
use aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::operation::describe_images::DescribeImagesOutput;
use aws_sdk_ec2::operation::describe_instances::{DescribeInstancesInput, DescribeInstancesOutput};
use aws_sdk_ec2::types::{
    Image, Instance, InstanceIpv6Prefix, InstanceNetworkInterface,
    InstanceNetworkInterfaceAttachment, InstanceState, InstanceStateName, Reservation, Tag,
};
use aws_sdk_ec2::Client;
use aws_smithy_mocks::{create_mock_http_client, mock, MockResponseInterceptor, Rule, RuleMode};
use mcm_provider_aws::{AwsDriver, AwsDriverConfig};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The AMI of the mocked specs.
pub const AMI: &str = "ami-0mock";

pub fn spec(extra: serde_json::Value) -> serde_json::Value {
    let mut s = json!({
        "ami": AMI,
        "machineType": "m5.large",
        "region": REGION,
        "iam": {"name": "profile"},
        "blockDevices": [{"ebs": {"volumeSize": 20, "volumeType": "gp3"}}],
        "networkInterfaces": [{"subnetID": "subnet-1", "securityGroupIDs": ["sg-1"]}],
        "tags": {"kubernetes.io/cluster/mock": "1", "kubernetes.io/role/node": "1"}
    });
    if let (Some(s), Some(e)) = (s.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    s
}

pub fn fast_config() -> AwsDriverConfig {
    let mut cfg = AwsDriverConfig::default();
    cfg.retry.sdk_initial_backoff = Duration::from_millis(1);
    cfg.retry.sdk_max_backoff = Duration::from_millis(5);
    cfg.retry.throttle_pause = Duration::from_millis(50);
    cfg.retry.throttle_max_pause = Duration::from_millis(400);
    cfg.visibility_backoff.initial = Duration::from_millis(10);
    cfg.visibility_backoff.max = Duration::from_millis(20);
    cfg
}

pub fn driver(rules: Vec<Rule>, cfg: AwsDriverConfig) -> AwsDriver {
    driver_with_clock(rules, cfg, None)
}

pub fn driver_with_clock(
    rules: Vec<Rule>,
    mut cfg: AwsDriverConfig,
    clock: Option<AttemptClock>,
) -> AwsDriver {
    init_tracing();
    cfg.sdk_config_hook = Some(Arc::new(move |b| {
        let mut i = MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny);
        for r in &rules {
            i = i.with_rule(r);
        }
        let b = b.http_client(create_mock_http_client()).interceptor(i);
        match &clock {
            Some(c) => b.interceptor(c.clone()),
            None => b,
        }
    }));
    AwsDriver::new(cfg)
}

/// When each HTTP attempt of one EC2 action left the SDK (after its retry
/// back-off and the driver's class pause, before the mock answered).
#[derive(Clone, Debug)]
pub struct AttemptClock {
    action: &'static str,
    sent: Arc<Mutex<Vec<Instant>>>,
}

impl AttemptClock {
    pub fn new(action: &'static str) -> Self {
        AttemptClock {
            action,
            sent: Arc::default(),
        }
    }

    pub fn times(&self) -> Vec<Instant> {
        self.sent.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Intercept for AttemptClock {
    fn name(&self) -> &'static str {
        "AttemptClock"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let action = format!("Action={}&", self.action);
        let body = context.request().body().bytes().unwrap_or_default();
        if String::from_utf8_lossy(body).contains(&action) {
            if let Ok(mut sent) = self.sent.lock() {
                sent.push(Instant::now());
            }
        }
        Ok(())
    }
}

pub fn ec2_error_xml(code: &str, message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>req-{code}</RequestID></Response>"
    )
}

pub fn eni(id: &str, idx: i32, kind: &str, sdc: bool, prefixes: usize) -> InstanceNetworkInterface {
    let mut b = InstanceNetworkInterface::builder()
        .network_interface_id(id)
        .interface_type(kind)
        .source_dest_check(sdc)
        .attachment(
            InstanceNetworkInterfaceAttachment::builder()
                .device_index(idx)
                .delete_on_termination(true)
                .build(),
        );
    for n in 0..prefixes {
        b = b.ipv6_prefixes(
            InstanceIpv6Prefix::builder()
                .ipv6_prefix(format!("2001:db8:0:{n}::/80"))
                .build(),
        );
    }
    b.build()
}

pub fn instance(
    id: &str,
    state: InstanceStateName,
    enis: Vec<InstanceNetworkInterface>,
) -> Instance {
    Instance::builder()
        .instance_id(id)
        .state(InstanceState::builder().name(state).build())
        .private_dns_name(format!("ip-10-0-0-1.{REGION}.compute.internal"))
        .private_ip_address("10.0.0.1")
        .tags(Tag::builder().key("Name").value("m").build())
        .set_network_interfaces(Some(enis))
        .build()
}

pub fn reservations(instances: Vec<Instance>) -> DescribeInstancesOutput {
    DescribeInstancesOutput::builder()
        .reservations(
            Reservation::builder()
                .set_instances(Some(instances))
                .build(),
        )
        .build()
}

pub fn by_id_filter(input: &DescribeInstancesInput) -> bool {
    input
        .filters()
        .iter()
        .any(|f| f.name() == Some("instance-id"))
}

pub fn images_rule() -> Rule {
    mock!(Client::describe_images).then_output(|| {
        DescribeImagesOutput::builder()
            .images(
                Image::builder()
                    .image_id(AMI)
                    .root_device_name("/dev/xvda")
                    .build(),
            )
            .build()
    })
}

/// DescribeInstances: nothing by name (no earlier VM), `by_id` for ID look-ups.
pub fn describe_rule(by_id: impl Fn() -> Vec<Instance> + Send + Sync + 'static) -> Rule {
    mock!(Client::describe_instances).then_compute_output(move |input| {
        if by_id_filter(input) {
            reservations(by_id())
        } else {
            DescribeInstancesOutput::builder().build()
        }
    })
}

pub fn machine_with_provider_id(id: &str) -> mcm_api::Machine {
    let mut m = machine("m");
    m.spec.provider_id = format!("aws:///{REGION}/{id}");
    m
}
