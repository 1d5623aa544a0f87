//! Decoding as the reference does (Go's case-insensitive keys, with
//! warnings), the reference's own sample (a Helm template) rendered, decoded
//! and run against the fake, and a class that no longer validates (a newer
//! disk category, a data disk without a name) still letting its machines be
//! found, listed and deleted (only creation is refused).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use base64::Engine as _;
use common::*;
use mcm_api::MachineClass;
use mcm_driver::{Code, Driver};
use serde_json::{json, Value};

#[tokio::test]
async fn an_invalid_class_still_lets_status_list_and_delete_work() {
    let (fake, d) = setup().await;
    let good = class("c", spec("shoot--inval"));
    let mut m = machine("inval");
    let created = d
        .create_machine(&request(&m, &good, &secret()))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let mut s = spec("shoot--inval");
    s["systemDisk"]["category"] = "cloud_of_the_future".into();
    s["dataDisks"][0]["name"] = "".into();
    let bad = class("c", s);
    let refused = d
        .create_machine(&request(&machine("inval"), &bad, &secret()))
        .await
        .expect_err("creation validates");
    assert_eq!(refused.code, Code::InvalidArgument, "{refused:?}");

    let req = request(&m, &bad, &secret());
    let status = d.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = d.list_machines(&list_request(&bad)).await.expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    d.delete_machine(&req).await.expect("delete");
    let err = d
        .get_machine_status(&req)
        .await
        .expect_err("the VM is gone");
    assert_eq!(err.code, Code::NotFound, "{err:?}");
    drop(fake);
}

#[test]
fn go_spellings_fill_their_fields_with_a_warning_each() {
    let mut v = spec("shoot--case");
    let obj = v.as_object_mut().expect("object");
    let disk = obj.remove("systemDisk").expect("systemDisk");
    obj.insert(
        "SystemDisk".into(),
        json!({"Category": disk["category"], "SIZE": 80}),
    );
    obj.insert("instanceTYPE".into(), obj["instanceType"].clone());
    obj.remove("instanceType");
    obj.insert("zoneId".into(), obj["zoneID"].clone());
    obj.remove("zoneID");
    let d = <mcm_provider_alicloud::spec::AlicloudProviderSpec as mcm_driver::provider_spec::ProviderSpec>::decode(&v).expect("decodes");
    assert_eq!(d.value.system_disk.as_ref().map(|s| s.size), Some(80));
    assert_eq!(d.value.instance_type, "ecs.g7.large");
    assert_eq!(d.value.zone_id, "eu-central-1a");
    assert!(d
        .value
        .tags
        .contains_key("kubernetes.io/cluster/shoot--case"));
    let fields: Vec<&str> = d.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "providerSpec.SystemDisk",
            "providerSpec.instanceTYPE",
            "providerSpec.systemDisk.Category",
            "providerSpec.systemDisk.SIZE",
            "providerSpec.zoneId",
        ]
    );
}

/// The values the sample template is rendered with (the fake's world).
const VALUES: &[(&str, &str)] = &[
    ("$machineClass.name", "test-mc"),
    ("$.Release.Namespace", "default"),
    ("$machineClass.imageID", "m-gw8fakeimage"),
    ("$machineClass.instanceType", "ecs.g7.large"),
    ("$machineClass.region", REGION),
    ("$machineClass.zoneID", "eu-central-1a"),
    ("$machineClass.securityGroupID", "sg-gw8fake"),
    ("$machineClass.vSwitchID", "vsw-gw8fake"),
    ("$machineClass.systemDisk.category", "cloud_essd"),
    ("$machineClass.systemDisk.size", "50"),
    ("$machineClass.instanceChargeType", "PostPaid"),
    ("$machineClass.internetChargeType", "PayByTraffic"),
    ("$machineClass.internetMaxBandwidthIn", "10"),
    ("$machineClass.spotStrategy", "NoSpot"),
    ("$machineClass.keyPairName", "shoot--demo-ssh"),
    ("$machineClass.secret.userData", USER_DATA),
    (
        "$machineClass.secret.accessKeyID",
        mcm_fake_alicloud::ACCESS_KEY_ID,
    ),
    (
        "$machineClass.secret.accessKeySecret",
        mcm_fake_alicloud::ACCESS_KEY_SECRET,
    ),
];

const TAGS: &[(&str, &str)] = &[
    ("kubernetes.io/cluster/shoot--ref", "1"),
    ("kubernetes.io/role/node", "1"),
];

/// Renders the sample Helm template as Helm would with [`VALUES`], no
/// `dataDisks` and no `labels` (their `if` blocks fall away), and [`TAGS`].
/// `toYaml … | indent 4` after two spaces would give the first entry six
/// spaces and the rest four, which is not YAML (a defect of the sample):
/// here every entry gets the template line's own two.
fn render(template: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in template.lines() {
        if line.contains("{{- if") {
            skipping = true;
            continue;
        }
        if line.contains("{{- end") {
            skipping = false;
            continue;
        }
        if skipping {
            continue;
        }
        if line.contains("toYaml $machineClass.tags") {
            let indent = &line[..line.len() - line.trim_start().len()];
            for (k, v) in TAGS {
                out.push_str(&format!("{indent}{k}: \"{v}\"\n"));
            }
            continue;
        }
        let mut rendered = String::new();
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            let Some(len) = rest[start..].find("}}") else {
                break;
            };
            rendered.push_str(&rest[..start]);
            let expr = rest[start + 2..start + len].trim();
            let (name, b64) = match expr.split_once('|') {
                Some((n, f)) => (n.trim(), f.trim() == "b64enc"),
                None => (expr, false),
            };
            let value = VALUES
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
                .unwrap_or_else(|| panic!("no value for {name}"));
            if b64 {
                rendered.push_str(&base64::engine::general_purpose::STANDARD.encode(value));
            } else {
                rendered.push_str(value);
            }
            rest = &rest[start + len + 2..];
        }
        rendered.push_str(rest);
        out.push_str(&rendered);
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn the_reference_samples_decode_and_drive_a_machine_through_the_fake() {
    let doc: Value =
        serde_yaml::from_str(&render(include_str!("data/reference/machine-class.yaml")))
            .expect("the rendered sample is YAML");
    let class: MachineClass = serde_json::from_value(doc.clone()).expect("a MachineClass");
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_yaml::from_str(&render(include_str!("data/reference/secret.yaml")))
            .expect("the rendered sample is a Secret");
    let d = <mcm_provider_alicloud::spec::AlicloudProviderSpec as mcm_driver::provider_spec::ProviderSpec>::decode(&class.provider_spec).expect("decodes");
    assert_eq!(d.warnings, [], "the sample is written canonically");
    assert_eq!(d.value.instance_type, "ecs.g7.large");
    // The sample indents instanceChargeType … tags at the MachineClass's
    // level, outside providerSpec: the class has no tags, which the
    // reference's validation refuses as well.
    let moved = [
        "instanceChargeType",
        "internetChargeType",
        "internetMaxBandwidthIn",
        "spotStrategy",
        "keyPairName",
        "tags",
    ];
    for k in moved {
        assert!(doc.get(k).is_some(), "{k} sits outside providerSpec");
    }
    let (_, driver) = setup().await;
    let check = driver.check_class(&class, &secret);
    assert!(!check.errors.is_empty());
    assert!(
        check.errors.iter().all(|f| f.field.contains("tags")),
        "only the missing tags: {check:?}"
    );

    // With those keys where they belong, the class drives a machine.
    let mut spec = class.provider_spec.clone();
    for k in moved {
        spec[k] = doc[k].clone();
    }
    let run_class = common::class("test-mc", spec);
    assert_eq!(driver.check_class(&run_class, &secret).errors, []);
    let (fake, d) = setup().await;
    let mut m = machine("test-mc");
    let created = d
        .create_machine(&request(&m, &run_class, &secret))
        .await
        .expect("create");
    m.spec.provider_id = created.provider_id.clone();
    let req = request(&m, &run_class, &secret);
    let status = d.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = d
        .list_machines(&mcm_driver::ListMachinesRequest {
            machine_class: run_class.clone(),
            secret: secret.clone(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    d.delete_machine(&req).await.expect("delete");
    let err = d.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(err.code, Code::NotFound, "{err:?}");
    drop(fake);
}
