//! [`LocalDriver`]: the [`mcm_driver::Driver`] of the local cloud, over HTTP.
//!
//! - CreateMachine launches an instance with the Machine's UID as the client
//!   token, so a retried create returns the same instance.
//! - InitializeMachine establishes what the providerSpec wants of the network
//!   (source/destination check, IPv6 addresses and prefixes); GetMachineStatus
//!   answers `Uninitialized` (with the VM's identity) until it has.
//! - UpdateMachine sets the class's tags (removing those the last-applied
//!   spec had and the class has not) and instance type on the running
//!   instance ([`crate::update`] says which changes it takes).
//! - DeleteMachine terminates every instance backing the machine; none is fine.
//! - ListMachines lists the instances carrying the class's cluster tag.
//! - GetVolumeIDs recognises CSI volumes of the driver [`CSI_DRIVER`].
//!
//! Transport failures and HTTP answers without an error document map to
//! `Unavailable`; the server's `{code, message}` errors keep their code.

use crate::spec::LocalProviderSpec;
use crate::wire::{
    self, CreateInstanceRequest, DeleteInstanceResponse, ErrorBody, FindInstancesRequest,
    InitializeInstanceRequest, Instance, InstanceList, UpdateInstanceRequest,
};
use crate::Error;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::NodeAddress;
use mcm_api::{Machine, MachineClass};
use mcm_driver::budget::BucketLimit;
use mcm_driver::provider_spec;
use mcm_driver::{
    CloudOp, Code, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest,
    DeleteMachineResponse, Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse,
    GetVolumeIdsRequest, GetVolumeIdsResponse, InPlaceChanges, InitializeMachineRequest,
    InitializeMachineResponse, ListMachinesRequest, ListMachinesResponse, MachineIdentity,
    MachineOwner, Status, TagStyle, UpdateMachineRequest, UpdateMachineResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;
use tracing::{debug, info, instrument};

/// The CSI driver name whose volumes belong to the local cloud.
pub const CSI_DRIVER: &str = "local.csi.mcm.invalid";
/// The provider name of local MachineClasses (compared case-insensitively; an empty provider is accepted too).
pub const PROVIDER_NAME: &str = "local";
/// The default per-request timeout of [`LocalDriver`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The local cloud's driver.
#[derive(Clone, Debug)]
pub struct LocalDriver {
    base: reqwest::Url,
    http: reqwest::Client,
    /// The cloud's rate limits, read once from its admin API.
    limits: tokio::sync::OnceCell<Vec<(CloudOp, BucketLimit)>>,
    /// Where every request is reported ([`Driver::cloud_api`]).
    cloud_api: mcm_driver::cloud_api::CloudApi,
}

fn url_error(url: &str, message: impl Into<String>) -> Error {
    Error::Url {
        url: url.to_string(),
        message: message.into(),
    }
}

/// An HTTP client for the local cloud (no proxy: the cloud is on loopback).
pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, Error> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .map_err(|e| Error::Request(e.to_string()))
}

/// Parses the base URL of a local cloud (`http://127.0.0.1:7070`).
pub(crate) fn base_url(url: &str) -> Result<reqwest::Url, Error> {
    let mut base = reqwest::Url::parse(url.trim()).map_err(|e| url_error(url, e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(url_error(url, "the scheme must be http or https"));
    }
    if !base.path().ends_with('/') {
        let p = format!("{}/", base.path());
        base.set_path(&p);
    }
    Ok(base)
}

fn status_of(e: ErrorBody) -> Status {
    Status::new(e.code(), e.message)
}

fn transport(what: &str, e: reqwest::Error) -> Status {
    Status::new(Code::Unavailable, format!("local cloud {what}: {e}"))
}

fn identity(inst: &Instance) -> MachineIdentity {
    MachineIdentity {
        provider_id: inst.provider_id.clone(),
        node_name: inst.node_name.clone(),
        addresses: addresses(inst),
    }
}

/// The Node addresses of an instance: its IPv4, its IPv6 addresses, its host name.
pub fn addresses(inst: &Instance) -> Vec<NodeAddress> {
    let mut a = vec![NodeAddress {
        type_: "InternalIP".into(),
        address: inst.private_ip.clone(),
    }];
    a.extend(inst.ipv6_addresses.iter().map(|ip| NodeAddress {
        type_: "InternalIP".into(),
        address: ip.clone(),
    }));
    a.push(NodeAddress {
        type_: "Hostname".into(),
        address: inst.node_name.clone(),
    });
    a
}

/// What differs between an instance's network settings and the spec's wishes; empty = initialized.
pub fn network_differences(inst: &Instance, spec: &LocalProviderSpec) -> Vec<String> {
    let w = spec.wanted_network();
    let mut d = Vec::new();
    if inst.src_dst_check != w.src_dst_check {
        d.push(format!(
            "srcDstCheck is {} (wanted {})",
            inst.src_dst_check, w.src_dst_check
        ));
    }
    if inst.ipv6_addresses.len() != w.ipv6_address_count {
        d.push(format!(
            "{} IPv6 addresses (wanted {})",
            inst.ipv6_addresses.len(),
            w.ipv6_address_count
        ));
    }
    if inst.ipv6_prefixes.len() != w.ipv6_prefix_count {
        d.push(format!(
            "{} IPv6 prefixes (wanted {})",
            inst.ipv6_prefixes.len(),
            w.ipv6_prefix_count
        ));
    }
    d
}

fn machine_name(m: &Machine) -> DriverResult<&str> {
    m.metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Status::invalid_argument("machine.metadata.name: required"))
}

fn machine_uid(m: &Machine) -> Option<&str> {
    m.metadata.uid.as_deref().filter(|u| !u.is_empty())
}

fn machine_provider_id(m: &Machine) -> Option<&str> {
    Some(m.spec.provider_id.as_str()).filter(|p| !p.is_empty())
}

fn class_spec(class: &MachineClass) -> DriverResult<LocalProviderSpec> {
    Ok(provider_spec::decode_class::<LocalProviderSpec>(class)?.value)
}

impl LocalDriver {
    /// A driver for the local cloud at `url` (e.g. `http://127.0.0.1:7070`).
    pub fn new(url: impl AsRef<str>) -> Result<LocalDriver, Error> {
        Self::with_timeout(url, DEFAULT_TIMEOUT)
    }

    /// Like [`LocalDriver::new`] with a per-request timeout.
    pub fn with_timeout(url: impl AsRef<str>, timeout: Duration) -> Result<LocalDriver, Error> {
        Ok(LocalDriver {
            base: base_url(url.as_ref())?,
            http: http_client(timeout)?,
            limits: tokio::sync::OnceCell::new(),
            cloud_api: Default::default(),
        })
    }

    /// The base URL of the cloud.
    pub fn url(&self) -> &str {
        self.base.as_str()
    }

    fn endpoint(&self, path: &str) -> DriverResult<reqwest::Url> {
        self.base
            .join(path)
            .map_err(|e| Status::internal(format!("local cloud URL for {path}: {e}")))
    }

    /// Sends one request (reported to the driver's
    /// [`mcm_driver::cloud_api::CloudApi`] with provider `local` and `what`
    /// as service) and decodes its answer.
    async fn answer<T: DeserializeOwned>(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> DriverResult<T> {
        let started = std::time::Instant::now();
        let r = request.send().await;
        let ok = r.as_ref().is_ok_and(|resp| resp.status().is_success());
        self.cloud_api.record("local", what, started.elapsed(), ok);
        let resp = r.map_err(|e| transport(what, e))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| transport(what, e))?;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|e| {
                Status::internal(format!("local cloud {what}: undecodable answer: {e}"))
            });
        }
        match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(e) => Err(status_of(e)),
            Err(_) => Err(Status::new(
                Code::Unavailable,
                format!(
                    "local cloud {what}: HTTP {status}: {}",
                    String::from_utf8_lossy(&body)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            )),
        }
    }

    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        body: &B,
    ) -> DriverResult<T> {
        let url = self.endpoint(path)?;
        self.answer(what, self.http.post(url).json(body)).await
    }

    async fn find(
        &self,
        machine: &Machine,
        spec: &LocalProviderSpec,
    ) -> DriverResult<Vec<Instance>> {
        let req = FindInstancesRequest {
            instance_id: machine_provider_id(machine)
                .and_then(wire::instance_id_of)
                .map(str::to_string),
            client_token: machine_uid(machine).map(str::to_string),
            machine_name: Some(machine_name(machine)?.to_string()),
            cluster_tag: Some(spec.cluster_tag().to_string()),
        };
        let list: InstanceList = self.post("find", "v1/instances/find", &req).await?;
        // A VM found by name that carries another Machine's identity (the same
        // name in another namespace) is never this machine's (design: safety.md).
        let mine = mcm_driver::identity::MachineOwner::of(machine);
        let style = mcm_driver::identity::TagStyle::Slash;
        Ok(list
            .instances
            .into_iter()
            .filter(|i| {
                let theirs = mcm_driver::identity::MachineOwner::from_tags(style, |k| {
                    i.tags.get(k).map(String::as_str)
                });
                match (&theirs, &mine) {
                    (Some(theirs), Some(mine)) => theirs == mine,
                    _ => true,
                }
            })
            .collect())
    }

    /// The one instance backing a machine: `NotFound` for none, `OutOfRange` for several.
    async fn the_instance(
        &self,
        machine: &Machine,
        spec: &LocalProviderSpec,
    ) -> DriverResult<Instance> {
        let name = machine_name(machine)?;
        let mut found = self.find(machine, spec).await?;
        match found.len() {
            0 => Err(Status::not_found(format!(
                "no local instance backs machine {name}"
            ))),
            1 => Ok(found.remove(0)),
            _ => Err(Status::new(
                Code::OutOfRange,
                format!(
                    "several local instances back machine {name}: {}",
                    found
                        .iter()
                        .map(|i| i.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }
}

#[async_trait]
impl Driver for LocalDriver {
    fn cloud_api(&self) -> Option<mcm_driver::cloud_api::CloudApi> {
        Some(self.cloud_api.clone())
    }

    /// The limits the local cloud enforces (`GET /admin/faults`, read once):
    /// EC2's published buckets by default, none for an unlimited cloud.
    async fn rate_limits(&self) -> Vec<(CloudOp, BucketLimit)> {
        let read = self
            .limits
            .get_or_try_init(|| async {
                let url = self.endpoint("admin/faults")?;
                let tunables: crate::tunables::Tunables = self
                    .http
                    .get(url)
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .map_err(|e| {
                        Status::new(Code::Unavailable, format!("local cloud limits: {e}"))
                    })?
                    .json()
                    .await
                    .map_err(|e| Status::internal(format!("local cloud limits: {e}")))?;
                let ops = [
                    (CloudOp::Create, &tunables.create),
                    (CloudOp::Initialize, &tunables.initialize),
                    (CloudOp::Update, &tunables.update),
                    (CloudOp::Delete, &tunables.delete),
                    (CloudOp::Status, &tunables.status),
                    (CloudOp::List, &tunables.list),
                ];
                Ok::<_, Status>(
                    ops.into_iter()
                        .filter_map(|(op, t)| {
                            let r = t.rate_limit.as_ref()?;
                            Some((op, BucketLimit::new(r.capacity, r.refill_per_second)))
                        })
                        .collect(),
                )
            })
            .await;
        match read {
            Ok(limits) => limits.clone(),
            Err(e) => {
                debug!(error = %e, "local cloud limits unknown; not pacing");
                Vec::new()
            }
        }
    }

    #[instrument(skip_all, fields(machine = req.machine.metadata.name.as_deref().unwrap_or("")))]
    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        // Validate locally first: a bad class never reaches the cloud.
        class_spec(&req.machine_class)?;
        let name = machine_name(&req.machine)?;
        let body = CreateInstanceRequest {
            client_token: machine_uid(&req.machine).unwrap_or_default().to_string(),
            machine_name: name.to_string(),
            provider_spec: req.machine_class.provider_spec.clone(),
            tags: MachineOwner::of(&req.machine)
                .map(|o| o.tags(TagStyle::Slash).into_iter().collect())
                .unwrap_or_default(),
        };
        let inst: Instance = self.post("create", "v1/instances", &body).await?;
        info!(instance = %inst.id, provider_id = %inst.provider_id, "machine created");
        Ok(CreateMachineResponse {
            provider_id: inst.provider_id.clone(),
            node_name: inst.node_name.clone(),
            last_known_state: serde_json::json!({ "instanceId": inst.id }).to_string(),
            addresses: addresses(&inst),
        })
    }

    #[instrument(skip_all, fields(machine = req.machine.metadata.name.as_deref().unwrap_or("")))]
    async fn initialize_machine(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        let spec = class_spec(&req.machine_class)?;
        let id = match machine_provider_id(&req.machine).and_then(wire::instance_id_of) {
            Some(id) => id.to_string(),
            None => self.the_instance(&req.machine, &spec).await?.id,
        };
        let body = InitializeInstanceRequest {
            provider_spec: req.machine_class.provider_spec.clone(),
        };
        let inst: Instance = self
            .post(
                "initialize",
                &format!("v1/instances/{id}/initialize"),
                &body,
            )
            .await?;
        info!(instance = %inst.id, "machine initialized");
        Ok(InitializeMachineResponse {
            provider_id: inst.provider_id.clone(),
            node_name: inst.node_name.clone(),
            addresses: addresses(&inst),
        })
    }

    /// What CreateMachine would refuse about the class (the local cloud
    /// needs no Secret).
    fn check_class(
        &self,
        class: &MachineClass,
        secret: &k8s_openapi::api::core::v1::Secret,
    ) -> mcm_driver::ClassCheck {
        provider_spec::check_class::<LocalProviderSpec>(class, secret)
    }

    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> InPlaceChanges {
        crate::update::in_place_changes(last_applied, current)
    }

    #[instrument(skip_all, fields(machine = req.machine.metadata.name.as_deref().unwrap_or("")))]
    async fn update_machine(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        // A spec that no longer validates is refused before the cloud sees it.
        class_spec(&req.machine_class)?;
        let changes = crate::update::in_place_changes(
            &req.last_applied_provider_spec,
            &req.machine_class.provider_spec,
        );
        if !changes.need_replacement.is_empty() {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "the local cloud cannot change {} on a running instance",
                    changes.need_replacement.join(", ")
                ),
            ));
        }
        let id = match machine_provider_id(&req.machine).and_then(wire::instance_id_of) {
            Some(id) => id.to_string(),
            None => {
                let spec = class_spec(&req.machine_class)?;
                self.the_instance(&req.machine, &spec).await?.id
            }
        };
        let body = UpdateInstanceRequest {
            provider_spec: req.machine_class.provider_spec.clone(),
            removed_tags: crate::update::removed_tags(
                &req.last_applied_provider_spec,
                &req.machine_class.provider_spec,
            ),
        };
        let inst: Instance = self
            .post("update", &format!("v1/instances/{id}/update"), &body)
            .await?;
        info!(instance = %inst.id, instance_type = %inst.instance_type, "machine updated in place");
        Ok(UpdateMachineResponse {
            last_known_state: serde_json::json!({ "instanceId": inst.id }).to_string(),
        })
    }

    #[instrument(skip_all, fields(machine = req.machine.metadata.name.as_deref().unwrap_or("")))]
    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        let spec = class_spec(&req.machine_class)?;
        // With a providerID the instance is known; otherwise (a create whose
        // answer was never recorded) find it by the Machine's UID and name.
        let ids: Vec<String> =
            match machine_provider_id(&req.machine).and_then(wire::instance_id_of) {
                Some(id) => vec![id.to_string()],
                None => self
                    .find(&req.machine, &spec)
                    .await?
                    .into_iter()
                    .map(|i| i.id)
                    .collect(),
            };
        for id in &ids {
            let url = self.endpoint(&format!("v1/instances/{id}"))?;
            let r: DeleteInstanceResponse = self.answer("delete", self.http.delete(url)).await?;
            if r.deleted {
                info!(instance = %id, "instance deleted");
            } else {
                debug!(instance = %id, "instance was already gone");
            }
        }
        if ids.is_empty() {
            debug!("no instance backs the machine: nothing to delete");
        }
        Ok(DeleteMachineResponse {
            last_known_state: serde_json::json!({ "deleted": ids }).to_string(),
        })
    }

    #[instrument(skip_all, fields(machine = req.machine.metadata.name.as_deref().unwrap_or("")))]
    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let spec = class_spec(&req.machine_class)?;
        let inst = self.the_instance(&req.machine, &spec).await?;
        let diff = network_differences(&inst, &spec);
        if !diff.is_empty() {
            debug!(instance = %inst.id, differences = ?diff, "instance not initialized yet");
            return Err(Status::uninitialized(
                format!(
                    "instance {} is not initialized: {}",
                    inst.id,
                    diff.join(", ")
                ),
                identity(&inst),
            ));
        }
        Ok(GetMachineStatusResponse {
            provider_id: inst.provider_id.clone(),
            node_name: inst.node_name.clone(),
            addresses: addresses(&inst),
        })
    }

    #[instrument(skip_all, fields(class = req.machine_class.metadata.name.as_deref().unwrap_or("")))]
    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let spec = class_spec(&req.machine_class)?;
        let mut url = self.endpoint("v1/instances")?;
        url.query_pairs_mut()
            .append_pair("clusterTag", spec.cluster_tag());
        let list: InstanceList = self.answer("list", self.http.get(url)).await?;
        let mut resp = ListMachinesResponse::default();
        for i in list.instances {
            let owner =
                MachineOwner::from_tags(TagStyle::Slash, |k| i.tags.get(k).map(String::as_str));
            resp.insert(i.provider_id, i.machine_name, i.id, owner);
        }
        debug!(count = resp.machine_list.len(), "listed machines");
        Ok(resp)
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        let volume_ids = req
            .pv_specs
            .iter()
            .filter_map(|pv| pv.csi.as_ref())
            .filter(|csi| csi.driver == CSI_DRIVER && !csi.volume_handle.is_empty())
            .map(|csi| csi.volume_handle.clone())
            .collect();
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}
