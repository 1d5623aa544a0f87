use super::*;
use chrono::TimeZone;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use mcm_api::{MachineOperationType as OpType, MachineState as OpState};

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0)
        .single()
        .unwrap_or_default()
}

/// Machine `name` in `phase`, created `created` seconds after the epoch of [`t`].
fn m(name: &str, phase: MachinePhase, created: i64) -> MachineView {
    MachineView::test(name, phase).created_at(t(created))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

fn names(v: &[&MachineView]) -> Vec<String> {
    v.iter().map(|m| m.name.clone()).collect()
}

fn input(desired: i32, machines: &[MachineView]) -> ReplicaInput<'_> {
    ReplicaInput {
        desired,
        frozen: false,
        scale_up_disabled: false,
        scaler_change_time: None,
        machines,
        now: t(1000),
    }
}

fn deleted(plan: &ReplicaPlan) -> Vec<(String, DeleteReason)> {
    match plan {
        ReplicaPlan::Delete(d) => d.iter().map(|d| (d.name.clone(), d.reason)).collect(),
        _ => Vec::new(),
    }
}

// --- selectors ---

#[test]
fn selector_match_labels_must_all_be_present() {
    let sel = LabelSelector {
        match_labels: Some([("a".into(), "1".into()), ("b".into(), "2".into())].into()),
        ..Default::default()
    };
    let full: BTreeMap<String, String> = [
        ("a".into(), "1".into()),
        ("b".into(), "2".into()),
        ("c".into(), "3".into()),
    ]
    .into();
    let partial: BTreeMap<String, String> = [("a".into(), "1".into())].into();
    assert_eq!(selector_matches(&sel, &full), Ok(true));
    assert_eq!(selector_matches(&sel, &partial), Ok(false));
}

#[test]
fn selector_match_expressions_follow_kubernetes_operators() {
    let req = |op: &str, vals: &[&str]| LabelSelectorRequirement {
        key: "k".into(),
        operator: op.into(),
        values: if vals.is_empty() {
            None
        } else {
            Some(vals.iter().map(|s| s.to_string()).collect())
        },
    };
    let sel = |r| LabelSelector {
        match_expressions: Some(vec![r]),
        ..Default::default()
    };
    let l: BTreeMap<String, String> = [("k".into(), "x".into())].into();
    let empty = BTreeMap::new();
    assert_eq!(selector_matches(&sel(req("In", &["x", "y"])), &l), Ok(true));
    assert_eq!(selector_matches(&sel(req("In", &["y"])), &l), Ok(false));
    assert_eq!(selector_matches(&sel(req("NotIn", &["y"])), &l), Ok(true));
    assert_eq!(
        selector_matches(&sel(req("NotIn", &["y"])), &empty),
        Ok(true)
    );
    assert_eq!(selector_matches(&sel(req("Exists", &[])), &l), Ok(true));
    assert_eq!(
        selector_matches(&sel(req("DoesNotExist", &[])), &l),
        Ok(false)
    );
    assert!(selector_matches(&sel(req("Bogus", &[])), &l).is_err());
    assert!(selector_matches(&sel(req("In", &[])), &l).is_err());
}

#[test]
fn selector_validation_finds_a_bad_requirement_behind_a_false_one() {
    let sel = LabelSelector {
        match_labels: Some([("a".into(), "1".into())].into()),
        match_expressions: Some(vec![
            LabelSelectorRequirement {
                key: "k".into(),
                operator: "Exists".into(),
                values: None,
            },
            LabelSelectorRequirement {
                key: "k".into(),
                operator: "Near".into(),
                values: None,
            },
        ]),
    };
    assert_eq!(selector_matches(&sel, &BTreeMap::new()), Ok(false));
    assert_eq!(
        validate_selector(&sel),
        Err(SelectorError::UnknownOperator("Near".into()))
    );
}

#[test]
fn empty_selector_is_recognised() {
    assert!(selector_is_empty(&LabelSelector::default()));
    assert!(selector_is_empty(&LabelSelector {
        match_labels: Some(BTreeMap::new()),
        match_expressions: Some(vec![]),
    }));
    assert!(!selector_is_empty(&LabelSelector {
        match_labels: Some([("a".into(), "b".into())].into()),
        ..Default::default()
    }));
}

// --- claiming ---

fn cref(uid: &str) -> ControllerRef {
    ControllerRef {
        kind: "MachineSet".into(),
        name: "ms".into(),
        uid: uid.into(),
    }
}

#[test]
fn claim_ignores_objects_controlled_by_another_owner() {
    let me = Claimer {
        uid: "u1",
        deleting: false,
    };
    assert_eq!(
        claim(me, Some(&cref("u2")), Selection::Selected, false),
        ClaimAction::Ignore
    );
}

#[test]
fn claim_keeps_own_matching_objects_even_while_the_owner_is_deleted() {
    let deleting = Claimer {
        uid: "u1",
        deleting: true,
    };
    assert_eq!(
        claim(deleting, Some(&cref("u1")), Selection::Selected, false),
        ClaimAction::Keep
    );
    assert!(ClaimAction::Keep.is_claimed());
}

#[test]
fn claim_releases_own_objects_that_no_longer_match_unless_owner_deleting() {
    let me = Claimer {
        uid: "u1",
        deleting: false,
    };
    assert_eq!(
        claim(me, Some(&cref("u1")), Selection::NotSelected, false),
        ClaimAction::Release
    );
    let deleting = Claimer {
        uid: "u1",
        deleting: true,
    };
    assert_eq!(
        claim(deleting, Some(&cref("u1")), Selection::NotSelected, false),
        ClaimAction::Ignore
    );
    assert!(!ClaimAction::Release.is_claimed());
}

#[test]
fn claim_adopts_matching_orphans_only_when_neither_side_is_deleting() {
    let me = Claimer {
        uid: "u1",
        deleting: false,
    };
    assert_eq!(
        claim(me, None, Selection::Selected, false),
        ClaimAction::Adopt
    );
    assert_eq!(
        claim(me, None, Selection::NotSelected, false),
        ClaimAction::Ignore
    );
    assert_eq!(
        claim(me, None, Selection::Selected, true),
        ClaimAction::Ignore
    );
    let deleting = Claimer {
        uid: "u1",
        deleting: true,
    };
    assert_eq!(
        claim(deleting, None, Selection::Selected, false),
        ClaimAction::Ignore
    );
}

#[test]
fn claim_keeps_own_objects_that_stopped_matching_only_on_a_controller_owned_label() {
    // Finding 1: the machine controller wrote `node: <real node>` over the
    // template's `node: pool-a`; the set must keep (and count) its machine,
    // not release it and create a replacement on every sync.
    let selector = LabelSelector {
        match_labels: Some(labels(&[("app", "a"), ("node", "pool-a")])),
        ..Default::default()
    };
    let written = labels(&[("app", "a"), ("node", "ip-10-0-0-1")]);
    assert_eq!(
        selection(&selector, &written),
        Selection::SelectedButForControllerLabels
    );
    for deleting in [false, true] {
        let me = Claimer {
            uid: "u1",
            deleting,
        };
        assert_eq!(
            claim(me, Some(&cref("u1")), selection(&selector, &written), false),
            ClaimAction::Keep
        );
    }
    // Not an orphan, though: adoption needs the selector to match outright.
    let me = Claimer {
        uid: "u1",
        deleting: false,
    };
    assert_eq!(
        claim(me, None, selection(&selector, &written), false),
        ClaimAction::Ignore
    );
    // A user label that no longer matches still releases.
    let relabelled = labels(&[("app", "b"), ("node", "pool-a")]);
    assert_eq!(selection(&selector, &relabelled), Selection::NotSelected);
    assert_eq!(
        claim(
            me,
            Some(&cref("u1")),
            selection(&selector, &relabelled),
            false
        ),
        ClaimAction::Release
    );
}

#[test]
fn a_deployment_keeps_its_set_whatever_its_selector_says_about_the_template_hash() {
    // `DoesNotExist` on machine-template-hash: every set the deployment
    // creates carries the hash label. Kept, not released and recreated.
    let selector = LabelSelector {
        match_labels: Some(labels(&[("app", "a")])),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "machine-template-hash".into(),
            operator: "DoesNotExist".into(),
            values: None,
        }]),
    };
    let set_labels = labels(&[("app", "a"), ("machine-template-hash", "123")]);
    let me = Claimer {
        uid: "u1",
        deleting: false,
    };
    assert_eq!(
        claim(
            me,
            Some(&cref("u1")),
            selection(&selector, &set_labels),
            false
        ),
        ClaimAction::Keep
    );
    for (key, op, values) in [
        (
            "machine-template-hash",
            "NotIn",
            Some(vec!["123".to_string()]),
        ),
        ("freeze", "DoesNotExist", None),
        (
            "node.machine.sapcloud.io/scale-up-disabled",
            "DoesNotExist",
            None,
        ),
        (
            "node.machine.sapcloud.io/update-result",
            "In",
            Some(vec!["x".to_string()]),
        ),
    ] {
        let selector = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values,
            }]),
        };
        let mut l = set_labels.clone();
        l.insert(key.into(), "True".into());
        l.insert("machine-template-hash".into(), "123".into());
        assert_eq!(
            selection(&selector, &l),
            Selection::SelectedButForControllerLabels,
            "{key} {op}"
        );
    }
}

#[test]
fn selection_of_a_matching_selector_is_selected() {
    let selector = LabelSelector {
        match_labels: Some(labels(&[("app", "a")])),
        ..Default::default()
    };
    assert_eq!(
        selection(&selector, &labels(&[("app", "a"), ("node", "n")])),
        Selection::Selected
    );
    assert_eq!(selection(&selector, &labels(&[])), Selection::NotSelected);
}

// --- deletion order ---

#[test]
fn deletion_order_priority_one_goes_first_and_default_is_three() {
    let a = m("a", MachinePhase::Running, 0).annotated(keys::MACHINE_PRIORITY, "1");
    let b = m("b", MachinePhase::Pending, 5); // default 3
    let c = m("c", MachinePhase::Failed, 9).annotated(keys::MACHINE_PRIORITY, "5");
    let bad = m("d", MachinePhase::Failed, 9).annotated(keys::MACHINE_PRIORITY, "x"); // = 3
    let all = [&c, &b, &a, &bad];
    let order = machines_to_delete(&all, 3, t(100));
    assert_eq!(names(&order), ["a", "d", "b"]);
}

#[test]
fn deletion_order_marked_for_deletion_time_before_phase() {
    let marked_late = m("late", MachinePhase::Running, 0)
        .annotated(keys::MARKED_FOR_DELETION_TIME, "2024-01-02T00:00:00Z");
    let marked_early = m("early", MachinePhase::Running, 0)
        .annotated(keys::MARKED_FOR_DELETION_TIME, "2024-01-01T00:00:00Z");
    let unmarked_failed = m("failed", MachinePhase::Failed, 0);
    let garbage = m("garbage", MachinePhase::Terminating, 0)
        .annotated(keys::MARKED_FOR_DELETION_TIME, "yesterday");
    let all = [&unmarked_failed, &marked_late, &garbage, &marked_early];
    let order = machines_to_delete(&all, 3, t(0));
    assert_eq!(names(&order), ["early", "late", "garbage"]);
}

#[test]
fn deletion_order_phase_rank_then_age() {
    let running_old = m("running-old", MachinePhase::Running, 0);
    let running_new = m("running-new", MachinePhase::Running, 10);
    let pending = m("pending", MachinePhase::Pending, 20);
    let unknown = m("unknown", MachinePhase::Unknown, 20);
    let crash = m("crash", MachinePhase::CrashLoopBackOff, 20);
    let failed = m("failed", MachinePhase::Failed, 20);
    let term = m("term", MachinePhase::Terminating, 20);
    let available = m("available", MachinePhase::Available, 20);
    let all = [
        &running_new,
        &running_old,
        &available,
        &pending,
        &unknown,
        &crash,
        &failed,
        &term,
    ];
    let order = machines_to_delete(&all, 7, t(100));
    assert_eq!(
        names(&order),
        [
            "term",
            "failed",
            "crash",
            "unknown",
            "pending",
            "available",
            "running-old"
        ]
    );
}

#[test]
fn phase_questions_treat_a_hand_built_other_like_its_well_known_value() {
    let running = MachinePhase::Other("Running".into());
    assert_eq!(
        running.deletion_rank(),
        MachinePhase::Running.deletion_rank()
    );
    assert!(running.is_available());
    assert!(!MachinePhase::Other("Failed".into()).is_active());
    let unknown = MachinePhase::Other("Hibernating".into());
    assert_eq!(unknown.deletion_rank(), 0);
    assert!(!unknown.is_available());
    assert!(unknown.is_active());
}

#[test]
fn deletion_order_machines_without_phase_rank_like_terminating() {
    let fresh = m("fresh", MachinePhase::Empty, 50);
    let failed = m("failed", MachinePhase::Failed, 0);
    let order = machines_to_delete(&[&failed, &fresh], 1, t(100));
    assert_eq!(names(&order), ["fresh"]);
}

#[test]
fn deletion_order_preserved_machines_go_last_auto_preserved_before_explicit() {
    let mut explicit =
        m("explicit", MachinePhase::Failed, 0).annotated(keys::MACHINE_PRIORITY, "1");
    explicit.preserve_expiry = Some(t(500));
    let mut auto =
        m("auto", MachinePhase::Failed, 0).annotated(keys::PRESERVE, keys::PRESERVE_AUTO);
    auto.preserve_expiry = Some(t(900));
    let mut expired = m("expired", MachinePhase::Running, 0);
    expired.preserve_expiry = Some(t(10)); // in the past: not preserved
    let running = m("running", MachinePhase::Running, 5);
    let all = [&explicit, &auto, &running, &expired];
    let order = machines_to_delete(&all, 3, t(100));
    assert_eq!(names(&order), ["expired", "running", "auto"]);
}

#[test]
fn deletion_order_among_preserved_earlier_expiry_first() {
    let mut a = m("a", MachinePhase::Failed, 0);
    a.preserve_expiry = Some(t(900));
    let mut b = m("b", MachinePhase::Failed, 0);
    b.preserve_expiry = Some(t(500));
    assert_eq!(deletion_order(&b, &a, t(100)), Ordering::Less);
}

// --- slow start ---

#[test]
fn slow_start_batches_double_and_sum_to_count() {
    assert_eq!(slow_start_batches(0, 1), Vec::<usize>::new());
    assert_eq!(slow_start_batches(1, 1), vec![1]);
    assert_eq!(slow_start_batches(6, 1), vec![1, 2, 3]);
    assert_eq!(slow_start_batches(7, 1), vec![1, 2, 4]);
    assert_eq!(slow_start_batches(100, 1), vec![1, 2, 4, 8, 16, 32, 37]);
    assert_eq!(slow_start_batches(5, 0), vec![1, 2, 2]);
}

// --- manage replicas ---

#[test]
fn missing_machines_are_created_in_slow_start_batches() {
    let machines = [m("a", MachinePhase::Running, 0)];
    let plan = manage_replicas(&input(6, &machines));
    assert_eq!(
        plan,
        ReplicaPlan::Create {
            count: 5,
            batches: vec![1, 2, 2]
        }
    );
}

#[test]
fn creation_is_capped_by_the_burst() {
    let plan = manage_replicas(&input(250, &[]));
    let ReplicaPlan::Create { count, batches } = plan else {
        panic!("expected Create")
    };
    assert_eq!(count, BURST_REPLICAS);
    assert_eq!(batches.iter().sum::<usize>(), BURST_REPLICAS);
}

#[test]
fn creation_waits_while_a_burst_of_machines_awaits_its_vm() {
    let waiting: Vec<MachineView> = (0..BURST_REPLICAS)
        .map(|i| m(&format!("w{i}"), MachinePhase::Pending, 0))
        .collect();
    assert_eq!(
        manage_replicas(&input(i32::MAX, &waiting)),
        ReplicaPlan::AwaitingVms {
            missing: i32::MAX as usize - BURST_REPLICAS,
            awaiting: BURST_REPLICAS
        }
    );
}

#[test]
fn creation_fills_only_the_room_left_by_machines_awaiting_their_vm() {
    let mut machines: Vec<MachineView> = (0..30)
        .map(|i| m(&format!("w{i}"), MachinePhase::CrashLoopBackOff, 0))
        .collect();
    // Machines whose VM exists (a providerID) or that failed do not wait.
    for i in 0..50 {
        let mut v = m(&format!("r{i}"), MachinePhase::Pending, 0);
        v.provider_id = format!("local:///vm-{i}");
        machines.push(v);
    }
    machines.push(m("f", MachinePhase::Failed, 0));
    let ReplicaPlan::Create { count, batches } = manage_replicas(&input(1000, &machines)) else {
        panic!("expected Create")
    };
    assert_eq!(count, BURST_REPLICAS - 30);
    assert_eq!(batches.iter().sum::<usize>(), BURST_REPLICAS - 30);
}

#[test]
fn frozen_set_creates_nothing_but_still_deletes() {
    let machines = [m("a", MachinePhase::Running, 0)];
    let mut i = input(3, &machines);
    i.frozen = true;
    assert_eq!(manage_replicas(&i), ReplicaPlan::Frozen { missing: 2 });
    let many = [
        m("a", MachinePhase::Running, 0),
        m("b", MachinePhase::Running, 1),
    ];
    let mut i = input(1, &many);
    i.frozen = true;
    assert_eq!(
        deleted(&manage_replicas(&i)),
        [("a".to_string(), DeleteReason::Surplus)]
    );
}

#[test]
fn scale_up_disabled_set_creates_nothing() {
    let mut i = input(2, &[]);
    i.scale_up_disabled = true;
    assert_eq!(
        manage_replicas(&i),
        ReplicaPlan::ScaleUpDisabled { missing: 2 }
    );
}

#[test]
fn terminating_machines_do_not_count_as_replicas() {
    let mut gone = m("gone", MachinePhase::Running, 0);
    gone.deleting_since = Some(t(500));
    let machines = [
        m("t", MachinePhase::Terminating, 0),
        gone,
        m("a", MachinePhase::Running, 0),
    ];
    assert_eq!(
        manage_replicas(&input(2, &machines)),
        ReplicaPlan::Create {
            count: 1,
            batches: vec![1]
        }
    );
}

#[test]
fn surplus_is_deleted_in_deletion_order() {
    let machines = [
        m("old-running", MachinePhase::Running, 0),
        m("new-running", MachinePhase::Running, 10),
        m("pending", MachinePhase::Pending, 5),
        m("prio1", MachinePhase::Running, 20).annotated(keys::MACHINE_PRIORITY, "1"),
    ];
    let plan = manage_replicas(&input(2, &machines));
    assert_eq!(
        deleted(&plan),
        [
            ("prio1".to_string(), DeleteReason::Surplus),
            ("pending".to_string(), DeleteReason::Surplus)
        ]
    );
}

#[test]
fn scale_to_zero_deletes_every_live_machine() {
    let machines = [
        m("a", MachinePhase::Running, 0),
        m("b", MachinePhase::Pending, 1),
        m("c", MachinePhase::Terminating, 1),
    ];
    let plan = manage_replicas(&input(0, &machines));
    let mut got: Vec<String> = deleted(&plan).into_iter().map(|d| d.0).collect();
    got.sort();
    assert_eq!(got, ["a", "b"]);
}

#[test]
fn in_place_updated_machines_are_never_surplus() {
    let mut moved = m("moved", MachinePhase::Running, 0);
    moved.labels.insert(
        keys::UPDATE_RESULT.into(),
        keys::UPDATE_RESULT_SUCCESSFUL.into(),
    );
    let machines = [moved, m("a", MachinePhase::Running, 5)];
    // 2 machines for 1 replica, but only one candidate: nothing to delete.
    assert_eq!(manage_replicas(&input(1, &machines)), ReplicaPlan::Steady);
}

#[test]
fn failed_machines_are_replaced_by_deleting_them() {
    let machines = [
        m("ok", MachinePhase::Running, 0),
        m("bad", MachinePhase::Failed, 0),
    ];
    let plan = manage_replicas(&input(2, &machines));
    assert_eq!(deleted(&plan), [("bad".to_string(), DeleteReason::Failed)]);
    // The next pass, with "bad" terminating, creates the replacement.
    let next = [
        m("ok", MachinePhase::Running, 0),
        m("bad", MachinePhase::Terminating, 0),
    ];
    assert!(matches!(
        manage_replicas(&input(2, &next)),
        ReplicaPlan::Create { count: 1, .. }
    ));
}

#[test]
fn failed_machine_is_not_deleted_while_creation_is_pending() {
    // The reference's early return on scale-up: creation first, deletion next pass.
    let machines = [m("bad", MachinePhase::Failed, 0)];
    assert!(matches!(
        manage_replicas(&input(2, &machines)),
        ReplicaPlan::Create { count: 1, .. }
    ));
}

#[test]
fn preserved_failed_machines_are_kept() {
    let mut preserved = m("preserved", MachinePhase::Failed, 0);
    preserved.preserve_expiry = Some(t(5000));
    let annotated = m("when-failed", MachinePhase::Failed, 0)
        .annotated(keys::PRESERVE, keys::PRESERVE_WHEN_FAILED);
    let auto = m("auto", MachinePhase::Failed, 0).annotated(keys::PRESERVE, keys::PRESERVE_AUTO);
    let machines = [preserved, annotated, auto];
    assert_eq!(manage_replicas(&input(3, &machines)), ReplicaPlan::Steady);
}

#[test]
fn failed_machine_with_expired_preservation_is_terminated() {
    let mut expired = m("x", MachinePhase::Failed, 0).annotated(keys::PRESERVE, keys::PRESERVE_NOW);
    expired.preserve_expiry = Some(t(10));
    assert!(failed_machine_should_be_terminated(&expired, t(1000)));
}

#[test]
fn node_preserve_annotation_wins_when_present_or_last_applied() {
    let mut mv = m("x", MachinePhase::Failed, 0).annotated(keys::PRESERVE, keys::PRESERVE_NOW);
    mv.node_preserve = Some(keys::PRESERVE_FALSE.into());
    assert!(failed_machine_should_be_terminated(&mv, t(0)));
    // Node says nothing and the machine never had a node value: machine wins.
    mv.node_preserve = Some(String::new());
    assert!(!failed_machine_should_be_terminated(&mv, t(0)));
    // Node says nothing but a node value was applied before: node (empty) wins.
    let mv = mv.annotated(keys::LAST_APPLIED_NODE_PRESERVE, keys::PRESERVE_NOW);
    assert!(failed_machine_should_be_terminated(&mv, t(0)));
    // Node unknown (no target cluster): machine value.
    let mut unknown = mv.clone();
    unknown.node_preserve = None;
    assert!(!failed_machine_should_be_terminated(&unknown, t(0)));
}

#[test]
fn scaler_marked_machines_are_deleted_when_marked_before_the_scaler_change() {
    let marked = m("marked", MachinePhase::Running, 0)
        .annotated(keys::MACHINE_PRIORITY, "1")
        .annotated(keys::MARKED_FOR_DELETION_TIME, "2024-01-01T00:00:00Z");
    let later = m("later", MachinePhase::Running, 0)
        .annotated(keys::MACHINE_PRIORITY, "1")
        .annotated(keys::MARKED_FOR_DELETION_TIME, "2024-01-03T00:00:00Z");
    let machines = [marked, later, m("c", MachinePhase::Running, 0)];
    let mut i = input(3, &machines);
    i.scaler_change_time = parse_rfc3339("2024-01-02T00:00:00Z");
    assert_eq!(
        deleted(&manage_replicas(&i)),
        [("marked".to_string(), DeleteReason::MarkedByScaler)]
    );
    // Without the set annotation the rule never fires.
    i.scaler_change_time = None;
    assert_eq!(manage_replicas(&i), ReplicaPlan::Steady);
}

#[test]
fn a_machine_is_deleted_once_even_when_several_rules_pick_it() {
    let bad = m("bad", MachinePhase::Failed, 0)
        .annotated(keys::MACHINE_PRIORITY, "1")
        .annotated(keys::MARKED_FOR_DELETION_TIME, "2024-01-01T00:00:00Z");
    let machines = [bad, m("ok", MachinePhase::Running, 0)];
    let mut i = input(1, &machines);
    i.scaler_change_time = parse_rfc3339("2024-01-02T00:00:00Z");
    assert_eq!(
        deleted(&manage_replicas(&i)),
        [("bad".to_string(), DeleteReason::Surplus)]
    );
}

#[test]
fn negative_desired_is_treated_as_zero() {
    let machines = [m("a", MachinePhase::Running, 0)];
    assert_eq!(deleted(&manage_replicas(&input(-3, &machines))).len(), 1);
}

// --- auto preservation ---

#[test]
fn auto_preservation_annotates_newest_unannotated_failed_machines() {
    let machines = [
        m("old", MachinePhase::Failed, 0),
        m("new", MachinePhase::Failed, 10),
        m("false", MachinePhase::Failed, 20).annotated(keys::PRESERVE, keys::PRESERVE_FALSE),
        m("running", MachinePhase::Running, 30),
    ];
    let plan = auto_preservation(1, 0, &machines);
    assert_eq!(plan.annotate, ["new"]);
    assert!(plan.unannotate.is_empty());
}

#[test]
fn auto_preservation_over_limit_removes_oldest_auto_annotations() {
    let machines = [
        m("a", MachinePhase::Failed, 5).annotated(keys::PRESERVE, keys::PRESERVE_AUTO),
        m("b", MachinePhase::Failed, 1).annotated(keys::PRESERVE, keys::PRESERVE_AUTO),
        m("manual", MachinePhase::Failed, 0).annotated(keys::PRESERVE, keys::PRESERVE_NOW),
    ];
    let plan = auto_preservation(1, 2, &machines);
    assert_eq!(plan.unannotate, ["b"]);
    assert_eq!(
        auto_preservation(2, 2, &machines),
        AutoPreservePlan::default()
    );
}

#[test]
fn auto_preserved_machine_is_kept_by_the_same_pass() {
    let mut machines = vec![
        m("ok", MachinePhase::Running, 0),
        m("bad", MachinePhase::Failed, 0),
    ];
    let plan = auto_preservation(1, 0, &machines);
    plan.apply(&mut machines);
    assert_eq!(manage_replicas(&input(2, &machines)), ReplicaPlan::Steady);
}

// --- status ---

#[test]
fn status_counts_follow_phases_and_template_labels() {
    let tpl: BTreeMap<String, String> = [("app".into(), "x".into())].into();
    let mut running = m("running", MachinePhase::Running, 0);
    running.labels = tpl.clone();
    let available = m("available", MachinePhase::Available, 0);
    let mut failed = m("failed", MachinePhase::Failed, 0);
    failed = failed.last_op("Cloud provider message", OpState::Failed, OpType::Create);
    let mut preserved =
        m("preserved", MachinePhase::Failed, 0).annotated(keys::PRESERVE, keys::PRESERVE_AUTO);
    preserved.preserve_expiry = Some(t(10));
    preserved = preserved.last_op("Cloud provider message", OpState::Failed, OpType::Create);
    let term = m("term", MachinePhase::Terminating, 0);
    let s = set_status(&tpl, &[running, available, failed, preserved, term]);
    assert_eq!(
        s,
        SetStatusCounts {
            replicas: 5,
            fully_labeled_replicas: 1,
            ready_replicas: 1,
            available_replicas: 2,
            preserved_failed_replicas: 1,
            auto_preserve_failed_machine_count: 1,
            failed_machines: vec!["failed".into()],
        }
    );
}

#[test]
fn replica_failure_condition_is_added_once_and_removed_on_success() {
    assert_eq!(
        replica_failure(Some("quota"), false, 1, 3),
        ReplicaFailureChange::Add {
            reason: "FailedCreate".into(),
            message: "quota".into()
        }
    );
    assert!(matches!(
        replica_failure(Some("x"), false, 4, 3),
        ReplicaFailureChange::Add { reason, .. } if reason == "FailedDelete"
    ));
    assert_eq!(
        replica_failure(Some("x"), true, 1, 3),
        ReplicaFailureChange::Keep
    );
    assert_eq!(
        replica_failure(None, true, 3, 3),
        ReplicaFailureChange::Remove
    );
    assert_eq!(
        replica_failure(None, false, 3, 3),
        ReplicaFailureChange::Keep
    );
}

// --- expectations ---

/// A monotonic instant `secs` seconds after a fixed base.
fn mono(base: std::time::Instant, secs: u64) -> std::time::Instant {
    base + Duration::from_secs(secs)
}

#[test]
fn expectations_hold_until_creations_and_deletions_are_observed() {
    let base = std::time::Instant::now();
    let mut e = Expectations::new();
    e.expect_creations("ns/ms", ["a".to_string(), "b".to_string()], mono(base, 0));
    e.expect_deletions("ns/ms", ["old".to_string()], mono(base, 0));
    assert!(!e.satisfied(
        "ns/ms",
        |n| if n == "b" {
            Seen::Absent
        } else {
            Seen::Present
        },
        mono(base, 1)
    ));
    // "b" seen now, "old" still present.
    assert!(!e.satisfied("ns/ms", |_| Seen::Present, mono(base, 2)));
    assert!(e.satisfied(
        "ns/ms",
        |n| if n == "old" {
            Seen::Deleting
        } else {
            Seen::Present
        },
        mono(base, 3)
    ));
    assert!(e.satisfied("other", |_| Seen::Absent, mono(base, 3)));
}

#[test]
fn expectations_expire_after_the_timeout() {
    let base = std::time::Instant::now();
    let mut e = Expectations::new();
    e.expect_creations("k", ["a".to_string()], mono(base, 0));
    assert!(!e.satisfied("k", |_| Seen::Absent, mono(base, 299)));
    assert!(e.satisfied("k", |_| Seen::Absent, mono(base, 300)));
}

#[test]
fn expectations_age_on_the_monotonic_clock_so_a_wall_clock_step_neither_expires_nor_pins_them() {
    // Finding 8: they used to be aged by `Utc::now()`. A wall clock stepped
    // an hour forward one second after a creation expired them at once (the
    // next sync trusted a cache without the new machines and created them
    // again); one stepped an hour back pinned them for an hour. Their age is
    // now monotonic time only, which no wall-clock step moves.
    let base = std::time::Instant::now();
    let mut e = Expectations::new();
    e.expect_creations("k", ["a".to_string()], mono(base, 0));
    // One second later (whatever the wall clock says now): still pending.
    assert!(!e.satisfied("k", |_| Seen::Absent, mono(base, 1)));
    // The timeout later (whatever the wall clock says now): expired.
    assert!(e.satisfied("k", |_| Seen::Absent, mono(base, 300)));
    // A `now` before the record (a caller's clock is never that, but it
    // must not pin them either): not expired, not negative, just pending.
    e.expect_creations("k", ["a".to_string()], mono(base, 10));
    assert!(!e.satisfied("k", |_| Seen::Absent, mono(base, 5)));
    assert!(e.satisfied("k", |_| Seen::Absent, mono(base, 310)));
}

// --- propagation ---

#[test]
fn node_template_and_configuration_are_pushed_into_active_machines() {
    let tpl = serde_json::json!({
        "class": {"kind": "MachineClass", "name": "c2"},
        "nodeTemplate": {"metadata": {"labels": {"pool": "b"}}},
        "drainTimeout": "1h"
    });
    let machine = serde_json::json!({
        "class": {"kind": "MachineClass", "name": "c1"},
        "providerID": "aws:///x",
        "nodeTemplate": {"metadata": {"labels": {"pool": "a"}}},
        "healthTimeout": "10m"
    });
    let out = propagate_template(&tpl, &machine, &MachinePhase::Running, false);
    assert_eq!(
        out,
        Some(serde_json::json!({
            "class": {"kind": "MachineClass", "name": "c1"},
            "providerID": "aws:///x",
            "nodeTemplate": {"metadata": {"labels": {"pool": "b"}}},
            "drainTimeout": "1h"
        }))
    );
}

#[test]
fn failed_machines_only_get_the_class_kind() {
    let tpl = serde_json::json!({"class": {"kind": "MachineClass"}, "nodeTemplate": {"spec": {"podCIDR": "x"}}});
    let machine = serde_json::json!({"class": {"kind": "AWSMachineClass", "name": "c"}});
    let out = propagate_template(&tpl, &machine, &MachinePhase::Failed, false);
    assert_eq!(
        out,
        Some(serde_json::json!({"class": {"kind": "MachineClass", "name": "c"}}))
    );
    let same = serde_json::json!({"class": {"kind": "MachineClass", "name": "c"}});
    assert_eq!(
        propagate_template(&tpl, &same, &MachinePhase::Terminating, false),
        None
    );
}

#[test]
fn propagation_treats_empty_and_absent_alike() {
    let tpl =
        serde_json::json!({"class": {"kind": "MachineClass"}, "nodeTemplate": {"metadata": {}}});
    let machine = serde_json::json!({"class": {"kind": "MachineClass", "name": "c"}});
    assert_eq!(
        propagate_template(&tpl, &machine, &MachinePhase::Running, false),
        None
    );
}

// --- names ---

#[test]
fn generate_name_is_the_set_name_with_a_dash() {
    assert_eq!(machine_generate_name("pool-abcde"), "pool-abcde-");
    let long = "x".repeat(250);
    assert!(machine_generate_name(&long).len() <= 248);
}

// --- stale-machine count ---

#[test]
fn only_a_failed_machine_whose_last_operation_is_the_health_check_counts_as_stale() {
    let with_op = |phase, kind| {
        let mut v = m("m", phase, 0);
        v.last_operation = Some(("x".into(), OpState::Failed, kind));
        v
    };
    assert!(is_stale_removal(&with_op(
        MachinePhase::Failed,
        OpType::HealthCheck
    )));
    // Failed during creation (timeout), not by unhealthiness.
    assert!(!is_stale_removal(&with_op(
        MachinePhase::Failed,
        OpType::Create
    )));
    // Unhealthy but not yet Failed: a scale-down, not a stale removal.
    assert!(!is_stale_removal(&with_op(
        MachinePhase::Unknown,
        OpType::HealthCheck
    )));
    assert!(!is_stale_removal(&m("m", MachinePhase::Failed, 0)));
}
