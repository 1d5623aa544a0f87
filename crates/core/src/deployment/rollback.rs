//! Rollback to an earlier revision.

use super::*;

/// What a rollback does.
#[derive(Debug, Clone, PartialEq)]
pub enum RollbackDecision {
    /// No set has the revision: warn (`DeploymentRollbackRevisionNotFound`)
    /// and clear `rollbackTo`.
    RevisionNotFound(String),
    /// The set of that revision has the current template: warn
    /// (`DeploymentRollbackTemplateUnchanged`) and clear `rollbackTo`.
    TemplateUnchanged {
        /// The revision.
        revision: i64,
    },
    /// Copy the set's template (without hash label) and annotations into the
    /// deployment and clear `rollbackTo` (`DeploymentRollback`).
    RollBack {
        /// The revision rolled back to.
        revision: i64,
        /// The index of the set.
        set: usize,
        /// The new deployment template.
        template: Box<MachineTemplateSpec>,
        /// The new deployment annotations.
        annotations: BTreeMap<String, String>,
    },
}

/// The rollback decision for `spec.rollbackTo.revision` (0 = the previous
/// revision). When the current template has no set yet, its revision counts
/// as `max + 1`, so "previous" is the newest existing set (what the
/// reference gets by creating the set first; mcm-rs does not create a set
/// for a template it is about to leave).
pub fn rollback_decision(
    to_revision: i64,
    template: &MachineTemplateSpec,
    deployment_annotations: &BTreeMap<String, String>,
    sets: &[SetView],
    part: &Partition,
) -> RollbackDecision {
    let mut target = to_revision;
    if target == 0 {
        let mut revs: Vec<i64> = sets
            .iter()
            .filter_map(|s| revision(&s.annotations))
            .collect();
        if part.new.is_none() {
            revs.push(next_revision(sets));
        }
        target = last_revision(revs);
        if target == 0 {
            return RollbackDecision::RevisionNotFound("Unable to find last revision.".into());
        }
    }
    let Some(i) = sets
        .iter()
        .position(|s| revision(&s.annotations) == Some(target))
    else {
        return RollbackDecision::RevisionNotFound(
            "Unable to find the revision to rollback to.".into(),
        );
    };
    if equal_ignore_hash(&sets[i].template, template) {
        return RollbackDecision::TemplateUnchanged { revision: target };
    }
    RollbackDecision::RollBack {
        revision: target,
        set: i,
        template: Box::new(template_without_hash(&sets[i].template)),
        annotations: rollback_annotations(deployment_annotations, &sets[i].annotations),
    }
}
