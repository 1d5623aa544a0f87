//! # mcm-driver: the provider contract of mcm-rs
//!
//! Every cloud plugs into mcm-rs behind the [`Driver`] trait, the contract of
//! Gardener's machine-controller-manager: `CreateMachine`, `InitializeMachine`,
//! `DeleteMachine`, `GetMachineStatus`, `ListMachines` and `GetVolumeIDs`.
//! Calls fail with a [`Status`]: a gRPC-style [`Code`] (`Unimplemented` = 12,
//! `Uninitialized` = 17, ...) and a message, whose text form
//! `machine codes error: code = [<Name>] message = [<msg>]` is the wire contract
//! with out-of-process providers and is parsed back by [`Status::parse`].
//!
//! Post-creation initialization: after `CreateMachine` the controller persists
//! the providerID and node label, then calls `InitializeMachine`. A provider with
//! nothing to initialize answers `Unimplemented` (the trait's default). A
//! `GetMachineStatus` answer of `Uninitialized` (carrying the VM's identity in
//! [`Status::machine`]) means "the VM exists, initialize it; never create another".
//!
//! `conformance` (feature `conformance`) holds reusable async checks that each
//! provider crate runs against its own backend.
//!
//! Features (docs/design/crates.md): the contract's types need no async
//! runtime, so mcm-core builds without tokio. `budget` adds the cloud
//! budget's token buckets and `keyed-lock` the per-machine create locks (both
//! on tokio); `conformance` and `testing` are test support for provider and
//! controller tests.

pub mod adoption;
pub mod bounded;
pub mod budget;
pub mod class_check;
pub mod cloud_api;
pub mod codes;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod identity;
pub mod in_place;
#[cfg(any(test, feature = "keyed-lock"))]
pub mod keyed_lock;
pub mod provider_spec;
#[cfg(test)]
mod redaction_tests;
pub mod spec_decode;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use class_check::{ClassCheck, Finding};
pub use codes::Code;
pub use identity::{MachineOwner, TagStyle};
pub use in_place::{changed_fields, InPlaceChanges, UpdateMachineRequest, UpdateMachineResponse};
pub use status::{MachineIdentity, ParseStatusError, Status};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{NodeAddress, PersistentVolumeSpec, Secret};
use mcm_api::{Machine, MachineClass};
use std::collections::BTreeMap;

/// The result of a driver call.
pub type DriverResult<T> = Result<T, Status>;

/// The objects a machine-scoped call works on.
///
/// `secret` holds the merged data of the class's `secretRef` and
/// `credentialsSecretRef` (later keys win); in the creation flow its userdata
/// has its placeholders substituted. Never log it: `Debug` shows only its keys.
#[derive(Clone)]
pub struct MachineRequest {
    /// The Machine object.
    pub machine: Machine,
    /// Its MachineClass.
    pub machine_class: MachineClass,
    /// The merged secret (credentials and userdata).
    pub secret: Secret,
}

/// A Secret value as bytes: `data` first, then `stringData`, as the API
/// server merges them. Providers read credentials and userData through it, so
/// non-UTF-8 userData (gzip'd cloud-init) reaches the cloud unchanged.
pub fn secret_bytes(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return Some(v.0.clone());
    }
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|s| s.as_bytes().to_vec())
}

/// The secret as `Debug` may show it: its name and keys, never its values.
pub struct RedactedSecret<'a>(pub &'a Secret);

impl std::fmt::Debug for RedactedSecret<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<&str> = Vec::new();
        if let Some(d) = &self.0.data {
            keys.extend(d.keys().map(String::as_str));
        }
        if let Some(d) = &self.0.string_data {
            keys.extend(d.keys().map(String::as_str));
        }
        keys.sort_unstable();
        keys.dedup();
        f.debug_struct("Secret")
            .field("name", &self.0.metadata.name)
            .field("keys", &keys)
            .field("values", &"<redacted>")
            .finish()
    }
}

impl std::fmt::Debug for MachineRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineRequest")
            .field("machine", &self.machine.metadata.name)
            .field("machine_class", &self.machine_class.metadata.name)
            .field("secret", &RedactedSecret(&self.secret))
            .finish()
    }
}

impl std::fmt::Debug for ListMachinesRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListMachinesRequest")
            .field("machine_class", &self.machine_class.metadata.name)
            .field("secret", &RedactedSecret(&self.secret))
            .finish()
    }
}

/// Request of `CreateMachine`.
pub type CreateMachineRequest = MachineRequest;
/// Request of `InitializeMachine`.
pub type InitializeMachineRequest = MachineRequest;
/// Request of `DeleteMachine`.
pub type DeleteMachineRequest = MachineRequest;
/// Request of `GetMachineStatus`.
pub type GetMachineStatusRequest = MachineRequest;

/// Response of `CreateMachine`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreateMachineResponse {
    /// The VM's provider ID, e.g. `aws:///eu-west-1/i-0123`.
    pub provider_id: String,
    /// The name of the Node the VM registers as.
    pub node_name: String,
    /// Opaque provider state, stored in `status.lastKnownState`.
    pub last_known_state: String,
    /// The VM's addresses (used in the mode without a target cluster).
    pub addresses: Vec<NodeAddress>,
}

/// Response of `InitializeMachine`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InitializeMachineResponse {
    /// The VM's provider ID.
    pub provider_id: String,
    /// The name of the Node the VM registers as.
    pub node_name: String,
    /// The VM's addresses, possibly more than at creation (e.g. IPv6).
    pub addresses: Vec<NodeAddress>,
}

/// Response of `DeleteMachine`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeleteMachineResponse {
    /// Opaque provider state, stored in `status.lastKnownState`.
    pub last_known_state: String,
}

/// Response of `GetMachineStatus`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GetMachineStatusResponse {
    /// The VM's provider ID.
    pub provider_id: String,
    /// The name of the Node the VM registers as.
    pub node_name: String,
    /// The VM's addresses.
    pub addresses: Vec<NodeAddress>,
}

impl From<GetMachineStatusResponse> for MachineIdentity {
    fn from(r: GetMachineStatusResponse) -> Self {
        MachineIdentity {
            provider_id: r.provider_id,
            node_name: r.node_name,
            addresses: r.addresses,
        }
    }
}

/// Request of `ListMachines`. `Debug` shows only the secret's keys.
#[derive(Clone)]
pub struct ListMachinesRequest {
    /// The class whose VMs are listed (its providerSpec names the cluster tags).
    pub machine_class: MachineClass,
    /// The merged secret of the class.
    pub secret: Secret,
}

/// Response of `ListMachines`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListMachinesResponse {
    /// providerID → machine name, for every VM of the class's cluster (the
    /// reference's answer).
    pub machine_list: BTreeMap<String, String>,
    /// providerID → what the provider knows of the VM beyond its name: its
    /// canonical key and the identity it was created with. A VM listed in
    /// `machine_list` without an entry here counts as one without identity
    /// whose key is its providerID ([`ListMachinesResponse::facts`]).
    pub facts: BTreeMap<String, ListedVmFacts>,
}

/// What a provider knows of one listed VM (design: docs/design/safety.md,
/// "VM identity").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedVmFacts {
    /// A key that names the VM whatever the class says now: the instance ID,
    /// the VM's resource ID or path (never built from a class field the user
    /// can edit, such as a location or region).
    pub instance_key: String,
    /// The Machine the VM was created for, as recorded on it at creation
    /// (`None`: created out of band, by the Go controller, or before VMs
    /// carried it).
    pub owner: Option<MachineOwner>,
}

impl ListMachinesResponse {
    /// Adds one VM.
    pub fn insert(
        &mut self,
        provider_id: String,
        name: String,
        instance_key: String,
        owner: Option<MachineOwner>,
    ) {
        self.facts.insert(
            provider_id.clone(),
            ListedVmFacts {
                instance_key,
                owner,
            },
        );
        self.machine_list.insert(provider_id, name);
    }

    /// The facts of a listed VM (its providerID as key and no identity when
    /// the provider gave none).
    pub fn facts(&self, provider_id: &str) -> ListedVmFacts {
        self.facts
            .get(provider_id)
            .cloned()
            .unwrap_or_else(|| ListedVmFacts {
                instance_key: provider_id.to_string(),
                owner: None,
            })
    }
}

/// Request of `GetVolumeIDs`.
#[derive(Clone, Debug, Default)]
pub struct GetVolumeIdsRequest {
    /// The PersistentVolume specs whose provider volume IDs are wanted.
    pub pv_specs: Vec<PersistentVolumeSpec>,
}

/// Response of `GetVolumeIDs`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GetVolumeIdsResponse {
    /// The volume IDs of the specs this provider recognises.
    pub volume_ids: Vec<String>,
}

/// The cloud operations the controller paces by the driver's
/// [`Driver::rate_limits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloudOp {
    /// `CreateMachine`.
    Create,
    /// `InitializeMachine`.
    Initialize,
    /// `DeleteMachine`.
    Delete,
    /// `GetMachineStatus`.
    Status,
    /// `ListMachines`.
    List,
    /// `UpdateMachine`.
    Update,
}

/// The provider contract. All methods are idempotent from the controller's point of view.
#[async_trait]
pub trait Driver: Send + Sync {
    /// Creates the VM for a machine. Must be idempotent: a retried create for the
    /// same Machine (same UID) returns the same VM, never a second one. Records
    /// the Machine's identity ([`MachineOwner::of`]) on the VM where the cloud
    /// has tags, labels or metadata, so that ListMachines reports it.
    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse>;

    /// Post-creation initialization (e.g. network settings that the create call
    /// cannot set). Idempotent. `Unimplemented` when there is nothing to do.
    async fn initialize_machine(
        &self,
        _req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        Err(Status::unimplemented(
            "InitializeMachine is not implemented by this provider",
        ))
    }

    /// Which of the changes between the providerSpec a machine's VM was last
    /// created or updated with and the class's current one this driver can
    /// apply to the running VM, and which need a new VM. A pure check: no
    /// cloud call, no secret. Default: every changed field needs a
    /// replacement (docs/design/hot-update.md).
    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> InPlaceChanges {
        InPlaceChanges::all_need_replacement(changed_fields(last_applied, current))
    }

    /// Applies the in-place changes of [`Driver::in_place_changes`] to the
    /// running VM, converging it on the class's current providerSpec.
    /// Idempotent: running it twice, or again after a crash half-way, gives
    /// the same VM. Never creates or deletes a VM. Default: `Unimplemented`.
    async fn update_machine(
        &self,
        _req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        Err(Status::unimplemented(
            "UpdateMachine is not implemented by this provider",
        ))
    }

    /// Deletes the VM. A VM that is already gone is success.
    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse>;

    /// The VM backing a machine: `NotFound` when there is none, `Uninitialized`
    /// (with [`Status::machine`] set) while InitializeMachine has not been applied.
    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse>;

    /// The cloud's rate limits per operation, which the controller paces its
    /// calls by (one budget per [`Driver::rate_limit_scope`]), so that a
    /// scale-up waits in the controller's queue instead of drawing throttled
    /// answers (docs/design/driver.md, "Cloud budget"). Default: none.
    async fn rate_limits(&self) -> Vec<(CloudOp, budget::BucketLimit)> {
        Vec::new()
    }

    /// The scope one budget applies to (an account and region, a project):
    /// a stable key derived from the request, never secret data in clear.
    /// Default: one scope for the driver.
    fn rate_limit_scope(&self, _req: &MachineRequest) -> String {
        String::new()
    }

    /// Where the driver reports its cloud API calls
    /// ([`cloud_api::CloudApi`]): the runtime adds its observer here, so
    /// that the calls move its `mcm_cloud_api_*` series. `None` (the
    /// default): the driver makes no cloud API calls of its own to report.
    fn cloud_api(&self) -> Option<cloud_api::CloudApi> {
        None
    }

    /// All VMs of the class's cluster, by the cluster and role tags, each
    /// with its canonical key and the identity ([`MachineOwner`]) that
    /// CreateMachine recorded on it ([`ListMachinesResponse::insert`]).
    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse>;

    /// The provider volume IDs of the given PersistentVolume specs.
    async fn get_volume_ids(
        &self,
        _req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        Ok(GetVolumeIdsResponse::default())
    }

    /// Warnings about a MachineClass's `providerSpec` that do not stop it
    /// from working, each a sentence naming the key and what to write instead
    /// (e.g. a key accepted in another spelling than its canonical one). The
    /// MachineClass controller publishes each as a Warning Event on the class
    /// when the class changes. Makes no cloud call. Default: none.
    fn provider_spec_warnings(&self, _provider_spec: &serde_json::Value) -> Vec<String> {
        Vec::new()
    }

    /// Decodes and validates a MachineClass and its (merged) Secret as
    /// CreateMachine would, offline: no cloud call. Each error and warning
    /// names the field it concerns and never carries a Secret value
    /// (`mcm validate` prints them). Default: the
    /// [`Driver::provider_spec_warnings`] of the class, no error.
    fn check_class(&self, class: &MachineClass, _secret: &Secret) -> ClassCheck {
        ClassCheck {
            errors: Vec::new(),
            warnings: self
                .provider_spec_warnings(&class.provider_spec)
                .into_iter()
                .map(|w| Finding::new("providerSpec", w))
                .collect(),
        }
    }
}
