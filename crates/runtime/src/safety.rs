//! The machine controller's safety loops: orphan-VM collection, the freeze
//! while an API server is unreachable, and the annotation of Nodes that no
//! Machine manages (design: safety.md).
//!
//! Orphan collection never runs while the controller is frozen, and a VM
//! must be seen orphaned for a whole grace period (continuously) before it
//! is deleted. Which VMs are orphans is decided in `mcm_core::orphans`
//! (`judge`): a VM that carries a live Machine's identity (providerID, UID,
//! name) or another namespace's identity is never collected; one that
//! carries this namespace's identity is collected once its Machine is gone;
//! one without identity as the reference collects it. The identity lives on
//! the VM (recorded at creation), so it survives a restart. See
//! `docs/design/safety.md`, "Orphan-VM collection".

use crate::metadata::MetaPatch;
use crate::status::machine::MachineStatusChange;
use crate::{Context, Error};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass};
use mcm_core::time::from_k8s;
use mcm_driver::ListMachinesRequest;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

pub use crate::config::SafetyConfig;
pub use mcm_core::orphans::OrphanTracker;
pub(crate) use mcm_core::orphans::{judge, normalize_provider_id, ListedVm, OrphanVerdict};

/// One VM listed for a class, with what deleting it needs.
struct Listing {
    vm: ListedVm,
    class: MachineClass,
    secret: k8s_openapi::api::core::v1::Secret,
    driver: Arc<dyn mcm_driver::Driver>,
}

/// One orphan-collection pass over the classes of this namespace. Returns the
/// deleted providerIDs (as listed).
pub async fn collect_orphans(
    ctx: &Context,
    tracker: &mut OrphanTracker,
    grace: Duration,
) -> Result<Vec<String>, Error> {
    let _work = ctx.workqueues.work("machinesafetyorphanvms");
    if ctx.is_frozen() {
        info!("orphan collection skipped: the controller is frozen");
        return Ok(Vec::new());
    }
    let ns = &ctx.config.namespace;
    // Class Secrets come from the shared cache: wait for its first list (a
    // pass without it would skip every class).
    if tokio::time::timeout(Duration::from_secs(30), ctx.caches.secrets.synced())
        .await
        .is_err()
    {
        return Err(Error::NotReady);
    }
    let classes: Api<MachineClass> = Api::namespaced(ctx.client.clone(), ns);
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), ns);
    let mut listed: Vec<Listing> = Vec::new();
    for class in classes.list(&ListParams::default()).await?.items {
        let Some(driver) = ctx.observed_driver(&class.provider) else {
            continue;
        };
        let secret = match crate::class::merged_secret(&ctx.caches, &class) {
            Ok(s) => s,
            Err(_) => continue,
        };
        let req = ListMachinesRequest {
            machine_class: class.clone(),
            secret: secret.clone(),
        };
        match driver.list_machines(&req).await {
            Ok(resp) => {
                for (pid, name) in &resp.machine_list {
                    let facts = resp.facts(pid);
                    listed.push(Listing {
                        vm: ListedVm {
                            class: class.name_any(),
                            provider_id: pid.clone(),
                            name: name.clone(),
                            instance_key: facts.instance_key,
                            owner: facts.owner,
                        },
                        class: class.clone(),
                        secret: secret.clone(),
                        driver: driver.clone(),
                    });
                }
            }
            Err(e) => {
                warn!(namespace = %ns, class = %class.name_any(), error = %e, "ListMachines failed; retrying next period")
            }
        }
    }
    // The Machines are listed after the VMs: a Machine whose VM was listed
    // is in this list unless it is gone.
    let machine_list = machines.list(&ListParams::default()).await?.items;
    // Candidates by canonical key: a VM that two classes list is one VM,
    // and kept when any listing keeps it.
    let mut verdicts: HashMap<String, (OrphanVerdict, usize)> = HashMap::new();
    let mut kept: HashMap<&'static str, usize> = HashMap::new();
    for (i, l) in listed.iter().enumerate() {
        let verdict = judge(&l.vm, &machine_list, ns);
        debug!(namespace = %ns, class = %l.vm.class, provider_id = %l.vm.provider_id, machine = %l.vm.name, ?verdict, "listed VM");
        let key = normalize_provider_id(&l.vm.instance_key);
        match verdicts.get(&key) {
            Some((v, _)) if !v.is_orphan() => {}
            _ => {
                verdicts.insert(key, (verdict, i));
            }
        }
    }
    let mut candidates = HashSet::new();
    for (key, (verdict, _)) in &verdicts {
        if verdict.is_orphan() {
            candidates.insert(key.clone());
        } else {
            let label = match verdict {
                OrphanVerdict::OtherNamespace => "another namespace's",
                OrphanVerdict::LiveMachineName => "carrying a live machine's name",
                OrphanVerdict::Preserved => "of a preserved machine",
                _ => "owned",
            };
            *kept.entry(label).or_default() += 1;
        }
    }
    for (what, count) in &kept {
        debug!(namespace = %ns, count, kept = %what, "listed VMs kept");
    }
    let mut deleted = Vec::new();
    for key in tracker.due(&candidates, grace, Instant::now()) {
        if ctx.is_frozen() {
            break;
        }
        let Some((verdict, i)) = verdicts.get(&key) else {
            continue;
        };
        let Some(l) = listed.get(*i) else {
            continue;
        };
        let pid = &l.vm.provider_id;
        info!(namespace = %ns, provider_id = %pid, machine = %l.vm.name, ?verdict, "deleting orphan VM");
        match crate::machine::delete_orphan(
            l.driver.as_ref(),
            l.class.clone(),
            l.secret.clone(),
            pid,
            &l.vm.name,
        )
        .await
        {
            Ok(()) => deleted.push(pid.clone()),
            Err(e) => {
                warn!(namespace = %ns, provider_id = %pid, error = %e, "deleting orphan VM failed; retrying next period")
            }
        }
    }
    Ok(deleted)
}

/// Probes the control and target API servers, through the probe clients
/// (`Context::probes`): a control client whose request budget is spent on
/// Machine writes never makes a healthy API server look unreachable.
pub(crate) async fn apiservers_reachable(ctx: &Context) -> bool {
    let _work = ctx.workqueues.work("machinesafetyapiserver");
    let machines: Api<Machine> = Api::namespaced(ctx.probes.control.clone(), &ctx.config.namespace);
    let lp = ListParams::default().limit(1);
    let control = tokio::time::timeout(Duration::from_secs(10), machines.list(&lp)).await;
    if !matches!(control, Ok(Ok(_))) {
        return false;
    }
    if let Some(target) = &ctx.probes.target {
        let nodes: Api<Node> = Api::all(target.clone());
        let t = tokio::time::timeout(Duration::from_secs(10), nodes.list(&lp)).await;
        return matches!(t, Ok(Ok(_)));
    }
    true
}

/// Resets Unknown machines to Running after an unfreeze, so that the outage does
/// not count against their health timeout.
pub(crate) async fn reset_unknown_machines(ctx: &Context) -> Result<(), Error> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let defaults = ctx.config.default_settings();
    for m in api.list(&ListParams::default()).await?.items {
        let view = mcm_core::machine::MachineView::of(&m, &defaults);
        // Decided in core: only Unknown machines go back to Running.
        let Some(t) = mcm_core::machine::reset_after_freeze(&view) else {
            continue;
        };
        crate::status::machine::write(&api, &m.name_any(), &MachineStatusChange::of(&t)).await?;
    }
    Ok(())
}

/// Annotates Nodes that no Machine names (older than the creation timeout) with
/// `node.machine.sapcloud.io/not-managed-by-mcm=1`, and removes it from managed ones.
pub(crate) async fn annotate_unmanaged_nodes(ctx: &Context) -> Result<(), Error> {
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
            .map(from_k8s)
            .is_some_and(|t| (now - t).to_std().unwrap_or_default() > ctx.config.creation_timeout);
        let by_label = n.labels().contains_key(c::MACHINE_NAME_NODE_LABEL);
        let is_managed = managed.contains(&name) || by_label;
        let value = if !is_managed && old && !annotated {
            Some("1")
        } else if is_managed && annotated {
            None
        } else {
            continue;
        };
        MetaPatch::new()
            .annotation_opt(c::NOT_MANAGED_BY_MCM_ANNOTATION, value)
            .send(&nodes, &name)
            .await?;
    }
    Ok(())
}

/// Runs the safety loops until cancelled.
pub async fn run(ctx: Arc<Context>) {
    let cfg = ctx.config.safety.clone();
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
            if !ctx.is_frozen() && since.elapsed() > cfg.apiserver_statuscheck_timeout {
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
