//! Helpers shared by the integration tests.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Secret;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::{ListMachinesRequest, MachineRequest};
use mcm_fake_alicloud::{FakeEcs, ACCESS_KEY_ID, ACCESS_KEY_SECRET};
use mcm_provider_alicloud::{AlicloudDriver, AlicloudDriverConfig};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub const REGION: &str = "eu-central-1";
pub const USER_DATA: &str = "#cloud-config\nhostname: test\n";

/// A provider secret with the primary key spellings and the fake's key.
pub fn secret() -> Secret {
    secret_with(&[
        ("alicloudAccessKeyID", ACCESS_KEY_ID),
        ("alicloudAccessKeySecret", ACCESS_KEY_SECRET),
        ("userData", USER_DATA),
    ])
}

pub use mcm_driver::testing::secret_with;

/// A full providerSpec of the given cluster.
pub fn spec(cluster: &str) -> serde_json::Value {
    json!({
        "imageID": "m-gw8fakeimage",
        "instanceType": "ecs.g7.large",
        "region": REGION,
        "zoneID": "eu-central-1a",
        "securityGroupID": "sg-gw8fake",
        "vSwitchID": "vsw-gw8fake",
        "systemDisk": {"category": "cloud_essd", "size": 50},
        "dataDisks": [
            {"name": "logs", "category": "cloud_essd", "size": 100, "encrypted": true, "description": "logs"},
            {"name": "scratch", "category": "ephemeral_ssd", "size": 20}
        ],
        "instanceChargeType": "PostPaid",
        "internetChargeType": "PayByTraffic",
        "internetMaxBandwidthIn": 10,
        "internetMaxBandwidthOut": 5,
        "spotStrategy": "SpotAsPriceGo",
        "IoOptimized": "optimized",
        "keyPairName": "shoot--demo-ssh",
        "tags": {
            format!("kubernetes.io/cluster/{cluster}"): "1",
            "kubernetes.io/role/node": "1",
            "team": "mcm"
        }
    })
}

pub fn class(name: &str, spec: serde_json::Value) -> MachineClass {
    let mut c = MachineClass::new(name, spec);
    c.provider = "Alicloud".into();
    c.metadata.namespace = Some("default".into());
    c
}

static SEQ: AtomicU64 = AtomicU64::new(1);

pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:04x}",
        SEQ.fetch_add(1, Ordering::SeqCst),
        rand::random::<u16>()
    )
}

/// A Machine with a fresh name and UID.
pub fn machine(prefix: &str) -> Machine {
    let mut m = Machine::new(&unique(prefix), MachineSpec::default());
    m.metadata.namespace = Some("default".into());
    m.metadata.uid = Some(format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        rand::random::<u32>(),
        rand::random::<u16>(),
        rand::random::<u16>() & 0xfff,
        rand::random::<u16>() & 0xfff,
        rand::random::<u64>() & 0xffff_ffff_ffff
    ));
    m
}

pub fn request(machine: &Machine, class: &MachineClass, secret: &Secret) -> MachineRequest {
    MachineRequest {
        machine: machine.clone(),
        machine_class: class.clone(),
        secret: secret.clone(),
    }
}

pub fn list_request(class: &MachineClass) -> ListMachinesRequest {
    ListMachinesRequest {
        machine_class: class.clone(),
        secret: secret(),
    }
}

/// A fake with short Pending times and a driver pointed at it.
pub async fn setup() -> (FakeEcs, AlicloudDriver) {
    let fake = FakeEcs::start().await.expect("start the fake");
    fake.set_pending_for(Duration::from_millis(150));
    let mut config = AlicloudDriverConfig::with_endpoint(fake.url());
    config.settle_timeout = Duration::from_secs(2);
    config.settle_poll = Duration::from_millis(50);
    config.retry.throttle_pause = Duration::from_millis(20);
    config.retry.transient_pause = Duration::from_millis(20);
    (fake, AlicloudDriver::new(config))
}
