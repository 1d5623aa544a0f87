//! CreateMachine: adopt, image terms, subnet, NIC, image disks, VM.

use crate::arm::models::{self as m, ImageDiskReference, Plan};
use crate::arm::ArmError;
use crate::body::{self, VmInputs};
use crate::driver::{AzureDriver, Ctx};
use crate::names;
use k8s_openapi::api::core::v1::NodeAddress;
use mcm_driver::{Code, CreateMachineRequest, CreateMachineResponse, DriverResult, Status};
use std::collections::BTreeMap;
use tracing::{info, warn};

/// Whether `vm_tags` carry the class's cluster tag and, if the class has
/// one, its role tag (what the Go provider writes onto a VM).
fn carries_cluster_tags(
    class_tags: &std::collections::BTreeMap<String, String>,
    vm_tags: &std::collections::BTreeMap<String, String>,
) -> bool {
    let wanted: Vec<&String> = class_tags
        .keys()
        .filter(|k| {
            k.starts_with(names::CLUSTER_TAG_PREFIX) || k.starts_with(names::ROLE_TAG_PREFIX)
        })
        .collect();
    wanted
        .iter()
        .any(|k| k.starts_with(names::CLUSTER_TAG_PREFIX))
        && wanted.iter().all(|k| vm_tags.contains_key(k.as_str()))
}

fn response(ctx: &Ctx, vm: &str, ip: Option<String>) -> CreateMachineResponse {
    let mut addresses = vec![NodeAddress {
        type_: "Hostname".into(),
        address: vm.to_string(),
    }];
    if let Some(ip) = ip {
        addresses.push(NodeAddress {
            type_: "InternalIP".into(),
            address: ip,
        });
    }
    CreateMachineResponse {
        provider_id: names::provider_id(&ctx.spec.location, vm),
        node_name: vm.to_string(),
        last_known_state: String::new(),
        addresses,
    }
}

fn nic_ip(nic: &m::NetworkInterface) -> Option<String> {
    nic.properties
        .ip_configurations
        .iter()
        .find_map(|c| c.properties.private_ip_address.clone())
}

impl AzureDriver {
    pub(crate) async fn create(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let mut ctx = self.context(&req.machine_class, &req.secret)?;
        // The Machine's identity goes onto the VM, its NIC and disks with the
        // spec's tags (docs/design/safety.md, "VM identity").
        if let Some(owner) = mcm_driver::MachineOwner::of(&req.machine) {
            ctx.spec.tags.extend(owner.tags(mcm_driver::TagStyle::Dash));
        }
        let _permit = self
            .creates
            .acquire()
            .await
            .map_err(|_| Status::new(Code::Unavailable, "the driver is shutting down"))?;
        let vm = req.machine.metadata.name.clone().unwrap_or_default();
        let uid = req.machine.metadata.uid.clone().unwrap_or_default();
        let rg = ctx.spec.resource_group.clone();

        // A VM of this name is adopted when it carries this Machine's
        // identity (a retried create after a crash or a lost answer) or, with
        // no identity, the class's cluster and role tags (the Go provider's
        // VM of this machine); any other is refused, never updated
        // (docs/design/safety.md, "Adoption on a retried create").
        // A failed create deletes the VM and what was made for it, but not
        // when a VM of ours was there before in a state other than `Failed`
        // (it may be serving, or still being made by an earlier try).
        let mut may_clean_up = true;
        match ctx.arm.get_vm(&rg, &vm).await {
            Ok(Some(existing)) => {
                let carried = mcm_driver::adoption::Carried {
                    owner: mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Dash, |k| {
                        existing.tags.get(k).map(String::as_str)
                    }),
                    uid: existing.tags.get(names::MACHINE_UID_TAG).cloned(),
                    cluster_tags: carries_cluster_tags(&ctx.spec.tags, &existing.tags),
                };
                let why = mcm_driver::adoption::decide(&req.machine, &vm, &carried).inspect_err(|e| {
                    warn!(machine = %vm, resource_group = %rg, error = %e.message, "a VM of this name is not this machine's");
                })?;
                if existing.provisioning_state() == Some("Succeeded") {
                    info!(machine = %vm, resource_group = %rg, reason = why.as_str(), "adopting the VM of this machine's name");
                    return Ok(response(&ctx, &vm, None));
                }
                warn!(machine = %vm, resource_group = %rg, state = ?existing.provisioning_state(),
                    "this machine's VM exists but is not provisioned; creating it again");
                may_clean_up = existing.provisioning_state() == Some("Failed");
            }
            Ok(None) => {}
            Err(e) => {
                return Err(lookup(
                    e,
                    &format!("Failed to get VM: [ResourceGroup: {rg}, Name: {vm}]"),
                ))
            }
        }

        let plan = self.image_plan(&ctx, &vm).await?;
        let vnet_rg = ctx.spec.vnet_resource_group().to_string();
        let si = &ctx.spec.subnet_info;
        let subnet = match ctx
            .arm
            .get_subnet(&vnet_rg, &si.vnet_name, &si.subnet_name)
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(Status::internal(format!(
                    "Subnet: [ResourceGroup: {vnet_rg}, VNet: {}, Name: {}] is not found",
                    si.vnet_name, si.subnet_name
                )))
            }
            Err(e) => return Err(lookup(e, "failed to get subnet")),
        };

        // From here on resources are made: whatever fails leaves none of
        // them behind (docs/design/providers/azure.md, "Clean-up").
        match self.provision(&ctx, &vm, &uid, &subnet.id, plan).await {
            Ok(ip) => {
                info!(machine = %vm, resource_group = %rg, location = %ctx.spec.location, "created VM with its NIC and disks");
                Ok(response(&ctx, &vm, ip))
            }
            Err(status) if !may_clean_up => {
                warn!(machine = %vm, resource_group = %rg, error = %status.message,
                    "creating over the existing VM failed; leaving it and its resources for the retry or DeleteMachine");
                Err(status)
            }
            Err(status) => {
                warn!(machine = %vm, resource_group = %rg, error = %status.message,
                    "creation failed; deleting what was made for the machine");
                match self.cleanup(&ctx, &vm, true, &[]).await {
                    Ok(()) => Err(status),
                    Err(c) => {
                        warn!(machine = %vm, error = %c.message, "cleanup after the failed creation failed; the next create or DeleteMachine retries it");
                        Err(Status::new(
                            status.code,
                            format!("{}; cleanup: {}", status.message, c.message),
                        ))
                    }
                }
            }
        }
    }

    /// The NIC (reused when it exists), the disks made from images and the
    /// VM; answers the NIC's private IP.
    async fn provision(
        &self,
        ctx: &Ctx,
        vm: &str,
        uid: &str,
        subnet_id: &str,
        plan: Option<Plan>,
    ) -> Result<Option<String>, Status> {
        let rg = &ctx.spec.resource_group;
        let nic_name = names::nic_name(vm);
        let nic = match ctx.arm.get_nic(rg, &nic_name).await {
            Ok(Some(n)) => n,
            Ok(None) => {
                let body = body::nic(&ctx.spec, &nic_name, subnet_id, uid);
                ctx.arm.put_nic(rg, &nic_name, &body).await.map_err(|e| {
                    e.to_status(&format!(
                        "failed to create NIC: [ResourceGroup: {rg}, Name: {nic_name}]"
                    ))
                })?
            }
            Err(e) => {
                return Err(lookup(
                    e,
                    &format!("Failed to get NIC: [ResourceGroup: {rg}, Name: {nic_name}]"),
                ))
            }
        };
        let nic_id = nic.id.clone().unwrap_or_default();

        let image_disks = self.create_image_disks(ctx, vm).await?;
        let body = body::vm(
            &ctx.spec,
            VmInputs {
                vm_name: vm,
                nic_id: &nic_id,
                user_data: &ctx.creds.user_data,
                plan,
                image_disks,
                machine_uid: uid,
            },
        );
        ctx.arm.put_vm(rg, vm, &body).await.map_err(|e| {
            e.to_status(&format!(
                "Failed to create VirtualMachine: [ResourceGroup: {rg}, Name: {vm}]"
            ))
        })?;
        Ok(nic_ip(&nic))
    }

    /// For a marketplace URN (unless skipped): the image's plan, after
    /// accepting its terms when they are not accepted yet.
    async fn image_plan(&self, ctx: &Ctx, vm: &str) -> Result<Option<Plan>, Status> {
        let r = &ctx.spec.properties.storage_profile.image_reference;
        let Some(urn) = r.urn.as_deref().filter(|u| !u.trim().is_empty()) else {
            return Ok(None);
        };
        if r.skip_marketplace_agreement {
            return Ok(None);
        }
        let p: Vec<&str> = urn.split(':').collect();
        let [publisher, offer, sku, version] = p.as_slice() else {
            return Err(Status::invalid_argument(format!("invalid urn {urn}")));
        };
        let image = ctx
            .arm
            .get_vm_image(&ctx.spec.location, publisher, offer, sku, version)
            .await
            .map_err(|e| lookup(e, &format!("failed to get VM image {urn} for VM {vm}")))?
            .ok_or_else(|| {
                Status::not_found(format!("VM image {urn} not found in {}", ctx.spec.location))
            })?;
        let Some(plan) = image.properties.plan else {
            return Ok(None);
        };
        let agreement = ctx
            .arm
            .get_agreement(&plan.publisher, &plan.product, &plan.name)
            .await
            .map_err(|e| lookup(e, "failed to get the marketplace agreement"))?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no marketplace agreement for plan {}/{}/{}",
                    plan.publisher, plan.product, plan.name
                ))
            })?;
        let accepted = agreement
            .pointer("/properties/accepted")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if !accepted {
            let mut agreement = agreement;
            if let Some(props) = agreement
                .get_mut("properties")
                .and_then(|p| p.as_object_mut())
            {
                props.insert("accepted".into(), serde_json::Value::Bool(true));
            }
            ctx.arm
                .put_agreement(&plan.publisher, &plan.product, &plan.name, &agreement)
                .await
                .map_err(|e| e.to_status("failed to accept the marketplace agreement"))?;
        }
        Ok(Some(Plan {
            name: plan.name,
            publisher: plan.publisher,
            product: plan.product,
        }))
    }

    /// Data disks with an `imageRef` are created before the VM and attached.
    async fn create_image_disks(
        &self,
        ctx: &Ctx,
        vm: &str,
    ) -> Result<BTreeMap<i64, String>, Status> {
        let mut out = BTreeMap::new();
        let rg = &ctx.spec.resource_group;
        for d in &ctx.spec.properties.storage_profile.data_disks {
            let Some(r) = &d.image_ref else { continue };
            let name = names::data_disk_name(vm, &d.name, d.lun);
            let (image, gallery) = if !r.id.trim().is_empty() {
                (
                    ImageDiskReference {
                        id: Some(r.id.clone()),
                        ..Default::default()
                    },
                    false,
                )
            } else if let Some(s) = r.shared_gallery_image_id.clone().filter(|s| !s.is_empty()) {
                (
                    ImageDiskReference {
                        shared_gallery_image_id: Some(s),
                        ..Default::default()
                    },
                    true,
                )
            } else if let Some(c) = r
                .community_gallery_image_id
                .clone()
                .filter(|s| !s.is_empty())
            {
                (
                    ImageDiskReference {
                        community_gallery_image_id: Some(c),
                        ..Default::default()
                    },
                    true,
                )
            } else {
                let urn = r.urn.clone().unwrap_or_default();
                let p: Vec<&str> = urn.split(':').collect();
                let [publisher, offer, sku, version] = p.as_slice() else {
                    return Err(Status::invalid_argument(format!("invalid urn {urn}")));
                };
                let img = ctx
                    .arm
                    .get_vm_image(&ctx.spec.location, publisher, offer, sku, version)
                    .await
                    .map_err(|e| lookup(e, &format!("failed to get VM image {urn}")))?
                    .ok_or_else(|| Status::not_found(format!("VM image {urn} not found")))?;
                (
                    ImageDiskReference {
                        id: Some(img.id),
                        ..Default::default()
                    },
                    false,
                )
            };
            let disk = body::image_disk(&ctx.spec, d, image, gallery);
            let created = ctx.arm.put_disk(rg, &name, &disk).await.map_err(|e| {
                e.to_status(&format!(
                    "Failed to create Disk: [ResourceGroup: {rg}, Name: {name}]"
                ))
            })?;
            out.insert(d.lun, created.id.unwrap_or_default());
        }
        Ok(out)
    }
}

/// A failed look-up never reads as "not found" or "exhausted" (that would
/// make the controller create elsewhere or again): `Internal`, or
/// `Unavailable`/`Unauthenticated`/`PermissionDenied` as the error says.
pub(crate) fn lookup(e: ArmError, context: &str) -> Status {
    let mut s = e.to_status(context);
    if matches!(s.code, Code::ResourceExhausted | Code::NotFound) {
        s.code = Code::Internal;
    }
    s
}
