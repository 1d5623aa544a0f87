//! UpdateMachine on Compute: the plan of `super::update_plan`, one call and
//! its zone operation per part, each skipped when the instance matches.

use super::{in_place_changes, metadata_items, update_plan};
use crate::driver::{machine_name, provider_id, Check, GcpDriver, Location};
use crate::errors::GceError;
use crate::spec::GcpProviderSpec;
use google_cloud_compute_v1::model::{InstancesSetLabelsRequest, Metadata, Tags};
use mcm_driver::{Code, DriverResult, Status, UpdateMachineRequest, UpdateMachineResponse};
use tracing::info;

/// The machine status of a failed update call: a value Compute rejects (400)
/// is `InvalidArgument` and a stale fingerprint (412, the instance changed
/// since it was read) `Aborted`, both with Compute's message; everything
/// else as the other calls.
pub fn update_status(ctx: &str, e: &GceError) -> Status {
    let code = match e.http_status() {
        Some(400) => Code::InvalidArgument,
        Some(412) => Code::Aborted,
        _ => e.code(),
    };
    Status::new(code, format!("{ctx} failed: {e}"))
}

impl GcpDriver {
    pub(crate) async fn update(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        let name = machine_name(&req.machine)?;
        let ctx = format!("Update machine {name:?}");
        // A class that no longer validates is reported, not applied
        // (prepare makes no cloud call).
        let p = self
            .prepare(&ctx, &req.machine_class, &req.secret, Check::Full)
            .await?;
        let changes = in_place_changes(
            &req.last_applied_provider_spec,
            &req.machine_class.provider_spec,
        );
        if !changes.need_replacement.is_empty() {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "{ctx} failed: these providerSpec changes need a new instance, nothing was changed: {}",
                    changes.need_replacement.join(", ")
                ),
            ));
        }
        // A last-applied spec that no longer decodes manages nothing: the
        // class's values are set, nothing is removed.
        let last = GcpProviderSpec::from_json(&req.last_applied_provider_spec).unwrap_or_default();
        let at = Location::of(&p, &req.machine.spec.provider_id);
        let (project, zone) = (at.project.as_str(), at.zone.as_str());
        let instance = self
            .find(&p, &at, name)
            .await
            .map_err(|e| update_status(&ctx, &e))?
            .ok_or_else(|| {
                Status::not_found(format!("{ctx} failed: machine name={name} not found"))
            })?;
        let plan = update_plan(&p.spec, &last, &instance)
            .map_err(|m| Status::new(Code::FailedPrecondition, format!("{ctx} failed: {m}")))?;
        let fail = |e: GceError| update_status(&ctx, &e);
        let c = &p.compute;
        if let Some(labels) = &plan.labels {
            let mut body = InstancesSetLabelsRequest::new().set_labels(labels.clone());
            if let Some(f) = instance.label_fingerprint.clone() {
                body = body.set_label_fingerprint(f);
            }
            let op = c
                .set_labels(project, zone, name, body)
                .await
                .map_err(fail)?;
            c.wait("instances.setLabels", project, zone, op)
                .await
                .map_err(fail)?;
            info!(labels = labels.len(), "labels set");
        }
        if let Some(tags) = &plan.tags {
            let mut body = Tags::new().set_items(tags.clone());
            if let Some(f) = instance.tags.as_ref().and_then(|t| t.fingerprint.clone()) {
                body = body.set_fingerprint(f);
            }
            let op = c.set_tags(project, zone, name, body).await.map_err(fail)?;
            c.wait("instances.setTags", project, zone, op)
                .await
                .map_err(fail)?;
            info!(tags = ?tags, "network tags set");
        }
        if let Some(items) = &plan.metadata {
            let mut body = Metadata::new().set_items(metadata_items(items));
            if let Some(f) = instance
                .metadata
                .as_ref()
                .and_then(|m| m.fingerprint.clone())
            {
                body = body.set_fingerprint(f);
            }
            let op = c
                .set_metadata(project, zone, name, body)
                .await
                .map_err(fail)?;
            c.wait("instances.setMetadata", project, zone, op)
                .await
                .map_err(fail)?;
            // Only the keys: values may be secrets, and the user data is one.
            info!(
                keys = ?items.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
                "metadata set"
            );
        }
        for (disk, size_gb) in &plan.resize {
            let op = c
                .resize_disk(project, zone, disk, *size_gb)
                .await
                .map_err(fail)?;
            c.wait("disks.resize", project, zone, op)
                .await
                .map_err(fail)?;
            info!(disk = %disk, size_gb, "disk grown");
        }
        Ok(UpdateMachineResponse {
            last_known_state: if plan.is_empty() {
                String::new()
            } else {
                format!("Updated {}", provider_id(project, zone, name))
            },
        })
    }
}
