//! The machine controller's safety loops: orphan-VM collection, the freeze
//! while an API server is unreachable, and the annotation of Nodes that no
//! Machine manages (design: safety.md).
//!
//! Orphan collection is deliberately conservative: it never runs while the
//! controller is frozen, it never touches a VM whose machine is still being
//! created (phase empty or CrashLoopBackOff) or deleted, and a VM must be seen
//! orphaned for a whole grace period (continuously) before it is deleted, so a
//! VM created moments ago whose providerID is not yet persisted is safe.
//!
//! It is scoped to this namespace (issue 17, finding 6): VMs are listed per
//! MachineClass of the namespace, providerIDs compare normalized, and a VM
//! that no Machine has is collected only with evidence that it is this
//! namespace's: a Machine of that name and class was seen here (remembered
//! for a day). A VM that merely carries
//! the same cluster tag (another namespace, the Go controller during a
//! migration) is left alone. See `docs/design/machine.md`, "Orphan VMs".

use crate::status::machine::MachineStatusChange;
use crate::{Context, Error};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass, MachinePhase};
use mcm_core::time::from_k8s;
use mcm_driver::ListMachinesRequest;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

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

/// How long a Machine (its class and name) is remembered after it was last
/// seen, so that a VM it left behind is recognised as this namespace's orphan.
pub const KNOWN_MACHINE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Remembers when each orphan candidate was first seen, and which Machines
/// (class and name) this namespace had.
#[derive(Default)]
pub struct OrphanTracker {
    first_seen: HashMap<String, Instant>,
    known: HashMap<(String, String), Instant>,
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

    /// Remembers the Machines of this namespace (their class and name), and
    /// forgets those not seen for [`KNOWN_MACHINE_RETENTION`].
    pub fn remember<'a>(&mut self, machines: impl IntoIterator<Item = &'a Machine>, now: Instant) {
        for m in machines {
            self.known
                .insert((m.spec.class.name.clone(), m.name_any()), now);
        }
        self.known
            .retain(|_, seen| now.duration_since(*seen) < KNOWN_MACHINE_RETENTION);
    }

    /// Whether a Machine of that name using that class was seen in this namespace.
    pub fn knows(&self, class: &str, name: &str) -> bool {
        self.known
            .contains_key(&(class.to_string(), name.to_string()))
    }
}

/// A providerID in a form that compares equal for the same VM: trimmed,
/// lower-case, without trailing slashes; an AWS providerID is reduced to its
/// instance ID, so `aws:///<region>/<id>`, `aws:////<id>` and the Node's
/// `aws:///<zone>/<id>` name the same VM.
pub fn normalize_provider_id(provider_id: &str) -> String {
    let p = provider_id
        .trim()
        .trim_end_matches('/')
        .to_ascii_lowercase();
    if let Some(rest) = p.strip_prefix("aws://") {
        if let Some(id) = rest.rsplit('/').next().filter(|id| id.starts_with("i-")) {
            return format!("aws:///{id}");
        }
    }
    p
}

/// One VM as a class's ListMachines reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedVm {
    /// The MachineClass whose ListMachines listed it.
    pub class: String,
    /// Its providerID.
    pub provider_id: String,
    /// Its name (the machine name it was created for).
    pub name: String,
}

/// Why a listed VM is kept, or that it is an orphan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanVerdict {
    /// A Machine has its providerID.
    Owned,
    /// The Machine of its name is still being created, or is being deleted
    /// (its own deletion deletes the VM).
    MachineBusy,
    /// The Machine of its name uses another class: not this class's VM.
    OtherClass,
    /// No Machine of its name (with this class) was seen in this namespace:
    /// it may belong to another controller whose classes share the tags
    /// (another namespace, or the Go controller during a migration). Never
    /// deleted. (A Node of the target cluster is no evidence either: two
    /// controllers may share the target cluster too.)
    NotOurs,
    /// A second VM of a Machine of this class (its providerID differs).
    Duplicate,
    /// The Machine it was made for (seen in this namespace) is gone.
    MachineGone,
}

impl OrphanVerdict {
    /// Whether the VM is collected.
    pub fn is_orphan(self) -> bool {
        matches!(self, OrphanVerdict::Duplicate | OrphanVerdict::MachineGone)
    }
}

/// Judges one VM listed for a class of this namespace (the reference's rules
/// per class, narrowed so that a VM is only collected with evidence that it
/// is this namespace's; design: docs/design/safety.md, "Orphan-VM collection").
pub fn judge(vm: &ListedVm, machines: &[Machine], tracker: &OrphanTracker) -> OrphanVerdict {
    let pid = normalize_provider_id(&vm.provider_id);
    if machines.iter().any(|m| {
        !m.spec.provider_id.trim().is_empty() && normalize_provider_id(&m.spec.provider_id) == pid
    }) {
        return OrphanVerdict::Owned;
    }
    if let Some(m) = machines.iter().find(|m| m.name_any() == vm.name) {
        let phase = m.status.clone().unwrap_or_default().current_status.phase;
        if matches!(phase, MachinePhase::Empty | MachinePhase::CrashLoopBackOff)
            || m.metadata.deletion_timestamp.is_some()
        {
            return OrphanVerdict::MachineBusy;
        }
        if m.spec.class.name != vm.class {
            return OrphanVerdict::OtherClass;
        }
        return OrphanVerdict::Duplicate;
    }
    if tracker.knows(&vm.class, &vm.name) {
        return OrphanVerdict::MachineGone;
    }
    OrphanVerdict::NotOurs
}

/// One orphan-collection pass over the classes of this namespace. Returns the
/// deleted providerIDs.
pub async fn collect_orphans(
    ctx: &Context,
    tracker: &mut OrphanTracker,
    grace: Duration,
) -> Result<Vec<String>, Error> {
    let _work = crate::metrics::workqueue::work("machinesafetyorphanvms");
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
    let machine_list = machines.list(&ListParams::default()).await?.items;
    tracker.remember(&machine_list, Instant::now());
    let mut listed = Vec::new();
    let mut owners = HashMap::new();
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
                for (pid, name) in resp.machine_list {
                    listed.push(ListedVm {
                        class: class.name_any(),
                        provider_id: pid.clone(),
                        name: name.clone(),
                    });
                    owners.insert(
                        (class.name_any(), pid),
                        (class.clone(), secret.clone(), driver.clone(), name),
                    );
                }
            }
            Err(e) => {
                warn!(namespace = %ns, class = %class.name_any(), error = %e, "ListMachines failed; retrying next period")
            }
        }
    }
    let mut candidates = HashSet::new();
    let mut owner_of: HashMap<String, (String, String)> = HashMap::new();
    let mut not_ours = 0usize;
    for vm in &listed {
        let verdict = judge(vm, &machine_list, tracker);
        debug!(namespace = %ns, class = %vm.class, provider_id = %vm.provider_id, machine = %vm.name, ?verdict, "listed VM");
        if verdict == OrphanVerdict::NotOurs {
            not_ours += 1;
        }
        if verdict.is_orphan() {
            candidates.insert(vm.provider_id.clone());
            owner_of.insert(
                vm.provider_id.clone(),
                (vm.class.clone(), vm.provider_id.clone()),
            );
        }
    }
    if not_ours > 0 {
        info!(namespace = %ns, count = not_ours, "VMs listed with this namespace's tags but no evidence that they are its own (another controller's?) are left alone");
    }
    let mut deleted = Vec::new();
    for pid in tracker.due(&candidates, grace, Instant::now()) {
        if ctx.is_frozen() {
            break;
        }
        let Some((class, secret, driver, name)) =
            owner_of.get(&pid).and_then(|k| owners.get(k)).cloned()
        else {
            continue;
        };
        info!(namespace = %ns, provider_id = %pid, machine = %name, "deleting orphan VM");
        match crate::machine::delete_orphan(driver.as_ref(), class, secret, &pid, &name).await {
            Ok(()) => deleted.push(pid),
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
pub async fn apiservers_reachable(ctx: &Context) -> bool {
    let _work = crate::metrics::workqueue::work("machinesafetyapiserver");
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
pub async fn reset_unknown_machines(ctx: &Context) -> Result<(), Error> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    for m in api.list(&ListParams::default()).await?.items {
        if m.status.clone().unwrap_or_default().current_status.phase != MachinePhase::Unknown {
            continue;
        }
        let change = MachineStatusChange::entering(
            MachinePhase::Running,
            MachineStatusChange::operation(
                "Machine Health Timeout was reset due to APIServer being unreachable",
                mcm_api::MachineState::Successful,
                mcm_api::MachineOperationType::HealthCheck,
            ),
        );
        crate::status::machine::write(&api, &m.name_any(), &change).await?;
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
            .map(from_k8s)
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
        // Machines that live shorter than an orphan period are remembered too.
        if let Some(store) = ctx.machine_store() {
            let cached = store.state();
            tracker.remember(cached.iter().map(|m| m.as_ref()), Instant::now());
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

    fn vm(class: &str, pid: &str, name: &str) -> ListedVm {
        ListedVm {
            class: class.into(),
            provider_id: pid.into(),
            name: name.into(),
        }
    }

    fn with_class(mut m: Machine, class: &str) -> Machine {
        m.spec.class.name = class.into();
        m
    }

    #[test]
    fn provider_ids_compare_normalized() {
        let n = normalize_provider_id;
        assert_eq!(n("aws:///eu-west-1/i-0abc"), n("aws:////i-0abc"));
        assert_eq!(n("aws:///eu-west-1/i-0abc"), n("aws:///eu-west-1a/i-0abc/"));
        assert_eq!(n(" AWS:///EU-WEST-1/I-0ABC "), n("aws:///eu-west-1/i-0abc"));
        assert_eq!(n("gce:///p/z/n/"), "gce:///p/z/n");
        assert_ne!(n("gce:///p/z/n"), n("gce:///p/z/m"));
        assert_ne!(n("aws:///r/i-1"), n("aws:///r/i-2"));
    }

    #[test]
    fn a_vm_whose_machine_has_its_provider_id_in_another_form_is_owned() {
        let machines = vec![machine("m1", "AWS:///eu-west-1/i-0abc/", "Running")];
        let t = OrphanTracker::default();
        let v = judge(&vm("c", "aws:///eu-west-1/i-0abc", "m1"), &machines, &t);
        assert_eq!(v, OrphanVerdict::Owned);
    }

    #[test]
    fn a_vm_of_a_machine_being_created_or_deleted_is_kept() {
        let t = OrphanTracker::default();
        for phase in ["", "CrashLoopBackOff"] {
            let v = judge(&vm("c", "p1", "m1"), &[machine("m1", "", phase)], &t);
            assert_eq!(v, OrphanVerdict::MachineBusy, "{phase:?}");
        }
        let mut deleting = machine("m1", "p0", "Running");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert_eq!(
            judge(&vm("c", "p1", "m1"), &[deleting], &t),
            OrphanVerdict::MachineBusy
        );
    }

    #[test]
    fn a_second_vm_of_a_machine_of_this_class_is_an_orphan_but_not_of_another_class() {
        let t = OrphanTracker::default();
        let m = with_class(machine("m1", "p-own", "Running"), "c");
        assert_eq!(
            judge(&vm("c", "p-dup", "m1"), std::slice::from_ref(&m), &t),
            OrphanVerdict::Duplicate
        );
        assert_eq!(
            judge(&vm("other", "p-dup", "m1"), &[m], &t),
            OrphanVerdict::OtherClass
        );
    }

    #[test]
    fn a_vm_without_machine_is_collected_only_if_its_machine_was_seen_here() {
        let mut t = OrphanTracker::default();
        let v = vm("c", "scripted:///z/gone", "gone");
        assert_eq!(
            judge(&v, &[], &t),
            OrphanVerdict::NotOurs,
            "another namespace's VM sharing the cluster tag is never collected"
        );
        t.remember(
            [&with_class(machine("gone", "", "Running"), "c")],
            Instant::now(),
        );
        assert_eq!(judge(&v, &[], &t), OrphanVerdict::MachineGone);
        assert_eq!(
            judge(&vm("other-class", "scripted:///z/gone", "gone"), &[], &t),
            OrphanVerdict::NotOurs,
            "remembered with another class"
        );
    }

    #[test]
    fn remembered_machines_are_forgotten_after_the_retention() {
        let mut t = OrphanTracker::default();
        let start = Instant::now();
        t.remember([&with_class(machine("m", "", "Running"), "c")], start);
        assert!(t.knows("c", "m"));
        t.remember(
            std::iter::empty(),
            start + KNOWN_MACHINE_RETENTION + Duration::from_secs(1),
        );
        assert!(!t.knows("c", "m"));
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
