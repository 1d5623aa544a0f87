use super::*;

fn set(name: &str, replicas: i32, available: i32, minute: i64) -> SetView {
    SetView {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: DateTime::from_timestamp(minute * 60, 0),
        replicas,
        status: SetStatusView {
            replicas,
            available_replicas: available,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn machine(name: &str, set: usize) -> InPlaceMachine {
    InPlaceMachine {
        name: name.into(),
        set: Some(set),
        node: Some(InPlaceNode {
            name: format!("node-{name}"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn candidate(mut m: InPlaceMachine) -> InPlaceMachine {
    if let Some(n) = m.node.as_mut() {
        n.candidate = true;
    }
    m
}

fn selected(mut m: InPlaceMachine) -> InPlaceMachine {
    if let Some(n) = m.node.as_mut() {
        n.candidate = true;
        n.selected = true;
    }
    m
}

fn updated(mut m: InPlaceMachine) -> InPlaceMachine {
    m.condition = Some(c::IN_PLACE_UPDATE_SUCCESSFUL.into());
    if let Some(n) = m.node.as_mut() {
        n.candidate = true;
        n.selected = true;
        n.result = Some(c::NODE_UPDATE_RESULT_SUCCESSFUL.into());
        n.condition = Some(c::IN_PLACE_UPDATE_SUCCESSFUL.into());
    }
    m
}

/// Sets: 0 = old (3 machines), 1 = new.
fn facts<'a>(
    sets: &'a [SetView],
    part: &'a Partition,
    machines: &'a [InPlaceMachine],
    max_unavailable: i32,
    manual: bool,
) -> InPlaceFacts<'a> {
    InPlaceFacts {
        replicas: 3,
        max_unavailable,
        manual,
        sets,
        part,
        machines,
    }
}

fn part() -> Partition {
    Partition {
        new: Some(1),
        old: vec![0],
    }
}

#[test]
fn auto_orchestration_selects_max_unavailable_candidates_at_a_time() {
    let sets = [set("old", 3, 3, 0), set("new", 0, 0, 1)];
    let p = part();
    let ms = [
        candidate(machine("a", 0)),
        candidate(machine("b", 0)),
        candidate(machine("c", 0)),
    ];
    assert_eq!(
        old_sets_step(&facts(&sets, &p, &ms, 1, false)),
        OldSetsStep::Select(vec!["a".into()])
    );
    assert_eq!(
        old_sets_step(&facts(&sets, &p, &ms, 2, false)),
        OldSetsStep::Select(vec!["a".into(), "b".into()])
    );
}

#[test]
fn a_selected_machine_uses_up_the_unavailability_budget() {
    let sets = [set("old", 3, 3, 0), set("new", 0, 0, 1)];
    let p = part();
    let ms = [
        selected(machine("a", 0)),
        candidate(machine("b", 0)),
        candidate(machine("c", 0)),
    ];
    assert_eq!(
        old_sets_step(&facts(&sets, &p, &ms, 1, false)),
        OldSetsStep::Nothing
    );
}

#[test]
fn machines_whose_nodes_are_not_yet_candidates_are_not_selected() {
    let sets = [set("old", 3, 3, 0), set("new", 0, 0, 1)];
    let p = part();
    let ms = [machine("a", 0), machine("b", 0), machine("c", 0)];
    assert_eq!(
        old_sets_step(&facts(&sets, &p, &ms, 1, false)),
        OldSetsStep::Nothing
    );
    assert_eq!(
        nodes_to_mark_candidate(&facts(&sets, &p, &ms, 1, false)),
        vec!["node-a", "node-b", "node-c"]
    );
}

#[test]
fn manual_orchestration_never_selects() {
    let sets = [set("old", 3, 3, 0), set("new", 0, 0, 1)];
    let p = part();
    let ms = [
        candidate(machine("a", 0)),
        candidate(machine("b", 0)),
        candidate(machine("c", 0)),
    ];
    assert_eq!(
        old_sets_step(&facts(&sets, &p, &ms, 1, true)),
        OldSetsStep::Nothing
    );
}

#[test]
fn an_unavailable_new_machine_blocks_selection() {
    // maxSurge 1 created a new machine that is not available yet.
    let sets = [set("old", 3, 3, 0), set("new", 1, 0, 1)];
    let p = part();
    let ms = [
        candidate(machine("a", 0)),
        candidate(machine("b", 0)),
        candidate(machine("c", 0)),
    ];
    assert_eq!(
        old_sets_step(&facts(&sets, &p, &ms, 0, false)),
        OldSetsStep::Nothing
    );
    let ready = [set("old", 3, 3, 0), set("new", 1, 1, 1)];
    assert_eq!(
        old_sets_step(&facts(&ready, &p, &ms, 0, false)),
        OldSetsStep::Select(vec!["a".into()])
    );
}

#[test]
fn an_updated_machine_moves_to_the_new_set_without_changing_the_total() {
    let sets = [set("old", 3, 2, 0), set("new", 0, 0, 1)];
    let p = part();
    let ms = [
        updated(machine("a", 0)),
        candidate(machine("b", 0)),
        candidate(machine("c", 0)),
    ];
    assert_eq!(
        new_set_step(&facts(&sets, &p, &ms, 1, false)),
        NewSetStep::Transfer {
            moves: vec![Move {
                machine: "a".into(),
                from: 0
            }],
            old_sizes: vec![(0, 2)],
            new_size: 1,
        }
    );
}

#[test]
fn a_machine_still_updating_is_not_moved() {
    let sets = [set("old", 3, 2, 0), set("new", 0, 0, 1)];
    let p = part();
    let mut a = updated(machine("a", 0));
    a.updating = true;
    let ms = [a, candidate(machine("b", 0)), candidate(machine("c", 0))];
    assert_eq!(
        new_set_step(&facts(&sets, &p, &ms, 1, false)),
        NewSetStep::Nothing
    );
}

#[test]
fn the_new_set_is_filled_when_old_sets_lack_machines() {
    let sets = [set("old", 1, 1, 0), set("new", 1, 1, 1)];
    let p = part();
    assert_eq!(
        new_set_step(&facts(&sets, &p, &[], 1, false)),
        NewSetStep::Scale(2)
    );
    let none_old = [set("old", 0, 0, 0), set("new", 1, 1, 1)];
    assert_eq!(
        new_set_step(&facts(&none_old, &p, &[], 1, false)),
        NewSetStep::Scale(3)
    );
}

#[test]
fn moved_machines_raise_the_new_set_and_get_their_labels_cleaned_up() {
    let sets = [set("old", 2, 2, 0), set("new", 0, 0, 1)];
    let p = part();
    let mut a = updated(machine("a", 1));
    a.result_label = true;
    let ms = [a, candidate(machine("b", 0)), candidate(machine("c", 0))];
    let s = sync_sets(&facts(&sets, &p, &ms, 1, false));
    assert_eq!(s.new_size, Some(1));
    assert_eq!(s.strip_machine_labels, vec!["a"]);
    assert_eq!(s.finish_nodes, vec!["node-a"]);
    assert!(s.shrink_old.is_empty());
}

#[test]
fn old_sets_shrink_to_the_machines_they_still_hold() {
    let sets = [set("old", 3, 2, 0), set("new", 1, 1, 1)];
    let p = part();
    let ms = [
        machine("a", 1),
        candidate(machine("b", 0)),
        candidate(machine("c", 0)),
    ];
    let s = sync_sets(&facts(&sets, &p, &ms, 1, false));
    assert_eq!(s.shrink_old, vec![(0, 2)]);
}

#[test]
fn a_full_new_set_scales_the_leftover_old_sets_to_zero() {
    let sets = [set("old", 1, 1, 0), set("new", 3, 3, 1)];
    let p = part();
    assert_eq!(
        old_sets_step(&facts(&sets, &p, &[], 1, false)),
        OldSetsStep::ScaleToZero(vec![0])
    );
}

#[test]
fn old_sets_get_scale_up_disabled_while_they_hold_machines() {
    let sets = [set("old", 3, 3, 0), set("new", 0, 0, 1)];
    assert_eq!(sets_to_disable_scale_up(&sets, &part()), vec![0]);
    let mut labelled = sets.clone();
    labelled[0]
        .labels
        .insert(c::SCALE_UP_DISABLED_LABEL.into(), "true".into());
    assert!(sets_to_disable_scale_up(&labelled, &part()).is_empty());
    let empty = [set("old", 0, 0, 0), set("new", 3, 3, 1)];
    assert!(sets_to_disable_scale_up(&empty, &part()).is_empty());
}

#[test]
fn a_moved_machine_takes_the_new_selector_and_keeps_its_own_labels() {
    let m: BTreeMap<String, String> =
        [("name", "d"), (c::TEMPLATE_HASH_LABEL, "1"), ("node", "n1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let old: BTreeMap<String, String> = [("name", "d"), (c::TEMPLATE_HASH_LABEL, "1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut new = old.clone();
    new.insert(c::TEMPLATE_HASH_LABEL.into(), "2".into());
    let out = moved_machine_labels(&m, &old, &new);
    assert_eq!(
        out.get(c::TEMPLATE_HASH_LABEL).map(String::as_str),
        Some("2")
    );
    assert_eq!(out.get("node").map(String::as_str), Some("n1"));
    assert_eq!(out.get("name").map(String::as_str), Some("d"));
    assert_eq!(
        out.get(c::NODE_UPDATE_RESULT_LABEL).map(String::as_str),
        Some(c::NODE_UPDATE_RESULT_SUCCESSFUL)
    );
}
