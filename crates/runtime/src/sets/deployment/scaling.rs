//! Resizing sets: one set's size and replica annotations, and the scaling /
//! paused path (design: sets-and-deployments.md, "Proportional scaling" and
//! "Pause").

use super::*;

impl Pass<'_> {
    /// Sets a set's size and replica annotations; answers whether the size changed.
    pub(super) async fn scale_set(&self, i: usize, size: i32) -> Result<bool, Error> {
        let Some(s) = self.sets.get(i) else {
            return Ok(false);
        };
        let mut annotations = s.annotations().clone();
        let max = self.replicas().saturating_add(self.strategy.max_surge());
        let annotations_changed = set_replicas_annotations(&mut annotations, self.replicas(), max);
        let from = s.spec.replicas;
        if from == size && !annotations_changed {
            return Ok(false);
        }
        MetaPatch::new()
            .guarded_by(version_of(&**s))
            .annotation(c::DESIRED_REPLICAS_ANNOTATION, self.replicas().to_string())
            .annotation(c::MAX_REPLICAS_ANNOTATION, max.to_string())
            .replicas(size)
            .send(&self.ctx.machine_sets(), &s.name_any())
            .await?;
        if from != size {
            let direction = if from < size { "up" } else { "down" };
            info!(machineset = %s.name_any(), from, to = size, "scaled MachineSet");
            self.event(
                EventType::Normal,
                "ScalingMachineSet",
                format!("Scaled {direction} machine set {} to {size}", s.name_any()),
            )
            .await;
        }
        Ok(from != size)
    }

    /// The scaling / paused path (`sync`; design: sets-and-deployments.md,
    /// "Proportional scaling" and "Pause").
    pub(super) async fn sync(mut self) -> Result<Action, Error> {
        let targets = scale_targets(
            self.replicas(),
            &self.strategy,
            self.status().replicas,
            &self.views,
            &self.part,
        );
        for (i, size) in targets {
            self.scale_set(i, size).await?;
        }
        if self.d.spec.paused && self.d.spec.rollback_to.is_none() {
            self.cleanup().await?;
        }
        self.sync_status().await?;
        Ok(requeue(self.ctx, None))
    }
}
