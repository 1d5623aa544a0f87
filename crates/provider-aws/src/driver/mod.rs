//! `AwsDriver`: the `Driver` implementation, one file per concern:
//! `clients` (SDK clients and token buckets per account and region),
//! `create`, `initialize`, `status` (look-ups and identities),
//! `delete` and `list` (ListMachines and GetVolumeIDs), `update` (hot update).

mod clients;
mod create;
mod delete;
mod initialize;
mod list;
mod recent;
mod status;
mod update;

pub use create::client_token;
pub use initialize::{init_plan, InitStep};
pub use list::{ebs_volume_id, EBS_CSI_DRIVER};
pub use status::{addresses, decode_provider_id, provider_id, provider_id_region};
pub use update::{in_place_changes, update_plan, Actual, UpdateStep};

use crate::calls::{ApiCallRecorder, ApiCalls};
use crate::config::AwsDriverConfig;
use crate::ec2::Ec2;
use crate::ratelimit::Limiter;
use crate::spec::{credentials, AwsProviderSpec, Credentials};
use async_trait::async_trait;
use aws_sdk_ec2::config::SharedHttpClient;
use aws_sdk_ec2::types::Instance;
use k8s_openapi::api::core::v1::Secret;
use mcm_api::{Machine, MachineClass};
use mcm_driver::budget::BucketLimit;
use mcm_driver::keyed_lock::KeyedLocks;
use mcm_driver::provider_spec::{self, ProviderSpec, SecretUse};
use mcm_driver::{
    CloudOp, Code, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest,
    DeleteMachineResponse, Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse,
    GetVolumeIdsRequest, GetVolumeIdsResponse, InPlaceChanges, InitializeMachineRequest,
    InitializeMachineResponse, ListMachinesRequest, ListMachinesResponse, MachineRequest, Status,
    UpdateMachineRequest, UpdateMachineResponse,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use tracing::{debug, info_span, warn, Instrument};

/// The machine-controller-manager driver for AWS EC2.
pub struct AwsDriver {
    config: AwsDriverConfig,
    http: SharedHttpClient,
    clients: Mutex<HashMap<clients::ClientKey, Arc<Ec2>>>,
    limiters: Mutex<HashMap<(String, String), Arc<Limiter>>>,
    create_permits: Arc<Semaphore>,
    /// One lock per machine being created, so that concurrent creates of the
    /// same machine in this process run one after the other (the second adopts).
    /// An entry lives while a create holds or waits for it, also when the
    /// create's future is dropped mid-call.
    creating: KeyedLocks,
    /// Machines (by [`client_token`] generation 0) whose status probe by
    /// name just found no VM: their create skips its own look-up.
    absent: recent::Recent<()>,
    /// Instances (by ID) a create just described: InitializeMachine plans on them.
    launched: recent::Recent<Instance>,
    calls: ApiCallRecorder,
    /// Where every EC2 call is reported ([`Driver::cloud_api`]).
    cloud_api: mcm_driver::cloud_api::CloudApi,
}

impl std::fmt::Debug for AwsDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsDriver")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A validated request: the decoded spec and the EC2 access for its account and region.
struct Prepared {
    spec: AwsProviderSpec,
    ec2: Arc<Ec2>,
    creds: Credentials,
}

impl AwsDriver {
    /// A driver with the given configuration. Clients are made per credentials
    /// and region on first use; nothing is contacted here.
    pub fn new(config: AwsDriverConfig) -> Self {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        AwsDriver {
            create_permits: Arc::new(Semaphore::new(config.max_concurrent_creates.max(1))),
            config,
            http,
            clients: Mutex::new(HashMap::new()),
            limiters: Mutex::new(HashMap::new()),
            creating: KeyedLocks::new(),
            absent: recent::Recent::new(recent::ABSENT_TTL),
            launched: recent::Recent::new(recent::LAUNCHED_TTL),
            calls: ApiCallRecorder::default(),
            cloud_api: Default::default(),
        }
    }

    /// How many machines have an entry in the create-lock table (creates
    /// running or waiting): 0 when no create is in flight.
    pub fn create_locks_in_use(&self) -> usize {
        self.creating.len()
    }

    /// The configuration.
    pub fn config(&self) -> &AwsDriverConfig {
        &self.config
    }

    /// EC2 calls made by this driver so far, by action.
    pub fn api_calls(&self) -> ApiCalls {
        self.calls.snapshot()
    }

    /// Decodes and validates the class and secret, and finds the EC2 access.
    fn prepare(
        &self,
        class: &MachineClass,
        secret: &Secret,
        check_provider: bool,
    ) -> Result<Prepared, Status> {
        let spec = if check_provider {
            provider_spec::decode::<AwsProviderSpec>(class, secret)?.value
        } else {
            let spec = <AwsProviderSpec as ProviderSpec>::decode(&class.provider_spec)
                .map_err(|e| Status::invalid_argument(AwsProviderSpec::decode_failed(&e)))?
                .value;
            provider_spec::validate(&spec, true, secret, SecretUse::Create)?;
            spec
        };
        let creds = credentials(secret);
        let ec2 = self.ec2(&spec.region, &creds)?;
        Ok(Prepared { spec, ec2, creds })
    }

    /// Decodes the class and checks the secret's credentials for a call on
    /// existing VMs (DeleteMachine, GetMachineStatus, ListMachines): the
    /// spec is not validated, so that a class that no longer validates
    /// (a newer volume type, more tags than allowed) still lets its
    /// machines be found and deleted; only CreateMachine refuses it
    /// (docs/design/driver.md, "Decoding"). The region is the class's or,
    /// when it names none, the one of `provider_id`.
    fn prepare_existing(
        &self,
        class: &MachineClass,
        secret: &Secret,
        provider_id: &str,
    ) -> Result<Prepared, Status> {
        let mut spec = provider_spec::decode_existing::<AwsProviderSpec>(class, secret)?.value;
        if spec.region.is_empty() {
            spec.region = provider_id_region(provider_id).unwrap_or_default();
        }
        if spec.region.is_empty() {
            return Err(Status::invalid_argument(
                "error while validating ProviderSpec providerSpec.region: Required value: Region is required",
            ));
        }
        let creds = credentials(secret);
        let ec2 = self.ec2(&spec.region, &creds)?;
        Ok(Prepared { spec, ec2, creds })
    }

    /// The EC2 access for an existing VM: in the region its providerID names
    /// (`aws:///<region>/<id>`), which is where it was created, not the class's
    /// current region (a class moved to another region must not make its old
    /// VMs look gone: issue 17, finding 3). A providerID without a region
    /// (`aws:////<id>`) uses the class's region.
    fn ec2_for_vm(&self, p: &Prepared, provider_id: &str) -> Result<Arc<Ec2>, Status> {
        match provider_id_region(provider_id) {
            Some(region) if region != p.spec.region => {
                debug!(vm_region = %region, class_region = %p.spec.region,
                    "the VM lives in another region than the class names; using the VM's");
                self.ec2(&region, &p.creds)
            }
            _ => Ok(p.ec2.clone()),
        }
    }
}

fn machine_name(m: &Machine) -> Result<&str, Status> {
    m.metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Status::invalid_argument("machine.metadata.name: Required value"))
}

fn tag_keys(spec: &AwsProviderSpec) -> Result<(&str, &str), Status> {
    match (spec.cluster_tag_key(), spec.role_tag_key()) {
        (Some(c), Some(r)) => Ok((c, r)),
        _ => Err(Status::invalid_argument(
            "providerSpec.tags: cluster and role tags are required",
        )),
    }
}

fn multiple_vms(name: &str, many: &[Instance]) -> Status {
    let ids: Vec<&str> = many.iter().filter_map(|i| i.instance_id()).collect();
    Status::new(
        Code::OutOfRange,
        format!(
            "AWS plugin is returning multiple VM instances backing machine {name}. IDs for all backing VMs - {ids:?}"
        ),
    )
}

fn span(op: &'static str, machine: Option<&Machine>, class: &MachineClass) -> tracing::Span {
    let name = machine
        .and_then(|m| m.metadata.name.as_deref())
        .unwrap_or("");
    let provider_id = machine.map(|m| m.spec.provider_id.as_str()).unwrap_or("");
    info_span!(
        "aws",
        op,
        machine = name,
        provider_id,
        class = class.metadata.name.as_deref().unwrap_or("")
    )
}

fn log_result<T>(op: &str, r: &DriverResult<T>) {
    match r {
        Ok(_) => debug!(op, "done"),
        Err(s) if matches!(s.code, Code::NotFound | Code::Uninitialized) => {
            debug!(op, code = %s.code, message = %s.message, "answered")
        }
        Err(s) => warn!(op, code = %s.code, message = %s.message, "failed"),
    }
}

#[async_trait]
impl Driver for AwsDriver {
    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let span = span("create_machine", Some(&req.machine), &req.machine_class);
        let r = self.create(req).instrument(span.clone()).await;
        span.in_scope(|| log_result("create_machine", &r));
        r
    }

    async fn initialize_machine(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        let span = span("initialize_machine", Some(&req.machine), &req.machine_class);
        let r = self.initialize(req).instrument(span.clone()).await;
        span.in_scope(|| log_result("initialize_machine", &r));
        r
    }

    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> InPlaceChanges {
        update::in_place_changes(last_applied, current)
    }

    async fn update_machine(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        let span = span("update_machine", Some(&req.machine), &req.machine_class);
        let r = self.update(req).instrument(span.clone()).await;
        span.in_scope(|| log_result("update_machine", &r));
        r
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        let span = span("delete_machine", Some(&req.machine), &req.machine_class);
        let r = self.delete(req).instrument(span.clone()).await;
        span.in_scope(|| log_result("delete_machine", &r));
        r
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let span = span("get_machine_status", Some(&req.machine), &req.machine_class);
        let r = self.status(req).instrument(span.clone()).await;
        span.in_scope(|| log_result("get_machine_status", &r));
        r
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let span = span("list_machines", None, &req.machine_class);
        let r = self.list(req).instrument(span.clone()).await;
        span.in_scope(|| log_result("list_machines", &r));
        r
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        Ok(GetVolumeIdsResponse {
            volume_ids: list::volume_ids(req),
        })
    }

    /// EC2's buckets for the calls that map one to one onto a machine's
    /// operation, so that the controller queues machines at EC2's rate
    /// (the driver keeps its own buckets for every call, describes included).
    async fn rate_limits(&self) -> Vec<(CloudOp, BucketLimit)> {
        let l = &self.config.rate_limits;
        if !l.enabled {
            return Vec::new();
        }
        vec![
            (CloudOp::Create, l.run_instances),
            (CloudOp::Initialize, l.mutating),
            (CloudOp::Update, l.mutating),
            (CloudOp::Delete, l.terminate_instances),
        ]
    }

    /// EC2 throttles per account and region: the class's region and the
    /// credentials' identity (an access key ID or role ARN, never a secret).
    fn cloud_api(&self) -> Option<mcm_driver::cloud_api::CloudApi> {
        Some(self.cloud_api.clone())
    }

    fn rate_limit_scope(&self, req: &MachineRequest) -> String {
        let region = req
            .machine_class
            .provider_spec
            .get("region")
            .and_then(|r| r.as_str())
            .unwrap_or_default();
        let identity = match credentials(&req.secret) {
            Credentials::Static { access_key_id, .. } => access_key_id,
            Credentials::WebIdentity { role_arn, .. } => role_arn,
        };
        format!("{region}/{identity}")
    }

    /// Keys that only Go's case-insensitive matching accepts, each naming
    /// the canonical key (see [`crate::spec::canonical_keys`]).
    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        crate::spec::canonical_keys(provider_spec).1
    }

    /// What CreateMachine would refuse, and the decoder's warnings.
    fn check_class(&self, class: &MachineClass, secret: &Secret) -> mcm_driver::ClassCheck {
        provider_spec::check_class::<AwsProviderSpec>(class, secret)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::spec::AwsProviderSpec;
    use aws_sdk_ec2::types::{
        InstanceIpv6Address, InstanceIpv6Prefix, InstanceNetworkInterface,
        InstanceNetworkInterfaceAttachment,
    };

    pub(crate) fn eni(
        id: &str,
        idx: i32,
        sdc: Option<bool>,
        kind: &str,
        v6: usize,
        prefixes: usize,
    ) -> InstanceNetworkInterface {
        let mut b = InstanceNetworkInterface::builder()
            .network_interface_id(id)
            .interface_type(kind)
            .attachment(
                InstanceNetworkInterfaceAttachment::builder()
                    .device_index(idx)
                    .build(),
            )
            .set_source_dest_check(sdc);
        for n in 0..v6 {
            b = b.ipv6_addresses(
                InstanceIpv6Address::builder()
                    .ipv6_address(format!("2001:db8::{n}"))
                    .build(),
            );
        }
        for n in 0..prefixes {
            b = b.ipv6_prefixes(
                InstanceIpv6Prefix::builder()
                    .ipv6_prefix(format!("2001:db8:{n}::/80"))
                    .build(),
            );
        }
        b.build()
    }

    pub(crate) fn spec(v: serde_json::Value) -> AwsProviderSpec {
        AwsProviderSpec::from_json(&v).expect("spec")
    }
}

#[cfg(test)]
mod pacing_tests {
    use super::*;
    use crate::config::RateLimits;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn request() -> MachineRequest {
        MachineRequest {
            machine: serde_json::from_value(serde_json::json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
                "metadata": {"name": "m"}, "spec": {"class": {"name": "c"}}
            }))
            .unwrap(),
            machine_class: serde_json::from_value(serde_json::json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                "metadata": {"name": "c"}, "providerSpec": {"region": "eu-west-1"}
            }))
            .unwrap(),
            secret: Secret {
                data: Some(BTreeMap::from([
                    (
                        "providerAccessKeyId".to_string(),
                        ByteString(b"AKIDEXAMPLE".to_vec()),
                    ),
                    (
                        "providerSecretAccessKey".to_string(),
                        ByteString(b"very-secret".to_vec()),
                    ),
                ])),
                ..Default::default()
            },
        }
    }

    #[tokio::test]
    async fn the_controller_paces_creates_and_deletes_at_ec2s_buckets_per_account_and_region() {
        let d = AwsDriver::new(AwsDriverConfig::default());
        let limits = d.rate_limits().await;
        let create = limits.iter().find(|(op, _)| *op == CloudOp::Create);
        assert_eq!(
            create.map(|(_, l)| *l),
            Some(RateLimits::default().run_instances)
        );
        assert!(limits.iter().any(|(op, _)| *op == CloudOp::Delete));
        let scope = d.rate_limit_scope(&request());
        assert_eq!(scope, "eu-west-1/AKIDEXAMPLE");
        assert!(!scope.contains("very-secret"));
    }
}
