//! Well-known names shared with the Go machine-controller-manager: finalizers, labels,
//! annotations, taints, condition types and reasons, and the `lastOperation.description`
//! markers of the deletion flow.
//!
//! All values are part of the compatibility contract: objects carry them across a switch
//! between the Go controller and mcm-rs, so they must never change.

// ---------------------------------------------------------------------------------------------
// API group
// ---------------------------------------------------------------------------------------------

/// API group of all kinds.
pub const GROUP: &str = "machine.sapcloud.io";
/// The only API version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of all kinds.
pub const API_VERSION: &str = "machine.sapcloud.io/v1alpha1";
/// Kind name of MachineClass; the only `spec.class.kind` the machine controller understands.
pub const MACHINE_CLASS_KIND: &str = "MachineClass";
/// Kind name of Machine.
pub const MACHINE_KIND: &str = "Machine";
/// Kind name of MachineSet.
pub const MACHINE_SET_KIND: &str = "MachineSet";
/// Kind name of MachineDeployment.
pub const MACHINE_DEPLOYMENT_KIND: &str = "MachineDeployment";

// ---------------------------------------------------------------------------------------------
// Finalizers
// ---------------------------------------------------------------------------------------------

/// Finalizer of MCM and the machine controller on MachineDeployments, MachineSets, Machines
/// and MachineClasses (Go: `DeleteFinalizerName` / `MCMFinalizerName`).
pub const MCM_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";
/// Finalizer of the machine controller on Secrets referenced by a MachineClass
/// (Go: `MCFinalizerName`).
pub const MC_SECRET_FINALIZER: &str = "machine.sapcloud.io/machine-controller";
/// Finalizer of the machine controller on Nodes (Go: `NodeFinalizerName`).
pub const NODE_FINALIZER: &str = "node.machine.sapcloud.io/machine-controller";

// ---------------------------------------------------------------------------------------------
// Labels on Machines, MachineSets, MachineDeployments
// ---------------------------------------------------------------------------------------------

/// Machine label holding the name of the backing Node (printer column `Node`).
pub const NODE_LABEL: &str = "node";
/// Machine label holding the MachineDeployment name (Gardener convention).
pub const MACHINE_DEPLOYMENT_NAME_LABEL: &str = "name";
/// Machine label: ParseBool-true value forces drain and deletion.
pub const FORCE_DELETION_LABEL: &str = "force-deletion";
/// Machine label: exact value `"True"` forces the drain (in-place and preservation drains).
pub const FORCE_DRAIN_LABEL: &str = "force-drain";
/// Value of [`FORCE_DRAIN_LABEL`] that forces a drain.
pub const FORCE_DRAIN_LABEL_VALUE: &str = "True";
/// Template-hash label on MachineSets (labels, selector, template labels) and Machines
/// (Go: `DefaultMachineDeploymentUniqueLabelKey`).
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";
/// Safety freeze label on MachineSets / MachineDeployments (value [`FREEZE_LABEL_VALUE`]).
pub const FREEZE_LABEL: &str = "freeze";
/// Value of [`FREEZE_LABEL`] meaning "frozen".
pub const FREEZE_LABEL_VALUE: &str = "True";
/// MachineSet label: the set must never create machines (old sets during an in-place
/// rollout). Value `"true"`; presence is what counts.
pub const SCALE_UP_DISABLED_LABEL: &str = "node.machine.sapcloud.io/scale-up-disabled";

/// Label keys the controllers write themselves, so no selector and no template label of a
/// MachineSet or MachineDeployment may use them (see
/// [`crate::validation::validate_machine_set`]; design: sets-and-deployments.md, "Labels the
/// controllers own"):
/// * on Machines: [`NODE_LABEL`] (the Node's name, right after CreateMachine and when a
///   deletion finds the Node), [`TEMPLATE_HASH_LABEL`] and [`NODE_UPDATE_RESULT_LABEL`] (an
///   in-place update moves a machine to the new set with the new set's hash and
///   `update-result=successful`, and strips `update-result` again);
/// * on MachineSets, which a MachineDeployment's selector selects and whose labels a
///   deployment's template labels become: [`TEMPLATE_HASH_LABEL`] (every set a deployment
///   creates), [`FREEZE_LABEL`] (the overshoot safety loop) and [`SCALE_UP_DISABLED_LABEL`]
///   (old sets of an in-place rollout);
/// * the in-place protocol's other labels, [`NODE_CANDIDATE_FOR_UPDATE_LABEL`] and
///   [`NODE_SELECTED_FOR_UPDATE_LABEL`] (written on Nodes; a Machine carrying them would only
///   mislead).
///
/// A selector on such a key stops selecting the set's own objects as soon as a controller
/// writes the label: each one would be released and replaced, without bound. Preservation
/// writes no label (an annotation and a Node taint only), so it has no key here.
pub const CONTROLLER_OWNED_LABELS: [&str; 7] = [
    NODE_LABEL,
    TEMPLATE_HASH_LABEL,
    NODE_UPDATE_RESULT_LABEL,
    NODE_CANDIDATE_FOR_UPDATE_LABEL,
    NODE_SELECTED_FOR_UPDATE_LABEL,
    FREEZE_LABEL,
    SCALE_UP_DISABLED_LABEL,
];

/// Whether the controllers own label `key` (it is one of [`CONTROLLER_OWNED_LABELS`]).
pub fn is_controller_owned_label(key: &str) -> bool {
    CONTROLLER_OWNED_LABELS.contains(&key)
}

// ---------------------------------------------------------------------------------------------
// Annotations on Machines, MachineSets, MachineDeployments
// ---------------------------------------------------------------------------------------------

/// Machine annotation: deletion priority on scale-down (`"1"` = delete first).
pub const PRIORITY_ANNOTATION: &str = "machinepriority.machine.sapcloud.io";
/// Default value of [`PRIORITY_ANNOTATION`], set by the machine controller on creation.
pub const DEFAULT_MACHINE_PRIORITY: &str = "3";
/// Value of [`PRIORITY_ANNOTATION`] that marks a machine for deletion first.
pub const MACHINE_PRIORITY_DELETE_FIRST: &str = "1";
/// Machine annotation: RFC3339 time when a scaler marked the machine for deletion.
pub const MARKED_FOR_DELETION_TIME_ANNOTATION: &str =
    "machine.sapcloud.io/marked-for-deletion-time";
/// MachineDeployment (copied to the new MachineSet) annotation: RFC3339 time of the last
/// replica change by a scaler.
pub const LAST_REPLICA_CHANGE_BY_SCALER_TIME_ANNOTATION: &str =
    "machine.sapcloud.io/last-deployment-replica-change-by-scaler-time";
/// MachineDeployment annotation written by the cluster-autoscaler MCM provider:
/// `machine1~time1,machine2~time2`.
pub const TRIGGER_DELETION_BY_MCM_ANNOTATION: &str =
    "node.machine.sapcloud.io/trigger-deletion-by-mcm";
/// Rollout revision of MachineDeployments and MachineSets.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// MachineSet annotation: comma list of previous revisions.
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// MachineSet annotation: MachineDeployment `spec.replicas` when the set was last scaled.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// MachineSet annotation: `spec.replicas + maxSurge` of the MachineDeployment.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// MachineSet annotation and Node taint key (value `"True"`, effect PreferNoSchedule) for old
/// sets' nodes during a rollout.
pub const PREFER_NO_SCHEDULE_KEY: &str = "deployment.machine.sapcloud.io/prefer-no-schedule";
/// Value of the [`PREFER_NO_SCHEDULE_KEY`] annotation and taint.
pub const PREFER_NO_SCHEDULE_VALUE: &str = "True";
/// Annotation on MachineDeployments / MachineSets asking the safety loop to unfreeze.
pub const UNFREEZE_ANNOTATION: &str = "safety.machine.sapcloud.io/unfreeze";
/// Annotation on MachineDeployments → MachineSets → Machines: Go duration that overrides
/// the template's `creationTimeout` for new machines.
pub const EFFECTIVE_CREATION_TIMEOUT_ANNOTATION: &str =
    "node.machine.sapcloud.io/effective-creation-timeout";
/// Machine annotation: how long the node took to join (Go duration, diagnostic only).
pub const MACHINE_JOIN_DURATION_ANNOTATION: &str = "node.machine.sapcloud.io/machine-join-duration";
/// Machine / Node annotation requesting preservation; values below.
pub const PRESERVE_ANNOTATION: &str = "node.machine.sapcloud.io/preserve";
/// [`PRESERVE_ANNOTATION`] value: preserve now, whatever the phase.
pub const PRESERVE_VALUE_NOW: &str = "now";
/// [`PRESERVE_ANNOTATION`] value: preserve if and when the machine fails.
pub const PRESERVE_VALUE_WHEN_FAILED: &str = "when-failed";
/// [`PRESERVE_ANNOTATION`] value: auto-preserved by the MachineSet controller.
pub const PRESERVE_VALUE_AUTO_PRESERVED: &str = "auto-preserved";
/// [`PRESERVE_ANNOTATION`] value: do not preserve / stop preserving.
pub const PRESERVE_VALUE_FALSE: &str = "false";
/// All valid values of [`PRESERVE_ANNOTATION`].
pub const PRESERVE_VALUES: [&str; 4] = [
    PRESERVE_VALUE_NOW,
    PRESERVE_VALUE_WHEN_FAILED,
    PRESERVE_VALUE_AUTO_PRESERVED,
    PRESERVE_VALUE_FALSE,
];
/// Machine annotation: the last node preserve value the controller applied.
pub const LAST_APPLIED_NODE_PRESERVE_VALUE_ANNOTATION: &str =
    "node.machine.sapcloud.io/last-applied-node-preserve-value";
/// mcm-rs: Machine annotation holding the providerSpec (canonical JSON) its
/// VM was created or last updated in place with; the name of the
/// reference's hot-update design (design: hot-update.md). Absent when the
/// spec is larger than [`LAST_APPLIED_PROVIDER_SPEC_MAX_BYTES`].
pub const LAST_APPLIED_PROVIDER_SPEC_ANNOTATION: &str =
    "node.machine.sapcloud.io/last-applied-providerspec";
/// mcm-rs: Machine annotation with `sha256:<hex>` of the canonical JSON of
/// that providerSpec, compared with the class's to find a pending hot update.
pub const LAST_APPLIED_PROVIDER_SPEC_HASH_ANNOTATION: &str =
    "node.machine.sapcloud.io/last-applied-providerspec-hash";
/// mcm-rs: Machine annotation naming the MachineClass whose providerSpec
/// is recorded in [`LAST_APPLIED_PROVIDER_SPEC_ANNOTATION`]; a machine moved
/// to another class (a rollout) adopts the new class's spec.
pub const LAST_APPLIED_PROVIDER_SPEC_CLASS_ANNOTATION: &str =
    "node.machine.sapcloud.io/last-applied-providerspec-class";
/// The largest canonical providerSpec recorded in
/// [`LAST_APPLIED_PROVIDER_SPEC_ANNOTATION`] (32 KiB); above it only the hash is kept.
pub const LAST_APPLIED_PROVIDER_SPEC_MAX_BYTES: usize = 32 * 1024;
/// mcm-rs: the Machine condition type saying whether the VM matches its
/// class's providerSpec (status `False`, reason `NeedsReplacement`, while
/// some change can only be made by a new VM; design: hot-update.md).
pub const HOT_UPDATE_CONDITION: &str = "HotUpdate";

// ---------------------------------------------------------------------------------------------
// Node labels, annotations and taints
// ---------------------------------------------------------------------------------------------

/// mcm-rs: the default startup taint (`NoSchedule`) a Node registers with and
/// the machine controller removes once the machine is initialized and its node
/// template is on the Node (design: startup-taint.md). `--node-startup-taint-key` changes it.
pub const STARTUP_TAINT_KEY: &str = "node.machine.sapcloud.io/not-initialized";

/// Node label holding the machine name.
pub const MACHINE_NAME_NODE_LABEL: &str = "node.gardener.cloud/machine-name";
/// Node annotation: JSON of the last applied nodeTemplate annotations, labels and taints.
pub const LAST_APPLIED_ALT_ANNOTATION: &str =
    "node.machine.sapcloud.io/last-applied-anno-labels-taints";
/// Node annotation: JSON of the last applied MachineClass nodeTemplate virtualCapacity.
pub const LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION: &str =
    "node.machine.sapcloud.io/last-applied-virtual-capacity";
/// Node annotation (value [`NOT_MANAGED_BY_MCM_VALUE`]) on nodes without a Machine.
pub const NOT_MANAGED_BY_MCM_ANNOTATION: &str = "node.machine.sapcloud.io/not-managed-by-mcm";
/// Value of [`NOT_MANAGED_BY_MCM_ANNOTATION`].
pub const NOT_MANAGED_BY_MCM_VALUE: &str = "1";
/// Node label of the in-place update protocol: candidate for update.
pub const NODE_CANDIDATE_FOR_UPDATE_LABEL: &str = "node.machine.sapcloud.io/candidate-for-update";
/// Node label of the in-place update protocol: selected for update.
pub const NODE_SELECTED_FOR_UPDATE_LABEL: &str = "node.machine.sapcloud.io/selected-for-update";
/// Node (and Machine) label of the in-place update protocol: result of the update.
pub const NODE_UPDATE_RESULT_LABEL: &str = "node.machine.sapcloud.io/update-result";
/// [`NODE_UPDATE_RESULT_LABEL`] value: the update succeeded.
pub const NODE_UPDATE_RESULT_SUCCESSFUL: &str = "successful";
/// [`NODE_UPDATE_RESULT_LABEL`] value: the update failed.
pub const NODE_UPDATE_RESULT_FAILED: &str = "failed";
/// Node annotation: why an in-place update failed.
pub const NODE_UPDATE_FAILED_REASON_ANNOTATION: &str =
    "node.machine.sapcloud.io/update-failed-reason";
/// Node annotation disabling cluster-autoscaler scale-down (value `"true"`).
pub const CA_SCALE_DOWN_DISABLED_ANNOTATION: &str =
    "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Node annotation recording that MCM set [`CA_SCALE_DOWN_DISABLED_ANNOTATION`] (value `"true"`).
pub const CA_SCALE_DOWN_DISABLED_BY_MCM_ANNOTATION: &str =
    "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm";
/// Value of the two cluster-autoscaler annotations above.
pub const CA_SCALE_DOWN_DISABLED_VALUE: &str = "true";
/// Gardener taint (NoSchedule) blocking Pending → Running; re-added after an in-place update.
pub const CRITICAL_COMPONENTS_NOT_READY_TAINT: &str =
    "node.gardener.cloud/critical-components-not-ready";
/// Taint (NoSchedule) cordoning the node of a preserved failed machine.
pub const PRESERVED_TAINT: &str = "node.machine.sapcloud.io/preserved";
/// Taints whose addition or removal requires an immediate machine reconcile.
pub const ESSENTIAL_TAINTS: [&str; 1] = [CRITICAL_COMPONENTS_NOT_READY_TAINT];

// ---------------------------------------------------------------------------------------------
// Node condition types and reasons
// ---------------------------------------------------------------------------------------------

/// Node condition `Ready`.
pub const NODE_READY_CONDITION: &str = "Ready";
/// Default of the `--node-conditions` flag: conditions that must be False.
pub const DEFAULT_NODE_CONDITIONS: &str =
    "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable";
/// Node condition `ReadonlyFilesystem` (forced drain after 5 minutes).
pub const NODE_READONLY_FILESYSTEM_CONDITION: &str = "ReadonlyFilesystem";
/// Node condition written by the controller on deletion (status True).
pub const NODE_TERMINATING_CONDITION: &str = "Terminating";
/// Reason of [`NODE_TERMINATING_CONDITION`] for failed (unhealthy) machines.
pub const NODE_TERMINATING_REASON_UNHEALTHY: &str = "Unhealthy";
/// Reason of [`NODE_TERMINATING_CONDITION`] for healthy machines removed by scale-down.
pub const NODE_TERMINATING_REASON_SCALE_DOWN: &str = "ScaleDown";
/// Node condition of the in-place update protocol.
pub const NODE_IN_PLACE_UPDATE_CONDITION: &str = "InPlaceUpdate";
/// [`NODE_IN_PLACE_UPDATE_CONDITION`] reason.
pub const IN_PLACE_CANDIDATE_FOR_UPDATE: &str = "CandidateForUpdate";
/// [`NODE_IN_PLACE_UPDATE_CONDITION`] reason.
pub const IN_PLACE_SELECTED_FOR_UPDATE: &str = "SelectedForUpdate";
/// [`NODE_IN_PLACE_UPDATE_CONDITION`] reason.
pub const IN_PLACE_READY_FOR_UPDATE: &str = "ReadyForUpdate";
/// [`NODE_IN_PLACE_UPDATE_CONDITION`] reason.
pub const IN_PLACE_DRAIN_SUCCESSFUL: &str = "DrainSuccessful";
/// [`NODE_IN_PLACE_UPDATE_CONDITION`] reason.
pub const IN_PLACE_UPDATE_SUCCESSFUL: &str = "UpdateSuccessful";
/// [`NODE_IN_PLACE_UPDATE_CONDITION`] reason.
pub const IN_PLACE_UPDATE_FAILED: &str = "UpdateFailed";
/// Node condition of the preservation feature.
pub const NODE_PRESERVED_CONDITION: &str = "Preserved";
/// [`NODE_PRESERVED_CONDITION`] reason/message.
pub const PRESERVED_BY_MCM: &str = "Preserved by MCM.";
/// [`NODE_PRESERVED_CONDITION`] reason/message.
pub const PRESERVED_BY_USER: &str = "Preserved by user.";
/// [`NODE_PRESERVED_CONDITION`] reason/message.
pub const PRESERVATION_STOPPED: &str = "Preservation stopped.";
/// [`NODE_PRESERVED_CONDITION`] message.
pub const PRESERVED_NODE_DRAIN_SUCCESSFUL: &str = "Preserved node drained successfully.";
/// [`NODE_PRESERVED_CONDITION`] message.
pub const PRESERVED_NODE_DRAIN_UNSUCCESSFUL: &str = "Preserved node could not be drained.";

// ---------------------------------------------------------------------------------------------
// lastOperation.description markers of the machine flows (order matters across restarts)
// ---------------------------------------------------------------------------------------------

/// Deletion step 1: status set to Terminating, next: get VM status.
pub const GET_VM_STATUS: &str = "Set machine status to termination. Now, getting VM Status";
/// Creation: next step is InitializeMachine of the created VM.
pub const INSTANCE_INITIALIZATION: &str = "Initialize VM Instance";
/// Deletion step 2: drain the node.
pub const INITIATE_DRAIN: &str = "Initiate node drain";
/// In-place update: node drained, ready for update.
pub const NODE_READY_FOR_UPDATE: &str = "Node drain successful. Node is ready for update";
/// Deletion step: delete volume attachments.
pub const DEL_VOLUMES_ATTACHMENTS: &str = "Delete Volume Attachments";
/// Deletion step 3: delete the VM.
pub const INITIATE_VM_DELETION: &str = "Initiate VM deletion";
/// Deletion step 4: delete the Node object.
pub const INITIATE_NODE_DELETION: &str = "Initiate node object deletion";
/// Deletion step 5: remove the machine finalizer.
pub const INITIATE_FINALIZER_REMOVAL: &str = "Initiate machine object finalizer removal";

// ---------------------------------------------------------------------------------------------
// MachineDeployment / MachineSet condition reasons and events
// ---------------------------------------------------------------------------------------------

/// Progressing reason: a MachineSet was updated during the rollout.
pub const MACHINE_SET_UPDATED_REASON: &str = "MachineSetUpdated";
/// ReplicaFailure reason: the new MachineSet could not be created.
pub const FAILED_MACHINE_SET_CREATE_REASON: &str = "MachineSetCreateError";
/// Progressing reason: a new MachineSet was created.
pub const NEW_MACHINE_SET_REASON: &str = "NewMachineSetCreated";
/// Progressing reason: an existing MachineSet was adopted as the new one.
pub const FOUND_NEW_MACHINE_SET_REASON: &str = "FoundNewMachineSet";
/// Progressing reason: the new MachineSet is available.
pub const NEW_MACHINE_SET_AVAILABLE_REASON: &str = "NewMachineSetAvailable";
/// Progressing reason: progressDeadlineSeconds exceeded.
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
/// Progressing reason: the deployment is paused.
pub const PAUSED_DEPLOYMENT_REASON: &str = "DeploymentPaused";
/// Progressing reason: the deployment was resumed.
pub const RESUMED_DEPLOYMENT_REASON: &str = "DeploymentResumed";
/// Available reason: minimum replicas available.
pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
/// Available reason: minimum replicas unavailable.
pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
/// Rollback event reason: revision not found.
pub const ROLLBACK_REVISION_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
/// Rollback event reason: template unchanged.
pub const ROLLBACK_TEMPLATE_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";
/// Rollback event reason: rolled back.
pub const ROLLBACK_DONE: &str = "DeploymentRollback";
/// Frozen reason: replica count overshoots.
pub const OVERSHOOTING_REPLICA_COUNT: &str = "OverShootingReplicaCount";
/// Frozen reason: inconsistent MachineDeployment state.
pub const MACHINE_DEPLOYMENT_STATE_SYNC: &str = "MachineDeploymentStateSync";
/// Unfreeze reason: replica count back under the limit.
pub const UNDERSHOOTING_REPLICA_COUNT: &str = "UnderShootingReplicaCount";
/// Unfreeze reason: the unfreeze annotation was set.
pub const UNFREEZE_ANNOTATION_REASON: &str = "UnfreezeAnnotation";
/// Event reason: a MachineSet was frozen.
pub const MACHINE_SET_FREEZE_EVENT: &str = "FrozeMachineSet";
/// Event reason: a MachineSet was unfrozen.
pub const MACHINE_SET_UNFREEZE_EVENT: &str = "UnfrozeMachineSet";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_the_reference_strings() {
        assert_eq!(
            MCM_FINALIZER,
            "machine.sapcloud.io/machine-controller-manager"
        );
        assert_eq!(
            MC_SECRET_FINALIZER,
            "machine.sapcloud.io/machine-controller"
        );
        assert_eq!(
            NODE_FINALIZER,
            "node.machine.sapcloud.io/machine-controller"
        );
        assert_eq!(NODE_LABEL, "node");
        assert_eq!(PRIORITY_ANNOTATION, "machinepriority.machine.sapcloud.io");
        assert_eq!(TEMPLATE_HASH_LABEL, "machine-template-hash");
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }
}
