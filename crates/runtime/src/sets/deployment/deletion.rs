//! Deleting a deployment: its sets first, then the finalizer (design:
//! sets-and-deployments.md, "Deleting sets and deployments").

use super::*;

impl Pass<'_> {
    /// Deletion: delete the sets, drop the finalizer once they are gone (design:
    /// sets-and-deployments.md, "Deleting sets and deployments").
    pub(super) async fn delete(mut self) -> Result<Action, Error> {
        if !has_finalizer(&self.d) {
            return Ok(Action::await_change());
        }
        if self.sets.is_empty() {
            remove_finalizer(&self.api, &self.d).await?;
            info!("all MachineSets gone, finalizer removed");
            return Ok(Action::await_change());
        }
        let api = self.ctx.machine_sets();
        for s in self
            .sets
            .iter()
            .filter(|s| s.meta().deletion_timestamp.is_none())
        {
            match api.delete(&s.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    info!(machineset = %s.name_any(), "deleted MachineSet of deleted MachineDeployment")
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    warn!(machineset = %s.name_any(), error = %e, "MachineSet deletion failed")
                }
            }
        }
        self.sync_status().await?;
        Ok(requeue(self.ctx, Some(SHORTLY)))
    }
}
