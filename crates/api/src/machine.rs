//! `Machine` and the types shared with MachineSet / MachineDeployment (class reference,
//! node template, machine configuration, last operation, machine summary, template).

use std::time::Duration;

use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{parse_duration, DurationError};
use crate::enums::{MachineOperationType, MachinePhase, MachineState};
use crate::schema::{is_default, preserve_unknown_object, template_metadata};

/// Specification of a Machine (`spec`).
///
/// The `#[derive(CustomResource)]` generates the [`Machine`] kind from this struct:
/// `machine.sapcloud.io/v1alpha1`, namespaced, short name `mc`, status subresource.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
// clippy mistakes the repeated `type_ = ...` of the printer columns for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "Machine",
    plural = "machines",
    singular = "machine",
    namespaced,
    status = "MachineStatus",
    shortname = "mc",
    derive = "PartialEq",
    derive = "Default",
    doc = "Machine is the representation of a physical or virtual machine.",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.currentStatus.phase",
        description = "Current status of the machine."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the machine object was created."
    ),
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = ".metadata.labels.node",
        description = "Node backing the machine object"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "ProviderID of the infra instance backing the machine object",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "Spec contains the specification of the machine")]
pub struct MachineSpec {
    /// Class contains the machineclass attributes of a machine
    #[serde(default, skip_serializing_if = "is_default")]
    pub class: ClassSpec,

    /// ProviderID represents the provider's unique ID given to a machine
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub provider_id: String,

    /// NodeTemplateSpec describes the data a node should have when created from a template
    #[serde(default, skip_serializing_if = "is_default")]
    pub node_template: NodeTemplateSpec,

    /// Per-machine overrides of the controller's timeouts and health settings (inlined, i.e.
    /// `drainTimeout`, `healthTimeout`, ... sit directly in `spec`).
    #[serde(flatten)]
    pub configuration: MachineConfiguration,
}

/// Reference to the MachineClass a machine is created from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    /// API group to which it belongs
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,

    /// Kind for machine class (only `MachineClass` is understood by the machine controller)
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,

    /// Name of machine class
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// The data (labels, annotations, taints, ...) a node should have; kept in sync on the Node by
/// the machine controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplateSpec {
    /// Metadata (labels, annotations) applied to the node.
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub metadata: ObjectMeta,

    /// NodeSpec describes the attributes that a node is created with (taints, ...).
    #[serde(default, skip_serializing_if = "is_default")]
    pub spec: NodeSpec,
}

/// Per-machine settings that override the machine controller's flags. Inlined into
/// [`MachineSpec`] on the wire. Durations are Go duration strings such as `"20m"`; use the
/// `*_duration()` accessors to parse them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfiguration {
    /// MachineDraintimeout is the timeout after which machine is forcefully deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<String>,

    /// MachineHealthTimeout is the timeout after which machine is declared unhealthy/failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_timeout: Option<String>,

    /// MachineCreationTimeout is the timeout after which machine creation is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timeout: Option<String>,

    /// MachineInPlaceUpdateTimeout is the timeout after which in-place update is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_timeout: Option<String>,

    /// MachinePreserveTimeout is the timeout after which the machine preservation is stopped
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_preserve_timeout: Option<String>,

    /// DisableHealthTimeout if set to true, health timeout will be ignored, so the machine is
    /// never declared failed. Intended to be used only for in-place updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_health_timeout: Option<bool>,

    /// MaxEvictRetries is the number of retries that will be attempted while draining the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evict_retries: Option<i32>,

    /// NodeConditions are the set of conditions (comma separated) if set to true for
    /// MachineHealthTimeOut, machine will be declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_conditions: Option<String>,
}

fn optional_duration(value: Option<&String>) -> Result<Option<Duration>, DurationError> {
    value.map(|value| parse_duration(value)).transpose()
}

impl MachineConfiguration {
    /// True when no field is set (the Go `*MachineConfiguration` would be nil or empty).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `drainTimeout` parsed, `None` when unset.
    pub fn drain_timeout_duration(&self) -> Result<Option<Duration>, DurationError> {
        optional_duration(self.drain_timeout.as_ref())
    }

    /// `healthTimeout` parsed, `None` when unset.
    pub fn health_timeout_duration(&self) -> Result<Option<Duration>, DurationError> {
        optional_duration(self.health_timeout.as_ref())
    }

    /// `creationTimeout` parsed, `None` when unset.
    pub fn creation_timeout_duration(&self) -> Result<Option<Duration>, DurationError> {
        optional_duration(self.creation_timeout.as_ref())
    }

    /// `inPlaceUpdateTimeout` parsed, `None` when unset.
    pub fn in_place_update_timeout_duration(&self) -> Result<Option<Duration>, DurationError> {
        optional_duration(self.in_place_update_timeout.as_ref())
    }

    /// `machinePreserveTimeout` parsed, `None` when unset.
    pub fn machine_preserve_timeout_duration(&self) -> Result<Option<Duration>, DurationError> {
        optional_duration(self.machine_preserve_timeout.as_ref())
    }

    /// `nodeConditions` split at commas (trimmed, empty entries dropped), `None` when unset.
    pub fn node_conditions_list(&self) -> Option<Vec<String>> {
        self.node_conditions.as_ref().map(|conditions| {
            conditions
                .split(',')
                .map(str::trim)
                .filter(|condition| !condition.is_empty())
                .map(str::to_owned)
                .collect()
        })
    }
}

/// Observed state of a Machine (`status`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Addresses of this machine. Only filled when the provider runs without a target cluster;
    /// clients may use it instead of the Node's `status.addresses`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,

    /// Conditions of this machine, same as node
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<NodeCondition>,

    /// Last operation refers to the status of the last operation performed
    #[serde(default, skip_serializing_if = "is_default")]
    pub last_operation: LastOperation,

    /// Current status of the machine object
    #[serde(default, skip_serializing_if = "is_default")]
    pub current_status: CurrentStatus,

    /// LastKnownState can store details of the last known state of the VM by the plugins. It
    /// can be used by future operation calls to determine current infrastructure state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_known_state: String,
}

/// The last operation performed on a machine (or recorded for a machine set).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Description of the current operation
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,

    /// ErrorCode of the current operation if any
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_code: String,

    /// Last update time of current operation
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,

    /// State of operation
    #[serde(default, skip_serializing_if = "MachineState::is_empty")]
    pub state: MachineState,

    /// Type of operation
    #[serde(
        default,
        rename = "type",
        skip_serializing_if = "MachineOperationType::is_empty"
    )]
    pub type_: MachineOperationType,
}

/// The phase of a machine and when it last changed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentStatus {
    /// MachinePhase is a label for the condition of a machine at the current time.
    #[serde(default, skip_serializing_if = "MachinePhase::is_empty")]
    pub phase: MachinePhase,

    /// Whether a timeout (creation or health) is running. Written, never read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timeout_active: bool,

    /// Last update time of current status
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,

    /// PreserveExpiryTime is the time at which MCM will stop preserving the machine
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_expiry_time: Option<Time>,
}

/// A failed machine as listed in `status.failedMachines` of MachineSets and
/// MachineDeployments.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSummary {
    /// Name of the machine object
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,

    /// ProviderID represents the provider's unique ID given to a machine
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub provider_id: String,

    /// Last operation refers to the status of the last operation performed
    #[serde(default, skip_serializing_if = "is_default")]
    pub last_operation: LastOperation,

    /// OwnerRef is the name of the MachineSet controlling the machine
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner_ref: String,
}

/// The template from which MachineSets create Machines (and MachineDeployments create
/// MachineSets).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    /// Metadata (labels, annotations, finalizers, ...) copied to the created machines.
    #[serde(default, skip_serializing_if = "is_default")]
    #[schemars(schema_with = "template_metadata")]
    pub metadata: ObjectMeta,

    /// Specification of the desired behavior of the machine.
    #[serde(default, skip_serializing_if = "is_default")]
    pub spec: MachineSpec,
}

impl Machine {
    /// The machine's phase (`status.currentStatus.phase`), [`MachinePhase::Empty`] without status.
    pub fn phase(&self) -> MachinePhase {
        self.status
            .as_ref()
            .map(|status| status.current_status.phase.clone())
            .unwrap_or_default()
    }

    /// The name of the backing node (the `node` label), if known.
    pub fn node_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(crate::constants::NODE_LABEL))
            .map(String::as_str)
            .filter(|name| !name.is_empty())
    }
}
