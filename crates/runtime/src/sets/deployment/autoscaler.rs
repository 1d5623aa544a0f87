//! The cluster-autoscaler's `trigger-deletion-by-mcm` annotation (design:
//! sets-and-deployments.md, "Cluster-autoscaler annotations").

use super::*;

impl Pass<'_> {
    /// The cluster-autoscaler's `trigger-deletion-by-mcm` annotation (design:
    /// sets-and-deployments.md, "Cluster-autoscaler annotations");
    /// answers whether machines were marked in this pass.
    pub(super) async fn autoscaler_annotations(&mut self) -> Result<bool, Error> {
        let value = self
            .d
            .annotations()
            .get(c::TRIGGER_DELETION_BY_MCM_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        if value.is_empty() {
            return Ok(false);
        }
        let scaler_time = self
            .d
            .annotations()
            .get(c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION)
            .filter(|t| !t.is_empty())
            .cloned();
        let time = scaler_time
            .clone()
            .unwrap_or_else(|| self.now.to_rfc3339_opts(SecondsFormat::Secs, true));
        let normalized = plan::normalize_trigger_deletion(&value, &time);
        if normalized != value || scaler_time.is_none() {
            self.update(|d| {
                let a = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
                a.insert(
                    c::TRIGGER_DELETION_BY_MCM_ANNOTATION.into(),
                    normalized.clone(),
                );
                a.insert(
                    c::LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION.into(),
                    time.clone(),
                );
            })
            .await?;
        }
        let store = &self.ctx.caches.machines;
        let ns = self.ctx.config.namespace.clone();
        let defaults = self.ctx.config.default_settings();
        let decision = plan::trigger_deletion_plan(&normalized, |n| {
            match store.get(&ObjectRef::new(n).within(&ns)) {
                None => TriggerTarget::NotFound,
                Some(m) => {
                    let v = MachineView::of(&m, &defaults);
                    if v.phase == mcm_api::MachinePhase::Failed || v.is_deleting() {
                        TriggerTarget::FailedOrTerminating
                    } else {
                        TriggerTarget::Live {
                            marked: v
                                .annotations
                                .get(c::PRIORITY_ANNOTATION)
                                .map(String::as_str)
                                == Some("1")
                                && v.annotations
                                    .get(c::MARKED_FOR_DELETION_TIME_ANNOTATION)
                                    .is_some_and(|t| !t.is_empty()),
                        }
                    }
                }
            }
        });
        if let Some(new_value) = decision.new_value.clone() {
            self.update(|d| {
                let a = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
                if new_value.is_empty() {
                    a.remove(c::TRIGGER_DELETION_BY_MCM_ANNOTATION);
                } else {
                    a.insert(
                        c::TRIGGER_DELETION_BY_MCM_ANNOTATION.into(),
                        new_value.clone(),
                    );
                }
            })
            .await?;
        }
        let machines = self.ctx.machines();
        let marked = !decision.mark.is_empty();
        for (name, time) in decision.mark {
            let Some(m) = store.get(&ObjectRef::new(&name).within(&ns)) else {
                continue;
            };
            let mut write = MetaPatch::new()
                .guarded_by(version_of(&*m))
                .annotation(c::PRIORITY_ANNOTATION, "1");
            if m.annotations()
                .get(c::MARKED_FOR_DELETION_TIME_ANNOTATION)
                .is_none_or(|t| t.is_empty())
            {
                write = write.annotation(c::MARKED_FOR_DELETION_TIME_ANNOTATION, time);
            }
            write.send(&machines, &name).await?;
            info!(machine = %name, "machine marked for deletion by the cluster-autoscaler");
        }
        Ok(marked)
    }
}
