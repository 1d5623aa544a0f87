//! Volumes during a drain: when the persistent volumes of an evicted pod
//! count as re-attached elsewhere (design: machine.md, "Drain").
//!
//! After a pod's volumes detached from the drained Node, the drain waits up
//! to `--machine-pv-reattach-timeout` until each of its PersistentVolumes is
//! attached to another Node (its replacement pod runs there), as the
//! reference's `waitForReattach`. The timeout is not an error: the drain
//! goes on with the next pod.

use k8s_openapi::api::storage::v1::VolumeAttachment;

/// Whether `va` shows `pv` attached to a Node other than `drained_node`.
pub fn reattached_elsewhere(va: &VolumeAttachment, pv: &str, drained_node: &str) -> bool {
    va.spec.source.persistent_volume_name.as_deref() == Some(pv)
        && va.spec.node_name != drained_node
        && va.status.as_ref().is_some_and(|s| s.attached)
}

/// The PersistentVolumes of `pvs` not yet attached to another Node than
/// `drained_node`, by the VolumeAttachments seen now. Empty: the wait is over.
pub fn awaiting_reattachment(
    pvs: &[String],
    attachments: &[VolumeAttachment],
    drained_node: &str,
) -> Vec<String> {
    pvs.iter()
        .filter(|pv| {
            !attachments
                .iter()
                .any(|va| reattached_elsewhere(va, pv, drained_node))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::storage::v1::{
        VolumeAttachmentSource, VolumeAttachmentSpec, VolumeAttachmentStatus,
    };

    fn va(pv: &str, node: &str, attached: bool) -> VolumeAttachment {
        VolumeAttachment {
            spec: VolumeAttachmentSpec {
                attacher: "csi.example".into(),
                node_name: node.into(),
                source: VolumeAttachmentSource {
                    persistent_volume_name: Some(pv.into()),
                    ..Default::default()
                },
            },
            status: Some(VolumeAttachmentStatus {
                attached,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pvs(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn a_volume_counts_as_reattached_once_attached_to_another_node() {
        let wanted = pvs(&["pv-a", "pv-b"]);
        // Still on the drained node, or attaching elsewhere: both wait.
        let now = [va("pv-a", "old", true), va("pv-b", "new", false)];
        assert_eq!(awaiting_reattachment(&wanted, &now, "old"), wanted);
        // pv-a attached elsewhere: only pv-b waits.
        let now = [va("pv-a", "new", true), va("pv-b", "new", false)];
        assert_eq!(awaiting_reattachment(&wanted, &now, "old"), pvs(&["pv-b"]));
        let now = [va("pv-a", "new", true), va("pv-b", "other", true)];
        assert!(awaiting_reattachment(&wanted, &now, "old").is_empty());
    }

    #[test]
    fn attachments_of_other_volumes_do_not_count() {
        let wanted = pvs(&["pv-a"]);
        let now = [va("pv-x", "new", true)];
        assert_eq!(awaiting_reattachment(&wanted, &now, "old"), wanted);
        let mut inline = va("pv-a", "new", true);
        inline.spec.source.persistent_volume_name = None;
        assert_eq!(awaiting_reattachment(&wanted, &[inline], "old"), wanted);
    }

    #[test]
    fn a_pod_without_persistent_volumes_waits_for_nothing() {
        assert!(awaiting_reattachment(&[], &[], "old").is_empty());
    }
}
