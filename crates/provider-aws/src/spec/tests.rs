//! Tests of decoding and validating the providerSpec and the Secret.

use super::validate::is_data_device_name;
use super::*;
use serde_json::json;

pub(crate) fn valid_json() -> serde_json::Value {
    json!({
        "ami": "ami-123456789",
        "blockDevices": [{"ebs": {"volumeSize": 50, "volumeType": "gp2"}}],
        "iam": {"name": "test-iam"},
        "keyName": "test-ssh-key",
        "machineType": "m4.large",
        "networkInterfaces": [{"securityGroupIDs": ["sg-1"], "subnetID": "subnet-1"}],
        "region": "eu-west-1",
        "tags": {"kubernetes.io/cluster/shoot--test": "1", "kubernetes.io/role/test": "1"},
        "someFutureField": {"x": 1}
    })
}

fn spec(v: serde_json::Value) -> AwsProviderSpec {
    AwsProviderSpec::from_json(&v).expect("decodes")
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

#[test]
fn a_valid_spec_has_no_findings_and_tolerates_unknown_fields() {
    let s = spec(valid_json());
    assert!(validate_spec(&s).is_empty(), "{:?}", validate_spec(&s));
    assert_eq!(
        s.cluster_tag_key(),
        Some("kubernetes.io/cluster/shoot--test")
    );
    assert_eq!(s.role_tag_key(), Some("kubernetes.io/role/test"));
}

#[test]
fn the_gardener_example_class_decodes() {
    let v = json!({
      "ami": "ami-123456",
      "blockDevices": [
        {"deviceName": "/root", "ebs": {"volumeSize": 50, "volumeType": "gp2", "encrypted": false, "deleteOnTermination": true}},
        {"deviceName": "/dev/sdb", "ebs": {"volumeSize": 50, "volumeType": "gp2", "encrypted": true, "deleteOnTermination": true}}
      ],
      "iam": {"name": "iam-name"},
      "keyName": "key-value-pair-name",
      "machineType": "t2.large",
      "networkInterfaces": [{"subnetID": "subnet-acbd1234", "securityGroupIDs": ["sg-xyz12345"]}],
      "region": "eu-east-1",
      "spotPrice": "",
      "tags": {"Name": "sample-machine-name", "kubernetes.io/cluster/YOUR_CLUSTER_NAME": "1",
               "kubernetes.io/role/YOUR_ROLE_NAME": "1", "tag1": "tag1-value"},
      "instanceMetadataOptions": {"httpEndpoint": "enabled", "httpPutResponseHopLimit": 1,
                                  "httpTokens": "optional", "httpProtocolIpv6": "disabled"}
    });
    let s = spec(v);
    assert!(validate_spec(&s).is_empty(), "{:?}", validate_spec(&s));
    assert_eq!(s.spot_price.as_deref(), Some(""));
    assert!(s.block_devices[1].ebs.encrypted);
    assert_eq!(
        s.instance_metadata_options
            .as_ref()
            .and_then(|m| m.http_put_response_hop_limit),
        Some(1)
    );
}

#[test]
fn missing_required_fields_are_all_reported() {
    let s = spec(json!({}));
    let m = messages(&validate_spec(&s));
    assert!(
        m.contains(&"providerSpec.ami: Required value: AMI is required".to_string()),
        "{m:?}"
    );
    assert!(m
        .iter()
        .any(|e| e.starts_with("providerSpec.region: Required value")));
    assert!(m
        .iter()
        .any(|e| e.starts_with("providerSpec.machineType: Required value")));
    assert!(m
        .iter()
        .any(|e| e.starts_with("providerSpec.iam: Invalid value")));
    assert!(m.contains(
        &"providerSpec.tags: Required value: Tag required of the form kubernetes.io/cluster/****"
            .to_string()
    ));
    assert!(m.contains(
        &"providerSpec.tags: Required value: Tag required of the form kubernetes.io/role/****"
            .to_string()
    ));
    assert!(m
        .iter()
        .any(|e| e.starts_with("providerSpec.networkInterfaces: Required value")));
}

#[test]
fn block_device_rules() {
    let mut v = valid_json();
    v["blockDevices"] = json!([
        {"deviceName": "/root", "ebs": {"volumeSize": 50, "volumeType": "io1"}},
        {"deviceName": "/root", "ebs": {"volumeSize": 0, "volumeType": "io2", "throughput": 0, "iops": -1}},
        {"deviceName": "/dev/bogus", "ebs": {"volumeSize": 1, "volumeType": "gp3"}},
        {"deviceName": "/dev/xvdba", "ebs": {"volumeSize": 1, "volumeType": "gp3"}},
        {"deviceName": "/dev/xvdba", "ebs": {"volumeSize": 1, "volumeType": "gp3"}}
    ]);
    let m = messages(&validate_spec(&spec(v)));
    let has = |p: &str| m.iter().any(|e| e.starts_with(p));
    assert!(
        has("providerSpec.blockDevices[0].ebs.iops: Required value"),
        "{m:?}"
    );
    assert!(has(
        "providerSpec.blockDevices[1].ebs.volumeType: Required value"
    ));
    assert!(has(
        "providerSpec.blockDevices[1].ebs.volumeSize: Required value"
    ));
    assert!(has("providerSpec.blockDevices[1].ebs.iops: Required value"));
    assert!(has(
        "providerSpec.blockDevices[1].ebs.throughput: Invalid value: 0"
    ));
    assert!(has(
        "providerSpec.blockDevices[2].deviceName: Invalid value"
    ));
    assert!(!has("providerSpec.blockDevices[3].deviceName"));
    assert!(m.contains(
        &"providerSpec.blockDevices: Required value: Only one device can be specified as root"
            .to_string()
    ));
    assert!(m
        .iter()
        .any(|e| e.contains("Device name '/dev/xvdba' duplicated 2 times")));
    assert!(m
        .iter()
        .any(|e| e.contains("Device name '/root' duplicated 2 times")));
}

#[test]
fn data_device_names() {
    for ok in ["/dev/sda", "/dev/sdz", "/dev/xvda", "/dev/xvdcz"] {
        assert!(is_data_device_name(ok), "{ok}");
    }
    for bad in [
        "/dev/sdaa",
        "/dev/xvdd",
        "/dev/xvdaA",
        "/dev/nvme0n1",
        "sdb",
        "",
    ] {
        assert!(!is_data_device_name(bad), "{bad}");
    }
}

#[test]
fn option_rules() {
    let mut v = valid_json();
    v["iam"] = json!({"name": "a", "arn": "b"});
    v["capacityReservation"] =
        json!({"capacityReservationPreference": "open", "capacityReservationId": "cr-1"});
    v["networkInterfaces"] = json!([{"securityGroupIDs": [" "], "interfaceType": "bogus", "deviceIndex": -1, "networkCardIndex": -2}]);
    v["instanceMetadataOptions"] = json!({"httpPutResponseHopLimit": 65, "httpEndpoint": "x", "httpTokens": "y", "httpProtocolIpv6": "z"});
    v["cpuOptions"] = json!({"coreCount": 2, "threadsPerCore": 3, "amdSevSnp": "maybe"});
    v["placement"] =
        json!({"tenancy": "dedicated", "hostId": "h-1", "affinity": "x", "partitionNumber": 0});
    v["instanceMarketOptions"] = json!({"marketType": "free"});
    let m = messages(&validate_spec(&spec(v)));
    for p in [
        "providerSpec.iam: Invalid value",
        "providerSpec.capacityReservation: Required value",
        "providerSpec.networkInterfaces[0].subnetID: Required value",
        "providerSpec.networkInterfaces[0].securityGroupIDs[0]: Required value",
        "providerSpec.networkInterfaces[0].interfaceType: Unsupported value: \"bogus\"",
        "providerSpec.networkInterfaces[0].deviceIndex: Invalid value: -1",
        "providerSpec.networkInterfaces[0].networkCardIndex: Invalid value: -2",
        "providerSpec.instanceMetadataOptions.httpPutResponseHopLimit: Invalid value: 65",
        "providerSpec.instanceMetadataOptions.httpEndpoint: Unsupported value",
        "providerSpec.instanceMetadataOptions.httpTokens: Unsupported value",
        "providerSpec.instanceMetadataOptions.httpProtocolIpv6: Unsupported value",
        "providerSpec.cpuOptions.threadsPerCore: Invalid value: 3",
        "providerSpec.cpuOptions.amdSevSnp: Unsupported value",
        "providerSpec.placement.affinity: Unsupported value",
        "providerSpec.placement.hostId: Invalid value",
        "providerSpec.placement.partitionNumber: Invalid value: 0",
        "providerSpec.instanceMarketOptions.marketType: Unsupported value: \"free\"",
    ] {
        assert!(m.iter().any(|e| e.starts_with(p)), "missing {p} in {m:?}");
    }
    let mut v = valid_json();
    v["cpuOptions"] = json!({"coreCount": 2});
    let m = messages(&validate_spec(&spec(v)));
    assert!(m
        .iter()
        .any(|e| e.starts_with("providerSpec.cpuOptions.threadsPerCore: Required value")));
}

use mcm_driver::testing::secret_with as secret;

#[test]
fn secret_rules_and_both_key_spellings() {
    let m = messages(&validate_secret(
        SecretData(&secret(&[])),
        SecretUse::Create,
    ));
    assert_eq!(
        m,
        vec![
            "secretRef.AWSAccessKeyID: Required value: Mention atleast providerAccessKeyId or accessKeyID",
            "secretRef.AWSSecretAccessKey: Required value: Mention atleast providerSecretAccessKey or secretAccessKey",
            "secretRef.userData: Required value: Mention userData",
        ]
    );
    let s = secret(&[
        ("accessKeyID", " AK "),
        ("secretAccessKey", "SK"),
        ("userData", "x"),
    ]);
    assert!(validate_secret(SecretData(&s), SecretUse::Create).is_empty());
    assert_eq!(
        credentials(&s),
        Credentials::Static {
            access_key_id: "AK".into(),
            secret_access_key: "SK".into()
        }
    );
    let s = secret(&[
        ("providerAccessKeyId", "A1"),
        ("accessKeyID", "A2"),
        ("providerSecretAccessKey", "S1"),
        ("userData", "x"),
    ]);
    assert_eq!(
        credentials(&s),
        Credentials::Static {
            access_key_id: "A1".into(),
            secret_access_key: "S1".into()
        }
    );
    assert!(
        !format!("{:?}", credentials(&s)).contains("S1"),
        "Debug must hide the secret"
    );
    let s = secret(&[("workloadIdentityTokenFile", ""), ("userData", "")]);
    assert_eq!(validate_secret(SecretData(&s), SecretUse::Create).len(), 3);
}
