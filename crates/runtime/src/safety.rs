//! The machine controller's safety loops: orphan-VM collection, the freeze
//! while an API server is unreachable, and the annotation of Nodes that no
//! Machine manages (design: safety.md).
//!
//! Orphan collection is deliberately conservative: it never runs while the
//! controller is frozen, it never touches a VM whose machine is still being
//! created (phase empty or CrashLoopBackOff), and a VM must be seen orphaned for
//! a whole grace period (continuously) before it is deleted, so a VM created
//! moments ago whose providerID is not yet persisted is safe.

use crate::{Context, Error};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachinePhase};
use mcm_driver::ListMachinesRequest;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Settings of the safety loops.
#[derive(Debug, Clone)]
pub struct SafetyConfig {
    /// How often orphan VMs are looked for (`--machine-safety-orphan-vms-period`, 15m).
    pub orphan_period: Duration,
    /// How long a VM must be seen orphaned before it is deleted.
    pub orphan_grace: Duration,
    /// How often the API servers are probed (`--machine-safety-apiserver-statuscheck-period`, 1m).
    pub apiserver_check_period: Duration,
}

impl Default for SafetyConfig {
    fn default() -> Self {
        SafetyConfig {
            orphan_period: Duration::from_secs(15 * 60),
            orphan_grace: Duration::from_secs(10 * 60),
            apiserver_check_period: Duration::from_secs(60),
        }
    }
}

/// Remembers when each orphan candidate was first seen.
#[derive(Default)]
pub struct OrphanTracker {
    first_seen: HashMap<String, Instant>,
}

impl OrphanTracker {
    /// Records the current candidates and returns those orphaned for longer than `grace`.
    pub fn due(
        &mut self,
        candidates: &HashSet<String>,
        grace: Duration,
        now: Instant,
    ) -> Vec<String> {
        self.first_seen.retain(|k, _| candidates.contains(k));
        let mut due = Vec::new();
        for c in candidates {
            let seen = *self.first_seen.entry(c.clone()).or_insert(now);
            if now.duration_since(seen) >= grace {
                due.push(c.clone());
            }
        }
        due.sort();
        due
    }
}

/// Which listed VMs are orphans: no Machine has their providerID, and no Machine
/// of that name is still being created.
pub fn orphan_candidates(
    listed: &std::collections::BTreeMap<String, String>,
    machines: &[Machine],
) -> HashSet<String> {
    let by_pid: HashSet<&str> = machines
        .iter()
        .map(|m| m.spec.provider_id.as_str())
        .filter(|p| !p.is_empty())
        .collect();
    listed
        .iter()
        .filter(|(pid, name)| {
            if by_pid.contains(pid.as_str()) {
                return false;
            }
            let creating = machines.iter().any(|m| {
                m.name_any() == **name
                    && matches!(
                        m.status.clone().unwrap_or_default().current_status.phase,
                        MachinePhase::Empty | MachinePhase::CrashLoopBackOff
                    )
            });
            !creating
        })
        .map(|(pid, _)| pid.clone())
        .collect()
}

/// One orphan-collection pass over all classes. Returns the deleted providerIDs.
pub async fn collect_orphans(
    ctx: &Context,
    tracker: &mut OrphanTracker,
    grace: Duration,
) -> Result<Vec<String>, Error> {
    if ctx.is_frozen() {
        info!("orphan collection skipped: the controller is frozen");
        return Ok(Vec::new());
    }
    let ns = &ctx.config.namespace;
    let classes: Api<MachineClass> = Api::namespaced(ctx.client.clone(), ns);
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), ns);
    let machine_list = machines.list(&ListParams::default()).await?.items;
    let mut listed_names = std::collections::BTreeMap::new();
    let mut owners = HashMap::new();
    for class in classes.list(&ListParams::default()).await?.items {
        let Some(driver) = ctx.drivers.get(Some(&class.provider)) else {
            continue;
        };
        let secret = match crate::class::merged_secret(&ctx.client, &class).await? {
            Ok(s) => s,
            Err(_) => continue,
        };
        let req = ListMachinesRequest {
            machine_class: class.clone(),
            secret: secret.clone(),
        };
        match driver.list_machines(&req).await {
            Ok(resp) => {
                for (pid, name) in resp.machine_list {
                    owners.insert(
                        pid.clone(),
                        (class.clone(), secret.clone(), driver.clone(), name.clone()),
                    );
                    listed_names.insert(pid, name);
                }
            }
            Err(e) => {
                warn!(class = %class.name_any(), error = %e, "ListMachines failed; retrying next period")
            }
        }
    }
    let candidates = orphan_candidates(&listed_names, &machine_list);
    let mut deleted = Vec::new();
    for pid in tracker.due(&candidates, grace, Instant::now()) {
        if ctx.is_frozen() {
            break;
        }
        let Some((class, secret, driver, name)) = owners.get(&pid).cloned() else {
            continue;
        };
        info!(provider_id = %pid, machine = %name, "deleting orphan VM");
        match crate::machine::delete_orphan(driver.as_ref(), class, secret, &pid, &name).await {
            Ok(()) => deleted.push(pid),
            Err(e) => {
                warn!(provider_id = %pid, error = %e, "deleting orphan VM failed; retrying next period")
            }
        }
    }
    Ok(deleted)
}

/// Probes the control and target API servers.
pub async fn apiservers_reachable(ctx: &Context) -> bool {
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let lp = ListParams::default().limit(1);
    let control = tokio::time::timeout(Duration::from_secs(10), machines.list(&lp)).await;
    if !matches!(control, Ok(Ok(_))) {
        return false;
    }
    if let Some(target) = &ctx.target {
        let nodes: Api<Node> = Api::all(target.clone());
        let t = tokio::time::timeout(Duration::from_secs(10), nodes.list(&lp)).await;
        return matches!(t, Ok(Ok(_)));
    }
    true
}

/// Resets Unknown machines to Running after an unfreeze, so that the outage does
/// not count against their health timeout.
pub async fn reset_unknown_machines(ctx: &Context) -> Result<(), Error> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    for m in api.list(&ListParams::default()).await?.items {
        if m.status.clone().unwrap_or_default().current_status.phase != MachinePhase::Unknown {
            continue;
        }
        let patch = json!({"status": {
            "currentStatus": {"phase": "Running", "lastUpdateTime": now},
            "lastOperation": {"description": "Machine Health Timeout was reset due to APIServer being unreachable",
                              "state": "Successful", "type": "HealthCheck", "lastUpdateTime": now},
        }});
        api.patch_status(
            &m.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(())
}

/// Annotates Nodes that no Machine names (older than the creation timeout) with
/// `node.machine.sapcloud.io/not-managed-by-mcm=1`, and removes it from managed ones.
pub async fn annotate_unmanaged_nodes(ctx: &Context) -> Result<(), Error> {
    let Some(target) = &ctx.target else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(target.clone());
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let managed: HashSet<String> = machines
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|m| m.labels().get(c::NODE_LABEL).cloned())
        .collect();
    let now = chrono::Utc::now();
    for n in nodes.list(&ListParams::default()).await?.items {
        let name = n.name_any();
        let annotated = n
            .annotations()
            .get(c::NOT_MANAGED_BY_MCM_ANNOTATION)
            .is_some();
        let old = n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| mcm_core::machine::to_utc(&t.0))
            .is_some_and(|t| (now - t).to_std().unwrap_or_default() > ctx.config.creation_timeout);
        let by_label = n.labels().contains_key(c::MACHINE_NAME_NODE_LABEL);
        let is_managed = managed.contains(&name) || by_label;
        let value = if !is_managed && old && !annotated {
            json!("1")
        } else if is_managed && annotated {
            serde_json::Value::Null
        } else {
            continue;
        };
        let patch = json!({"metadata": {"annotations": {c::NOT_MANAGED_BY_MCM_ANNOTATION: value}}});
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// Runs the safety loops until cancelled.
pub async fn run(ctx: Arc<Context>, cfg: SafetyConfig) {
    let mut tracker = OrphanTracker::default();
    let mut down_since: Option<Instant> = None;
    let mut next_orphans = Instant::now() + cfg.orphan_period.min(Duration::from_secs(60));
    let tick = cfg
        .apiserver_check_period
        .min(Duration::from_secs(5))
        .max(Duration::from_millis(200));
    loop {
        tokio::time::sleep(tick).await;
        // API-server reachability freeze.
        if apiservers_reachable(&ctx).await {
            if ctx.is_frozen() {
                info!("API servers reachable again: unfreezing machine reconciliation");
                ctx.set_frozen(false);
                if let Err(e) = reset_unknown_machines(&ctx).await {
                    warn!(error = %e, "could not reset Unknown machines after unfreeze");
                }
            }
            down_since = None;
        } else {
            let since = *down_since.get_or_insert_with(Instant::now);
            if !ctx.is_frozen() && since.elapsed() > ctx.config.apiserver_statuscheck_timeout {
                warn!("API server unreachable for longer than the status-check timeout: freezing machine reconciliation");
                ctx.set_frozen(true);
            }
            continue;
        }
        if Instant::now() >= next_orphans {
            next_orphans = Instant::now() + cfg.orphan_period;
            match collect_orphans(&ctx, &mut tracker, cfg.orphan_grace).await {
                Ok(d) if !d.is_empty() => info!(deleted = d.len(), "orphan VMs deleted"),
                Ok(_) => {}
                Err(e) => warn!(error = %e, "orphan collection failed"),
            }
            if let Err(e) = annotate_unmanaged_nodes(&ctx).await {
                warn!(error = %e, "annotating unmanaged nodes failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, pid: &str, phase: &str) -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"class": {"name": "c"}, "providerID": pid},
            "status": {"currentStatus": {"phase": phase}}
        }))
        .expect("machine")
    }

    #[test]
    fn vms_of_machines_and_of_machines_being_created_are_not_orphans() {
        let listed = [
            ("p1".to_string(), "m1".to_string()),
            ("p2".to_string(), "m2".to_string()),
            ("p3".to_string(), "gone".to_string()),
            ("p4".to_string(), "m4".to_string()),
        ]
        .into_iter()
        .collect();
        let machines = vec![
            machine("m1", "p1", "Running"),
            machine("m2", "", ""),
            machine("m4", "p-other", "Running"),
        ];
        let c = orphan_candidates(&listed, &machines);
        assert_eq!(
            c,
            ["p3".to_string(), "p4".to_string()].into_iter().collect()
        );
    }

    #[test]
    fn an_orphan_is_due_only_after_being_seen_for_the_whole_grace_period() {
        let mut t = OrphanTracker::default();
        let start = Instant::now();
        let set: HashSet<String> = ["p".to_string()].into_iter().collect();
        assert!(t.due(&set, Duration::from_secs(60), start).is_empty());
        assert!(t
            .due(
                &set,
                Duration::from_secs(60),
                start + Duration::from_secs(30)
            )
            .is_empty());
        assert_eq!(
            t.due(
                &set,
                Duration::from_secs(60),
                start + Duration::from_secs(61)
            ),
            vec!["p"]
        );
        // A candidate that disappears and comes back starts over.
        t.due(
            &HashSet::new(),
            Duration::from_secs(60),
            start + Duration::from_secs(62),
        );
        assert!(t
            .due(
                &set,
                Duration::from_secs(60),
                start + Duration::from_secs(63)
            )
            .is_empty());
    }
}
