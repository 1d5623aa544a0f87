//! The API calls of `mcm run`, shared by `deploy.rs` (the shipped RBAC grants
//! exactly these) and `rbac_e2e.rs` (a run of the controllers under the
//! shipped RBAC makes only these, and every one marked [`Reached::Run`]).
//!
//! The list is derived from that run: every request its clients send is
//! recorded ([`classify`]), and the run forces the paths a quiet run does not
//! take (a stale copy's finalizer removal, retried on a fresh GET). Calls of
//! paths the run does not reach (a forced drain, bootstrap tokens, ...) are
//! marked [`Reached::Code`], with where they are made.

#![allow(dead_code)] // each test binary uses its part

pub const MCM: &str = "machine.sapcloud.io";
pub const CORE: &str = "";
pub const LEASES: &str = "coordination.k8s.io";
pub const STORAGE: &str = "storage.k8s.io";
pub const POLICY: &str = "policy";

/// Where a call is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// In the control namespace (`--namespace`).
    Control,
    /// In kube-system of the target cluster.
    KubeSystem,
    /// A namespaced resource, in whatever namespace the drained pods are.
    AnyNamespace,
    /// A cluster-scoped resource, or a list across all namespaces.
    Cluster,
}

/// Whether the run of `rbac_e2e.rs` makes the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Made by every run (the test fails when it is not).
    Run,
    /// Not reached by the run; read off the code (`by` says where).
    Code,
}

/// One API call of the controllers.
pub struct Call {
    pub verb: &'static str,
    pub group: &'static str,
    /// `resource` or `resource/subresource`.
    pub resource: &'static str,
    pub scope: Scope,
    /// Who makes it.
    pub by: &'static str,
    pub reached: Reached,
}

const fn run(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    scope: Scope,
    by: &'static str,
) -> Call {
    Call {
        verb,
        group,
        resource,
        scope,
        by,
        reached: Reached::Run,
    }
}

const fn code(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    scope: Scope,
    by: &'static str,
) -> Call {
    Call {
        verb,
        group,
        resource,
        scope,
        by,
        reached: Reached::Code,
    }
}

use Scope::{AnyNamespace, Cluster, Control, KubeSystem};

/// Every API call `mcm run` makes (the MachineSet and MachineDeployment
/// controllers in `runtime/src/sets` included).
pub static CALLS: &[Call] = &[
    // Machines. Readers use a watch cache; only a finalizer removal that
    // found its copy stale GETs a fresh one.
    run("get", MCM, "machines", Control, "finalizer.rs remove_retrying_stale (machine/delete.rs finalizer removal on a stale copy)"),
    run("list", MCM, "machines", Control, "watch caches (machine, class, set controllers); class.rs users; safety.rs probe, orphans, unmanaged nodes"),
    run("watch", MCM, "machines", Control, "machine.rs, class.rs, sets/mod.rs watches"),
    run("create", MCM, "machines", Control, "sets/machineset.rs slow-start creation"),
    code("update", MCM, "machines", Control, "sets/machineset.rs template propagation (replace)"),
    run("patch", MCM, "machines", Control, "machine.rs finalizer, providerID, labels, annotations; sets adopt/release, auto-preservation, autoscaler deletion marks"),
    run("delete", MCM, "machines", Control, "machine.rs when its Node is being deleted; sets/machineset.rs scale-down"),
    run("patch", MCM, "machines/status", Control, "machine.rs status writes; safety.rs reset of Unknown"),
    // MachineClasses.
    code("get", MCM, "machineclasses", Control, "machine.rs inputs, provider name"),
    run("list", MCM, "machineclasses", Control, "watch caches; class.rs other classes; safety.rs orphan collection"),
    run("watch", MCM, "machineclasses", Control, "machine.rs, class.rs controllers"),
    run("patch", MCM, "machineclasses", Control, "class.rs finalizer"),
    // MachineSets.
    code("get", MCM, "machinesets", Control, "sets/machineset.rs reconcile, owner recheck; sets/deployment/new_set.rs name collision"),
    run("list", MCM, "machinesets", Control, "sets/mod.rs watch"),
    run("watch", MCM, "machinesets", Control, "sets/mod.rs watch"),
    run("create", MCM, "machinesets", Control, "sets/deployment/new_set.rs new MachineSet"),
    code("update", MCM, "machinesets", Control, "sets/deployment/new_set.rs template annotations (replace)"),
    run("patch", MCM, "machinesets", Control, "sets finalizer, adopt/release, scale; sets/overshoot.rs freeze label"),
    code("delete", MCM, "machinesets", Control, "sets/deployment/{revisions,deletion}.rs cleanup, deletion"),
    run("update", MCM, "machinesets/status", Control, "sets/machineset.rs status (replace_status)"),
    code("patch", MCM, "machinesets/status", Control, "sets/overshoot.rs Frozen condition"),
    // MachineDeployments.
    code("get", MCM, "machinedeployments", Control, "sets/deployment/claiming.rs owner recheck"),
    run("list", MCM, "machinedeployments", Control, "sets/mod.rs watch"),
    run("watch", MCM, "machinedeployments", Control, "sets/mod.rs watch"),
    run("update", MCM, "machinedeployments", Control, "sets/deployment/{autoscaler,new_set,revisions}.rs annotations, rollback (replace)"),
    run("patch", MCM, "machinedeployments", Control, "sets finalizer; sets/overshoot.rs freeze label"),
    run("update", MCM, "machinedeployments/status", Control, "sets/deployment/{mod,status}.rs status (replace_status)"),
    code("patch", MCM, "machinedeployments/status", Control, "sets/overshoot.rs Frozen condition"),
    // The Secrets of MachineClasses.
    code("get", CORE, "secrets", Control, "class.rs finalizer"),
    run("list", CORE, "secrets", Control, "caches.rs Secret cache (class secrets)"),
    run("watch", CORE, "secrets", Control, "caches.rs Secret cache (class secrets)"),
    run("patch", CORE, "secrets", Control, "class.rs secret finalizer"),
    // Events in core/v1 (events.rs: create, then patch the count of a repeated one).
    run("create", CORE, "events", Control, "events.rs Recorder::publish (machine.rs, sets)"),
    code("patch", CORE, "events", Control, "events.rs Recorder::publish of a repeated event"),
    // Leader election.
    run("get", LEASES, "leases", Control, "leader/mod.rs acquire or renew (GET)"),
    run("create", LEASES, "leases", Control, "leader/mod.rs first acquire"),
    run("update", LEASES, "leases", Control, "leader/mod.rs renew, take over, release (replace)"),
    // Bootstrap tokens in the target cluster.
    code("get", CORE, "secrets", KubeSystem, "class.rs bootstrap_token reuse; delete_bootstrap_token for a token another process issued"),
    run("create", CORE, "secrets", KubeSystem, "class.rs bootstrap_token"),
    run("delete", CORE, "secrets", KubeSystem, "class.rs bootstrap_token expired, delete_bootstrap_token"),
    // Nodes.
    run("get", CORE, "nodes", Cluster, "machine.rs stale node, delete_node; drain.rs cordon, detach wait"),
    run("list", CORE, "nodes", Cluster, "machine.rs node cache; safety.rs probe, unmanaged nodes"),
    run("watch", CORE, "nodes", Cluster, "machine.rs node cache"),
    run("patch", CORE, "nodes", Cluster, "machine.rs sync_node, node finalizer; drain.rs cordon; safety.rs not-managed annotation"),
    run("delete", CORE, "nodes", Cluster, "machine.rs delete_node"),
    run("patch", CORE, "nodes/status", Cluster, "drain.rs Terminating condition"),
    // Drain.
    run("list", CORE, "pods", Cluster, "drain.rs pods of the node (all namespaces)"),
    run("get", CORE, "pods", AnyNamespace, "drain.rs wait until evicted"),
    code("delete", CORE, "pods", AnyNamespace, "drain.rs forced drain only"),
    run("create", CORE, "pods/eviction", AnyNamespace, "drain.rs evict"),
    code("list", POLICY, "poddisruptionbudgets", AnyNamespace, "drain.rs misconfigured_budget (a refused eviction)"),
    code("get", CORE, "persistentvolumeclaims", AnyNamespace, "drain.rs volume_ids"),
    code("get", CORE, "persistentvolumes", Cluster, "drain.rs volume_ids"),
    code("list", STORAGE, "volumeattachments", Cluster, "drain.rs wait_for_detach; machine.rs DeleteVolumeAttachments"),
    code("delete", STORAGE, "volumeattachments", Cluster, "machine.rs DeleteVolumeAttachments"),
];

/// A request the controllers sent, as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub verb: String,
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    /// `None` for a cluster-scoped resource or a list across all namespaces.
    pub namespace: Option<String>,
}

/// The RBAC view of a request (method and URI), `None` for a non-resource
/// URL (`/version`, discovery).
pub fn classify(method: &str, uri: &http::Uri) -> Option<Request> {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_string()), rest),
        _ => (None, rest),
    };
    let (resource, name, sub) = match rest {
        [res] => (*res, None, None),
        [res, name] => (*res, Some(*name), None),
        [res, name, sub] => (*res, Some(*name), Some(*sub)),
        _ => return None,
    };
    let watch = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, name) {
        ("GET", Some(_)) => "get",
        ("GET", None) if watch => "watch",
        ("GET", None) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", Some(_)) => "delete",
        ("DELETE", None) => "deletecollection",
        _ => return None,
    };
    Some(Request {
        verb: verb.into(),
        group: group.into(),
        resource: match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.into(),
        },
        namespace,
    })
}

/// The entry of [`CALLS`] a request made in a run whose control namespace is
/// `control` matches.
pub fn listed(r: &Request, control: &str) -> Option<&'static Call> {
    CALLS.iter().find(|c| {
        c.verb == r.verb
            && c.group == r.group
            && c.resource == r.resource
            && match (c.scope, r.namespace.as_deref()) {
                (Control, Some(ns)) => ns == control,
                (KubeSystem, Some(ns)) => ns == "kube-system",
                (AnyNamespace, Some(_)) => true,
                (Cluster, None) => true,
                _ => false,
            }
    })
}
