//! [`OpenStackDriver`]: the `Driver` implementation.

use crate::api::{self, Server};
use crate::cloud::{ApiCallRecorder, Cloud};
use crate::config::{OpClass, OpenStackDriverConfig};
use crate::errors::OsError;
use crate::lookup::LookupCache;
use crate::secret::Credentials;
use crate::spec::OpenStackSpec;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{NodeAddress, Secret};
use mcm_api::MachineClass;
use mcm_driver::budget::Budget;
use mcm_driver::keyed_lock::KeyedLocks;
use mcm_driver::provider_spec;
use mcm_driver::{
    CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, GetVolumeIdsRequest,
    GetVolumeIdsResponse, InPlaceChanges, ListMachinesRequest, ListMachinesResponse,
    MachineRequest, Status, UpdateMachineRequest, UpdateMachineResponse,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tracing::{debug, info};

/// The Cinder CSI driver name.
pub const CINDER_CSI_DRIVER: &str = "cinder.csi.openstack.org";
/// The server metadata key holding the Machine's UID (Nova metadata keys
/// allow no `/`), so that a retried creation adopts instead of duplicating.
pub const MACHINE_UID_KEY: &str = "mcm.gardener.cloud-machine-uid";

/// The provider ID of a server: `openstack:///<region>/<server-id>`.
pub fn provider_id(region: &str, server_id: &str) -> String {
    format!("openstack:///{region}/{server_id}")
}

/// The region of `openstack:///<region>/<server-id>`, if it names one.
pub fn region_of(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("openstack://")?;
    let mut parts = rest.trim_end_matches('/').rsplit('/');
    parts.next().filter(|id| !id.is_empty())?;
    parts.next().filter(|r| !r.is_empty())
}

/// The server ID of a provider ID (its last path segment).
pub fn server_id(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or(provider_id)
}

/// Installs rustls' ring provider as the process default, unless one is set.
///
/// openstack_sdk turns on rustls' `aws-lc-rs` backend while kube and the
/// other clients use `ring`; with both compiled in, rustls cannot pick a
/// default and the first TLS client built without an explicit provider
/// panics. The driver's constructor calls this; a process that builds TLS
/// clients before it (e.g. a test's Kubernetes client) calls it first.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The machine-controller-manager driver for OpenStack.
pub struct OpenStackDriver {
    pub(crate) config: OpenStackDriverConfig,
    clouds: Mutex<HashMap<(u64, String), Arc<Cloud>>>,
    /// Held while a session is made, so concurrent first calls share one token.
    connecting: tokio::sync::Mutex<()>,
    budget: Budget<OpClass>,
    pub(crate) lookups: LookupCache,
    calls: ApiCallRecorder,
    /// Where every cloud call is reported ([`Driver::cloud_api`]).
    cloud_api: mcm_driver::cloud_api::CloudApi,
    /// One lock per machine being created, so that concurrent creates of the
    /// same machine run one after the other. An entry lives while a create
    /// holds or waits for it, also when the create's future is dropped mid-call.
    creating: KeyedLocks,
}

impl std::fmt::Debug for OpenStackDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenStackDriver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A validated request: the spec, the class it came from and the session.
pub(crate) struct Prepared {
    pub spec: OpenStackSpec,
    pub cloud: Arc<Cloud>,
    pub class_key: String,
    pub cluster_key: String,
    pub role_key: String,
}

impl Prepared {
    /// Whether a server carries the class's cluster and role metadata keys.
    pub fn is_member(&self, s: &Server) -> bool {
        s.metadata.contains_key(&self.cluster_key) && s.metadata.contains_key(&self.role_key)
    }
}

fn status(e: OsError) -> Status {
    Status::new(e.code(), e.to_string())
}

impl Default for OpenStackDriver {
    fn default() -> Self {
        OpenStackDriver::new(OpenStackDriverConfig::default())
    }
}

impl OpenStackDriver {
    /// A driver with the given configuration. Sessions are made per
    /// credentials and region on first use; nothing is contacted here.
    pub fn new(config: OpenStackDriverConfig) -> Self {
        install_crypto_provider();
        let limits = config.rate_limits.clone();
        OpenStackDriver {
            budget: Budget::new(
                limits.enabled,
                OpClass::ALL.iter().map(|c| (*c, limits.limit(*c))),
            ),
            lookups: LookupCache::new(config.lookup_ttl),
            config,
            clouds: Mutex::new(HashMap::new()),
            connecting: tokio::sync::Mutex::new(()),
            calls: ApiCallRecorder::default(),
            cloud_api: Default::default(),
            creating: KeyedLocks::new(),
        }
    }

    /// How many machines have an entry in the create-lock table (creates
    /// running or waiting): 0 when no create is in flight.
    pub fn create_locks_in_use(&self) -> usize {
        self.creating.len()
    }

    /// OpenStack calls made by this driver so far, by operation.
    pub fn api_calls(&self) -> BTreeMap<String, u64> {
        self.calls.snapshot()
    }

    async fn cloud(&self, creds: &Credentials, region: &str) -> Result<Arc<Cloud>, OsError> {
        let key = (creds.fingerprint(), region.to_string());
        if let Some(c) = self.clouds.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(c) = self.clouds.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let limiter = self
            .budget
            .scope(&format!("{}|{region}", creds.scope_name()));
        let cloud = Arc::new(
            Cloud::connect(creds, region, &self.config, limiter, self.calls.clone())
                .await?
                .with_cloud_api(self.cloud_api.clone()),
        );
        debug!(auth = %creds.auth_url, region, "OpenStack session established");
        if let Ok(mut m) = self.clouds.lock() {
            if let Some(existing) = m.get(&key) {
                return Ok(Arc::clone(existing));
            }
            mcm_driver::bounded::insert_bounded(
                &mut m,
                key,
                Arc::clone(&cloud),
                mcm_driver::bounded::CLIENT_CACHE_CAP,
            );
        }
        Ok(cloud)
    }

    /// Checks provider, spec and secret like the reference, then opens the session.
    pub(crate) async fn prepare(
        &self,
        class: &MachineClass,
        secret: &Secret,
    ) -> Result<Prepared, Status> {
        self.prepare_checked(class, secret, None).await
    }

    /// The session of a call on existing servers (DeleteMachine,
    /// GetMachineStatus, ListMachines): the spec is decoded but not
    /// validated, so that a class that no longer validates still lets its
    /// machines be found and deleted (docs/design/driver.md, "Decoding").
    /// A class without a region takes the one `provider_id` names.
    pub(crate) async fn prepare_existing(
        &self,
        class: &MachineClass,
        secret: &Secret,
        provider_id: &str,
    ) -> Result<Prepared, Status> {
        self.prepare_checked(class, secret, Some(provider_id)).await
    }

    /// `existing`: `None` validates everything, `Some(providerID)` only what
    /// finding the machine's servers needs.
    async fn prepare_checked(
        &self,
        class: &MachineClass,
        secret: &Secret,
        existing: Option<&str>,
    ) -> Result<Prepared, Status> {
        let spec = match existing {
            None => provider_spec::decode::<OpenStackSpec>(class, secret)?.value,
            Some(pid) => {
                let mut spec =
                    provider_spec::decode_existing::<OpenStackSpec>(class, secret)?.value;
                if spec.region.trim().is_empty() {
                    spec.region = region_of(pid.trim()).unwrap_or_default().to_string();
                }
                if spec.region.trim().is_empty() {
                    return Err(Status::invalid_argument(
                        "spec.region: Required value: region is required",
                    ));
                }
                spec
            }
        };
        let (cluster_key, role_key) = match spec.membership_keys() {
            Some((c, r)) => (c.to_string(), r.to_string()),
            None => {
                return Err(Status::invalid_argument(
                    "spec.tags: cluster/role tags are missing",
                ))
            }
        };
        let creds = Credentials::from_secret(secret);
        let cloud = self.cloud(&creds, &spec.region).await.map_err(status)?;
        let class_key = format!(
            "{}/{}|{}",
            class.metadata.namespace.as_deref().unwrap_or_default(),
            class.metadata.name.as_deref().unwrap_or_default(),
            spec.region
        );
        Ok(Prepared {
            spec,
            cloud,
            class_key,
            cluster_key,
            role_key,
        })
    }

    /// The server of a machine: by provider ID when the Machine has one
    /// (it must carry the class's membership keys), else by exact name.
    pub(crate) async fn find(
        &self,
        p: &Prepared,
        req: &MachineRequest,
    ) -> Result<Option<Server>, OsError> {
        let pid = req.machine.spec.provider_id.trim();
        if !pid.is_empty() {
            let found = api::get_server(&p.cloud, server_id(pid)).await?;
            return Ok(found.filter(|s| p.is_member(s)));
        }
        self.find_by_name(p, req).await
    }

    /// The server named after the machine with the class's membership keys,
    /// skipping servers that carry another Machine's UID. Several → `OutOfRange`.
    pub(crate) async fn find_by_name(
        &self,
        p: &Prepared,
        req: &MachineRequest,
    ) -> Result<Option<Server>, OsError> {
        let name = machine_name(req);
        let uid = req.machine.metadata.uid.as_deref().unwrap_or_default();
        let mut found: Vec<Server> = api::list_servers(&p.cloud, Some(name))
            .await?
            .into_iter()
            .filter(|s| s.name == name && p.is_member(s))
            .filter(|s| match s.metadata.get(MACHINE_UID_KEY) {
                Some(other) => uid.is_empty() || other == uid,
                None => true,
            })
            .collect();
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop()),
            _ => Err(OsError::MultipleFound(format!(
                "failed to find server [Name={name:?}]"
            ))),
        }
    }
}

impl OpenStackDriver {
    /// The server a create adopts: the one of the machine's name that
    /// carries this Machine's identity or, without one, the class's cluster
    /// and role metadata (the Go provider's server). A server of the name
    /// with another Machine's identity refuses the create
    /// (`FailedPrecondition`); servers of the name with neither identity
    /// nor this cluster's metadata are someone else's and ignored (Nova
    /// names are not unique). Design: docs/design/safety.md, "Adoption on a
    /// retried create".
    async fn adoptable(&self, p: &Prepared, req: &MachineRequest) -> DriverResult<Option<Server>> {
        let name = machine_name(req);
        let servers = api::list_servers(&p.cloud, Some(name))
            .await
            .map_err(status)?;
        let mut adopt = Vec::new();
        let mut refused = None;
        for s in servers.into_iter().filter(|s| s.name == name) {
            let carried = mcm_driver::adoption::Carried {
                owner: mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Dash, |k| {
                    s.metadata.get(k).map(String::as_str)
                }),
                uid: s.metadata.get(MACHINE_UID_KEY).cloned(),
                cluster_tags: p.is_member(&s),
            };
            let has_identity = carried.owner.is_some() || carried.uid.is_some();
            match mcm_driver::adoption::decide(&req.machine, name, &carried) {
                Ok(_) => adopt.push(s),
                Err(e) if has_identity => refused = Some(e),
                Err(_) => {}
            }
        }
        match (adopt.len(), refused) {
            (0, Some(e)) => Err(e),
            (0, None) => Ok(None),
            (1, _) => Ok(adopt.pop()),
            _ => Err(status(OsError::MultipleFound(format!(
                "failed to find server [Name={name:?}]"
            )))),
        }
    }
}

/// The machine's name.
pub(crate) fn machine_name(req: &MachineRequest) -> &str {
    req.machine.metadata.name.as_deref().unwrap_or_default()
}

/// The server's internal addresses, when it has exactly one network (as the reference).
pub(crate) fn addresses(s: &Server) -> Vec<NodeAddress> {
    if s.addresses.len() != 1 {
        return Vec::new();
    }
    s.addresses
        .values()
        .flatten()
        .map(|a| NodeAddress {
            type_: "InternalIP".into(),
            address: a.addr.clone(),
        })
        .collect()
}

#[async_trait]
impl Driver for OpenStackDriver {
    fn cloud_api(&self) -> Option<mcm_driver::cloud_api::CloudApi> {
        Some(self.cloud_api.clone())
    }

    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> InPlaceChanges {
        crate::update::in_place_changes(last_applied, current)
    }

    async fn update_machine(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        self.update(req).await
    }

    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let _same_machine = self.creating.lock(machine_name(req)).await;
        self.create(req).await
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        let pid = req.machine.spec.provider_id.clone();
        let mut p = self
            .prepare_existing(&req.machine_class, &req.secret, &pid)
            .await?;
        // An existing server is deleted in the region its providerID names,
        // where it was created, not in the class's current region: there it
        // would look gone (issue 17, finding 3).
        if let Some(region) = region_of(pid.trim()).filter(|r| *r != p.spec.region) {
            let creds = Credentials::from_secret(&req.secret);
            p.cloud = self.cloud(&creds, region).await.map_err(status)?;
        }
        self.delete(&p, req, pid.trim()).await.map_err(status)?;
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let p = self
            .prepare_existing(
                &req.machine_class,
                &req.secret,
                &req.machine.spec.provider_id,
            )
            .await?;
        let name = machine_name(req);
        match self.find(&p, req).await.map_err(status)? {
            Some(s) => Ok(GetMachineStatusResponse {
                provider_id: provider_id(&p.spec.region, &s.id),
                node_name: name.to_string(),
                addresses: addresses(&s),
            }),
            None => Err(Status::not_found(format!(
                "machine {name:?}: no server found"
            ))),
        }
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let p = self
            .prepare_existing(&req.machine_class, &req.secret, "")
            .await?;
        let servers = api::list_servers(&p.cloud, None).await.map_err(|e| {
            let class = req
                .machine_class
                .metadata
                .name
                .as_deref()
                .unwrap_or_default();
            Status::new(
                e.code(),
                format!("listing machines for machine class {class:?} failed with: {e}"),
            )
        })?;
        let mut resp = ListMachinesResponse::default();
        for s in servers.into_iter().filter(|s| p.is_member(s)) {
            // The server ID names the VM whatever region the class names
            // now; its metadata carries the identity.
            let owner = mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Dash, |k| {
                s.metadata.get(k).map(String::as_str)
            });
            resp.insert(provider_id(&p.spec.region, &s.id), s.name, s.id, owner);
        }
        Ok(resp)
    }

    /// Keys read under another spelling than their canonical one, or unknown.
    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        provider_spec::warnings::<OpenStackSpec>(provider_spec)
    }

    /// What CreateMachine would refuse, and the decoder's warnings.
    fn check_class(&self, class: &MachineClass, secret: &Secret) -> mcm_driver::ClassCheck {
        crate::spec::check_class(class, secret)
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        let mut volume_ids = Vec::new();
        for spec in &req.pv_specs {
            if let Some(c) = &spec.cinder {
                volume_ids.push(c.volume_id.clone());
            } else if let Some(csi) = spec
                .csi
                .as_ref()
                .filter(|c| c.driver == CINDER_CSI_DRIVER && !c.volume_handle.is_empty())
            {
                volume_ids.push(csi.volume_handle.clone());
            }
        }
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}

impl OpenStackDriver {
    async fn create(&self, req: &CreateMachineRequest) -> DriverResult<CreateMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret).await?;
        let name = machine_name(req);
        let server = match self.adoptable(&p, req).await? {
            Some(s) => {
                info!(machine = name, server = %s.id, "adopting the existing server of the machine");
                s
            }
            None => self.deploy_or_clean_up(&p, req).await?,
        };
        let active = match self.wait_active(&p, &server.id).await {
            Ok(s) => s,
            Err(e) => return Err(self.clean_up_after(&p, req, e).await),
        };
        if let Err(e) = self.patch_pod_network_ports(&p, &active.id).await {
            return Err(self.clean_up_after(&p, req, e).await);
        }
        info!(machine = name, server = %active.id, "server is ACTIVE");
        Ok(CreateMachineResponse {
            provider_id: provider_id(&p.spec.region, &active.id),
            node_name: name.to_string(),
            last_known_state: String::new(),
            addresses: addresses(&active),
        })
    }
}

#[cfg(test)]
mod provider_id_tests {
    use super::*;

    #[test]
    fn a_provider_id_names_the_region_of_its_server() {
        assert_eq!(
            region_of(&provider_id("RegionOne", "abc")),
            Some("RegionOne")
        );
        assert_eq!(region_of("openstack:////abc"), None);
        assert_eq!(region_of("openstack:///RegionOne/"), None);
        assert_eq!(region_of("aws:///r/i-1"), None);
        assert_eq!(server_id(&provider_id("RegionOne", "abc")), "abc");
    }
}
