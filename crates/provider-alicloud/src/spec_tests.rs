use super::*;
use serde_json::json;

pub(crate) fn valid_json() -> serde_json::Value {
    json!({
        "imageID": "m-gw8abc",
        "instanceType": "ecs.g7.large",
        "region": "eu-central-1",
        "zoneID": "eu-central-1a",
        "securityGroupID": "sg-gw8abc",
        "vSwitchID": "vsw-gw8abc",
        "systemDisk": {"category": "cloud_essd", "size": 50},
        "dataDisks": [{"name": "logs", "category": "cloud_essd", "size": 100, "encrypted": true}],
        "instanceChargeType": "PostPaid",
        "internetChargeType": "PayByTraffic",
        "internetMaxBandwidthIn": 5,
        "spotStrategy": "NoSpot",
        "IoOptimized": "optimized",
        "keyPairName": "shoot--demo-ssh",
        "tags": {"kubernetes.io/cluster/shoot--demo": "1", "kubernetes.io/role/node": "1"},
        "someFutureField": true
    })
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

use mcm_driver::testing::secret_with as secret;

#[test]
fn the_gardener_shaped_spec_decodes_with_its_json_keys_and_is_valid() {
    let spec = AlicloudProviderSpec::from_json(&valid_json()).unwrap();
    assert_eq!(spec.image_id, "m-gw8abc");
    assert_eq!(spec.v_switch_id, "vsw-gw8abc");
    assert_eq!(spec.io_optimized, "optimized");
    assert_eq!(spec.internet_max_bandwidth_in, Some(5));
    assert_eq!(spec.data_disks[0].delete_with_instance, None);
    assert_eq!(
        spec.cluster_tag(),
        Some(("kubernetes.io/cluster/shoot--demo", "1"))
    );
    assert_eq!(messages(&validate_spec(&spec)), Vec::<String>::new());
}

#[test]
fn an_empty_spec_reports_every_required_field_and_both_tags() {
    let spec = AlicloudProviderSpec::from_json(&json!({})).unwrap();
    let m = messages(&validate_spec(&spec));
    for want in [
        "providerSpec.imageID: Required value: ImageID is required",
        "providerSpec.instanceType: Required value: InstanceType is required",
        "providerSpec.region: Required value: Region is required",
        "providerSpec.vSwitchID: Required value: VSwitchID is required",
        "providerSpec.securityGroupID: Required value: SecurityGroupID is required",
        "providerSpec.tags: Required value: Tag required of the form kubernetes.io/cluster/****",
        "providerSpec.tags: Required value: Tag required of the form kubernetes.io/role/****",
    ] {
        assert!(m.contains(&want.to_string()), "{want} missing from {m:#?}");
    }
}

#[test]
fn disks_enums_and_bandwidth_are_checked() {
    let mut v = valid_json();
    v["systemDisk"] = json!({"category": "gp3", "size": 0});
    v["dataDisks"] = json!([
        {"name": "a", "category": "cloud_essd", "size": 10},
        {"name": "a", "category": "", "size": -1},
        {"category": "cloud", "size": 10}
    ]);
    v["spotStrategy"] = json!("Cheap");
    v["IoOptimized"] = json!("yes");
    v["internetMaxBandwidthOut"] = json!(-1);
    let m = messages(&validate_spec(
        &AlicloudProviderSpec::from_json(&v).unwrap(),
    ));
    for want in [
        "providerSpec.systemDisk.category: Unsupported value: \"gp3\"",
        "providerSpec.systemDisk.size: Invalid value: 0",
        "providerSpec.dataDisks[1].name: Invalid value: \"a\": Data disk names must be unique",
        "providerSpec.dataDisks[1].category: Required value",
        "providerSpec.dataDisks[1].size: Invalid value: -1",
        "providerSpec.dataDisks[2].name: Required value",
        "providerSpec.spotStrategy: Unsupported value: \"Cheap\"",
        "providerSpec.IoOptimized: Unsupported value: \"yes\"",
        "providerSpec.internetMaxBandwidthOut: Invalid value: -1",
    ] {
        assert!(
            m.iter().any(|e| e.starts_with(want)),
            "{want} missing from {m:#?}"
        );
    }
}

#[test]
fn garbage_is_a_decode_error_not_a_panic() {
    assert!(AlicloudProviderSpec::from_json(&json!("garbage")).is_err());
    assert!(AlicloudProviderSpec::from_json(&json!({"imageID": 7})).is_err());
    assert!(AlicloudProviderSpec::from_json(&json!(null)).is_err());
}

#[test]
fn the_secret_accepts_both_key_spellings_trimmed() {
    let a = secret(&[
        ("alicloudAccessKeyID", " LTAIexample\n"),
        ("alicloudAccessKeySecret", "s3cr3t\n"),
        ("userData", "#cloud-config"),
    ]);
    let b = secret(&[
        ("accessKeyID", "LTAIexample"),
        ("accessKeySecret", "s3cr3t"),
    ]);
    assert_eq!(credentials(&a), credentials(&b));
    assert_eq!(credentials(&a).access_key_id, "LTAIexample");
    assert!(validate_secret(SecretData(&a), SecretUse::Create).is_empty());
    assert!(validate_secret(SecretData(&b), SecretUse::Existing).is_empty());
    let m = messages(&validate_secret(SecretData(&b), SecretUse::Create));
    assert_eq!(
        m,
        vec!["secretRef.userData: Required value: Mention userData"]
    );
    let m = messages(&validate_secret(
        SecretData(&secret(&[])),
        SecretUse::Existing,
    ));
    assert_eq!(
        m,
        vec![
            "secretRef.alicloudAccessKeyID: Required value: Mention atleast alicloudAccessKeyID or accessKeyID",
            "secretRef.alicloudAccessKeySecret: Required value: Mention atleast alicloudAccessKeySecret or accessKeySecret",
        ]
    );
}

#[test]
fn credentials_debug_hides_the_secret() {
    let c = Credentials {
        access_key_id: "LTAIexample".into(),
        access_key_secret: "very-secret".into(),
    };
    let shown = format!("{c:?}");
    assert!(shown.contains("LTAIexample") && !shown.contains("very-secret"));
}
