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

#[allow(clippy::wildcard_imports)]
use super::*;

/// What was staged since the last write.
pub(super) struct Staged {
    /// The merged status patch of every staged transition.
    patch: serde_json::Value,
    /// The phase the server last saw (for the phase-change Event).
    written_phase: Phase,
    /// The last staged transition (its phase and description announce the write).
    last: Transition,
}

/// RFC 7386 merge of `patch` into `target`.
fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let serde_json::Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let serde_json::Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
    }
}

/// Merges two merge patches into one (nulls kept, so the combined patch
/// still removes what either removed).
fn combine(first: &mut serde_json::Value, second: &serde_json::Value) {
    match (first, second) {
        (serde_json::Value::Object(f), serde_json::Value::Object(s)) => {
            for (k, v) in s {
                match f.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => combine(existing, v),
                    _ => {
                        f.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (f, s) => *f = s.clone(),
    }
}

impl Reconciler<'_> {
    /// Applies a transition to the in-memory Machine without writing it;
    /// [`Reconciler::flush`] writes everything staged at once.
    pub(super) fn stage(&mut self, t: &Transition, extra: serde_json::Value) -> Result<(), Error> {
        let patch = status_patch(t, extra);
        let mut doc = serde_json::to_value(&self.machine)?;
        merge(&mut doc, &json!({ "status": patch }));
        let updated: Machine = serde_json::from_value(doc)?;
        let written_phase = self.view().phase;
        self.machine = updated;
        match &mut self.staged {
            Some(s) => {
                combine(&mut s.patch, &patch);
                s.last = t.clone();
            }
            None => {
                self.staged = Some(Staged {
                    patch,
                    written_phase,
                    last: t.clone(),
                })
            }
        }
        Ok(())
    }

    /// Writes what was staged (one status patch) and announces the phase
    /// change it makes. Nothing staged, nothing written.
    pub(super) async fn flush(&mut self) -> Result<(), Error> {
        let Some(staged) = self.staged.take() else {
            return Ok(());
        };
        let patch = json!({ "status": staged.patch });
        self.machine = self
            .api
            .patch_status(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let mut last = staged.last;
        if last.phase.is_none() {
            // The phase of the write is the machine's phase now.
            last.phase = Some(self.view().phase).filter(|p| *p != staged.written_phase);
        }
        self.announce(&last, &staged.written_phase).await;
        Ok(())
    }

    /// Forgets what was staged (the object is gone).
    pub(super) fn discard_staged(&mut self) {
        self.staged = None;
    }
}

#[cfg(test)]
mod tests {
    use super::{combine, merge};
    use serde_json::json;

    #[test]
    fn combined_patches_apply_like_the_patches_one_after_the_other() {
        let base = json!({"status": {"a": 1, "cs": {"phase": "Running", "x": 1}}});
        let p1 = json!({"status": {"cs": {"phase": "Terminating", "x": null}}});
        let p2 = json!({"status": {"lo": {"d": "VM deleted"}, "b": 2}});
        let mut one_by_one = base.clone();
        merge(&mut one_by_one, &p1);
        merge(&mut one_by_one, &p2);
        let mut combined = p1.clone();
        combine(&mut combined, &p2);
        let mut at_once = base;
        merge(&mut at_once, &combined);
        assert_eq!(one_by_one, at_once);
        assert_eq!(
            at_once,
            json!({"status": {"a": 1, "b": 2, "cs": {"phase": "Terminating"}, "lo": {"d": "VM deleted"}}})
        );
    }
}
