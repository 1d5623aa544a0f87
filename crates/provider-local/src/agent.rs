//! The simulated node agent of in-place updates (the role
//! gardener-node-agent plays for a real worker pool).
//!
//! Every second it looks at the Nodes labelled
//! `node.machine.sapcloud.io/selected-for-update` whose `InPlaceUpdate`
//! condition says `ReadyForUpdate` (the machine controller drained them)
//! and that carry no `update-result` yet. For a Node of one of this cloud's
//! instances it finds what to install: the MachineClass of the
//! MachineDeployment that owns the Node's Machine (Machine → MachineSet →
//! MachineDeployment by controller references, read from the same cluster
//! the Nodes live in, as with `mcm up` and the tests). It then applies the
//! class's image and instance type to the running instance (same VM, same
//! addresses, `inPlaceUpdates` counted) and labels the Node
//! `update-result=successful` (plus the new `node.kubernetes.io/instance-type`).
//!
//! An update that cannot be applied is reported as `update-result=failed`
//! with the reason in the `update-failed-reason` annotation: a class that
//! cannot be found or read, or one that names another zone (a VM cannot
//! move zones in place). The tunables (`inPlaceUpdate.mode`) make the agent
//! fail every update (`fail`) or never answer (`hang`), for tests and demos.

use crate::server::Shared;
use crate::spec::LocalProviderSpec;
use crate::tunables::InPlaceUpdateMode;
use crate::wire::{Instance, InstanceState};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachineDeployment, MachineSet};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// How often the agent looks for Nodes to update.
const PERIOD: Duration = Duration::from_secs(1);

/// The agent's loop; runs until aborted.
pub(crate) async fn run(shared: Arc<Shared>, client: Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut ticker = tokio::time::interval(PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let selected = match nodes
            .list(&ListParams::default().labels(c::NODE_SELECTED_FOR_UPDATE_LABEL))
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                debug!(error = %e, "listing nodes selected for update failed");
                continue;
            }
        };
        let ready: Vec<Node> = selected.into_iter().filter(ready_for_update).collect();
        if ready.is_empty() {
            continue;
        }
        let instances = shared.snapshot().await;
        for node in ready {
            let Some(inst) = instances
                .iter()
                .find(|i| i.node_name == node.name_any() && i.state == InstanceState::Running)
            else {
                continue;
            };
            update(&shared, &client, &nodes, &node, inst).await;
        }
    }
}

/// Drained by the machine controller and not yet answered.
fn ready_for_update(node: &Node) -> bool {
    let condition_ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|cd| {
                cd.type_ == c::NODE_IN_PLACE_UPDATE_CONDITION
                    && cd.reason.as_deref() == Some(c::IN_PLACE_READY_FOR_UPDATE)
            })
        });
    condition_ready && !node.labels().contains_key(c::NODE_UPDATE_RESULT_LABEL)
}

async fn update(shared: &Shared, client: &Client, nodes: &Api<Node>, node: &Node, inst: &Instance) {
    let name = node.name_any();
    let agent = shared.tunables().in_place_update;
    let outcome = match agent.mode {
        InPlaceUpdateMode::Hang => {
            debug!(node = %name, "in-place update: the agent does not answer (mode hang)");
            return;
        }
        InPlaceUpdateMode::Fail => Err(agent.fail_reason),
        InPlaceUpdateMode::Apply => apply(shared, client, inst).await,
    };
    // Not guarded by the Node's resourceVersion: the kubelets' heartbeats
    // change it all the time, and these labels are the agent's own.
    let patch = match &outcome {
        Ok(applied) => json!({"metadata": {
            "labels": {
                c::NODE_UPDATE_RESULT_LABEL: c::NODE_UPDATE_RESULT_SUCCESSFUL,
                "node.kubernetes.io/instance-type": applied.instance_type,
            },
        }}),
        Err(reason) => json!({"metadata": {
            "labels": {c::NODE_UPDATE_RESULT_LABEL: c::NODE_UPDATE_RESULT_FAILED},
            "annotations": {c::NODE_UPDATE_FAILED_REASON_ANNOTATION: reason},
        }}),
    };
    match nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => match outcome {
            Ok(applied) => info!(node = %name, instance = %inst.id, image = %applied.image,
                                 instance_type = %applied.instance_type, "in-place update applied"),
            Err(reason) => {
                warn!(node = %name, instance = %inst.id, %reason, "in-place update failed")
            }
        },
        Err(e) => {
            debug!(node = %name, error = %e, "reporting the in-place update result failed; retrying")
        }
    }
}

/// Applies the desired class to the instance; the updated instance or why not.
async fn apply(shared: &Shared, client: &Client, inst: &Instance) -> Result<Instance, String> {
    let spec = desired_spec(client, inst).await?;
    if let Some(zone) = spec.zone.as_deref().filter(|z| *z != inst.zone) {
        return Err(format!(
            "instance {} is in zone {}; a VM cannot move to zone {zone} in place",
            inst.id, inst.zone
        ));
    }
    match shared
        .update_in_place(&inst.id, &spec.image, &spec.instance_type)
        .await
    {
        Ok(Some(updated)) => Ok(updated),
        Ok(None) => Err(format!("instance {} is gone", inst.id)),
        Err(e) => Err(format!("storing the update failed: {e}")),
    }
}

fn controller<'a>(
    refs: &'a Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    kind: &str,
) -> Option<&'a str> {
    refs.iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
        .map(|r| r.name.as_str())
}

/// The providerSpec of the class the instance's MachineDeployment asks for now.
async fn desired_spec(client: &Client, inst: &Instance) -> Result<LocalProviderSpec, String> {
    let machines: Api<Machine> = Api::all(client.clone());
    let list = machines
        .list(&ListParams::default().fields(&format!("metadata.name={}", inst.machine_name)))
        .await
        .map_err(|e| format!("reading machine {}: {e}", inst.machine_name))?;
    let machine = list
        .items
        .into_iter()
        .find(|m| m.spec.provider_id == inst.provider_id)
        .ok_or_else(|| {
            format!(
                "no Machine {} with providerID {}",
                inst.machine_name, inst.provider_id
            )
        })?;
    let ns = machine.namespace().unwrap_or_default();
    let set_name = controller(&machine.metadata.owner_references, "MachineSet")
        .ok_or_else(|| format!("machine {} has no MachineSet", inst.machine_name))?;
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), &ns);
    let set = sets
        .get(set_name)
        .await
        .map_err(|e| format!("reading MachineSet {set_name}: {e}"))?;
    let class_name = match controller(&set.metadata.owner_references, "MachineDeployment") {
        Some(d) => {
            let deployments: Api<MachineDeployment> = Api::namespaced(client.clone(), &ns);
            deployments
                .get(d)
                .await
                .map_err(|e| format!("reading MachineDeployment {d}: {e}"))?
                .spec
                .template
                .spec
                .class
                .name
        }
        None => set.spec.template.spec.class.name,
    };
    let classes: Api<MachineClass> = Api::namespaced(client.clone(), &ns);
    let class = classes
        .get(&class_name)
        .await
        .map_err(|e| format!("reading MachineClass {class_name}: {e}"))?;
    LocalProviderSpec::parse(&class.provider_spec)
        .map_err(|e| format!("MachineClass {class_name}: {e}"))
}
