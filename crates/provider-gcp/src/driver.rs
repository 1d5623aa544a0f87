//! [`GcpDriver`]: the `Driver` implementation.

use crate::compute::{ApiCallRecorder, Clients, Compute};
use crate::config::{GcpDriverConfig, OpClass};
use crate::credentials::{from_secret, secret_bytes, GcpCredentials};
use crate::errors::GceError;
use crate::instance::{build_instance, machine_uid_of, InstanceInput};
use crate::spec::{membership, GcpProviderSpec};
use crate::validation::{reference_step, SECRET_USER_DATA};
use async_trait::async_trait;
use google_cloud_compute_v1::client::{Disks, Instances, ZoneOperations};
use google_cloud_compute_v1::model::Instance;
use k8s_openapi::api::core::v1::{NodeAddress, Secret};
use mcm_api::{Machine, MachineClass};
use mcm_driver::budget::Budget;
use mcm_driver::provider_spec::{self, Invalid, Stage};
use mcm_driver::{
    Code, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, GetVolumeIdsRequest,
    GetVolumeIdsResponse, ListMachinesRequest, ListMachinesResponse, Status,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, info_span, warn, Instrument};

/// The CSI driver of GCE persistent disks.
pub const GCE_PD_CSI_DRIVER: &str = "pd.csi.storage.gke.io";
/// The provider ID prefix (`gce://` + `/<project>/<zone>/<name>`).
pub const PROVIDER_ID_PREFIX: &str = "gce://";

/// The provider ID of an instance: `gce:///<project>/<zone>/<name>`.
pub fn provider_id(project: &str, zone: &str, name: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}/{project}/{zone}/{name}")
}

/// The machine-controller-manager driver for Google Compute Engine.
pub struct GcpDriver {
    config: Arc<GcpDriverConfig>,
    budget: Budget<OpClass>,
    clients: tokio::sync::Mutex<HashMap<u64, Clients>>,
    calls: ApiCallRecorder,
    cloud_api: mcm_driver::cloud_api::CloudApi,
}

impl std::fmt::Debug for GcpDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpDriver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Where a machine's instance lives: the project and zone its providerID
/// names (`gce:///<project>/<zone>/<name>`), else the class's.
pub(crate) struct Location {
    pub(crate) project: String,
    pub(crate) zone: String,
    from_provider_id: bool,
}

impl Location {
    pub(crate) fn of(p: &Prepared, provider_id: &str) -> Location {
        match parse_provider_id(provider_id) {
            Some((project, zone, _)) => Location {
                project: project.to_string(),
                zone: zone.to_string(),
                from_provider_id: true,
            },
            None => Location {
                project: p.project.clone(),
                zone: p.spec.zone.clone(),
                from_provider_id: false,
            },
        }
    }
}

/// The project, zone and name of `gce:///<project>/<zone>/<name>`.
pub fn parse_provider_id(provider_id: &str) -> Option<(&str, &str, &str)> {
    let rest = provider_id.trim().strip_prefix(PROVIDER_ID_PREFIX)?;
    let mut parts = rest.trim_matches('/').split('/');
    let (project, zone, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || project.is_empty() || zone.is_empty() || name.is_empty() {
        return None;
    }
    Some((project, zone, name))
}

/// A checked request: the spec, the project and the Compute access.
pub(crate) struct Prepared {
    pub(crate) spec: GcpProviderSpec,
    pub(crate) project: String,
    pub(crate) compute: Compute,
}

/// How much of the spec an operation checks (the reference validates the
/// whole spec only on create; the other calls need just the zone).
/// Calls on existing VMs never validate the rest of the spec: a class that
/// no longer validates still lets its machines be found and deleted
/// (docs/design/driver.md, "Decoding").
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Check {
    Full,
    ZoneOnly,
    /// The machine's providerID names its project and zone: the spec's are not needed.
    Known,
}

impl Check {
    /// `Known` when the providerID names the VM's zone, else `ZoneOnly`.
    fn existing(provider_id: &str) -> Check {
        if parse_provider_id(provider_id).is_some() {
            Check::Known
        } else {
            Check::ZoneOnly
        }
    }
}

impl GcpDriver {
    /// A driver with the given configuration. Clients are built per
    /// credentials on first use; nothing is contacted here. Installs the
    /// `ring` rustls provider as the process default if none is installed.
    pub fn new(config: GcpDriverConfig) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let limits = config.rate_limits.clone();
        GcpDriver {
            budget: Budget::new(
                limits.enabled,
                OpClass::ALL.iter().map(|c| (*c, limits.limit(*c))),
            ),
            config: Arc::new(config),
            clients: tokio::sync::Mutex::new(HashMap::new()),
            calls: ApiCallRecorder::default(),
            cloud_api: Default::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GcpDriverConfig {
        &self.config
    }

    /// Compute calls made so far, by method.
    pub fn api_calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls.snapshot()
    }

    async fn compute(&self, creds: &GcpCredentials) -> Result<Compute, String> {
        let limiter = self.budget.scope(&creds.project);
        let mut clients = self.clients.lock().await;
        let built = match clients.get(&creds.fingerprint) {
            Some(c) => c.clone(),
            None => {
                let auth = creds.build().map_err(|e| e.to_string())?;
                let mut ib = Instances::builder()
                    .with_credentials(auth.clone())
                    .with_attempt_timeout(Duration::from_secs(30));
                let mut ob = ZoneOperations::builder()
                    .with_credentials(auth.clone())
                    .with_attempt_timeout(Duration::from_secs(30));
                let mut db = Disks::builder()
                    .with_credentials(auth)
                    .with_attempt_timeout(Duration::from_secs(30));
                if let Some(ep) = &self.config.endpoint {
                    ib = ib.with_endpoint(ep.clone());
                    ob = ob.with_endpoint(ep.clone());
                    db = db.with_endpoint(ep.clone());
                }
                let built = Clients {
                    instances: ib
                        .build()
                        .await
                        .map_err(|e| format!("building the Compute instances client: {e}"))?,
                    operations: ob
                        .build()
                        .await
                        .map_err(|e| format!("building the Compute operations client: {e}"))?,
                    disks: db
                        .build()
                        .await
                        .map_err(|e| format!("building the Compute disks client: {e}"))?,
                };
                mcm_driver::bounded::insert_bounded(
                    &mut clients,
                    creds.fingerprint,
                    built.clone(),
                    mcm_driver::bounded::CLIENT_CACHE_CAP,
                );
                built
            }
        };
        Ok(
            Compute::new(built, limiter, self.calls.clone(), self.config.clone())
                .with_cloud_api(self.cloud_api.clone()),
        )
    }

    /// Checks the class and Secret as the reference does, and finds the
    /// Compute access. `ctx` prefixes every message (`Create machine "m"`).
    pub(crate) async fn prepare(
        &self,
        ctx: &str,
        class: &MachineClass,
        secret: &Secret,
        check: Check,
    ) -> Result<Prepared, Status> {
        let refused = |e: Invalid| match e.stage {
            Stage::Provider => Status::from(e),
            stage => Status::invalid_argument(format!(
                "{ctx} failed on {}: {}",
                reference_step(stage),
                e.message
            )),
        };
        let spec = match check {
            Check::Full => provider_spec::decode::<GcpProviderSpec>(class, secret),
            Check::Known | Check::ZoneOnly => {
                provider_spec::decode_existing::<GcpProviderSpec>(class, secret)
            }
        }
        .map_err(refused)?
        .value;
        if check == Check::ZoneOnly && spec.zone.is_empty() {
            return Err(Status::invalid_argument(format!(
                "{ctx} failed on validateZone: error while validating Zone zone cannot be empty"
            )));
        }
        let creds =
            from_secret(secret).map_err(|e| Status::internal(format!("{ctx} failed: {e}")))?;
        if creds.project.is_empty() {
            return Err(Status::internal(format!(
                "{ctx} failed: no project: the credentials have no project_id and the secret no projectID"
            )));
        }
        let compute = self
            .compute(&creds)
            .await
            .map_err(|e| Status::internal(format!("{ctx} failed: {e}")))?;
        Ok(Prepared {
            spec,
            project: creds.project,
            compute,
        })
    }

    async fn create(&self, req: &CreateMachineRequest) -> DriverResult<CreateMachineResponse> {
        let name = machine_name(&req.machine)?;
        let ctx = format!("Create machine {name:?}");
        let p = self
            .prepare(&ctx, &req.machine_class, &req.secret, Check::Full)
            .await?;
        let zone = p.spec.zone.as_str();
        // Compute Engine metadata values are strings: userData that is not
        // UTF-8 (gzip'd cloud-init) cannot reach the VM unchanged, and a
        // lossy conversion would boot it with corrupted userdata.
        let user_data = match String::from_utf8(
            secret_bytes(&req.secret, SECRET_USER_DATA).unwrap_or_default(),
        ) {
            Ok(text) => text,
            Err(e) => {
                return Err(Status::invalid_argument(format!(
                    "{ctx} failed: the secret's userData is not UTF-8 text (invalid byte at offset {}; gzip-compressed?): \
                     Compute Engine metadata values are strings, so it cannot be passed unchanged; store it uncompressed",
                    e.utf8_error().valid_up_to()
                )));
            }
        };
        let uid = req.machine.metadata.uid.clone().unwrap_or_default();
        let mut instance = build_instance(
            &p.spec,
            &InstanceInput {
                name,
                machine_uid: &uid,
                project: &p.project,
                user_data: &user_data,
            },
        );
        // The Machine's identity as labels (docs/design/safety.md, "VM identity").
        if let Some(owner) = mcm_driver::MachineOwner::of(&req.machine) {
            instance
                .labels
                .extend(owner.tags(mcm_driver::TagStyle::Label));
        }
        let fail = |e: GceError| Status::new(e.code(), format!("{ctx} failed: {e}"));
        let created = match p.compute.insert(&p.project, zone, &instance).await {
            Ok(op) => {
                p.compute
                    .wait("instances.insert", &p.project, zone, op)
                    .await
                    .map_err(|e| {
                        warn!(error = %e, "the insert operation failed");
                        fail(e)
                    })?;
                info!("VM created");
                p.compute.get(&p.project, zone, name).await.unwrap_or_else(|e| {
                    debug!(error = %e, "reading the new instance failed; answering without addresses");
                    None
                })
            }
            Err(e) if e.is_already_exists() => {
                let existing = p
                    .compute
                    .get(&p.project, zone, name)
                    .await
                    .map_err(|e| Status::internal(format!("{ctx} failed: {e}")))?
                    .ok_or_else(|| {
                        Status::internal(format!(
                            "{ctx} failed: the insert answered alreadyExists, but the instance is gone; retry"
                        ))
                    })?;
                // Adopt our own earlier attempt, or the Go provider's VM of
                // this name and cluster; refuse anyone else's
                // (docs/design/safety.md, "Adoption on a retried create").
                let carried = mcm_driver::adoption::Carried {
                    owner: mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Label, |k| {
                        existing.labels.get(k).map(String::as_str)
                    }),
                    uid: machine_uid_of(&existing).map(str::to_string),
                    cluster_tags: belongs(&p.spec, &existing),
                };
                match mcm_driver::adoption::decide(&req.machine, name, &carried) {
                    Ok(why) => {
                        info!(reason = why.as_str(), "an instance of this machine's name exists (a retried create); adopting it");
                        Some(existing)
                    }
                    Err(refused) => {
                        warn!(error = %refused.message, "an instance of the same name is not this machine's");
                        return Err(Status::new(
                            refused.code,
                            format!("{ctx} failed: {}", refused.message),
                        ));
                    }
                }
            }
            Err(e) => {
                warn!(error = %e, "insert failed");
                return Err(fail(e));
            }
        };
        let pid = provider_id(&p.project, zone, name);
        Ok(CreateMachineResponse {
            last_known_state: format!("Created {pid}"),
            provider_id: pid,
            node_name: name.to_string(),
            addresses: created.as_ref().map(addresses).unwrap_or_default(),
        })
    }

    /// The machine's instance, if it carries the class's cluster and role tags.
    pub(crate) async fn find(
        &self,
        p: &Prepared,
        at: &Location,
        name: &str,
    ) -> Result<Option<Instance>, GceError> {
        Ok(self
            .get_at(p, at, name)
            .await?
            .filter(|i| {
                let member = belongs(&p.spec, i);
                if !member {
                    debug!("an instance of this name exists, but without the class's cluster and role tags");
                }
                member
            }))
    }

    async fn get_at(
        &self,
        p: &Prepared,
        at: &Location,
        name: &str,
    ) -> Result<Option<Instance>, GceError> {
        p.compute.get(&at.project, &at.zone, name).await
    }

    async fn status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let name = machine_name(&req.machine)?;
        let ctx = format!("Machine status {name:?}");
        let check = Check::existing(&req.machine.spec.provider_id);
        let p = self
            .prepare(&ctx, &req.machine_class, &req.secret, check)
            .await?;
        let at = Location::of(&p, &req.machine.spec.provider_id);
        let found = self
            .find(&p, &at, name)
            .await
            .map_err(|e| Status::internal(format!("{ctx} failed: {e}")))?;
        let Some(i) = found else {
            return Err(Status::not_found(format!(
                "machine name={name}, uuid= not found"
            )));
        };
        Ok(GetMachineStatusResponse {
            provider_id: provider_id(&at.project, &at.zone, name),
            node_name: name.to_string(),
            addresses: addresses(&i),
        })
    }

    async fn delete(&self, req: &DeleteMachineRequest) -> DriverResult<DeleteMachineResponse> {
        let name = machine_name(&req.machine)?;
        let ctx = format!("Delete machine {name:?}");
        let check = Check::existing(&req.machine.spec.provider_id);
        let p = self
            .prepare(&ctx, &req.machine_class, &req.secret, check)
            .await?;
        // An existing VM is deleted where its providerID says it lives, not
        // where the class points now (issue 17, finding 3).
        let at = Location::of(&p, &req.machine.spec.provider_id);
        let (project, zone) = (at.project.as_str(), at.zone.as_str());
        let fail = |e: GceError| Status::internal(format!("{ctx} failed: {e}"));
        match self.get_at(&p, &at, name).await.map_err(fail)? {
            None => {
                info!("no instance backs the machine; nothing to delete");
                return Ok(DeleteMachineResponse::default());
            }
            Some(i) if !belongs(&p.spec, &i) => {
                // The class's tags no longer match (they changed, or the class
                // is another's): decide by the machine's identity. The VM is
                // this machine's when it carries this Machine's UID, or no UID
                // while the providerID names it (the Go provider's VM, or one
                // of ours from before identity labels); never when it carries
                // another Machine's UID.
                let carried = mcm_driver::adoption::Carried {
                    owner: mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Label, |k| {
                        i.labels.get(k).map(String::as_str)
                    }),
                    uid: machine_uid_of(&i).map(str::to_string),
                    cluster_tags: at.from_provider_id,
                };
                let has_identity = carried.owner.is_some() || carried.uid.is_some();
                match mcm_driver::adoption::decide(&req.machine, name, &carried) {
                    Ok(why) => {
                        info!(reason = why.as_str(), "the instance lacks the class's tags but is this machine's; deleting it");
                    }
                    Err(e) if has_identity => {
                        return Err(Status::new(
                            Code::FailedPrecondition,
                            format!(
                                "{ctx} failed: instance {} lacks the class's cluster and role tags and is not this machine's: {}",
                                provider_id(project, zone, name),
                                e.message
                            ),
                        ));
                    }
                    Err(_) => {
                        info!("an instance of this name exists without the class's tags or this machine's identity; not this machine's, nothing to delete");
                        return Ok(DeleteMachineResponse::default());
                    }
                }
            }
            Some(_) => {}
        }
        match p.compute.delete(project, zone, name).await.map_err(fail)? {
            None => info!("the instance was gone already"),
            Some(op) => {
                p.compute
                    .wait("instances.delete", project, zone, op)
                    .await
                    .map_err(fail)?;
                info!("VM deleted");
            }
        }
        Ok(DeleteMachineResponse {
            last_known_state: format!("Deleted {}", provider_id(project, zone, name)),
        })
    }

    async fn list(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let ctx = "List machines";
        let p = self
            .prepare(ctx, &req.machine_class, &req.secret, Check::ZoneOnly)
            .await?;
        let mut out = ListMachinesResponse::default();
        let (Some(_), Some(_)) = p.spec.membership_tags() else {
            debug!("the class has no cluster or role tag; listing nothing");
            return Ok(out);
        };
        let all = p
            .compute
            .list(&p.project, &p.spec.zone)
            .await
            .map_err(|e| Status::internal(format!("{ctx} failed: {e}")))?;
        for i in all.iter().filter(|i| belongs(&p.spec, i)) {
            if let Some(n) = &i.name {
                let pid = provider_id(&p.project, &p.spec.zone, n);
                // The instance's own link (or ID) names it; its labels carry
                // the identity recorded at creation.
                let key = i
                    .self_link
                    .clone()
                    .filter(|l| !l.is_empty())
                    .or_else(|| i.id.map(|id| format!("gce-instance-id:{id}")))
                    .unwrap_or_else(|| pid.clone());
                let owner = mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Label, |k| {
                    i.labels.get(k).map(String::as_str)
                });
                out.insert(pid, n.clone(), key, owner);
            }
        }
        debug!(machines = out.machine_list.len(), "listed");
        Ok(out)
    }
}

/// Whether an instance carries the spec's cluster and role tags (as the
/// reference's list does: the instance's last tag with each marker must be
/// the spec's).
fn belongs(spec: &GcpProviderSpec, i: &Instance) -> bool {
    let (Some(c), Some(r)) = spec.membership_tags() else {
        return false;
    };
    let tags = i
        .tags
        .as_ref()
        .map(|t| t.items.as_slice())
        .unwrap_or_default();
    membership(tags.iter().map(String::as_str)) == (Some(c), Some(r))
}

/// The addresses of an instance: internal IPs, external NAT IPs, the hostname.
fn addresses(i: &Instance) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    let mut add = |type_: &str, a: &str| {
        let addr = NodeAddress {
            type_: type_.into(),
            address: a.into(),
        };
        if !a.is_empty() && !out.contains(&addr) {
            out.push(addr);
        }
    };
    for n in &i.network_interfaces {
        if let Some(ip) = &n.network_ip {
            add("InternalIP", ip);
        }
        for ac in &n.access_configs {
            if let Some(ip) = &ac.nat_ip {
                add("ExternalIP", ip);
            }
        }
    }
    if let Some(h) = &i.hostname {
        add("Hostname", h);
    }
    out
}

pub(crate) fn machine_name(m: &Machine) -> Result<&str, Status> {
    m.metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Status::invalid_argument("the machine has no name"))
}

pub(crate) fn span(op: &'static str, req: &mcm_driver::MachineRequest) -> tracing::Span {
    info_span!(
        "gcp",
        op,
        machine = req.machine.metadata.name.as_deref().unwrap_or_default(),
        class = req
            .machine_class
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
    )
}

#[async_trait]
impl Driver for GcpDriver {
    fn cloud_api(&self) -> Option<mcm_driver::cloud_api::CloudApi> {
        Some(self.cloud_api.clone())
    }

    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> mcm_driver::InPlaceChanges {
        crate::update::in_place_changes(last_applied, current)
    }

    async fn update_machine(
        &self,
        req: &mcm_driver::UpdateMachineRequest,
    ) -> DriverResult<mcm_driver::UpdateMachineResponse> {
        let span = info_span!(
            "gcp",
            op = "UpdateMachine",
            machine = req.machine.metadata.name.as_deref().unwrap_or_default(),
            class = req
                .machine_class
                .metadata
                .name
                .as_deref()
                .unwrap_or_default()
        );
        self.update(req).instrument(span).await
    }

    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        self.create(req)
            .instrument(span("CreateMachine", req))
            .await
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        self.delete(req)
            .instrument(span("DeleteMachine", req))
            .await
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.status(req)
            .instrument(span("GetMachineStatus", req))
            .await
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let class = req
            .machine_class
            .metadata
            .name
            .as_deref()
            .unwrap_or_default();
        self.list(req)
            .instrument(info_span!("gcp", op = "ListMachines", class))
            .await
    }

    async fn initialize_machine(
        &self,
        _req: &mcm_driver::InitializeMachineRequest,
    ) -> DriverResult<mcm_driver::InitializeMachineResponse> {
        Err(Status::unimplemented(
            "GCP Provider does not yet implement InitializeMachine",
        ))
    }

    /// Keys read under another spelling than their canonical one, or unknown.
    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        provider_spec::warnings::<GcpProviderSpec>(provider_spec)
    }

    /// What CreateMachine would refuse, and the decoder's warnings.
    fn check_class(&self, class: &MachineClass, secret: &Secret) -> mcm_driver::ClassCheck {
        crate::validation::check_class(class, secret)
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        let volume_ids = req
            .pv_specs
            .iter()
            .filter_map(|s| {
                if let Some(pd) = &s.gce_persistent_disk {
                    return Some(pd.pd_name.clone());
                }
                s.csi
                    .as_ref()
                    .filter(|c| c.driver == GCE_PD_CSI_DRIVER && !c.volume_handle.is_empty())
                    .map(|c| c.volume_handle.clone())
            })
            .collect();
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}

#[cfg(test)]
mod location_tests {
    use super::*;

    #[test]
    fn a_provider_id_names_the_project_and_zone_of_its_vm() {
        assert_eq!(
            parse_provider_id("gce:///proj/europe-west1-b/m-1"),
            Some(("proj", "europe-west1-b", "m-1"))
        );
        assert_eq!(
            parse_provider_id(&provider_id("p", "z", "n")),
            Some(("p", "z", "n"))
        );
        for bad in [
            "",
            "gce:///p/z",
            "gce:////z/n",
            "aws:///r/i-1",
            "gce:///p/z/n/x",
        ] {
            assert_eq!(parse_provider_id(bad), None, "{bad}");
        }
    }
}
