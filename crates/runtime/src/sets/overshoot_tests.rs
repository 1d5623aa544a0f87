use super::wakes_the_pass;
use mcm_api::constants as c;
use mcm_api::{MachineSet, MachineSetStatus};
use std::collections::BTreeMap;

fn set() -> MachineSet {
    let mut s = MachineSet::new("s1", Default::default());
    s.spec.replicas = 2;
    s
}

#[test]
fn an_unfreeze_annotation_a_freeze_label_or_new_replicas_wake_the_overshoot_pass() {
    let before = wakes_the_pass(&set());
    let mut annotated = set();
    annotated.metadata.annotations = Some(BTreeMap::from([(
        c::UNFREEZE_ANNOTATION.to_string(),
        "True".to_string(),
    )]));
    assert_ne!(wakes_the_pass(&annotated), before);
    let mut labelled = set();
    labelled.metadata.labels = Some(BTreeMap::from([(
        c::FREEZE_LABEL.to_string(),
        c::FREEZE_LABEL_VALUE.to_string(),
    )]));
    assert_ne!(wakes_the_pass(&labelled), before);
    let mut scaled = set();
    scaled.spec.replicas = 3;
    assert_ne!(wakes_the_pass(&scaled), before);
}

#[test]
fn a_status_write_of_a_set_does_not_wake_the_overshoot_pass() {
    let before = wakes_the_pass(&set());
    let mut written = set();
    written.status = Some(MachineSetStatus {
        replicas: 2,
        observed_generation: 7,
        ..MachineSetStatus::default()
    });
    written.metadata.resource_version = Some("42".into());
    assert_eq!(wakes_the_pass(&written), before);
}
