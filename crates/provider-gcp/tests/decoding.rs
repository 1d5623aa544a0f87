//! Decoding as the reference does (Go's case-insensitive keys, with
//! warnings), the reference's own samples decoded and run against the
//! Compute fake, and a class that no longer validates still letting its
//! machines be found, listed and deleted (only creation is refused).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::{Code, Driver, ListMachinesRequest, MachineRequest};
use mcm_fake_gcp::{service_account_json, FakeGce};
use mcm_provider_gcp::{GcpDriver, GcpDriverConfig};
use serde_json::{json, Value};

const PROJECT: &str = "mcm-test-project";
const ZONE: &str = "europe-west1-b";

fn secret() -> Secret {
    Secret {
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
    }
}

fn spec() -> Value {
    json!({
        "disks": [{"boot": true, "sizeGb": 50, "type": "pd-balanced", "image": "projects/gardenlinux/global/images/gl"}],
        "machineType": "n1-standard-2",
        "scheduling": {"automaticRestart": true, "onHostMaintenance": "MIGRATE"},
        "networkInterfaces": [{"network": "shoot-net", "subnetwork": "shoot-nodes"}],
        "serviceAccounts": [{"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["https://www.googleapis.com/auth/compute"]}],
        "tags": ["kubernetes-io-cluster-shoot--inval", "kubernetes-io-role-node"],
        "region": "europe-west1",
        "zone": ZONE
    })
}

fn class(spec: Value) -> MachineClass {
    let mut c = MachineClass::new("c", spec);
    c.provider = "GCP".into();
    c.metadata.namespace = Some("default".into());
    c
}

fn machine(name: &str) -> Machine {
    let mut m = Machine::new(name, MachineSpec::default());
    m.metadata.namespace = Some("default".into());
    m.metadata.uid = Some(format!("uid-{name}"));
    m
}

fn req(m: &Machine, c: &MachineClass) -> MachineRequest {
    MachineRequest {
        machine: m.clone(),
        machine_class: c.clone(),
        secret: secret(),
    }
}

#[tokio::test]
async fn an_invalid_class_still_lets_status_list_and_delete_work() {
    let fake = FakeGce::start().await.expect("fake");
    fake.set_polls_until_done(1);
    let d = GcpDriver::new(GcpDriverConfig::with_endpoint(fake.endpoint()));
    let mut m = machine("shoot--inval-1");
    let created = d
        .create_machine(&req(&m, &class(spec())))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    // The class is edited into one the provider refuses: no machine type,
    // and (with the providerID naming the VM's zone) not even a zone.
    let mut s = spec();
    s["machineType"] = "".into();
    s["zone"] = "".into();
    let bad = class(s);
    let refused = d
        .create_machine(&req(&machine("shoot--inval-2"), &bad))
        .await
        .expect_err("creation validates");
    assert_eq!(refused.code, Code::InvalidArgument, "{refused:?}");

    let status = d.get_machine_status(&req(&m, &bad)).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let mut listable = spec();
    listable["machineType"] = "".into();
    let listed = d
        .list_machines(&ListMachinesRequest {
            machine_class: class(listable),
            secret: secret(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    d.delete_machine(&req(&m, &bad)).await.expect("delete");
    assert_eq!(fake.instance_count(), 0);
}

#[test]
fn go_spellings_fill_their_fields_with_a_warning_each() {
    let d = <mcm_provider_gcp::spec::GcpProviderSpec as mcm_driver::provider_spec::ProviderSpec>::decode(&json!({
        "canIPForward": true,
        "minCPUPlatform": "Intel Skylake",
        "disks": [{"sizeGB": 80, "Type": "pd-ssd", "Labels": {"Team": "A"}}],
        "labels": {"Name": "kept"},
        "Scheduling": {"OnHostMaintenance": "TERMINATE"},
        "zone": ZONE
    }))
    .expect("decodes");
    let s = d.value;
    assert!(s.can_ip_forward);
    assert_eq!(s.min_cpu_platform, "Intel Skylake");
    assert_eq!(
        s.disks[0].size_gb, 80,
        "the disk gets its size, not the image's"
    );
    assert_eq!(s.disks[0].type_, "pd-ssd");
    assert_eq!(s.disks[0].labels["Team"], "A", "label keys stay as written");
    assert_eq!(s.labels["Name"], "kept");
    assert_eq!(s.scheduling.on_host_maintenance, "TERMINATE");
    let fields: Vec<&str> = d.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "providerSpec.Scheduling",
            "providerSpec.canIPForward",
            "providerSpec.disks[0].Labels",
            "providerSpec.disks[0].Type",
            "providerSpec.disks[0].sizeGB",
            "providerSpec.minCPUPlatform",
            "providerSpec.scheduling.OnHostMaintenance",
        ]
    );
    let d = GcpDriver::new(GcpDriverConfig::default());
    assert_eq!(
        d.provider_spec_warnings(&json!({"canIPForward": true, "machinetyp": "x"})),
        [
            "providerSpec.canIPForward: read as canIpForward, as Go's encoding/json matches keys case-insensitively; write canIpForward, the canonical key",
            "providerSpec.machinetyp: unknown field, ignored (the Go provider ignores it too): check its spelling",
        ]
    );
}

#[test]
fn a_credentials_json_is_read_with_go_spellings_and_never_quoted() {
    // An external account whose keys only Go's matching accepts.
    let wif = json!({"Type": "external_account", "audience": "//iam.googleapis.com/x",
        "Subject_Token_Type": "urn:ietf:params:oauth:token-type:jwt",
        "TOKEN_URL": "https://sts.googleapis.com/v1/token",
        "credential_source": {"File": "/var/run/secrets/gardener.cloud/workload-identity/token"},
        "project_id": "p-wif"});
    let secret = Secret {
        data: Some(
            [(
                "credentialsConfig".to_string(),
                ByteString(wif.to_string().into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let c = mcm_provider_gcp::credentials::from_secret(&secret).expect("accepted as by Go");
    assert_eq!(c.project, "p-wif");
    let fields: Vec<&str> = c.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "secretRef.credentialsConfig.Subject_Token_Type",
            "secretRef.credentialsConfig.TOKEN_URL",
            "secretRef.credentialsConfig.Type",
            "secretRef.credentialsConfig.credential_source.File",
        ]
    );
    // A value of the wrong type is named by its field, never quoted.
    let bad = json!({"type": "service_account", "private_key": ["very-secret-key-material"]});
    let secret = Secret {
        data: Some(
            [(
                "serviceAccountJSON".to_string(),
                ByteString(bad.to_string().into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let e = mcm_provider_gcp::credentials::from_secret(&secret).expect_err("a list is no key");
    assert!(e.to_string().contains("private_key"), "{e}");
    assert!(!e.to_string().contains("very-secret"), "{e}");
}

/// The reference's sample Secret with its `data` values read as the plain
/// strings they stand for (they are placeholders, not base64).
fn reference_secret() -> Secret {
    let v: Value = serde_yaml::from_str(include_str!("data/reference/secret.yaml")).expect("YAML");
    let data = v["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                ByteString(v.as_str().unwrap_or_default().as_bytes().to_vec()),
            )
        })
        .collect();
    Secret {
        data: Some(data),
        ..Default::default()
    }
}

fn reference_class() -> MachineClass {
    serde_yaml::from_str(include_str!("data/reference/machine-class.yaml")).expect("a MachineClass")
}

#[tokio::test]
async fn the_reference_samples_decode_and_drive_a_machine_through_the_fake() {
    let class = reference_class();
    let d = <mcm_provider_gcp::spec::GcpProviderSpec as mcm_driver::provider_spec::ProviderSpec>::decode(&class.provider_spec).expect("decodes");
    // The sample nests a secretRef in its providerSpec: Go ignores it, so do we, visibly.
    let warnings: Vec<String> = d.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        ["providerSpec.secretRef: unknown field, ignored (the Go provider ignores it too): check its spelling"]
    );
    assert_eq!(d.value.disks[0].size_gb, 50);
    assert_eq!(d.value.network_interfaces[0].ipv6_access_type, "EXTERNAL");
    assert_eq!(
        mcm_provider_gcp::validation::validate_spec(&d.value),
        [],
        "the sample is a valid class"
    );
    // The sample Secret's keys are the ones the driver reads; its
    // serviceAccountJSON ("{...}") is a placeholder, refused as not JSON.
    let driver = GcpDriver::new(GcpDriverConfig::default());
    let check = driver.check_class(&class, &reference_secret());
    assert_eq!(check.warnings.len(), 1, "{check:?}");
    assert_eq!(check.errors.len(), 1, "{check:?}");
    assert!(
        check.errors[0].message.contains("serviceAccountJSON"),
        "{check:?}"
    );

    // The same class with the fake's credentials under the sample's keys.
    let fake = FakeGce::start().await.expect("fake");
    fake.set_polls_until_done(1);
    let d = GcpDriver::new(GcpDriverConfig::with_endpoint(fake.endpoint()));
    let mut secret = reference_secret();
    if let Some(data) = secret.data.as_mut() {
        data.insert(
            "serviceAccountJSON".into(),
            ByteString(service_account_json(PROJECT).into_bytes()),
        );
    }
    let mut m = machine("test-mc-ref-1");
    let r = |m: &Machine| MachineRequest {
        machine: m.clone(),
        machine_class: class.clone(),
        secret: secret.clone(),
    };
    let created = d.create_machine(&r(&m)).await.expect("create");
    assert_eq!(
        created.provider_id,
        format!("gce:///{PROJECT}/europe-west1-b/test-mc-ref-1")
    );
    m.spec.provider_id = created.provider_id.clone();
    let status = d.get_machine_status(&r(&m)).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = d
        .list_machines(&ListMachinesRequest {
            machine_class: class.clone(),
            secret: secret.clone(),
        })
        .await
        .expect("list");
    assert_eq!(
        listed
            .machine_list
            .get(&created.provider_id)
            .map(String::as_str),
        Some("test-mc-ref-1")
    );
    d.delete_machine(&r(&m)).await.expect("delete");
    assert_eq!(fake.instance_count(), 0);
}
