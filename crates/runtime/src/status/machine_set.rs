//! A MachineSet's status writes: its conditions (merge patch) and the whole
//! status the set controller computes (replacement).

use kube::api::Api;
use mcm_api::{MachineSet, MachineSetCondition, MachineSetStatus};
use serde::Serialize;

/// New `status.machineSetCondition` of a MachineSet (the list is replaced).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub(crate) struct Conditions<'a> {
    #[serde(rename = "machineSetCondition")]
    conditions: &'a [MachineSetCondition],
}

impl<'a> Conditions<'a> {
    /// The conditions to write.
    pub(crate) fn new(conditions: &'a [MachineSetCondition]) -> Self {
        Conditions { conditions }
    }
}

/// Writes the conditions (merge patch). With `guard`, only over that
/// resourceVersion (a conflict otherwise).
pub(crate) async fn write_conditions(
    api: &Api<MachineSet>,
    name: &str,
    conditions: &[MachineSetCondition],
    guard: Option<&str>,
) -> Result<MachineSet, kube::Error> {
    super::merge_patch(api, name, &Conditions::new(conditions), guard).await
}

/// Replaces the whole status (PUT on /status, guarded by the resourceVersion
/// `ms` was read at).
pub(crate) async fn replace(
    api: &Api<MachineSet>,
    ms: &MachineSet,
    status: MachineSetStatus,
) -> Result<MachineSet, kube::Error> {
    super::replace(api, ms, |o| o.status = Some(status)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_api::{ConditionStatus, MachineSetConditionType};
    use serde_json::json;

    #[test]
    fn conditions_are_written_under_their_wire_name() {
        let c = MachineSetCondition {
            type_: MachineSetConditionType::Frozen,
            status: ConditionStatus::True,
            last_transition_time: None,
            reason: "OvershootingReplicaCount".into(),
            message: String::new(),
        };
        let body = serde_json::to_value(crate::status::StatusPatch::new(
            &Conditions::new(std::slice::from_ref(&c)),
            Some("7"),
        ))
        .unwrap();
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "7"}, "status": {"machineSetCondition": [
                {"type": "Frozen", "status": "True", "reason": "OvershootingReplicaCount"}]}})
        );
    }

    #[test]
    fn an_empty_list_removes_every_condition() {
        let body = serde_json::to_value(Conditions::new(&[])).unwrap();
        assert_eq!(body, json!({"machineSetCondition": []}));
    }
}
