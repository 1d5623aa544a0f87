//! Revisions: rollback to `spec.rollbackTo` and history cleanup (design:
//! sets-and-deployments.md, "Revisions, rollback and history cleanup").

use super::*;

impl Pass<'_> {
    /// Old sets beyond `revisionHistoryLimit` (design: sets-and-deployments.md,
    /// "Revisions, rollback and history cleanup").
    pub(super) async fn cleanup(&self) -> Result<(), Error> {
        let api = self.ctx.machine_sets();
        for i in history_cleanup(self.d.spec.revision_history_limit, &self.views, &self.part) {
            let name = self.views[i].name.clone();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    info!(machineset = %name, "deleted old MachineSet beyond the revision history limit")
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Rollback to `spec.rollbackTo.revision` (design: sets-and-deployments.md,
    /// "Revisions, rollback and history cleanup").
    pub(super) async fn rollback(mut self) -> Result<Action, Error> {
        let to = self.d.spec.rollback_to.as_ref().map_or(0, |r| r.revision);
        let decision = plan::rollback_decision(
            to,
            &self.d.spec.template,
            self.d.annotations(),
            &self.views,
            &self.part,
        );
        let name = self.name();
        match decision {
            RollbackDecision::RevisionNotFound(msg) => {
                self.event(EventType::Warning, c::ROLLBACK_REVISION_NOT_FOUND, msg)
                    .await;
                self.update(|d| d.spec.rollback_to = None).await?;
            }
            RollbackDecision::TemplateUnchanged { revision } => {
                self.event(
                    EventType::Warning,
                    c::ROLLBACK_TEMPLATE_UNCHANGED,
                    format!("The rollback revision contains the same template as current deployment {name:?}"),
                )
                .await;
                info!(revision, "rollback target has the current template");
                self.update(|d| d.spec.rollback_to = None).await?;
            }
            RollbackDecision::RollBack {
                revision,
                template,
                annotations,
                ..
            } => {
                self.update(|d| {
                    d.spec.template = *template;
                    d.metadata.annotations = Some(annotations);
                    d.spec.rollback_to = None;
                })
                .await?;
                info!(revision, "rolled back");
                self.event(
                    EventType::Normal,
                    c::ROLLBACK_DONE,
                    format!("Rolled back deployment {name:?} to revision {revision}"),
                )
                .await;
            }
        }
        Ok(requeue(self.ctx, Some(SHORTLY)))
    }
}
