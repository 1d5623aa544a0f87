use super::*;
use chrono::TimeZone;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::{ClassSpec, MachineDeploymentStrategy, MachineSpec, UpdateConfiguration};

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0)
        .single()
        .unwrap_or_default()
}

fn tpl(class: &str) -> MachineTemplateSpec {
    MachineTemplateSpec {
        metadata: ObjectMeta {
            labels: Some([("app".to_string(), "x".to_string())].into()),
            ..Default::default()
        },
        spec: MachineSpec {
            class: ClassSpec {
                kind: "MachineClass".into(),
                name: class.into(),
                ..Default::default()
            },
            ..Default::default()
        },
    }
}

fn set(name: &str, created: i64, replicas: i32, status: i32, available: i32) -> SetView {
    SetView {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: Some(t(created)),
        replicas,
        template: tpl(name),
        status: SetStatusView {
            replicas: status,
            available_replicas: available,
            ready_replicas: available,
            fully_labeled_replicas: status,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn with_ann(mut s: SetView, k: &str, v: &str) -> SetView {
    s.annotations.insert(k.into(), v.into());
    s
}

fn rolling(surge: i32, unavailable: i32) -> Strategy {
    Strategy::RollingUpdate {
        max_surge: surge,
        max_unavailable: unavailable,
    }
}

fn spec_with(
    type_: &str,
    ru: Option<(IntOrString, IntOrString)>,
    replicas: i32,
) -> MachineDeploymentSpec {
    MachineDeploymentSpec {
        replicas,
        strategy: MachineDeploymentStrategy {
            type_: type_.into(),
            rolling_update: ru.map(|(s, u)| UpdateConfiguration {
                max_surge: Some(s),
                max_unavailable: Some(u),
            }),
            in_place_update: None,
        },
        ..Default::default()
    }
}

fn by_name(sets: &[SetView], v: Vec<(usize, i32)>) -> Vec<(String, i32)> {
    v.into_iter()
        .map(|(i, r)| (sets[i].name.clone(), r))
        .collect()
}

// --- strategy ---

#[test]
fn max_surge_rounds_up_and_max_unavailable_rounds_down() {
    let spec = spec_with(
        "RollingUpdate",
        Some((
            IntOrString::String("25%".into()),
            IntOrString::String("25%".into()),
        )),
        10,
    );
    assert_eq!(resolve_strategy(&spec), Ok(rolling(3, 2)));
}

#[test]
fn both_fence_posts_zero_means_one_unavailable() {
    let spec = spec_with(
        "RollingUpdate",
        Some((IntOrString::Int(0), IntOrString::Int(0))),
        3,
    );
    let s = resolve_strategy(&spec).unwrap_or(Strategy::Recreate);
    assert_eq!(s, rolling(0, 1));
    assert_eq!(s.max_unavailable(3), 1);
}

#[test]
fn max_unavailable_is_capped_by_replicas_and_zero_for_recreate() {
    assert_eq!(rolling(1, 5).max_unavailable(3), 3);
    assert_eq!(rolling(1, 5).max_unavailable(0), 0);
    assert_eq!(Strategy::Recreate.max_unavailable(3), 0);
    assert_eq!(Strategy::Recreate.max_surge(), 0);
}

#[test]
fn in_place_surge_counts_zero_for_max_surge_and_manual_unavailable() {
    let mut spec = spec_with("InPlaceUpdate", None, 4);
    spec.strategy.in_place_update = Some(mcm_api::InPlaceUpdateMachineDeployment {
        update_configuration: UpdateConfiguration {
            max_surge: Some(IntOrString::Int(1)),
            max_unavailable: Some(IntOrString::Int(0)),
        },
        orchestration_type: OrchestrationType::Manual,
    });
    let s = resolve_strategy(&spec).unwrap_or(Strategy::Recreate);
    assert_eq!(
        s,
        Strategy::InPlaceUpdate {
            max_surge: 1,
            max_unavailable: 1,
            manual: true
        }
    );
    assert_eq!(s.max_surge(), 0);
}

#[test]
fn unknown_strategy_or_missing_block_is_an_error() {
    assert!(matches!(
        resolve_strategy(&spec_with("Blue", None, 1)),
        Err(StrategyError::UnknownType(_))
    ));
    assert!(matches!(
        resolve_strategy(&spec_with("RollingUpdate", None, 1)),
        Err(StrategyError::Missing(_))
    ));
}

// --- templates ---

#[test]
fn template_equality_ignores_hash_label_node_template_configuration_and_class_kind() {
    let a = tpl("c1");
    let mut b = a.clone();
    b.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(c::TEMPLATE_HASH_LABEL.into(), "123".into());
    b.spec.node_template.metadata.labels = Some([("pool".to_string(), "p".to_string())].into());
    b.spec.configuration.drain_timeout = Some("1h".into());
    b.spec.class.kind = "AWSMachineClass".into();
    assert!(equal_ignore_hash(&a, &b));
}

#[test]
fn template_equality_sees_class_name_labels_and_annotations() {
    let a = tpl("c1");
    assert!(!equal_ignore_hash(&a, &tpl("c2")));
    let mut b = a.clone();
    b.metadata.annotations = Some([("x".to_string(), "y".to_string())].into());
    assert!(!equal_ignore_hash(&a, &b));
    let mut l = a.clone();
    l.metadata.labels = Some([("app".to_string(), "z".to_string())].into());
    assert!(!equal_ignore_hash(&a, &l));
}

#[test]
fn template_equality_treats_empty_and_missing_maps_alike() {
    let a = tpl("c1");
    let mut b = a.clone();
    b.metadata.annotations = Some(BTreeMap::new());
    assert!(equal_ignore_hash(&a, &b));
}

#[test]
fn template_hash_is_stable_ignores_hash_label_and_changes_with_collisions() {
    let a = tpl("c1");
    let mut labelled = a.clone();
    labelled
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(c::TEMPLATE_HASH_LABEL.into(), "1".into());
    assert_eq!(template_hash(&a, None), template_hash(&labelled, None));
    assert_ne!(template_hash(&a, None), template_hash(&tpl("c2"), None));
    assert_ne!(template_hash(&a, None), template_hash(&a, Some(1)));
    assert_ne!(template_hash(&a, Some(1)), template_hash(&a, Some(2)));
}

#[test]
fn set_name_suffix_uses_the_safe_alphabet_like_the_reference() {
    // The reference's own example: hash 2817305596 → suffix 6d5c7.
    assert_eq!(hash_suffix(2_817_305_596), "6d5c7");
    assert_eq!(new_set_name("pool", 2_817_305_596), "pool-6d5c7");
    assert_eq!(hash_suffix(7), "c");
}

#[test]
fn new_set_is_the_oldest_set_with_an_equal_template() {
    let template = tpl("c2");
    let mut a = set("a", 10, 1, 1, 1);
    a.template = template.clone();
    let mut b = set("b", 5, 1, 1, 1);
    b.template = template.clone();
    let old = set("old", 0, 1, 1, 1);
    let sets = vec![a, b, old];
    let part = partition(&template, &sets);
    assert_eq!(part.new, Some(1));
    assert_eq!(part.old, vec![2, 0]);
}

// --- revisions ---

#[test]
fn revisions_parse_with_missing_as_zero_and_garbage_skipped() {
    let sets = vec![
        with_ann(set("a", 0, 0, 0, 0), c::REVISION_ANNOTATION, "3"),
        with_ann(set("b", 0, 0, 0, 0), c::REVISION_ANNOTATION, "x"),
        set("c", 0, 0, 0, 0),
    ];
    assert_eq!(max_revision(&sets), 3);
    assert_eq!(revision(&sets[1].annotations), None);
    assert_eq!(revision(&sets[2].annotations), Some(0));
    assert_eq!(last_revision([1, 5, 3]), 3);
    assert_eq!(last_revision([5]), 0);
}

#[test]
fn new_set_annotations_copy_deployment_annotations_except_the_skip_list() {
    let d: BTreeMap<String, String> = [
        ("team".to_string(), "a".to_string()),
        (c::REVISION_ANNOTATION.to_string(), "9".to_string()),
        (
            c::TRIGGER_DELETION_BY_MCM_ANNOTATION.to_string(),
            "m~t".to_string(),
        ),
        (
            c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION.to_string(),
            "2024-01-01T00:00:00Z".to_string(),
        ),
    ]
    .into();
    let out = new_set_annotations(&d, &BTreeMap::new(), 2, false, 3, 4);
    assert_eq!(out.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        out.get(c::REVISION_ANNOTATION).map(String::as_str),
        Some("2")
    );
    assert!(!out.contains_key(c::TRIGGER_DELETION_BY_MCM_ANNOTATION));
    assert!(out.contains_key(c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION));
    assert_eq!(
        out.get(c::DESIRED_REPLICAS_ANNOTATION).map(String::as_str),
        Some("3")
    );
    assert_eq!(
        out.get(c::MAX_REPLICAS_ANNOTATION).map(String::as_str),
        Some("4")
    );
    assert!(!out.contains_key(c::REVISION_HISTORY_ANNOTATION));
}

#[test]
fn revision_history_grows_only_when_the_revision_is_raised() {
    let set_ann: BTreeMap<String, String> = [
        (c::REVISION_ANNOTATION.to_string(), "1".to_string()),
        (c::REVISION_HISTORY_ANNOTATION.to_string(), "0".to_string()),
    ]
    .into();
    let d: BTreeMap<String, String> = [("team".to_string(), "b".to_string())].into();
    // Same revision, annotations copied: no history entry (the reference appends "1").
    let same = new_set_annotations(&d, &set_ann, 1, true, 3, 4);
    assert_eq!(
        same.get(c::REVISION_HISTORY_ANNOTATION).map(String::as_str),
        Some("0")
    );
    assert!(!same.contains_key(c::DESIRED_REPLICAS_ANNOTATION));
    // Rollback to this set: revision 1 → 3, history "0,1".
    let raised = new_set_annotations(&d, &set_ann, 3, true, 3, 4);
    assert_eq!(
        raised.get(c::REVISION_ANNOTATION).map(String::as_str),
        Some("3")
    );
    assert_eq!(
        raised
            .get(c::REVISION_HISTORY_ANNOTATION)
            .map(String::as_str),
        Some("0,1")
    );
    // Never lowered.
    let lower = new_set_annotations(&d, &raised, 2, true, 3, 4);
    assert_eq!(
        lower.get(c::REVISION_ANNOTATION).map(String::as_str),
        Some("3")
    );
}

#[test]
fn rollback_annotations_replace_all_but_the_skip_list() {
    let d: BTreeMap<String, String> = [
        ("a".to_string(), "1".to_string()),
        (c::REVISION_ANNOTATION.to_string(), "4".to_string()),
    ]
    .into();
    let s: BTreeMap<String, String> = [
        ("b".to_string(), "2".to_string()),
        (c::REVISION_ANNOTATION.to_string(), "1".to_string()),
    ]
    .into();
    let out = rollback_annotations(&d, &s);
    assert_eq!(
        out,
        [
            ("b".to_string(), "2".to_string()),
            (c::REVISION_ANNOTATION.to_string(), "4".to_string())
        ]
        .into()
    );
}

// --- rollback ---

fn rev_set(name: &str, created: i64, rev: &str, class: &str) -> SetView {
    let mut s = with_ann(set(name, created, 0, 0, 0), c::REVISION_ANNOTATION, rev);
    s.template = tpl(class);
    s.template
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(c::TEMPLATE_HASH_LABEL.into(), "h".into());
    s
}

#[test]
fn rollback_to_zero_means_the_previous_revision() {
    let sets = vec![rev_set("v1", 0, "1", "c1"), rev_set("v2", 1, "2", "c2")];
    let current = tpl("c2");
    let part = partition(&current, &sets);
    let d = rollback_decision(0, &current, &BTreeMap::new(), &sets, &part);
    let RollbackDecision::RollBack {
        revision,
        set,
        template,
        ..
    } = d
    else {
        panic!("expected RollBack, got {d:?}")
    };
    assert_eq!((revision, set), (1, 0));
    assert_eq!(*template, tpl("c1"));
    assert!(!template
        .metadata
        .labels
        .unwrap_or_default()
        .contains_key(c::TEMPLATE_HASH_LABEL));
}

#[test]
fn rollback_counts_an_unrolled_template_as_the_next_revision() {
    // Template changed to c3 (no set yet) together with rollbackTo 0:
    // "previous" is revision 2, not 1.
    let sets = vec![rev_set("v1", 0, "1", "c1"), rev_set("v2", 1, "2", "c2")];
    let current = tpl("c3");
    let part = partition(&current, &sets);
    let d = rollback_decision(0, &current, &BTreeMap::new(), &sets, &part);
    assert!(matches!(d, RollbackDecision::RollBack { revision: 2, .. }));
}

#[test]
fn a_user_set_revision_at_i64_max_saturates_instead_of_overflowing() {
    // Finding 8: `max_revision() + 1` on a revision annotation anyone may
    // write; `i64::MAX` panicked in a debug build, garbage is skipped.
    let top = i64::MAX.to_string();
    let sets = vec![
        with_ann(set("a", 0, 0, 0, 0), c::REVISION_ANNOTATION, &top),
        with_ann(set("b", 0, 0, 0, 0), c::REVISION_ANNOTATION, "garbage"),
    ];
    assert_eq!(next_revision(&sets), i64::MAX);
    assert_eq!(next_revision(&sets[1..]), 1);
    assert_eq!(next_revision(&[]), 1);
    // The rollback path counts an unrolled template as the next revision too.
    let sets = vec![rev_set("v1", 0, "1", "c1"), rev_set("v2", 1, &top, "c2")];
    let current = tpl("c3");
    let part = partition(&current, &sets);
    let d = rollback_decision(0, &current, &BTreeMap::new(), &sets, &part);
    assert!(
        matches!(
            d,
            RollbackDecision::RollBack { .. } | RollbackDecision::RevisionNotFound(_)
        ),
        "{d:?}"
    );
}

#[test]
fn rollback_to_a_missing_revision_or_the_same_template_only_warns() {
    let sets = vec![rev_set("v1", 0, "1", "c1"), rev_set("v2", 1, "2", "c2")];
    let current = tpl("c2");
    let part = partition(&current, &sets);
    assert!(matches!(
        rollback_decision(7, &current, &BTreeMap::new(), &sets, &part),
        RollbackDecision::RevisionNotFound(_)
    ));
    assert_eq!(
        rollback_decision(2, &current, &BTreeMap::new(), &sets, &part),
        RollbackDecision::TemplateUnchanged { revision: 2 }
    );
    let only = vec![rev_set("v1", 0, "1", "c1")];
    let p1 = partition(&tpl("c1"), &only);
    assert!(matches!(
        rollback_decision(0, &tpl("c1"), &BTreeMap::new(), &only, &p1),
        RollbackDecision::RevisionNotFound(_)
    ));
}

// --- scaling ---

fn two_sets_new_first() -> (Vec<SetView>, Partition) {
    let mut new = set("new", 10, 2, 2, 2);
    new.template = tpl("cur");
    let old = set("old", 0, 3, 3, 3);
    let sets = vec![old, new];
    let part = partition(&tpl("cur"), &sets);
    (sets, part)
}

#[test]
fn scaling_event_needs_a_new_set_and_a_changed_desired_annotation() {
    let (mut sets, part) = two_sets_new_first();
    assert!(!is_scaling_event(5, &sets, &part)); // no annotation anywhere
    sets[1] = with_ann(sets[1].clone(), c::DESIRED_REPLICAS_ANNOTATION, "5");
    assert!(!is_scaling_event(5, &sets, &part));
    assert!(is_scaling_event(6, &sets, &part));
    let no_new = Partition {
        new: None,
        old: vec![0, 1],
    };
    assert!(!is_scaling_event(6, &sets, &no_new));
}

#[test]
fn scaling_from_zero_is_a_scaling_event() {
    let mut s = set("new", 0, 0, 0, 0);
    s.template = tpl("cur");
    let sets = vec![s];
    let part = partition(&tpl("cur"), &sets);
    assert!(is_scaling_event(1, &sets, &part));
    assert!(!is_scaling_event(0, &sets, &part));
}

#[test]
fn single_active_set_gets_all_replicas() {
    let mut new = set("new", 10, 0, 0, 0);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 3, 3, 3), new];
    let part = partition(&tpl("cur"), &sets);
    assert_eq!(
        by_name(&sets, scale_targets(6, &rolling(1, 0), 3, &sets, &part)),
        [("old".to_string(), 6)]
    );
    // Nothing active: the new set.
    let mut none = sets.clone();
    none[0].replicas = 0;
    assert_eq!(
        by_name(&none, scale_targets(2, &rolling(1, 0), 0, &none, &part)),
        [("new".to_string(), 2)]
    );
}

#[test]
fn saturated_new_set_scales_old_sets_to_zero() {
    let (mut sets, part) = two_sets_new_first();
    sets[1] = with_ann(set("new", 10, 5, 5, 5), c::DESIRED_REPLICAS_ANNOTATION, "5");
    sets[1].template = tpl("cur");
    assert_eq!(
        by_name(&sets, scale_targets(5, &rolling(1, 0), 8, &sets, &part)),
        [("old".to_string(), 0)]
    );
}

#[test]
fn scale_out_during_rollout_goes_to_the_new_set_only() {
    let (sets, part) = two_sets_new_first();
    // replicas 5→8, surge 1: allowed 9, total 5 → +4 to new.
    let out = by_name(&sets, scale_targets(8, &rolling(1, 0), 5, &sets, &part));
    assert!(out.contains(&("new".to_string(), 6)));
    assert!(out.contains(&("old".to_string(), 3)));
}

#[test]
fn scale_in_during_rollout_is_proportional_largest_first() {
    // old 6, new 4 (10 replicas + surge 0 before) → 5 replicas: allowed 5, remove 5.
    let mut new = with_ann(set("new", 10, 4, 4, 4), c::MAX_REPLICAS_ANNOTATION, "10");
    new.template = tpl("cur");
    let old = with_ann(set("old", 0, 6, 6, 6), c::MAX_REPLICAS_ANNOTATION, "10");
    let sets = vec![old, new];
    let part = partition(&tpl("cur"), &sets);
    let out = by_name(&sets, scale_targets(5, &rolling(0, 1), 10, &sets, &part));
    assert_eq!(out, [("old".to_string(), 3), ("new".to_string(), 2)]);
}

#[test]
fn scale_to_zero_during_rollout_empties_every_set() {
    let (sets, part) = two_sets_new_first();
    let out = by_name(&sets, scale_targets(0, &rolling(1, 0), 5, &sets, &part));
    assert_eq!(out, [("old".to_string(), 0), ("new".to_string(), 0)]);
}

#[test]
fn proportional_scaling_survives_missing_max_replicas() {
    let (sets, part) = two_sets_new_first();
    // No max-replicas annotation and deployment status.replicas 0: no share, leftovers to the largest.
    let out = by_name(&sets, scale_targets(3, &rolling(0, 1), 0, &sets, &part));
    assert_eq!(out, [("old".to_string(), 1), ("new".to_string(), 2)]);
}

#[test]
fn recreate_does_not_scale_proportionally() {
    let (sets, part) = two_sets_new_first();
    assert!(scale_targets(3, &Strategy::Recreate, 5, &sets, &part).is_empty());
}

// --- rolling update ---

#[test]
fn new_set_grows_by_the_surge_and_not_beyond_replicas() {
    let mut new = set("new", 10, 0, 0, 0);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 3, 3, 3), new.clone()];
    assert_eq!(new_set_replicas(&rolling(1, 0), 3, &sets, &new), 1);
    assert_eq!(new_set_replicas(&rolling(5, 0), 3, &sets, &new), 3);
    assert_eq!(new_set_replicas(&Strategy::Recreate, 3, &sets, &new), 3);
}

#[test]
fn new_set_does_not_surge_again_while_status_lags() {
    // The new set was raised to 1 but has no machine yet (status 0).
    let mut new = set("new", 10, 1, 0, 0);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 3, 3, 3), new.clone()];
    // Reference: current = 3 + 0 = 3 < 4 → raises to 2. mcm-rs: current = 3 + 1 = 4.
    assert_eq!(rolling_new_set_target(&rolling(1, 0), 3, &sets, &new), None);
}

#[test]
fn new_set_waits_for_terminating_old_machines() {
    // Old set scaled 3→2 but its third machine still exists.
    let mut new = set("new", 10, 1, 1, 1);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 2, 3, 2), new.clone()];
    assert_eq!(rolling_new_set_target(&rolling(1, 0), 3, &sets, &new), None);
}

#[test]
fn new_set_above_replicas_is_scaled_down() {
    let mut new = set("new", 10, 5, 5, 5);
    new.template = tpl("cur");
    let sets = vec![new.clone()];
    assert_eq!(
        rolling_new_set_target(&rolling(1, 0), 3, &sets, &new),
        Some(3)
    );
}

#[test]
fn old_sets_shrink_only_by_available_surplus_with_max_unavailable_zero() {
    // replicas 3, surge 1, unavailable 0: new has 1 available → old may lose 1.
    let mut new = set("new", 10, 1, 1, 1);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 3, 3, 3), new];
    let part = partition(&tpl("cur"), &sets);
    assert_eq!(
        by_name(&sets, rolling_scale_down(3, 0, &sets, &part)),
        [("old".to_string(), 2)]
    );
}

#[test]
fn old_sets_do_not_shrink_while_the_new_machine_is_unavailable() {
    let mut new = set("new", 10, 1, 1, 0);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 3, 3, 3), new];
    let part = partition(&tpl("cur"), &sets);
    assert!(rolling_scale_down(3, 0, &sets, &part).is_empty());
}

#[test]
fn old_scale_down_is_not_repeated_before_status_catches_up() {
    // Old already scaled 3→2 (spec) while its status still shows 3 available.
    let mut new = set("new", 10, 1, 1, 1);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 2, 3, 3), new];
    let part = partition(&tpl("cur"), &sets);
    assert!(rolling_scale_down(3, 0, &sets, &part).is_empty());
}

#[test]
fn old_sets_keep_their_machines_while_the_new_set_sheds_surplus() {
    // The new set was scaled down to 1 but still has 3 available machines.
    let mut new = set("new", 10, 1, 3, 3);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 2, 2, 2), new];
    let part = partition(&tpl("cur"), &sets);
    // Reference: unavailable = 1 - 3 = -2 → budget 2 → old 2 → 0, leaving 1 machine.
    assert!(rolling_scale_down(3, 0, &sets, &part).is_empty());
}

#[test]
fn unhealthy_old_replicas_are_cleaned_up_first_oldest_set_first() {
    // replicas 4, unavailable 1 → min available 3. Old1 has 2 spec/1 available, old2 2/2, new 1/0.
    let mut new = set("new", 10, 1, 1, 0);
    new.template = tpl("cur");
    let sets = vec![set("old1", 0, 2, 2, 1), set("old2", 5, 2, 2, 2), new];
    let part = partition(&tpl("cur"), &sets);
    // maxScaledDown = 5 - 3 - 1 = 1 → cleanup removes old1's unhealthy one; available 3 = min → no more.
    assert_eq!(
        by_name(&sets, rolling_scale_down(4, 1, &sets, &part)),
        [("old1".to_string(), 1)]
    );
}

#[test]
fn recreate_scales_old_down_then_waits_then_creates() {
    let old = set("old", 0, 2, 2, 2);
    let sets = vec![old];
    let part = partition(&tpl("cur"), &sets);
    assert_eq!(
        recreate_step(3, &sets, &part, true),
        RecreateStep::ScaleDownOld(vec![0])
    );
    let mut drained = sets.clone();
    drained[0].replicas = 0;
    assert_eq!(
        recreate_step(3, &drained, &part, true),
        RecreateStep::WaitForOldMachines
    );
    drained[0].status.replicas = 0;
    assert_eq!(
        recreate_step(3, &drained, &part, false),
        RecreateStep::CreateNew
    );
    let mut new = set("new", 10, 0, 0, 0);
    new.template = tpl("cur");
    drained.push(new);
    let part = partition(&tpl("cur"), &drained);
    assert_eq!(
        recreate_step(3, &drained, &part, false),
        RecreateStep::ScaleNew(3)
    );
    drained[1].replicas = 3;
    assert_eq!(
        recreate_step(3, &drained, &part, false),
        RecreateStep::Steady
    );
}

#[test]
fn scaled_to_zero_needs_no_spec_and_no_machines() {
    // The reference calls this set "scaled to zero" because readyReplicas is 0.
    let not_ready = set("a", 0, 2, 2, 0);
    assert!(!sets_scaled_to_zero([&not_ready]));
    let draining = set("b", 0, 0, 1, 1);
    assert!(!sets_scaled_to_zero([&draining]));
    let empty = set("c", 0, 0, 0, 0);
    assert!(sets_scaled_to_zero([&empty]));
}

#[test]
fn history_cleanup_deletes_oldest_empty_sets_beyond_the_limit() {
    let mut busy = set("busy", 0, 0, 1, 0);
    busy.template = tpl("x");
    let mut unobserved = set("unobserved", 1, 0, 0, 0);
    unobserved.generation = 2;
    let empty_old = set("empty-old", 2, 0, 0, 0);
    let empty_new = set("empty-new", 3, 0, 0, 0);
    let mut cur = set("cur", 4, 1, 1, 1);
    cur.template = tpl("cur");
    let sets = vec![empty_new, busy, cur, empty_old, unobserved];
    let part = partition(&tpl("cur"), &sets);
    let names: Vec<&str> = history_cleanup(Some(1), &sets, &part)
        .into_iter()
        .map(|i| sets[i].name.as_str())
        .collect();
    // 4 old sets, limit 1 → the 3 oldest are candidates; busy and unobserved are kept.
    assert_eq!(names, ["empty-old"]);
    assert!(history_cleanup(None, &sets, &part).is_empty());
}

// --- status ---

fn facts<'a>(
    status: &'a MachineDeploymentStatus,
    strategy: &'a Strategy,
    replicas: i32,
) -> DeploymentFacts<'a> {
    DeploymentFacts {
        name: "d",
        generation: 2,
        replicas,
        strategy,
        progress_deadline_seconds: Some(60),
        status,
    }
}

#[test]
fn status_sums_sets_and_counts_unavailable_from_spec() {
    let (sets, part) = two_sets_new_first();
    let st = MachineDeploymentStatus::default();
    let s = rolling(1, 0);
    let status = deployment_status(&facts(&st, &s, 5), &sets, &part, t(0));
    assert_eq!(status.replicas, 5);
    assert_eq!(status.updated_replicas, 2);
    assert_eq!(status.available_replicas, 5);
    assert_eq!(status.unavailable_replicas, 0);
    assert_eq!(status.observed_generation, 2);
    let avail = get_condition(
        &status.conditions,
        &MachineDeploymentConditionType::Available,
    );
    assert_eq!(
        avail.map(|c| c.reason.as_str()),
        Some(c::MINIMUM_REPLICAS_AVAILABLE)
    );
}

#[test]
fn availability_condition_subtracts_max_unavailable_and_preserved_failed() {
    let mut s1 = set("new", 10, 4, 4, 2);
    s1.template = tpl("cur");
    s1.status.preserved_failed_replicas = 1;
    let sets = vec![s1];
    let part = partition(&tpl("cur"), &sets);
    let st = MachineDeploymentStatus::default();
    let s = rolling(1, 1);
    // min = 4 - 1 - 1 = 2 ≤ 2 → available.
    let ok = deployment_status(&facts(&st, &s, 4), &sets, &part, t(0));
    assert_eq!(
        get_condition(&ok.conditions, &MachineDeploymentConditionType::Available)
            .map(|c| c.status.clone()),
        Some(ConditionStatus::True)
    );
    let r = Strategy::Recreate;
    let bad = deployment_status(&facts(&st, &r, 4), &sets, &part, t(0));
    assert_eq!(
        get_condition(&bad.conditions, &MachineDeploymentConditionType::Available)
            .map(|c| c.reason.clone()),
        Some(c::MINIMUM_REPLICAS_UNAVAILABLE.to_string())
    );
}

#[test]
fn complete_rollout_sets_new_machine_set_available() {
    let mut new = set("new", 10, 3, 3, 3);
    new.template = tpl("cur");
    let sets = vec![new];
    let part = partition(&tpl("cur"), &sets);
    let st = MachineDeploymentStatus::default();
    let s = rolling(1, 0);
    let status = rollout_status(&facts(&st, &s, 3), &sets, &part, t(0));
    let p = get_condition(
        &status.conditions,
        &MachineDeploymentConditionType::Progressing,
    );
    assert_eq!(
        p.map(|c| c.reason.as_str()),
        Some(c::NEW_MACHINE_SET_AVAILABLE_REASON)
    );
    assert_eq!(status.conditions.len(), 2);
}

#[test]
fn progress_refreshes_machine_set_updated_keeping_transition_time() {
    let (sets, part) = two_sets_new_first();
    let mut st = MachineDeploymentStatus {
        replicas: 5,
        updated_replicas: 1,
        ..Default::default()
    };
    set_condition(
        &mut st.conditions,
        new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::True,
            c::MACHINE_SET_UPDATED_REASON,
            "x".into(),
            t(0),
        ),
    );
    let s = rolling(1, 0);
    let status = rollout_status(&facts(&st, &s, 3), &sets, &part, t(30));
    let p = get_condition(
        &status.conditions,
        &MachineDeploymentConditionType::Progressing,
    );
    assert_eq!(
        p.and_then(|c| c.last_update_time.clone()),
        Some(to_k8s(t(30)))
    );
    assert_eq!(
        p.and_then(|c| c.last_transition_time.clone()),
        Some(to_k8s(t(0)))
    );
}

#[test]
fn stuck_rollout_times_out_after_the_progress_deadline() {
    let mut new = set("new", 10, 1, 1, 0);
    new.template = tpl("cur");
    let sets = vec![set("old", 0, 3, 3, 3), new];
    let part = partition(&tpl("cur"), &sets);
    let mut st = deployment_status(
        &facts(&MachineDeploymentStatus::default(), &rolling(1, 0), 3),
        &sets,
        &part,
        t(0),
    );
    set_condition(
        &mut st.conditions,
        new_condition(
            MachineDeploymentConditionType::Progressing,
            ConditionStatus::True,
            c::MACHINE_SET_UPDATED_REASON,
            "x".into(),
            t(0),
        ),
    );
    let s = rolling(1, 0);
    let f = facts(&st, &s, 3);
    let early = rollout_status(&f, &sets, &part, t(30));
    assert_eq!(
        get_condition(
            &early.conditions,
            &MachineDeploymentConditionType::Progressing
        )
        .map(|c| c.reason.as_str()),
        Some(c::MACHINE_SET_UPDATED_REASON)
    );
    assert_eq!(
        progress_requeue(&f, &early, t(30)),
        Some(Duration::from_secs(31))
    );
    let late = rollout_status(&f, &sets, &part, t(61));
    let p = get_condition(
        &late.conditions,
        &MachineDeploymentConditionType::Progressing,
    );
    assert_eq!(p.map(|c| c.reason.as_str()), Some(c::TIMED_OUT_REASON));
    assert_eq!(p.map(|c| c.status.clone()), Some(ConditionStatus::False));
}

#[test]
fn replica_failure_of_a_set_is_promoted_and_removed_again() {
    let mut new = set("new", 10, 3, 1, 1);
    new.template = tpl("cur");
    new.status.replica_failure = Some(MachineSetCondition {
        type_: MachineSetConditionType::ReplicaFailure,
        status: ConditionStatus::True,
        reason: "FailedCreate".into(),
        message: "quota".into(),
        last_transition_time: None,
    });
    let mut sets = vec![new];
    let part = partition(&tpl("cur"), &sets);
    let st = MachineDeploymentStatus::default();
    let s = rolling(1, 0);
    let with = rollout_status(&facts(&st, &s, 3), &sets, &part, t(0));
    let rf = get_condition(
        &with.conditions,
        &MachineDeploymentConditionType::ReplicaFailure,
    );
    assert_eq!(rf.map(|c| c.message.as_str()), Some("quota"));
    sets[0].status.replica_failure = None;
    let without = rollout_status(&facts(&with, &s, 3), &sets, &part, t(1));
    assert!(get_condition(
        &without.conditions,
        &MachineDeploymentConditionType::ReplicaFailure
    )
    .is_none());
}

#[test]
fn status_update_is_skipped_when_nothing_relevant_changed() {
    let a = MachineDeploymentStatus {
        replicas: 3,
        ..Default::default()
    };
    assert!(!status_update_required(&a, &a.clone()));
    let mut b = a.clone();
    b.available_replicas = 1;
    assert!(status_update_required(&a, &b));
    let mut f1 = a.clone();
    f1.failed_machines = vec![MachineSummary {
        name: "m".into(),
        ..Default::default()
    }];
    let mut f2 = f1.clone();
    f2.failed_machines[0].last_operation.description = "new error".into();
    assert!(status_update_required(&f1, &f2));
}

#[test]
fn condition_setter_keeps_transition_time_when_status_is_unchanged() {
    let mut conds = Vec::new();
    set_condition(
        &mut conds,
        new_condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::True,
            "A",
            "m".into(),
            t(0),
        ),
    );
    // Same status and reason: untouched.
    set_condition(
        &mut conds,
        new_condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::True,
            "A",
            "other".into(),
            t(5),
        ),
    );
    assert_eq!(conds[0].message, "m");
    set_condition(
        &mut conds,
        new_condition(
            MachineDeploymentConditionType::Available,
            ConditionStatus::True,
            "B",
            "m".into(),
            t(9),
        ),
    );
    assert_eq!(conds.len(), 1);
    assert_eq!(conds[0].last_transition_time, Some(to_k8s(t(0))));
    assert_eq!(conds[0].last_update_time, Some(to_k8s(t(9))));
}

#[test]
fn pause_and_resume_set_progressing_unknown_but_never_over_a_timeout() {
    let p = paused_condition(true, &[], t(0));
    assert_eq!(
        p.as_ref().map(|c| c.reason.as_str()),
        Some(c::PAUSED_DEPLOYMENT_REASON)
    );
    let conds = vec![p.unwrap_or_default()];
    assert_eq!(paused_condition(true, &conds, t(1)), None);
    let r = paused_condition(false, &conds, t(2));
    assert_eq!(
        r.map(|c| c.reason),
        Some(c::RESUMED_DEPLOYMENT_REASON.to_string())
    );
    let timed_out = vec![new_condition(
        MachineDeploymentConditionType::Progressing,
        ConditionStatus::False,
        c::TIMED_OUT_REASON,
        String::new(),
        t(0),
    )];
    assert_eq!(paused_condition(true, &timed_out, t(1)), None);
}

// --- autoscaler ---

#[test]
fn legacy_trigger_deletion_entries_get_the_scaler_time() {
    assert_eq!(
        normalize_trigger_deletion("m1,m2~2024-01-01T00:00:00Z,,a~b~c", "2024-02-02T00:00:00Z"),
        "m1~2024-02-02T00:00:00Z,m2~2024-01-01T00:00:00Z"
    );
}

#[test]
fn trigger_deletion_marks_live_machines_and_drops_the_rest() {
    let value = "live~2024-01-01T00:00:00Z,marked~2024-01-01T00:00:00Z,gone~2024-01-01T00:00:00Z,failed~2024-01-01T00:00:00Z,bad~yesterday,junk";
    let plan = trigger_deletion_plan(value, |n| match n {
        "live" => TriggerTarget::Live { marked: false },
        "marked" => TriggerTarget::Live { marked: true },
        "failed" => TriggerTarget::FailedOrTerminating,
        _ => TriggerTarget::NotFound,
    });
    assert_eq!(
        plan.new_value.as_deref(),
        Some("live~2024-01-01T00:00:00Z,marked~2024-01-01T00:00:00Z")
    );
    assert_eq!(
        plan.mark,
        [("live".to_string(), "2024-01-01T00:00:00Z".to_string())]
    );
    let empty = trigger_deletion_plan("gone~2024-01-01T00:00:00Z", |_| TriggerTarget::NotFound);
    assert_eq!(empty.new_value.as_deref(), Some(""));
    let same = trigger_deletion_plan("live~2024-01-01T00:00:00Z", |_| TriggerTarget::Live {
        marked: true,
    });
    assert_eq!(same, TriggerPlan::default());
}

#[test]
fn scale_down_is_disabled_on_nodes_during_a_rollout_and_reenabled_after() {
    let none = BTreeMap::new();
    let by_mcm: BTreeMap<String, String> = [
        (
            c::CA_SCALE_DOWN_DISABLED_ANNOTATION.to_string(),
            "true".to_string(),
        ),
        (
            c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION.to_string(),
            "true".to_string(),
        ),
    ]
    .into();
    let by_user: BTreeMap<String, String> = [(
        c::CA_SCALE_DOWN_DISABLED_ANNOTATION.to_string(),
        "true".to_string(),
    )]
    .into();
    assert_eq!(
        scale_down_disabled_change(true, false, &none, false),
        ScaleDownDisabledChange::Add
    );
    assert_eq!(
        scale_down_disabled_change(true, false, &by_mcm, false),
        ScaleDownDisabledChange::Keep
    );
    assert_eq!(
        scale_down_disabled_change(false, true, &by_mcm, false),
        ScaleDownDisabledChange::Remove
    );
    // Not ours, or a preserved machine, or not complete: left alone.
    assert_eq!(
        scale_down_disabled_change(false, true, &by_user, false),
        ScaleDownDisabledChange::Keep
    );
    assert_eq!(
        scale_down_disabled_change(false, true, &by_mcm, true),
        ScaleDownDisabledChange::Keep
    );
    assert_eq!(
        scale_down_disabled_change(false, false, &by_mcm, false),
        ScaleDownDisabledChange::Keep
    );
}

// --- safety ---

#[test]
fn overshoot_count_needs_template_labels_and_an_owner_named_like_the_set() {
    let tl: BTreeMap<String, String> = [("app".to_string(), "x".to_string())].into();
    let other: BTreeMap<String, String> = [("app".to_string(), "y".to_string())].into();
    let owners_ms = vec!["ms".to_string()];
    let owners_other = vec!["other".to_string()];
    let machines = vec![
        (&tl, owners_ms.as_slice()),
        (&tl, owners_other.as_slice()),
        (&other, owners_ms.as_slice()),
        (&tl, owners_ms.as_slice()),
    ];
    assert_eq!(overshoot_count("ms", &tl, machines), 2);
}

#[test]
fn overshoot_thresholds_with_and_without_a_parent_deployment() {
    assert_eq!(overshoot_thresholds(3, None, 2, 1), (8, 7));
    assert_eq!(overshoot_thresholds(3, Some((2, 2)), 2, 1), (6, 5));
}

#[test]
fn overshoot_threshold_without_any_max_surge_uses_zero_surge() {
    let recreate = spec_with("Recreate", None, 4);
    assert_eq!(safety_surge(&recreate), 0);
    let ru = spec_with(
        "RollingUpdate",
        Some((IntOrString::String("50%".into()), IntOrString::Int(0))),
        3,
    );
    assert_eq!(safety_surge(&ru), 2);
}

#[test]
fn overshoot_freezes_at_high_and_unfreezes_at_low() {
    let th = (6, 5);
    assert_eq!(overshoot_decision(false, 5, th), OvershootDecision::Nothing);
    assert_eq!(overshoot_decision(false, 6, th), OvershootDecision::Freeze);
    assert_eq!(overshoot_decision(true, 6, th), OvershootDecision::Nothing);
    assert_eq!(overshoot_decision(true, 5, th), OvershootDecision::Unfreeze);
}

#[test]
fn overshoot_decisions_are_independent_per_set() {
    // Two sets in one pass: the reference stops after the first action.
    let decisions: Vec<OvershootDecision> = [(false, 9usize), (true, 0usize)]
        .into_iter()
        .map(|(frozen, count)| {
            overshoot_decision(frozen, count, overshoot_thresholds(3, None, 2, 1))
        })
        .collect();
    assert_eq!(
        decisions,
        [OvershootDecision::Freeze, OvershootDecision::Unfreeze]
    );
}

#[test]
fn deployment_freeze_follows_its_sets() {
    assert_eq!(deployment_should_be_frozen(false, true), Some(true));
    assert_eq!(deployment_should_be_frozen(true, false), Some(false));
    assert_eq!(deployment_should_be_frozen(true, true), None);
}
