//! ListMachines (every VM of the class's cluster) and GetVolumeIDs (EBS
//! volume IDs of PersistentVolume specs).

use super::status::provider_id;
use super::{tag_keys, AwsDriver};
use crate::ec2::tag_value;
use mcm_driver::{
    DriverResult, GetVolumeIdsRequest, ListMachinesRequest, ListMachinesResponse, MachineOwner,
    TagStyle,
};
use tracing::warn;

/// The EBS CSI driver name.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

impl AwsDriver {
    pub(super) async fn list(
        &self,
        req: &ListMachinesRequest,
    ) -> DriverResult<ListMachinesResponse> {
        let p = self.prepare_existing(&req.machine_class, &req.secret, "")?;
        let (cluster, role) = tag_keys(&p.spec)?;
        let instances = p
            .ec2
            .instances_by_tags(cluster, role)
            .await
            .map_err(|e| e.lookup_status("listing VMs"))?;
        let mut resp = ListMachinesResponse::default();
        for i in &instances {
            let Some(id) = i.instance_id() else {
                continue;
            };
            // The instance ID names the VM; its tags carry the identity.
            let owner = MachineOwner::from_tags(TagStyle::Slash, |k| tag_value(i, k));
            resp.insert(
                provider_id(&p.spec.region, id),
                tag_value(i, "Name").unwrap_or_default().to_string(),
                id.to_string(),
                owner,
            );
        }
        Ok(resp)
    }
}

/// The EBS volume ID of an in-tree `awsElasticBlockStore` volume ID
/// (`aws://<zone>/vol-x`, `aws:///vol-x` or `vol-x`).
pub fn ebs_volume_id(raw: &str) -> Option<String> {
    let id = if let Some(rest) = raw.strip_prefix("aws://") {
        rest.rsplit('/').next().unwrap_or_default()
    } else if raw.contains("://") {
        return None;
    } else {
        raw
    };
    (id.starts_with("vol-") && !id.contains('/')).then(|| id.to_string())
}

pub(super) fn volume_ids(req: &GetVolumeIdsRequest) -> Vec<String> {
    let mut out = Vec::new();
    for pv in &req.pv_specs {
        if let Some(csi) = &pv.csi {
            if csi.driver == EBS_CSI_DRIVER && !csi.volume_handle.is_empty() {
                out.push(csi.volume_handle.clone());
            }
        } else if let Some(ebs) = &pv.aws_elastic_block_store {
            match ebs_volume_id(&ebs.volume_id) {
                Some(id) => out.push(id),
                None => {
                    warn!(volume_id = %ebs.volume_id, "cannot read the EBS volume ID; skipping")
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, PersistentVolumeSpec,
    };

    #[test]
    fn volume_ids_from_csi_and_in_tree_specs() {
        let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: handle.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let tree = |id: &str| PersistentVolumeSpec {
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: id.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = GetVolumeIdsRequest {
            pv_specs: vec![
                csi("ebs.csi.aws.com", "vol-1"),
                csi("other.csi", "x"),
                csi("ebs.csi.aws.com", ""),
                tree("aws://eu-east-2b/vol-2"),
                tree("aws:///vol-3"),
                tree("vol-4"),
                tree("gce://x/vol-5"),
                tree("aws://zone/disk-6"),
                PersistentVolumeSpec::default(),
            ],
        };
        assert_eq!(volume_ids(&req), vec!["vol-1", "vol-2", "vol-3", "vol-4"]);
    }
}
