//! # mcm-api
//!
//! The `machine.sapcloud.io/v1alpha1` API of **mcm-rs**, a Rust re-implementation of
//! Gardener's [machine-controller-manager](https://github.com/gardener/machine-controller-manager)
//! (MCM). The types are wire-compatible with the Go API: same JSON field names, same
//! optionality, same CRDs (short names, printer columns, subresources), so manifests written
//! for Gardener MCM apply unchanged and objects written by the Go controller are read and
//! continued by mcm-rs.
//!
//! ## Kinds
//!
//! All four kinds are namespaced.
//!
//! | Kind | Rust type | short name | subresources |
//! |---|---|---|---|
//! | MachineClass | [`MachineClass`] (no `spec`: fields at top level) | `mcc` | none |
//! | Machine | [`Machine`] (`spec`: [`MachineSpec`], `status`: [`MachineStatus`]) | `mc` | status |
//! | MachineSet | [`MachineSet`] ([`MachineSetSpec`], [`MachineSetStatus`]) | `mcs` | status, scale |
//! | MachineDeployment | [`MachineDeployment`] ([`MachineDeploymentSpec`], [`MachineDeploymentStatus`]) | `mcd` | status, scale |
//!
//! * A **MachineClass** holds an opaque, provider-specific `providerSpec` (raw JSON, unknown
//!   fields preserved), the `provider` name, references to the user-data / credentials
//!   Secrets and an optional `nodeTemplate` for cluster-autoscaler.
//! * A **Machine** references its class ([`ClassSpec`]) and carries per-machine overrides of
//!   the controller's timeouts ([`MachineConfiguration`], inlined into the spec). Its status
//!   holds the phase ([`MachinePhase`]), the last operation ([`LastOperation`] with
//!   [`MachineState`] and [`MachineOperationType`]) and the node conditions.
//! * A **MachineSet** keeps `replicas` machines of a [`MachineTemplateSpec`] running; a
//!   **MachineDeployment** rolls out MachineSets (Recreate, RollingUpdate, InPlaceUpdate).
//!
//! Go `string` enumerations are Rust enums that accept any value ([`MachinePhase::Other`]), so
//! unknown values round-trip; the empty string is the `Empty` variant (the `Default`).
//! Plain Go values with `omitempty` are plain Rust values with `#[serde(default)]` and are
//! omitted when they equal their default; Go pointers are `Option`s.
//!
//! ## Serialization and status writes
//!
//! Like Go's `omitempty`, empty strings, zero numbers, `false`, empty lists and empty structs
//! are left out when serializing. Writing a status with a JSON *merge* patch therefore cannot
//! clear a field by leaving it empty (e.g. `lastOperation.errorCode`): replace the status
//! (`Api::replace_status`, a PUT, which is what the Go controller does) or set the field to
//! `null` explicitly in the patch.
//!
//! ## Other modules
//!
//! * [`constants`]: finalizers, labels, annotations, taints, condition reasons and the
//!   `lastOperation.description` markers shared with the Go controllers.
//! * [`validation`]: the reference's validation rules (`validate_machine_deployment`, ...)
//!   with Kubernetes-style [`validation::FieldError`]s, and int-or-string resolution
//!   ([`validation::resolve_fenceposts`]).
//! * [`parse_duration`] / [`format_duration`]: Go duration strings (`"20m"`).
//!
//! ## CRDs
//!
//! [`crds()`] returns the four `CustomResourceDefinition`s (MachineClass, Machine, MachineSet,
//! MachineDeployment) generated from the Rust types: Machine, MachineSet and MachineDeployment
//! through `#[derive(kube_derive::CustomResource)]`, MachineClass from its schemars schema with the
//! same settings. [`crds_yaml()`] renders them as one multi-document YAML stream.
//! The generated files are committed under `deploy/crds/<plural>.machine.sapcloud.io.yaml`;
//! the test `committed_crds_match_generated` fails when they are stale, and
//! `MCM_UPDATE_CRDS=1 cargo test -p mcm-api --test integration crds::` rewrites them. The compatibility
//! tests (`tests/compat.rs`) check the generated schemas against Gardener's own CRDs: every
//! field the reference accepts is accepted with the same type, and every place that preserves
//! unknown fields does so here too.
//!
//! ```
//! use kube::Resource;
//! let crds = mcm_api::crds();
//! assert_eq!(crds.len(), 4);
//! assert_eq!(mcm_api::Machine::plural(&()), "machines");
//! assert_eq!(mcm_api::MachineClass::kind(&()), "MachineClass");
//! ```

pub mod constants;
mod crd;
mod duration;
mod enums;
mod machine;
mod machine_class;
mod machine_deployment;
mod machine_set;
mod schema;
pub mod selector;
pub mod validation;

pub use constants::{API_VERSION, GROUP, VERSION};
pub use crd::{crd_file_name, crd_yaml, crds, crds_yaml};
pub use duration::{format_duration, parse_duration, DurationError};
pub use enums::{
    ConditionStatus, MachineDeploymentConditionType, MachineDeploymentStrategyType,
    MachineOperationType, MachinePhase, MachineSetConditionType, MachineState, OrchestrationType,
};
pub use machine::{
    ClassSpec, CurrentStatus, LastOperation, Machine, MachineConfiguration, MachineSpec,
    MachineStatus, MachineSummary, MachineTemplateSpec, NodeTemplateSpec,
};
pub use machine_class::{MachineClass, NodeTemplate};
pub use machine_deployment::{
    InPlaceUpdateMachineDeployment, MachineDeployment, MachineDeploymentCondition,
    MachineDeploymentSpec, MachineDeploymentStatus, MachineDeploymentStrategy, RollbackConfig,
    RollingUpdateMachineDeployment, UpdateConfiguration,
};
pub use machine_set::{MachineSet, MachineSetCondition, MachineSetSpec, MachineSetStatus};

/// The Kubernetes crates the API is built on, re-exported so that dependents use the same
/// versions.
pub use k8s_openapi;
pub use kube_core::CustomResourceExt;
