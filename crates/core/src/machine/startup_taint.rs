//! The startup taint: when the controller may remove it from a machine's Node
//! (design: startup-taint.md).
//!
//! A Node registers with the `NoSchedule` taint
//! [`mcm_api::constants::STARTUP_TAINT_KEY`] (or the key of
//! `--node-startup-taint-key`), so that no pod without a toleration is bound
//! to it before the controller has initialized its VM and put the Machine's
//! node template on it. [`startup_taint`] decides, from the Machine and what
//! the runtime sees on the Node, whether the taint may go; the runtime removes
//! it with a resourceVersion-guarded write. While the taint is on the Node the
//! health check does not promote the machine to Running
//! ([`super::health`] with [`super::NodeView::startup_taint`]).

use super::{MachineView, Phase};
use k8s_openapi::api::core::v1::Taint;

/// The effect of the startup taint.
pub const STARTUP_TAINT_EFFECT: &str = "NoSchedule";

/// What the runtime sees of the Node, for the startup taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupTaintNode {
    /// The Node carries the startup taint (key and effect `NoSchedule`).
    pub tainted: bool,
    /// The Machine's node template (labels, annotations, taints) and the
    /// node-sync bookkeeping are on the Node: node sync has nothing left to
    /// write ([`crate::node_template::template_applied`]).
    pub template_applied: bool,
    /// The Machine's node template lists the startup taint itself: then it
    /// is the template's taint, node sync keeps it and it is never removed.
    pub template_lists_taint: bool,
}

impl StartupTaintNode {
    /// Reads the taint facts of a Node's taint list.
    pub fn of(
        key: &str,
        node_taints: &[Taint],
        template_taints: &[Taint],
        template_applied: bool,
    ) -> Self {
        StartupTaintNode {
            tainted: has_startup_taint(key, node_taints),
            template_applied,
            template_lists_taint: has_startup_taint(key, template_taints),
        }
    }
}

/// Whether `taints` hold the startup taint `key` with effect `NoSchedule`.
pub fn has_startup_taint(key: &str, taints: &[Taint]) -> bool {
    taints
        .iter()
        .any(|t| t.key == key && t.effect == STARTUP_TAINT_EFFECT)
}

/// `taints` without the startup taint `key` (effect `NoSchedule`), in order.
pub fn without_startup_taint(key: &str, taints: &[Taint]) -> Vec<Taint> {
    taints
        .iter()
        .filter(|t| !(t.key == key && t.effect == STARTUP_TAINT_EFFECT))
        .cloned()
        .collect()
}

/// Why the startup taint stays on the Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepReason {
    /// InitializeMachine has not succeeded (nor answered `Unimplemented`) yet:
    /// the creation flow has not written the created phase, or its last
    /// InitializeMachine failed.
    NotInitialized,
    /// The node template is not (yet) on the Node.
    TemplateNotApplied,
    /// The machine is being deleted or has Failed: its Node is not to get work.
    NotServing,
}

impl KeepReason {
    /// The text for status, Events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            KeepReason::NotInitialized => "InitializeMachine has not succeeded yet",
            KeepReason::TemplateNotApplied => {
                "the node template's labels, annotations and taints are not on the Node yet"
            }
            KeepReason::NotServing => "the machine is failed or being deleted",
        }
    }
}

/// The startup-taint decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupTaint {
    /// The Node does not carry the taint: nothing to do (as without the feature).
    Absent,
    /// The taint is the node template's own: node sync owns it, it stays and
    /// does not hold the machine.
    TemplateOwned,
    /// Remove the taint now.
    Remove,
    /// Keep it, for this reason.
    Keep(KeepReason),
}

impl StartupTaint {
    /// Whether the machine must stay out of Running because of the taint.
    pub fn holds_machine(self) -> bool {
        matches!(self, StartupTaint::Remove | StartupTaint::Keep(_))
    }
}

/// Whether the machine's InitializeMachine succeeded or answered
/// `Unimplemented`: the creation flow writes a created phase (Pending,
/// Available) only after that, and every later phase follows one; a last
/// operation that is a failed InitializeMachine means it has not.
pub fn initialized(m: &MachineView) -> bool {
    let phase_after_init = matches!(
        m.phase,
        Phase::Pending
            | Phase::Available
            | Phase::Running
            | Phase::Unknown
            | Phase::InPlaceUpdating
            | Phase::InPlaceUpdateSuccessful
            | Phase::InPlaceUpdateFailed
    );
    phase_after_init && !m.initialization_failed()
}

/// May the startup taint go (design: startup-taint.md, "The decision")?
///
/// Only when the Node carries it, the node template does not list it, the
/// machine is not being deleted or Failed, InitializeMachine succeeded (or
/// answered `Unimplemented`), **and** the template is on the Node.
pub fn startup_taint(m: &MachineView, node: &StartupTaintNode) -> StartupTaint {
    if !node.tainted {
        return StartupTaint::Absent;
    }
    if node.template_lists_taint {
        return StartupTaint::TemplateOwned;
    }
    if m.is_deleting() || matches!(m.phase, Phase::Failed | Phase::Terminating) {
        return StartupTaint::Keep(KeepReason::NotServing);
    }
    if !initialized(m) {
        return StartupTaint::Keep(KeepReason::NotInitialized);
    }
    if !node.template_applied {
        return StartupTaint::Keep(KeepReason::TemplateNotApplied);
    }
    StartupTaint::Remove
}

/// Whether node sync removes the startup taint in its own write: everything
/// but the node template already allows the removal, and the sync puts the
/// template on the Node in that very write. One Node write instead of two,
/// and the taint never outlives the labels it waited for (design:
/// startup-taint.md, "Removal").
pub fn removed_with_sync(m: &MachineView, node: &StartupTaintNode) -> bool {
    let synced = StartupTaintNode {
        template_applied: true,
        ..*node
    };
    startup_taint(m, &synced) == StartupTaint::Remove
}

/// The `lastOperation` description of a Pending machine held by the startup
/// taint (the reason is visible in status).
pub fn held_description(node: &str, key: &str, why: &str) -> String {
    format!("Node {node} carries the startup taint {key}:NoSchedule; the machine is not Running until it is removed: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_api::{MachineOperationType as OpType, MachineState as OpState};

    const KEY: &str = mcm_api::constants::STARTUP_TAINT_KEY;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn node(tainted: bool, template_applied: bool) -> StartupTaintNode {
        StartupTaintNode {
            tainted,
            template_applied,
            template_lists_taint: false,
        }
    }

    fn pending() -> MachineView {
        MachineView::test("m1", Phase::Pending)
            .on_node("n1")
            .last_op(
                "Creating machine on cloud provider",
                OpState::Processing,
                OpType::Create,
            )
    }

    #[test]
    fn a_node_without_the_taint_needs_nothing() {
        assert_eq!(
            startup_taint(&pending(), &node(false, false)),
            StartupTaint::Absent
        );
        assert!(!StartupTaint::Absent.holds_machine());
    }

    #[test]
    fn initialized_machine_with_template_on_the_node_may_drop_the_taint() {
        let d = startup_taint(&pending(), &node(true, true));
        assert_eq!(d, StartupTaint::Remove);
        assert!(d.holds_machine(), "held until the removal is written");
    }

    #[test]
    fn the_taint_stays_until_the_template_is_on_the_node() {
        assert_eq!(
            startup_taint(&pending(), &node(true, false)),
            StartupTaint::Keep(KeepReason::TemplateNotApplied)
        );
    }

    /// A machine whose last InitializeMachine failed (CrashLoopBackOff).
    fn initialization_failing() -> MachineView {
        MachineView::test("m1", Phase::CrashLoopBackOff)
            .on_node("n1")
            .last_op(
                &format!(
                    "Provider error: boom. {}",
                    super::super::markers::INSTANCE_INITIALIZATION
                ),
                OpState::Failed,
                OpType::Create,
            )
    }

    #[test]
    fn the_taint_stays_while_initialize_machine_fails() {
        let m = initialization_failing();
        assert!(
            m.initialization_failed(),
            "fixture uses the contract marker"
        );
        assert_eq!(
            startup_taint(&m, &node(true, true)),
            StartupTaint::Keep(KeepReason::NotInitialized)
        );
    }

    #[test]
    fn the_taint_stays_before_the_creation_flow_wrote_the_created_phase() {
        for phase in [Phase::Empty, Phase::CrashLoopBackOff] {
            let m = MachineView::test("m1", phase).on_node("n1");
            assert_eq!(
                startup_taint(&m, &node(true, true)),
                StartupTaint::Keep(KeepReason::NotInitialized)
            );
        }
    }

    #[test]
    fn running_and_unknown_machines_drop_a_reappeared_taint() {
        for phase in [
            Phase::Running,
            Phase::Unknown,
            Phase::InPlaceUpdateSuccessful,
        ] {
            let m = MachineView::test("m1", phase).on_node("n1");
            assert_eq!(startup_taint(&m, &node(true, true)), StartupTaint::Remove);
        }
    }

    #[test]
    fn failed_or_deleting_machines_keep_the_taint() {
        let failed = MachineView::test("m1", Phase::Failed).on_node("n1");
        assert_eq!(
            startup_taint(&failed, &node(true, true)),
            StartupTaint::Keep(KeepReason::NotServing)
        );
        let deleting = MachineView {
            deleting_since: Some(chrono::Utc::now()),
            ..MachineView::test("m1", Phase::Running).on_node("n1")
        };
        assert_eq!(
            startup_taint(&deleting, &node(true, true)),
            StartupTaint::Keep(KeepReason::NotServing)
        );
    }

    #[test]
    fn a_taint_the_template_lists_belongs_to_node_sync() {
        let n = StartupTaintNode::of(
            KEY,
            &[taint(KEY, "NoSchedule")],
            &[taint(KEY, "NoSchedule")],
            true,
        );
        assert_eq!(startup_taint(&pending(), &n), StartupTaint::TemplateOwned);
        assert!(!StartupTaint::TemplateOwned.holds_machine());
    }

    #[test]
    fn only_the_no_schedule_taint_with_the_key_counts_and_is_removed() {
        let taints = vec![
            taint("a", "NoExecute"),
            taint(KEY, "NoExecute"),
            taint(KEY, "NoSchedule"),
            taint("b", "NoSchedule"),
        ];
        assert!(has_startup_taint(KEY, &taints));
        assert!(!has_startup_taint(KEY, &taints[..2]));
        let rest = without_startup_taint(KEY, &taints);
        assert_eq!(
            rest,
            vec![
                taint("a", "NoExecute"),
                taint(KEY, "NoExecute"),
                taint("b", "NoSchedule")
            ]
        );
    }

    #[test]
    fn the_taint_goes_with_the_node_sync_write_once_only_the_template_is_missing() {
        let m = pending();
        assert!(removed_with_sync(&m, &node(true, false)));
        assert!(removed_with_sync(&m, &node(true, true)));
    }

    #[test]
    fn the_taint_never_goes_with_the_sync_of_an_uninitialized_failed_or_untainted_node() {
        let crashing = initialization_failing();
        assert!(!removed_with_sync(&crashing, &node(true, false)));
        let failed = MachineView::test("m1", Phase::Failed).on_node("n1");
        assert!(!removed_with_sync(&failed, &node(true, false)));
        assert!(!removed_with_sync(&pending(), &node(false, false)));
        let owned = StartupTaintNode {
            template_lists_taint: true,
            ..node(true, false)
        };
        assert!(!removed_with_sync(&pending(), &owned));
    }
}
