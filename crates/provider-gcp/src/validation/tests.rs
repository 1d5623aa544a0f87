use super::*;
use crate::spec::{GcpDiskEncryption, GcpProviderSpec};
use k8s_openapi::ByteString;
use serde_json::json;

fn valid() -> GcpProviderSpec {
    GcpProviderSpec::from_json(&json!({
        "disks": [{"boot": true, "sizeGb": 50, "type": "pd-standard", "image": "img"}],
        "machineType": "n1-standard-2",
        "networkInterfaces": [{"network": "n"}],
        "scheduling": {"onHostMaintenance": "MIGRATE"},
        "tags": ["kubernetes-io-cluster-c", "kubernetes-io-role-node"],
        "region": "europe-west1",
        "zone": "europe-west1-b"
    }))
    .unwrap()
}

fn messages(spec: &GcpProviderSpec) -> Vec<String> {
    validate_spec(spec)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_complete_spec_is_valid() {
    assert!(validate_spec(&valid()).is_empty());
}

#[test]
fn an_empty_spec_lists_every_required_field_in_the_reference_order_and_wording() {
    assert_eq!(
        messages(&GcpProviderSpec::default()),
        vec![
            "spec.disks: Required value: at least one disk is required",
            "spec.machineType: Required value: machineType is required",
            "spec.region: Required value: region is required",
            "spec.zone: Required value: zone is required",
            "spec.networkInterfaces.networkInterfaces: Required value: at least one network interface is required",
            "spec.scheduling.onHostMaintenance: Unsupported value: \"\": supported values: \"MIGRATE\", \"TERMINATE\"",
        ]
    );
}

#[test]
fn disk_findings_scratch_interface_boot_image_and_encryption() {
    let mut s = valid();
    s.disks[0].image.clear();
    s.disks.push(crate::spec::GcpDisk {
        type_: "SCRATCH".into(),
        interface: "IDE".into(),
        encryption: Some(GcpDiskEncryption {
            kms_key_name: "  ".into(),
            kms_key_service_account: "   ".into(),
        }),
        ..Default::default()
    });
    assert_eq!(
        messages(&s),
        vec![
            "spec.disks[0].image: Required value: image is required for boot disk",
            "spec.disks[1].interface: Unsupported value: \"IDE\": supported values: \"NVME\", \"SCSI\"",
            "spec.disks[1].kmsKeyName: Required value: kmsKeyName is required to be specified",
            "spec.disks[1].kmsKeyServiceAccount: Required value: kmsKeyServiceAccount should either be explicitly specified without spaces or left un-specified to default to the Compute Service Agent",
        ]
    );
}

#[test]
fn network_interface_findings() {
    let mut s = valid();
    let n = &mut s.network_interfaces[0];
    n.network.clear();
    n.stack_type = "IPV6_ONLY".into();
    n.ipv6_access_type = "PUBLIC".into();
    n.ip_cidr_range = "24".into();
    let mut n2 = n.clone();
    n2.network = "n".into();
    n2.stack_type.clear();
    n2.ipv6_access_type.clear();
    n2.ip_cidr_range = "/33".into();
    let mut n3 = n2.clone();
    n3.ip_cidr_range = "/x".into();
    s.network_interfaces.push(n2);
    s.network_interfaces.push(n3);
    assert_eq!(
        messages(&s),
        vec![
            "spec.networkInterfaces[0]: Required value: either network or subnetwork or both is required",
            "spec.networkInterfaces[0].stackType: Invalid value: \"IPV6_ONLY\": must be either IPV4_IPV6 or IPV4_ONLY",
            "spec.networkInterfaces[0].ipv6AccessType: Invalid value: \"PUBLIC\": must be either EXTERNAL or INTERNAL",
            "spec.networkInterfaces[0].ipCidrRange: Invalid value: \"24\": CIDR range must start with '/'",
            "spec.networkInterfaces[1].ipCidrRange: Invalid value: \"/33\": CIDR mask size must be between 0 and 32",
            "spec.networkInterfaces[2].ipCidrRange: Invalid value: \"/x\": invalid CIDR mask size: x",
        ]
    );
}

#[test]
fn user_data_in_metadata_is_forbidden_at_the_reference_path() {
    let mut s = valid();
    s.metadata = vec![
        crate::spec::GcpMetadata {
            key: "ok".into(),
            value: None,
        },
        crate::spec::GcpMetadata {
            key: "user-data".into(),
            value: Some("x".into()),
        },
    ];
    assert_eq!(
        messages(&s),
        vec!["spec.networkInterfaces[1].key: Forbidden: user-data key is forbidden in metadata"]
    );
}

#[test]
fn gpu_needs_type_count_and_terminate_on_maintenance() {
    let mut s = valid();
    s.gpu = Some(crate::spec::GcpGpu::default());
    assert_eq!(
        messages(&s),
        vec![
            "spec.gpu.acceleratorType: Required value: accelerator type needs to be provided",
            "spec.gpu.count: Forbidden: gpu count must be > 0",
            "spec.scheduling.onHostMaintenance: Forbidden: liveMigration is not allowed for VMs with gpu attached, use \"TERMINATE\" instead",
        ]
    );
    s.gpu = Some(crate::spec::GcpGpu {
        accelerator_type: "nvidia-tesla-t4".into(),
        count: 1,
    });
    s.scheduling.on_host_maintenance = "TERMINATE".into();
    assert!(validate_spec(&s).is_empty());
}

fn secret(keys: &[&str]) -> Secret {
    Secret {
        data: Some(
            keys.iter()
                .map(|k| (k.to_string(), ByteString(b"x".to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

#[test]
fn the_secret_needs_credentials_under_one_of_three_keys_and_user_data() {
    let msgs = |s: &Secret| -> Vec<String> {
        validate_secret(SecretData(s), SecretUse::Create)
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(
        msgs(&secret(&[])),
        vec![
            "secret serviceAccountJSON, serviceaccount.json or credentialsConfig is required field",
            "secret userData is required field",
        ]
    );
    for key in [
        "serviceAccountJSON",
        "serviceaccount.json",
        "credentialsConfig",
    ] {
        assert!(msgs(&secret(&[key, "userData"])).is_empty(), "{key}");
    }
}

#[test]
fn findings_join_like_a_go_error_slice() {
    let errs = validate_secret(SecretData(&secret(&[])), SecretUse::Create);
    assert_eq!(
        Join::GoSlice.apply(&errs),
        "[secret serviceAccountJSON, serviceaccount.json or credentialsConfig is required field secret userData is required field]"
    );
}
