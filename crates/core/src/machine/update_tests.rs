//! The hot-update step machine: one test per decision of [`UpdateFlow::next`].

use super::*;
use crate::machine::tests::{t0, view};
use serde_json::json;

fn old_spec() -> Value {
    json!({"image": "img-1", "instanceType": "small", "tags": {"team": "a"}})
}

fn new_tags() -> Value {
    json!({"image": "img-1", "instanceType": "small", "tags": {"team": "b"}})
}

fn new_image() -> Value {
    json!({"image": "img-2", "instanceType": "small", "tags": {"team": "a"}})
}

/// A Running machine with a VM.
fn running() -> MachineView {
    MachineView {
        provider_id: "local:///z/i-1".into(),
        ..view(Phase::Running)
    }
}

/// The inputs with `last` recorded, the class at `class`, and the changes
/// classified as a driver that changes tags in place would.
fn input(last: Option<&Value>, class: &Value) -> UpdateInput {
    let last_applied = last.map(|s| AppliedSpec::of("c1", s));
    let class_rec = AppliedSpec::of("c1", class);
    let changes = last.map(|a| {
        let mut c = InPlaceChanges::default();
        for f in changed_fields(a, class) {
            if f.starts_with("tags") {
                c.in_place.push(f);
            } else {
                c.need_replacement.push(f);
            }
        }
        c
    });
    UpdateInput {
        last_applied,
        class: class_rec,
        changes,
        last_operation_at: None,
        retry_wait: Duration::from_secs(5),
    }
}

fn start(m: &MachineView, i: &UpdateInput) -> UpdateStep {
    UpdateFlow::new().next(m, i, UpdateOutcome::Start, t0())
}

#[test]
fn the_record_hash_is_the_same_for_the_same_spec_whatever_the_key_order() {
    let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":3}}"#).expect("json");
    let b: Value = serde_json::from_str(r#"{"a":{"x":3,"y":2},"b":1}"#).expect("json");
    assert_eq!(
        AppliedSpec::of("c1", &a).hash,
        AppliedSpec::of("c1", &b).hash
    );
    assert_eq!(canonical_json(&a), r#"{"a":{"x":3,"y":2},"b":1}"#);
    assert!(AppliedSpec::of("c1", &a).hash.starts_with("sha256:"));
    assert_eq!(AppliedSpec::of("c1", &a).hash.len(), 7 + 64);
}

#[test]
fn a_different_spec_has_a_different_hash() {
    assert_ne!(
        AppliedSpec::of("c1", &old_spec()).hash,
        AppliedSpec::of("c1", &new_tags()).hash
    );
}

#[test]
fn a_spec_above_the_size_bound_is_recorded_by_its_hash_only() {
    let big = json!({"blob": "x".repeat(c::LAST_APPLIED_PROVIDER_SPEC_MAX_BYTES)});
    let rec = AppliedSpec::of("c1", &big);
    assert_eq!(rec.spec, None);
    let ann = rec.annotations();
    assert_eq!(
        ann[c::LAST_APPLIED_PROVIDER_SPEC_ANNOTATION],
        None,
        "the stale spec is removed"
    );
    assert_eq!(
        ann[c::LAST_APPLIED_PROVIDER_SPEC_HASH_ANNOTATION].as_deref(),
        Some(rec.hash.as_str())
    );
}

#[test]
fn the_record_round_trips_through_the_annotations() {
    let rec = AppliedSpec::of("c1", &old_spec());
    let ann: BTreeMap<String, String> = rec
        .annotations()
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v?)))
        .collect();
    assert_eq!(AppliedSpec::from_annotations(&ann), Some(rec));
}

#[test]
fn a_machine_without_the_hash_annotation_has_no_record() {
    let ann = BTreeMap::from([(
        c::LAST_APPLIED_PROVIDER_SPEC_ANNOTATION.to_string(),
        "{}".to_string(),
    )]);
    assert_eq!(AppliedSpec::from_annotations(&ann), None);
}

#[test]
fn an_unreadable_spec_annotation_leaves_a_record_with_the_hash_only() {
    let ann = BTreeMap::from([
        (
            c::LAST_APPLIED_PROVIDER_SPEC_ANNOTATION.to_string(),
            "{not json".to_string(),
        ),
        (
            c::LAST_APPLIED_PROVIDER_SPEC_HASH_ANNOTATION.to_string(),
            "sha256:00".to_string(),
        ),
    ]);
    let rec = AppliedSpec::from_annotations(&ann).expect("a record");
    assert_eq!(rec.spec, None);
}

#[test]
fn a_machine_without_a_record_is_adopted_from_its_class_without_a_driver_call() {
    let i = input(None, &new_tags());
    assert_eq!(
        start(&running(), &i),
        UpdateStep::Adopt(AppliedSpec::of("c1", &new_tags()))
    );
}

#[test]
fn a_machine_moved_to_another_class_adopts_it_instead_of_reporting_its_changes() {
    let mut i = input(Some(&old_spec()), &new_image());
    i.class.class = "c2".into();
    assert!(
        matches!(start(&running(), &i), UpdateStep::Adopt(ref r) if r.class == "c2"),
        "the rollout that moved it owns the VM's state"
    );
}

#[test]
fn a_record_without_a_class_name_is_compared_with_the_current_class() {
    let mut i = input(Some(&old_spec()), &new_image());
    if let Some(l) = i.last_applied.as_mut() {
        l.class = String::new();
    }
    assert!(matches!(
        start(&running(), &i),
        UpdateStep::ReportNeedsReplacement { .. }
    ));
}

#[test]
fn adoption_ends_the_flow() {
    let i = input(None, &new_tags());
    let step = UpdateFlow::new().next(&running(), &i, UpdateOutcome::Adopted, t0());
    assert_eq!(step, UpdateStep::Done);
}

#[test]
fn a_machine_whose_record_matches_its_class_needs_nothing() {
    let i = input(Some(&old_spec()), &old_spec());
    assert_eq!(start(&running(), &i), UpdateStep::Nothing);
}

#[test]
fn only_running_machines_are_updated() {
    let i = input(Some(&old_spec()), &new_tags());
    for phase in [
        Phase::Pending,
        Phase::Unknown,
        Phase::CrashLoopBackOff,
        Phase::Failed,
        Phase::Terminating,
        Phase::Empty,
    ] {
        let m = MachineView {
            phase: phase.clone(),
            ..running()
        };
        assert_eq!(start(&m, &i), UpdateStep::Nothing, "{phase:?}");
    }
}

#[test]
fn a_machine_being_deleted_is_never_updated_so_an_update_cannot_hold_up_its_deletion() {
    let m = MachineView {
        deleting_since: Some(t0()),
        last_operation: Some(("Updating".into(), OpState::Processing, OpType::Update)),
        ..running()
    };
    assert_eq!(
        start(&m, &input(Some(&old_spec()), &new_tags())),
        UpdateStep::Nothing
    );
}

#[test]
fn a_machine_mid_creation_without_a_vm_is_not_updated_nor_adopted() {
    let m = MachineView {
        provider_id: String::new(),
        ..running()
    };
    assert_eq!(start(&m, &input(None, &new_tags())), UpdateStep::Nothing);
}

#[test]
fn an_in_place_change_is_marked_processing_before_the_call() {
    let step = start(&running(), &input(Some(&old_spec()), &new_tags()));
    let UpdateStep::MarkProcessing(t) = step else {
        panic!("expected MarkProcessing, got {step:?}");
    };
    assert_eq!(t.phase, None, "the machine stays Running");
    assert_eq!(t.operation.kind, OpType::Update);
    assert_eq!(t.operation.state, OpState::Processing);
    assert!(t.operation.description.contains("tags.team"), "{t:?}");
}

#[test]
fn after_marking_the_flow_calls_update_with_the_fields() {
    let i = input(Some(&old_spec()), &new_tags());
    let mut flow = UpdateFlow::new();
    let _ = flow.next(&running(), &i, UpdateOutcome::Start, t0());
    let step = flow.next(&running(), &i, UpdateOutcome::Marked, t0());
    assert_eq!(
        step,
        UpdateStep::CallUpdate {
            fields: vec!["tags.team".into()]
        }
    );
}

#[test]
fn a_successful_update_records_the_class_spec_and_a_successful_operation() {
    let i = input(Some(&old_spec()), &new_tags());
    let mut flow = UpdateFlow::new();
    let _ = flow.next(&running(), &i, UpdateOutcome::Start, t0());
    let _ = flow.next(&running(), &i, UpdateOutcome::Marked, t0());
    let step = flow.next(
        &running(),
        &i,
        UpdateOutcome::Updated(Ok(UpdateMachineResponse::default())),
        t0(),
    );
    let UpdateStep::RecordApplied {
        record,
        transition: Some(t),
        last_known_state,
        ..
    } = step
    else {
        panic!("expected RecordApplied with an operation, got {step:?}");
    };
    assert_eq!(record, AppliedSpec::of("c1", &new_tags()));
    assert_eq!(
        (t.operation.kind, t.operation.state, t.phase),
        (OpType::Update, OpState::Successful, None)
    );
    assert_eq!(last_known_state, None, "an empty state is not written");
}

#[test]
fn the_drivers_last_known_state_is_recorded_with_the_update() {
    let i = input(Some(&old_spec()), &new_tags());
    let step = UpdateFlow::new().next(
        &running(),
        &i,
        UpdateOutcome::Updated(Ok(UpdateMachineResponse {
            last_known_state: "s1".into(),
        })),
        t0(),
    );
    assert!(
        matches!(step, UpdateStep::RecordApplied { last_known_state: Some(ref s), .. } if s == "s1")
    );
}

#[test]
fn a_failed_update_is_recorded_with_the_clouds_message_and_keeps_the_machine_running() {
    let i = input(Some(&old_spec()), &new_tags());
    let err = Status::new(Code::InvalidArgument, "iops 99999 is out of range");
    let step = UpdateFlow::new().next(
        &running(),
        &i,
        UpdateOutcome::Updated(Err(err.clone())),
        t0(),
    );
    let UpdateStep::Failed {
        transition,
        error,
        retry,
    } = step
    else {
        panic!("expected Failed, got {step:?}");
    };
    assert_eq!(transition.phase, None, "stays Running");
    assert_eq!(transition.operation.kind, OpType::Update);
    assert_eq!(transition.operation.state, OpState::Failed);
    assert!(transition
        .operation
        .description
        .contains("iops 99999 is out of range"));
    assert_eq!(
        transition.operation.error_code.as_deref(),
        Some("InvalidArgument")
    );
    assert_eq!(error, err);
    assert_eq!(retry, RetryClass::Normal);
}

#[test]
fn a_throttled_update_is_retried_as_throttled() {
    let i = input(Some(&old_spec()), &new_tags());
    let err = Status::new(Code::ResourceExhausted, "slow down");
    let step = UpdateFlow::new().next(&running(), &i, UpdateOutcome::Updated(Err(err)), t0());
    assert!(matches!(
        step,
        UpdateStep::Failed {
            retry: RetryClass::Throttled,
            ..
        }
    ));
}

#[test]
fn a_recorded_failure_ends_the_flow() {
    let i = input(Some(&old_spec()), &new_tags());
    let step = UpdateFlow::new().next(&running(), &i, UpdateOutcome::FailureRecorded, t0());
    assert_eq!(step, UpdateStep::Done);
}

fn failed_at(at: DateTime<Utc>) -> (MachineView, UpdateInput) {
    let m = MachineView {
        last_operation: Some((
            "Cloud provider message - boom".into(),
            OpState::Failed,
            OpType::Update,
        )),
        ..running()
    };
    let i = UpdateInput {
        last_operation_at: Some(at),
        retry_wait: Duration::from_secs(20),
        ..input(Some(&old_spec()), &new_tags())
    };
    (m, i)
}

#[test]
fn a_failed_update_is_not_retried_before_its_backoff_has_passed() {
    let (m, i) = failed_at(t0() - chrono::Duration::seconds(5));
    assert_eq!(start(&m, &i), UpdateStep::Wait(Duration::from_secs(15)));
}

#[test]
fn a_failed_update_is_retried_once_its_backoff_has_passed() {
    let (m, i) = failed_at(t0() - chrono::Duration::seconds(21));
    assert!(matches!(start(&m, &i), UpdateStep::MarkProcessing(_)));
}

#[test]
fn an_update_marked_processing_before_a_crash_calls_again_without_marking_again() {
    let m = MachineView {
        last_operation: Some(("Updating".into(), OpState::Processing, OpType::Update)),
        ..running()
    };
    let step = start(&m, &input(Some(&old_spec()), &new_tags()));
    assert!(matches!(step, UpdateStep::CallUpdate { .. }), "{step:?}");
}

#[test]
fn a_crash_between_the_call_and_the_record_reruns_the_call() {
    // The call succeeded but nothing was written: the machine still records
    // the old spec and Processing, so the flow calls again (idempotent driver).
    let m = MachineView {
        last_operation: Some(("Updating".into(), OpState::Processing, OpType::Update)),
        ..running()
    };
    let i = input(Some(&old_spec()), &new_tags());
    assert!(matches!(start(&m, &i), UpdateStep::CallUpdate { .. }));
}

#[test]
fn a_crash_after_the_record_but_before_the_success_finishes_the_operation_without_a_call() {
    let m = MachineView {
        last_operation: Some(("Updating".into(), OpState::Processing, OpType::Update)),
        ..running()
    };
    let i = input(Some(&new_tags()), &new_tags());
    let step = start(&m, &i);
    let UpdateStep::RecordApplied {
        transition: Some(t),
        ..
    } = step
    else {
        panic!("expected RecordApplied with the operation, got {step:?}");
    };
    assert_eq!(t.operation.state, OpState::Successful);
}

#[test]
fn a_change_that_needs_a_new_vm_is_reported_naming_the_field_and_nothing_else_happens() {
    let step = start(&running(), &input(Some(&old_spec()), &new_image()));
    let UpdateStep::ReportNeedsReplacement {
        fields,
        conditions,
        transition,
    } = step
    else {
        panic!("expected a report, got {step:?}");
    };
    assert_eq!(fields, vec!["image".to_string()]);
    assert_eq!(transition, None, "no operation: nothing was attempted");
    let cond = conditions
        .iter()
        .find(|x| x.type_ == c::HOT_UPDATE_CONDITION)
        .expect("the condition");
    assert_eq!(cond.status, "False");
    assert_eq!(cond.reason.as_deref(), Some(REASON_NEEDS_REPLACEMENT));
    assert!(cond.message.as_deref().is_some_and(|m| m.contains("image")));
}

#[test]
fn a_mix_of_in_place_and_replacement_changes_changes_nothing_on_the_vm() {
    let mixed = json!({"image": "img-2", "instanceType": "small", "tags": {"team": "b"}});
    let step = start(&running(), &input(Some(&old_spec()), &mixed));
    assert!(
        matches!(&step, UpdateStep::ReportNeedsReplacement { fields, .. } if fields == &["image".to_string()]),
        "{step:?}"
    );
}

#[test]
fn a_reported_replacement_is_not_reported_again() {
    let i = input(Some(&old_spec()), &new_image());
    let UpdateStep::ReportNeedsReplacement { conditions, .. } = start(&running(), &i) else {
        panic!("expected a report");
    };
    let reported = MachineView {
        conditions,
        ..running()
    };
    assert_eq!(start(&reported, &i), UpdateStep::Nothing);
}

#[test]
fn the_report_keeps_the_nodes_conditions() {
    let m = MachineView {
        conditions: vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }],
        ..running()
    };
    let UpdateStep::ReportNeedsReplacement { conditions, .. } =
        start(&m, &input(Some(&old_spec()), &new_image()))
    else {
        panic!("expected a report");
    };
    assert!(conditions.iter().any(|x| x.type_ == "Ready"));
    assert_eq!(conditions.len(), 2);
}

#[test]
fn a_class_reverted_to_the_recorded_spec_clears_the_replacement_condition() {
    let i = input(Some(&old_spec()), &new_image());
    let UpdateStep::ReportNeedsReplacement { conditions, .. } = start(&running(), &i) else {
        panic!("expected a report");
    };
    let reported = MachineView {
        conditions,
        ..running()
    };
    let back = input(Some(&old_spec()), &old_spec());
    let step = start(&reported, &back);
    let UpdateStep::RecordApplied {
        conditions: Some(cs),
        transition: None,
        ..
    } = step
    else {
        panic!("expected the condition cleared, got {step:?}");
    };
    let cond = cs
        .iter()
        .find(|x| x.type_ == c::HOT_UPDATE_CONDITION)
        .expect("condition");
    assert_eq!(cond.status, "True");
}

#[test]
fn a_record_without_the_spec_is_reported_as_needing_a_new_vm_for_the_whole_spec() {
    let mut i = input(Some(&old_spec()), &new_tags());
    if let Some(l) = i.last_applied.as_mut() {
        l.spec = None;
    }
    let step = start(&running(), &i);
    assert!(
        matches!(&step, UpdateStep::ReportNeedsReplacement { fields, .. } if fields == &[WHOLE_SPEC.to_string()]),
        "{step:?}"
    );
}

#[test]
fn without_the_drivers_answer_every_changed_field_needs_a_new_vm() {
    let i = UpdateInput {
        changes: None,
        ..input(Some(&old_spec()), &new_tags())
    };
    assert!(matches!(
        start(&running(), &i),
        UpdateStep::ReportNeedsReplacement { .. }
    ));
}

#[test]
fn a_driver_that_answers_unimplemented_gets_the_fields_reported_and_the_operation_closed() {
    let i = input(Some(&old_spec()), &new_tags());
    let mut flow = UpdateFlow::new();
    let _ = flow.next(&running(), &i, UpdateOutcome::Start, t0());
    let step = flow.next(
        &running(),
        &i,
        UpdateOutcome::Updated(Err(Status::unimplemented("no"))),
        t0(),
    );
    let UpdateStep::ReportNeedsReplacement {
        fields,
        transition: Some(t),
        ..
    } = step
    else {
        panic!("expected a report closing the operation, got {step:?}");
    };
    assert_eq!(fields, vec!["tags.team".to_string()]);
    assert_eq!(t.operation.state, OpState::Failed);
}

#[test]
fn an_update_left_processing_is_closed_when_the_class_now_needs_a_new_vm() {
    let m = MachineView {
        last_operation: Some(("Updating".into(), OpState::Processing, OpType::Update)),
        ..running()
    };
    let step = start(&m, &input(Some(&old_spec()), &new_image()));
    assert!(
        matches!(&step, UpdateStep::ReportNeedsReplacement { transition: Some(t), .. } if t.operation.state == OpState::Failed),
        "{step:?}"
    );
}

#[test]
fn different_hashes_without_a_changed_field_only_refresh_the_record() {
    let with_null =
        json!({"image": "img-1", "instanceType": "small", "tags": {"team": "a"}, "zone": null});
    let i = input(Some(&old_spec()), &with_null);
    let step = start(&running(), &i);
    assert!(
        matches!(&step, UpdateStep::RecordApplied { transition: None, record, .. } if record == &AppliedSpec::of("c1", &with_null)),
        "{step:?}"
    );
}

#[test]
fn the_health_check_keeps_the_hot_update_condition_when_it_copies_the_nodes() {
    let hot = NodeCondition {
        type_: c::HOT_UPDATE_CONDITION.into(),
        status: "False".into(),
        reason: Some(REASON_NEEDS_REPLACEMENT.into()),
        ..Default::default()
    };
    let ready = NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Default::default()
    };
    let m = MachineView {
        node: Some("n1".into()),
        conditions: vec![ready.clone(), hot.clone()],
        ..running()
    };
    let node = crate::machine::NodeView {
        conditions: vec![ready.clone()],
        critical_components_not_ready: false,
        startup_taint: None,
    };
    let d = crate::machine::health(&m, Some(&node), t0());
    assert_eq!(d.conditions, None, "the same Node conditions: no write");
    let not_ready = NodeCondition {
        status: "False".into(),
        ..ready
    };
    let node = crate::machine::NodeView {
        conditions: vec![not_ready],
        ..node
    };
    let d = crate::machine::health(&m, Some(&node), t0());
    let written = d.conditions.expect("the Node's new conditions");
    assert!(
        written.contains(&hot),
        "the hot-update condition is kept: {written:?}"
    );
}
