//! The client: a [`Driver`] whose calls go to a driver process over
//! `mcm.driver.v1`.
//!
//! Before its first call the client asks the server's `Info` and checks it:
//! the protocol's major version must be this crate's, and the provider the
//! client was configured for must be one the server serves; otherwise every
//! call is refused with `FailedPrecondition` and a message saying why. The
//! answer is kept until the connection breaks (a restarted driver is asked
//! again). Every call is bounded by [`ClientOptions::call_timeout`]: a hung
//! server gives `DeadlineExceeded`, a dead one `Unavailable`.
//!
//! Transports: a Unix socket; `https://host:port`, TLS with the client's
//! certificate ([`ClientOptions::tls`], required); `tcp://host:port`, plain,
//! refused unless the host is loopback (requests carry Secrets).

use crate::endpoint::Endpoint;
use crate::pb::driver_client::DriverClient;
use crate::tls::ClientTls;
use crate::{pb, wire, PROTOCOL_MAJOR, PROTOCOL_VERSION};
use async_trait::async_trait;
use mcm_api::MachineClass;
use mcm_driver::budget::BucketLimit;
use mcm_driver::{
    changed_fields, CloudOp, Code, CreateMachineRequest, CreateMachineResponse,
    DeleteMachineRequest, DeleteMachineResponse, Driver, DriverResult, GetMachineStatusRequest,
    GetMachineStatusResponse, GetVolumeIdsRequest, GetVolumeIdsResponse, InPlaceChanges,
    InitializeMachineRequest, InitializeMachineResponse, ListMachinesRequest, ListMachinesResponse,
    MachineRequest, Status, UpdateMachineRequest, UpdateMachineResponse,
};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

/// The client's bounds.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The longest a driver call may take (including connecting).
    pub call_timeout: Duration,
    /// The longest the `Info` handshake may take.
    pub info_timeout: Duration,
    /// The longest a connection attempt may take.
    pub connect_timeout: Duration,
    /// TLS for `https://` endpoints (required there, unused elsewhere).
    pub tls: Option<ClientTls>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            call_timeout: Duration::from_secs(120),
            info_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// A client that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint or the TLS settings were refused by the transport.
    #[error("cannot build a driver client for {endpoint}: {source}")]
    Transport {
        /// The endpoint.
        endpoint: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The endpoint is not allowed with these settings.
    #[error("cannot build a driver client for {endpoint}: {why}")]
    Refused {
        /// The endpoint.
        endpoint: String,
        /// Why.
        why: &'static str,
    },
}

/// What the server's `Info` said, checked.
#[derive(Debug)]
pub struct Handshake {
    /// The answer as received.
    pub info: pb::InfoResponse,
    /// The rate limits that are usable.
    pub rate_limits: Vec<(CloudOp, BucketLimit)>,
    operations: BTreeSet<String>,
    scope: pb::RateLimitScope,
}

impl Handshake {
    /// Whether the server implements an optional RPC.
    pub fn implements(&self, op: &str) -> bool {
        self.operations.contains(op)
    }
}

/// A [`Driver`] in another process, reached over gRPC.
pub struct GrpcDriver {
    provider: String,
    endpoint: String,
    client: DriverClient<Channel>,
    options: ClientOptions,
    handshake: RwLock<Option<Arc<Handshake>>>,
}

impl std::fmt::Debug for GrpcDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcDriver")
            .field("provider", &self.provider)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

fn unix_channel(ep: tonic::transport::Endpoint, path: std::path::PathBuf) -> Channel {
    ep.connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
        let path = path.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(path).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    }))
}

impl GrpcDriver {
    /// A client for the driver of `provider` at `endpoint`. Connects lazily:
    /// an absent driver is no error here, its calls answer `Unavailable`.
    /// Must be called within a Tokio runtime.
    pub fn new(
        provider: &str,
        endpoint: &Endpoint,
        options: ClientOptions,
    ) -> Result<GrpcDriver, ClientError> {
        let text = endpoint.to_string();
        let err = |source| ClientError::Transport {
            endpoint: text.clone(),
            source,
        };
        let refused = |why| ClientError::Refused {
            endpoint: text.clone(),
            why,
        };
        let channel = match endpoint {
            Endpoint::Unix(path) => {
                // The URI is not used to connect, only as the :authority.
                let ep = tonic::transport::Endpoint::from_static("http://driver.local")
                    .connect_timeout(options.connect_timeout);
                unix_channel(ep, path.clone())
            }
            Endpoint::Tcp(_) if !endpoint.is_loopback() => {
                return Err(refused(
                    "plain TCP is only for a loopback address (requests carry Secrets); use https:// with --driver-tls-ca, --driver-tls-cert and --driver-tls-key",
                ))
            }
            Endpoint::Tcp(addr) => {
                tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(err)?
                    .connect_timeout(options.connect_timeout)
                    .connect_lazy()
            }
            Endpoint::Tls(addr) => {
                let Some(tls) = &options.tls else {
                    return Err(refused(
                        "an https:// endpoint needs the client's TLS settings (--driver-tls-ca, --driver-tls-cert, --driver-tls-key)",
                    ));
                };
                let host = endpoint.host().unwrap_or_default();
                tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
                    .map_err(err)?
                    .tls_config(tls.tonic_config(host))
                    .map_err(err)?
                    .connect_timeout(options.connect_timeout)
                    .connect_lazy()
            }
        };
        Ok(GrpcDriver {
            provider: provider.to_ascii_lowercase(),
            endpoint: text,
            client: DriverClient::new(channel),
            options,
            handshake: RwLock::new(None),
        })
    }

    /// The endpoint, as given.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn cached(&self) -> Option<Arc<Handshake>> {
        match self.handshake.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn store(&self, h: Option<Arc<Handshake>>) {
        match self.handshake.write() {
            Ok(mut g) => *g = h,
            Err(p) => *p.into_inner() = h,
        }
    }

    fn refused(&self, why: String) -> Status {
        Status::new(
            Code::FailedPrecondition,
            format!(
                "driver at {} refused for provider {}: {why}",
                self.endpoint, self.provider
            ),
        )
    }

    /// Asks the server's `Info` and checks it (see the module's doc). Kept
    /// until the connection breaks.
    pub async fn handshake(&self) -> DriverResult<Arc<Handshake>> {
        if let Some(h) = self.cached() {
            return Ok(h);
        }
        let mut req = tonic::Request::new(pb::InfoRequest {
            client_protocol_version: PROTOCOL_VERSION.to_string(),
        });
        req.set_timeout(self.options.info_timeout);
        let mut client = self.client.clone();
        let info = match tokio::time::timeout(self.options.info_timeout, client.info(req)).await {
            Err(_) => {
                return Err(Status::new(
                    Code::DeadlineExceeded,
                    format!(
                        "driver at {}: Info did not answer within {:?}",
                        self.endpoint, self.options.info_timeout
                    ),
                ))
            }
            Ok(Err(s)) => return Err(wire::from_grpc(&s, &self.endpoint)),
            Ok(Ok(r)) => r.into_inner(),
        };
        let major = info
            .protocol_version
            .split('.')
            .next()
            .and_then(|m| m.trim().parse::<u32>().ok());
        if major != Some(PROTOCOL_MAJOR) {
            return Err(self.refused(format!(
                "it speaks mcm.driver protocol {:?}, this controller speaks {PROTOCOL_VERSION} (the major versions must match)",
                info.protocol_version
            )));
        }
        let providers: Vec<String> = info
            .providers
            .iter()
            .map(|p| p.to_ascii_lowercase())
            .collect();
        if !providers.contains(&self.provider) {
            return Err(self.refused(format!(
                "it ({} {}) serves the providers {:?}, not {}",
                info.name, info.version, info.providers, self.provider
            )));
        }
        let (rate_limits, dropped) = wire::from_rate_limits(&info.rate_limits);
        if !dropped.is_empty() {
            warn!(endpoint = %self.endpoint, provider = %self.provider, ?dropped, "driver declared unusable rate limits, ignored");
        }
        info!(endpoint = %self.endpoint, provider = %self.provider, name = %info.name, version = %info.version,
              protocol = %info.protocol_version, rate_limits = rate_limits.len(), operations = ?info.operations,
              "out-of-process driver ready");
        let h = Arc::new(Handshake {
            rate_limits,
            operations: info.operations.iter().cloned().collect(),
            scope: info.rate_limit_scope.clone().unwrap_or_default(),
            info,
        });
        self.store(Some(h.clone()));
        Ok(h)
    }

    fn check_class(&self, h: &Handshake, class: &MachineClass) -> DriverResult<()> {
        let p = class.provider.to_ascii_lowercase();
        if p.is_empty() || h.info.providers.iter().any(|x| x.eq_ignore_ascii_case(&p)) {
            return Ok(());
        }
        Err(self.refused(format!(
            "MachineClass {} has provider {p}, the driver ({}) serves {:?}",
            class.metadata.name.as_deref().unwrap_or_default(),
            h.info.name,
            h.info.providers
        )))
    }

    /// One call: the handshake, the class check, then the RPC within the
    /// call deadline. A broken connection forgets the handshake.
    async fn call<T, F, Fut>(
        &self,
        op: &'static str,
        class: Option<&MachineClass>,
        f: F,
    ) -> DriverResult<T>
    where
        F: FnOnce(DriverClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let h = self.handshake().await?;
        if let Some(c) = class {
            self.check_class(&h, c)?;
        }
        let deadline = self.options.call_timeout;
        match tokio::time::timeout(deadline, f(self.client.clone(), deadline)).await {
            Err(_) => Err(Status::new(
                Code::DeadlineExceeded,
                format!(
                    "driver at {}: {op} did not answer within {deadline:?}",
                    self.endpoint
                ),
            )),
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => {
                let status = wire::from_grpc(&s, &self.endpoint);
                if s.metadata().get(wire::MACHINE_CODE_KEY).is_none() {
                    // Not the driver's answer: the connection or the server
                    // broke; ask Info again once it is back.
                    self.store(None);
                }
                debug!(op, endpoint = %self.endpoint, code = %status.code, error = %status.message, "driver call failed");
                Err(status)
            }
        }
    }

    fn machine_call(
        &self,
        req: &MachineRequest,
        deadline: Duration,
    ) -> tonic::Request<pb::MachineRequest> {
        let mut r = tonic::Request::new(wire::machine_request(req));
        r.set_timeout(deadline);
        r
    }

    /// Runs a call to completion from synchronous code: only on a
    /// multi-threaded runtime (elsewhere `None`, and the caller falls back
    /// to the contract's conservative default).
    fn block_on<T>(&self, fut: impl Future<Output = DriverResult<T>>) -> Option<T> {
        let handle = tokio::runtime::Handle::try_current().ok()?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        match tokio::task::block_in_place(|| handle.block_on(fut)) {
            Ok(v) => Some(v),
            Err(e) => {
                warn!(endpoint = %self.endpoint, code = %e.code, error = %e.message, "driver call failed, using the conservative default");
                None
            }
        }
    }
}

fn request<T>(msg: T, deadline: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(deadline);
    r
}

#[async_trait]
impl Driver for GrpcDriver {
    async fn create_machine(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let r = self
            .call(
                "CreateMachine",
                Some(&req.machine_class),
                |mut c, d| async move { c.create_machine(self.machine_call(req, d)).await },
            )
            .await?;
        Ok(CreateMachineResponse {
            provider_id: r.provider_id,
            node_name: r.node_name,
            last_known_state: r.last_known_state,
            addresses: wire::from_addresses(&r.addresses),
        })
    }

    async fn initialize_machine(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        if !self.handshake().await?.implements("InitializeMachine") {
            return Err(Status::unimplemented(
                "InitializeMachine is not implemented by this provider",
            ));
        }
        let r = self
            .call(
                "InitializeMachine",
                Some(&req.machine_class),
                |mut c, d| async move { c.initialize_machine(self.machine_call(req, d)).await },
            )
            .await?;
        Ok(InitializeMachineResponse {
            provider_id: r.provider_id,
            node_name: r.node_name,
            addresses: wire::from_addresses(&r.addresses),
        })
    }

    fn in_place_changes(
        &self,
        last_applied: &serde_json::Value,
        current: &serde_json::Value,
    ) -> InPlaceChanges {
        let conservative =
            || InPlaceChanges::all_need_replacement(changed_fields(last_applied, current));
        if self
            .cached()
            .is_some_and(|h| !h.implements("InPlaceChanges"))
        {
            return conservative();
        }
        let msg = pb::InPlaceChangesRequest {
            last_applied_provider_spec_json: wire::spec_json(last_applied),
            current_provider_spec_json: wire::spec_json(current),
        };
        self.block_on(self.call("InPlaceChanges", None, |mut c, d| async move {
            c.in_place_changes(request(msg, d)).await
        }))
        .map(|r| InPlaceChanges {
            in_place: r.in_place,
            need_replacement: r.need_replacement,
        })
        .unwrap_or_else(conservative)
    }

    async fn update_machine(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        if !self.handshake().await?.implements("UpdateMachine") {
            return Err(Status::unimplemented(
                "UpdateMachine is not implemented by this provider",
            ));
        }
        let r = self
            .call(
                "UpdateMachine",
                Some(&req.machine_class),
                |mut c, d| async move {
                    c.update_machine(request(wire::update_request(req), d))
                        .await
                },
            )
            .await?;
        Ok(UpdateMachineResponse {
            last_known_state: r.last_known_state,
        })
    }

    async fn delete_machine(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        let r = self
            .call(
                "DeleteMachine",
                Some(&req.machine_class),
                |mut c, d| async move { c.delete_machine(self.machine_call(req, d)).await },
            )
            .await?;
        Ok(DeleteMachineResponse {
            last_known_state: r.last_known_state,
        })
    }

    async fn get_machine_status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let r = self
            .call(
                "GetMachineStatus",
                Some(&req.machine_class),
                |mut c, d| async move { c.get_machine_status(self.machine_call(req, d)).await },
            )
            .await?;
        Ok(GetMachineStatusResponse {
            provider_id: r.provider_id,
            node_name: r.node_name,
            addresses: wire::from_addresses(&r.addresses),
        })
    }

    async fn rate_limits(&self) -> Vec<(CloudOp, BucketLimit)> {
        match self.handshake().await {
            Ok(h) => h.rate_limits.clone(),
            Err(_) => Vec::new(),
        }
    }

    fn rate_limit_scope(&self, req: &MachineRequest) -> String {
        self.cached()
            .map(|h| wire::scope_key(&h.scope, req))
            .unwrap_or_default()
    }

    async fn list_machines(&self, req: &ListMachinesRequest) -> DriverResult<ListMachinesResponse> {
        let r = self
            .call("ListMachines", Some(&req.machine_class), |mut c, d| async move {
                c.list_machines(request(wire::list_request(req), d)).await
            })
            .await?;
        Ok(wire::from_list_response(r))
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> DriverResult<GetVolumeIdsResponse> {
        if !self.handshake().await?.implements("GetVolumeIDs") {
            return Ok(GetVolumeIdsResponse::default());
        }
        let r = self
            .call("GetVolumeIDs", None, |mut c, d| async move {
                c.get_volume_i_ds(request(wire::volume_request(req), d))
                    .await
            })
            .await?;
        Ok(GetVolumeIdsResponse {
            volume_ids: r.volume_ids,
        })
    }

    fn provider_spec_warnings(&self, provider_spec: &serde_json::Value) -> Vec<String> {
        if self
            .cached()
            .is_some_and(|h| !h.implements("ProviderSpecWarnings"))
        {
            return Vec::new();
        }
        let msg = pb::ProviderSpecWarningsRequest {
            provider_spec_json: wire::spec_json(provider_spec),
        };
        self.block_on(
            self.call("ProviderSpecWarnings", None, |mut c, d| async move {
                c.provider_spec_warnings(request(msg, d)).await
            }),
        )
        .map(|r| r.warnings)
        .unwrap_or_default()
    }
}
