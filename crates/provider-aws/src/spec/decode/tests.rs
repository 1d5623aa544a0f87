//! Key matching on the AWS spec through the shared decoder: every field is
//! reachable by another spelling, the spelling that sorts last wins (as in Go
//! after the API server), tags stay as written, unknown keys are reported.

use super::*;
use crate::spec::{
    AwsProviderSpec, BlockDevice, CapacityReservation, CpuOptions, EbsVolume, IamProfile,
    InstanceMarketOptions, InstanceMetadataOptions, NetworkInterface, PlacementSpec,
};
use serde_json::json;
use std::collections::BTreeMap;

/// A spec with every field of every type set (no field left at a default
/// that serialization would skip).
fn full_spec() -> AwsProviderSpec {
    let nic = NetworkInterface {
        associate_public_ip_address: Some(true),
        ipv6_address_count: Some(1),
        ipv6_prefix_count: Some(2),
        delete_on_termination: Some(false),
        description: Some("d".into()),
        security_group_ids: vec!["sg-1".into()],
        subnet_id: "subnet-1".into(),
        interface_type: Some("efa".into()),
        network_card_index: Some(1),
        device_index: Some(1),
        primary_ipv6: Some(true),
    };
    AwsProviderSpec {
        api_version: "v1".into(),
        ami: "ami-1".into(),
        block_devices: vec![BlockDevice {
            device_name: "/root".into(),
            ebs: EbsVolume {
                delete_on_termination: Some(false),
                encrypted: true,
                iops: 3000,
                throughput: Some(125),
                kms_key_id: Some("k".into()),
                snapshot_id: Some("snap-1".into()),
                volume_size: 50,
                volume_type: "gp3".into(),
            },
            no_device: "x".into(),
            virtual_name: "ephemeral0".into(),
        }],
        capacity_reservation: Some(CapacityReservation {
            capacity_reservation_preference: "open".into(),
            capacity_reservation_id: Some("cr-1".into()),
            capacity_reservation_resource_group_arn: Some("arn:g".into()),
            is_ml_capacity_block: Some(true),
        }),
        ebs_optimized: true,
        iam: IamProfile {
            arn: "arn:p".into(),
            name: "p".into(),
        },
        machine_type: "m5.large".into(),
        key_name: Some("key".into()),
        monitoring: true,
        network_interfaces: vec![nic.clone(), nic],
        region: "eu-west-1".into(),
        spot_price: Some("0.1".into()),
        src_and_dst_checks_enabled: Some(false),
        tags: BTreeMap::from([
            ("kubernetes.io/cluster/Shoot".to_string(), "1".to_string()),
            ("Name".to_string(), "n".to_string()),
        ]),
        instance_metadata_options: Some(InstanceMetadataOptions {
            http_endpoint: "enabled".into(),
            http_put_response_hop_limit: Some(2),
            http_tokens: "required".into(),
            http_protocol_ipv6: "enabled".into(),
        }),
        cpu_options: Some(CpuOptions {
            core_count: Some(2),
            threads_per_core: Some(1),
            amd_sev_snp: Some("enabled".into()),
        }),
        placement: Some(PlacementSpec {
            group_id: Some("pg-1".into()),
            tenancy: Some("host".into()),
            host_id: Some("h-1".into()),
            partition_number: Some(1),
            affinity: Some("host".into()),
        }),
        instance_market_options: Some(InstanceMarketOptions {
            market_type: "spot".into(),
        }),
    }
}

/// Every field key (not the keys of `tags`) re-spelled by `respell`; returns
/// how many keys changed.
fn respell_keys(v: &mut Value, respell: &dyn Fn(&str) -> String) -> usize {
    let mut n = 0;
    match v {
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (k, mut child) in old {
                if k != "tags" {
                    n += respell_keys(&mut child, respell);
                }
                let new = if k == "tags" { k.clone() } else { respell(&k) };
                if new != k {
                    n += 1;
                }
                map.insert(new, child);
            }
        }
        Value::Array(items) => {
            for i in items {
                n += respell_keys(i, respell);
            }
        }
        _ => {}
    }
    n
}

#[test]
fn every_field_is_reachable_by_a_differently_cased_key() {
    let full = full_spec();
    let canonical = serde_json::to_value(&full).expect("serializes");
    let swap = |k: &str| -> String {
        k.chars()
            .map(|c| {
                if c.is_ascii_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    };
    let upper = |k: &str| k.to_ascii_uppercase();
    let lower = |k: &str| k.to_ascii_lowercase();
    for (what, respell) in [
        ("swapped case", &swap as &dyn Fn(&str) -> String),
        ("upper case", &upper),
        ("lower case", &lower),
    ] {
        let mut v = canonical.clone();
        let respelled = respell_keys(&mut v, respell);
        let decoded = AwsProviderSpec::from_json(&v).expect("decodes");
        assert_eq!(decoded, full, "{what}: every field decoded");
        let (back, warnings) = canonical_keys(&v);
        assert_eq!(back, canonical, "{what}: canonical keys restored");
        assert!(respelled > 0);
        assert_eq!(
            warnings.len(),
            respelled,
            "{what}: one warning per re-spelled key: {warnings:#?}"
        );
    }
}

#[test]
fn a_case_folded_key_is_read_with_a_warning_naming_the_canonical_key() {
    let v = json!({
        "AMI": "ami-1",
        "IAM": {"Name": "profile"},
        "networkInterfaces": [{"subnetId": "subnet-1", "securityGroupIds": ["sg-1"]}],
        "\u{212A}eyName": "key",
        "tags": {"kubernetes.io/cluster/X": "1", "NAME": "n"},
        "someFutureField": 1
    });
    let (canonical, warnings) = canonical_keys(&v);
    assert_eq!(
        canonical,
        json!({
            "ami": "ami-1",
            "iam": {"name": "profile"},
            "networkInterfaces": [{"subnetID": "subnet-1", "securityGroupIDs": ["sg-1"]}],
            "keyName": "key",
            "tags": {"kubernetes.io/cluster/X": "1", "NAME": "n"},
            "someFutureField": 1
        }),
        "tag keys and unknown keys stay as written"
    );
    let mut w = warnings.clone();
    w.sort();
    assert_eq!(
        w,
        vec![
            "providerSpec.AMI: read as ami, as Go's encoding/json matches keys case-insensitively; write ami, the canonical key",
            "providerSpec.IAM: read as iam, as Go's encoding/json matches keys case-insensitively; write iam, the canonical key",
            "providerSpec.iam.Name: read as name, as Go's encoding/json matches keys case-insensitively; write name, the canonical key",
            "providerSpec.networkInterfaces[0].securityGroupIds: read as securityGroupIDs, as Go's encoding/json matches keys case-insensitively; write securityGroupIDs, the canonical key",
            "providerSpec.networkInterfaces[0].subnetId: read as subnetID, as Go's encoding/json matches keys case-insensitively; write subnetID, the canonical key",
            "providerSpec.someFutureField: unknown field, ignored (the Go provider ignores it too): check its spelling",
            "providerSpec.\u{212A}eyName: read as keyName, as Go's encoding/json matches keys case-insensitively; write keyName, the canonical key",
        ]
    );
}

#[test]
fn among_spellings_of_a_field_the_one_that_sorts_last_wins_as_in_go() {
    // The API server stores the keys sorted and Go decodes them in order, the
    // last one winning: "SUBNETID" < "subnetID" < "subnetId".
    let v = json!({"networkInterfaces": [{"subnetID": "exact", "subnetId": "folded", "SUBNETID": "upper"}]});
    let (canonical, warnings) = canonical_keys(&v);
    assert_eq!(
        canonical,
        json!({"networkInterfaces": [{"subnetID": "folded"}]})
    );
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings[0].starts_with("providerSpec.networkInterfaces[0].SUBNETID: ignored"));
    assert!(warnings[1].starts_with("providerSpec.networkInterfaces[0].subnetID: ignored"));
    assert!(warnings[2].starts_with("providerSpec.networkInterfaces[0].subnetId: read as subnetID"));
    // "IAM" < "iam": the exact key sorts last and wins.
    let s =
        AwsProviderSpec::from_json(&json!({"iam": {"name": "exact"}, "IAM": {"name": "folded"}}))
            .expect("decodes");
    assert_eq!(s.iam.name, "exact");
    let (canonical, warnings) = canonical_keys(&json!({"REGION": "a", "Region": "b"}));
    assert_eq!(canonical, json!({"region": "b"}));
    assert_eq!(warnings.len(), 2, "{warnings:?}");
}

#[test]
fn canonical_keys_give_no_warning_but_for_unknown_keys_and_keep_the_spec() {
    let v = crate::spec::tests::valid_json();
    let (canonical, warnings) = canonical_keys(&v);
    assert_eq!(
        warnings,
        ["providerSpec.someFutureField: unknown field, ignored (the Go provider ignores it too): check its spelling"]
    );
    assert_eq!(canonical, v);
    let (null, warnings) = canonical_keys(&Value::Null);
    assert_eq!(null, Value::Null);
    assert!(warnings.is_empty());
}
