//! One test per decision of [`plan_overshoot`].

use super::*;
use serde_json::{json, Value};

fn ms(v: Value) -> Arc<MachineSet> {
    Arc::new(serde_json::from_value(v).expect("a valid MachineSet"))
}

fn md(v: Value) -> Arc<MachineDeployment> {
    Arc::new(serde_json::from_value(v).expect("a valid MachineDeployment"))
}

/// A set `name` of `replicas` with template label `app=<name>`, owned by
/// deployment `dep` (uid `uid-<dep>`) when given.
fn set(name: &str, replicas: i32, dep: Option<&str>) -> Value {
    let owners: Vec<Value> = dep
        .map(|d| {
            json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
                   "name": d, "uid": format!("uid-{d}"), "controller": true})
        })
        .into_iter()
        .collect();
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"app": name},
                     "ownerReferences": owners},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"class": {"name": "c"}}}}
    })
}

fn frozen(mut v: Value) -> Value {
    v["metadata"]["labels"]["freeze"] = json!("True");
    v
}

fn annotated(mut v: Value) -> Value {
    v["metadata"]["annotations"] = json!({c::UNFREEZE_ANNOTATION: "true"});
    v
}

/// A deployment of `replicas` with a RollingUpdate maxSurge of `surge`.
fn deployment(name: &str, replicas: i32, surge: i32) -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"dep": name}},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxSurge": surge, "maxUnavailable": 0}},
                 "template": {"metadata": {"labels": {"dep": name}},
                              "spec": {"class": {"name": "c"}}}}
    })
}

/// `n` machines of set `name`.
fn machines(name: &str, n: usize) -> Vec<Arc<Machine>> {
    (0..n)
        .map(|i| {
            let m: Machine = serde_json::from_value(json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
                "metadata": {"name": format!("{name}-{i}"), "labels": {"app": name},
                             "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1",
                                "kind": "MachineSet", "name": name, "uid": format!("uid-{name}"),
                                "controller": true}]},
                "spec": {"class": {"name": "c"}}
            }))
            .expect("a valid Machine");
            Arc::new(m)
        })
        .collect()
}

fn plan(sets: &[Value], deployments: &[Value], machines: &[Arc<Machine>]) -> Vec<PlannedAction> {
    let sets: Vec<Arc<MachineSet>> = sets.iter().cloned().map(ms).collect();
    let deployments: Vec<Arc<MachineDeployment>> = deployments.iter().cloned().map(md).collect();
    plan_overshoot(&OvershootInput {
        sets: &sets,
        deployments: &deployments,
        machines,
        safety_up: 2,
        safety_down: 1,
    })
}

fn freeze(
    target: FreezeTarget,
    frozen: bool,
    reason: &'static str,
    message: &str,
) -> OvershootAction {
    OvershootAction::Freeze {
        target,
        frozen,
        reason,
        message: message.into(),
    }
}

fn set_t(n: &str) -> FreezeTarget {
    FreezeTarget::Set(n.into())
}

fn dep_t(n: &str) -> FreezeTarget {
    FreezeTarget::Deployment(n.into())
}

#[test]
fn a_set_within_its_limit_needs_nothing() {
    // No parent: high = 2 × 3 + 2 = 8.
    assert_eq!(plan(&[set("s1", 3, None)], &[], &machines("s1", 7)), vec![]);
}

#[test]
fn an_overshooting_set_is_frozen_with_its_deployment_and_an_event_after_the_sets_freeze() {
    // high = 2 + 2 + 2 = 6.
    let got = plan(
        &[set("s1", 2, Some("d1"))],
        &[deployment("d1", 2, 2)],
        &machines("s1", 6),
    );
    let msg = overshoot_freeze_message("s1", 6, 6);
    assert_eq!(
        got,
        vec![
            PlannedAction {
                action: freeze(set_t("s1"), true, c::OVERSHOOTING_REPLICA_COUNT, &msg),
                after: None,
            },
            PlannedAction {
                action: freeze(dep_t("d1"), true, c::OVERSHOOTING_REPLICA_COUNT, &msg),
                after: Some(0),
            },
            PlannedAction {
                action: OvershootAction::Event(SetEvent {
                    set: "s1".into(),
                    reason: c::MACHINE_SET_FREEZE_EVENT,
                    action: "Freeze",
                    note: msg.clone(),
                }),
                after: Some(0),
            },
        ]
    );
}

#[test]
fn a_frozen_set_back_at_its_lower_limit_is_unfrozen_deployment_first() {
    // high 6, low 5.
    let got = plan(
        &[frozen(set("s1", 2, Some("d1")))],
        &[frozen(deployment("d1", 2, 2))],
        &machines("s1", 5),
    );
    let msg = overshoot_unfreeze_message("s1", 5, 5);
    let reason = c::UNDERSHOOTING_REPLICA_COUNT;
    assert_eq!(
        got,
        vec![
            PlannedAction {
                action: freeze(dep_t("d1"), false, reason, &msg),
                after: None,
            },
            PlannedAction {
                action: freeze(set_t("s1"), false, reason, &msg),
                after: None,
            },
            PlannedAction {
                action: OvershootAction::Event(SetEvent {
                    set: "s1".into(),
                    reason: c::MACHINE_SET_UNFREEZE_EVENT,
                    action: "Unfreeze",
                    note: msg.clone(),
                }),
                after: Some(1),
            },
        ]
    );
}

#[test]
fn a_frozen_set_between_the_limits_stays_frozen() {
    let got = plan(
        &[frozen(set("s1", 2, Some("d1")))],
        &[frozen(deployment("d1", 2, 2))],
        &machines("s1", 6),
    );
    assert_eq!(got, vec![]);
}

#[test]
fn every_set_is_looked_at_in_one_pass() {
    let mut all = machines("s1", 9);
    all.extend(machines("s2", 9));
    let got = plan(&[set("s1", 3, None), set("s2", 3, None)], &[], &all);
    let frozen_sets: Vec<&FreezeTarget> = got
        .iter()
        .filter_map(|p| match &p.action {
            OvershootAction::Freeze {
                target,
                frozen: true,
                ..
            } => Some(target),
            _ => None,
        })
        .collect();
    assert_eq!(frozen_sets, vec![&set_t("s1"), &set_t("s2")]);
}

#[test]
fn the_unfreeze_annotation_on_a_deployment_unfreezes_it_and_its_frozen_sets() {
    // The set is within its limits now (high 6, low 5, 5 machines would
    // unfreeze it anyway: use 6 so only the annotation acts).
    let got = plan(
        &[frozen(set("s1", 2, Some("d1"))), set("s2", 0, Some("d1"))],
        &[annotated(frozen(deployment("d1", 2, 2)))],
        &machines("s1", 6),
    );
    let msg = format!(
        "MachineDeployment d1 unfrozen by the {} annotation",
        c::UNFREEZE_ANNOTATION
    );
    let reason = c::UNFREEZE_ANNOTATION_REASON;
    assert_eq!(
        got,
        vec![
            PlannedAction {
                action: freeze(dep_t("d1"), false, reason, &msg),
                after: None,
            },
            PlannedAction {
                action: freeze(set_t("s1"), false, reason, &msg),
                after: None,
            },
            PlannedAction {
                action: OvershootAction::Event(SetEvent {
                    set: "s1".into(),
                    reason: c::MACHINE_SET_UNFREEZE_EVENT,
                    action: "Unfreeze",
                    note: msg.clone(),
                }),
                after: Some(1),
            },
        ],
        "the set that was not frozen is left alone"
    );
}

#[test]
fn the_unfreeze_annotation_on_a_set_unfreezes_it_with_an_event_only_when_it_was_frozen() {
    let msg = |n: &str| {
        format!(
            "MachineSet {n} unfrozen by the {} annotation",
            c::UNFREEZE_ANNOTATION
        )
    };
    let reason = c::UNFREEZE_ANNOTATION_REASON;
    let got = plan(
        &[
            annotated(frozen(set("s1", 3, None))),
            annotated(set("s2", 3, None)),
        ],
        &[],
        &machines("s1", 8),
    );
    assert_eq!(
        got,
        vec![
            PlannedAction {
                action: freeze(set_t("s1"), false, reason, &msg("s1")),
                after: None,
            },
            PlannedAction {
                action: OvershootAction::Event(SetEvent {
                    set: "s1".into(),
                    reason: c::MACHINE_SET_UNFREEZE_EVENT,
                    action: "Unfreeze",
                    note: msg("s1"),
                }),
                after: Some(0),
            },
            // Not frozen: the label and annotation are still cleaned up, no Event.
            PlannedAction {
                action: freeze(set_t("s2"), false, reason, &msg("s2")),
                after: None,
            },
        ]
    );
}

#[test]
fn a_deployment_is_frozen_while_one_of_its_sets_is() {
    let got = plan(
        &[frozen(set("s1", 2, Some("d1")))],
        &[deployment("d1", 2, 2)],
        &machines("s1", 6),
    );
    assert_eq!(
        got,
        vec![PlannedAction {
            action: freeze(
                dep_t("d1"),
                true,
                c::MACHINE_DEPLOYMENT_STATE_SYNC,
                STATE_SYNC_FREEZE_MESSAGE
            ),
            after: None,
        }]
    );
}

#[test]
fn a_frozen_deployment_without_a_frozen_set_is_unfrozen() {
    let got = plan(
        &[set("s1", 2, Some("d1"))],
        &[frozen(deployment("d1", 2, 2))],
        &machines("s1", 2),
    );
    assert_eq!(
        got,
        vec![PlannedAction {
            action: freeze(
                dep_t("d1"),
                false,
                c::MACHINE_DEPLOYMENT_STATE_SYNC,
                "MachineDeployment d1 has no frozen MachineSet"
            ),
            after: None,
        }]
    );
}

#[test]
fn a_set_without_a_controller_belongs_to_the_deployment_whose_selector_matches() {
    let mut orphan = set("s1", 2, None);
    orphan["metadata"]["labels"]["dep"] = json!("d1");
    let deployments: Vec<Arc<MachineDeployment>> =
        vec![md(deployment("d0", 1, 1)), md(deployment("d1", 2, 2))];
    let ms: MachineSet = serde_json::from_value(orphan).expect("a set");
    assert_eq!(
        parent_deployment(&ms, &deployments).and_then(|d| d.metadata.name.clone()),
        Some("d1".into())
    );
}

#[test]
fn a_freeze_adds_the_frozen_condition_once_and_an_unfreeze_removes_it() {
    let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    let added = set_conditions_after_freeze(&[], true, "R", "m", now).unwrap_or_default();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].type_, MachineSetConditionType::Frozen);
    assert_eq!(
        (added[0].reason.as_str(), added[0].message.as_str()),
        ("R", "m")
    );
    assert_eq!(
        set_conditions_after_freeze(&added, true, "R", "m", now),
        None
    );
    assert_eq!(
        set_conditions_after_freeze(&added, false, "R", "m", now),
        Some(vec![])
    );
    assert_eq!(set_conditions_after_freeze(&[], false, "R", "m", now), None);
    let dep = deployment_conditions_after_freeze(&[], true, "R", "m", now).unwrap_or_default();
    assert_eq!(dep[0].type_, MachineDeploymentConditionType::Frozen);
    assert_eq!(
        deployment_conditions_after_freeze(&dep, false, "R", "m", now),
        Some(vec![])
    );
}

#[test]
fn frozen_means_the_label_or_the_condition() {
    let labelled: MachineSet = serde_json::from_value(frozen(set("s1", 1, None))).expect("a set");
    assert!(set_is_frozen(&labelled));
    let mut with_condition: MachineSet = serde_json::from_value(set("s1", 1, None)).expect("a set");
    with_condition.status = Some(mcm_api::MachineSetStatus {
        conditions: set_conditions_after_freeze(&[], true, "R", "m", DateTime::UNIX_EPOCH)
            .unwrap_or_default(),
        ..Default::default()
    });
    assert!(set_is_frozen(&with_condition));
    let plain: MachineSet = serde_json::from_value(set("s1", 1, None)).expect("a set");
    assert!(!set_is_frozen(&plain));
    let d: MachineDeployment =
        serde_json::from_value(frozen(deployment("d1", 1, 1))).expect("a deployment");
    assert!(deployment_is_frozen(&d));
}
