//! A Machine's status changes: what a transition of the step machines writes,
//! how staged changes combine, and the write itself.

use super::Field;
use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use mcm_api::{
    LastOperation, Machine, MachineOperationType, MachinePhase, MachineState, MachineStatus,
};
use mcm_core::machine::Transition;
use serde::{Serialize, Serializer};

/// A change of a Machine's `status`, serialized as its merge patch.
///
/// Fields left `None` (or [`Field::Keep`]) are absent from the patch and keep
/// their stored value.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MachineStatusChange {
    /// A new `lastOperation`. It replaces the stored one as a whole: every
    /// field is written, `errorCode` as `""` when there is none, so nothing
    /// of the previous operation survives.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "whole_operation"
    )]
    pub(crate) last_operation: Option<LastOperation>,
    /// Changes of `currentStatus`.
    #[serde(skip_serializing_if = "CurrentStatusChange::is_empty")]
    pub(crate) current_status: CurrentStatusChange,
    /// New `conditions` (the list is replaced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) conditions: Option<Vec<NodeCondition>>,
    /// New `addresses` (the list is replaced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) addresses: Option<Vec<NodeAddress>>,
    /// A new `lastKnownState` (`""` forgets the provider's state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_known_state: Option<String>,
}

/// Changes of a Machine's `status.currentStatus`.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CurrentStatusChange {
    /// A new phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) phase: Option<MachinePhase>,
    /// Whether a timeout (creation or health) runs; `false` is written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_active: Option<bool>,
    /// When the phase was last written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_update_time: Option<Time>,
    /// Until when the machine is preserved, or its removal.
    #[serde(skip_serializing_if = "Field::is_keep")]
    pub(crate) preserve_expiry_time: Field<Time>,
}

impl CurrentStatusChange {
    /// True when nothing of `currentStatus` changes.
    fn is_empty(&self) -> bool {
        *self == CurrentStatusChange::default()
    }

    fn then(self, later: CurrentStatusChange) -> CurrentStatusChange {
        CurrentStatusChange {
            phase: later.phase.or(self.phase),
            timeout_active: later.timeout_active.or(self.timeout_active),
            last_update_time: later.last_update_time.or(self.last_update_time),
            preserve_expiry_time: self.preserve_expiry_time.then(later.preserve_expiry_time),
        }
    }
}

/// The time of a write.
pub(crate) fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl MachineStatusChange {
    /// A transition of the Machine controller written at `at`: its
    /// operation and, when it sets a phase, the phase, `timeoutActive` (when
    /// set) and, on Terminating, the removal of the preservation expiry.
    pub(crate) fn of_at(t: &Transition, at: Time) -> Self {
        let op = &t.operation;
        let operation = LastOperation {
            description: op.description.clone(),
            error_code: op.error_code.clone().unwrap_or_default(),
            last_update_time: Some(at.clone()),
            state: op.state.clone(),
            type_: op.kind.clone(),
        };
        let Some(phase) = &t.phase else {
            return MachineStatusChange {
                last_operation: Some(operation),
                ..Default::default()
            };
        };
        let mut change = MachineStatusChange::entering(phase.clone(), operation);
        change.current_status.timeout_active = t.timeout_active;
        if *phase == MachinePhase::Terminating {
            // A terminating machine is no longer preserved.
            change.current_status.preserve_expiry_time = Field::Remove;
        }
        change
    }

    /// [`MachineStatusChange::of_at`] now.
    pub(crate) fn of(t: &Transition) -> Self {
        Self::of_at(t, now())
    }

    /// A phase and the operation that led to it (the phase's update time is
    /// the operation's), nothing else.
    fn entering(phase: MachinePhase, operation: LastOperation) -> Self {
        MachineStatusChange {
            current_status: CurrentStatusChange {
                phase: Some(phase),
                last_update_time: operation.last_update_time.clone(),
                ..Default::default()
            },
            last_operation: Some(operation),
            ..Default::default()
        }
    }

    /// Only the preservation expiry: set, or removed.
    pub(crate) fn preserve_expiry(expiry: Field<Time>) -> Self {
        MachineStatusChange {
            current_status: CurrentStatusChange {
                preserve_expiry_time: expiry,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Only the conditions.
    pub(crate) fn conditions(conditions: Vec<NodeCondition>) -> Self {
        Self::default().with_conditions(Some(conditions))
    }

    /// The change with the conditions, when given.
    pub(crate) fn with_conditions(mut self, conditions: Option<Vec<NodeCondition>>) -> Self {
        if conditions.is_some() {
            self.conditions = conditions;
        }
        self
    }

    /// The change with the addresses, when given.
    pub(crate) fn with_addresses(mut self, addresses: Option<Vec<NodeAddress>>) -> Self {
        if addresses.is_some() {
            self.addresses = addresses;
        }
        self
    }

    /// The change with a new `lastKnownState`.
    pub(crate) fn with_last_known_state(mut self, state: String) -> Self {
        self.last_known_state = Some(state);
        self
    }

    /// The phase this change writes.
    pub(crate) fn phase(&self) -> Option<&MachinePhase> {
        self.current_status.phase.as_ref()
    }

    /// The description of the operation this change writes (`""` without one).
    pub(crate) fn description(&self) -> &str {
        self.last_operation
            .as_ref()
            .map_or("", |op| op.description.as_str())
    }

    /// One change that writes what `self` and then `later` write.
    pub(crate) fn then(self, later: MachineStatusChange) -> MachineStatusChange {
        MachineStatusChange {
            last_operation: later.last_operation.or(self.last_operation),
            current_status: self.current_status.then(later.current_status),
            conditions: later.conditions.or(self.conditions),
            addresses: later.addresses.or(self.addresses),
            last_known_state: later.last_known_state.or(self.last_known_state),
        }
    }

    /// Applies the change to a status as the API server applies its patch.
    pub(crate) fn apply(&self, status: &mut MachineStatus) {
        if let Some(op) = &self.last_operation {
            let kept_time = status.last_operation.last_update_time.take();
            status.last_operation = op.clone();
            if op.last_update_time.is_none() {
                status.last_operation.last_update_time = kept_time;
            }
        }
        let cs = &self.current_status;
        let current = &mut status.current_status;
        if let Some(phase) = &cs.phase {
            current.phase = phase.clone();
        }
        if let Some(active) = cs.timeout_active {
            current.timeout_active = active;
        }
        if let Some(time) = &cs.last_update_time {
            current.last_update_time = Some(time.clone());
        }
        cs.preserve_expiry_time
            .apply_to(&mut current.preserve_expiry_time);
        if let Some(conditions) = &self.conditions {
            status.conditions = conditions.clone();
        }
        if let Some(addresses) = &self.addresses {
            status.addresses = addresses.clone();
        }
        if let Some(state) = &self.last_known_state {
            status.last_known_state = state.clone();
        }
    }
}

/// Serializes a `lastOperation` with every field, so that it replaces the
/// stored one in a merge patch.
fn whole_operation<S: Serializer>(op: &Option<LastOperation>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Whole<'a> {
        description: &'a str,
        error_code: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_update_time: Option<&'a Time>,
        state: &'a MachineState,
        #[serde(rename = "type")]
        type_: &'a MachineOperationType,
    }
    match op {
        Some(op) => Whole {
            description: &op.description,
            error_code: &op.error_code,
            last_update_time: op.last_update_time.as_ref(),
            state: &op.state,
            type_: &op.type_,
        }
        .serialize(s),
        None => s.serialize_none(),
    }
}

/// Writes a change to the Machine's status subresource (merge patch).
pub(crate) async fn write(
    api: &Api<Machine>,
    name: &str,
    change: &MachineStatusChange,
) -> Result<Machine, kube::Error> {
    super::merge_patch(api, name, change, None).await
}

#[cfg(test)]
mod tests;
