use super::*;
use crate::driver::test_support::{eni, spec};
use aws_sdk_ec2::types::{
    EbsInstanceBlockDevice, InstanceBlockDeviceMapping, InstanceMetadataOptionsResponse, Tag,
    VolumeType,
};
use serde_json::json;

fn base() -> Value {
    json!({
        "ami": "ami-1", "machineType": "m5.large", "region": "eu-west-1",
        "blockDevices": [{"ebs": {"volumeSize": 20, "volumeType": "gp3", "iops": 3000}}],
        "networkInterfaces": [{"subnetID": "s", "securityGroupIDs": ["g"], "ipv6PrefixCount": 1}],
        "tags": {"kubernetes.io/cluster/c": "1", "kubernetes.io/role/node": "1", "team": "a"}
    })
}

#[test]
fn tags_volume_settings_and_network_fields_are_in_place() {
    let mut b = base();
    b["tags"]["team"] = json!("b");
    b["tags"]["cost"] = json!("x");
    b["blockDevices"][0]["ebs"]["iops"] = json!(4000);
    b["blockDevices"][0]["ebs"]["throughput"] = json!(250);
    b["blockDevices"][0]["ebs"]["volumeSize"] = json!(30);
    b["networkInterfaces"][0]["ipv6PrefixCount"] = json!(0);
    b["srcAndDstChecksEnabled"] = json!(false);
    b["instanceMetadataOptions"] = json!({"httpTokens": "required"});
    let c = in_place_changes(&base(), &b);
    assert!(c.need_replacement.is_empty(), "{c:?}");
    assert_eq!(
        c.in_place,
        vec![
            "blockDevices[0].ebs.iops",
            "blockDevices[0].ebs.throughput",
            "blockDevices[0].ebs.volumeSize",
            "instanceMetadataOptions",
            "networkInterfaces[0].ipv6PrefixCount",
            "srcAndDstChecksEnabled",
            "tags.cost",
            "tags.team",
        ]
    );
}

#[test]
fn instance_type_ami_subnet_and_a_smaller_disk_need_a_replacement() {
    let mut b = base();
    b["machineType"] = json!("m5.xlarge");
    b["ami"] = json!("ami-2");
    b["networkInterfaces"][0]["subnetID"] = json!("s2");
    b["blockDevices"][0]["ebs"]["volumeSize"] = json!(10);
    b["tags"]["team"] = json!("b");
    let c = in_place_changes(&base(), &b);
    assert_eq!(
        c.need_replacement,
        vec![
            "ami",
            "blockDevices[0].ebs.volumeSize",
            "machineType",
            "networkInterfaces[0].subnetID"
        ]
    );
    assert_eq!(c.in_place, vec!["tags.team"]);
    assert!(!c.all_in_place());
}

#[test]
fn another_cluster_or_role_tag_key_and_another_disk_count_need_a_replacement() {
    let mut b = base();
    b["tags"] =
        json!({"kubernetes.io/cluster/other": "1", "kubernetes.io/role/node": "1", "team": "a"});
    b["blockDevices"] = json!([
        {"deviceName": "/root", "ebs": {"volumeSize": 20, "volumeType": "gp3"}},
        {"deviceName": "/dev/sdb", "ebs": {"volumeSize": 20, "volumeType": "gp3"}}
    ]);
    let c = in_place_changes(&base(), &b);
    assert_eq!(
        c.need_replacement,
        vec![
            "blockDevices",
            "tags.kubernetes.io/cluster/c",
            "tags.kubernetes.io/cluster/other"
        ]
    );
    assert!(c.in_place.is_empty());
}

#[test]
fn keys_spelled_in_another_case_are_compared_canonically() {
    let mut b = base();
    b["MachineType"] = b["machineType"].take();
    if let Some(o) = b.as_object_mut() {
        o.remove("machineType");
    }
    assert!(in_place_changes(&base(), &b).is_empty());
}

fn instance(tags: &[(&str, &str)], sdc: bool, prefixes: usize) -> Instance {
    let mut b = Instance::builder()
        .instance_id("i-1")
        .root_device_name("/dev/xvda")
        .block_device_mappings(
            InstanceBlockDeviceMapping::builder()
                .device_name("/dev/xvda")
                .ebs(EbsInstanceBlockDevice::builder().volume_id("vol-1").build())
                .build(),
        )
        .network_interfaces(eni("eni-1", 0, Some(sdc), "interface", 0, prefixes));
    for (k, v) in tags {
        b = b.tags(Tag::builder().key(*k).value(*v).build());
    }
    b.build()
}

fn volume(size: i32, iops: i32, tags: &[(&str, &str)]) -> Volume {
    let mut b = Volume::builder()
        .volume_id("vol-1")
        .size(size)
        .volume_type(VolumeType::Gp3)
        .iops(iops)
        .throughput(125);
    for (k, v) in tags {
        b = b.tags(Tag::builder().key(*k).value(*v).build());
    }
    b.build()
}

#[test]
fn the_plan_tags_untags_and_modifies_only_what_differs_and_keeps_foreign_tags() {
    let last = spec(base());
    let mut want = base();
    if let Some(t) = want["tags"].as_object_mut() {
        t.remove("team");
    }
    want["tags"]["cost"] = json!("x");
    want["blockDevices"][0]["ebs"]["iops"] = json!(5000);
    let want = spec(want);
    let identity = ("machine.sapcloud.io/uid", "u");
    let common = [
        ("kubernetes.io/cluster/c", "1"),
        ("kubernetes.io/role/node", "1"),
        ("Name", "m"),
        identity,
        ("team", "a"),
        ("foreign", "f"),
    ];
    let i = instance(&common, true, 1);
    let vols = [volume(20, 3000, &common)];
    let enis = [NetworkInterface::builder()
        .network_interface_id("eni-1")
        .tag_set(Tag::builder().key("team").value("a").build())
        .build()];
    let now = Actual {
        instance: &i,
        volumes: &vols,
        interfaces: &enis,
    };
    let plan = update_plan(&want, &last, &now);
    let all = vec!["i-1".to_string(), "vol-1".into(), "eni-1".into()];
    assert_eq!(
        plan,
        vec![
            UpdateStep::Tag {
                resources: all.clone(),
                tags: want.tags.clone(),
            },
            UpdateStep::Untag {
                resources: all,
                keys: vec!["team".into()],
            },
            UpdateStep::Volume {
                id: "vol-1".into(),
                change: VolumeChange {
                    iops: Some(5000),
                    ..Default::default()
                }
            },
        ]
    );
}

#[test]
fn a_vm_that_matches_its_class_plans_nothing() {
    let s = spec(base());
    let tags = [
        ("kubernetes.io/cluster/c", "1"),
        ("kubernetes.io/role/node", "1"),
        ("team", "a"),
    ];
    let i = instance(&tags, true, 1);
    let vols = [volume(20, 3000, &tags)];
    let enis = [NetworkInterface::builder()
        .network_interface_id("eni-1")
        .set_tag_set(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()];
    let now = Actual {
        instance: &i,
        volumes: &vols,
        interfaces: &enis,
    };
    assert!(update_plan(&s, &s, &now).is_empty());
}

#[test]
fn source_dest_check_comes_back_on_only_when_the_class_had_turned_it_off() {
    let mut off = base();
    off["srcAndDstChecksEnabled"] = json!(false);
    let (on, off) = (spec(base()), spec(off));
    let i = instance(&[], false, 1);
    let now = Actual {
        instance: &i,
        volumes: &[],
        interfaces: &[],
    };
    let sdc = |plan: Vec<UpdateStep>| {
        plan.into_iter()
            .filter(|s| matches!(s, UpdateStep::SourceDestCheck { .. }))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        sdc(update_plan(&on, &off, &now)),
        vec![UpdateStep::SourceDestCheck {
            eni: "eni-1".into(),
            on: true
        }]
    );
    assert!(
        sdc(update_plan(&on, &on, &now)).is_empty(),
        "a check someone else turned off is left alone"
    );
    let i_on = instance(&[], true, 1);
    let now_on = Actual {
        instance: &i_on,
        volumes: &[],
        interfaces: &[],
    };
    assert_eq!(
        sdc(update_plan(&off, &on, &now_on)),
        vec![UpdateStep::SourceDestCheck {
            eni: "eni-1".into(),
            on: false
        }]
    );
}

#[test]
fn ipv6_prefixes_are_topped_up_and_released_only_when_the_class_lowered_them() {
    let mut three = base();
    three["networkInterfaces"][0]["ipv6PrefixCount"] = json!(3);
    let (one, three) = (spec(base()), spec(three));
    let i = instance(&[], true, 2);
    let net = |plan: Vec<UpdateStep>| {
        plan.into_iter()
            .filter(|s| matches!(s, UpdateStep::Assign(_) | UpdateStep::Unassign { .. }))
            .collect::<Vec<_>>()
    };
    let now = Actual {
        instance: &i,
        volumes: &[],
        interfaces: &[],
    };
    assert_eq!(
        net(update_plan(&three, &one, &now)),
        vec![UpdateStep::Assign(InitStep::AssignIpv6Prefixes {
            eni: "eni-1".into(),
            count: 1
        })]
    );
    assert_eq!(
        net(update_plan(&one, &three, &now)),
        vec![UpdateStep::Unassign {
            eni: "eni-1".into(),
            addresses: vec![],
            prefixes: vec!["2001:db8:1::/80".into()],
        }]
    );
    assert!(
        net(update_plan(&one, &one, &now)).is_empty(),
        "a surplus the class never asked to remove stays"
    );
}

#[test]
fn metadata_options_are_modified_field_by_field() {
    let mut b = base();
    b["instanceMetadataOptions"] = json!({"httpTokens": "required", "httpPutResponseHopLimit": 2});
    let s = spec(b);
    let i = Instance::builder()
        .instance_id("i-1")
        .metadata_options(
            InstanceMetadataOptionsResponse::builder()
                .http_tokens(aws_sdk_ec2::types::HttpTokensState::Optional)
                .http_put_response_hop_limit(2)
                .build(),
        )
        .build();
    assert_eq!(
        metadata_change(&s, &i),
        Some(MetadataChange {
            http_tokens: Some("required".into()),
            ..Default::default()
        })
    );
}
