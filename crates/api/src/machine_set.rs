//! `MachineSet`: keeps a number of identical Machines running (the ReplicaSet of machines).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::enums::{ConditionStatus, MachineSetConditionType};
use crate::machine::{ClassSpec, LastOperation, MachineSummary, MachineTemplateSpec};
use crate::schema::{atomic, is_default};

/// Specification of a MachineSet (`spec`).
///
/// The `#[derive(CustomResource)]` generates the [`MachineSet`] kind: namespaced, short name
/// `mcs`, status and scale subresources.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
// clippy mistakes the repeated `type_ = ...` of the printer columns for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineSet",
    plural = "machinesets",
    singular = "machineset",
    namespaced,
    status = "MachineSetStatus",
    shortname = "mcs",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineSet ensures that a specified number of machine replicas are running at any given time.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Number of desired replicas."
    ),
    printcolumn(
        name = "Current",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Number of actual replicas."
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Number of ready replicas for this machine set."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the machine set was created."
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "MachineSetSpec is the specification of a MachineSet.")]
pub struct MachineSetSpec {
    /// Number of desired machines (0 when omitted).
    #[serde(default, skip_serializing_if = "is_default")]
    pub replicas: i32,

    /// Label selector for machines. Must match the template labels. A missing selector is
    /// rejected by validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "atomic::<LabelSelector>")]
    pub selector: Option<LabelSelector>,

    /// Legacy class reference, only used for metric labels.
    #[serde(default, skip_serializing_if = "is_default")]
    pub machine_class: ClassSpec,

    /// Template of the machines created by this set.
    #[serde(default, skip_serializing_if = "is_default")]
    pub template: MachineTemplateSpec,

    /// Minimum number of seconds for which a newly created machine should be ready to be
    /// considered available. Stored and propagated, not used for availability.
    #[serde(default, skip_serializing_if = "is_default")]
    pub min_ready_seconds: i32,

    /// The maximum number of failed machines of this set that can be auto-preserved.
    #[serde(default, skip_serializing_if = "is_default")]
    pub auto_preserve_failed_machine_max: i32,
}

/// A condition of a MachineSet (`status.machineSetCondition[]`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetCondition {
    /// Type of machine set condition.
    #[serde(rename = "type")]
    pub type_: MachineSetConditionType,

    /// Status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,

    /// The last time the condition transitioned from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,

    /// The reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,

    /// A human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Observed state of a MachineSet (`status`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Replicas is the number of actual replicas.
    #[serde(default, skip_serializing_if = "is_default")]
    pub replicas: i32,

    /// The number of machines that have labels matching the labels of the machine template.
    #[serde(default, skip_serializing_if = "is_default")]
    pub fully_labeled_replicas: i32,

    /// The number of ready replicas for this machine set.
    #[serde(default, skip_serializing_if = "is_default")]
    pub ready_replicas: i32,

    /// The number of available replicas for this machine set.
    #[serde(default, skip_serializing_if = "is_default")]
    pub available_replicas: i32,

    /// The number of preserved failed machines of this set.
    #[serde(default, skip_serializing_if = "is_default")]
    pub preserved_failed_replicas: i32,

    /// ObservedGeneration is the most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,

    /// Represents the latest available observations of a machine set's current state. Note
    /// the JSON name `machineSetCondition`.
    #[serde(
        default,
        rename = "machineSetCondition",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub conditions: Vec<MachineSetCondition>,

    /// LastOperation performed
    #[serde(default, skip_serializing_if = "is_default")]
    pub last_operation: LastOperation,

    /// FailedMachines has summary of machines on which lastOperation Failed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_machines: Option<Vec<MachineSummary>>,

    /// The number of failed machines of this set that are currently auto-preserved.
    #[serde(default, skip_serializing_if = "is_default")]
    pub auto_preserve_failed_machine_count: i32,
}
