//! Rollout node handling of the MachineDeployment controller (needs the
//! target cluster):
//!
//! - **prefer-no-schedule**: during a RollingUpdate or an InPlaceUpdate, the Nodes of every old
//!   MachineSet get the taint
//!   `deployment.machine.sapcloud.io/prefer-no-schedule=True:PreferNoSchedule`,
//!   so new pods prefer the new machines. The set's annotation with the same
//!   key records that this was done. Once the rollout is complete, a new set
//!   that carries the annotation (e.g. after a rollback) gets the taint
//!   removed from its Nodes, and then loses the annotation.
//! - **cluster-autoscaler scale-down**: while some old set still has
//!   machines (any strategy), and
//!   `--autoscaler-scaledown-annotation-during-rollout` is on, every Node of
//!   the deployment carries `cluster-autoscaler.kubernetes.io/scale-down-disabled=true`
//!   and the `…-by-mcm` marker. Once the rollout is complete, both are removed
//!   where the marker shows that mcm put them there. That includes marks the
//!   Go controller left behind mid-rollout, and it happens even with the flag
//!   off. Preserved machines keep theirs. The decision is
//!   [`mcm_core::deployment::scale_down_disabled_change`].
//!
//! Nodes are read from a watch cache of the target cluster. Every taint
//! write carries the Node's resourceVersion. Failures are logged and retried
//! on the next pass; they never stop the rollout itself.

use super::Ctx;
use crate::metadata::{version_of, MetaPatch};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineDeployment, MachineSet};
use mcm_core::deployment::{
    is_complete, scale_down_disabled_change, sets_scaled_to_zero, Partition,
    ScaleDownDisabledChange, SetView, Strategy,
};
use mcm_core::replicas::controller_ref;
use std::sync::Arc;
use tracing::{debug, info, warn};

/// What one deployment pass knows.
pub(crate) struct RolloutView<'a> {
    pub(crate) d: &'a MachineDeployment,
    pub(crate) sets: &'a [Arc<MachineSet>],
    pub(crate) views: &'a [SetView],
    pub(crate) part: &'a Partition,
    pub(crate) strategy: &'a Strategy,
    pub(crate) machines: &'a [Arc<Machine>],
}

/// Applies the rollout's node taints and annotations. Never fails.
pub(crate) async fn reconcile(ctx: &Ctx, v: RolloutView<'_>) {
    let Some(target) = &ctx.target else {
        return;
    };
    // InPlaceUpdate handles the old sets' Nodes as RollingUpdate does
    // (design: sets-and-deployments.md, "In-place updates").
    let rolling = matches!(
        v.strategy,
        Strategy::RollingUpdate { .. } | Strategy::InPlaceUpdate { .. }
    );
    if !rolling && !matches!(v.strategy, Strategy::Recreate) {
        return;
    }
    let nodes: Api<Node> = Api::all(target.clone());
    let generation = v.d.metadata.generation.unwrap_or(0);
    let status = v.d.status.clone().unwrap_or_default();
    let complete = is_complete(v.d.spec.replicas, generation, &status);
    let ongoing = !sets_scaled_to_zero(v.part.old.iter().map(|&i| &v.views[i]));

    if rolling {
        for &i in &v.part.old {
            if let Err(e) = taint_set(ctx, &nodes, &v, i).await {
                warn!(set = %v.sets[i].name_any(), error = %e, "prefer-no-schedule taint not applied yet");
            }
        }
        if complete {
            if let Some(n) = v.part.new {
                if let Err(e) = untaint_set(ctx, &nodes, &v, n).await {
                    warn!(set = %v.sets[n].name_any(), error = %e, "prefer-no-schedule taint not removed yet");
                }
            }
        }
    }
    for m in v.machines {
        let Some(node_name) = m.labels().get(c::NODE_LABEL).filter(|n| !n.is_empty()) else {
            continue;
        };
        let Some(node) = ctx.nodes.get(&ObjectRef::new(node_name)) else {
            continue;
        };
        let preserved = m
            .status
            .as_ref()
            .is_some_and(|s| s.current_status.preserve_expiry_time.is_some());
        let value = match scale_down_disabled_change(
            ongoing,
            complete,
            &node.annotations().clone(),
            preserved,
        ) {
            ScaleDownDisabledChange::Add
                if ctx
                    .config
                    .sets
                    .autoscaler_scaledown_annotation_during_rollout =>
            {
                Some(c::CA_SCALE_DOWN_DISABLED_VALUE)
            }
            ScaleDownDisabledChange::Remove => None,
            _ => continue,
        };
        let write = MetaPatch::new()
            .annotation_opt(c::CA_SCALE_DOWN_DISABLED_ANNOTATION, value)
            .annotation_opt(c::CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION, value);
        match write.send(&nodes, node_name).await {
            Ok(_) => info!(node = %node_name, machine = %m.name_any(), set = value.is_some(),
                           "cluster-autoscaler scale-down-disabled annotations"),
            Err(e) => {
                warn!(node = %node_name, error = %e, "scale-down-disabled annotations not written")
            }
        }
    }
}

fn prefer_no_schedule() -> Taint {
    Taint {
        key: c::PREFER_NO_SCHEDULE_KEY.into(),
        value: Some(c::PREFER_NO_SCHEDULE_VALUE.into()),
        effect: "PreferNoSchedule".into(),
        time_added: None,
    }
}

fn is_ours(t: &Taint) -> bool {
    t.key == c::PREFER_NO_SCHEDULE_KEY && t.effect == "PreferNoSchedule"
}

fn set_marked(set: &MachineSet) -> bool {
    set.annotations().contains_key(c::PREFER_NO_SCHEDULE_KEY)
}

/// The cached Nodes of set `i`'s machines.
fn set_nodes(ctx: &Ctx, v: &RolloutView<'_>, i: usize) -> Vec<Arc<Node>> {
    let uid = &v.views[i].uid;
    v.machines
        .iter()
        .filter(|m| controller_ref(&m.metadata).is_some_and(|r| &r.uid == uid))
        .filter_map(|m| m.labels().get(c::NODE_LABEL).cloned())
        .filter_map(|n| ctx.nodes.get(&ObjectRef::new(&n)))
        .collect()
}

/// Writes a Node's taints, guarded by its taint list as read.
async fn write_taints(
    nodes: &Api<Node>,
    node: &Node,
    taints: Vec<Taint>,
) -> Result<(), kube::Error> {
    MetaPatch::new()
        .guarded_by_read(node)
        .taints(taints)
        .send(nodes, &node.name_any())
        .await
        .map(|_| ())
}

async fn taint_set(
    ctx: &Ctx,
    nodes: &Api<Node>,
    v: &RolloutView<'_>,
    i: usize,
) -> Result<(), kube::Error> {
    let set = &v.sets[i];
    if set_marked(set) {
        return Ok(());
    }
    for node in set_nodes(ctx, v, i) {
        let mut taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if taints.iter().any(is_ours) {
            continue;
        }
        taints.push(prefer_no_schedule());
        write_taints(nodes, &node, taints).await?;
        debug!(node = %node.name_any(), set = %set.name_any(), "prefer-no-schedule taint added");
    }
    annotate_set(ctx, set, Some(c::PREFER_NO_SCHEDULE_VALUE)).await?;
    info!(set = %set.name_any(), "old MachineSet's nodes tainted prefer-no-schedule");
    Ok(())
}

async fn untaint_set(
    ctx: &Ctx,
    nodes: &Api<Node>,
    v: &RolloutView<'_>,
    i: usize,
) -> Result<(), kube::Error> {
    let set = &v.sets[i];
    if !set_marked(set) {
        return Ok(());
    }
    for node in set_nodes(ctx, v, i) {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        if !taints.iter().any(is_ours) {
            continue;
        }
        let kept: Vec<Taint> = taints.into_iter().filter(|t| !is_ours(t)).collect();
        write_taints(nodes, &node, kept).await?;
    }
    annotate_set(ctx, set, None).await?;
    info!(set = %set.name_any(), "new MachineSet's nodes untainted prefer-no-schedule");
    Ok(())
}

async fn annotate_set(ctx: &Ctx, set: &MachineSet, value: Option<&str>) -> Result<(), kube::Error> {
    MetaPatch::new()
        .guarded_by(version_of(set))
        .annotation_opt(c::PREFER_NO_SCHEDULE_KEY, value)
        .send(&ctx.machine_sets(), &set.name_any())
        .await
        .map(|_| ())
}
