//! Node conditions the controllers own (`Terminating`, `InPlaceUpdate`, the
//! preservation condition), written as a strategic merge patch: conditions
//! merge by type, so those the kubelet and others own stay.

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use kube::api::{Api, Patch, PatchParams};

/// The status that sets these conditions (merged by type), nothing else.
fn conditions_status(conditions: Vec<NodeCondition>) -> NodeStatus {
    NodeStatus {
        conditions: Some(conditions),
        ..Default::default()
    }
}

/// Sets the conditions on the Node's status (each merged by its type).
pub(crate) async fn set_conditions(
    nodes: &Api<Node>,
    name: &str,
    conditions: Vec<NodeCondition>,
) -> Result<Node, kube::Error> {
    let status = conditions_status(conditions);
    let patch = super::StatusPatch::new(&status, None);
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_patch_holds_only_the_conditions() {
        let c = NodeCondition {
            type_: "Terminating".into(),
            status: "True".into(),
            reason: Some("ScaleDown".into()),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(super::super::StatusPatch::new(
                &conditions_status(vec![c]),
                None
            ))
            .unwrap(),
            json!({"status": {"conditions": [
                {"type": "Terminating", "status": "True", "reason": "ScaleDown"}]}})
        );
    }
}
