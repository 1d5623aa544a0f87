//! # mcm-provider-local: a simulated cloud for mcm-rs
//!
//! A small "cloud" that runs on loopback, for demos, scale benchmarks and
//! fault injection, plus the [`LocalDriver`] that implements the
//! [`mcm_driver::Driver`] contract against it.
//!
//! ## The cloud ([`server`])
//!
//! An axum HTTP/JSON API (`mcm local-cloud serve`, or [`server::spawn`] in
//! a test) whose state lives in a [`redb`] file: a restarted server on the same
//! file loses nothing. Instances look like EC2's:
//!
//! - ID `i-` + 17 hex digits, provider ID `local:///<zone>/<id>`, node name =
//!   machine name, a fake private IPv4 `10.x.y.z` (never contacted), the tags
//!   of the class's providerSpec, and a state: `pending` → `running` after the
//!   boot delay, `stopped` or `killed` by an operator;
//! - network settings that launching does **not** apply but InitializeMachine
//!   must (like on AWS): `srcDstCheck` (true at launch) and IPv6 addresses and
//!   prefixes (none at launch). Until they match the providerSpec
//!   (`srcAndDstChecksEnabled`, `ipv6AddressCount`, `ipv6PrefixCount`),
//!   GetMachineStatus answers `Uninitialized` with the VM's identity;
//! - launching is idempotent by client token (the Machine's UID).
//!
//! The providerSpec ([`spec`]) needs `image`, `instanceType` and `tags` with a
//! `kubernetes.io/cluster/<name>` key and the `kubernetes.io/role/node` key;
//! anything else answers `InvalidArgument` naming the field
//! (`providerSpec.image: required`).
//!
//! UpdateMachine (hot update, [`update`]) changes a running instance's tags
//! and instance type in place; every other providerSpec field needs a new
//! instance.
//!
//! Every operation (create, initialize, update, delete, status, list) has
//! [`tunables`]: latency, a token-bucket rate limit (defaults mirror EC2's
//! published API limits; exceeding one answers `ResourceExhausted` with
//! `RequestLimitExceeded`), an injected error rate with a code; besides
//! "fail initialization N times" (globally or per instance/machine) and
//! eventual consistency (a new instance is invisible for a while). They are
//! set at start (flags, a JSON file) and at run time (`PUT`/`PATCH
//! /admin/faults`). `GET /admin/stats` counts calls per operation;
//! `POST /admin/instances/{id}/stop|kill|start` acts on one instance
//! ([`admin`] has the client and the CLI subcommands).
//!
//! ## Simulated kubelets ([`kubelet`])
//!
//! With a target kubeconfig, each running instance registers a Ready Node
//! (with `spec.providerID` and the `node.gardener.cloud/machine-name` label)
//! and keeps its Lease in `kube-node-lease` and its Ready heartbeat fresh. A
//! stopped or killed instance stops heartbeating, so kube-controller-manager
//! marks its Node `Unknown`, which is what the machine controller's health
//! checks react to.
//!
//! ## Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), mcm_provider_local::Error> {
//! use mcm_provider_local::{server, LocalDriver, Tunables};
//! let mut config = server::CloudConfig::new("/tmp/local-cloud.redb");
//! config.tunables = Tunables::unlimited();
//! let (addr, handle) = server::spawn(config).await?;
//! let driver = LocalDriver::new(format!("http://{addr}"))?;
//! // ... use `driver` as an `mcm_driver::Driver` ...
//! # drop(driver);
//! handle.shutdown().await
//! # }
//! ```

pub mod admin;
mod agent;
pub mod driver;
pub mod kubelet;
pub mod server;
pub mod spec;
pub mod store;
pub mod tunables;
pub mod update;
pub mod wire;

pub use admin::{AdminClient, InstanceAction, LocalCloudCommand};
pub use driver::LocalDriver;
pub use server::{serve, spawn, CloudConfig, ServeArgs, ServerHandle};
pub use spec::LocalProviderSpec;
pub use tunables::Tunables;

use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors of the server, the driver's construction and the admin client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be opened or written.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while serving.
    #[error("the local cloud server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// A background task failed.
    #[error("a local cloud task failed: {0}")]
    Task(String),
    /// The tunables file is unreadable or invalid.
    #[error("config file {path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The tunables are invalid.
    #[error(transparent)]
    Tunables(#[from] tunables::TunablesError),
    /// The target cluster's kubeconfig is unusable.
    #[error("target kubeconfig {path}: {message}")]
    TargetCluster {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The URL of the local cloud is invalid.
    #[error("invalid local cloud URL {url:?}: {message}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// A request to the local cloud failed in transport or decoding.
    #[error("local cloud request failed: {0}")]
    Request(String),
    /// The local cloud answered with an error.
    #[error("the local cloud answered {code}: {message}")]
    Api {
        /// The machine code.
        code: mcm_driver::Code,
        /// The message.
        message: String,
    },
}
