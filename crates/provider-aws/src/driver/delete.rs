//! DeleteMachine: terminate the machine's VMs; what the spec marks
//! `deleteOnTermination: false` stays.

use super::status::decode_provider_id;
use super::{machine_name, tag_keys, AwsDriver};
use crate::ec2::is_live;
use aws_sdk_ec2::types::Instance;
use mcm_driver::{DeleteMachineRequest, DeleteMachineResponse, DriverResult};
use std::collections::BTreeSet;
use tracing::{debug, info};

impl AwsDriver {
    pub(super) async fn delete(
        &self,
        req: &DeleteMachineRequest,
    ) -> DriverResult<DeleteMachineResponse> {
        let p = self.prepare_existing(
            &req.machine_class,
            &req.secret,
            &req.machine.spec.provider_id,
        )?;
        let name = machine_name(&req.machine)?;
        let (cluster, role) = tag_keys(&p.spec)?;
        let pid = &req.machine.spec.provider_id;
        let ec2 = if pid.is_empty() {
            p.ec2.clone()
        } else {
            self.ec2_for_vm(&p, pid)?
        };
        if !pid.is_empty() && !p.spec.keeps_resources_after_termination() {
            // The VM is known and nothing of it is to be reported as kept:
            // terminate it without describing it first, as the reference
            // does (terminating a terminated or unknown instance is success).
            // Should that fail, the look-up below decides (some EC2-compatible
            // clouds refuse to terminate an instance that is already gone).
            let id = decode_provider_id(pid)?;
            self.launched.forget(&id);
            match ec2.terminate_if_known(&id).await {
                Ok(true) => {
                    info!(instance_id = %id, "VM terminated");
                    return Ok(DeleteMachineResponse::default());
                }
                Ok(false) => {
                    // Gone, unless these credentials cannot see it.
                    self.confirm_gone(&p, &id, name).await?;
                    debug!(instance_id = %id, "VM already gone");
                    return Ok(DeleteMachineResponse::default());
                }
                Err(e) => {
                    debug!(instance_id = %id, error = %e, "terminating without a look-up failed; looking the VM up")
                }
            }
        }
        let instances: Vec<Instance> = if pid.is_empty() {
            ec2.instances_by_name(cluster, role, name)
                .await
                .map_err(|e| e.lookup_status(&format!("looking up the VM of machine {name}")))?
        } else {
            let id = decode_provider_id(pid)?;
            let found = ec2
                .instance_by_id(&id)
                .await
                .map_err(|e| e.lookup_status(&format!("looking up VM {id} of machine {name}")))?;
            if found.is_none() {
                self.confirm_gone(&p, &id, name).await?;
            }
            found.into_iter().collect()
        };
        let mut retained = Retained::default();
        for i in &instances {
            let id = i.instance_id().unwrap_or_default();
            retained.collect(i);
            if is_live(i) {
                ec2.terminate(id)
                    .await
                    .map_err(|e| e.status(&format!("terminating VM {id} of machine {name}")))?;
                info!(instance_id = id, "VM terminated");
            } else {
                debug!(instance_id = id, "VM already shutting down or terminated");
            }
        }
        if instances.is_empty() {
            debug!("no VM backs the machine; nothing to terminate");
        }
        if !retained.volumes.is_empty() || !retained.enis.is_empty() {
            // deleteOnTermination: false is the user's wish to keep the data:
            // the volumes and interfaces stay, with the tags they were created
            // with (the spec's tags and Name=<machine>), as the reference does.
            info!(
                volumes = ?retained.volumes,
                network_interfaces = ?retained.enis,
                "kept the volumes and network interfaces marked deleteOnTermination: false"
            );
        }
        Ok(DeleteMachineResponse::default())
    }
}

/// What a terminated instance leaves behind on purpose.
#[derive(Default)]
struct Retained {
    volumes: BTreeSet<String>,
    enis: BTreeSet<String>,
}

impl Retained {
    fn collect(&mut self, i: &Instance) {
        for bd in i.block_device_mappings() {
            if let Some(ebs) = bd.ebs() {
                if ebs.delete_on_termination() == Some(false) {
                    if let Some(v) = ebs.volume_id() {
                        self.volumes.insert(v.to_string());
                    }
                }
            }
        }
        for n in i.network_interfaces() {
            if n.attachment().and_then(|a| a.delete_on_termination()) == Some(false) {
                if let Some(id) = n.network_interface_id() {
                    self.enis.insert(id.to_string());
                }
            }
        }
    }
}
