//! Shared set-up of the Azure provider tests: an in-process ARM fake, a
//! driver pointed at it, and MachineClass / Secret / Machine builders.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::{Machine, MachineClass};
use mcm_driver::MachineRequest;
use mcm_fake_azure::FakeAzure;
use mcm_provider_azure::arm::ArmSettings;
use mcm_provider_azure::{AzureDriver, AzureDriverConfig, StaticToken};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const RG: &str = "shoot--test";
pub const VNET: &str = "shoot--test";
pub const SUBNET: &str = "shoot--test-nodes";
pub const LOCATION: &str = "westeurope";
pub const CLUSTER_TAG: &str = "kubernetes.io-cluster-shoot--test";

/// Fast polling, short throttling waits.
pub fn fast_settings() -> ArmSettings {
    ArmSettings {
        poll_interval: Duration::from_millis(5),
        max_throttle_retries: 3,
        default_retry_after: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(5),
        max_transient_retries: 3,
        transient_delay: Duration::from_millis(10),
        max_transient_delay: Duration::from_millis(50),
        request_timeout: Duration::from_secs(10),
        vm_timeout: Duration::from_secs(20),
        nic_disk_timeout: Duration::from_secs(20),
    }
}

/// A fake with the test's resource group and subnet.
pub async fn fake() -> FakeAzure {
    let f = FakeAzure::start().await.expect("start the ARM fake");
    f.add_subnet(RG, VNET, SUBNET);
    f
}

/// A driver on the fake with a static token.
pub fn driver(f: &FakeAzure) -> AzureDriver {
    AzureDriver::new(AzureDriverConfig {
        endpoint: Some(f.url().to_string()),
        token_source: Some(Arc::new(StaticToken("test-token".into()))),
        arm: fast_settings(),
        ..Default::default()
    })
}

pub fn spec(cluster_tag: &str) -> Value {
    json!({
        "location": LOCATION,
        "resourceGroup": RG,
        "subnetInfo": {"vnetName": VNET, "subnetName": SUBNET},
        "tags": {cluster_tag: "1", "kubernetes.io-role-node": "1", "Name": "shoot--test"},
        "properties": {
            "hardwareProfile": {"vmSize": "Standard_D2s_v3"},
            "storageProfile": {
                "imageReference": {"urn": "sap:gardenlinux:greatest:1443.3.0"},
                "osDisk": {"caching": "None", "diskSizeGB": 50, "createOption": "FromImage",
                           "managedDisk": {"storageAccountType": "StandardSSD_LRS"}},
                "dataDisks": [{"name": "etcd", "lun": 0, "diskSizeGB": 20, "storageAccountType": "Premium_LRS"}]
            },
            "osProfile": {"adminUsername": "core", "linuxConfiguration": {"disablePasswordAuthentication": true,
                "ssh": {"publicKeys": {"path": "/home/core/.ssh/authorized_keys", "keyData": ""}}}},
            "zone": 1
        }
    })
}

pub fn class_with(name: &str, spec: Value) -> MachineClass {
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": "default"},
        "provider": "Azure",
        "providerSpec": spec
    }))
    .expect("MachineClass")
}

pub fn class() -> MachineClass {
    class_with("azure-class", spec(CLUSTER_TAG))
}

pub fn secret() -> Secret {
    Secret {
        data: Some(
            [
                ("clientID", "client-1"),
                ("clientSecret", "s3cret"),
                ("subscriptionID", mcm_fake_azure::SUBSCRIPTION),
                ("tenantID", "tenant-1"),
                ("userData", "#cloud-config\nhostname: x\n"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect(),
        ),
        ..Default::default()
    }
}

static N: AtomicU32 = AtomicU32::new(0);

pub fn machine(class: &MachineClass) -> Machine {
    let n = N.fetch_add(1, Ordering::SeqCst);
    serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": format!("machine-{n}-{:04x}", rand::random::<u16>()), "namespace": "default",
                     "uid": format!("uid-{n}-{:08x}", rand::random::<u32>())},
        "spec": {"class": {"kind": "MachineClass", "name": class.metadata.name.clone().unwrap_or_default()}}
    }))
    .expect("Machine")
}

pub fn request(class: &MachineClass) -> MachineRequest {
    MachineRequest {
        machine: machine(class),
        machine_class: class.clone(),
        secret: secret(),
    }
}

pub fn name(req: &MachineRequest) -> String {
    req.machine.metadata.name.clone().unwrap_or_default()
}
