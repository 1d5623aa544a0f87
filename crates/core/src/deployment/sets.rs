//! The MachineSet views of the deployment controller and the new/old partition.

use super::*;

/// The status numbers of a MachineSet the rollout looks at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetStatusView {
    /// `status.replicas` (machines that exist, any phase).
    pub replicas: i32,
    /// `status.fullyLabeledReplicas`.
    pub fully_labeled_replicas: i32,
    /// `status.readyReplicas`.
    pub ready_replicas: i32,
    /// `status.availableReplicas`.
    pub available_replicas: i32,
    /// `status.preservedFailedReplicas`.
    pub preserved_failed_replicas: i32,
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// The set's `ReplicaFailure` condition, if any.
    pub replica_failure: Option<MachineSetCondition>,
    /// The set's `failedMachines`.
    pub failed_machines: Vec<MachineSummary>,
}

/// What the rollout needs to know about one MachineSet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp`.
    pub created: Option<DateTime<Utc>>,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// `metadata.generation`.
    pub generation: i64,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// The controller ownerReference.
    pub controller: Option<ControllerRef>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.template`.
    pub template: MachineTemplateSpec,
    /// The status numbers.
    pub status: SetStatusView,
}

impl SetView {
    /// The view of an API MachineSet.
    pub fn from_set(ms: &MachineSet) -> SetView {
        let meta = &ms.metadata;
        let st = ms.status.clone().unwrap_or_default();
        SetView {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            created: meta.creation_timestamp.as_ref().map(from_k8s),
            deleting: meta.deletion_timestamp.is_some(),
            generation: meta.generation.unwrap_or(0),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            controller: controller_ref(meta),
            replicas: ms.spec.replicas,
            template: ms.spec.template.clone(),
            status: SetStatusView {
                replicas: st.replicas,
                fully_labeled_replicas: st.fully_labeled_replicas,
                ready_replicas: st.ready_replicas,
                available_replicas: st.available_replicas,
                preserved_failed_replicas: st.preserved_failed_replicas,
                observed_generation: st.observed_generation,
                replica_failure: st
                    .conditions
                    .iter()
                    .find(|c| c.type_ == MachineSetConditionType::ReplicaFailure)
                    .cloned(),
                failed_machines: st.failed_machines.unwrap_or_default(),
            },
        }
    }

    pub(super) fn is_active(&self) -> bool {
        self.replicas > 0
    }

    pub(super) fn int_annotation(&self, key: &str) -> Option<i32> {
        self.annotations
            .get(key)
            .and_then(|v| v.trim().parse().ok())
    }
}

/// Creation order: older first, then by name.
pub(super) fn by_creation(a: &SetView, b: &SetView) -> Ordering {
    a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name))
}

/// The owned sets split into the new one (if any) and the old ones (indexes
/// into the input slice; old ones oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partition {
    /// The oldest set whose template equals the deployment's (`FindNewMachineSet`).
    pub new: Option<usize>,
    /// All other sets, oldest first.
    pub old: Vec<usize>,
}

/// Splits the owned sets into new and old (design: sets-and-deployments.md, "New and
/// old MachineSets").
pub fn partition(template: &MachineTemplateSpec, sets: &[SetView]) -> Partition {
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.sort_by(|&a, &b| by_creation(&sets[a], &sets[b]));
    let new = order
        .iter()
        .copied()
        .find(|&i| equal_ignore_hash(&sets[i].template, template));
    let old = order.into_iter().filter(|&i| Some(i) != new).collect();
    Partition { new, old }
}
