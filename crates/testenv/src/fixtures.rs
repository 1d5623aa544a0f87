//! Classes, Machines and driver requests for the driver-level tests of the
//! local cloud (`mcm-provider-local`'s and `mcm-driver-grpc`'s tests), which
//! call a driver directly, without the control plane.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::{ListMachinesRequest, MachineRequest};
use serde_json::{json, Value};

/// A local-cloud providerSpec of cluster `cluster` that wants
/// source/destination checks off (so the machine is Uninitialized until
/// InitializeMachine), 2 IPv6 addresses and 1 prefix.
pub fn local_spec(cluster: &str) -> Value {
    json!({
        "image": "local/ubuntu-24.04",
        "instanceType": "local.medium",
        "srcAndDstChecksEnabled": false,
        "ipv6AddressCount": 2,
        "ipv6PrefixCount": 1,
        "tags": {
            format!("kubernetes.io/cluster/{cluster}"): "1",
            "kubernetes.io/role/node": "1"
        }
    })
}

/// A `local` MachineClass `name` in namespace `default` with `provider_spec`.
pub fn local_class_with(name: &str, provider_spec: Value) -> MachineClass {
    MachineClass {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".to_string()),
            ..Default::default()
        },
        provider_spec,
        provider: "local".to_string(),
        ..Default::default()
    }
}

/// The class `class-<cluster>` of [`local_spec`].
pub fn local_class(cluster: &str) -> MachineClass {
    local_class_with(&format!("class-{cluster}"), local_spec(cluster))
}

/// A Machine `<prefix>-<random>` in namespace `default` with a random UID.
pub fn machine(prefix: &str) -> Machine {
    let suffix = format!("{:08x}", rand::random::<u32>());
    let mut m = Machine::new(&format!("{prefix}-{suffix}"), MachineSpec::default());
    m.metadata.namespace = Some("default".to_string());
    m.metadata.uid = Some(format!("uid-{suffix}-{:08x}", rand::random::<u32>()));
    m
}

/// A machine-scoped request with an empty Secret.
pub fn request(machine: &Machine, class: &MachineClass) -> MachineRequest {
    MachineRequest {
        machine: machine.clone(),
        machine_class: class.clone(),
        secret: Secret::default(),
    }
}

/// A ListMachines request for `class` with an empty Secret.
pub fn list_request(class: &MachineClass) -> ListMachinesRequest {
    ListMachinesRequest {
        machine_class: class.clone(),
        secret: Secret::default(),
    }
}
