//! Cordon and drain of a Node before its VM is deleted.
//!
//! Evictions respect PodDisruptionBudgets: a 429 is retried every
//! `eviction_retry_interval`, up to `max_evict_retries` attempts or the drain's
//! deadline, and then the drain fails; the pod is never deleted around its
//! budget. A refusal by a budget that can never allow the eviction
//! (`mcm_core::machine::pdb`) fails the drain at once. Only a forced drain
//! (the `force-deletion` label, the drain timeout passed since the deletion,
//! or a node NotReady/ReadonlyFilesystem for more than 5 minutes; decided by
//! `mcm_core::machine::plan_drain`) deletes pods,
//! each with grace period 0 and without waiting. DaemonSet and mirror pods are
//! skipped; pods without volumes are evicted in parallel, pods with volumes one
//! at a time by priority, each waiting until its volumes' VolumeAttachments on
//! this node are detached, then until its PersistentVolumes are attached to
//! another node (at most `--machine-pv-reattach-timeout`).
//!
//! Drains run as tasks beside the reconciles ([`tasks`]), so a drain blocked by
//! a budget holds no reconcile slot. See `docs/design/machine.md` (Drain).
//!
//! Every request that changes the target cluster (cordon, eviction, pod
//! deletion) checks the machine half's tenure first ([`DrainOptions::tenure`]):
//! a drain task of a leader that was paused past its renew deadline sends
//! nothing when it resumes (docs/design/leader-election.md, "One tenure
//! deadline").

pub mod tasks;

use crate::config::Config;
use crate::leader::{TenureEnded, TenureGate};
use crate::metadata::MetaPatch;
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, EvictParams, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use mcm_core::machine::DrainPlan;
use mcm_driver::{Driver, GetVolumeIdsRequest};
use std::time::Duration;
use tokio::time::{sleep, Instant};
use tracing::{debug, info, warn};

/// How a drain runs.
#[derive(Debug, Clone)]
pub(crate) struct DrainOptions {
    /// Delete pods with grace 0 and do not wait.
    pub(crate) force: bool,
    /// Overall deadline.
    pub(crate) timeout: Duration,
    /// Eviction attempts per pod before the drain fails (the pod is left alone).
    pub(crate) max_evict_retries: i32,
    /// Pause between evictions blocked by a PodDisruptionBudget.
    pub(crate) eviction_retry_interval: Duration,
    /// How long to wait for a pod's volumes to detach.
    pub(crate) pv_detach_timeout: Duration,
    /// How long to wait, after they detached, for a pod's volumes to attach
    /// to another Node.
    pub(crate) pv_reattach_timeout: Duration,
    /// The machine half's tenure, checked before every cordon, eviction and
    /// pod deletion.
    pub(crate) tenure: TenureGate,
}

impl DrainOptions {
    /// Options from a planned drain, the controller settings and the
    /// machine half's tenure (`Context::tenure`).
    pub(crate) fn from_plan(plan: &DrainPlan, cfg: &Config, tenure: &TenureGate) -> Self {
        DrainOptions {
            force: plan.force,
            timeout: plan.timeout,
            max_evict_retries: plan.max_evict_retries,
            eviction_retry_interval: cfg.eviction_retry_interval,
            pv_detach_timeout: cfg.pv_detach_timeout,
            pv_reattach_timeout: cfg.pv_reattach_timeout,
            tenure: tenure.clone(),
        }
    }
}

/// Why a drain did not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DrainError {
    /// A Kubernetes call failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// This replica no longer leads: the request was not sent.
    #[error("drain request {0}")]
    NotLeading(#[from] TenureEnded),
    /// The pods could not be removed in time.
    #[error("timed out draining node {node}: {pending} pod(s) left")]
    Timeout {
        /// The node.
        node: String,
        /// Pods not yet gone.
        pending: usize,
    },
    /// A PodDisruptionBudget blocks the eviction and cannot ever allow it
    /// (`mcm_core::machine::pdb::is_misconfigured_pdb`); the reference's text.
    #[error("{0}")]
    Misconfigured(String),
    /// Evictions kept being refused (429, a PodDisruptionBudget) for all attempts.
    #[error("eviction of pod {pod} refused {attempts} time(s) (429 TooManyRequests: it would violate its PodDisruptionBudget); the pod is left alone")]
    EvictionBlocked {
        /// `namespace/name` of the pod.
        pod: String,
        /// Eviction attempts made.
        attempts: i32,
    },
}

fn is_mirror(p: &Pod) -> bool {
    p.annotations().contains_key("kubernetes.io/config.mirror")
}

fn is_daemonset(p: &Pod) -> bool {
    p.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
}

fn pvc_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .map(|vs| {
            vs.iter()
                .filter_map(|v| {
                    v.persistent_volume_claim
                        .as_ref()
                        .map(|c| c.claim_name.clone())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The pods a drain must remove from a node.
pub(crate) fn pods_to_drain(pods: Vec<Pod>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| !is_mirror(p) && !is_daemonset(p))
        .collect()
}

/// The Node `name` from the shared cache, or from the API server when the
/// cache does not hold it (`None`: there is no such Node).
pub(crate) async fn cached_or_fetched(
    nodes: &Api<Node>,
    cache: &Store<Node>,
    name: &str,
) -> Result<Option<Node>, kube::Error> {
    match cache.get(&ObjectRef::new(name)) {
        Some(n) => Ok(Some((*n).clone())),
        None => nodes.get_opt(name).await,
    }
}

/// Cordons the node (spec.unschedulable) and sets its `Terminating` condition.
/// The Node is read from `cache` (a GET only when the cache lacks it), and the
/// condition goes as a strategic merge of that one condition, so a stale
/// copy never rewrites the kubelet's conditions. Nothing is written once
/// `tenure` ended.
pub(crate) async fn cordon(
    client: &Client,
    node: &str,
    cache: &Store<Node>,
    tenure: &TenureGate,
) -> Result<(), DrainError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let Some(n) = cached_or_fetched(&nodes, cache, node).await? else {
        return Ok(());
    };
    tenure.check()?;
    if !n
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        tenure.check()?;
        MetaPatch::new()
            .unschedulable(true)
            .send(&nodes, node)
            .await?;
    }
    let has_condition = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Terminating"));
    if !has_condition {
        let condition = mcm_core::machine::node_terminating_condition(chrono::Utc::now());
        tenure.check()?;
        if let Err(e) = crate::status::node::set_conditions(&nodes, node, vec![condition]).await {
            debug!(error = %e, "could not set the Terminating node condition");
        }
    }
    Ok(())
}

/// Cordons and drains `node`.
pub(crate) async fn drain_node(
    client: &Client,
    node: &str,
    cache: &Store<Node>,
    opts: &DrainOptions,
    driver: &dyn Driver,
) -> Result<(), DrainError> {
    let deadline = Instant::now() + opts.timeout;
    match cordon(client, node, cache, &opts.tenure).await {
        Ok(()) => {}
        Err(e @ DrainError::NotLeading(_)) => return Err(e),
        Err(e) if opts.force => warn!(node, error = %e, "cordon failed; continuing forced drain"),
        Err(e) => return Err(e),
    }
    remove_pods(client, node, opts, driver, deadline).await
}

/// Drains `node` without cordoning it: the drain of a preserved Failed
/// machine, whose Node is kept free of new pods by the `preserved:NoSchedule`
/// taint instead, so that a user's own cordon is never undone (design:
/// machine.md, "Preservation").
pub(crate) async fn drain_pods(
    client: &Client,
    node: &str,
    opts: &DrainOptions,
    driver: &dyn Driver,
) -> Result<(), DrainError> {
    remove_pods(client, node, opts, driver, Instant::now() + opts.timeout).await
}

async fn remove_pods(
    client: &Client,
    node: &str,
    opts: &DrainOptions,
    driver: &dyn Driver,
    deadline: Instant,
) -> Result<(), DrainError> {
    let pods_api: Api<Pod> = Api::all(client.clone());
    let pods = pods_to_drain(
        pods_api
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?
            .items,
    );
    info!(node, pods = pods.len(), force = opts.force, "draining node");
    if opts.force {
        let deletes = pods
            .iter()
            .map(|p| delete_pod(client, p, Some(0), &opts.tenure));
        for r in join_all(deletes).await {
            r?;
        }
        return Ok(());
    }
    let (mut with_pv, without_pv): (Vec<Pod>, Vec<Pod>) =
        pods.into_iter().partition(|p| !pvc_names(p).is_empty());
    let results = join_all(
        without_pv
            .iter()
            .map(|p| evict_and_wait(client, p, opts, deadline)),
    )
    .await;
    for r in results {
        r?;
    }
    with_pv
        .sort_by_key(|p| std::cmp::Reverse(p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)));
    for p in &with_pv {
        let volumes = volume_ids(client, p, driver).await;
        evict_and_wait(client, p, opts, deadline).await?;
        wait_for_detach(
            client,
            node,
            &volumes.all(),
            opts.pv_detach_timeout
                .min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
        wait_for_reattach(
            client,
            node,
            &volumes.pv_names,
            opts.pv_reattach_timeout
                .min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
    }
    Ok(())
}

async fn delete_pod(
    client: &Client,
    p: &Pod,
    grace: Option<u32>,
    tenure: &TenureGate,
) -> Result<(), DrainError> {
    tenure.check()?;
    let api: Api<Pod> = Api::namespaced(client.clone(), &p.namespace().unwrap_or_default());
    let dp = DeleteParams {
        grace_period_seconds: grace,
        ..Default::default()
    };
    match api.delete(&p.name_any(), &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn evict_and_wait(
    client: &Client,
    p: &Pod,
    opts: &DrainOptions,
    deadline: Instant,
) -> Result<(), DrainError> {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let node = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let mut attempts = 0;
    loop {
        attempts += 1;
        opts.tenure.check()?;
        // kube's client retries a 429 itself (with growing pauses, for
        // minutes): a call still unanswered after the retry interval is an
        // eviction the budget keeps refusing.
        let bound = opts
            .eviction_retry_interval
            .min(deadline.saturating_duration_since(Instant::now()));
        let waited =
            match tokio::time::timeout(bound, api.evict(&name, &EvictParams::default())).await {
                Ok(Ok(_)) => break,
                Ok(Err(kube::Error::Api(e))) if e.code == 404 => return Ok(()),
                Ok(Err(kube::Error::Api(e))) if e.code == 429 => false,
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => true,
            };
        // Refused: a budget that can never allow it fails the drain now.
        if let Some(err) = misconfigured_budget(client, p).await {
            warn!(pod = %name, namespace = %ns, node = %node, error = %err, "eviction refused by a misconfigured PodDisruptionBudget; drain fails");
            return Err(err);
        }
        let pause = if waited {
            Duration::ZERO
        } else {
            opts.eviction_retry_interval
        };
        if attempts >= opts.max_evict_retries || Instant::now() + pause >= deadline {
            // Never deleted around its budget: the drain fails, and the
            // deletion flow retries it until the drain timeout forces it.
            warn!(pod = %name, namespace = %ns, node = %node, attempts, "eviction still refused (PodDisruptionBudget); drain fails");
            return Err(DrainError::EvictionBlocked {
                pod: format!("{ns}/{name}"),
                attempts,
            });
        }
        debug!(pod = %name, namespace = %ns, attempts, "eviction refused (PodDisruptionBudget); retrying");
        sleep(pause).await;
    }
    // Wait until the pod is gone (or replaced by one with another UID).
    let uid = p.uid();
    loop {
        match api.get_opt(&name).await? {
            None => return Ok(()),
            Some(cur) if cur.uid() != uid => return Ok(()),
            Some(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(DrainError::Timeout { node, pending: 1 });
        }
        sleep(Duration::from_millis(500)).await;
    }
}

/// After a refused eviction: the drain error when the pod's budget can
/// never allow it (decided by `mcm_core::machine::pdb`). A budget that
/// cannot be listed counts as none, as the reference's lister miss.
async fn misconfigured_budget(client: &Client, p: &Pod) -> Option<DrainError> {
    use mcm_core::machine::pdb;
    let ns = p.namespace().unwrap_or_default();
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let budgets = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            debug!(namespace = %ns, error = %e, "PodDisruptionBudgets not listed");
            return None;
        }
    };
    let budget = pdb::pdb_for_pod(&budgets, p)?;
    let disrupted: Vec<&String> = budget
        .status
        .as_ref()
        .and_then(|s| s.disrupted_pods.as_ref())
        .map(|d| d.keys().collect())
        .unwrap_or_default();
    debug!(pod = %p.name_any(), budget = %budget.name_any(), ?disrupted, "eviction refused (PodDisruptionBudget)");
    pdb::is_misconfigured_pdb(budget).then(|| {
        DrainError::Misconfigured(pdb::misconfigured_pdb_error(
            &p.name_any(),
            &budget.namespace().unwrap_or_default(),
            &budget.name_any(),
        ))
    })
}

/// A pod's persistent volumes: their PV names and the provider's volume IDs.
#[derive(Debug, Default)]
struct PodVolumes {
    pv_names: Vec<String>,
    ids: Vec<String>,
}

impl PodVolumes {
    /// PV names and volume IDs (what a detachment is recognised by).
    fn all(&self) -> Vec<String> {
        self.pv_names.iter().chain(&self.ids).cloned().collect()
    }
}

/// The PV names and provider volume IDs of a pod's persistent volumes.
async fn volume_ids(client: &Client, p: &Pod, driver: &dyn Driver) -> PodVolumes {
    let ns = p.namespace().unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut specs = Vec::new();
    for claim in pvc_names(p) {
        let Ok(Some(pvc)) = pvcs.get_opt(&claim).await else {
            continue;
        };
        let Some(pv_name) = pvc.spec.and_then(|s| s.volume_name) else {
            continue;
        };
        names.push(pv_name.clone());
        if let Ok(Some(pv)) = pvs.get_opt(&pv_name).await {
            if let Some(spec) = pv.spec {
                specs.push(spec);
            }
        }
    }
    let ids = driver
        .get_volume_ids(&GetVolumeIdsRequest { pv_specs: specs })
        .await
        .map(|resp| resp.volume_ids)
        .unwrap_or_default();
    PodVolumes {
        pv_names: names,
        ids,
    }
}

/// Waits until each of `pvs` is attached to another Node than `node` (its
/// replacement pod started there), polling the VolumeAttachments, for at
/// most `timeout` (`--machine-pv-reattach-timeout`, bounded by the drain's
/// deadline). Running out of time is no failure: the drain goes on, as the
/// reference's. Decided by `mcm_core::machine::volumes`.
async fn wait_for_reattach(client: &Client, node: &str, pvs: &[String], timeout: Duration) {
    use mcm_core::machine::volumes::awaiting_reattachment;
    if pvs.is_empty() || node.is_empty() {
        return;
    }
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    let until = Instant::now() + timeout;
    let mut waiting = pvs.to_vec();
    loop {
        if let Ok(list) = vas.list(&ListParams::default()).await {
            waiting = awaiting_reattachment(&waiting, &list.items, node);
        }
        if waiting.is_empty() {
            debug!(node, ?pvs, "volumes re-attached to another node");
            return;
        }
        if Instant::now() >= until {
            warn!(node, volumes = ?waiting, "timeout waiting for volumes to re-attach to another node");
            return;
        }
        sleep(REATTACH_POLL.min(until.saturating_duration_since(Instant::now()))).await;
    }
}

/// How often the re-attachment wait looks at the VolumeAttachments.
const REATTACH_POLL: Duration = Duration::from_secs(1);

/// Waits until no live VolumeAttachment on `node` refers to one of `volumes`
/// (PV names or provider volume IDs), and the node reports none attached.
async fn wait_for_detach(client: &Client, node: &str, volumes: &[String], timeout: Duration) {
    if volumes.is_empty() {
        return;
    }
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let until = Instant::now() + timeout;
    loop {
        let attached_va = match vas.list(&ListParams::default()).await {
            Ok(list) => list.items.iter().any(|va| {
                va.spec.node_name == node
                    && va.status.as_ref().is_some_and(|s| s.attached)
                    && va
                        .spec
                        .source
                        .persistent_volume_name
                        .as_ref()
                        .is_some_and(|pv| volumes.contains(pv))
            }),
            Err(_) => false,
        };
        let attached_node = match nodes.get_opt(node).await {
            Ok(Some(n)) => n
                .status
                .and_then(|s| s.volumes_attached)
                .unwrap_or_default()
                .iter()
                .any(|v| volumes.iter().any(|id| v.name.contains(id.as_str()))),
            _ => false,
        };
        if !attached_va && !attached_node {
            return;
        }
        if Instant::now() >= until {
            warn!(node, "timed out waiting for volumes to detach");
            return;
        }
        sleep(Duration::from_secs(1)).await;
    }
}
