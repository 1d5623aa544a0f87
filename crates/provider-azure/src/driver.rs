//! [`AzureDriver`]: the Driver contract on the ARM client.

use crate::arm::{ApiCalls, ArmClient, OpClass, COMPUTE_API, DISK_API, NETWORK_API};
use crate::auth::{Cloud, IdentityTokens, ReqwestTransport, TokenSource};
use crate::config::AzureDriverConfig;
use crate::names::{self, DATA_DISK_SUFFIX, NIC_SUFFIX, OS_DISK_SUFFIX};
use crate::secret::{credentials, Credentials};
use crate::spec::AzureProviderSpec;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;
use mcm_api::MachineClass;
use mcm_driver::budget::Budget;
use mcm_driver::provider_spec;
use mcm_driver::{
    CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, GetVolumeIdsRequest,
    GetVolumeIdsResponse, ListMachinesRequest, ListMachinesResponse, Status,
};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use tracing::{info, warn};

/// How many credentials the token cache holds at most.
const TOKEN_CACHE_CAP: usize = 64;

/// The Azure driver. Cheap to share; one instance serves every class and secret.
pub struct AzureDriver {
    pub(crate) config: AzureDriverConfig,
    http: reqwest::Client,
    budget: Budget<OpClass>,
    tokens: Mutex<HashMap<u64, Arc<dyn TokenSource>>>,
    calls: Arc<ApiCalls>,
    cloud_api: mcm_driver::cloud_api::CloudApi,
    pub(crate) creates: Semaphore,
}

impl std::fmt::Debug for AzureDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureDriver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What a machine-scoped call works with.
pub(crate) struct Ctx {
    pub spec: AzureProviderSpec,
    pub creds: Credentials,
    pub arm: ArmClient,
}

fn hash_of(parts: &[&[u8]]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

impl AzureDriver {
    /// A driver with this configuration.
    pub fn new(config: AzureDriverConfig) -> Self {
        let limits = config.rate_limits;
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(20))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        AzureDriver {
            budget: Budget::new(
                limits.enabled,
                OpClass::ALL.iter().map(|c| (*c, limits.limit(*c))),
            ),
            creates: Semaphore::new(config.max_concurrent_creates.max(1)),
            config,
            http,
            tokens: Mutex::new(HashMap::new()),
            calls: Arc::new(ApiCalls::default()),
            cloud_api: Default::default(),
        }
    }

    /// The ARM calls made so far, by method and resource kind.
    pub fn api_calls(&self) -> &ApiCalls {
        &self.calls
    }

    fn token_source(
        &self,
        creds: &Credentials,
        cloud: Cloud,
    ) -> Result<Arc<dyn TokenSource>, Status> {
        if let Some(t) = &self.config.token_source {
            return Ok(t.clone());
        }
        let secret: &[u8] = match &creds.auth {
            crate::secret::Auth::ClientSecret(s) => s.as_bytes(),
            crate::secret::Auth::WorkloadIdentity(p) => p.as_os_str().as_encoded_bytes(),
        };
        let key = hash_of(&[
            creds.tenant_id.as_bytes(),
            creds.client_id.as_bytes(),
            secret,
            format!("{cloud:?}").as_bytes(),
        ]);
        let mut cache = match self.tokens.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(t) = cache.get(&key) {
            return Ok(t.clone());
        }
        let transport = ReqwestTransport::new(self.http.clone(), self.config.endpoint.clone());
        let t: Arc<dyn TokenSource> = Arc::new(
            IdentityTokens::new(creds, cloud, transport)
                .map_err(|e| Status::invalid_argument(e.to_string()))?,
        );
        // Rotated credentials add entries: beyond TOKEN_CACHE_CAP the cache
        // starts afresh (calls in flight keep their token sources).
        if cache.len() >= TOKEN_CACHE_CAP {
            cache.clear();
        }
        cache.insert(key, t.clone());
        Ok(t)
    }

    /// The ARM client for a class's cloud and a secret's subscription.
    fn client(&self, spec: &AzureProviderSpec, creds: &Credentials) -> Result<ArmClient, Status> {
        let cloud = Cloud::from_name(spec.cloud_configuration.as_ref().map(|c| c.name.as_str()));
        let base = self
            .config
            .endpoint
            .clone()
            .unwrap_or_else(|| cloud.resource_manager().to_string());
        let tokens = self.token_source(creds, cloud)?;
        let scope = format!(
            "{}/{:x}",
            creds.subscription_id,
            hash_of(&[creds.client_id.as_bytes()])
        );
        Ok(ArmClient::new(
            self.http.clone(),
            &base,
            &creds.subscription_id,
            tokens,
            self.budget.scope(&scope),
            self.config.arm.clone(),
            self.calls.clone(),
        )
        .with_cloud_api(self.cloud_api.clone()))
    }

    pub(crate) fn context(&self, class: &MachineClass, secret: &Secret) -> Result<Ctx, Status> {
        let spec = provider_spec::decode::<AzureProviderSpec>(class, secret)?.value;
        let creds = credentials(secret);
        let arm = self.client(&spec, &creds)?;
        Ok(Ctx { spec, creds, arm })
    }

    /// The context of a call on existing VMs (DeleteMachine,
    /// GetMachineStatus, ListMachines): the class is decoded but not
    /// validated, so that a class that no longer validates still lets its
    /// machines be found and deleted; only the resource group is required.
    pub(crate) fn existing_context(
        &self,
        class: &MachineClass,
        secret: &Secret,
    ) -> Result<Ctx, Status> {
        let spec = provider_spec::decode_existing::<AzureProviderSpec>(class, secret)?.value;
        if spec.resource_group.trim().is_empty() {
            return Err(Status::invalid_argument(
                "providerSpec.resourceGroup: Required value: resourceGroup is required",
            ));
        }
        let creds = credentials(secret);
        let arm = self.client(&spec, &creds)?;
        Ok(Ctx { spec, creds, arm })
    }
}

/// One resource of the listing: its type, name, location and tags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListedResource {
    /// Its ARM type, e.g. `Microsoft.Compute/virtualMachines`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its own location (empty when the listing did not say).
    pub location: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// The VM a listed resource stands for: a VM by name, a NIC without
/// [`NIC_SUFFIX`], an OS disk without [`OS_DISK_SUFFIX`], a data disk without
/// the suffix of one of the spec's data disks (so that leftovers of a failed
/// create reach DeleteMachine).
fn vm_of<'a>(suffixes: &[String], kind: &str, name: &'a str) -> Option<&'a str> {
    let kind = kind.to_ascii_lowercase();
    let vm = if kind == "microsoft.compute/virtualmachines" {
        Some(name)
    } else if kind == "microsoft.network/networkinterfaces" {
        name.strip_suffix(NIC_SUFFIX)
    } else if kind == "microsoft.compute/disks" {
        if let Some(v) = name.strip_suffix(OS_DISK_SUFFIX) {
            Some(v)
        } else if name.ends_with(DATA_DISK_SUFFIX) {
            suffixes.iter().find_map(|s| name.strip_suffix(s.as_str()))
        } else {
            None
        }
    } else {
        None
    };
    vm.filter(|v| !v.is_empty())
}

fn data_disk_suffixes(spec: &AzureProviderSpec) -> Vec<String> {
    spec.properties
        .storage_profile
        .data_disks
        .iter()
        .map(|d| names::data_disk_suffix(&d.name, d.lun))
        .collect()
}

/// The VM names the listed resources stand for ([`vm_of`]).
pub fn vm_names_of(spec: &AzureProviderSpec, resources: &[(String, String)]) -> BTreeSet<String> {
    let suffixes = data_disk_suffixes(spec);
    resources
        .iter()
        .filter_map(|(kind, name)| vm_of(&suffixes, kind, name))
        .map(str::to_string)
        .collect()
}

/// What a listing knows of one VM: the location its resources are in and
/// the identity they carry (the VM's own first, else its NIC's or disks').
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListedAzureVm {
    /// The VM's (or its leftovers') own location; empty when unknown.
    pub location: String,
    /// The identity recorded at creation.
    pub owner: Option<mcm_driver::MachineOwner>,
}

/// The VMs the listed resources stand for, each with its own location and
/// identity. The providerID of a listed VM is built from ITS location, not
/// the class's (which the user may have edited since: issue 22, finding 3).
pub fn vms_of(
    spec: &AzureProviderSpec,
    resources: &[ListedResource],
) -> BTreeMap<String, ListedAzureVm> {
    let suffixes = data_disk_suffixes(spec);
    let mut out: BTreeMap<String, ListedAzureVm> = BTreeMap::new();
    // The VM's own resource first, so that its location and tags win.
    let is_vm = |r: &ListedResource| {
        r.kind
            .eq_ignore_ascii_case("microsoft.compute/virtualmachines")
    };
    for r in resources
        .iter()
        .filter(|r| is_vm(r))
        .chain(resources.iter().filter(|r| !is_vm(r)))
    {
        let Some(vm) = vm_of(&suffixes, &r.kind, &r.name) else {
            continue;
        };
        let e = out.entry(vm.to_string()).or_default();
        if e.location.is_empty() {
            e.location = r.location.trim().to_string();
        }
        if e.owner.is_none() {
            e.owner = mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Dash, |k| {
                r.tags.get(k).map(String::as_str)
            });
        }
    }
    out
}

/// The reference's one Resource Graph query: VMs, NICs and disks of the
/// resource group whose tag keys hold the cluster and the role key.
pub fn list_query(resource_group: &str, cluster_key: &str, role_key: &str) -> String {
    let q = |s: &str| s.replace('\'', "\\'");
    format!(
        "Resources\n| where type =~ 'microsoft.compute/virtualmachines' or type =~ 'microsoft.network/networkinterfaces' or type =~ 'microsoft.compute/disks'\n| where resourceGroup =~ '{}'\n| extend tagKeys = bag_keys(tags)\n| where tagKeys has '{}' and tagKeys has '{}'\n| project type, name, location, tags",
        q(resource_group),
        q(cluster_key),
        q(role_key)
    )
}

impl AzureDriver {
    async fn list_resources(&self, ctx: &Ctx) -> Result<Vec<ListedResource>, Status> {
        let spec = &ctx.spec;
        let Some((cluster, role)) = spec.membership_tag_keys() else {
            return Ok(Vec::new());
        };
        let rg = &spec.resource_group;
        match ctx
            .arm
            .query_resources(&list_query(rg, cluster, role))
            .await
        {
            Ok(rows) => Ok(rows
                .iter()
                .filter_map(|r| {
                    let t = r.get("type")?.as_str()?;
                    let n = r.get("name")?.as_str()?;
                    let location = r
                        .get("location")
                        .and_then(|l| l.as_str())
                        .unwrap_or_default();
                    let tags = r
                        .get("tags")
                        .and_then(|t| t.as_object())
                        .map(|t| {
                            t.iter()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                                .collect()
                        })
                        .unwrap_or_default();
                    Some(ListedResource {
                        kind: t.to_string(),
                        name: n.to_string(),
                        location: location.to_string(),
                        tags,
                    })
                })
                .collect()),
            Err(e) => {
                warn!(resource_group = %rg, error = %e, "Resource Graph query failed; listing VMs, NICs and disks instead");
                let mut out = Vec::new();
                for (kind, api) in [
                    ("Microsoft.Compute/virtualMachines", COMPUTE_API),
                    ("Microsoft.Network/networkInterfaces", NETWORK_API),
                    ("Microsoft.Compute/disks", DISK_API),
                ] {
                    let items = ctx.arm.list_tagged(rg, kind, api).await.map_err(|e| {
                        Status::internal(format!(
                            "failed to get VM names from VMs, NICs and Disks for resourceGroup :{rg}: error: {e}"
                        ))
                    })?;
                    out.extend(
                        items
                            .into_iter()
                            .filter(|i| i.tags.contains_key(cluster) && i.tags.contains_key(role))
                            .map(|i| ListedResource {
                                kind: kind.to_string(),
                                name: i.name,
                                location: i.location,
                                tags: i.tags,
                            }),
                    );
                }
                Ok(out)
            }
        }
    }
}

#[async_trait]
impl Driver for AzureDriver {
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
        self.update(req).await
    }

    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        self.create(req).await
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        self.delete(req).await
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let ctx = self.existing_context(&req.machine_class, &req.secret)?;
        let rg = &ctx.spec.resource_group;
        let vm = req.machine.metadata.name.clone().unwrap_or_default();
        match ctx.arm.get_vm(rg, &vm).await {
            Ok(Some(_)) => Ok(GetMachineStatusResponse {
                provider_id: names::provider_id(&ctx.spec.location, &vm),
                node_name: vm,
                addresses: Vec::new(),
            }),
            Ok(None) => Err(Status::not_found(format!(
                "VM: [ResourceGroup: {rg}, Name: {vm}] is not found"
            ))),
            Err(e) => {
                let mut s = e.to_status(&format!(
                    "Failed to get VM: [ResourceGroup: {rg}, Name: {vm}]"
                ));
                if s.code == mcm_driver::Code::ResourceExhausted {
                    s.code = mcm_driver::Code::Internal;
                }
                Err(s)
            }
        }
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let ctx = self.existing_context(&req.machine_class, &req.secret)?;
        let resources = self.list_resources(&ctx).await?;
        let rg = &ctx.spec.resource_group;
        let mut resp = ListMachinesResponse::default();
        for (vm, facts) in vms_of(&ctx.spec, &resources) {
            let location = if facts.location.is_empty() {
                ctx.spec.location.as_str()
            } else {
                facts.location.as_str()
            };
            // The VM's ARM ID: what names it whatever the class says now.
            let key = format!(
                "/subscriptions/{}/resourcegroups/{}/providers/microsoft.compute/virtualmachines/{}",
                ctx.creds.subscription_id, rg, vm
            )
            .to_ascii_lowercase();
            resp.insert(names::provider_id(location, &vm), vm, key, facts.owner);
        }
        info!(resource_group = %rg, machines = resp.machine_list.len(), "listed machines");
        Ok(resp)
    }

    /// Keys read under another spelling than their canonical one, or unknown.
    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        provider_spec::warnings::<AzureProviderSpec>(provider_spec)
    }

    /// What CreateMachine would refuse, and the decoder's warnings.
    fn check_class(&self, class: &MachineClass, secret: &Secret) -> mcm_driver::ClassCheck {
        provider_spec::check_class::<AzureProviderSpec>(class, secret)
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        let volume_ids = req
            .pv_specs
            .iter()
            .filter_map(|pv| {
                if let Some(d) = &pv.azure_disk {
                    return Some(d.disk_name.clone());
                }
                pv.csi
                    .as_ref()
                    .filter(|c| {
                        c.driver == names::CSI_DRIVER_NAME && !c.volume_handle.trim().is_empty()
                    })
                    .map(|c| c.volume_handle.clone())
            })
            .collect();
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_cache_stays_bounded_as_credentials_rotate() {
        let d = AzureDriver::new(AzureDriverConfig::default());
        let creds = |secret: String| Credentials {
            client_id: "client".into(),
            tenant_id: "tenant".into(),
            subscription_id: "sub".into(),
            auth: crate::secret::Auth::ClientSecret(secret),
            user_data: Vec::new(),
        };
        let a = d
            .token_source(&creds("s0".into()), Cloud::Public)
            .expect("tokens");
        let b = d
            .token_source(&creds("s0".into()), Cloud::Public)
            .expect("tokens");
        assert!(
            Arc::ptr_eq(&a, &b),
            "the same credentials share a token source"
        );
        for i in 0..(3 * TOKEN_CACHE_CAP) {
            d.token_source(&creds(format!("rotated-{i}")), Cloud::Public)
                .expect("tokens");
            let len = d.tokens.lock().map(|t| t.len()).unwrap_or(usize::MAX);
            assert!(len <= TOKEN_CACHE_CAP, "{len} token sources");
        }
    }
}
