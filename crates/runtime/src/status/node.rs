//! Node status writes: the conditions the controllers own (`Terminating`,
//! `InPlaceUpdate`, the preservation condition), written as a strategic merge
//! patch so that conditions merge by type and those the kubelet and others
//! own stay; and the class's virtual capacity (node-sync.md).

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use std::collections::BTreeMap;

/// `status.capacity` keys to set (`Some`) or remove (`None`, written as `null`).
#[derive(Serialize, Debug)]
struct Capacity<'a> {
    capacity: &'a BTreeMap<String, Option<Quantity>>,
}

/// Sets and removes `status.capacity` keys (merge patch; other keys, such as
/// the kubelet's, stay). With `guard`, only over that resourceVersion.
pub(crate) async fn set_capacity(
    nodes: &Api<Node>,
    name: &str,
    capacity: &BTreeMap<String, Option<Quantity>>,
    guard: Option<&str>,
) -> Result<Node, kube::Error> {
    super::merge_patch(nodes, name, &Capacity { capacity }, guard).await
}

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
    fn capacity_keys_are_set_or_removed_over_a_resource_version() {
        let capacity = BTreeMap::from([
            (
                "example.com/gpu-slices".to_string(),
                Some(Quantity("4".into())),
            ),
            ("example.com/old".to_string(), None),
        ]);
        assert_eq!(
            serde_json::to_value(super::super::StatusPatch::new(
                &Capacity {
                    capacity: &capacity
                },
                Some("7")
            ))
            .unwrap(),
            json!({"metadata": {"resourceVersion": "7"}, "status": {"capacity":
                {"example.com/gpu-slices": "4", "example.com/old": null}}})
        );
    }

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
