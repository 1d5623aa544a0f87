//! Which phase changes of a Machine are announced as an Event (design:
//! machine.md, "Requests per machine").

use super::Phase;

/// The Event a phase change is announced with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseEvent {
    /// A Normal Event (Available, Running, the in-place phases).
    Normal,
    /// A Warning Event: the machine is failing or its Node is unhealthy.
    Warning,
}

/// The Event for a change into `phase`, if any.
///
/// The two phases every machine passes on its way in and out get none:
/// - `Pending`: the MachineSet's `SuccessfulCreate` Event (the reference's)
///   tells the creation; the Running (or failure) Event that follows names
///   the VM, and the lastOperation shows each creation step;
/// - `Terminating`: the deletion is a user's or a MachineSet's act, and the
///   MachineSet's `SuccessfulDelete` Event tells it; the lastOperation shows
///   each deletion step.
///
/// Every other phase change is announced once.
pub fn phase_event(phase: &Phase) -> Option<PhaseEvent> {
    match phase {
        Phase::Pending | Phase::Terminating => None,
        Phase::Failed | Phase::CrashLoopBackOff | Phase::Unknown => Some(PhaseEvent::Warning),
        _ => Some(PhaseEvent::Normal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entering_pending_or_terminating_is_not_announced() {
        assert_eq!(phase_event(&Phase::Pending), None);
        assert_eq!(phase_event(&Phase::Terminating), None);
    }

    #[test]
    fn failing_phases_are_warnings_and_the_others_normal() {
        for p in [Phase::Failed, Phase::CrashLoopBackOff, Phase::Unknown] {
            assert_eq!(phase_event(&p), Some(PhaseEvent::Warning), "{p}");
        }
        for p in [Phase::Available, Phase::Running] {
            assert_eq!(phase_event(&p), Some(PhaseEvent::Normal), "{p}");
        }
    }
}
