//! Helpers shared by the integration tests: the in-process fake, seeded with
//! a flavor, an image, a network with a subnet and a security group, and a
//! driver with fast polling.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::MachineRequest;
use mcm_fake_openstack::FakeOpenStack;
use mcm_provider_openstack::{OpenStackDriver, OpenStackDriverConfig};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

pub const REGION: &str = mcm_fake_openstack::REGION;
pub const USER_DATA: &str = "#cloud-config\nhostname: test\n";
pub const CLUSTER_KEY: &str = "kubernetes.io-cluster-shoot--test";
pub const ROLE_KEY: &str = "kubernetes.io-role-node";

/// The fake and what it was seeded with.
pub struct Env {
    pub fake: FakeOpenStack,
    pub driver: OpenStackDriver,
    pub flavor: String,
    pub image: String,
    pub network: String,
    pub subnet: String,
    pub security_group: String,
}

pub async fn env() -> Env {
    seeded(FakeOpenStack::start().await.expect("fake starts"))
}

/// A started fake (plain or TLS), seeded, with a driver.
pub fn seeded(fake: FakeOpenStack) -> Env {
    let flavor = fake.add_flavor("m1.small");
    fake.add_flavor("m1.large");
    let image = fake.add_image("ubuntu-24.04");
    let network = fake.add_network("mcm-net");
    let subnet = fake.add_subnet(&network, "mcm-subnet", "10.250.0.0/24");
    let security_group = fake.add_security_group("mcm-nodes");
    fake.add_keypair("mcm-key");
    Env {
        fake,
        driver: OpenStackDriver::new(OpenStackDriverConfig::for_tests()),
        flavor,
        image,
        network,
        subnet,
        security_group,
    }
}

impl Env {
    /// A password Secret for the fake, with user data.
    pub fn secret(&self) -> Secret {
        secret_with(&[
            ("authURL", &self.fake.auth_url()),
            ("username", mcm_fake_openstack::USERNAME),
            ("password", mcm_fake_openstack::PASSWORD),
            ("domainName", mcm_fake_openstack::DOMAIN),
            ("tenantName", mcm_fake_openstack::PROJECT),
            ("userData", USER_DATA),
        ])
    }

    /// A valid spec: networkID + subnetIDs (the driver makes the port), by image name.
    pub fn spec(&self) -> Value {
        spec_for(&self.network, &self.subnet, CLUSTER_KEY)
    }

    pub fn request(&self, class: &MachineClass, machine: Machine) -> MachineRequest {
        MachineRequest {
            machine,
            machine_class: class.clone(),
            secret: self.secret(),
        }
    }
}

pub fn spec_for(network: &str, subnet: &str, cluster_key: &str) -> Value {
    json!({
        "apiVersion": "openstack.machine.gardener.cloud/v1alpha1",
        "kind": "MachineProviderConfig",
        "spec": {
            "imageName": "ubuntu-24.04",
            "region": REGION,
            "availabilityZone": "nova",
            "flavorName": "m1.small",
            "keyName": "mcm-key",
            "securityGroups": ["mcm-nodes"],
            "networkID": network,
            "subnetIDs": [subnet],
            "podNetworkCIDRs": ["100.96.0.0/11"],
            "tags": {
                cluster_key: "1",
                ROLE_KEY: "1",
                "Name": "test"
            }
        }
    })
}

pub fn secret_with(pairs: &[(&str, &str)]) -> Secret {
    Secret {
        data: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

pub fn class(name: &str, spec: Value) -> MachineClass {
    let mut c = MachineClass::new(name, spec);
    c.provider = "OpenStack".into();
    c.metadata.namespace = Some("default".into());
    c
}

static SEQ: AtomicU64 = AtomicU64::new(1);

/// A Machine with a fresh name and UID.
pub fn machine(prefix: &str) -> Machine {
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let name = format!("{prefix}-{n}");
    let mut m = Machine::new(&name, MachineSpec::default());
    m.metadata.namespace = Some("default".into());
    m.metadata.uid = Some(format!("00000000-0000-4000-8000-{:012x}", n));
    m
}
