//! An in-process, scriptable [`Driver`] for controller tests.
//!
//! It is a test double on purpose: controller tests need faults on demand
//! ("initialization fails twice", "status answers Uninitialized after a
//! restart") that a real cloud cannot produce reliably. Provider behaviour
//! itself is tested against real backends (the `local` cloud, moto).
//!
//! VMs are keyed by machine name; creation is idempotent per machine; a VM is
//! uninitialized until InitializeMachine succeeds, and GetMachineStatus says so.

use crate::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// A VM of the scripted cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedVm {
    /// Its provider ID.
    pub provider_id: String,
    /// Its node name.
    pub node_name: String,
    /// Whether InitializeMachine succeeded on it.
    pub initialized: bool,
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
}

/// The scriptable driver.
#[derive(Debug, Default)]
pub struct ScriptedDriver {
    vms: Mutex<HashMap<String, ScriptedVm>>,
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

    /// Puts a VM in place, as if created earlier (e.g. before a controller crash).
    pub fn insert_vm(&self, machine: &str, vm: ScriptedVm) {
        if let Ok(mut v) = self.vms.lock() {
            v.insert(machine.to_string(), vm);
        }
    }

    /// The VM of a machine.
    pub fn vm(&self, machine: &str) -> Option<ScriptedVm> {
        self.vms.lock().ok().and_then(|v| v.get(machine).cloned())
    }

    /// How many VMs exist.
    pub fn vm_count(&self) -> usize {
        self.vms.lock().map(|v| v.len()).unwrap_or(0)
    }

    /// A counter's value.
    pub fn count(c: &AtomicU32) -> u32 {
        c.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Driver for ScriptedDriver {
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
        let mut vms = self.vms.lock().map_err(|_| Status::internal("poisoned"))?;
        let vm = vms.entry(name.clone()).or_insert_with(|| ScriptedVm {
            provider_id: format!("scripted:///zone-a/{name}"),
            node_name: format!("{}{name}", script.node_prefix),
            initialized: script.init_unimplemented,
        });
        Ok(CreateMachineResponse {
            provider_id: vm.provider_id.clone(),
            node_name: vm.node_name.clone(),
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
        let name = machine_name(req);
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
        let vm = vms
            .get_mut(&name)
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
            vms.remove(&machine_name(req));
        }
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.calls.status.fetch_add(1, Ordering::SeqCst);
        let vm = self
            .vm(&machine_name(req))
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

    async fn list_machines(
        &self,
        _req: &ListMachinesRequest,
    ) -> DriverResult<ListMachinesResponse> {
        self.calls.list.fetch_add(1, Ordering::SeqCst);
        let vms = self.vms.lock().map_err(|_| Status::internal("poisoned"))?;
        Ok(ListMachinesResponse {
            machine_list: vms
                .iter()
                .map(|(m, vm)| (vm.provider_id.clone(), m.clone()))
                .collect(),
        })
    }
}
