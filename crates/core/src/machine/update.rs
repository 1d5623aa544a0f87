//! Hot update of a running machine as a step machine (design:
//! hot-update.md): when the class's providerSpec differs from the one the
//! VM was created or last updated with, apply the change in place
//! (UpdateMachine) or say which fields need a new VM; never create or
//! delete a VM.
//!
//! The runtime keeps an [`UpdateFlow`] for one reconcile, reads the
//! machine's last-applied record and the class ([`UpdateInput`], with the
//! driver's pure [`mcm_driver::Driver::in_place_changes`] answer), asks for
//! the next [`UpdateStep`], performs exactly that effect and feeds the
//! result back as an [`UpdateOutcome`]:
//!
//! - no record yet, or a record of another class (the machine was moved by
//!   a rollout) → [`UpdateStep::Adopt`] (the class's spec, no driver call);
//! - same hash → nothing (or finish an update whose success was recorded
//!   on the annotation but not yet in `lastOperation`);
//! - a change only a new VM can take → [`UpdateStep::ReportNeedsReplacement`];
//! - changes the driver applies live → [`UpdateStep::MarkProcessing`],
//!   [`UpdateStep::CallUpdate`], then [`UpdateStep::RecordApplied`], or
//!   [`UpdateStep::Failed`] and a retry after the machine's backoff
//!   ([`UpdateStep::Wait`] until then).

use super::{MachineView, OpState, OpType, Operation, Phase, RetryClass, Transition};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;
use mcm_api::constants as c;
use mcm_driver::{changed_fields, Code, InPlaceChanges, Status, UpdateMachineResponse};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Duration;

/// The field named when the last-applied spec is unknown (too large to
/// record, or unreadable): the whole providerSpec.
pub const WHOLE_SPEC: &str = "providerSpec";

/// Condition reason: some change needs a new VM.
pub const REASON_NEEDS_REPLACEMENT: &str = "NeedsReplacement";
/// Condition reason: the VM matches the class again.
pub const REASON_APPLIED: &str = "Applied";

/// A providerSpec as recorded on a Machine: its canonical JSON (absent when
/// larger than [`c::LAST_APPLIED_PROVIDER_SPEC_MAX_BYTES`]) and its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedSpec {
    /// The MachineClass it came from ("" when the machine does not say).
    pub class: String,
    /// The spec, when small enough to record.
    pub spec: Option<Value>,
    /// `sha256:<hex>` of the canonical JSON.
    pub hash: String,
}

/// Serializes JSON canonically: object keys sorted, no whitespace.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(x) = map.get(k) {
                    write_canonical(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn hash_of(canonical: &str) -> String {
    let digest = Sha256::digest(canonical.as_bytes());
    let mut hex = String::with_capacity(7 + 64);
    hex.push_str("sha256:");
    for b in digest.iter() {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

impl AppliedSpec {
    /// The record of class `class`'s `spec`: its hash, and the spec itself
    /// when its canonical JSON fits in [`c::LAST_APPLIED_PROVIDER_SPEC_MAX_BYTES`].
    pub fn of(class: &str, spec: &Value) -> AppliedSpec {
        let canonical = canonical_json(spec);
        let hash = hash_of(&canonical);
        let spec =
            (canonical.len() <= c::LAST_APPLIED_PROVIDER_SPEC_MAX_BYTES).then(|| spec.clone());
        AppliedSpec {
            class: class.to_string(),
            spec,
            hash,
        }
    }

    /// The annotations that record it: the hash, and the spec (`None`
    /// removes a stale spec annotation when this one is too large).
    pub fn annotations(&self) -> BTreeMap<&'static str, Option<String>> {
        BTreeMap::from([
            (
                c::LAST_APPLIED_PROVIDER_SPEC_ANNOTATION,
                self.spec.as_ref().map(canonical_json),
            ),
            (
                c::LAST_APPLIED_PROVIDER_SPEC_HASH_ANNOTATION,
                Some(self.hash.clone()),
            ),
            (
                c::LAST_APPLIED_PROVIDER_SPEC_CLASS_ANNOTATION,
                Some(self.class.clone()),
            ),
        ])
    }

    /// What a Machine records: `None` without the hash annotation (never
    /// recorded); a record without spec when the spec annotation is absent
    /// or unreadable.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Option<AppliedSpec> {
        let hash = annotations
            .get(c::LAST_APPLIED_PROVIDER_SPEC_HASH_ANNOTATION)
            .filter(|h| !h.is_empty())?;
        let spec = annotations
            .get(c::LAST_APPLIED_PROVIDER_SPEC_ANNOTATION)
            .and_then(|s| serde_json::from_str::<Value>(s).ok());
        let class = annotations
            .get(c::LAST_APPLIED_PROVIDER_SPEC_CLASS_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        Some(AppliedSpec {
            class,
            spec,
            hash: hash.clone(),
        })
    }
}

/// What the update flow needs besides the machine.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateInput {
    /// The machine's record ([`AppliedSpec::from_annotations`]).
    pub last_applied: Option<AppliedSpec>,
    /// The machine's class (`spec.class.name`) and its current providerSpec.
    pub class: AppliedSpec,
    /// The driver's answer for (last-applied spec, class spec), when both
    /// specs are known and differ; `None` otherwise.
    pub changes: Option<InPlaceChanges>,
    /// When `status.lastOperation` was written.
    pub last_operation_at: Option<DateTime<Utc>>,
    /// How long to wait after a failed update before the next call (the
    /// machine's backoff).
    pub retry_wait: Duration,
}

/// What to write to `status.conditions` for the hot-update condition:
/// `None` when it already says so.
fn condition_change(
    m: &MachineView,
    status: &str,
    reason: &str,
    message: String,
    now: DateTime<Utc>,
) -> Option<Vec<NodeCondition>> {
    let current = m
        .conditions
        .iter()
        .find(|x| x.type_ == c::HOT_UPDATE_CONDITION);
    if current.is_some_and(|x| {
        x.status == status
            && x.reason.as_deref() == Some(reason)
            && x.message.as_deref() == Some(message.as_str())
    }) {
        return None;
    }
    let mut out: Vec<NodeCondition> = m
        .conditions
        .iter()
        .filter(|x| x.type_ != c::HOT_UPDATE_CONDITION)
        .cloned()
        .collect();
    let at = k8s_openapi::jiff::Timestamp::from_second(now.timestamp())
        .ok()
        .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time);
    out.push(NodeCondition {
        type_: c::HOT_UPDATE_CONDITION.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: at.clone(),
        last_heartbeat_time: at,
    });
    Some(out)
}

/// The condition once the VM matches the class again: only rewritten when
/// the machine carries a condition saying otherwise.
fn applied_condition(m: &MachineView, now: DateTime<Utc>) -> Option<Vec<NodeCondition>> {
    let stale = m
        .conditions
        .iter()
        .any(|x| x.type_ == c::HOT_UPDATE_CONDITION && x.status != "True");
    if !stale {
        return None;
    }
    condition_change(
        m,
        "True",
        REASON_APPLIED,
        "The VM matches its class's providerSpec".into(),
        now,
    )
}

/// The next effect of the update flow.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateStep {
    /// Nothing to do (not a Running or Available machine, or the VM matches the class).
    Nothing,
    /// Record the class's spec as the last-applied one without a driver
    /// call (a machine created before this feature or by another controller).
    Adopt(AppliedSpec),
    /// Some changes need a new VM: write the condition and an Event naming
    /// the fields; nothing changes on the VM.
    ReportNeedsReplacement {
        /// The fields only a new VM can take.
        fields: Vec<String>,
        /// The new `status.conditions`.
        conditions: Vec<NodeCondition>,
        /// A `lastOperation` to close (an update that turned out impossible).
        transition: Option<Transition>,
    },
    /// Write `lastOperation` Update/Processing before the call.
    MarkProcessing(Transition),
    /// Call UpdateMachine with the class's spec (and the last-applied one).
    CallUpdate {
        /// The fields the call changes.
        fields: Vec<String>,
    },
    /// Record the class's spec as last applied and the operation's success.
    RecordApplied {
        /// The annotations' new record.
        record: AppliedSpec,
        /// `lastOperation` Update/Successful, when one is to be written.
        transition: Option<Transition>,
        /// New `status.conditions` (the hot-update condition cleared), when they change.
        conditions: Option<Vec<NodeCondition>>,
        /// `status.lastKnownState` from the driver, when it answered one.
        last_known_state: Option<String>,
    },
    /// UpdateMachine failed: record it (the machine stays Running) and retry
    /// with the machine's backoff.
    Failed {
        /// `lastOperation` Update/Failed with the cloud's message.
        transition: Transition,
        /// The error.
        error: Status,
        /// How to retry.
        retry: RetryClass,
    },
    /// A previous update failed less than the backoff ago: look again then.
    Wait(Duration),
    /// The flow is complete.
    Done,
}

/// The result of the previous step's effect.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateOutcome {
    /// Nothing ran yet.
    Start,
    /// The record was written (Adopt).
    Adopted,
    /// The condition (and Event) were written.
    Reported,
    /// `lastOperation` Update/Processing is written.
    Marked,
    /// UpdateMachine answered.
    Updated(Result<UpdateMachineResponse, Status>),
    /// The new record and operation are written.
    Recorded,
    /// The failure is written.
    FailureRecorded,
}

/// One reconcile's update flow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateFlow {
    /// The fields being changed in place, once decided.
    fields: Vec<String>,
}

/// Whether the machine's last operation is an update in this state.
fn last_update_is(m: &MachineView, state: &OpState) -> bool {
    matches!(&m.last_operation, Some((_, s, OpType::Update)) if s == state)
}

fn update_op(description: String, state: OpState, error: Option<&Status>) -> Transition {
    Transition {
        phase: None,
        operation: Operation {
            description,
            error_code: error.map(|e| e.code.name()),
            state,
            kind: OpType::Update,
        },
        timeout_active: None,
    }
}

/// The `lastOperation` written before UpdateMachine.
pub fn processing(fields: &[String]) -> Transition {
    update_op(
        format!("Updating the VM in place: {}", fields.join(", ")),
        OpState::Processing,
        None,
    )
}

/// The `lastOperation` written after a successful UpdateMachine.
pub fn successful(fields: &[String]) -> Transition {
    let what = if fields.is_empty() {
        "the class's providerSpec".to_string()
    } else {
        fields.join(", ")
    };
    update_op(
        format!("Updated the VM in place: {what}"),
        OpState::Successful,
        None,
    )
}

/// The `lastOperation` written after a failed UpdateMachine (the cloud's message).
pub fn failed(err: &Status) -> Transition {
    update_op(
        format!("Cloud provider message - {err}"),
        OpState::Failed,
        Some(err),
    )
}

/// Whether the update flow looks at this machine at all: Running (or
/// Available, the steady phase without a target cluster), not being
/// deleted, with a VM.
pub fn applies_to(m: &MachineView) -> bool {
    matches!(m.phase, Phase::Running | Phase::Available)
        && !m.is_deleting()
        && !m.provider_id.is_empty()
}

impl UpdateFlow {
    /// A new flow.
    pub fn new() -> Self {
        UpdateFlow::default()
    }

    /// The next step, from the machine as it is now, the inputs and the
    /// last step's outcome.
    pub fn next(
        &mut self,
        m: &MachineView,
        input: &UpdateInput,
        outcome: UpdateOutcome,
        now: DateTime<Utc>,
    ) -> UpdateStep {
        match outcome {
            UpdateOutcome::Start => self.plan(m, input, now),
            UpdateOutcome::Marked => UpdateStep::CallUpdate {
                fields: self.fields.clone(),
            },
            UpdateOutcome::Updated(Ok(resp)) => UpdateStep::RecordApplied {
                record: input.class.clone(),
                transition: Some(successful(&self.fields)),
                conditions: applied_condition(m, now),
                last_known_state: Some(resp.last_known_state).filter(|s| !s.is_empty()),
            },
            UpdateOutcome::Updated(Err(e)) if e.code == Code::Unimplemented => {
                // The driver said "in place" but cannot update: only a new VM can.
                let fields = std::mem::take(&mut self.fields);
                self.report(m, fields, Some(failed(&e)), now)
                    .unwrap_or(UpdateStep::Done)
            }
            UpdateOutcome::Updated(Err(e)) => UpdateStep::Failed {
                transition: failed(&e),
                retry: RetryClass::of(&e),
                error: e,
            },
            UpdateOutcome::Adopted
            | UpdateOutcome::Reported
            | UpdateOutcome::Recorded
            | UpdateOutcome::FailureRecorded => UpdateStep::Done,
        }
    }

    fn plan(&mut self, m: &MachineView, input: &UpdateInput, now: DateTime<Utc>) -> UpdateStep {
        if !applies_to(m) {
            return UpdateStep::Nothing;
        }
        let Some(last) = &input.last_applied else {
            return UpdateStep::Adopt(input.class.clone());
        };
        if !last.class.is_empty() && last.class != input.class.class {
            // Moved to another class by a rollout (the InPlaceUpdate
            // strategy's node agent applied the new class, or the machine
            // was handed over): the new class's spec is what the VM has.
            return UpdateStep::Adopt(input.class.clone());
        }
        if last.hash == input.class.hash {
            // The record was written but the success not (a crash between the two writes).
            let unfinished = last_update_is(m, &OpState::Processing);
            let conditions = applied_condition(m, now);
            if unfinished || conditions.is_some() {
                return UpdateStep::RecordApplied {
                    record: input.class.clone(),
                    transition: unfinished.then(|| successful(&[])),
                    conditions,
                    last_known_state: None,
                };
            }
            return UpdateStep::Nothing;
        }
        let changes = match (&last.spec, &input.class.spec) {
            (Some(a), Some(b)) => input
                .changes
                .clone()
                .unwrap_or_else(|| InPlaceChanges::all_need_replacement(changed_fields(a, b))),
            // Without both specs nothing can be compared field by field.
            _ => InPlaceChanges::all_need_replacement(vec![WHOLE_SPEC.into()]),
        };
        if !changes.need_replacement.is_empty() {
            // An update left Processing (the class changed again meanwhile) is closed.
            let close = last_update_is(m, &OpState::Processing).then(|| {
                update_op(
                    "Update in place abandoned: the class now needs a new VM".into(),
                    OpState::Failed,
                    None,
                )
            });
            return self
                .report(m, changes.need_replacement, close, now)
                .unwrap_or(UpdateStep::Nothing);
        }
        if changes.in_place.is_empty() {
            // Different hashes, no changed field (e.g. a null field added):
            // nothing to do on the VM, only the record to refresh.
            return UpdateStep::RecordApplied {
                record: input.class.clone(),
                transition: None,
                conditions: applied_condition(m, now),
                last_known_state: None,
            };
        }
        self.fields = changes.in_place;
        if last_update_is(m, &OpState::Failed) {
            if let Some(at) = input.last_operation_at {
                let until = at
                    + chrono::Duration::from_std(input.retry_wait)
                        .unwrap_or(chrono::Duration::zero());
                if until > now {
                    return UpdateStep::Wait((until - now).to_std().unwrap_or_default());
                }
            }
        }
        if last_update_is(m, &OpState::Processing) {
            // Marked before a crash (or a failed write after the call): call again.
            return UpdateStep::CallUpdate {
                fields: self.fields.clone(),
            };
        }
        UpdateStep::MarkProcessing(processing(&self.fields))
    }

    /// The report of fields that need a new VM; `None` when the machine
    /// says so already and there is no operation to close.
    fn report(
        &self,
        m: &MachineView,
        fields: Vec<String>,
        transition: Option<Transition>,
        now: DateTime<Utc>,
    ) -> Option<UpdateStep> {
        let message = needs_replacement_message(&fields);
        let conditions = condition_change(m, "False", REASON_NEEDS_REPLACEMENT, message, now);
        if conditions.is_none() && transition.is_none() {
            return None;
        }
        let conditions = conditions.unwrap_or_else(|| m.conditions.clone());
        Some(UpdateStep::ReportNeedsReplacement {
            fields,
            conditions,
            transition,
        })
    }
}

/// The condition's and the Event's text for fields that need a new VM.
pub fn needs_replacement_message(fields: &[String]) -> String {
    format!(
        "The class's providerSpec changed in fields the provider cannot change on a running VM: {}. \
         The VM keeps its old settings; roll the machines with a new class or template to apply them",
        fields.join(", ")
    )
}

#[cfg(test)]
#[path = "update_tests.rs"]
mod tests;
