//! Status transitions of one reconcile written once (design:
//! docs/design/machine.md, "Deletion").
//!
//! The deletion step machine reads its next step from the status the
//! previous step wrote. Within one reconcile the steps that succeed one after
//! another (Terminating, the VM status, the VolumeAttachments check, the VM
//! deletion, the Node deletion) need not each cost a status write: a staged
//! transition is applied to the in-memory Machine, so the step machine moves
//! on, and the reconcile writes the accumulated status once when it stops —
//! or never, when it ends by removing the finalizer (the object is gone).
//! Every step is idempotent, so a crash before the write only repeats steps.
//!
//! A reconcile that stops only to wait for the cloud pacer's turn, with
//! nothing staged that changes the phase (`Retry::keeps_staged`), does not
//! write either: what it staged is carried
//! in memory (`Context::carry_stage`) and resumed by the machine's next
//! reconcile, which writes it with what follows (design: machine.md,
//! "Requests per deletion").

#[allow(clippy::wildcard_imports)]
use super::*;

/// What was staged since the last write.
pub(super) struct Staged {
    /// Every staged change, combined into one (what writing them one after
    /// the other would leave; `status::machine`).
    change: MachineStatusChange,
    /// The phase the server last saw (for the phase-change Event).
    written_phase: Phase,
}

impl Reconciler<'_> {
    /// Applies a status change to the in-memory Machine without writing it;
    /// [`Reconciler::flush`] writes everything staged at once.
    pub(super) fn stage(&mut self, change: MachineStatusChange) {
        let written_phase = self.view().phase;
        change.apply(self.machine.status.get_or_insert_with(Default::default));
        self.staged = Some(match self.staged.take() {
            Some(s) => Staged {
                change: s.change.then(change),
                written_phase: s.written_phase,
            },
            None => Staged {
                change,
                written_phase,
            },
        });
    }

    /// Writes what was staged (one status patch) and announces the phase
    /// change it makes. Nothing staged, nothing written.
    pub(super) async fn flush(&mut self) -> Result<(), Error> {
        let Some(staged) = self.staged.take() else {
            return Ok(());
        };
        let before = self.machine.resource_version().unwrap_or_default();
        self.machine =
            crate::status::machine::write(&self.api, &self.name(), &staged.change).await?;
        // Until the cache shows this write, a reconcile of the copy this
        // reconcile started from, or of the one just written over, starts
        // from the answer instead.
        let superseded = [self.started_from.clone(), before];
        self.ctx
            .wrote_machine(&self.key, &superseded, &self.machine);
        self.announce(&staged.change, &staged.written_phase).await;
        Ok(())
    }

    /// Whether what is staged changes the phase the API server shows.
    pub(super) fn staged_changes_phase(&self) -> bool {
        self.staged
            .as_ref()
            .is_some_and(|s| s.change.phase().is_some_and(|p| *p != s.written_phase))
    }

    /// Keeps what was staged, unwritten, for this machine's next reconcile.
    pub(super) fn carry_staged(&mut self) {
        let Some(staged) = self.staged.take() else {
            return;
        };
        let uid = self.machine.uid().unwrap_or_default();
        self.ctx
            .carry_stage(&self.key, uid, staged.change, staged.written_phase);
    }

    /// Stages again what an earlier reconcile of this machine (same UID)
    /// carried, on the Machine as the cache has it.
    pub(super) fn resume_carried(&mut self) {
        let uid = self.machine.uid().unwrap_or_default();
        if let Some((change, written_phase)) = self.ctx.take_carried_stage(&self.key, &uid) {
            change.apply(self.machine.status.get_or_insert_with(Default::default));
            self.staged = Some(Staged {
                change,
                written_phase,
            });
        }
    }

    /// Forgets what was staged (the object is gone).
    pub(super) fn discard_staged(&mut self) {
        self.staged = None;
    }
}
