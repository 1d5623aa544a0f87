//! Auto-preservation of Failed machines.

use super::*;

/// Annotation changes of the auto-preservation bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoPreservePlan {
    /// Machines to annotate `preserve=auto-preserved`.
    pub annotate: Vec<String>,
    /// Machines whose `preserve=auto-preserved` annotation is removed.
    pub unannotate: Vec<String>,
}

/// Which machines get or lose `preserve=auto-preserved`
/// (`manageAutoPreservationOfFailedMachines`).
///
/// `max` is `spec.autoPreserveFailedMachineMax`, `current` the status's
/// `autoPreserveFailedMachineCount`. With capacity left, the newest Failed
/// machines without a recognised preserve value are annotated; over the
/// limit, the oldest auto-preserved machines lose the annotation. Explicitly
/// preserved machines are never touched.
pub fn auto_preservation(max: i32, current: i32, machines: &[MachineView]) -> AutoPreservePlan {
    let remaining = i64::from(max) - i64::from(current);
    let mut plan = AutoPreservePlan::default();
    if remaining == 0 {
        return plan;
    }
    if remaining < 0 {
        let mut auto: Vec<&MachineView> =
            machines.iter().filter(|m| m.is_auto_preserved()).collect();
        auto.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
        let n = usize::try_from(-remaining).unwrap_or(usize::MAX);
        plan.unannotate = auto.into_iter().take(n).map(|m| m.name.clone()).collect();
        return plan;
    }
    let allowed = [
        keys::PRESERVE_NOW,
        keys::PRESERVE_WHEN_FAILED,
        keys::PRESERVE_AUTO,
        keys::PRESERVE_FALSE,
    ];
    let mut candidates: Vec<&MachineView> = machines
        .iter()
        .filter(|m| {
            m.phase == MachinePhase::Failed
                && !m.is_deleting()
                && !allowed.contains(
                    &m.annotations
                        .get(keys::PRESERVE)
                        .map(String::as_str)
                        .unwrap_or(""),
                )
        })
        .collect();
    candidates.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| a.name.cmp(&b.name)));
    let n = usize::try_from(remaining).unwrap_or(usize::MAX);
    plan.annotate = candidates
        .into_iter()
        .take(n)
        .map(|m| m.name.clone())
        .collect();
    plan
}

impl AutoPreservePlan {
    /// Applies the plan to the views, as the writes will, so that the same
    /// pass's replica decision sees the new annotations.
    pub fn apply(&self, machines: &mut [MachineView]) {
        for m in machines.iter_mut() {
            if self.annotate.contains(&m.name) {
                m.annotations
                    .insert(keys::PRESERVE.to_string(), keys::PRESERVE_AUTO.to_string());
            }
            if self.unannotate.contains(&m.name) {
                m.annotations.remove(keys::PRESERVE);
            }
        }
    }
}
