//! # mcm-core: the decisions of mcm-rs, without I/O
//!
//! Everything here is a pure function of observed state (objects, the
//! provider's answer, the time): it decides what the controllers do next and
//! is unit-tested transition by transition. The kube-rs runtime
//! (`mcm-runtime`) reads the world, calls these functions and carries out
//! their decisions.
//!
//! - [`backoff`]: per-machine exponential backoff with jitter.
//! - [`machine`]: the Machine state machine: creation, initialization, health, deletion.
//! - [`replicas`]: MachineSet replica management and deletion order.
//! - [`deployment`]: MachineDeployment rollout arithmetic.
//! - [`orphans`]: which VMs the orphan collector deletes.
//! - [`node_template`]: what the node sync changes on a Node (template, virtual capacity).
//! - [`time`]: the one conversion between Kubernetes times and chrono (whole seconds).

pub mod backoff;
pub mod defaults;
pub mod deployment;
pub mod machine;
pub mod node_template;
pub mod orphans;
pub mod replicas;
pub mod time;
