//! The server: serves any [`Driver`] over `mcm.driver.v1`.
//!
//! On a Unix socket (the default transport) the socket's directory is
//! created (mode 0700) when missing, a stale socket file is replaced, and
//! the socket gets mode 0600 (ServeOptions::socket_mode) before the first
//! connection is accepted. Over TCP the server speaks TLS and requires a
//! client certificate ([`ServerTls`]); plain TCP is refused at start-up
//! unless the address is a loopback one. Calls are logged with the machine
//! and namespace, never with the secret.

use crate::endpoint::Endpoint;
use crate::pb::driver_server::{Driver as PbDriver, DriverServer};
use crate::tls::ServerTls;
use crate::{pb, wire, PROTOCOL_VERSION};
use mcm_driver::{Driver, MachineRequest, Status};
use std::future::Future;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::sync::Arc;
use tonic::{Request, Response};
use tracing::{debug, info, warn};

/// What a server says about itself in `Info`.
#[derive(Clone, Debug, Default)]
pub struct ServerInfo {
    /// The driver's name.
    pub name: String,
    /// The driver's version.
    pub version: String,
    /// The MachineClass `provider` values it serves.
    pub providers: Vec<String>,
    /// How the controller derives the budget scope (see the proto).
    pub scope_provider_spec_fields: Vec<String>,
    /// Secret keys whose values (hashed by the controller) are part of the scope.
    pub scope_secret_keys: Vec<String>,
    /// The optional RPCs implemented; `None`: all of them.
    pub operations: Option<Vec<String>>,
}

/// The optional RPCs of the protocol (beyond the five every driver has).
pub const OPTIONAL_OPERATIONS: [&str; 5] = [
    "InitializeMachine",
    "GetVolumeIDs",
    "InPlaceChanges",
    "UpdateMachine",
    "ProviderSpecWarnings",
];

/// How the server listens.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: Endpoint,
    /// The Unix socket's mode (default 0600: only the driver's user).
    pub socket_mode: u32,
    /// TLS for a TCP endpoint (required unless the address is loopback).
    pub tls: Option<ServerTls>,
}

impl ServeOptions {
    /// Listening on `listen` with the default socket mode, without TLS.
    pub fn new(listen: Endpoint) -> Self {
        ServeOptions {
            listen,
            socket_mode: 0o600,
            tls: None,
        }
    }
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket or its directory could not be prepared or bound.
    #[error("cannot listen on {endpoint}: {source}")]
    Listen {
        /// Where.
        endpoint: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The socket path exists and is not a socket (never removed).
    #[error("cannot listen on {0}: the path exists and is not a socket")]
    NotASocket(String),
    /// Plain TCP on an address that is not loopback: every request carries
    /// a Secret, which would cross the network unencrypted.
    #[error("refusing to serve plain TCP on {0}: it is not a loopback address and requests carry Secrets; give --tls-cert, --tls-key and --tls-client-ca (TLS with client certificates), or listen on 127.0.0.1 or a Unix socket")]
    PlainTcpNotLoopback(String),
    /// An `https://` endpoint without TLS settings, or TLS on a Unix socket.
    #[error("cannot listen on {endpoint}: {why}")]
    TlsSettings {
        /// Where.
        endpoint: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The TLS settings were refused (a certificate or key that does not parse or match).
    #[error("TLS settings for {endpoint} refused: {source}")]
    Tls {
        /// Where.
        endpoint: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The gRPC server failed.
    #[error("driver server on {endpoint} failed: {source}")]
    Transport {
        /// Where.
        endpoint: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
}

struct Service {
    driver: Arc<dyn Driver>,
    info: ServerInfo,
}

fn log_result<T>(op: &'static str, m: &MachineRequest, r: &Result<T, Status>) {
    let machine = m.machine.metadata.name.as_deref().unwrap_or_default();
    let namespace = m.machine.metadata.namespace.as_deref().unwrap_or_default();
    match r {
        Ok(_) => debug!(op, machine, namespace, "driver call served"),
        Err(e) => {
            debug!(op, machine, namespace, code = %e.code, error = %e.message, "driver call failed")
        }
    }
}

type GrpcResult<T> = Result<Response<T>, tonic::Status>;

fn answer<T, U>(r: Result<T, Status>, f: impl FnOnce(T) -> U) -> GrpcResult<U> {
    match r {
        Ok(v) => Ok(Response::new(f(v))),
        Err(e) => Err(wire::to_grpc(&e)),
    }
}

fn bad_request(e: wire::DecodeError) -> tonic::Status {
    wire::to_grpc(&Status::from(e))
}

#[tonic::async_trait]
impl PbDriver for Service {
    async fn info(&self, _req: Request<pb::InfoRequest>) -> GrpcResult<pb::InfoResponse> {
        let rate_limits = self
            .driver
            .rate_limits()
            .await
            .into_iter()
            .map(|(op, l)| pb::RateLimit {
                op: wire::cloud_op(op) as i32,
                capacity: l.capacity,
                refill_per_sec: l.refill_per_sec,
            })
            .collect();
        Ok(Response::new(pb::InfoResponse {
            name: self.info.name.clone(),
            version: self.info.version.clone(),
            providers: self.info.providers.clone(),
            protocol_version: PROTOCOL_VERSION.to_string(),
            rate_limits,
            rate_limit_scope: Some(pb::RateLimitScope {
                provider_spec_fields: self.info.scope_provider_spec_fields.clone(),
                secret_keys: self.info.scope_secret_keys.clone(),
            }),
            operations: self
                .info
                .operations
                .clone()
                .unwrap_or_else(|| OPTIONAL_OPERATIONS.iter().map(|s| s.to_string()).collect()),
        }))
    }

    async fn create_machine(
        &self,
        req: Request<pb::MachineRequest>,
    ) -> GrpcResult<pb::CreateMachineResponse> {
        let r = wire::from_machine_request(req.get_ref()).map_err(bad_request)?;
        let out = self.driver.create_machine(&r).await;
        log_result("CreateMachine", &r, &out);
        answer(out, |v| pb::CreateMachineResponse {
            provider_id: v.provider_id,
            node_name: v.node_name,
            last_known_state: v.last_known_state,
            addresses: wire::addresses(&v.addresses),
        })
    }

    async fn initialize_machine(
        &self,
        req: Request<pb::MachineRequest>,
    ) -> GrpcResult<pb::InitializeMachineResponse> {
        let r = wire::from_machine_request(req.get_ref()).map_err(bad_request)?;
        let out = self.driver.initialize_machine(&r).await;
        log_result("InitializeMachine", &r, &out);
        answer(out, |v| pb::InitializeMachineResponse {
            provider_id: v.provider_id,
            node_name: v.node_name,
            addresses: wire::addresses(&v.addresses),
        })
    }

    async fn delete_machine(
        &self,
        req: Request<pb::MachineRequest>,
    ) -> GrpcResult<pb::DeleteMachineResponse> {
        let r = wire::from_machine_request(req.get_ref()).map_err(bad_request)?;
        let out = self.driver.delete_machine(&r).await;
        log_result("DeleteMachine", &r, &out);
        answer(out, |v| pb::DeleteMachineResponse {
            last_known_state: v.last_known_state,
        })
    }

    async fn get_machine_status(
        &self,
        req: Request<pb::MachineRequest>,
    ) -> GrpcResult<pb::GetMachineStatusResponse> {
        let r = wire::from_machine_request(req.get_ref()).map_err(bad_request)?;
        let out = self.driver.get_machine_status(&r).await;
        log_result("GetMachineStatus", &r, &out);
        answer(out, |v| pb::GetMachineStatusResponse {
            provider_id: v.provider_id,
            node_name: v.node_name,
            addresses: wire::addresses(&v.addresses),
        })
    }

    async fn list_machines(
        &self,
        req: Request<pb::ListMachinesRequest>,
    ) -> GrpcResult<pb::ListMachinesResponse> {
        let r = wire::from_list_request(req.get_ref()).map_err(bad_request)?;
        let out = self.driver.list_machines(&r).await;
        if let Err(e) = &out {
            debug!(op = "ListMachines", class = ?r.machine_class.metadata.name, code = %e.code, error = %e.message, "driver call failed");
        }
        answer(out, |v| wire::list_response(&v))
    }

    async fn get_volume_i_ds(
        &self,
        req: Request<pb::GetVolumeIDsRequest>,
    ) -> GrpcResult<pb::GetVolumeIDsResponse> {
        let r = wire::from_volume_request(req.get_ref()).map_err(bad_request)?;
        answer(self.driver.get_volume_ids(&r).await, |v| {
            pb::GetVolumeIDsResponse {
                volume_ids: v.volume_ids,
            }
        })
    }

    async fn in_place_changes(
        &self,
        req: Request<pb::InPlaceChangesRequest>,
    ) -> GrpcResult<pb::InPlaceChangesResponse> {
        let r = req.get_ref();
        let last = wire::from_spec_json(
            &r.last_applied_provider_spec_json,
            "last_applied_provider_spec_json",
        )
        .map_err(bad_request)?;
        let current =
            wire::from_spec_json(&r.current_provider_spec_json, "current_provider_spec_json")
                .map_err(bad_request)?;
        let c = self.driver.in_place_changes(&last, &current);
        Ok(Response::new(pb::InPlaceChangesResponse {
            in_place: c.in_place,
            need_replacement: c.need_replacement,
        }))
    }

    async fn update_machine(
        &self,
        req: Request<pb::UpdateMachineRequest>,
    ) -> GrpcResult<pb::UpdateMachineResponse> {
        let r = wire::from_update_request(req.get_ref()).map_err(bad_request)?;
        let out = self.driver.update_machine(&r).await;
        if let Err(e) = &out {
            debug!(op = "UpdateMachine", machine = ?r.machine.metadata.name, namespace = ?r.machine.metadata.namespace, code = %e.code, error = %e.message, "driver call failed");
        }
        answer(out, |v| pb::UpdateMachineResponse {
            last_known_state: v.last_known_state,
        })
    }

    async fn provider_spec_warnings(
        &self,
        req: Request<pb::ProviderSpecWarningsRequest>,
    ) -> GrpcResult<pb::ProviderSpecWarningsResponse> {
        let spec = wire::from_spec_json(&req.get_ref().provider_spec_json, "provider_spec_json")
            .map_err(bad_request)?;
        Ok(Response::new(pb::ProviderSpecWarningsResponse {
            warnings: self.driver.provider_spec_warnings(&spec),
        }))
    }
}

/// Prepares a Unix socket path: its directory (0700 when created here) and
/// no stale socket in the way. A path that exists and is not a socket is
/// never removed.
fn prepare_socket_path(path: &std::path::Path) -> Result<(), ServeError> {
    let endpoint = format!("unix://{}", path.display());
    let io = |source| ServeError::Listen {
        endpoint: endpoint.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path).map_err(io)?,
        Ok(_) => return Err(ServeError::NotASocket(endpoint)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    Ok(())
}

use std::os::unix::fs::DirBuilderExt;

/// Serves `driver` until the process ends.
pub async fn serve(
    driver: Arc<dyn Driver>,
    info: ServerInfo,
    options: ServeOptions,
) -> Result<(), ServeError> {
    serve_with_shutdown(driver, info, options, std::future::pending()).await
}

/// Serves `driver` until `shutdown` completes (in-flight calls finish first).
pub async fn serve_with_shutdown(
    driver: Arc<dyn Driver>,
    info: ServerInfo,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let endpoint = options.listen.to_string();
    let svc = DriverServer::new(Service {
        driver,
        info: info.clone(),
    });
    let transport = |source| ServeError::Transport {
        endpoint: endpoint.clone(),
        source,
    };
    let listen_err = |source| ServeError::Listen {
        endpoint: endpoint.clone(),
        source,
    };
    match (&options.listen, &options.tls) {
        (Endpoint::Unix(_), Some(_)) => Err(ServeError::TlsSettings {
            endpoint,
            why: "TLS applies to TCP endpoints; a Unix socket is protected by its file mode",
        }),
        (Endpoint::Unix(path), None) => {
            prepare_socket_path(path)?;
            let listener = tokio::net::UnixListener::bind(path).map_err(listen_err)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(options.socket_mode))
                .map_err(listen_err)?;
            info!(endpoint = %endpoint, name = %info.name, providers = ?info.providers, "driver serving");
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let r = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
                .map_err(transport);
            if let Err(e) = std::fs::remove_file(path) {
                warn!(endpoint = %endpoint, error = %e, "could not remove the socket");
            }
            r
        }
        (Endpoint::Tls(_), None) => Err(ServeError::TlsSettings {
            endpoint,
            why: "an https:// endpoint needs --tls-cert, --tls-key and --tls-client-ca",
        }),
        (Endpoint::Tcp(_), None) if !options.listen.is_loopback() => {
            Err(ServeError::PlainTcpNotLoopback(endpoint))
        }
        (Endpoint::Tcp(addr) | Endpoint::Tls(addr), tls) => {
            let mut builder = tonic::transport::Server::builder();
            let mode = match tls {
                Some(tls) => {
                    crate::tls::ensure_crypto_provider();
                    builder = builder.tls_config(tls.tonic_config()).map_err(|source| {
                        ServeError::Tls {
                            endpoint: endpoint.clone(),
                            source,
                        }
                    })?;
                    "TLS, client certificate required"
                }
                None => "plain TCP, loopback only",
            };
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(listen_err)?;
            let bound = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            info!(endpoint = %endpoint, bound = %bound, transport = mode, name = %info.name, providers = ?info.providers, "driver serving");
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            builder
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
                .map_err(transport)
        }
    }
}
