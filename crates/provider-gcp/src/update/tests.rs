use super::*;
use google_cloud_compute_v1::model::{AttachedDisk, Metadata, Tags};
use serde_json::json;

fn spec() -> Value {
    json!({
        "machineType": "n1-standard-2",
        "zone": "europe-west1-b",
        "region": "europe-west1",
        "labels": {"team": "a", "old": "o"},
        "tags": ["kubernetes-io-cluster-c", "kubernetes-io-role-node", "web"],
        "metadata": [{"key": "ash", "value": "1"}],
        "disks": [
            {"boot": true, "sizeGb": 50, "type": "pd-ssd", "image": "projects/p/global/images/i"},
            {"sizeGb": 375, "type": "SCRATCH", "interface": "NVME"}
        ]
    })
}

#[test]
fn labels_tags_metadata_and_a_larger_disk_change_in_place() {
    let a = spec();
    let mut b = spec();
    b["labels"] = json!({"team": "b", "cost": "x"});
    b["tags"] = json!(["kubernetes-io-cluster-c", "kubernetes-io-role-node", "db"]);
    b["metadata"] = json!([{"key": "ash", "value": "2"}, {"key": "new", "value": "n"}]);
    b["disks"][0]["sizeGb"] = json!(80);
    let c = in_place_changes(&a, &b);
    assert_eq!(
        c.in_place,
        vec![
            "disks[0].sizeGb",
            "labels.cost",
            "labels.old",
            "labels.team",
            "metadata",
            "tags"
        ]
    );
    assert!(c.need_replacement.is_empty(), "{c:?}");
    assert!(c.all_in_place());
}

#[test]
fn no_change_is_empty() {
    assert!(in_place_changes(&spec(), &spec()).is_empty());
}

#[test]
fn machine_type_image_and_membership_tags_need_a_new_instance() {
    let a = spec();
    let mut b = spec();
    b["machineType"] = json!("n1-standard-4");
    b["tags"] = json!([
        "kubernetes-io-cluster-other",
        "kubernetes-io-role-node",
        "web"
    ]);
    b["labels"]["team"] = json!("b");
    let c = in_place_changes(&a, &b);
    assert_eq!(c.in_place, vec!["labels.team"]);
    assert_eq!(c.need_replacement, vec!["machineType", "tags"]);

    let mut image = spec();
    image["disks"][0]["image"] = json!("projects/p/global/images/next");
    assert_eq!(in_place_changes(&a, &image).need_replacement, vec!["disks"]);
}

#[test]
fn a_smaller_disk_a_scratch_size_or_a_new_disk_needs_a_new_instance() {
    let a = spec();
    for (disk, size) in [(0, 40), (1, 750)] {
        let mut b = spec();
        b["disks"][disk]["sizeGb"] = json!(size);
        assert_eq!(
            in_place_changes(&a, &b).need_replacement,
            vec!["disks"],
            "disk {disk} to {size} GB"
        );
    }
    let mut more = spec();
    more["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"sizeGb": 10, "type": "pd-standard"}));
    assert_eq!(in_place_changes(&a, &more).need_replacement, vec!["disks"]);
}

#[test]
fn user_data_and_uid_metadata_items_need_a_new_instance() {
    let a = spec();
    for key in RESERVED_METADATA_KEYS {
        let mut b = spec();
        b["metadata"] = json!([{"key": "ash", "value": "1"}, {"key": key, "value": "x"}]);
        assert_eq!(
            in_place_changes(&a, &b).need_replacement,
            vec!["metadata"],
            "{key}"
        );
    }
}

#[test]
fn a_spec_that_does_not_decode_needs_a_replacement_for_every_change() {
    let mut b = spec();
    b["labels"] = json!("not a map");
    let c = in_place_changes(&spec(), &b);
    assert_eq!(c.need_replacement, vec!["labels"]);
    assert!(c.in_place.is_empty());
}

fn decoded(v: &Value) -> GcpProviderSpec {
    GcpProviderSpec::from_json(v).unwrap_or_default()
}

/// The instance the driver made from `spec()`, with identity labels, the
/// user data and UID items, and things others added.
fn instance() -> Instance {
    Instance::new()
        .set_labels([
            ("team", "a"),
            ("old", "o"),
            ("foreign", "f"),
            (TagStyle::Label.uid_key(), "u"),
        ])
        .set_tags(
            Tags::new()
                .set_items([
                    "kubernetes-io-cluster-c",
                    "kubernetes-io-role-node",
                    "web",
                    "theirs",
                ])
                .set_fingerprint(bytes_of("dGFncw==")),
        )
        .set_metadata(Metadata::new().set_items(metadata_items(&[
            ("user-data".into(), Some("#cloud-config".into())),
            ("ash".into(), Some("1".into())),
            ("mcm-machine-uid".into(), Some("u".into())),
        ])))
        .set_disks([
            AttachedDisk::new()
                .set_index(0)
                .set_disk_size_gb(50)
                .set_source("https://www.googleapis.com/compute/v1/projects/p/zones/z/disks/m-1"),
            AttachedDisk::new().set_index(1).set_disk_size_gb(375),
        ])
}

fn bytes_of(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

#[test]
fn the_plan_sets_the_class_values_and_removes_only_what_the_class_dropped() {
    let last = decoded(&spec());
    let mut want = spec();
    want["labels"] = json!({"team": "b"});
    want["tags"] = json!(["kubernetes-io-cluster-c", "kubernetes-io-role-node", "db"]);
    want["metadata"] = json!([{"key": "new", "value": "n"}]);
    want["disks"][0]["sizeGb"] = json!(80);
    let plan = update_plan(&decoded(&want), &last, &instance()).expect("plan");
    assert_eq!(
        plan.labels,
        Some(BTreeMap::from([
            ("foreign".to_string(), "f".to_string()),
            (TagStyle::Label.uid_key().to_string(), "u".to_string()),
            ("team".to_string(), "b".to_string()),
        ]))
    );
    assert_eq!(
        plan.tags,
        Some(vec![
            "kubernetes-io-cluster-c".to_string(),
            "kubernetes-io-role-node".to_string(),
            "theirs".to_string(),
            "db".to_string(),
        ])
    );
    assert_eq!(
        plan.metadata,
        Some(vec![
            ("user-data".to_string(), Some("#cloud-config".to_string())),
            ("mcm-machine-uid".to_string(), Some("u".to_string())),
            ("new".to_string(), Some("n".to_string())),
        ])
    );
    assert_eq!(plan.resize, vec![("m-1".to_string(), 80)]);
}

#[test]
fn an_instance_that_matches_has_an_empty_plan() {
    let plan = update_plan(&decoded(&spec()), &decoded(&spec()), &instance()).expect("plan");
    assert!(plan.is_empty(), "{plan:?}");
}

#[test]
fn a_disk_larger_than_the_class_asks_is_refused() {
    let mut want = spec();
    want["disks"][0]["sizeGb"] = json!(30);
    let e = update_plan(&decoded(&want), &decoded(&spec()), &instance()).expect_err("refused");
    assert!(e.contains("smaller disk needs a new instance"), "{e}");
}

#[test]
fn a_rejected_value_is_invalid_argument_and_a_stale_fingerprint_aborted() {
    use crate::errors::GceError;
    let api = |status: u16, reason: &str| GceError::Api {
        method: "instances.setLabels",
        status,
        reason: Some(reason.into()),
        message: "Compute's own words".into(),
    };
    let s = update_status("Update machine \"m\"", &api(400, "invalid"));
    assert_eq!(s.code, mcm_driver::Code::InvalidArgument);
    assert!(s.message.contains("Compute's own words"), "{s}");
    assert_eq!(
        update_status("u", &api(412, "conditionNotMet")).code,
        mcm_driver::Code::Aborted
    );
    let op = GceError::Operation {
        method: "disks.resize",
        operation: "operation-1".into(),
        code: "INTERNAL_ERROR".into(),
        message: "m".into(),
    };
    assert_eq!(update_status("u", &op).code, mcm_driver::Code::Internal);
}
