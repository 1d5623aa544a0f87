//! Hot update's effects, one per step (decisions in
//! [`mcm_core::machine::update::UpdateFlow`]; design: docs/design/hot-update.md).
//!
//! Runs for a Running (or, without a target cluster, Available) machine
//! after the health check: reads the machine's last-applied providerSpec
//! record and the class's spec, asks the driver's pure `in_place_changes`
//! which changes it can make live, and then adopts,
//! reports, or marks → calls UpdateMachine (paced by the cloud budget as
//! [`CloudOp::Update`]) → records. Never creates or deletes a VM.

#[allow(clippy::wildcard_imports)]
use super::*;
use mcm_core::machine::update::{
    self as up, AppliedSpec, UpdateFlow, UpdateInput, UpdateOutcome, UpdateStep,
};
use mcm_core::time::from_k8s;
use mcm_driver::{CloudOp, UpdateMachineRequest};

/// A bound on the steps of one reconcile's update flow (it has at most four).
const MAX_STEPS: usize = 8;

impl Reconciler<'_> {
    /// The hot-update step. `Ok(Ok(recheck))` goes on with the reconcile
    /// (`recheck`: when to look again, after a failure or while waiting for
    /// the backoff).
    pub(super) async fn hot_update(
        &mut self,
        class: &MachineClass,
        secret: &Secret,
        driver: &Arc<dyn Driver>,
    ) -> Step<Option<Duration>> {
        if !up::applies_to(&self.view()) {
            return Ok(Ok(None));
        }
        let input = self.update_input(class, driver);
        let mut flow = UpdateFlow::new();
        let mut outcome = UpdateOutcome::Start;
        for _ in 0..MAX_STEPS {
            let step = flow.next(&self.view(), &input, outcome, Utc::now());
            debug!(?step, "hot-update step");
            outcome = match step {
                UpdateStep::Nothing | UpdateStep::Done => return Ok(Ok(None)),
                UpdateStep::Wait(d) => {
                    debug!(wait = ?d, "a failed hot update waits for its backoff");
                    return Ok(Ok(Some(d)));
                }
                UpdateStep::Adopt(record) => {
                    self.record_applied_spec(&record).await?;
                    info!(hash = %record.hash, "adopted the class's providerSpec as last applied (no driver call)");
                    self.update_metric("adopted");
                    UpdateOutcome::Adopted
                }
                UpdateStep::ReportNeedsReplacement {
                    fields,
                    conditions,
                    transition,
                } => {
                    let change = match &transition {
                        Some(t) => MachineStatusChange::of(t),
                        None => MachineStatusChange::default(),
                    };
                    self.write(change.with_conditions(Some(conditions))).await?;
                    warn!(fields = %fields.join(", "), "class changes need a new VM; nothing changed on the VM");
                    self.event(
                        EventType::Warning,
                        "UpdateNeedsReplacement",
                        up::needs_replacement_message(&fields),
                    )
                    .await;
                    self.update_metric("needs_replacement");
                    UpdateOutcome::Reported
                }
                UpdateStep::MarkProcessing(t) => {
                    self.write(MachineStatusChange::of(&t)).await?;
                    UpdateOutcome::Marked
                }
                UpdateStep::CallUpdate { fields } => {
                    let req = UpdateMachineRequest {
                        machine: self.machine.clone(),
                        machine_class: class.clone(),
                        secret: secret.clone(),
                        last_applied_provider_spec: input
                            .last_applied
                            .as_ref()
                            .and_then(|l| l.spec.clone())
                            .unwrap_or_default(),
                    };
                    let paced = MachineRequest {
                        machine: self.machine.clone(),
                        machine_class: class.clone(),
                        secret: secret.clone(),
                    };
                    if let Some(wait) = self
                        .pace(&**driver, &class.provider, &paced, CloudOp::Update)
                        .await
                    {
                        return Ok(Ok(Some(wait)));
                    }
                    info!(fields = %fields.join(", "), "updating the VM in place");
                    let result = driver.update_machine(&req).await;
                    self.answered(&**driver, &class.provider, &paced, CloudOp::Update, &result)
                        .await;
                    UpdateOutcome::Updated(result)
                }
                UpdateStep::RecordApplied {
                    record,
                    transition,
                    conditions,
                    last_known_state,
                } => {
                    // The annotation first: a crash before the status write
                    // finishes the operation on the next reconcile without a call.
                    self.record_applied_spec(&record).await?;
                    let mut change = match &transition {
                        Some(t) => MachineStatusChange::of(t),
                        None => MachineStatusChange::default(),
                    };
                    change = change.with_conditions(conditions);
                    if let Some(s) = last_known_state {
                        change = change.with_last_known_state(s);
                    }
                    if change != MachineStatusChange::default() {
                        self.write(change).await?;
                    }
                    if let Some(t) = transition {
                        info!(hash = %record.hash, "VM updated in place");
                        self.event(EventType::Normal, "Updated", t.operation.description)
                            .await;
                        self.update_metric("updated");
                        self.ctx.reset_backoff(&self.key);
                    }
                    UpdateOutcome::Recorded
                }
                UpdateStep::Failed {
                    transition,
                    error,
                    retry,
                } => {
                    warn!(error = %error, "hot update failed; the machine stays Running");
                    self.write(MachineStatusChange::of(&transition)).await?;
                    self.event(EventType::Warning, "UpdateFailed", error.to_string())
                        .await;
                    self.update_metric("failed");
                    return Ok(Ok(Some(self.retry_after(retry))));
                }
            };
        }
        Ok(Ok(None))
    }

    /// What the update flow reads besides the machine.
    fn update_input(&self, class: &MachineClass, driver: &Arc<dyn Driver>) -> UpdateInput {
        let view = self.view();
        let last_applied = AppliedSpec::from_annotations(&view.annotations);
        let class_record = AppliedSpec::of(&self.machine.spec.class.name, &class.provider_spec);
        let changes = match (&last_applied, &class_record.spec) {
            (
                Some(AppliedSpec {
                    spec: Some(a),
                    hash,
                    ..
                }),
                Some(b),
            ) if *hash != class_record.hash => Some(driver.in_place_changes(a, b)),
            _ => None,
        };
        let last_operation_at = self
            .machine
            .status
            .as_ref()
            .and_then(|s| s.last_operation.last_update_time.as_ref())
            .map(from_k8s);
        UpdateInput {
            last_applied,
            class: class_record,
            changes,
            last_operation_at,
            retry_wait: self.ctx.failure_floor(&self.key),
        }
    }

    /// Writes the last-applied providerSpec annotations.
    pub(super) async fn record_applied_spec(&mut self, record: &AppliedSpec) -> Result<(), Error> {
        self.machine = MetaPatch::new()
            .annotations(record.annotations())
            .send(&self.api, &self.name())
            .await?;
        Ok(())
    }

    fn update_metric(&self, result: &str) {
        self.ctx
            .metrics
            .update
            .get_or_create(&crate::metrics::UpdateResultLabels {
                result: result.into(),
            })
            .inc();
    }
}
