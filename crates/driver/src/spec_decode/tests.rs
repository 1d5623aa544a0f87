//! Go's key matching over nested structs, lists and maps; which spelling
//! wins; what is reported.

use super::*;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
struct Spec {
    machine_type: String,
    #[serde(rename = "minCpuPlatform")]
    min_cpu_platform: String,
    can_ip_forward: bool,
    disks: Vec<Disk>,
    labels: BTreeMap<String, String>,
    scheduling: Option<Scheduling>,
    description: Option<String>,
    #[serde(rename = "ipv6accessType", alias = "ipv6AccessType")]
    ipv6_access_type: String,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
struct Disk {
    size_gb: i64,
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
struct Scheduling {
    preemptible: bool,
}

fn fields(w: &[KeyWarning]) -> Vec<&str> {
    w.iter().map(|w| w.field.as_str()).collect()
}

#[test]
fn keys_in_another_case_fill_their_fields_in_nested_structs_and_lists() {
    let d = decode::<Spec>(
        &json!({
            "MachineType": "n1",
            "minCPUPlatform": "Intel Skylake",
            "canIPForward": true,
            "disks": [{"sizeGB": 50}, {"SIZEGB": 20}],
            "Scheduling": {"PREEMPTIBLE": true},
            "DESCRIPTION": "d",
            "ipv6AccessType": "EXTERNAL"
        }),
        "providerSpec",
    )
    .expect("decodes");
    assert_eq!(d.value.machine_type, "n1");
    assert_eq!(d.value.min_cpu_platform, "Intel Skylake");
    assert!(d.value.can_ip_forward);
    assert_eq!(
        d.value.disks.iter().map(|d| d.size_gb).collect::<Vec<_>>(),
        [50, 20]
    );
    assert_eq!(d.value.scheduling, Some(Scheduling { preemptible: true }));
    assert_eq!(d.value.description.as_deref(), Some("d"));
    assert_eq!(d.value.ipv6_access_type, "EXTERNAL", "an alias is exact");
    let mut f = fields(&d.warnings);
    f.sort();
    assert_eq!(
        f,
        [
            "providerSpec.DESCRIPTION",
            "providerSpec.MachineType",
            "providerSpec.Scheduling",
            "providerSpec.canIPForward",
            "providerSpec.disks[0].sizeGB",
            "providerSpec.disks[1].SIZEGB",
            "providerSpec.minCPUPlatform",
            "providerSpec.scheduling.PREEMPTIBLE",
        ]
    );
    let w = d
        .warnings
        .iter()
        .find(|w| w.field == "providerSpec.disks[0].sizeGB")
        .expect("warned");
    assert_eq!(
        w.to_string(),
        "providerSpec.disks[0].sizeGB: read as sizeGb, as Go's encoding/json matches keys case-insensitively; write sizeGb, the canonical key"
    );
}

#[test]
fn map_keys_are_data_and_stay_as_written() {
    let d = decode::<Spec>(
        &json!({
            "labels": {"Name": "a", "name": "b", "MachineType": "c"},
            "disks": [{"Labels": {"Team": "x"}}]
        }),
        "providerSpec",
    )
    .expect("decodes");
    assert_eq!(
        d.value.labels,
        BTreeMap::from([
            ("MachineType".to_string(), "c".to_string()),
            ("Name".to_string(), "a".to_string()),
            ("name".to_string(), "b".to_string()),
        ])
    );
    assert_eq!(d.value.disks[0].labels["Team"], "x");
    assert_eq!(fields(&d.warnings), ["providerSpec.disks[0].Labels"]);
}

#[test]
fn unknown_keys_are_warnings_and_are_otherwise_ignored() {
    let d = decode::<Spec>(
        &json!({"machineTyp": "n1", "disks": [{"sizeGib": 1}]}),
        "providerSpec",
    )
    .expect("decodes");
    assert_eq!(
        d.value,
        Spec {
            disks: vec![Disk::default()],
            ..Spec::default()
        }
    );
    assert_eq!(
        d.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "providerSpec.disks[0].sizeGib: unknown field, ignored (the Go provider ignores it too): check its spelling",
            "providerSpec.machineTyp: unknown field, ignored (the Go provider ignores it too): check its spelling",
        ]
    );
}

#[test]
fn among_spellings_of_one_field_the_key_that_sorts_last_wins_as_in_go() {
    // The API server stores the keys sorted and Go decodes them in order, the
    // last one winning: "SIZEGB" < "sizeGB" < "sizeGb".
    let d = decode::<Disk>(&json!({"sizeGb": 1, "sizeGB": 2, "SIZEGB": 3}), "d").expect("decodes");
    assert_eq!(d.value.size_gb, 1, "the exact key sorts last here");
    assert_eq!(fields(&d.warnings), ["d.SIZEGB", "d.sizeGB"]);
    assert!(d.warnings[0]
        .message
        .starts_with("ignored: d.sizeGb spells the same field sizeGb and wins"));
    // "machineType" < "machinetype": the folded key sorts last and wins, as in Go.
    let d = decode::<Spec>(
        &json!({"machineType": "exact", "machinetype": "folded"}),
        "p",
    )
    .expect("decodes");
    assert_eq!(d.value.machine_type, "folded");
    assert_eq!(fields(&d.warnings), ["p.machineType", "p.machinetype"]);
    assert!(d.warnings[0].message.starts_with("ignored"));
    assert!(d.warnings[1].message.starts_with("read as machineType"));
}

#[test]
fn a_null_spelling_loses_to_a_value_as_go_leaves_the_field_alone() {
    // "Scheduling" < "scheduling": the null sorts last but is a no-op in Go.
    let d = decode::<Spec>(
        &json!({"Scheduling": {"preemptible": true}, "scheduling": null}),
        "p",
    )
    .expect("decodes");
    assert_eq!(d.value.scheduling, Some(Scheduling { preemptible: true }));
    assert_eq!(fields(&d.warnings), ["p.Scheduling", "p.scheduling"]);
    assert!(d.warnings[1].message.starts_with("ignored"));
}

#[test]
fn go_folds_the_kelvin_sign_and_the_long_s_onto_ascii() {
    let d =
        decode::<Spec>(&json!({"di\u{17F}k\u{17F}": [{"\u{17F}izeGb": 7}]}), "p").expect("decodes");
    assert_eq!(d.value.disks[0].size_gb, 7);
    assert_eq!(d.warnings.len(), 2);
    assert_eq!(fold("\u{212A}eyName"), "keyname");
}

#[test]
fn null_leaves_a_field_at_its_zero_value_as_in_go() {
    let d = decode::<Spec>(
        &json!({"machineType": null, "scheduling": null, "description": null, "disks": [{"sizeGb": null}]}),
        "p",
    )
    .expect("decodes");
    assert_eq!(
        d.value,
        Spec {
            disks: vec![Disk::default()],
            ..Spec::default()
        }
    );
    assert!(d.warnings.is_empty());
}

#[test]
fn an_option_field_is_none_when_absent_and_some_when_present() {
    let d = decode::<Spec>(&json!({}), "p").expect("decodes");
    assert_eq!(d.value.scheduling, None);
    assert_eq!(d.value.description, None);
    let d = decode::<Spec>(&json!({"scheduling": {}}), "p").expect("decodes");
    assert_eq!(d.value.scheduling, Some(Scheduling::default()));
}

#[test]
fn a_wrong_type_names_the_field_that_failed() {
    let e = decode::<Spec>(
        &json!({"MachineType": "n1", "disks": [{}, {"SizeGB": "fifty"}]}),
        "providerSpec",
    )
    .expect_err("a string is no size");
    assert_eq!(e.field, "providerSpec.disks[1].sizeGb");
    assert!(e.message.contains("invalid type: string \"fifty\""), "{e}");
    assert_eq!(
        fields(&e.warnings),
        ["providerSpec.MachineType", "providerSpec.disks[1].SizeGB"],
        "the warnings gathered before the failure"
    );
    let e = decode::<Spec>(&json!("text"), "providerSpec").expect_err("not an object");
    assert_eq!(e.field, "providerSpec");
}

#[test]
fn canonical_keys_rename_read_keys_drop_losers_and_keep_the_rest() {
    let (v, warnings) = canonical_keys::<Spec>(
        &json!({
            "MachineType": "n1",
            "disks": [{"SizeGB": 1, "Labels": {"A": "b"}}],
            "labels": {"Name": "x"},
            "DESCRIPTION": "loses", "description": "wins",
            "typo": 1
        }),
        "p",
    );
    assert_eq!(
        v,
        json!({
            "machineType": "n1",
            "disks": [{"sizeGb": 1, "labels": {"A": "b"}}],
            "labels": {"Name": "x"},
            "description": "wins",
            "typo": 1
        })
    );
    assert_eq!(warnings.len(), 5, "{warnings:#?}");
}

#[test]
fn secret_json_is_decoded_the_same_way() {
    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Key {
        project_id: String,
        #[serde(rename = "type")]
        kind: String,
    }
    let d = decode::<Key>(
        &json!({"Project_ID": "p", "type": "service_account"}),
        "secret.serviceAccountJSON",
    )
    .expect("decodes");
    assert_eq!(d.value.project_id, "p");
    assert_eq!(d.value.kind, "service_account");
    assert_eq!(
        fields(&d.warnings),
        ["secret.serviceAccountJSON.Project_ID"]
    );
}
