//! # mcm-runtime: the controllers of mcm-rs on kube-rs
//!
//! Thin I/O around the decisions of `mcm-core`: watches Machines, Nodes,
//! MachineClasses and Secrets, calls the provider [`mcm_driver::Driver`], and
//! writes status, labels, finalizers and Events.
//!
//! - [`machine`]: the Machine controller (creation, initialization, health, deletion).
//! - [`drain`]: cordon and drain of a Node before its VM is deleted.
//! - [`leader`]: Lease-based leader election, so two replicas never reconcile at once.
//! - [`healthz`]: what `/healthz` and `/readyz` answer.
//! - [`metrics`]: Prometheus metrics with the reference's names and labels.
//! - [`class`]: finalizers on MachineClasses and their Secrets.
//! - [`caches`]: one watch per kind, shared by every controller.
//! - [`sets`]: the MachineSet and MachineDeployment controllers and the overshoot safety.
//! - `node_sync`: the Machine's node template and the class's virtual capacity on its Node.
//! - `status`: every status write, as typed changes (one writer).
//! - [`metadata`]: every metadata write (labels, annotations, finalizers), as typed changes.

// The public surface is what the binary and the integration tests use
// (docs/design/crates.md); everything else is `pub(crate)`.
#![warn(unreachable_pub)]

pub mod caches;
pub mod class;
pub(crate) mod config;
pub(crate) mod context;
pub mod drain;
pub(crate) mod events;
pub mod healthz;
pub mod keys;
pub mod leader;
pub mod machine;
pub mod metadata;
pub mod metrics;
pub(crate) mod node_sync;
mod own_writes;
pub mod pacing;
pub(crate) mod pruned;
pub(crate) mod routing;
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
    /// An optimistic-concurrency conflict ([`is_conflict`]): retry soon, not with backoff.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(e) if is_conflict(e))
    }
}

/// The one conflict check of the runtime: someone wrote first. The API
/// server answered 409 (a resourceVersion precondition failed, or, for a
/// create, AlreadyExists) or a JSON patch's `test` failed
/// ([`is_failed_test`]). A reconcile that fails on it is retried soon and
/// quietly by every controller's [`routing::error_policy`]
/// ([`Context::requeue_after_error`]).
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || is_failed_test(s))
}

/// A JSON patch whose `test` operation failed: the API server answers 422
/// Invalid with empty details, where a validation error names the object
/// and its causes.
fn is_failed_test(s: &kube::core::Status) -> bool {
    s.code == 422
        && s.details
            .as_ref()
            .is_none_or(|d| d.name.is_empty() && d.causes.is_empty())
}

/// The API server answered 404 NotFound.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
