//! [`AlicloudDriver`]: the `Driver` implementation.

use crate::config::{regional_endpoint, ActionClass, AlicloudDriverConfig};
use crate::ecs::{CallCounter, Ecs, Instance, Params};
use crate::errors::EcsError;
use crate::launch::{client_token, run_params, MAX_TOKEN_GENERATIONS};
use crate::spec::{credentials, secret_value, AlicloudProviderSpec, SECRET_USER_DATA};
use async_trait::async_trait;
use base64::Engine;
use k8s_openapi::api::core::v1::{NodeAddress, Secret};
use mcm_api::{Machine, MachineClass};
use mcm_driver::budget::Budget;
use mcm_driver::provider_spec;
use mcm_driver::{
    Code, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, GetVolumeIdsRequest,
    GetVolumeIdsResponse, InPlaceChanges, InitializeMachineRequest, InitializeMachineResponse,
    ListMachinesRequest, ListMachinesResponse, Status, UpdateMachineRequest, UpdateMachineResponse,
};
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use tokio::time::Instant;
use tracing::{info, info_span, warn, Instrument};

/// The Alibaba Cloud disk CSI driver name.
pub const DISK_CSI_DRIVER: &str = "diskplugin.csi.alibabacloud.com";

/// The machine-controller-manager driver for Alibaba Cloud ECS.
pub struct AlicloudDriver {
    config: AlicloudDriverConfig,
    http: reqwest::Client,
    budget: Budget<ActionClass>,
    calls: CallCounter,
    cloud_api: mcm_driver::cloud_api::CloudApi,
}

impl std::fmt::Debug for AlicloudDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlicloudDriver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

struct Prepared {
    spec: AlicloudProviderSpec,
    ecs: Ecs,
}

/// The provider ID of an instance: `<region>.<instance-id>`, as the reference.
pub fn provider_id(region: &str, instance_id: &str) -> String {
    format!("{region}.{instance_id}")
}

/// The region in a provider ID (the text before the first `.`), if it names one.
pub fn region_of(provider_id: &str) -> Option<&str> {
    let (region, id) = provider_id.split_once('.')?;
    (!region.is_empty() && !id.is_empty()).then_some(region)
}

/// The instance ID in a provider ID (the text after the last `.`).
pub fn instance_id_of(provider_id: &str) -> &str {
    provider_id.rsplit('.').next().unwrap_or(provider_id)
}

/// The node name ECS gives an instance: its ID with the first `-` replaced by
/// `z`, plus a trailing `z` (`i-gw8abc` → `izgw8abcz`), as the reference.
pub fn node_name(instance_id: &str) -> String {
    format!("{}z", instance_id.replacen('-', "z", 1))
}

/// What an instance carries of a machine: its identity tags and whether it
/// has the class's cluster tag (and role tag, when the class has one).
fn carried(spec: &AlicloudProviderSpec, i: &Instance) -> mcm_driver::adoption::Carried {
    let tag = |k: &str| {
        i.tags()
            .iter()
            .find(|t| t.tag_key == k)
            .map(|t| t.tag_value.as_str())
    };
    let has = |t: Option<(&str, &str)>| t.is_none_or(|(k, _)| tag(k).is_some());
    mcm_driver::adoption::Carried {
        owner: mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Slash, tag),
        uid: None,
        cluster_tags: spec.cluster_tag().is_some()
            && has(spec.cluster_tag())
            && has(spec.role_tag()),
    }
}

fn machine_name(m: &Machine) -> Result<&str, Status> {
    m.metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Status::invalid_argument("machine has no name"))
}

fn addresses(i: &Instance) -> Vec<NodeAddress> {
    let mut out: Vec<NodeAddress> = i
        .vpc_attributes
        .private_ip_address
        .ip_address
        .iter()
        .map(|a| NodeAddress {
            type_: "InternalIP".into(),
            address: a.clone(),
        })
        .collect();
    let public = i
        .public_ip_address
        .ip_address
        .iter()
        .chain(std::iter::once(&i.eip_address.ip_address));
    out.extend(public.filter(|a| !a.is_empty()).map(|a| NodeAddress {
        type_: "ExternalIP".into(),
        address: a.clone(),
    }));
    out.push(NodeAddress {
        type_: "Hostname".into(),
        address: node_name(&i.instance_id),
    });
    out
}

fn identity(region: &str, i: &Instance) -> GetMachineStatusResponse {
    GetMachineStatusResponse {
        provider_id: provider_id(region, &i.instance_id),
        node_name: node_name(&i.instance_id),
        addresses: addresses(i),
    }
}

impl AlicloudDriver {
    /// A driver with the given configuration; nothing is contacted here.
    pub fn new(config: AlicloudDriverConfig) -> Self {
        let limits = &config.rate_limits;
        let budget = Budget::new(
            limits.enabled,
            ActionClass::ALL.iter().map(|c| (*c, limits.limit(*c))),
        );
        AlicloudDriver {
            http: reqwest::Client::new(),
            budget,
            calls: CallCounter::default(),
            cloud_api: Default::default(),
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AlicloudDriverConfig {
        &self.config
    }

    /// ECS calls made so far, by action (every attempt, retries included).
    pub fn api_calls(&self) -> BTreeMap<String, u64> {
        self.calls.snapshot()
    }

    fn ecs(&self, region: &str, secret: &Secret) -> Ecs {
        let creds = credentials(secret);
        let mut h = DefaultHasher::new();
        creds.access_key_secret.hash(&mut h);
        let scope = format!("{}/{:x}/{region}", creds.access_key_id, h.finish());
        Ecs {
            http: self.http.clone(),
            endpoint: self
                .config
                .endpoint_url
                .clone()
                .unwrap_or_else(|| regional_endpoint(region)),
            region: region.to_string(),
            credentials: creds,
            limiter: self.budget.scope(&scope),
            retry: self.config.retry.clone(),
            calls: self.calls.clone(),
            cloud_api: self.cloud_api.clone(),
        }
    }

    /// Decodes and validates the class and secret.
    fn prepare(
        &self,
        class: &MachineClass,
        secret: &Secret,
        creating: bool,
    ) -> Result<Prepared, Status> {
        // Only creation validates the spec: a class that no longer validates
        // (a newer disk category, more tags than allowed) still lets its
        // machines be found and deleted (docs/design/driver.md, "Decoding").
        let spec = if creating {
            provider_spec::decode::<AlicloudProviderSpec>(class, secret)?
        } else {
            provider_spec::decode_existing::<AlicloudProviderSpec>(class, secret)?
        }
        .value;
        let ecs = self.ecs(&spec.region, secret);
        Ok(Prepared { spec, ecs })
    }

    /// Every instance ECS answers for the machine's name (its name filter
    /// is exact; the check is repeated), whatever its tags.
    async fn named(&self, p: &Prepared, name: &str) -> Result<Vec<Instance>, EcsError> {
        let mut f = Params::new();
        f.set("InstanceName", name);
        Ok(p.ecs
            .describe_instances(&f)
            .await?
            .into_iter()
            .filter(|i| i.instance_name == name)
            .collect())
    }

    /// The machine's instances, found by name as the reference finds them:
    /// those carrying the class's cluster tag or this Machine's identity (so
    /// a class whose cluster tag changed still finds its VMs).
    async fn instances_by_name(
        &self,
        p: &Prepared,
        machine: &Machine,
        name: &str,
    ) -> Result<Vec<Instance>, EcsError> {
        Ok(self
            .named(p, name)
            .await?
            .into_iter()
            .filter(|i| {
                let c = carried(&p.spec, i);
                c.cluster_tags
                    || mcm_driver::adoption::decide(machine, name, &c)
                        == Ok(mcm_driver::adoption::Adopted::Identity)
            })
            .collect())
    }

    /// The instance a create adopts (docs/design/safety.md, "Adoption on a
    /// retried create"): of the machine's name, with this Machine's identity
    /// or, without one, the class's cluster tag (the Go provider's instance).
    /// One with another Machine's identity refuses the create; instances of
    /// the name with neither are someone else's and ignored (ECS names are
    /// not unique).
    async fn adoptable(
        &self,
        p: &Prepared,
        machine: &Machine,
        name: &str,
    ) -> Result<Option<Instance>, Status> {
        let what = format!("looking up the VM of machine {name}");
        let mut refused = None;
        for i in self.named(p, name).await.map_err(|e| e.status(&what))? {
            let c = carried(&p.spec, &i);
            match mcm_driver::adoption::decide(machine, name, &c) {
                Ok(why) => {
                    info!(instance_id = %i.instance_id, reason = why.as_str(), "machine already has a VM; adopting it");
                    return Ok(Some(i));
                }
                Err(e) if c.owner.is_some() => refused = Some(e),
                Err(_) => {}
            }
        }
        refused.map_or(Ok(None), Err)
    }

    /// Polls an instance until DescribeInstances shows it with a status other
    /// than `transient` (or shows it at all, when `transient` is empty).
    async fn settle(
        &self,
        ecs: &Ecs,
        id: &str,
        transient: &[&str],
    ) -> Result<Option<Instance>, EcsError> {
        let deadline = Instant::now() + self.config.settle_timeout;
        loop {
            let found = ecs.instances_by_id(&[id]).await?.into_iter().next();
            let settled = match &found {
                Some(i) => !transient.contains(&i.status.as_str()),
                None => !transient.is_empty(),
            };
            if settled || Instant::now() >= deadline {
                return Ok(found);
            }
            tokio::time::sleep(self.config.settle_poll).await;
        }
    }

    async fn create(&self, req: &CreateMachineRequest) -> DriverResult<CreateMachineResponse> {
        let mut p = self.prepare(&req.machine_class, &req.secret, true)?;
        // The Machine's identity goes onto the instance with the spec's tags
        // (docs/design/safety.md, "VM identity").
        if let Some(owner) = mcm_driver::MachineOwner::of(&req.machine) {
            p.spec.tags.extend(owner.tags(mcm_driver::TagStyle::Slash));
        }
        let name = machine_name(&req.machine)?;
        let uid = req.machine.metadata.uid.as_deref().unwrap_or(name);
        let user_data = secret_value(&req.secret, SECRET_USER_DATA).unwrap_or_default();
        let user_data = base64::engine::general_purpose::STANDARD.encode(user_data);
        let what = format!("creating the VM of machine {name}");
        for generation in 0..MAX_TOKEN_GENERATIONS {
            // A VM of this machine (an earlier attempt whose token is gone, or
            // the Go provider's) is adopted before a token is drawn.
            if let Some(i) = self.adoptable(&p, &req.machine, name).await? {
                return Ok(create_response(&p.spec.region, &i));
            }
            let token = client_token(uid, generation);
            let params = run_params(&p.spec, name, &user_data, &token);
            let ids = p
                .ecs
                .run_instances(&params)
                .await
                .map_err(|e| e.create_status(&what))?;
            let Some(id) = ids.first() else {
                return Err(Status::internal(format!(
                    "{what}: RunInstances answered without an instance ID"
                )));
            };
            // A replayed token answers with the instance of the first call;
            // wait until DescribeInstances shows it (fresh instances appear at once).
            match self
                .settle(&p.ecs, id, &[])
                .await
                .map_err(|e| e.status(&what))?
            {
                Some(i) => {
                    info!(instance_id = %id, status = %i.status, generation, "VM created (or adopted by client token)");
                    return Ok(create_response(&p.spec.region, &i));
                }
                None => warn!(
                    instance_id = %id,
                    generation,
                    "the client token's instance no longer exists; trying the next token"
                ),
            }
        }
        Err(Status::internal(format!(
            "{what}: every client token generation names a deleted instance"
        )))
    }

    async fn status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        let name = machine_name(&req.machine)?;
        let found = self
            .instances_by_name(&p, &req.machine, name)
            .await
            .map_err(|e| e.status(&format!("looking up the VM of machine {name}")))?;
        match found.as_slice() {
            [] => Err(Status::not_found(format!("machine {name} has no VM"))),
            [one] => Ok(identity(&p.spec.region, one)),
            many => Err(Status::new(
                Code::OutOfRange,
                format!(
                    "machine {name} has {} VMs: {}",
                    many.len(),
                    many.iter()
                        .map(|i| i.instance_id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    async fn delete(&self, req: &DeleteMachineRequest) -> DriverResult<DeleteMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        let name = machine_name(&req.machine)?;
        let what = format!("deleting the VM of machine {name}");
        let pid = req.machine.spec.provider_id.as_str();
        // An existing VM is deleted in the region its providerID names
        // (`<region>.<id>`), where it was created, not in the class's current
        // region: there it would look gone (issue 17, finding 3).
        let moved = region_of(pid)
            .filter(|r| *r != p.spec.region)
            .map(|r| self.ecs(r, &req.secret));
        let ecs = moved.as_ref().unwrap_or(&p.ecs);
        let ids: Vec<String> = match Some(pid).filter(|s| !s.is_empty()) {
            Some(pid) => vec![instance_id_of(pid).to_string()],
            None => self
                .instances_by_name(&p, &req.machine, name)
                .await
                .map_err(|e| e.status(&what))?
                .into_iter()
                .map(|i| i.instance_id)
                .collect(),
        };
        for id in ids {
            self.delete_instance(ecs, &id, &what).await?;
        }
        Ok(DeleteMachineResponse::default())
    }

    async fn delete_instance(&self, ecs: &Ecs, id: &str, what: &str) -> Result<(), Status> {
        let settled = self
            .settle(ecs, id, &["Pending", "Starting", "Stopping"])
            .await
            .map_err(|e| e.status(what))?;
        let Some(instance) = settled else {
            info!(instance_id = %id, "VM already gone");
            return Ok(());
        };
        if !matches!(instance.status.as_str(), "Running" | "Stopped") {
            return Err(Status::new(
                Code::Unavailable,
                format!("{what}: instance {id} is {}; retry later", instance.status),
            ));
        }
        match ecs.delete_instance(id).await {
            Ok(()) => {
                info!(instance_id = %id, "VM deleted");
                Ok(())
            }
            Err(e) if e.code() == "InvalidInstanceId.NotFound" => Ok(()),
            Err(e) if e.code().starts_with("IncorrectInstanceStatus") => {
                Err(Status::new(Code::Unavailable, format!("{what}: {e}")))
            }
            Err(e) => Err(e.status(what)),
        }
    }

    async fn list(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        let mut f = Params::new();
        let tags: Vec<(&str, &str)> = p
            .spec
            .cluster_tag()
            .into_iter()
            .chain(p.spec.role_tag())
            .collect();
        f.set_tags(tags);
        let found = p
            .ecs
            .describe_instances(&f)
            .await
            .map_err(|e| e.status("listing the VMs of the class's cluster"))?;
        let mut resp = ListMachinesResponse::default();
        for i in &found {
            // The instance ID names the VM whatever region the class names
            // now; its tags carry the identity.
            let owner = mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Slash, |k| {
                i.tags()
                    .iter()
                    .find(|t| t.tag_key == k)
                    .map(|t| t.tag_value.as_str())
            });
            resp.insert(
                provider_id(&p.spec.region, &i.instance_id),
                i.instance_name.clone(),
                i.instance_id.clone(),
                owner,
            );
        }
        Ok(resp)
    }
}

fn create_response(region: &str, i: &Instance) -> CreateMachineResponse {
    let id = identity(region, i);
    CreateMachineResponse {
        provider_id: id.provider_id,
        node_name: id.node_name,
        last_known_state: String::new(),
        addresses: id.addresses,
    }
}

fn span(op: &'static str, m: &Machine) -> tracing::Span {
    info_span!(
        "alicloud",
        op,
        machine = m.metadata.name.as_deref().unwrap_or_default(),
        namespace = m.metadata.namespace.as_deref().unwrap_or_default()
    )
}

impl AlicloudDriver {
    /// UpdateMachine: the instance's tags follow the class (docs/design/providers/alicloud.md).
    async fn update(&self, req: &UpdateMachineRequest) -> DriverResult<UpdateMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        let name = machine_name(&req.machine)?;
        let changes = crate::update::in_place_changes(
            &req.last_applied_provider_spec,
            &req.machine_class.provider_spec,
        );
        if !changes.need_replacement.is_empty() {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "machine {name}: these providerSpec changes need a new VM, nothing was changed: {}",
                    changes.need_replacement.join(", ")
                ),
            ));
        }
        let last =
            AlicloudProviderSpec::from_json(&req.last_applied_provider_spec).unwrap_or_default();
        let found = self
            .instances_by_name(&p, &req.machine, name)
            .await
            .map_err(|e| e.status(&format!("looking up the VM of machine {name}")))?;
        let instance = match found.as_slice() {
            [] => return Err(Status::not_found(format!("machine {name} has no VM"))),
            [one] => one,
            many => {
                return Err(Status::new(
                    Code::OutOfRange,
                    format!("machine {name} has {} VMs", many.len()),
                ))
            }
        };
        let plan = crate::update::tag_plan(&p.spec, &last, instance);
        let id = instance.instance_id.as_str();
        if !plan.set.is_empty() {
            p.ecs.tag_instance(id, &plan.set).await.map_err(|e| {
                crate::update::update_status(&e, &format!("tagging VM {id} of machine {name}"))
            })?;
            info!(instance_id = id, tags = plan.set.len(), "tags set");
        }
        if !plan.remove.is_empty() {
            p.ecs.untag_instance(id, &plan.remove).await.map_err(|e| {
                crate::update::update_status(&e, &format!("untagging VM {id} of machine {name}"))
            })?;
            info!(instance_id = id, keys = ?plan.remove, "tags removed");
        }
        Ok(UpdateMachineResponse::default())
    }
}

#[async_trait]
impl Driver for AlicloudDriver {
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
        self.update(req)
            .instrument(span("UpdateMachine", &req.machine))
            .await
    }

    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        self.create(req)
            .instrument(span("CreateMachine", &req.machine))
            .await
    }

    async fn initialize_machine(
        &self,
        _req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        Err(Status::unimplemented(
            "Alibaba Cloud Provider does not yet implement InitializeMachine",
        ))
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        self.delete(req)
            .instrument(span("DeleteMachine", &req.machine))
            .await
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        self.status(req)
            .instrument(span("GetMachineStatus", &req.machine))
            .await
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        self.list(req)
            .instrument(info_span!(
                "alicloud",
                op = "ListMachines",
                class = req
                    .machine_class
                    .metadata
                    .name
                    .as_deref()
                    .unwrap_or_default()
            ))
            .await
    }

    /// Keys read under another spelling than their canonical one, or unknown.
    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        provider_spec::warnings::<AlicloudProviderSpec>(provider_spec)
    }

    /// What CreateMachine would refuse, and the decoder's warnings.
    fn check_class(&self, class: &MachineClass, secret: &Secret) -> mcm_driver::ClassCheck {
        provider_spec::check_class::<AlicloudProviderSpec>(class, secret)
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        let mut volume_ids = Vec::new();
        for spec in &req.pv_specs {
            if let Some(csi) = spec.csi.as_ref().filter(|c| c.driver == DISK_CSI_DRIVER) {
                volume_ids.push(csi.volume_handle.clone());
            } else if let Some(id) = spec
                .flex_volume
                .as_ref()
                .and_then(|f| f.options.as_ref())
                .and_then(|o| o.get("volumeId"))
            {
                volume_ids.push(id.clone());
            }
        }
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_and_node_names_follow_the_reference() {
        assert_eq!(
            provider_id("eu-central-1", "i-gw8abc"),
            "eu-central-1.i-gw8abc"
        );
        assert_eq!(instance_id_of("eu-central-1.i-gw8abc"), "i-gw8abc");
        assert_eq!(instance_id_of("i-gw8abc"), "i-gw8abc");
        assert_eq!(region_of("eu-central-1.i-gw8abc"), Some("eu-central-1"));
        assert_eq!(region_of("i-gw8abc"), None);
        assert_eq!(region_of(".i-gw8abc"), None);
        assert_eq!(
            node_name("i-uf6f5trc95ug8t33nt2z"),
            "izuf6f5trc95ug8t33nt2zz"
        );
    }
}
