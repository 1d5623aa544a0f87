//! # MachineSet replica management, without I/O
//!
//! The decisions of the MachineSet controller (design: sets-and-deployments.md)
//! as pure functions of what the controller observed:
//!
//! - [`claim`]: adopt / keep / release / ignore a Machine (or a MachineSet, for
//!   the MachineDeployment controller) by selector and controller
//!   ownerReference ("Claiming").
//! - [`manage_replicas`]: how many machines to create (in growing
//!   [`slow_start_batches`], capped by [`BURST_REPLICAS`]) or which ones to
//!   delete, in the deletion order of [`deletion_order`] ("Replica management",
//!   "Deletion order"),
//!   including Failed machines that are not preserved and machines the
//!   cluster-autoscaler marked; the `freeze` label and `scale-up-disabled`
//!   label block creations.
//! - [`auto_preservation`]: which Failed machines get or lose the
//!   `preserve=auto-preserved` annotation ("Auto-preservation").
//! - [`set_status`] / [`replica_failure`]: the MachineSet status ("MachineSet status").
//! - [`Expectations`]: creations and deletions this controller has made and
//!   not yet seen in its cache (the reference records them but never looks,
//!   "Where mcm-rs differs from the reference", item 11; mcm-rs waits for
//!   them, so a stale cache never doubles a
//!   scale-up).
//! - [`propagate_template`]: nodeTemplate / machine configuration /
//!   `class.kind` changes pushed into existing machines ("Template propagation").
//!
//! The runtime builds the one Machine model of core,
//! [`crate::machine::MachineView`], for each claimed machine and carries out
//! the decisions.

use crate::machine::MachineView;
use chrono::{DateTime, Utc};
use mcm_api::MachinePhase;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

mod claim;
mod common;
mod deletion_order;
mod expectations;
mod manage;
mod preservation;
mod propagation;
mod selectors;
mod status;

pub use claim::*;
pub use common::*;
pub use deletion_order::*;
pub use expectations::*;
pub use manage::*;
pub use preservation::*;
pub use propagation::*;
pub use selectors::*;
pub use status::*;

#[cfg(test)]
mod tests;
