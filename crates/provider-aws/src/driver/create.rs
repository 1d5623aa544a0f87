//! CreateMachine: adopt the machine's VM or launch one with an idempotent
//! ClientToken, then wait until EC2 lists it.

use super::status::{identity, provider_id};
use super::{machine_name, multiple_vms, tag_keys, AwsDriver, Prepared};
use crate::ec2::is_live;
use crate::launch::{run_instances_request, LaunchInput, PLACEMENT_ANNOTATION};
use crate::spec::{secret_value, AwsProviderSpec, SECRET_USER_DATA};
use aws_sdk_ec2::types::Instance;
use base64::Engine;
use mcm_api::Machine;
use mcm_driver::{CreateMachineRequest, CreateMachineResponse, DriverResult, Status};
use std::hash::{DefaultHasher, Hash, Hasher};
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// How many client-token generations a create tries when the earlier
/// tokens of the machine already belong to terminated instances.
const MAX_TOKEN_GENERATIONS: u32 = 4;

impl AwsDriver {
    pub(super) async fn create(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let key = client_token(&req.machine, 0);
        let _same_machine = self.creating.lock(&key).await;
        self.create_locked(req).await
    }

    async fn create_locked(
        &self,
        req: &CreateMachineRequest,
    ) -> DriverResult<CreateMachineResponse> {
        let mut p = self.prepare(&req.machine_class, &req.secret, true)?;
        // The Machine's identity goes onto the instance, its volumes and
        // interfaces with the spec's tags (docs/design/safety.md, "VM identity").
        if let Some(owner) = mcm_driver::MachineOwner::of(&req.machine) {
            p.spec.tags.extend(owner.tags(mcm_driver::TagStyle::Slash));
        }
        let name = machine_name(&req.machine)?;
        let (cluster, role) = tag_keys(&p.spec)?;
        let user_data = secret_value(&req.secret, SECRET_USER_DATA)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Status::invalid_argument(
                    "secretRef.userData: Required value: userData doesn't exist",
                )
            })?;
        let user_data = base64::engine::general_purpose::STANDARD.encode(user_data);

        let _permit = self
            .create_permits
            .acquire()
            .await
            .map_err(|_| Status::internal("create semaphore closed"))?;

        // A retried create adopts the VM of an earlier attempt (EC2-compatible
        // clouds may ignore ClientToken; AWS also answers by token below),
        // unless the status probe just looked by name and found none: then
        // the ClientToken alone keeps a retry from making a second VM.
        let existing = if self.absent.take(&client_token(&req.machine, 0)).is_some() {
            debug!("the status probe just found no VM of the machine; not looking again");
            Vec::new()
        } else {
            p.ec2
                .instances_by_name(cluster, role, name)
                .await
                .map_err(|e| {
                    e.lookup_status(&format!("looking for an existing VM of machine {name}"))
                })?
        };
        // Of the VMs with the machine's Name and the class's cluster and role
        // tags, one carrying another Machine's identity is not adopted: the
        // create is refused (docs/design/safety.md, "Adoption on a retried
        // create"). One without identity is the Go provider's VM of this
        // machine, adopted as ours.
        let mut refused = None;
        let existing: Vec<Instance> = existing
            .into_iter()
            .filter(|i| {
                let carried = mcm_driver::adoption::Carried {
                    owner: mcm_driver::MachineOwner::from_tags(mcm_driver::TagStyle::Slash, |k| {
                        i.tags()
                            .iter()
                            .find(|t| t.key() == Some(k))
                            .and_then(|t| t.value())
                    }),
                    uid: None,
                    cluster_tags: true,
                };
                match mcm_driver::adoption::decide(&req.machine, name, &carried) {
                    Ok(_) => true,
                    Err(e) => {
                        warn!(
                            instance_id = i.instance_id().unwrap_or_default(),
                            error = %e.message,
                            "a VM of this name is not this machine's"
                        );
                        refused = Some(e);
                        false
                    }
                }
            })
            .collect();
        if let (true, Some(e)) = (existing.is_empty(), refused) {
            return Err(e);
        }
        match existing.as_slice() {
            [] => {}
            [one] => {
                info!(
                    instance_id = one.instance_id().unwrap_or_default(),
                    "machine already has a VM; adopting it"
                );
                return checked_response(self.create_response(&p.spec, one), name);
            }
            many => return Err(multiple_vms(name, many)),
        }

        let root = p
            .ec2
            .root_device_name(&p.spec.ami)
            .await
            .map_err(|e| e.status(&format!("looking up image {}", p.spec.ami)))?
            .ok_or_else(|| Status::not_found(format!("Image {} not found", p.spec.ami)))?;
        let annotation = req
            .machine
            .spec
            .node_template
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PLACEMENT_ANNOTATION))
            .map(String::as_str);

        let mut launched: Option<Instance> = None;
        for generation in 0..MAX_TOKEN_GENERATIONS {
            let token = client_token(&req.machine, generation);
            let input = LaunchInput {
                machine_name: name,
                root_device_name: &root,
                user_data: user_data.clone(),
                client_token: token.clone(),
                placement_annotation: annotation,
            };
            let request = run_instances_request(p.ec2.client().run_instances(), &p.spec, &input)
                .map_err(Status::invalid_argument)?;
            let out = p
                .ec2
                .call(
                    "RunInstances",
                    crate::ratelimit::ActionClass::RunInstances,
                    || request.clone().send(),
                )
                .await;
            match out {
                Ok(out) => {
                    let Some(instance) = out
                        .instances()
                        .iter()
                        .find(|i| i.instance_id().is_some())
                        .cloned()
                    else {
                        return Err(Status::internal(format!(
                            "RunInstances for machine {name} returned no instance ID"
                        )));
                    };
                    if is_live(&instance) {
                        launched = Some(instance);
                        break;
                    }
                    // The token belongs to an instance that was terminated since:
                    // the machine needs a new VM, under the next token.
                    info!(
                        instance_id = instance.instance_id().unwrap_or_default(),
                        generation,
                        "client token names a terminated instance; trying the next token"
                    );
                }
                Err(e) if e.code() == Some("IdempotentParameterMismatch") => {
                    // Same token, different parameters (the class changed between
                    // retries): adopt the token's instance if it lives, else move on.
                    let same = p.ec2.instances_by_client_token(&token).await.map_err(|e| {
                        e.lookup_status(&format!("looking up client token of machine {name}"))
                    })?;
                    if let Some(i) = same.into_iter().next() {
                        launched = Some(i);
                        break;
                    }
                    info!(
                        generation,
                        "client token used with other parameters; trying the next token"
                    );
                }
                Err(e) => {
                    warn!(
                        error_code = e.code().unwrap_or("-"),
                        aws_request_id = e.request_id().unwrap_or("-"),
                        "RunInstances failed"
                    );
                    return Err(e.status(&format!("creating the VM of machine {name}")));
                }
            }
        }
        let Some(instance) = launched else {
            return Err(Status::internal(format!(
                "creating the VM of machine {name}: every client token names a terminated instance"
            )));
        };
        let id = instance.instance_id().unwrap_or_default().to_string();
        // RunInstances answers with the instance's description. When it names
        // the private DNS name (the node name), that description is the VM's
        // identity and nothing waits for DescribeInstances to catch up: the
        // controller keeps a machine's providerID when a later look-up misses
        // the VM, and a retried create gets this instance by its ClientToken.
        // Otherwise wait, as the reference does, until EC2 lists the instance.
        let visible = if instance.private_dns_name().is_some_and(|n| !n.is_empty()) {
            info!(instance_id = %id, "VM launched");
            instance
        } else {
            info!(instance_id = %id, "VM launched; waiting until EC2 lists it");
            self.wait_until_listed(&p, &id).await?
        };
        let resp = checked_response(self.create_response(&p.spec, &visible), name)?;
        self.launched.put(&id, visible);
        info!(instance_id = %id, node = %resp.node_name, "VM created");
        Ok(resp)
    }

    /// Eventual consistency: waits until DescribeInstances knows the instance.
    async fn wait_until_listed(&self, p: &Prepared, id: &str) -> DriverResult<Instance> {
        let started = Instant::now();
        let mut step = 0u32;
        loop {
            match p.ec2.instance_by_id(id).await {
                Ok(Some(i)) => return Ok(i),
                Ok(None) => debug!(instance_id = %id, "instance not visible yet"),
                Err(e) => {
                    debug!(instance_id = %id, error = %e, "describing the new instance failed")
                }
            }
            if started.elapsed() >= self.config.visibility_timeout {
                return Err(Status::internal(format!(
                    "creation of VM {:?} failed, timed out waiting for eventual consistency. Multiple VMs backing machine obj might spawn, they will be orphan collected",
                    provider_id(&p.spec.region, id)
                )));
            }
            tokio::time::sleep(self.config.visibility_backoff.delay(step)).await;
            step += 1;
        }
    }

    fn create_response(&self, spec: &AwsProviderSpec, i: &Instance) -> CreateMachineResponse {
        // A new VM is made in the class's region.
        let id = identity(spec, &Machine::new("", Default::default()), i);
        CreateMachineResponse {
            provider_id: id.provider_id,
            node_name: id.node_name,
            last_known_state: String::new(),
            addresses: id.addresses,
        }
    }
}

/// The ClientToken of a machine's RunInstances: derived from the Machine UID
/// (the name when there is none), with a generation suffix past the first.
pub fn client_token(machine: &Machine, generation: u32) -> String {
    let base = machine
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
        .or(machine.metadata.name.as_deref())
        .unwrap_or_default();
    let mut token = if base.len() <= 48 && base.is_ascii() {
        format!("mcm-{base}")
    } else {
        let mut h = DefaultHasher::new();
        base.hash(&mut h);
        format!("mcm-h{:016x}", h.finish())
    };
    if generation > 0 {
        token.push_str(&format!("-g{generation}"));
    }
    token
}

/// A create answer needs a node name (the instance's private DNS name).
fn checked_response(
    resp: CreateMachineResponse,
    name: &str,
) -> DriverResult<CreateMachineResponse> {
    if resp.node_name.is_empty() {
        return Err(Status::internal(format!(
            "VM {} of machine {name} has no private DNS name",
            resp.provider_id
        )));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_tokens_come_from_the_uid() {
        let mut m = Machine::new("m1", Default::default());
        m.metadata.uid = Some("0b2c3d4e-aaaa-bbbb-cccc-000000000001".into());
        assert_eq!(
            client_token(&m, 0),
            "mcm-0b2c3d4e-aaaa-bbbb-cccc-000000000001"
        );
        assert_eq!(
            client_token(&m, 2),
            "mcm-0b2c3d4e-aaaa-bbbb-cccc-000000000001-g2"
        );
        m.metadata.uid = Some("x".repeat(100));
        assert!(client_token(&m, 3).len() <= 64);
        m.metadata.uid = None;
        assert_eq!(client_token(&m, 0), "mcm-m1");
    }
}
