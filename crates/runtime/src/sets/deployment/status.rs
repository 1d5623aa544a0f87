//! The deployment's status writes: the scaling path's and the rollout's
//! status, the `Paused` condition, and the `InvalidSpec` condition of a
//! deployment that cannot be acted upon (design: sets-and-deployments.md,
//! "Deployment status and conditions" and "Pause").

use super::*;

/// Records why an invalid deployment is not acted upon: a `ReplicaFailure`
/// condition with reason `InvalidSpec` (written once per distinct problem).
pub(super) async fn mark_invalid(
    api: &Api<MachineDeployment>,
    d: &MachineDeployment,
    problem: &str,
) -> Result<(), Error> {
    use mcm_api::MachineDeploymentCondition;
    let current = d
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let now = to_k8s(Utc::now());
    let condition = MachineDeploymentCondition {
        type_: MachineDeploymentConditionType::ReplicaFailure,
        status: ConditionStatus::True,
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
        reason: crate::sets::machineset::INVALID_SPEC.to_string(),
        message: problem.to_string(),
    };
    let Some(conditions) = crate::sets::replace_failure_condition(
        current,
        |c| c.type_ == MachineDeploymentConditionType::ReplicaFailure,
        |c| c.reason == condition.reason && c.message == condition.message,
        condition.clone(),
    ) else {
        return Ok(());
    };
    let write = crate::status::machine_deployment::write_conditions;
    crate::status::unless_gone(write(api, &d.name_any(), &conditions, None).await)?;
    Ok(())
}

impl Pass<'_> {
    pub(super) fn facts_status(&self) -> (MachineDeploymentStatus, i64) {
        (self.status(), self.d.meta().generation.unwrap_or(0))
    }

    /// The plain status write of the scaling path (`syncMachineDeploymentStatus`).
    pub(super) async fn sync_status(&mut self) -> Result<(), Error> {
        let (current, generation) = self.facts_status();
        let name = self.name();
        let facts = DeploymentFacts {
            name: &name,
            generation,
            replicas: self.replicas(),
            strategy: &self.strategy,
            progress_deadline_seconds: self.d.spec.progress_deadline_seconds,
            status: &current,
        };
        let new = plan::deployment_status(&facts, &self.views, &self.part, self.now);
        if new != current {
            self.write_status(new).await?;
        }
        Ok(())
    }

    /// The rollout status write (`syncRolloutStatus`), with the requeue for the progress deadline.
    pub(super) async fn sync_rollout_status(&mut self) -> Result<Action, Error> {
        let (current, generation) = self.facts_status();
        let name = self.name();
        let facts = DeploymentFacts {
            name: &name,
            generation,
            replicas: self.replicas(),
            strategy: &self.strategy,
            progress_deadline_seconds: self.d.spec.progress_deadline_seconds,
            status: &current,
        };
        let new = rollout_status(&facts, &self.views, &self.part, self.now);
        if status_update_required(&current, &new) {
            self.write_status(new).await?;
            return Ok(requeue(self.ctx, None));
        }
        Ok(requeue(self.ctx, progress_requeue(&facts, &new, self.now)))
    }

    /// `checkPausedConditions` (design: sets-and-deployments.md, "Pause").
    pub(super) async fn paused_conditions(&mut self) -> Result<(), Error> {
        let mut st = self.status();
        if let Some(cond) = paused_condition(self.d.spec.paused, &st.conditions, self.now) {
            set_condition(&mut st.conditions, cond);
            self.write_status(st).await?;
        }
        Ok(())
    }
}
