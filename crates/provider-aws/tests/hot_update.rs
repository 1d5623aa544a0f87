//! UpdateMachine against moto (tags and EBS settings converge on the same
//! instance, a second run changes nothing, a replacement field is refused
//! without a change) and against `aws-smithy-mocks` (EC2 rejecting an IOPS
//! value, which moto accepts).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use aws_sdk_ec2::operation::describe_network_interfaces::DescribeNetworkInterfacesOutput;
use aws_sdk_ec2::operation::describe_volumes::DescribeVolumesOutput;
use aws_sdk_ec2::types::{
    EbsInstanceBlockDevice, Filter, Instance, InstanceBlockDeviceMapping, InstanceState,
    InstanceStateName, Volume, VolumeType,
};
use aws_sdk_ec2::Client;
use aws_smithy_mocks::mock;
use common::moto::*;
use common::*;
use mcm_api::{Machine, MachineClass};
use mcm_driver::{Code, Driver, UpdateMachineRequest};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn update(m: &Machine, class: &MachineClass, last: &Value) -> UpdateMachineRequest {
    UpdateMachineRequest {
        machine: m.clone(),
        machine_class: class.clone(),
        secret: secret(),
        last_applied_provider_spec: last.clone(),
    }
}

async fn tags_of(env: &Env, id: &str) -> BTreeMap<String, String> {
    let out = env
        .client
        .describe_tags()
        .filters(Filter::builder().name("resource-id").values(id).build())
        .send()
        .await
        .expect("DescribeTags");
    out.tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

async fn root_volume(env: &Env, instance: &str) -> Volume {
    let out = env
        .client
        .describe_volumes()
        .filters(
            Filter::builder()
                .name("attachment.instance-id")
                .values(instance)
                .build(),
        )
        .send()
        .await
        .expect("DescribeVolumes");
    out.volumes().first().cloned().expect("a root volume")
}

#[tokio::test]
async fn moto_tags_and_iops_converge_in_place_and_a_second_update_changes_nothing() {
    let Some(env) = Env::new().await else { return };
    let mut before = env.spec();
    before["tags"]["team"] = json!("a");
    before["tags"]["stale"] = json!("s");
    before["blockDevices"][0]["ebs"]["iops"] = json!(3000);
    let mut m = machine("hot");
    let created = env
        .driver
        .create_machine(&request(&m, &class("hot", before.clone()), &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let id = instance_id(&created.provider_id);

    let mut after = before.clone();
    after["tags"]["team"] = json!("b");
    if let Some(t) = after["tags"].as_object_mut() {
        t.remove("stale");
    }
    after["blockDevices"][0]["ebs"]["iops"] = json!(4000);
    after["blockDevices"][0]["ebs"]["throughput"] = json!(250);
    after["blockDevices"][0]["ebs"]["volumeSize"] = json!(30);
    let changes = env.driver.in_place_changes(&before, &after);
    assert!(changes.all_in_place(), "{changes:?}");

    let req = update(&m, &class("hot", after.clone()), &before);
    env.driver.update_machine(&req).await.expect("update");

    let tags = tags_of(&env, &id).await;
    assert_eq!(tags.get("team").map(String::as_str), Some("b"), "{tags:?}");
    assert!(
        !tags.contains_key("stale"),
        "removed from the class: {tags:?}"
    );
    assert_eq!(
        tags.get("Name").map(String::as_str),
        m.metadata.name.as_deref()
    );
    assert!(
        tags.contains_key(&env.cluster),
        "cluster tag kept: {tags:?}"
    );
    assert!(
        tags.contains_key("machine.sapcloud.io/uid"),
        "identity tag kept: {tags:?}"
    );
    let vol = root_volume(&env, &id).await;
    assert_eq!(vol.iops(), Some(4000));
    assert_eq!(vol.throughput(), Some(250));
    assert_eq!(vol.size(), Some(30));
    let vol_tags = tags_of(&env, vol.volume_id().unwrap()).await;
    assert_eq!(vol_tags.get("team").map(String::as_str), Some("b"));
    assert!(!vol_tags.contains_key("stale"));
    assert_eq!(
        env.instances_named(m.metadata.name.as_deref().unwrap())
            .await
            .iter()
            .filter_map(|i| i.instance_id())
            .collect::<Vec<_>>(),
        vec![id.as_str()],
        "the same instance, no other"
    );

    let calls = env.driver.api_calls();
    env.driver
        .update_machine(&req)
        .await
        .expect("second update");
    let again = env.driver.api_calls().since(&calls);
    assert_eq!(again.mutating(), 0, "a second run only looks: {again:?}");
    assert_eq!(root_volume(&env, &id).await.iops(), Some(4000));
}

#[tokio::test]
async fn moto_an_instance_type_change_needs_a_replacement_and_update_changes_nothing() {
    let Some(env) = Env::new().await else { return };
    let before = env.spec();
    let mut m = machine("hot-type");
    let created = env
        .driver
        .create_machine(&request(&m, &class("hot", before.clone()), &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let id = instance_id(&created.provider_id);
    let mut after = before.clone();
    after["machineType"] = json!("m5.xlarge");
    after["tags"]["team"] = json!("b");
    let changes = env.driver.in_place_changes(&before, &after);
    assert_eq!(changes.need_replacement, vec!["machineType"]);
    assert_eq!(changes.in_place, vec!["tags.team"]);

    let calls = env.driver.api_calls();
    let e = env
        .driver
        .update_machine(&update(&m, &class("hot", after), &before))
        .await
        .expect_err("refused");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    assert!(e.message.contains("machineType"), "{e}");
    assert_eq!(env.driver.api_calls().since(&calls).total(), 0);
    assert!(!tags_of(&env, &id).await.contains_key("team"));
}

#[tokio::test]
async fn mock_an_iops_value_ec2_rejects_is_invalid_argument_with_its_message_moto_cannot() {
    let instance = Instance::builder()
        .instance_id("i-1")
        .state(
            InstanceState::builder()
                .name(InstanceStateName::Running)
                .build(),
        )
        .root_device_name("/dev/xvda")
        .block_device_mappings(
            InstanceBlockDeviceMapping::builder()
                .device_name("/dev/xvda")
                .ebs(EbsInstanceBlockDevice::builder().volume_id("vol-1").build())
                .build(),
        )
        .build();
    let volumes = mock!(Client::describe_volumes).then_output(|| {
        DescribeVolumesOutput::builder()
            .volumes(
                Volume::builder()
                    .volume_id("vol-1")
                    .size(20)
                    .volume_type(VolumeType::Gp3)
                    .iops(3000)
                    .build(),
            )
            .build()
    });
    let enis = mock!(Client::describe_network_interfaces)
        .then_output(|| DescribeNetworkInterfacesOutput::builder().build());
    let tags = mock!(Client::create_tags)
        .then_output(|| aws_sdk_ec2::operation::create_tags::CreateTagsOutput::builder().build());
    let message = "The parameter iops must be between 3000 and 16000";
    let modify = mock!(Client::modify_volume)
        .sequence()
        .http_status(
            400,
            Some(common::mock::ec2_error_xml(
                "InvalidParameterValue",
                message,
            )),
        )
        .repeatedly()
        .build();
    let d = common::mock::driver(
        vec![
            common::mock::describe_rule(move || vec![instance.clone()]),
            volumes,
            enis,
            tags,
            modify,
        ],
        common::mock::fast_config(),
    );
    let last = common::mock::spec(json!({}));
    let mut want = last.clone();
    want["blockDevices"][0]["ebs"]["iops"] = json!(90000);
    let m = common::mock::machine_with_provider_id("i-1");
    let e = d
        .update_machine(&update(&m, &class("hot", want), &last))
        .await
        .expect_err("rejected");
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains(message), "{e}");
}
