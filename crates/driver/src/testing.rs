//! An in-process, scriptable [`Driver`] for controller tests.
//!
//! It is a test double on purpose: controller tests need faults on demand
//! ("initialization fails twice", "status answers Uninitialized after a
//! restart") that a real cloud cannot produce reliably. Provider behaviour
//! itself is tested against real backends (the `local` cloud, moto).
//!
//! VMs are keyed by providerID, as in a real cloud: two VMs may carry one
//! machine name (two namespaces, a duplicate), DeleteMachine deletes the VM
//! of the request's providerID (by name and identity only when the Machine
//! has none), and ListMachines lists the VMs of the class's cluster (the
//! providerSpec's `cluster`, else the class name) with the identity recorded
//! at creation. A class with a `location` in its providerSpec lists
//! providerIDs built from it, as the Azure provider builds them from the
//! class's current location, so that a test can edit it under a live VM.
//! Creation is idempotent per machine (its UID); a VM is uninitialized until
//! InitializeMachine succeeds, and GetMachineStatus says so. UpdateMachine
//! (hot update) answers `Unimplemented` unless the script names the
//! providerSpec keys it changes in place; it records the spec it applied.

use crate::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Userdata that is not UTF-8, for the tests that check it reaches a cloud
/// byte for byte: `#cloud-config\nhostname: x\n`, gzip-compressed: not UTF-8.
pub const GZIPPED_CLOUD_CONFIG: &[u8] = &[
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x53, 0x4e, 0xce, 0xc9, 0x2f, 0x4d,
    0xd1, 0x4d, 0xce, 0xcf, 0x4b, 0xcb, 0x4c, 0xe7, 0xca, 0xc8, 0x2f, 0x2e, 0xc9, 0x4b, 0xcc, 0x4d,
    0xb5, 0x52, 0xa8, 0xe0, 0x02, 0x00, 0x49, 0x75, 0xb3, 0x15, 0x1a, 0x00, 0x00, 0x00,
];

/// A VM of the scripted cloud.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScriptedVm {
    /// Its provider ID.
    pub provider_id: String,
    /// Its node name.
    pub node_name: String,
    /// Whether InitializeMachine succeeded on it.
    pub initialized: bool,
}

/// A VM with what the cloud records about it.
#[derive(Debug, Clone)]
struct Entry {
    machine: String,
    vm: ScriptedVm,
    /// The cluster it is tagged for (`None`: listed for every class).
    cluster: Option<String>,
    owner: Option<MachineOwner>,
}

impl Entry {
    /// Whether this VM is the one of the machine (name and identity).
    fn is_for(&self, name: &str, owner: &Option<MachineOwner>) -> bool {
        self.machine == name && (self.owner.is_none() || owner.is_none() || &self.owner == owner)
    }
}

fn same_provider_id(a: &str, b: &str) -> bool {
    let n = |p: &str| p.trim().trim_end_matches('/').to_ascii_lowercase();
    n(a) == n(b)
}

fn spec_str(class: &MachineClass, key: &str) -> Option<String> {
    class
        .provider_spec
        .get(key)
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// The cluster a class's VMs are tagged for: its providerSpec's `cluster`,
/// else its name.
fn cluster_of(class: &MachineClass) -> String {
    spec_str(class, "cluster").unwrap_or_else(|| class.metadata.name.clone().unwrap_or_default())
}

/// Call counters per operation.
#[derive(Debug, Default)]
pub struct Calls {
    /// CreateMachine calls.
    pub create: AtomicU32,
    /// InitializeMachine calls.
    pub initialize: AtomicU32,
    /// DeleteMachine calls.
    pub delete: AtomicU32,
    /// GetMachineStatus calls.
    pub status: AtomicU32,
    /// ListMachines calls.
    pub list: AtomicU32,
    /// UpdateMachine calls.
    pub update: AtomicU32,
    /// When each UpdateMachine call came.
    pub update_at: Mutex<Vec<std::time::Instant>>,
}

/// The script: what the driver answers.
#[derive(Debug, Default, Clone)]
pub struct Script {
    /// InitializeMachine answers Unimplemented (and VMs count as initialized).
    pub init_unimplemented: bool,
    /// InitializeMachine fails this many more times.
    pub init_failures: u32,
    /// InitializeMachine always fails.
    pub init_always_fails: bool,
    /// CreateMachine fails with this status.
    pub create_error: Option<Status>,
    /// Node names are `<prefix><machine name>` (default: the machine name).
    pub node_prefix: String,
    /// The top-level providerSpec keys UpdateMachine changes in place; empty:
    /// the contract's defaults (every change needs a new VM, UpdateMachine
    /// answers `Unimplemented`).
    pub update_in_place: Vec<String>,
    /// UpdateMachine fails this many more times (`Internal`).
    pub update_failures: u32,
    /// The rate limits the driver declares to the controller's cloud budget.
    pub rate_limits: Vec<(CloudOp, budget::BucketLimit)>,
}

/// The scriptable driver.
#[derive(Debug, Default)]
pub struct ScriptedDriver {
    vms: Mutex<BTreeMap<String, Entry>>,
    /// The providerSpec UpdateMachine last applied, by providerID.
    applied: Mutex<BTreeMap<String, serde_json::Value>>,
    script: Mutex<Script>,
    /// How often each operation was called.
    pub calls: Calls,
}

fn machine_name(req: &MachineRequest) -> String {
    req.machine.metadata.name.clone().unwrap_or_default()
}

impl ScriptedDriver {
    /// A driver with the given script.
    pub fn new(script: Script) -> Self {
        ScriptedDriver {
            script: Mutex::new(script),
            ..Default::default()
        }
    }

    /// Changes the script.
    pub fn set_script(&self, f: impl FnOnce(&mut Script)) {
        if let Ok(mut s) = self.script.lock() {
            f(&mut s);
        }
    }

    fn script(&self) -> Script {
        self.script.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Puts a VM in place, as if created earlier (e.g. before a controller
    /// crash), without identity, listed for every class.
    pub fn insert_vm(&self, machine: &str, vm: ScriptedVm) {
        self.insert_vm_with(machine, vm, None, None);
    }

    /// Puts a VM in place tagged for a cluster (`None`: every class lists
    /// it) and carrying an identity (`None`: made out of band).
    pub fn insert_vm_with(
        &self,
        machine: &str,
        vm: ScriptedVm,
        cluster: Option<&str>,
        owner: Option<MachineOwner>,
    ) {
        if let Ok(mut v) = self.vms.lock() {
            v.insert(
                vm.provider_id.clone(),
                Entry {
                    machine: machine.to_string(),
                    vm,
                    cluster: cluster.map(str::to_string),
                    owner,
                },
            );
        }
    }

    /// The (first) VM of a machine name.
    pub fn vm(&self, machine: &str) -> Option<ScriptedVm> {
        self.vms_named(machine).into_iter().next()
    }

    /// Every VM that carries a machine name.
    pub fn vms_named(&self, machine: &str) -> Vec<ScriptedVm> {
        self.vms
            .lock()
            .map(|v| {
                v.values()
                    .filter(|e| e.machine == machine)
                    .map(|e| e.vm.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The VM of a providerID.
    pub fn vm_by_provider_id(&self, provider_id: &str) -> Option<ScriptedVm> {
        self.vms.lock().ok().and_then(|v| {
            v.values()
                .find(|e| same_provider_id(&e.vm.provider_id, provider_id))
                .map(|e| e.vm.clone())
        })
    }

    /// The identity recorded on the VM of a providerID.
    pub fn owner_of(&self, provider_id: &str) -> Option<MachineOwner> {
        self.vms.lock().ok().and_then(|v| {
            v.values()
                .find(|e| same_provider_id(&e.vm.provider_id, provider_id))
                .and_then(|e| e.owner.clone())
        })
    }

    /// The providerSpec UpdateMachine last applied to the VM of a providerID.
    pub fn applied_spec(&self, provider_id: &str) -> Option<serde_json::Value> {
        self.applied
            .lock()
            .ok()
            .and_then(|a| a.get(provider_id).cloned())
    }

    /// How many VMs exist.
    pub fn vm_count(&self) -> usize {
        self.vms.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// A counter's value.
    pub fn count(c: &AtomicU32) -> u32 {
        c.load(Ordering::SeqCst)
    }

    /// The providerID of the request's VM: the Machine's, else the one found
    /// by name and identity.
    fn find(vms: &BTreeMap<String, Entry>, req: &MachineRequest) -> Option<String> {
        let pid = req.machine.spec.provider_id.trim();
        if !pid.is_empty() {
            return vms
                .values()
                .find(|e| same_provider_id(&e.vm.provider_id, pid))
                .map(|e| e.vm.provider_id.clone());
        }
        let owner = MachineOwner::of(&req.machine);
        let name = machine_name(req);
        vms.values()
            .find(|e| e.is_for(&name, &owner))
            .map(|e| e.vm.provider_id.clone())
    }
}

#[async_trait]
impl Driver for ScriptedDriver {
    async fn rate_limits(&self) -> Vec<(CloudOp, budget::BucketLimit)> {
        self.script().rate_limits
    }

    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        self.calls.create.fetch_add(1, Ordering::SeqCst);
        let script = self.script();
        if let Some(e) = script.create_error {
            return Err(e);
        }
        let name = machine_name(req);
        let owner = MachineOwner::of(&req.machine);
        let mut vms = self.vms.lock().map_err(|_| Status::internal("poisoned"))?;
        let existing = vms
            .values()
            .find(|e| e.is_for(&name, &owner))
            .map(|e| e.vm.provider_id.clone());
        let pid = match existing {
            Some(pid) => pid,
            None => {
                let zone = spec_str(&req.machine_class, "location")
                    .unwrap_or_else(|| "zone-a".to_string());
                let base = format!("scripted:///{zone}/{name}");
                let mut pid = base.clone();
                let mut n = 1;
                while vms.contains_key(&pid) {
                    n += 1;
                    pid = format!("{base}-{n}");
                }
                vms.insert(
                    pid.clone(),
                    Entry {
                        machine: name.clone(),
                        vm: ScriptedVm {
                            provider_id: pid.clone(),
                            node_name: format!("{}{name}", script.node_prefix),
                            initialized: script.init_unimplemented,
                        },
                        cluster: Some(cluster_of(&req.machine_class)),
                        owner,
                    },
                );
                pid
            }
        };
        let vm = vms
            .get(&pid)
            .map(|e| e.vm.clone())
            .ok_or_else(|| Status::internal("scripted: VM vanished"))?;
        Ok(CreateMachineResponse {
            provider_id: vm.provider_id,
            node_name: vm.node_name,
            last_known_state: String::new(),
            addresses: vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.1".into(),
            }],
        })
    }

    async fn initialize_machine(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        self.calls.initialize.fetch_add(1, Ordering::SeqCst);
        let mut script = self
            .script
            .lock()
            .map_err(|_| Status::internal("poisoned"))?;
        if script.init_unimplemented {
            return Err(Status::unimplemented("scripted: nothing to initialize"));
        }
        if script.init_always_fails {
            return Err(Status::new(
                Code::Uninitialized,
                "scripted: VM instance could not be initialized",
            ));
        }
        if script.init_failures > 0 {
            script.init_failures -= 1;
            return Err(Status::internal("scripted: initialization failed"));
        }
        drop(script);
        let mut vms = self.vms.lock().map_err(|_| Status::internal("poisoned"))?;
        let pid = Self::find(&vms, req).ok_or_else(|| Status::not_found("no VM"))?;
        let vm = vms
            .get_mut(&pid)
            .map(|e| &mut e.vm)
            .ok_or_else(|| Status::not_found("no VM"))?;
        vm.initialized = true;
        Ok(InitializeMachineResponse {
            provider_id: vm.provider_id.clone(),
            node_name: vm.node_name.clone(),
            addresses: Vec::new(),
        })
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        self.calls.delete.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut vms) = self.vms.lock() {
            if let Some(pid) = Self::find(&vms, req) {
                vms.remove(&pid);
            }
        }
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.calls.status.fetch_add(1, Ordering::SeqCst);
        let vm = {
            let vms = self.vms.lock().map_err(|_| Status::internal("poisoned"))?;
            Self::find(&vms, req)
                .and_then(|pid| vms.get(&pid))
                .map(|e| e.vm.clone())
        }
        .ok_or_else(|| Status::not_found("scripted: no VM backs this machine"))?;
        let resp = GetMachineStatusResponse {
            provider_id: vm.provider_id.clone(),
            node_name: vm.node_name.clone(),
            addresses: Vec::new(),
        };
        if !vm.initialized && !self.script().init_unimplemented {
            return Err(Status::uninitialized(
                "scripted: VM is not initialized",
                resp.into(),
            ));
        }
        Ok(resp)
    }

    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> InPlaceChanges {
        let script = self.script();
        let mut out = InPlaceChanges::default();
        for field in changed_fields(last_applied, current) {
            let top = field.split('.').next().unwrap_or_default();
            if script.update_in_place.iter().any(|k| k == top) {
                out.in_place.push(field);
            } else {
                out.need_replacement.push(field);
            }
        }
        out
    }

    async fn update_machine(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        self.calls.update.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut at) = self.calls.update_at.lock() {
            at.push(std::time::Instant::now());
        }
        {
            let mut script = self
                .script
                .lock()
                .map_err(|_| Status::internal("poisoned"))?;
            if script.update_in_place.is_empty() {
                return Err(Status::unimplemented("scripted: no hot update"));
            }
            if script.update_failures > 0 {
                script.update_failures -= 1;
                return Err(Status::internal("scripted: update failed"));
            }
        }
        let pid = req.machine.spec.provider_id.trim().to_string();
        let known = self
            .vms
            .lock()
            .map_err(|_| Status::internal("poisoned"))?
            .values()
            .any(|e| same_provider_id(&e.vm.provider_id, &pid));
        if !known {
            return Err(Status::not_found("no VM"));
        }
        self.applied
            .lock()
            .map_err(|_| Status::internal("poisoned"))?
            .insert(pid, req.machine_class.provider_spec.clone());
        Ok(UpdateMachineResponse::default())
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        self.calls.list.fetch_add(1, Ordering::SeqCst);
        let cluster = cluster_of(&req.machine_class);
        let location = spec_str(&req.machine_class, "location");
        let vms = self.vms.lock().map_err(|_| Status::internal("poisoned"))?;
        let mut resp = ListMachinesResponse::default();
        for e in vms.values() {
            if e.cluster.as_ref().is_some_and(|c| *c != cluster) {
                continue;
            }
            // As the Azure provider does: the providerID from the class's
            // current location; the key is the VM's own.
            let pid = match &location {
                Some(loc) => format!("scripted:///{loc}/{}", e.machine),
                None => e.vm.provider_id.clone(),
            };
            resp.insert(
                pid,
                e.machine.clone(),
                e.vm.provider_id.clone(),
                e.owner.clone(),
            );
        }
        Ok(resp)
    }
}

/// A Secret holding `pairs` (key, UTF-8 value) as data, for tests.
pub fn secret_with(pairs: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Secret {
    k8s_openapi::api::core::v1::Secret {
        data: Some(
            pairs
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        k8s_openapi::ByteString(v.as_bytes().to_vec()),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    }
}
