//! Claiming: adopt, keep, release or ignore an object by selector and controller reference.

use super::*;

/// The owner that claims (a MachineSet claiming Machines, a MachineDeployment claiming MachineSets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimer<'a> {
    /// The owner's UID.
    pub uid: &'a str,
    /// The owner has a deletion timestamp.
    pub deleting: bool,
}

/// What to do with one candidate object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimAction {
    /// Already ours and matching: it is claimed, nothing to write.
    Keep,
    /// An orphan that matches: set our controller ownerReference, then it is claimed.
    Adopt,
    /// Ours but no longer matching: remove our ownerReference (for real: the
    /// reference's merge patch with `$patch: delete` leaves it in place; design:
    /// sets-and-deployments.md, "Where mcm-rs differs from the reference", item 2).
    /// Not claimed.
    Release,
    /// Not ours to touch (another controller, or not matching, or being deleted).
    Ignore,
}

impl ClaimAction {
    /// Whether the object belongs to the claimer after the action succeeded.
    pub fn is_claimed(self) -> bool {
        matches!(self, ClaimAction::Keep | ClaimAction::Adopt)
    }
}

/// The claim decision for one object (`ClaimObject`).
///
/// `controller` is the object's controller ownerReference, `selection` how
/// the claimer's selector sees the object's labels ([`selection`]),
/// `object_deleting` whether the object has a deletion timestamp.
///
/// One difference from the reference (design: sets-and-deployments.md,
/// "Labels the controllers own"): an object this claimer controls that
/// stopped matching only on a key the controllers own
/// ([`Selection::SelectedButForControllerLabels`]) is kept, never released.
/// The controllers write such labels themselves (the machine controller the
/// real Node name into `node` right after CreateMachine); releasing for them
/// would release every object the claimer created and make it create a
/// replacement on each sync, without bound. Orphans are adopted only when the
/// selector matches outright.
pub fn claim(
    claimer: Claimer<'_>,
    controller: Option<&ControllerRef>,
    selection: Selection,
    object_deleting: bool,
) -> ClaimAction {
    match (controller, selection) {
        (Some(c), _) if c.uid != claimer.uid => ClaimAction::Ignore,
        (Some(_), Selection::Selected | Selection::SelectedButForControllerLabels) => {
            ClaimAction::Keep
        }
        (Some(_), Selection::NotSelected) if claimer.deleting => ClaimAction::Ignore,
        (Some(_), Selection::NotSelected) => ClaimAction::Release,
        (None, _) if claimer.deleting || !selection.is_selected() || object_deleting => {
            ClaimAction::Ignore
        }
        (None, _) => ClaimAction::Adopt,
    }
}
