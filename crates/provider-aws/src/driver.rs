//! [`AwsDriver`]: the `Driver` implementation.

use crate::calls::{ApiCallRecorder, ApiCalls};
use crate::config::AwsDriverConfig;
use crate::ec2::{is_live, tag_value, Ec2};
use crate::errors::Ec2Error;
use crate::launch::{run_instances_request, LaunchInput, PLACEMENT_ANNOTATION};
use crate::ratelimit::Limiter;
use crate::spec::{
    aggregate, credentials, is_efa_type, secret_value, validate_secret, validate_spec,
    AwsProviderSpec, Credentials, PROVIDER_NAME, SECRET_USER_DATA,
};
use async_trait::async_trait;
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{BehaviorVersion, Region, SharedHttpClient};
use aws_sdk_ec2::types::Instance;
use base64::Engine;
use k8s_openapi::api::core::v1::{NodeAddress, Secret};
use mcm_api::{Machine, MachineClass};
use mcm_driver::{
    Code, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest, DeleteMachineResponse,
    Driver, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, GetVolumeIdsRequest,
    GetVolumeIdsResponse, InitializeMachineRequest, InitializeMachineResponse, ListMachinesRequest,
    ListMachinesResponse, MachineIdentity, Status,
};
use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{debug, info, info_span, warn, Instrument};

/// How many client-token generations a create tries when the earlier
/// tokens of the machine already belong to terminated instances.
const MAX_TOKEN_GENERATIONS: u32 = 4;

/// The EBS CSI driver name.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// How many credentials (region and identity) the client and limiter caches hold at most.
const CLIENT_CACHE_CAP: usize = 64;

#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    region: String,
    identity: String,
    secret_hash: u64,
}

/// The machine-controller-manager driver for AWS EC2.
pub struct AwsDriver {
    config: AwsDriverConfig,
    http: SharedHttpClient,
    clients: Mutex<HashMap<ClientKey, Arc<Ec2>>>,
    limiters: Mutex<HashMap<(String, String), Arc<Limiter>>>,
    create_permits: Arc<Semaphore>,
    /// One lock per machine being created, so that concurrent creates of the
    /// same machine in this process run one after the other (the second adopts).
    creating: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    calls: ApiCallRecorder,
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
            creating: Mutex::new(HashMap::new()),
            calls: ApiCallRecorder::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AwsDriverConfig {
        &self.config
    }

    /// EC2 calls made by this driver so far, by action.
    pub fn api_calls(&self) -> ApiCalls {
        self.calls.snapshot()
    }

    /// The SDK client the driver uses for a region and secret (e.g. for test
    /// set-up against an emulator). Shares the driver's HTTP client and counters.
    pub fn ec2_client(&self, region: &str, secret: &Secret) -> Result<aws_sdk_ec2::Client, Status> {
        let errs = validate_secret(secret);
        if !errs.is_empty() {
            return Err(Status::invalid_argument(aggregate(&errs)));
        }
        Ok(self.ec2(region, &credentials(secret))?.client().clone())
    }

    fn ec2(&self, region: &str, creds: &Credentials) -> Result<Arc<Ec2>, Status> {
        let (identity, secret_hash) = match creds {
            Credentials::Static {
                access_key_id,
                secret_access_key,
            } => {
                let mut h = DefaultHasher::new();
                secret_access_key.hash(&mut h);
                (access_key_id.clone(), h.finish())
            }
            Credentials::WebIdentity {
                token_file,
                role_arn,
            } => {
                let mut h = DefaultHasher::new();
                token_file.hash(&mut h);
                (role_arn.clone(), h.finish())
            }
        };
        let key = ClientKey {
            region: region.to_string(),
            identity: identity.clone(),
            secret_hash,
        };
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| Status::internal("AWS client cache lock poisoned"))?;
        if let Some(c) = clients.get(&key) {
            return Ok(Arc::clone(c));
        }
        let limiter = {
            let mut limiters = self
                .limiters
                .lock()
                .map_err(|_| Status::internal("AWS limiter cache lock poisoned"))?;
            if limiters.len() >= CLIENT_CACHE_CAP
                && !limiters.contains_key(&(region.to_string(), identity.clone()))
            {
                // Start afresh (clients in use keep their limiters).
                limiters.clear();
            }
            Arc::clone(
                limiters
                    .entry((region.to_string(), identity))
                    .or_insert_with(|| {
                        Arc::new(crate::ratelimit::limiter(&self.config.rate_limits))
                    }),
            )
        };
        let client = self.build_client(region, creds);
        let ec2 = Arc::new(Ec2::new(client, limiter, &self.config));
        // A rotated secret replaces the identity's old client; beyond
        // CLIENT_CACHE_CAP identities the cache starts afresh (calls in flight
        // keep their clients), so that it never grows without bound.
        clients.retain(|k, _| !(k.region == key.region && k.identity == key.identity));
        if clients.len() >= CLIENT_CACHE_CAP {
            clients.clear();
        }
        clients.insert(key, Arc::clone(&ec2));
        Ok(ec2)
    }

    fn build_client(&self, region: &str, creds: &Credentials) -> aws_sdk_ec2::Client {
        let r = &self.config.retry;
        let mut b = aws_sdk_ec2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .http_client(self.http.clone())
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(r.sdk_max_attempts.max(1))
                    .with_initial_backoff(r.sdk_initial_backoff)
                    .with_max_backoff(r.sdk_max_backoff),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(self.config.attempt_timeout)
                    .build(),
            )
            .interceptor(self.calls.clone());
        b = match creds {
            Credentials::Static {
                access_key_id,
                secret_access_key,
            } => b.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                access_key_id,
                secret_access_key,
                None,
                None,
                "mcm-provider-aws-secret",
            )),
            Credentials::WebIdentity {
                token_file,
                role_arn,
            } => {
                let conf = aws_config::provider_config::ProviderConfig::without_region()
                    .with_region(Some(Region::new(region.to_string())))
                    .with_http_client(self.http.clone());
                b.credentials_provider(
                    aws_config::web_identity_token::WebIdentityTokenCredentialsProvider::builder()
                        .static_configuration(aws_config::web_identity_token::StaticConfiguration {
                            web_identity_token_file: token_file.into(),
                            role_arn: role_arn.clone(),
                            session_name: "mcm-provider-aws".to_string(),
                        })
                        .configure(&conf)
                        .build(),
                )
            }
        };
        if let Some(url) = &self.config.endpoint_url {
            b = b.endpoint_url(url);
        }
        if let Some(hook) = &self.config.sdk_config_hook {
            b = hook(b);
        }
        aws_sdk_ec2::Client::from_conf(b.build())
    }

    /// Decodes and validates the class and secret, and finds the EC2 access.
    fn prepare(
        &self,
        class: &MachineClass,
        secret: &Secret,
        check_provider: bool,
    ) -> Result<Prepared, Status> {
        if check_provider && class.provider != PROVIDER_NAME {
            return Err(Status::invalid_argument(format!(
                "requested for Provider '{}', we only support '{PROVIDER_NAME}'",
                class.provider
            )));
        }
        let spec = AwsProviderSpec::from_json(&class.provider_spec).map_err(|e| {
            Status::invalid_argument(format!(
                "providerSpec: cannot decode the AWS providerSpec: {e}"
            ))
        })?;
        let mut errs = validate_spec(&spec);
        errs.extend(validate_secret(secret));
        if !errs.is_empty() {
            return Err(Status::invalid_argument(format!(
                "error while validating ProviderSpec {}",
                aggregate(&errs)
            )));
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

    async fn create(&self, req: &CreateMachineRequest) -> DriverResult<CreateMachineResponse> {
        let key = client_token(&req.machine, 0);
        let lock = {
            let mut m = self
                .creating
                .lock()
                .map_err(|_| Status::internal("create lock table poisoned"))?;
            Arc::clone(m.entry(key.clone()).or_default())
        };
        let result = {
            let _same_machine = lock.lock().await;
            self.create_locked(req).await
        };
        if let Ok(mut m) = self.creating.lock() {
            if m.get(&key).is_some_and(|l| Arc::strong_count(l) <= 2) {
                m.remove(&key);
            }
        }
        result
    }

    async fn create_locked(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, true)?;
        let name = machine_name(&req.machine)?;
        let (cluster, role) = tag_keys(&p.spec)?;
        let user_data = secret_value(&req.secret, SECRET_USER_DATA)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Status::invalid_argument(
                    "secretRef.userData: Required value: userData doesn't exist",
                )
            })?;
        let user_data = base64::engine::general_purpose::STANDARD.encode(user_data);

        let _permit = self
            .create_permits
            .acquire()
            .await
            .map_err(|_| Status::internal("create semaphore closed"))?;

        // A retried create adopts the VM of an earlier attempt (EC2-compatible
        // clouds may ignore ClientToken; AWS also answers by token below).
        let existing = p
            .ec2
            .instances_by_name(cluster, role, name)
            .await
            .map_err(|e| {
                e.lookup_status(&format!("looking for an existing VM of machine {name}"))
            })?;
        match existing.as_slice() {
            [] => {}
            [one] => {
                info!(
                    instance_id = one.instance_id().unwrap_or_default(),
                    "machine already has a VM; adopting it"
                );
                return checked_response(self.create_response(&p.spec, one), name);
            }
            many => return Err(multiple_vms(name, many)),
        }

        let root = p
            .ec2
            .root_device_name(&p.spec.ami)
            .await
            .map_err(|e| e.status(&format!("looking up image {}", p.spec.ami)))?
            .ok_or_else(|| Status::not_found(format!("Image {} not found", p.spec.ami)))?;
        let annotation = req
            .machine
            .spec
            .node_template
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PLACEMENT_ANNOTATION))
            .map(String::as_str);

        let mut launched: Option<Instance> = None;
        for generation in 0..MAX_TOKEN_GENERATIONS {
            let token = client_token(&req.machine, generation);
            let input = LaunchInput {
                machine_name: name,
                root_device_name: &root,
                user_data: user_data.clone(),
                client_token: token.clone(),
                placement_annotation: annotation,
            };
            let request = run_instances_request(p.ec2.client().run_instances(), &p.spec, &input)
                .map_err(Status::invalid_argument)?;
            let out = p
                .ec2
                .call(
                    "RunInstances",
                    crate::ratelimit::ActionClass::RunInstances,
                    || request.clone().send(),
                )
                .await;
            match out {
                Ok(out) => {
                    let Some(instance) = out
                        .instances()
                        .iter()
                        .find(|i| i.instance_id().is_some())
                        .cloned()
                    else {
                        return Err(Status::internal(format!(
                            "RunInstances for machine {name} returned no instance ID"
                        )));
                    };
                    if is_live(&instance) {
                        launched = Some(instance);
                        break;
                    }
                    // The token belongs to an instance that was terminated since:
                    // the machine needs a new VM, under the next token.
                    info!(
                        instance_id = instance.instance_id().unwrap_or_default(),
                        generation,
                        "client token names a terminated instance; trying the next token"
                    );
                }
                Err(e) if e.code() == Some("IdempotentParameterMismatch") => {
                    // Same token, different parameters (the class changed between
                    // retries): adopt the token's instance if it lives, else move on.
                    let same = p.ec2.instances_by_client_token(&token).await.map_err(|e| {
                        e.lookup_status(&format!("looking up client token of machine {name}"))
                    })?;
                    if let Some(i) = same.into_iter().next() {
                        launched = Some(i);
                        break;
                    }
                    info!(
                        generation,
                        "client token used with other parameters; trying the next token"
                    );
                }
                Err(e) => {
                    warn!(
                        error_code = e.code().unwrap_or("-"),
                        aws_request_id = e.request_id().unwrap_or("-"),
                        "RunInstances failed"
                    );
                    return Err(e.status(&format!("creating the VM of machine {name}")));
                }
            }
        }
        let Some(instance) = launched else {
            return Err(Status::internal(format!(
                "creating the VM of machine {name}: every client token names a terminated instance"
            )));
        };
        let id = instance.instance_id().unwrap_or_default().to_string();
        info!(instance_id = %id, "VM launched; waiting until EC2 lists it");

        // Eventual consistency: wait until DescribeInstances knows the instance.
        let started = Instant::now();
        let mut step = 0u32;
        let visible = loop {
            match p.ec2.instance_by_id(&id).await {
                Ok(Some(i)) => break i,
                Ok(None) => debug!(instance_id = %id, "instance not visible yet"),
                Err(e) => {
                    debug!(instance_id = %id, error = %e, "describing the new instance failed")
                }
            }
            if started.elapsed() >= self.config.visibility_timeout {
                return Err(Status::internal(format!(
                    "creation of VM {:?} failed, timed out waiting for eventual consistency. Multiple VMs backing machine obj might spawn, they will be orphan collected",
                    provider_id(&p.spec.region, &id)
                )));
            }
            tokio::time::sleep(self.config.visibility_backoff.delay(step)).await;
            step += 1;
        };
        let resp = checked_response(self.create_response(&p.spec, &visible), name)?;
        info!(instance_id = %id, node = %resp.node_name, "VM created");
        Ok(resp)
    }

    fn create_response(&self, spec: &AwsProviderSpec, i: &Instance) -> CreateMachineResponse {
        // A new VM is made in the class's region.
        let id = identity(spec, &Machine::new("", Default::default()), i);
        CreateMachineResponse {
            provider_id: id.provider_id,
            node_name: id.node_name,
            last_known_state: String::new(),
            addresses: id.addresses,
        }
    }

    /// The VMs backing a machine: by provider ID when it has one (live states
    /// only), else by the `Name` tag and the cluster/role tag keys.
    async fn find(&self, p: &Prepared, machine: &Machine) -> Result<Vec<Instance>, Status> {
        let name = machine_name(machine)?;
        let (cluster, role) = tag_keys(&p.spec)?;
        if !machine.spec.provider_id.is_empty() {
            let id = decode_provider_id(&machine.spec.provider_id)?;
            let ec2 = self.ec2_for_vm(p, &machine.spec.provider_id)?;
            let found = ec2
                .instance_by_id(&id)
                .await
                .map_err(|e| e.lookup_status(&format!("looking up VM {id} of machine {name}")))?;
            return Ok(found.into_iter().filter(is_live).collect());
        }
        p.ec2
            .instances_by_name(cluster, role, name)
            .await
            .map_err(|e| e.lookup_status(&format!("looking up the VM of machine {name}")))
    }

    async fn status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, true)?;
        let name = machine_name(&req.machine)?;
        let found = self.find(&p, &req.machine).await?;
        let instance = match found.as_slice() {
            [] => {
                return Err(Status::not_found(
                    if req.machine.spec.provider_id.is_empty() {
                        format!("AWS plugin is returning no VM instances backing machine {name} (no ProviderID on the machine)")
                    } else {
                        format!("AWS plugin is returning no VM instances backing this machine object ({name})")
                    },
                ))
            }
            [one] => one,
            many => return Err(multiple_vms(name, many)),
        };
        let id = identity(&p.spec, &req.machine, instance);
        let pending = init_plan(&p.spec, instance);
        if !pending.is_empty() {
            return Err(Status::uninitialized(
                format!(
                    "VM {} of machine {name} is not initialized: {}",
                    id.provider_id,
                    describe_plan(&pending)
                ),
                id,
            ));
        }
        Ok(GetMachineStatusResponse {
            provider_id: id.provider_id,
            node_name: id.node_name,
            addresses: id.addresses,
        })
    }

    async fn initialize(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        let name = machine_name(&req.machine)?;
        let found = self.find(&p, &req.machine).await?;
        let instance = match found.as_slice() {
            [] => {
                return Err(Status::new(
                    Code::Uninitialized,
                    format!(
                        "{}",
                        Status::not_found(format!("no VM backs machine {name}"))
                    ),
                ))
            }
            [one] => one,
            many => return Err(multiple_vms(name, many)),
        };
        let mut id = identity(&p.spec, &req.machine, instance);
        let plan = init_plan(&p.spec, instance);
        if plan.is_empty() {
            debug!(provider_id = %id.provider_id, "nothing to initialize");
        }
        let mut last_err: Option<Ec2Error> = None;
        for step in &plan {
            let res = match step {
                InitStep::DisableSourceDestCheck { eni } => p
                    .ec2
                    .disable_source_dest_check(eni)
                    .await
                    .map(|_| Vec::new()),
                InitStep::AssignIpv6Prefixes { eni, count } => {
                    p.ec2.assign_ipv6(eni, None, Some(*count)).await
                }
                InitStep::AssignIpv6Addresses { eni, count } => {
                    p.ec2.assign_ipv6(eni, Some(*count), None).await
                }
            };
            match res {
                Ok(addresses) => {
                    info!(step = %step, "initialized");
                    for a in addresses {
                        let addr = NodeAddress {
                            type_: "InternalIP".into(),
                            address: a,
                        };
                        if !id.addresses.contains(&addr) {
                            id.addresses.push(addr);
                        }
                    }
                }
                Err(e) => {
                    warn!(step = %step, error = %e, "initialization step failed");
                    last_err = Some(e);
                }
            }
        }
        if let Some(e) = last_err {
            return Err(Status::new(
                Code::Uninitialized,
                format!("initializing VM {} of machine {name}: {e}", id.provider_id),
            ));
        }
        Ok(InitializeMachineResponse {
            provider_id: id.provider_id,
            node_name: id.node_name,
            addresses: id.addresses,
        })
    }

    async fn delete(&self, req: &DeleteMachineRequest) -> DriverResult<DeleteMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, true)?;
        let name = machine_name(&req.machine)?;
        let (cluster, role) = tag_keys(&p.spec)?;
        let pid = &req.machine.spec.provider_id;
        let ec2 = if pid.is_empty() {
            p.ec2.clone()
        } else {
            self.ec2_for_vm(&p, pid)?
        };
        let instances: Vec<Instance> = if pid.is_empty() {
            ec2.instances_by_name(cluster, role, name)
                .await
                .map_err(|e| e.lookup_status(&format!("looking up the VM of machine {name}")))?
        } else {
            let id = decode_provider_id(pid)?;
            ec2.instance_by_id(&id)
                .await
                .map_err(|e| e.lookup_status(&format!("looking up VM {id} of machine {name}")))?
                .into_iter()
                .collect()
        };
        let mut retained = Retained::default();
        for i in &instances {
            let id = i.instance_id().unwrap_or_default();
            retained.collect(i);
            if is_live(i) {
                ec2.terminate(id)
                    .await
                    .map_err(|e| e.status(&format!("terminating VM {id} of machine {name}")))?;
                info!(instance_id = id, "VM terminated");
            } else {
                debug!(instance_id = id, "VM already shutting down or terminated");
            }
        }
        if instances.is_empty() {
            debug!("no VM backs the machine; nothing to terminate");
        }
        if !retained.volumes.is_empty() || !retained.enis.is_empty() {
            // deleteOnTermination: false is the user's wish to keep the data:
            // the volumes and interfaces stay, with the tags they were created
            // with (the spec's tags and Name=<machine>), as the reference does.
            info!(
                volumes = ?retained.volumes,
                network_interfaces = ?retained.enis,
                "kept the volumes and network interfaces marked deleteOnTermination: false"
            );
        }
        Ok(DeleteMachineResponse::default())
    }

    async fn list(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, true)?;
        let (cluster, role) = tag_keys(&p.spec)?;
        let instances = p
            .ec2
            .instances_by_tags(cluster, role)
            .await
            .map_err(|e| e.lookup_status("listing VMs"))?;
        let machine_list = instances
            .iter()
            .filter_map(|i| {
                let id = i.instance_id()?;
                Some((
                    provider_id(&p.spec.region, id),
                    tag_value(i, "Name").unwrap_or_default().to_string(),
                ))
            })
            .collect();
        Ok(ListMachinesResponse { machine_list })
    }
}

/// What a terminated instance leaves behind on purpose.
#[derive(Default)]
struct Retained {
    volumes: BTreeSet<String>,
    enis: BTreeSet<String>,
}

impl Retained {
    fn collect(&mut self, i: &Instance) {
        for bd in i.block_device_mappings() {
            if let Some(ebs) = bd.ebs() {
                if ebs.delete_on_termination() == Some(false) {
                    if let Some(v) = ebs.volume_id() {
                        self.volumes.insert(v.to_string());
                    }
                }
            }
        }
        for n in i.network_interfaces() {
            if n.attachment().and_then(|a| a.delete_on_termination()) == Some(false) {
                if let Some(id) = n.network_interface_id() {
                    self.enis.insert(id.to_string());
                }
            }
        }
    }
}

/// One change InitializeMachine makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitStep {
    /// ModifyNetworkInterfaceAttribute(SourceDestCheck=false).
    DisableSourceDestCheck {
        /// The interface.
        eni: String,
    },
    /// AssignIpv6Addresses(Ipv6PrefixCount).
    AssignIpv6Prefixes {
        /// The interface.
        eni: String,
        /// Missing prefixes.
        count: i32,
    },
    /// AssignIpv6Addresses(Ipv6AddressCount).
    AssignIpv6Addresses {
        /// The interface.
        eni: String,
        /// Missing addresses.
        count: i32,
    },
}

impl std::fmt::Display for InitStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitStep::DisableSourceDestCheck { eni } => {
                write!(f, "source/destination check still on for {eni}")
            }
            InitStep::AssignIpv6Prefixes { eni, count } => {
                write!(f, "{count} IPv6 prefix(es) missing on {eni}")
            }
            InitStep::AssignIpv6Addresses { eni, count } => {
                write!(f, "{count} IPv6 address(es) missing on {eni}")
            }
        }
    }
}

fn describe_plan(plan: &[InitStep]) -> String {
    plan.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What InitializeMachine still has to do on an instance: turn the
/// source/destination check off on every non-EFA interface (when the spec
/// says `srcAndDstChecksEnabled: false`), and top up IPv6 prefixes and
/// addresses to the counts of the spec interface with the same device index.
/// Empty = initialized. Never asks to remove anything.
pub fn init_plan(spec: &AwsProviderSpec, instance: &Instance) -> Vec<InitStep> {
    let mut plan = Vec::new();
    let mut enis: Vec<_> = instance.network_interfaces().iter().collect();
    enis.sort_by_key(|n| {
        n.attachment()
            .and_then(|a| a.device_index())
            .unwrap_or(i32::MAX)
    });
    if spec.src_and_dst_checks_enabled == Some(false) {
        for n in &enis {
            if is_efa_type(n.interface_type()) {
                continue;
            }
            if let (Some(id), true) = (
                n.network_interface_id(),
                n.source_dest_check().unwrap_or(true),
            ) {
                plan.push(InitStep::DisableSourceDestCheck {
                    eni: id.to_string(),
                });
            }
        }
    }
    for n in &enis {
        let (Some(id), Some(idx)) = (
            n.network_interface_id(),
            n.attachment().and_then(|a| a.device_index()),
        ) else {
            continue;
        };
        let Some(want) = spec.interface_for_device_index(idx) else {
            continue;
        };
        let have_prefixes = n.ipv6_prefixes().len() as i32;
        if let Some(w) = want.ipv6_prefix_count.filter(|w| *w > have_prefixes) {
            plan.push(InitStep::AssignIpv6Prefixes {
                eni: id.to_string(),
                count: w - have_prefixes,
            });
        }
        let have_addresses = n.ipv6_addresses().len() as i32;
        if let Some(w) = want.ipv6_address_count.filter(|w| *w > have_addresses) {
            plan.push(InitStep::AssignIpv6Addresses {
                eni: id.to_string(),
                count: w - have_addresses,
            });
        }
    }
    plan
}

/// The identity of a machine's instance. Its providerID keeps the region the
/// machine's providerID names (where the VM lives), else the class's.
fn identity(spec: &AwsProviderSpec, machine: &Machine, i: &Instance) -> MachineIdentity {
    let region = provider_id_region(&machine.spec.provider_id).unwrap_or(spec.region.clone());
    MachineIdentity {
        provider_id: provider_id(&region, i.instance_id().unwrap_or_default()),
        node_name: i.private_dns_name().unwrap_or_default().to_string(),
        addresses: addresses(i),
    }
}

/// The Node addresses of an instance.
pub fn addresses(i: &Instance) -> Vec<NodeAddress> {
    let mut out: Vec<NodeAddress> = Vec::new();
    let mut push = |t: &str, a: &str| {
        let addr = NodeAddress {
            type_: t.to_string(),
            address: a.to_string(),
        };
        if !a.is_empty() && !out.contains(&addr) {
            out.push(addr);
        }
    };
    if let Some(ip) = i.private_ip_address() {
        push("InternalIP", ip);
    }
    for n in i.network_interfaces() {
        for a in n.ipv6_addresses() {
            if let Some(ip) = a.ipv6_address() {
                push("InternalIP", ip);
            }
        }
    }
    if let Some(ip) = i.public_ip_address() {
        push("ExternalIP", ip);
    }
    if let Some(dns) = i.private_dns_name() {
        push("InternalDNS", dns);
        push("Hostname", dns);
    }
    out
}

/// `aws:///<region>/<instance-id>`.
pub fn provider_id(region: &str, instance_id: &str) -> String {
    format!("aws:///{region}/{instance_id}")
}

/// The region a provider ID names (`aws:///<region>/<id>`), `None` when it
/// names none (`aws:////<id>`). A zone in its place (`aws:///eu-west-1a/<id>`,
/// the Node's form) gives its region.
pub fn provider_id_region(provider_id: &str) -> Option<String> {
    let rest = provider_id.strip_prefix("aws://")?;
    let mut parts = rest.trim_end_matches('/').rsplit('/');
    parts.next()?;
    let region = parts.next().filter(|r| !r.is_empty())?;
    let bytes = region.as_bytes();
    let zone_letters = bytes
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_lowercase())
        .count();
    let is_zone = zone_letters > 0
        && zone_letters < bytes.len()
        && bytes[bytes.len() - zone_letters - 1].is_ascii_digit();
    Some(if is_zone {
        region[..region.len() - zone_letters].to_string()
    } else {
        region.to_string()
    })
}

/// The instance ID of a provider ID (its last `/`-separated part).
pub fn decode_provider_id(provider_id: &str) -> Result<String, Status> {
    let id = provider_id.rsplit('/').next().unwrap_or_default();
    if !provider_id.starts_with("aws://") || !id.starts_with("i-") || id.len() < 3 {
        return Err(Status::invalid_argument(format!(
            "providerID {provider_id:?} is not of the form aws:///<region>/<instance-id>"
        )));
    }
    Ok(id.to_string())
}

/// The ClientToken of a machine's RunInstances: derived from the Machine UID
/// (the name when there is none), with a generation suffix past the first.
pub fn client_token(machine: &Machine, generation: u32) -> String {
    let base = machine
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
        .or(machine.metadata.name.as_deref())
        .unwrap_or_default();
    let mut token = if base.len() <= 48 && base.is_ascii() {
        format!("mcm-{base}")
    } else {
        let mut h = DefaultHasher::new();
        base.hash(&mut h);
        format!("mcm-h{:016x}", h.finish())
    };
    if generation > 0 {
        token.push_str(&format!("-g{generation}"));
    }
    token
}

/// A create answer needs a node name (the instance's private DNS name).
fn checked_response(
    resp: CreateMachineResponse,
    name: &str,
) -> DriverResult<CreateMachineResponse> {
    if resp.node_name.is_empty() {
        return Err(Status::internal(format!(
            "VM {} of machine {name} has no private DNS name",
            resp.provider_id
        )));
    }
    Ok(resp)
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

/// The EBS volume ID of an in-tree `awsElasticBlockStore` volume ID
/// (`aws://<zone>/vol-x`, `aws:///vol-x` or `vol-x`).
pub fn ebs_volume_id(raw: &str) -> Option<String> {
    let id = if let Some(rest) = raw.strip_prefix("aws://") {
        rest.rsplit('/').next().unwrap_or_default()
    } else if raw.contains("://") {
        return None;
    } else {
        raw
    };
    (id.starts_with("vol-") && !id.contains('/')).then(|| id.to_string())
}

fn volume_ids(req: &GetVolumeIdsRequest) -> Vec<String> {
    let mut out = Vec::new();
    for pv in &req.pv_specs {
        if let Some(csi) = &pv.csi {
            if csi.driver == EBS_CSI_DRIVER && !csi.volume_handle.is_empty() {
                out.push(csi.volume_handle.clone());
            }
        } else if let Some(ebs) = &pv.aws_elastic_block_store {
            match ebs_volume_id(&ebs.volume_id) {
                Some(id) => out.push(id),
                None => {
                    warn!(volume_id = %ebs.volume_id, "cannot read the EBS volume ID; skipping")
                }
            }
        }
    }
    out
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
            volume_ids: volume_ids(req),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{
        InstanceIpv6Address, InstanceIpv6Prefix, InstanceNetworkInterface,
        InstanceNetworkInterfaceAttachment,
    };
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, PersistentVolumeSpec,
    };
    use serde_json::json;

    fn eni(
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

    fn spec(v: serde_json::Value) -> AwsProviderSpec {
        AwsProviderSpec::from_json(&v).expect("spec")
    }

    #[test]
    fn init_plan_covers_src_dst_efa_prefixes_and_addresses() {
        let s = spec(
            json!({"srcAndDstChecksEnabled": false, "networkInterfaces": [
                {"subnetID": "a", "securityGroupIDs": ["g"], "ipv6PrefixCount": 2, "ipv6AddressCount": 1},
                {"subnetID": "b", "securityGroupIDs": ["g"], "interfaceType": "efa"},
                {"subnetID": "c", "securityGroupIDs": ["g"], "ipv6PrefixCount": 1}
            ]}),
        );
        let i = Instance::builder()
            .network_interfaces(eni("eni-0", 0, Some(true), "interface", 0, 1))
            .network_interfaces(eni("eni-1", 1, Some(true), "efa", 0, 0))
            .network_interfaces(eni("eni-2", 2, None, "interface", 0, 3))
            .build();
        assert_eq!(
            init_plan(&s, &i),
            vec![
                InitStep::DisableSourceDestCheck {
                    eni: "eni-0".into()
                },
                InitStep::DisableSourceDestCheck {
                    eni: "eni-2".into()
                },
                InitStep::AssignIpv6Prefixes {
                    eni: "eni-0".into(),
                    count: 1
                },
                InitStep::AssignIpv6Addresses {
                    eni: "eni-0".into(),
                    count: 1
                },
            ],
            "EFA skipped, an absent check counts as on, surplus prefixes are left alone"
        );
        let done = Instance::builder()
            .network_interfaces(eni("eni-0", 0, Some(false), "interface", 1, 2))
            .network_interfaces(eni("eni-1", 1, Some(true), "efa", 0, 0))
            .network_interfaces(eni("eni-2", 2, Some(false), "interface", 0, 1))
            .build();
        assert!(init_plan(&s, &done).is_empty());
        let checks_on =
            spec(json!({"networkInterfaces": [{"subnetID": "a", "securityGroupIDs": ["g"]}]}));
        assert!(init_plan(&checks_on, &i).is_empty());
    }

    #[test]
    fn provider_ids_round_trip() {
        assert_eq!(
            provider_id("eu-west-1", "i-0abc"),
            "aws:///eu-west-1/i-0abc"
        );
        assert_eq!(
            decode_provider_id("aws:///eu-west-1/i-0abc").expect("ok"),
            "i-0abc"
        );
        assert_eq!(
            decode_provider_id("aws:///eu-west-1a/i-0abc").expect("ok"),
            "i-0abc"
        );
        for bad in [
            "",
            "i-0abc",
            "gce:///x/i-1",
            "aws:///eu-west-1/",
            "aws:///eu-west-1/vol-1",
        ] {
            assert_eq!(
                decode_provider_id(bad).expect_err(bad).code,
                Code::InvalidArgument
            );
        }
    }

    #[test]
    fn the_region_of_a_provider_id_is_where_the_vm_lives() {
        let r = |p: &str| provider_id_region(p);
        assert_eq!(r("aws:///eu-west-1/i-0abc").as_deref(), Some("eu-west-1"));
        assert_eq!(r("aws:///us-east-1a/i-0abc").as_deref(), Some("us-east-1"));
        assert_eq!(r("aws:///eu-west-1/i-0abc/").as_deref(), Some("eu-west-1"));
        assert_eq!(r("aws:////i-0abc"), None);
        assert_eq!(r("i-0abc"), None);
        assert_eq!(r("gce:///p/z/n"), None);
    }

    #[test]
    fn client_tokens_come_from_the_uid() {
        let mut m = Machine::new("m1", Default::default());
        m.metadata.uid = Some("0b2c3d4e-aaaa-bbbb-cccc-000000000001".into());
        assert_eq!(
            client_token(&m, 0),
            "mcm-0b2c3d4e-aaaa-bbbb-cccc-000000000001"
        );
        assert_eq!(
            client_token(&m, 2),
            "mcm-0b2c3d4e-aaaa-bbbb-cccc-000000000001-g2"
        );
        m.metadata.uid = Some("x".repeat(100));
        assert!(client_token(&m, 3).len() <= 64);
        m.metadata.uid = None;
        assert_eq!(client_token(&m, 0), "mcm-m1");
    }

    #[test]
    fn volume_ids_from_csi_and_in_tree_specs() {
        let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: handle.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let tree = |id: &str| PersistentVolumeSpec {
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = GetVolumeIdsRequest {
            pv_specs: vec![
                csi("ebs.csi.aws.com", "vol-1"),
                csi("other.csi", "x"),
                csi("ebs.csi.aws.com", ""),
                tree("aws://eu-east-2b/vol-2"),
                tree("aws:///vol-3"),
                tree("vol-4"),
                tree("gce://x/vol-5"),
                tree("aws://zone/disk-6"),
                PersistentVolumeSpec::default(),
            ],
        };
        assert_eq!(volume_ids(&req), vec!["vol-1", "vol-2", "vol-3", "vol-4"]);
    }

    fn static_creds(id: &str, secret: &str) -> Credentials {
        Credentials::Static {
            access_key_id: id.into(),
            secret_access_key: secret.into(),
        }
    }

    #[test]
    fn the_client_cache_keeps_one_client_per_identity_and_stays_bounded() {
        let d = AwsDriver::new(AwsDriverConfig::default());
        let len = |d: &AwsDriver| d.clients.lock().map(|c| c.len()).unwrap_or(usize::MAX);
        let first = d
            .ec2("eu-west-1", &static_creds("AKIA1", "s1"))
            .expect("client");
        let again = d
            .ec2("eu-west-1", &static_creds("AKIA1", "s1"))
            .expect("client");
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same credentials share a client"
        );
        // A rotated secret replaces the identity's client instead of adding one.
        d.ec2("eu-west-1", &static_creds("AKIA1", "s2"))
            .expect("client");
        assert_eq!(len(&d), 1);
        // Ever new identities: the cache never exceeds its cap.
        for i in 0..(3 * CLIENT_CACHE_CAP) {
            d.ec2("eu-west-1", &static_creds(&format!("AKIA-{i}"), "s"))
                .expect("client");
            assert!(len(&d) <= CLIENT_CACHE_CAP);
            let limiters = d.limiters.lock().map(|l| l.len()).unwrap_or(usize::MAX);
            assert!(limiters <= CLIENT_CACHE_CAP, "{limiters} limiters");
        }
    }
}
