//! A MachineDeployment's status writes: its conditions (merge patch) and the
//! whole status the deployment controller computes (replacement).

use kube::api::Api;
use mcm_api::{MachineDeployment, MachineDeploymentCondition, MachineDeploymentStatus};
use serde::Serialize;

/// New `status.conditions` of a MachineDeployment (the list is replaced).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub(crate) struct Conditions<'a> {
    conditions: &'a [MachineDeploymentCondition],
}

/// Writes the conditions (merge patch). With `guard`, only over that
/// resourceVersion (a conflict otherwise).
pub(crate) async fn write_conditions(
    api: &Api<MachineDeployment>,
    name: &str,
    conditions: &[MachineDeploymentCondition],
    guard: Option<&str>,
) -> Result<MachineDeployment, kube::Error> {
    super::merge_patch(api, name, &Conditions { conditions }, guard).await
}

/// Replaces the whole status (PUT on /status, guarded by the resourceVersion
/// `d` was read at).
pub(crate) async fn replace(
    api: &Api<MachineDeployment>,
    d: &MachineDeployment,
    status: MachineDeploymentStatus,
) -> Result<MachineDeployment, kube::Error> {
    super::replace(api, d, |o| o.status = Some(status)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_api::{ConditionStatus, MachineDeploymentConditionType};
    use serde_json::json;

    #[test]
    fn conditions_replace_the_list() {
        let c = MachineDeploymentCondition {
            type_: MachineDeploymentConditionType::ReplicaFailure,
            status: ConditionStatus::True,
            reason: "InvalidSpec".into(),
            message: "spec.replicas: must be >= 0".into(),
            ..Default::default()
        };
        let body = serde_json::to_value(crate::status::StatusPatch::new(
            &Conditions {
                conditions: std::slice::from_ref(&c),
            },
            None,
        ))
        .unwrap();
        assert_eq!(
            body,
            json!({"status": {"conditions": [{"type": "ReplicaFailure", "status": "True",
                "reason": "InvalidSpec", "message": "spec.replicas: must be >= 0"}]}})
        );
    }
}
