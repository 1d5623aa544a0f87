//! One step of the RollingUpdate and Recreate strategies (design:
//! sets-and-deployments.md, "MachineDeployment rollouts").

use super::*;

impl Pass<'_> {
    /// One RollingUpdate step (design: sets-and-deployments.md, "MachineDeployment rollouts").
    pub(super) async fn rolling(mut self) -> Result<Action, Error> {
        let Some(n) = self.part.new else {
            self.create_new_set().await?;
            return Ok(requeue(self.ctx, Some(SHORTLY)));
        };
        let replicas = self.replicas();
        if let Some(target) =
            rolling_new_set_target(&self.strategy, replicas, &self.views, &self.views[n])
        {
            self.scale_set(n, target).await?;
            return self.sync_rollout_status().await;
        }
        let downs = rolling_scale_down(
            replicas,
            self.strategy.max_unavailable(replicas),
            &self.views,
            &self.part,
        );
        let mut scaled = false;
        for (i, size) in downs {
            match self.scale_set(i, size).await {
                Ok(changed) => scaled |= changed,
                Err(e) => warn!(error = %e, "scaling down an old MachineSet failed"),
            }
        }
        if scaled {
            return self.sync_rollout_status().await;
        }
        let generation = self.d.meta().generation.unwrap_or(0);
        if is_complete(replicas, generation, &self.status()) {
            self.cleanup().await?;
        }
        self.sync_rollout_status().await
    }

    /// One Recreate step (design: sets-and-deployments.md, "MachineDeployment rollouts").
    pub(super) async fn recreate(mut self) -> Result<Action, Error> {
        let new_uid = self.part.new.map(|n| self.views[n].uid.clone());
        let old_machines_exist = self
            .machines
            .iter()
            .any(|m| controller_ref(&m.metadata).map(|c| c.uid) != new_uid);
        let replicas = self.replicas();
        match recreate_step(replicas, &self.views, &self.part, old_machines_exist) {
            RecreateStep::ScaleDownOld(list) => {
                for i in list {
                    self.scale_set(i, 0).await?;
                }
                self.sync_rollout_status().await
            }
            RecreateStep::WaitForOldMachines => {
                debug!("waiting for the old machines to be gone");
                self.sync_rollout_status().await
            }
            RecreateStep::CreateNew => {
                self.create_new_set().await?;
                Ok(requeue(self.ctx, Some(SHORTLY)))
            }
            RecreateStep::ScaleNew(size) => {
                if let Some(n) = self.part.new {
                    self.scale_set(n, size).await?;
                }
                self.sync_rollout_status().await
            }
            RecreateStep::Steady => {
                let generation = self.d.meta().generation.unwrap_or(0);
                if is_complete(replicas, generation, &self.status()) {
                    self.cleanup().await?;
                }
                self.sync_rollout_status().await
            }
        }
    }
}
