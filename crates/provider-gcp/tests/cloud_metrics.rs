//! The reference's cloud API series from the GCP driver: every Compute call
//! reaches the driver's `CloudApi` handle with provider `gcp` and the reference's
//! service label (`instance_create`, `operations_get`, `instance_get`, ...),
//! a failed call as failed. Against the in-repo Compute fake.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::cloud_api::CallRecorder;
use mcm_driver::{Code, Driver, MachineRequest};
use mcm_fake_gcp::{service_account_json, FakeGce};
use mcm_provider_gcp::{GcpDriver, GcpDriverConfig};
use serde_json::json;

const PROJECT: &str = "mcm-metrics-project";
const ZONE: &str = "europe-west1-b";

fn request(name: &str) -> MachineRequest {
    let mut class = MachineClass::new(
        "c",
        json!({
            "disks": [{"boot": true, "sizeGb": 50, "type": "pd-balanced", "image": "projects/p/global/images/i"}],
            "machineType": "n1-standard-2",
            "networkInterfaces": [{"network": "net", "subnetwork": "nodes"}],
            "serviceAccounts": [{"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["https://www.googleapis.com/auth/compute"]}],
            "tags": ["kubernetes-io-cluster-shoot--metrics", "kubernetes-io-role-node"],
            "scheduling": {"automaticRestart": true, "onHostMaintenance": "MIGRATE"},
            "region": "europe-west1",
            "zone": ZONE
        }),
    );
    class.provider = "GCP".into();
    class.metadata.namespace = Some("default".into());
    let mut machine = Machine::new(name, MachineSpec::default());
    machine.metadata.namespace = Some("default".into());
    machine.metadata.uid = Some("00000000-0000-4000-8000-00000000abcd".into());
    let secret = Secret {
        data: Some(
            [
                ("serviceAccountJSON", service_account_json(PROJECT)),
                ("userData", "#cloud-config\n".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
            .collect(),
        ),
        ..Default::default()
    };
    MachineRequest {
        machine,
        machine_class: class,
        secret,
    }
}

#[tokio::test]
async fn compute_calls_move_the_cloud_api_counters_with_the_references_labels() {
    let fake = FakeGce::start().await.expect("fake");
    fake.set_polls_until_done(1);
    let driver = GcpDriver::new(GcpDriverConfig::with_endpoint(fake.endpoint()));
    let calls = CallRecorder::install(&driver.cloud_api().expect("the driver reports its calls"));

    let missing = driver
        .get_machine_status(&request("shoot--metrics-missing"))
        .await
        .unwrap_err();
    assert_eq!(missing.code, Code::NotFound);
    driver
        .create_machine(&request("shoot--metrics-m1"))
        .await
        .expect("create");

    let seen = calls.of("gcp");
    assert_eq!(calls.count("gcp", "instance_create", true), 1, "{seen:?}");
    assert!(calls.count("gcp", "operations_get", true) >= 1, "{seen:?}");
    assert!(calls.count("gcp", "instance_get", true) >= 1, "{seen:?}");
    assert!(
        calls.count("gcp", "instance_get", false) >= 1,
        "the status call of a missing instance failed: {seen:?}"
    );
}
