//! Simulated kubelets: every running instance registers a Node in the target
//! cluster and keeps it alive the way a kubelet does.
//!
//! Once an instance is running (after the boot delay) its "kubelet" creates
//! the Node (name = the machine name, `spec.providerID`, labels including
//! `node.gardener.cloud/machine-name`, addresses, capacity, a Ready=True
//! condition), then, while the instance runs, renews its Lease in
//! `kube-node-lease` every heartbeat interval and refreshes the Ready
//! condition's `lastHeartbeatTime` every node-status interval (the Lease with
//! server-side apply; the Node status with a strategic merge patch that replaces
//! the address list, since server-side apply rejects a dual-stack Node's two
//! `InternalIP` entries as duplicate keys). A stopped or killed instance simply stops: the node
//! lifecycle controller of kube-controller-manager then marks the Node
//! `Unknown`.
//!
//! A terminated (deleted) instance's Node is deleted, as a real cloud's node
//! lifecycle controller does once the VM is gone: otherwise the Node of an
//! orphan VM that the safety controller collected would stay `NotReady`
//! forever, since no Machine refers to it. Only Nodes this process registered
//! or adopted are deleted, with the UID as a precondition, so a Node of the
//! same name registered since (or by another local cloud sharing the cluster)
//! is left alone; Nodes of instances deleted while the cloud was down are not
//! known and are left too.

use crate::server::Shared;
use crate::wire::{Instance, InstanceState};
use crate::Error;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// The field manager of the simulated kubelets.
pub const FIELD_MANAGER: &str = "mcm-local-kubelet";
/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The label naming the machine of a Node.
pub const MACHINE_NAME_LABEL: &str = "node.gardener.cloud/machine-name";
/// The lease duration the simulated kubelets announce (a kubelet's default).
pub const LEASE_DURATION_SECONDS: i32 = 40;
const MAX_CONCURRENT_CALLS: usize = 16;

/// Periods of the simulation and the taints Nodes register with.
#[derive(Debug, Clone)]
pub(crate) struct KubeletConfig {
    pub heartbeat_interval: Duration,
    pub node_status_interval: Duration,
    /// The kubelet's `--register-with-taints`: set on a Node it creates
    /// (never on one it adopts), as a real kubelet does.
    pub register_with_taints: Vec<Taint>,
}

/// A client for the target cluster.
pub(crate) async fn client(path: &Path) -> Result<Client, Error> {
    let fail = |message: String| Error::TargetCluster {
        path: path.to_path_buf(),
        message,
    };
    let kc = Kubeconfig::read_from(path).map_err(|e| fail(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    Client::try_from(config).map_err(|e| fail(e.to_string()))
}

/// What one simulated kubelet remembers between ticks.
#[derive(Debug, Clone)]
struct NodeMemory {
    node_uid: Option<String>,
    ready_since: Timestamp,
    last_lease: Option<Instant>,
    last_status: Option<Instant>,
    /// `readyAt` of the boot this memory belongs to (a restart starts afresh).
    boot: chrono::DateTime<chrono::Utc>,
}

impl NodeMemory {
    fn new(inst: &Instance) -> Self {
        NodeMemory {
            node_uid: None,
            ready_since: Timestamp::now(),
            last_lease: None,
            last_status: None,
            boot: inst.ready_at,
        }
    }
}

fn due(last: Option<Instant>, every: Duration, now: Instant) -> bool {
    last.is_none_or(|t| now.saturating_duration_since(t) >= every)
}

/// The simulation loop; runs until aborted.
pub(crate) async fn run(shared: Arc<Shared>, client: Client, cfg: KubeletConfig) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let tick = cfg
        .heartbeat_interval
        .min(cfg.node_status_interval)
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(100));
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut memory: HashMap<String, NodeMemory> = HashMap::new();
    // Instance ID -> (node name, node UID) of every Node registered or adopted.
    let mut registered: HashMap<String, (String, String)> = HashMap::new();
    loop {
        ticker.tick().await;
        let instances = shared.snapshot().await;
        let existing: HashSet<&str> = instances.iter().map(|i| i.id.as_str()).collect();
        let terminated: Vec<(String, (String, String))> = registered
            .iter()
            .filter(|(id, _)| !existing.contains(id.as_str()))
            .map(|(id, n)| (id.clone(), n.clone()))
            .collect();
        let done: Vec<String> = futures::stream::iter(terminated)
            .map(|(id, (node, uid))| {
                let nodes = nodes.clone();
                async move { delete_node(&nodes, &id, &node, &uid).await.then_some(id) }
            })
            .buffer_unordered(MAX_CONCURRENT_CALLS)
            .filter_map(|id| async move { id })
            .collect()
            .await;
        for id in done {
            registered.remove(&id);
        }
        let running: Vec<Instance> = instances
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .collect();
        // Forget kubelets whose instance stopped, died, was deleted or rebooted.
        let keep: HashMap<&str, &Instance> = running.iter().map(|i| (i.id.as_str(), i)).collect();
        memory.retain(|id, m| keep.get(id.as_str()).is_some_and(|i| i.ready_at == m.boot));
        let now = Instant::now();
        let work: Vec<(Instance, NodeMemory)> = running
            .iter()
            .map(|i| {
                let m = memory
                    .get(&i.id)
                    .cloned()
                    .unwrap_or_else(|| NodeMemory::new(i));
                (i.clone(), m)
            })
            .filter(|(_, m)| {
                m.node_uid.is_none()
                    || due(m.last_lease, cfg.heartbeat_interval, now)
                    || due(m.last_status, cfg.node_status_interval, now)
            })
            .collect();
        if work.is_empty() {
            continue;
        }
        let cfg = &cfg;
        let results: Vec<(String, NodeMemory)> = futures::stream::iter(work)
            .map(|(inst, m)| {
                let nodes = nodes.clone();
                let leases = leases.clone();
                async move {
                    let m = beat(&nodes, &leases, &inst, m, cfg).await;
                    (inst.id, m)
                }
            })
            .buffer_unordered(MAX_CONCURRENT_CALLS)
            .collect()
            .await;
        for (id, m) in &results {
            if let (Some(uid), Some(inst)) = (&m.node_uid, keep.get(id.as_str())) {
                registered.insert(id.clone(), (inst.node_name.clone(), uid.clone()));
            }
        }
        memory.extend(results);
    }
}

/// Deletes the Node of a terminated instance if it is still the one this
/// process saw (UID precondition); `true` when there is nothing left to do.
async fn delete_node(nodes: &Api<Node>, id: &str, node: &str, uid: &str) -> bool {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match nodes.delete(node, &params).await {
        Ok(_) => {
            info!(instance = %id, node = %node, "instance terminated: its node deleted");
            true
        }
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => {
            debug!(instance = %id, node = %node, "the terminated instance's node is already gone or replaced");
            true
        }
        Err(e) => {
            warn!(instance = %id, node = %node, error = %e, "deleting the terminated instance's node failed; retrying");
            false
        }
    }
}

async fn beat(
    nodes: &Api<Node>,
    leases: &Api<Lease>,
    inst: &Instance,
    mut m: NodeMemory,
    cfg: &KubeletConfig,
) -> NodeMemory {
    let now = Instant::now();
    if m.node_uid.is_none() {
        match register(nodes, inst, &m, &cfg.register_with_taints).await {
            Ok(Some(uid)) => {
                m.node_uid = Some(uid);
                m.last_status = Some(now);
            }
            Ok(None) => return m,
            Err(e) => {
                warn!(instance = %inst.id, machine = %inst.machine_name, node = %inst.node_name,
                      error = %e, "node registration failed; retrying");
                return m;
            }
        }
    }
    let Some(uid) = m.node_uid.clone() else {
        return m;
    };
    if due(m.last_lease, cfg.heartbeat_interval, now) {
        match renew_lease(leases, inst, &uid).await {
            Ok(()) => m.last_lease = Some(now),
            Err(e) => {
                warn!(instance = %inst.id, node = %inst.node_name, error = %e, "lease renewal failed")
            }
        }
    }
    if due(m.last_status, cfg.node_status_interval, now) {
        let node = status_node(inst, &m);
        match nodes
            .patch_status(
                &inst.node_name,
                &status_patch_params(),
                &Patch::Strategic(&node),
            )
            .await
        {
            Ok(_) => m.last_status = Some(now),
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                info!(instance = %inst.id, node = %inst.node_name, "node is gone; registering again");
                m.node_uid = None;
            }
            Err(e) => {
                warn!(instance = %inst.id, node = %inst.node_name, error = %e, "node status update failed")
            }
        }
    }
    m
}

/// Creates the Node (or adopts an existing one with the same providerID);
/// `None` when a Node of that name belongs to another VM.
async fn register(
    nodes: &Api<Node>,
    inst: &Instance,
    m: &NodeMemory,
    taints: &[Taint],
) -> Result<Option<String>, kube::Error> {
    let existing = match nodes.get_opt(&inst.node_name).await? {
        Some(n) => Some(n),
        None => {
            let node = new_node(inst, m, taints);
            match nodes.create(&PostParams::default(), &node).await {
                Ok(created) => {
                    info!(instance = %inst.id, machine = %inst.machine_name, node = %inst.node_name,
                          provider_id = %inst.provider_id, taints = taints.len(), "node registered");
                    // The API server may drop status on create: apply it right away.
                    let status = status_node(inst, m);
                    nodes
                        .patch_status(
                            &inst.node_name,
                            &status_patch_params(),
                            &Patch::Strategic(&status),
                        )
                        .await?;
                    return Ok(created.metadata.uid);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => nodes.get_opt(&inst.node_name).await?,
                Err(e) => return Err(e),
            }
        }
    };
    let Some(node) = existing else {
        return Ok(None);
    };
    let theirs = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or("");
    if !theirs.is_empty() && theirs != inst.provider_id {
        warn!(instance = %inst.id, node = %inst.node_name, node_provider_id = theirs,
              "a node of this name belongs to another VM; not heartbeating for it");
        return Ok(None);
    }
    debug!(instance = %inst.id, node = %inst.node_name, "adopting the existing node");
    Ok(node.metadata.uid)
}

fn capacity(instance_type: &str) -> BTreeMap<String, Quantity> {
    let (cpu, mem) = if instance_type.contains("xlarge") {
        ("8", "16Gi")
    } else if instance_type.contains("large") {
        ("4", "8Gi")
    } else if instance_type.contains("small") {
        ("1", "2Gi")
    } else {
        ("2", "4Gi")
    };
    [
        ("cpu", cpu),
        ("memory", mem),
        ("pods", "110"),
        ("ephemeral-storage", "50Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
    .collect()
}

fn labels(inst: &Instance) -> BTreeMap<String, String> {
    [
        (MACHINE_NAME_LABEL, inst.machine_name.as_str()),
        ("kubernetes.io/hostname", inst.node_name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        (
            "node.kubernetes.io/instance-type",
            inst.instance_type.as_str(),
        ),
        ("topology.kubernetes.io/zone", inst.zone.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn status(inst: &Instance, m: &NodeMemory) -> NodeStatus {
    let now = Time(Timestamp::now());
    let since = Time(m.ready_since);
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(since.clone()),
    };
    let cap = capacity(&inst.instance_type);
    NodeStatus {
        addresses: Some(crate::driver::addresses(inst)),
        allocatable: Some(cap.clone()),
        capacity: Some(cap),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status (simulated by the mcm local cloud)",
            ),
        ]),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            boot_id: format!("{}-{}", inst.id, m.boot.timestamp()),
            container_runtime_version: "local://0.0.0".into(),
            kernel_version: "0.0.0-local".into(),
            kube_proxy_version: String::new(),
            kubelet_version: "v0.0.0-local".into(),
            machine_id: inst.id.clone(),
            operating_system: "linux".into(),
            os_image: inst.image.clone(),
            system_uuid: inst.id.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn new_node(inst: &Instance, m: &NodeMemory, taints: &[Taint]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(inst.node_name.clone()),
            labels: Some(labels(inst)),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(inst.provider_id.clone()),
            taints: (!taints.is_empty()).then(|| taints.to_vec()),
            ..Default::default()
        }),
        status: Some(status(inst, m)),
    }
}

/// Node status goes as a JSON merge patch (lists replaced whole): a
/// dual-stack Node has several `InternalIP` addresses, which server-side
/// apply rejects as duplicate keys of the `addresses` list map.
fn status_patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

/// The Node status patch (strategic merge): conditions merge by type, so
/// conditions others own (the `InPlaceUpdate` condition of the machine
/// controller, a node-problem-detector's) survive the heartbeat, as with a
/// real kubelet; the address list is replaced as a whole (`$patch: replace`),
/// since a dual-stack Node has two `InternalIP` entries that a merge by type
/// would collapse.
fn status_node(inst: &Instance, m: &NodeMemory) -> serde_json::Value {
    let mut v = serde_json::json!({ "status": status(inst, m) });
    if let Some(addresses) = v
        .get_mut("status")
        .and_then(|s| s.get_mut("addresses"))
        .and_then(|a| a.as_array_mut())
    {
        addresses.push(serde_json::json!({"$patch": "replace"}));
    }
    v
}

async fn renew_lease(
    leases: &Api<Lease>,
    inst: &Instance,
    node_uid: &str,
) -> Result<(), kube::Error> {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(inst.node_name.clone()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: inst.node_name.clone(),
                uid: node_uid.to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(inst.node_name.clone()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    };
    leases
        .patch(
            &inst.node_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await?;
    debug!(instance = %inst.id, node = %inst.node_name, "lease renewed");
    Ok(())
}
