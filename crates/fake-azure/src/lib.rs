//! # mcm-fake-azure: an in-process Azure Resource Manager fake (test support)
//!
//! Serves, on `127.0.0.1:<random port>`, exactly the ARM calls of the Azure
//! provider: resource groups (HEAD), subnets (GET), availability sets, NICs, VMs
//! and managed disks
//! (GET/PUT/PATCH/DELETE as long-running operations that finish after
//! [`FakeAzure::set_lro_polls`] polls), VM images and marketplace agreements,
//! the list calls, the driver's one Resource Graph query, and the Microsoft
//! identity platform's token endpoint (`/{tenant}/oauth2/v2.0/token`).
//!
//! Like ARM: names are case-insensitive; deleting a VM cascades to the NIC and
//! disks whose `deleteOption` is `Delete` and detaches the others; a NIC or
//! disk still attached cannot be deleted; DELETE of a missing resource answers
//! 204; PUT is create-or-update by name; PATCH with `tags` replaces a VM's,
//! NIC's or disk's tags after ARM's tag-name and -value checks; `customData`
//! is never returned.
//! Errors use ARM's envelope `{"error": {"code", "message"}}`.
//!
//! Like ARM, every request's `api-version` is checked per resource type, and a
//! VM PUT is refused when its body has a member the API version does not
//! define, misses a required parameter or names a computer name Compute
//! refuses (`checks`; the sources are listed in the README).
//!
//! Faults are injected per operation ([`Fault`]): an HTTP error (404, 409,
//! 429 with `Retry-After`, `OperationNotAllowed`, quota, …) instead of the
//! answer, or a long-running operation that ends `Failed` with a code such
//! as `AllocationFailed`. The response shapes follow the `x-ms-examples` of
//! `Azure/azure-rest-api-specs` kept in `testdata/azure-rest-api-specs`.

mod checks;
mod resources;
mod server;
mod state;

pub use state::{Fault, FaultResponse};

use state::State;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A running fake. Stops when dropped.
pub struct FakeAzure {
    url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeAzure {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The subscription the tests use.
pub const SUBSCRIPTION: &str = "00000000-0000-0000-0000-000000000001";

impl FakeAzure {
    /// Starts a fake on a free loopback port.
    pub async fn start() -> std::io::Result<FakeAzure> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(State::new(&url)));
        let app = server::router(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeAzure { url, state, task })
    }

    /// `http://127.0.0.1:<port>`: the ARM endpoint and the login host.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut s)
    }

    /// Adds a resource group.
    pub fn add_resource_group(&self, rg: &str) {
        self.with(|s| s.add_resource_group(rg));
    }

    /// Adds a virtual network with one subnet (and its resource group).
    pub fn add_subnet(&self, rg: &str, vnet: &str, subnet: &str) {
        self.with(|s| s.add_subnet(rg, vnet, subnet));
    }

    /// Adds an availability set (a VM may only join an existing one).
    pub fn add_availability_set(&self, rg: &str, name: &str) {
        self.with(|s| {
            s.add_resource_group(rg);
            s.put_raw(
                "availabilitySets",
                rg,
                name,
                serde_json::json!({"location": "westeurope", "properties": {"platformFaultDomainCount": 2}}),
            )
        });
    }

    /// Makes marketplace images of `publisher` carry a purchase plan whose
    /// terms start unaccepted.
    pub fn add_plan_publisher(&self, publisher: &str) {
        self.with(|s| s.plan_publishers.insert(publisher.to_ascii_lowercase()));
    }

    /// Whether the plan's terms have been accepted.
    pub fn agreement_accepted(&self, publisher: &str, offer: &str, plan: &str) -> bool {
        self.with(|s| s.agreement_accepted(publisher, offer, plan))
    }

    /// How many polls a long-running operation needs before it is done (default 1).
    pub fn set_lro_polls(&self, polls: u32) {
        self.with(|s| s.lro_polls = polls);
    }

    /// Rows per Resource Graph page (default 1000).
    pub fn set_graph_page_size(&self, rows: usize) {
        self.with(|s| s.graph_page_size = rows.max(1));
    }

    /// Makes Resource Graph answer 404 (as where it is not available).
    pub fn disable_resource_graph(&self) {
        self.with(|s| s.graph_enabled = false);
    }

    /// Injects a fault.
    pub fn inject(&self, fault: Fault) {
        self.with(|s| s.faults.push(fault));
    }

    /// Drops every fault still pending.
    pub fn clear_faults(&self) {
        self.with(|s| s.faults.clear());
    }

    /// Names of the VMs of a resource group → their JSON as GET returns it.
    pub fn vms(&self, rg: &str) -> BTreeMap<String, serde_json::Value> {
        self.with(|s| s.resources_of("virtualmachines", rg))
    }

    /// Names of the NICs of a resource group → their JSON.
    pub fn nics(&self, rg: &str) -> BTreeMap<String, serde_json::Value> {
        self.with(|s| s.resources_of("networkinterfaces", rg))
    }

    /// Names of the managed disks of a resource group → their JSON.
    pub fn disks(&self, rg: &str) -> BTreeMap<String, serde_json::Value> {
        self.with(|s| s.resources_of("disks", rg))
    }

    /// The `customData` a VM was created with (ARM never returns it).
    pub fn custom_data(&self, rg: &str, vm: &str) -> Option<String> {
        self.with(|s| s.custom_data.get(&state::key(rg, vm)).cloned())
    }

    /// Stores a resource as is (e.g. a leftover NIC of an older provider, a
    /// VM in a given state): `kind` is `virtualMachines`, `networkInterfaces`
    /// or `disks`.
    pub fn put_raw(&self, kind: &str, rg: &str, name: &str, body: serde_json::Value) {
        self.with(|s| s.put_raw(kind, rg, name, body));
    }

    /// Every request so far as `METHOD kind[/name]` (polls: `GET operations`).
    pub fn requests(&self) -> Vec<String> {
        self.with(|s| s.log.clone())
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.with(|s| s.log.clear());
    }

    /// How many tokens the token endpoint issued.
    pub fn tokens_issued(&self) -> usize {
        self.with(|s| s.tokens_issued)
    }
}
