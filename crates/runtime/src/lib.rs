//! # mcm-runtime: the controllers of mcm-rs on kube-rs
//!
//! Thin I/O around the decisions of `mcm-core`: watches Machines, Nodes,
//! MachineClasses and Secrets, calls the provider [`mcm_driver::Driver`], and
//! writes status, labels, finalizers and Events.
//!
//! - [`machine`]: the Machine controller (creation, initialization, health, deletion).
//! - [`drain`]: cordon and drain of a Node before its VM is deleted.
//! - [`leader`]: Lease-based leader election, so two replicas never reconcile at once.
//! - [`health`]: what `/healthz` and `/readyz` answer.
//! - [`metrics`]: Prometheus metrics with the reference's names and labels.
//! - [`class`]: finalizers on MachineClasses and their Secrets.
//! - [`caches`]: one watch per kind, shared by every controller.
//! - [`sets`]: the MachineSet and MachineDeployment controllers and the overshoot safety.
//! - [`node_sync`]: the Machine's node template and the class's virtual capacity on its Node.
//! - `status`: every status write, as typed changes (one writer).

pub mod caches;
pub mod class;
pub mod config;
pub mod context;
pub mod drain;
pub mod events;
pub mod finalizer;
pub mod healthz;
pub mod keys;
pub mod leader;
pub mod machine;
pub mod metrics;
pub mod node_sync;
mod own_writes;
pub mod pacing;
pub mod pruned;
pub mod safety;
pub mod sets;
mod status;

pub use config::Config;
pub use context::{Clients, Context, DriverRegistry, ProbeClients};

/// Errors of every controller of the runtime (one type: the retry decision
/// is [`Context::error_delay`]'s).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A serialization problem.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// A configuration problem.
    #[error("configuration: {0}")]
    Config(String),
    /// The object cannot be acted upon as it is.
    #[error("invalid object: {0}")]
    Invalid(String),
    /// Creating or deleting machines failed (the status carries `ReplicaFailure`).
    #[error("managing replicas: {0}")]
    Replicas(String),
    /// The owner changed while adopting (deleted, recreated).
    #[error("owner changed while adopting: {0}")]
    OwnerChanged(String),
    /// A new MachineSet's name is taken by another object.
    #[error("hash collision for new MachineSet {0}")]
    Collision(String),
    /// The caches were not filled.
    #[error("caches not ready")]
    NotReady,
}

impl Error {
    /// An optimistic-concurrency conflict (HTTP 409): retry soon, not with backoff.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}
