//! Node sync: keeps a Machine's Node carrying the machine-name label, the
//! node finalizer, the Machine's `spec.nodeTemplate` (labels, annotations,
//! taints) and the MachineClass's `nodeTemplate.virtualCapacity`.
//!
//! The decisions are [`mcm_core::node_template::plan`]; this module writes
//! them. Both writes carry a precondition: the object patch tests what each
//! of its changes relies on (a label's or annotation's old value, the
//! bookkeeping annotation included; a removed taint where it was; the
//! finalizer list; see [`MetaPatch::guarded_by_read`]), the capacity write
//! the resourceVersion. A Node where that changed since the cache saw it
//! (for example the `node.gardener.cloud/critical-components-not-ready`
//! taint removed) is refused and synced again on the next pass, from the new
//! state, instead of having the change undone; a kubelet's status heartbeat
//! or the node lifecycle controller's `not-ready` taint in between is no
//! conflict. Capacity goes first (status subresource), the bookkeeping
//! annotation with the object patch after it, so a failure in between is
//! repaired by the next pass.
//!
//! [`sync_and_report`] never fails: a failed sync is logged and published as
//! a Warning Event `NodeSyncFailed`, and the health check runs regardless.

use crate::metadata::MetaPatch;
use crate::Context;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use mcm_api::{Machine, MachineClass};
use mcm_core::node_template::{plan, NodeSyncInput};
use std::collections::BTreeMap;
use tracing::{debug, info, warn};

/// What a node sync did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeSyncOutcome {
    /// The Node already was as it should be.
    InSync,
    /// The Node was patched.
    Patched,
    /// The Node changed since it was read; the next pass syncs it again.
    Conflict,
    /// The Node is gone or being deleted; nothing to do.
    NodeGone,
}

/// Errors of a node sync.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeSyncError {
    /// The API server refused or failed a patch.
    #[error("patching node {node}: {source}")]
    Patch {
        /// The Node.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Brings `node` in line with the Machine's node template and the class's
/// virtual capacity, also answering the Node as the API server now has it
/// when it is known: `node` itself when in sync, the answer of the last patch
/// when patched, `None` otherwise (conflict, gone). With
/// `drop_startup_taint`, the object patch also removes that startup taint
/// (`mcm_core::machine::startup_taint::removed_with_sync` decided it may go
/// once the template is on the Node).
async fn sync_node_fresh(
    target: &Client,
    machine: &Machine,
    class: &MachineClass,
    node: &Node,
    drop_startup_taint: Option<&str>,
) -> Result<(NodeSyncOutcome, Option<Node>), NodeSyncError> {
    if node.meta().deletion_timestamp.is_some() {
        return Ok((NodeSyncOutcome::NodeGone, None));
    }
    let name = machine.name_any();
    let empty = BTreeMap::new();
    let input = NodeSyncInput {
        machine_name: &name,
        template: &machine.spec.node_template,
        virtual_capacity: class
            .node_template
            .as_ref()
            .map_or(&empty, |t| &t.virtual_capacity),
    };
    let mut p = plan(&input, node);
    if let Some(key) = drop_startup_taint {
        let node_taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
        p.drop_startup_taint(key, node_taints.unwrap_or_default());
    }
    for key in &p.unreadable {
        warn!(machine = %name, node = %node.name_any(), annotation = key,
              "unreadable last-applied annotation on the node; treating it as empty and rewriting it");
    }
    if p.is_empty() {
        return Ok((NodeSyncOutcome::InSync, Some(node.clone())));
    }
    let node_name = node.name_any();
    let nodes: Api<Node> = Api::all(target.clone());
    let rv = node.resource_version();
    let mut fresh = None;
    let classify = |e: kube::Error| match e {
        e if crate::is_not_found(&e) => Ok((NodeSyncOutcome::NodeGone, None)),
        e if crate::is_conflict(&e) => Ok((NodeSyncOutcome::Conflict, None)),
        e => Err(NodeSyncError::Patch {
            node: node_name.clone(),
            source: e,
        }),
    };
    if !p.capacity.is_empty() {
        let write = crate::status::node::set_capacity;
        match write(&nodes, &node_name, &p.capacity, rv.as_deref()).await {
            Ok(n) => fresh = Some(n),
            Err(e) => return classify(e),
        }
        let changed: Vec<&String> = p.capacity.keys().collect();
        info!(machine = %name, node = %node_name, keys = ?changed, "synced virtual capacity to the node");
    }
    if p.has_metadata_changes() {
        match object_write(&p)
            .guarded_by_read(node)
            .send(&nodes, &node_name)
            .await
        {
            Ok(n) => fresh = Some(n),
            Err(e) => return classify(e),
        }
        info!(
            machine = %name,
            node = %node_name,
            labels = p.labels.len(),
            annotations = p.annotations.len(),
            taints_changed = p.taints.is_some(),
            finalizer_added = p.finalizers.is_some(),
            "synced node template to the node"
        );
    }
    Ok((NodeSyncOutcome::Patched, fresh))
}

/// Syncs the Machine's Node from the node cache, if there is a target
/// cluster and the Node is known. Never fails: errors are logged and
/// published as a Warning Event on the Machine.
///
/// Answers the Node as it is after the sync, when that is known (in sync or
/// patched): the startup taint is decided on it (design: startup-taint.md).
/// `drop_startup_taint`: see [`sync_node_fresh`].
pub(crate) async fn sync_and_report(
    ctx: &Context,
    machine: &Machine,
    class: &MachineClass,
    drop_startup_taint: Option<&str>,
) -> Option<Node> {
    let target = ctx.target.as_ref()?;
    let node_name = machine
        .labels()
        .get(mcm_api::constants::NODE_LABEL)
        .filter(|n| !n.is_empty())?;
    let node = ctx.nodes.get(&ObjectRef::new(node_name))?;
    let mut synced = sync_node_fresh(target, machine, class, &node, drop_startup_taint).await;
    if drop_startup_taint.is_some() && synced.is_err() {
        // Refused with the taint's removal in it (an admission policy may
        // guard the taint): the template alone must still land; the taint's
        // own removal then reports its failure (design: startup-taint.md).
        debug!(machine = %machine.name_any(), node = %node_name,
               "node sync with the startup taint's removal failed; syncing the template alone");
        synced = sync_node_fresh(target, machine, class, &node, None).await;
    }
    match synced {
        Ok((NodeSyncOutcome::Conflict, _)) => {
            debug!(machine = %machine.name_any(), node = %node_name, "node changed while syncing; next pass");
            None
        }
        Ok((_, fresh)) => fresh,
        Err(e) => {
            warn!(machine = %machine.name_any(), node = %node_name, error = %e, "node sync failed");
            ctx.recorder
                .note(
                    machine,
                    EventType::Warning,
                    "NodeSyncFailed",
                    e.to_string(),
                    "NodeSync",
                )
                .await;
            None
        }
    }
}

/// The Node object's part of a sync plan (labels, annotations, taints, and
/// the node finalizer when it is missing), as one write; the caller guards
/// it by the Node's resourceVersion.
fn object_write(p: &mcm_core::node_template::NodeSyncPlan) -> MetaPatch {
    let mut write = MetaPatch::new();
    for (k, v) in &p.labels {
        write = write.label_opt(k, v.clone());
    }
    for (k, v) in &p.annotations {
        write = write.annotation_opt(k, v.clone());
    }
    if let Some(t) = &p.taints {
        write = write.taints(t.clone());
    }
    if let Some(f) = &p.finalizers {
        write = write.finalizers(f.clone());
    }
    write
}

#[cfg(test)]
mod tests {
    use super::object_write;
    use mcm_core::node_template::NodeSyncPlan;

    #[test]
    fn the_node_write_carries_the_plan_with_removals_as_null_under_the_resource_version() {
        let mut p = NodeSyncPlan::default();
        p.labels.insert("a".into(), Some("1".into()));
        p.labels.insert("gone".into(), None);
        p.annotations.insert("x".into(), None);
        p.taints = Some(vec![]);
        p.finalizers = Some(vec!["f".into()]);
        let body = object_write(&p).guarded_by(Some("7".into())).body();
        assert_eq!(
            body,
            serde_json::json!({
                "metadata": {
                    "labels": {"a": "1", "gone": null},
                    "annotations": {"x": null},
                    "finalizers": ["f"],
                    "resourceVersion": "7",
                },
                "spec": {"taints": []},
            })
        );
    }
}
