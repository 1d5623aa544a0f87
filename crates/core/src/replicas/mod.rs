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
//! The runtime converts API objects into the small views of this module
//! ([`MachineView`]) and carries out the decisions.

use chrono::{DateTime, Utc};
use mcm_api::MachinePhase;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

mod claim;
mod deletion_order;
mod expectations;
mod manage;
mod preservation;
mod propagation;
mod selectors;
mod status;
mod view;

pub use claim::*;
pub use deletion_order::*;
pub use expectations::*;
pub use manage::*;
pub use preservation::*;
pub use propagation::*;
pub use selectors::*;
pub use status::*;
pub use view::*;

#[cfg(test)]
mod tests;
