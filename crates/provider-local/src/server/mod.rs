//! The local cloud server: an axum HTTP/JSON API over a redb store, with
//! tunable latency, rate limits and faults, an admin API and (optionally)
//! simulated kubelets.
//!
//! Cloud API (what [`crate::LocalDriver`] calls; each counts as one operation):
//!
//! | method and path | operation | answer |
//! |---|---|---|
//! | `POST /v1/instances` `{clientToken, machineName, providerSpec}` | create | the instance (the same one for a repeated `clientToken`) |
//! | `POST /v1/instances/{id}/initialize` `{providerSpec}` | initialize | the instance, its network settings now as the spec wants |
//! | `POST /v1/instances/{id}/update` `{providerSpec, removedTags?}` | update | the instance, its tags and instance type now as the spec wants (hot update) |
//! | `DELETE /v1/instances/{id}` | delete | `{deleted}` (a missing instance is not an error) |
//! | `POST /v1/instances/find` `{instanceId?, clientToken?, machineName?, clusterTag?}` | status | `{instances}` |
//! | `GET /v1/instances?clusterTag=<key>` | list | `{instances}` carrying that tag key |
//!
//! Admin API (not counted):
//!
//! | method and path | what |
//! |---|---|
//! | `GET /admin/faults` | the current [`Tunables`] |
//! | `PUT /admin/faults` | replace them (merged onto the defaults) |
//! | `PATCH /admin/faults` | change some (JSON merge patch onto the current ones) |
//! | `GET /admin/stats`, `DELETE /admin/stats` | counters per operation; reset them |
//! | `GET /admin/instances` | every instance, also those not yet visible |
//! | `POST /admin/instances/{id}/stop`, `.../kill`, `.../start` | operator actions on one instance |
//! | `GET /healthz` | `ok` |
//!
//! Every request must name a loopback Host (or the listen address, or an
//! `--allowed-host`), and `POST`/`PUT`/`PATCH` must send `application/json`:
//! 403 and 415 otherwise (`guard`).
//!
//! Errors are `{code, message}` with a machine code name (`NotFound`,
//! `InvalidArgument`, `ResourceExhausted`, ...) and a matching HTTP status.
//!
//! The module is split by concern: `config` (flags and configuration),
//! `error` (the API's error answers), `state` (the shared state, its store
//! and the per-call gate), `ops` (the cloud operations), `guard` (the Host
//! and Content-Type checks every request passes), `routes` (the HTTP
//! handlers and the router); this file starts and stops the server.

mod config;
mod error;
mod guard;
mod ops;
mod routes;
mod state;

pub use config::{parse_duration, CloudConfig, ServeArgs, DEFAULT_PORT, DEFAULT_ZONE};
pub(crate) use state::Shared;

use crate::kubelet::{self, KubeletConfig};
use crate::store::Store;
use crate::Error;
use routes::router;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::info;

/// A running server. Dropping it stops the server too (without waiting).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    kubelet: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL of the API, e.g. `http://127.0.0.1:7070`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server: no new requests, open ones finish, the kubelets stop,
    /// the store file is closed (and can be opened again) when this returns.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        if let Some(k) = self.kubelet.take() {
            k.abort();
            let _ = k.await;
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            match server.await {
                Ok(r) => r.map_err(Error::Serve)?,
                Err(e) if e.is_cancelled() => {}
                Err(e) => return Err(Error::Task(e.to_string())),
            }
        }
        Ok(())
    }

    /// Waits until the server stops by itself (it only does on an I/O failure).
    async fn wait(&mut self) -> Result<(), Error> {
        match self.server.as_mut() {
            Some(server) => match server.await {
                Ok(r) => r.map_err(Error::Serve),
                Err(e) => Err(Error::Task(e.to_string())),
            },
            None => Ok(()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(k) = self.kubelet.take() {
            k.abort();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts a server in this process: opens the store, binds, serves in a
/// background task and (with a target kubeconfig) starts the kubelet simulation.
pub async fn spawn(config: CloudConfig) -> Result<(SocketAddr, ServerHandle), Error> {
    config.tunables.validate()?;
    let path = config.store_path.clone();
    let (store, loaded) = tokio::task::spawn_blocking(move || Store::open(&path))
        .await
        .map_err(|e| Error::Task(e.to_string()))??;
    let shared = Arc::new(Shared::new(
        config.zone.clone(),
        store,
        loaded,
        config.tunables.clone(),
    ));
    let count = shared.snapshot().await.len();

    let kubelet = match &config.target_kubeconfig {
        Some(path) => {
            let client = kubelet::client(path).await?;
            let kc = KubeletConfig {
                heartbeat_interval: config.heartbeat_interval,
                node_status_interval: config
                    .node_status_interval
                    .unwrap_or(config.heartbeat_interval),
                register_with_taints: config.register_with_taints.clone(),
            };
            info!(kubeconfig = %path.display(), heartbeat = ?kc.heartbeat_interval,
                  node_status = ?kc.node_status_interval, "kubelet simulation on");
            // The simulated node agent of in-place updates runs beside the kubelets.
            let agent = crate::agent::run(shared.clone(), client.clone());
            let kubelets = kubelet::run(shared.clone(), client, kc);
            Some(tokio::spawn(async move {
                futures::join!(kubelets, agent);
            }))
        }
        None => None,
    };

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.listen,
        source,
    })?;
    let (tx, rx) = oneshot::channel::<()>();
    let app = router(shared, guard::Guard::new(addr.ip(), &config.allowed_hosts));
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    });
    info!(%addr, store = %config.store_path.display(), zone = %config.zone, instances = count,
          "local cloud listening");
    Ok((
        addr,
        ServerHandle {
            addr,
            shutdown: Some(tx),
            server: Some(server),
            kubelet,
        },
    ))
}

async fn terminate_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                tokio::select! {
                    _ = s.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs the server until SIGINT or SIGTERM (what `mcm local-cloud serve` does).
pub async fn serve(args: ServeArgs) -> Result<(), Error> {
    let config = args.to_config()?;
    let (addr, mut handle) = spawn(config).await?;
    info!(url = %format!("http://{addr}"), "serving; stop with Ctrl-C");
    tokio::select! {
        r = handle.wait() => return r,
        _ = terminate_signal() => {}
    }
    info!("shutting down");
    handle.shutdown().await
}
