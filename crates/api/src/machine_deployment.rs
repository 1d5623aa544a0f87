//! `MachineDeployment`: declarative rollouts of MachineSets (the Deployment of machines).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::enums::{
    ConditionStatus, MachineDeploymentConditionType, MachineDeploymentStrategyType,
    OrchestrationType,
};
use crate::machine::{MachineSummary, MachineTemplateSpec};
use crate::schema::{atomic, is_default};

/// Specification of a MachineDeployment (`spec`).
///
/// The `#[derive(CustomResource)]` generates the [`MachineDeployment`] kind: namespaced, short
/// name `mcd`, status and scale subresources.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
// clippy mistakes the repeated `type_ = ...` of the printer columns for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineDeployment",
    plural = "machinedeployments",
    singular = "machinedeployment",
    namespaced,
    status = "MachineDeploymentStatus",
    shortname = "mcd",
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineDeployment enables declarative updates for machines and MachineSets.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Total number of ready machines targeted by this machine deployment."
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Number of desired machines."
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "Total number of non-terminated machines targeted by this machine deployment that have the desired template spec."
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas",
        description = "Total number of available machines (ready for at least minReadySeconds) targeted by this machine deployment."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the machine deployment was created."
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "Specification of the desired behavior of the MachineDeployment.")]
pub struct MachineDeploymentSpec {
    /// Number of desired machines (0 when omitted).
    #[serde(default, skip_serializing_if = "is_default")]
    pub replicas: i32,

    /// Label selector for machines. Existing MachineSets whose machines are selected by this
    /// will be the ones affected by this MachineDeployment. A missing selector is rejected by
    /// validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "atomic::<LabelSelector>")]
    pub selector: Option<LabelSelector>,

    /// Template describes the machines that will be created (required).
    pub template: MachineTemplateSpec,

    /// The MachineDeployment strategy to use to replace existing machines with new ones. Not
    /// defaulted: `type` must be set.
    #[serde(default, skip_serializing_if = "is_default")]
    pub strategy: MachineDeploymentStrategy,

    /// Minimum number of seconds for which a newly created machine should be ready to be
    /// considered available. Propagated to MachineSets; availability does not honour it.
    #[serde(default, skip_serializing_if = "is_default")]
    pub min_ready_seconds: i32,

    /// The number of old MachineSets to retain to allow rollback. Unset keeps all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,

    /// Indicates that the MachineDeployment is paused and will not be processed by the
    /// MachineDeployment controller.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// DEPRECATED. The config this MachineDeployment is rolling back to. Cleared after the
    /// rollback is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_to: Option<RollbackConfig>,

    /// The maximum time in seconds for a MachineDeployment to make progress before it is
    /// considered to be failed (ProgressDeadlineExceeded). Unset means no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,

    /// The maximum number of failed machines in the machine deployment that can be
    /// auto-preserved. Copied to the new MachineSet.
    #[serde(default, skip_serializing_if = "is_default")]
    pub auto_preserve_failed_machine_max: i32,
}

/// How a MachineDeployment replaces machines (`spec.strategy`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStrategy {
    /// Type of deployment. Can be "Recreate", "RollingUpdate" or "InPlaceUpdate".
    #[serde(
        default,
        rename = "type",
        skip_serializing_if = "MachineDeploymentStrategyType::is_empty"
    )]
    pub type_: MachineDeploymentStrategyType,

    /// Rolling update config params. Present only if the strategy type is RollingUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateMachineDeployment>,

    /// InPlaceUpdate update config params. Present only if the strategy type is InPlaceUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<InPlaceUpdateMachineDeployment>,
}

/// The fence-posts of a rollout: how far the machine count may go above and below the
/// desired replicas. Both are required by validation for RollingUpdate and InPlaceUpdate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfiguration {
    /// The maximum number of machines that can be unavailable during the update: an absolute
    /// number (ex: 5) or a percentage of desired machines (ex: 10%), rounded down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// The maximum number of machines that can be scheduled above the desired number of
    /// machines: an absolute number (ex: 5) or a percentage of desired machines (ex: 10%),
    /// rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// Parameters of the RollingUpdate strategy (`spec.strategy.rollingUpdate`).
pub type RollingUpdateMachineDeployment = UpdateConfiguration;

/// Parameters of the InPlaceUpdate strategy (`spec.strategy.inPlaceUpdate`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateMachineDeployment {
    /// maxSurge / maxUnavailable (inlined).
    #[serde(flatten)]
    pub update_configuration: UpdateConfiguration,

    /// OrchestrationType specifies the orchestration type for the inplace update: Auto or
    /// Manual.
    #[serde(default, skip_serializing_if = "OrchestrationType::is_empty")]
    pub orchestration_type: OrchestrationType,
}

/// Target of a (deprecated) rollback (`spec.rollbackTo`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackConfig {
    /// The revision to rollback to. If set to 0, rollback to the last revision.
    #[serde(default, skip_serializing_if = "is_default")]
    pub revision: i64,
}

/// Observed state of a MachineDeployment (`status`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    /// The generation observed by the MachineDeployment controller.
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,

    /// Total number of non-terminated machines targeted by this MachineDeployment (their
    /// labels match the selector).
    #[serde(default, skip_serializing_if = "is_default")]
    pub replicas: i32,

    /// Total number of non-terminated machines targeted by this MachineDeployment that have
    /// the desired template spec.
    #[serde(default, skip_serializing_if = "is_default")]
    pub updated_replicas: i32,

    /// Total number of ready machines targeted by this MachineDeployment.
    #[serde(default, skip_serializing_if = "is_default")]
    pub ready_replicas: i32,

    /// Total number of available machines targeted by this MachineDeployment.
    #[serde(default, skip_serializing_if = "is_default")]
    pub available_replicas: i32,

    /// Total number of preserved machines in Failed phase targeted by this MachineDeployment.
    #[serde(default, skip_serializing_if = "is_default")]
    pub preserved_failed_replicas: i32,

    /// Total number of unavailable machines targeted by this MachineDeployment: machines
    /// still required for 100% available capacity (running but not available, not yet
    /// created, or preserved in Failed phase).
    #[serde(default, skip_serializing_if = "is_default")]
    pub unavailable_replicas: i32,

    /// Represents the latest available observations of a MachineDeployment's current state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MachineDeploymentCondition>,

    /// Count of hash collisions for the MachineDeployment, used to build the name of the
    /// newest MachineSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,

    /// FailedMachines has summary of machines on which lastOperation Failed
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_machines: Vec<MachineSummary>,
}

/// A condition of a MachineDeployment (`status.conditions[]`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentCondition {
    /// Type of MachineDeployment condition.
    #[serde(rename = "type")]
    pub type_: MachineDeploymentConditionType,

    /// Status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,

    /// The last time this condition was updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,

    /// Last time the condition transitioned from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,

    /// The reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,

    /// A human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl MachineDeploymentSpec {
    /// The fence-posts of the active strategy: `rollingUpdate` for RollingUpdate,
    /// `inPlaceUpdate` for InPlaceUpdate, `None` otherwise (Recreate or unset).
    pub fn update_configuration(&self) -> Option<&UpdateConfiguration> {
        match self.strategy.type_ {
            MachineDeploymentStrategyType::RollingUpdate => self.strategy.rolling_update.as_ref(),
            MachineDeploymentStrategyType::InPlaceUpdate => self
                .strategy
                .in_place_update
                .as_ref()
                .map(|in_place| &in_place.update_configuration),
            _ => None,
        }
    }
}
