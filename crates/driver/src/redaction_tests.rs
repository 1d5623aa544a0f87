use crate::{ListMachinesRequest, MachineRequest};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use std::collections::BTreeMap;

const SENTINEL: &str = "SENTINEL-s3cr3t-value";

fn secret() -> Secret {
    let mut data = BTreeMap::new();
    data.insert(
        "userData".to_string(),
        ByteString(SENTINEL.as_bytes().to_vec()),
    );
    let mut string_data = BTreeMap::new();
    string_data.insert("providerSecretAccessKey".to_string(), SENTINEL.to_string());
    Secret {
        data: Some(data),
        string_data: Some(string_data),
        ..Default::default()
    }
}

#[test]
fn debug_of_requests_shows_secret_keys_but_never_values() {
    let req = MachineRequest {
        machine: Default::default(),
        machine_class: Default::default(),
        secret: secret(),
    };
    let shown = format!("{req:?} {req:#?}");
    assert!(!shown.contains(SENTINEL), "{shown}");
    assert!(shown.contains("userData") && shown.contains("providerSecretAccessKey"));
    let list = ListMachinesRequest {
        machine_class: Default::default(),
        secret: secret(),
    };
    let shown = format!("{list:?}");
    assert!(!shown.contains(SENTINEL), "{shown}");
}
