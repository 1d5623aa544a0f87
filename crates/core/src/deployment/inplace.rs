//! The InPlaceUpdate strategy of a MachineDeployment, without I/O (design:
//! sets-and-deployments.md, "In-place updates").
//!
//! Machines are not replaced: the new MachineSet (new template) gets the old
//! machines once a node agent has updated their Nodes. The protocol is
//! carried by Node labels and the Node's `InPlaceUpdate` condition:
//!
//! 1. old sets get `node.machine.sapcloud.io/scale-up-disabled` (they never
//!    create replacements) and the Nodes of their machines
//!    `candidate-for-update`;
//! 2. Auto orchestration selects machines within `maxUnavailable`
//!    (`selected-for-update` on their Nodes, [`old_sets_step`]); with Manual
//!    orchestration the operator does;
//! 3. the machine controller drains a selected Node and the agent updates it
//!    (`update-result=successful`), see [`crate::machine::inplace`];
//! 4. updated machines move to the new set (owner reference and selector
//!    labels, [`new_set_step`]); the old set shrinks, the new one grows by
//!    the same number, so no machine is created or deleted;
//! 5. the new set's Nodes lose the protocol labels, are uncordoned and get
//!    the `critical-components-not-ready` taint ([`sync_sets`]).
//!
//! Surge (`maxSurge`) machines are created in the new set as usual; old
//! machines left over once the new set has `replicas` are removed with their
//! set scaled to 0.

use super::*;

/// What the in-place rollout knows about one machine of the deployment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InPlaceMachine {
    /// `metadata.name`.
    pub name: String,
    /// The set (index into the deployment's sets) whose selector matches it.
    pub set: Option<usize>,
    /// `status.currentStatus.phase` is `InPlaceUpdating`.
    pub updating: bool,
    /// The reason of the machine's own `InPlaceUpdate` condition (copied from its Node).
    pub condition: Option<String>,
    /// The machine carries `update-result=successful`.
    pub result_label: bool,
    /// Its Node, when it has one and the Node exists.
    pub node: Option<InPlaceNode>,
}

/// What the in-place rollout knows about a Node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InPlaceNode {
    /// `metadata.name`.
    pub name: String,
    /// Carries `candidate-for-update`.
    pub candidate: bool,
    /// Carries `selected-for-update`.
    pub selected: bool,
    /// The value of `update-result`, when set.
    pub result: Option<String>,
    /// The reason of the Node's `InPlaceUpdate` condition.
    pub condition: Option<String>,
}

impl InPlaceMachine {
    fn in_set(&self, i: usize) -> bool {
        self.set == Some(i)
    }

    /// `!isUpdateNotSuccessful`: the machine's condition says UpdateSuccessful
    /// and its Node carries `update-result=successful`.
    fn updated(&self) -> bool {
        self.condition.as_deref() == Some(c::IN_PLACE_UPDATE_SUCCESSFUL)
            && self.node.as_ref().and_then(|n| n.result.as_deref())
                == Some(c::NODE_UPDATE_RESULT_SUCCESSFUL)
    }
}

impl InPlaceNode {
    /// The Node finished its update: condition UpdateSuccessful and `update-result=successful`.
    pub fn updated(&self) -> bool {
        self.condition.as_deref() == Some(c::IN_PLACE_UPDATE_SUCCESSFUL)
            && self.result.as_deref() == Some(c::NODE_UPDATE_RESULT_SUCCESSFUL)
    }
}

/// The inputs of one in-place pass.
#[derive(Debug, Clone, Copy)]
pub struct InPlaceFacts<'a> {
    /// `spec.replicas` of the deployment.
    pub replicas: i32,
    /// The resolved in-place `maxUnavailable` ([`Strategy::max_unavailable`]).
    pub max_unavailable: i32,
    /// `orchestrationType: Manual`.
    pub manual: bool,
    /// The deployment's sets.
    pub sets: &'a [SetView],
    /// New and old sets.
    pub part: &'a Partition,
    /// The deployment's machines.
    pub machines: &'a [InPlaceMachine],
}

/// Old sets that still need the `scale-up-disabled` label: all of them while
/// some old set still has replicas or machines.
pub fn sets_to_disable_scale_up(sets: &[SetView], part: &Partition) -> Vec<usize> {
    if part.old.is_empty() || sets_scaled_to_zero(part.old.iter().map(|&i| &sets[i])) {
        return Vec::new();
    }
    part.old
        .iter()
        .copied()
        .filter(|&i| !sets[i].labels.contains_key(c::SCALE_UP_DISABLED_LABEL))
        .collect()
}

/// Nodes of old sets' machines that still need `candidate-for-update`.
pub fn nodes_to_mark_candidate(f: &InPlaceFacts) -> Vec<String> {
    f.machines
        .iter()
        .filter(|m| m.set.is_some_and(|s| f.part.old.contains(&s)))
        .filter_map(|m| m.node.as_ref())
        .filter(|n| !n.candidate)
        .map(|n| n.name.clone())
        .collect()
}

/// The bookkeeping of `syncMachineSets`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetsSync {
    /// The new set's raised size: it holds more machines than its spec
    /// (machines just moved over).
    pub new_size: Option<i32>,
    /// Machines of the new set whose `update-result` label goes away.
    pub strip_machine_labels: Vec<String>,
    /// Updated Nodes of the new set: drop the protocol labels and the
    /// failure annotation, uncordon, drop prefer-no-schedule, add the
    /// `critical-components-not-ready` taint.
    pub finish_nodes: Vec<String>,
    /// Old sets holding fewer machines than their spec, with that count.
    pub shrink_old: Vec<(usize, i32)>,
}

impl SetsSync {
    /// Whether nothing is to be written.
    pub fn is_empty(&self) -> bool {
        *self == SetsSync::default()
    }
}

/// `syncMachineSets`: sizes and labels after machines moved to the new set.
pub fn sync_sets(f: &InPlaceFacts) -> SetsSync {
    let mut out = SetsSync::default();
    if let Some(n) = f.part.new {
        let members: Vec<&InPlaceMachine> = f.machines.iter().filter(|m| m.in_set(n)).collect();
        let updated: Vec<&&InPlaceMachine> = members
            .iter()
            .filter(|m| {
                m.result_label && m.condition.as_deref() == Some(c::IN_PLACE_UPDATE_SUCCESSFUL)
            })
            .collect();
        let count = i32::try_from(members.len()).unwrap_or(i32::MAX);
        let spec = f.sets[n].replicas;
        if count > spec && !updated.is_empty() {
            let by = i32::try_from(updated.len())
                .unwrap_or(i32::MAX)
                .min(count - spec);
            out.new_size = Some(spec.saturating_add(by));
        }
        out.strip_machine_labels = updated.iter().map(|m| m.name.clone()).collect();
        out.finish_nodes = members
            .iter()
            .filter_map(|m| m.node.as_ref())
            .filter(|n| n.updated())
            .map(|n| n.name.clone())
            .collect();
    }
    for &i in &f.part.old {
        let count = f.machines.iter().filter(|m| m.in_set(i)).count();
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        if count < f.sets[i].replicas {
            out.shrink_old.push((i, count));
        }
    }
    out
}

/// A machine moving from an old set to the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The machine.
    pub machine: String,
    /// The old set it leaves.
    pub from: usize,
}

/// What `reconcileNewMachineSetInPlace` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewSetStep {
    /// Nothing.
    Nothing,
    /// Set the new set's size.
    Scale(i32),
    /// Move updated machines over, then shrink their old sets and grow the
    /// new one by as many (`old_sizes`, `new_size`).
    Transfer {
        /// The machines to move.
        moves: Vec<Move>,
        /// The old sets' sizes after the move.
        old_sizes: Vec<(usize, i32)>,
        /// The new set's size after the move.
        new_size: i32,
    },
}

fn old_spec_total(f: &InPlaceFacts) -> i32 {
    f.part
        .old
        .iter()
        .map(|&i| f.sets[i].replicas)
        .fold(0i32, i32::saturating_add)
}

/// `reconcileNewMachineSetInPlace`: the new set takes the updated machines.
pub fn new_set_step(f: &InPlaceFacts) -> NewSetStep {
    let Some(n) = f.part.new else {
        return NewSetStep::Nothing;
    };
    let new = f.sets[n].replicas;
    match new.cmp(&f.replicas) {
        Ordering::Equal => return NewSetStep::Nothing,
        Ordering::Greater => return NewSetStep::Scale(f.replicas),
        Ordering::Less => {}
    }
    let old = old_spec_total(f);
    if old == 0 {
        return NewSetStep::Scale(f.replicas);
    }
    if old.saturating_add(new) < f.replicas {
        return NewSetStep::Scale(f.replicas - old);
    }
    let mut moves = Vec::new();
    let mut old_sizes = Vec::new();
    for &i in &f.part.old {
        let before = moves.len();
        for m in f.machines.iter().filter(|m| m.in_set(i)) {
            if m.node.is_some() && m.updated() && !m.updating {
                moves.push(Move {
                    machine: m.name.clone(),
                    from: i,
                });
            }
        }
        let moved = i32::try_from(moves.len() - before).unwrap_or(i32::MAX);
        if moved > 0 {
            old_sizes.push((i, f.sets[i].replicas.saturating_sub(moved).max(0)));
        }
    }
    if moves.is_empty() {
        return NewSetStep::Nothing;
    }
    let total = i32::try_from(moves.len()).unwrap_or(i32::MAX);
    NewSetStep::Transfer {
        moves,
        old_sizes,
        new_size: new.saturating_add(total),
    }
}

/// What `reconcileOldMachineSetsInPlace` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldSetsStep {
    /// Nothing (Manual orchestration, or no room within maxUnavailable).
    Nothing,
    /// The new set is full: scale these old sets to 0 (surge leftovers).
    ScaleToZero(Vec<usize>),
    /// Label these machines' Nodes `selected-for-update`.
    Select(Vec<String>),
}

/// `reconcileOldMachineSetsInPlace`: with Auto orchestration, select old
/// machines for update without more than `maxUnavailable` machines of the
/// deployment unavailable or updating at once.
pub fn old_sets_step(f: &InPlaceFacts) -> OldSetsStep {
    let Some(n) = f.part.new else {
        return OldSetsStep::Nothing;
    };
    let active: Vec<usize> = f
        .part
        .old
        .iter()
        .copied()
        .filter(|&i| f.sets[i].replicas > 0)
        .collect();
    if old_spec_total(f) == 0 || active.is_empty() {
        return OldSetsStep::Nothing;
    }
    let new = &f.sets[n];
    if new.replicas == f.replicas {
        return OldSetsStep::ScaleToZero(active);
    }
    if f.manual {
        return OldSetsStep::Nothing;
    }
    let all = f
        .sets
        .iter()
        .map(|s| s.replicas)
        .fold(0i32, i32::saturating_add);
    let min_available = f.replicas - f.max_unavailable;
    let new_unavailable = (new.replicas - new.status.available_replicas).max(0);
    let undergoing = f
        .machines
        .iter()
        .filter(|m| m.set.is_some_and(|s| active.contains(&s)))
        .filter(|m| m.node.as_ref().is_some_and(|n| n.selected))
        .count();
    let undergoing = i32::try_from(undergoing).unwrap_or(i32::MAX);
    if undergoing.saturating_add(new.replicas) >= f.replicas {
        return OldSetsStep::Nothing;
    }
    if all - min_available - new_unavailable - undergoing <= 0 {
        return OldSetsStep::Nothing;
    }
    let available = f
        .sets
        .iter()
        .map(|s| s.status.available_replicas)
        .fold(0i32, i32::saturating_add)
        - undergoing;
    if available <= min_available {
        return OldSetsStep::Nothing;
    }
    let max_selectable = (available - min_available).min((f.replicas - new.replicas).max(0));
    let mut selected: Vec<String> = Vec::new();
    for i in active {
        let room = max_selectable - i32::try_from(selected.len()).unwrap_or(i32::MAX);
        if room <= 0 {
            break;
        }
        let take = usize::try_from(f.sets[i].replicas.min(room)).unwrap_or(0);
        selected.extend(
            f.machines
                .iter()
                .filter(|m| m.in_set(i))
                .filter(|m| m.node.as_ref().is_some_and(|n| n.candidate && !n.selected))
                .take(take)
                .map(|m| m.name.clone()),
        );
    }
    if selected.is_empty() {
        OldSetsStep::Nothing
    } else {
        OldSetsStep::Select(selected)
    }
}

/// The labels of a machine moving to the new set: its own labels without the
/// old set's selector keys, plus the new set's selector labels and
/// `update-result=successful` (the new set's pass strips that one again).
pub fn moved_machine_labels(
    machine: &BTreeMap<String, String>,
    old_selector: &BTreeMap<String, String>,
    new_selector: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = machine
        .iter()
        .filter(|(k, _)| !old_selector.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(new_selector.iter().map(|(k, v)| (k.clone(), v.clone())));
    out.insert(
        c::NODE_UPDATE_RESULT_LABEL.into(),
        c::NODE_UPDATE_RESULT_SUCCESSFUL.into(),
    );
    out
}

#[cfg(test)]
#[path = "inplace_tests.rs"]
mod tests;
