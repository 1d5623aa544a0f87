//! GetMachineStatus and the look-ups behind it: the VMs of a machine, its
//! identity (provider ID, node name, addresses).

use super::create::client_token;
use super::initialize::{describe_plan, init_plan};
use super::{machine_name, multiple_vms, tag_keys, AwsDriver, Prepared};
use crate::ec2::is_live;
use crate::spec::AwsProviderSpec;
use aws_sdk_ec2::types::Instance;
use k8s_openapi::api::core::v1::NodeAddress;
use mcm_api::Machine;
use mcm_driver::{
    Code, DriverResult, GetMachineStatusRequest, GetMachineStatusResponse, MachineIdentity, Status,
};

impl AwsDriver {
    /// The VMs backing a machine: by provider ID when it has one (live states
    /// only), else by the `Name` tag and the cluster/role tag keys.
    pub(super) async fn find(
        &self,
        p: &Prepared,
        machine: &Machine,
    ) -> Result<Vec<Instance>, Status> {
        let name = machine_name(machine)?;
        let (cluster, role) = tag_keys(&p.spec)?;
        if !machine.spec.provider_id.is_empty() {
            let id = decode_provider_id(&machine.spec.provider_id)?;
            let ec2 = self.ec2_for_vm(p, &machine.spec.provider_id)?;
            let found = ec2
                .instance_by_id(&id)
                .await
                .map_err(|e| e.lookup_status(&format!("looking up VM {id} of machine {name}")))?;
            if found.is_none() {
                self.confirm_gone(p, &id, name).await?;
            }
            return Ok(found.into_iter().filter(is_live).collect());
        }
        p.ec2
            .instances_by_name(cluster, role, name)
            .await
            .map_err(|e| e.lookup_status(&format!("looking up the VM of machine {name}")))
    }

    /// An instance ID EC2 does not know means the VM is gone only if these
    /// credentials reach the account and region it was created in: a class
    /// whose secret now names another account (or region) sees no instance
    /// at all. So the class's own subnets must be visible too (one
    /// DescribeSubnets, only when an instance is unknown); if they are not,
    /// the answer is `FailedPrecondition`, never `NotFound`, and the machine
    /// is not treated as having lost its VM.
    pub(super) async fn confirm_gone(
        &self,
        p: &Prepared,
        id: &str,
        name: &str,
    ) -> Result<(), Status> {
        let subnets: Vec<String> = p
            .spec
            .network_interfaces
            .iter()
            .map(|n| n.subnet_id.clone())
            .filter(|s| !s.is_empty())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if subnets.is_empty() {
            return Ok(());
        }
        match p.ec2.sees_subnets(&subnets).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "VM {id} of machine {name} is unknown to EC2, and so is the class's subnet ({}): \
                     the secret's credentials do not reach the account and region the VM was created in \
                     (were they changed?); the VM is not treated as gone",
                    subnets.join(", ")
                ),
            )),
            Err(e) => Err(e.lookup_status(&format!(
                "checking that the credentials see the class's subnets before treating VM {id} of machine {name} as gone"
            ))),
        }
    }

    pub(super) async fn status(
        &self,
        req: &GetMachineStatusRequest,
    ) -> DriverResult<GetMachineStatusResponse> {
        let p = self.prepare_existing(
            &req.machine_class,
            &req.secret,
            &req.machine.spec.provider_id,
        )?;
        let name = machine_name(&req.machine)?;
        let found = self.find(&p, &req.machine).await?;
        let instance = match found.as_slice() {
            [] => {
                if req.machine.spec.provider_id.is_empty() {
                    // The create that usually follows need not look again.
                    self.absent.put(&client_token(&req.machine, 0), ());
                }
                return Err(Status::not_found(
                    if req.machine.spec.provider_id.is_empty() {
                        format!("AWS plugin is returning no VM instances backing machine {name} (no ProviderID on the machine)")
                    } else {
                        format!("AWS plugin is returning no VM instances backing this machine object ({name})")
                    },
                ));
            }
            [one] => one,
            many => return Err(multiple_vms(name, many)),
        };
        let id = identity(&p.spec, &req.machine, instance);
        let pending = init_plan(&p.spec, instance);
        if !pending.is_empty() {
            return Err(Status::uninitialized(
                format!(
                    "VM {} of machine {name} is not initialized: {}",
                    id.provider_id,
                    describe_plan(&pending)
                ),
                id,
            ));
        }
        Ok(GetMachineStatusResponse {
            provider_id: id.provider_id,
            node_name: id.node_name,
            addresses: id.addresses,
        })
    }
}

/// The identity of a machine's instance. Its providerID keeps the region the
/// machine's providerID names (where the VM lives), else the class's.
pub(super) fn identity(spec: &AwsProviderSpec, machine: &Machine, i: &Instance) -> MachineIdentity {
    let region = provider_id_region(&machine.spec.provider_id).unwrap_or(spec.region.clone());
    MachineIdentity {
        provider_id: provider_id(&region, i.instance_id().unwrap_or_default()),
        node_name: i.private_dns_name().unwrap_or_default().to_string(),
        addresses: addresses(i),
    }
}

/// The Node addresses of an instance.
pub fn addresses(i: &Instance) -> Vec<NodeAddress> {
    let mut out: Vec<NodeAddress> = Vec::new();
    let mut push = |t: &str, a: &str| {
        let addr = NodeAddress {
            type_: t.to_string(),
            address: a.to_string(),
        };
        if !a.is_empty() && !out.contains(&addr) {
            out.push(addr);
        }
    };
    if let Some(ip) = i.private_ip_address() {
        push("InternalIP", ip);
    }
    for n in i.network_interfaces() {
        for a in n.ipv6_addresses() {
            if let Some(ip) = a.ipv6_address() {
                push("InternalIP", ip);
            }
        }
    }
    if let Some(ip) = i.public_ip_address() {
        push("ExternalIP", ip);
    }
    if let Some(dns) = i.private_dns_name() {
        push("InternalDNS", dns);
        push("Hostname", dns);
    }
    out
}

/// `aws:///<region>/<instance-id>`.
pub fn provider_id(region: &str, instance_id: &str) -> String {
    format!("aws:///{region}/{instance_id}")
}

/// The region a provider ID names (`aws:///<region>/<id>`), `None` when it
/// names none (`aws:////<id>`). A zone in its place (`aws:///eu-west-1a/<id>`,
/// the Node's form) gives its region.
pub fn provider_id_region(provider_id: &str) -> Option<String> {
    let rest = provider_id.strip_prefix("aws://")?;
    let mut parts = rest.trim_end_matches('/').rsplit('/');
    parts.next()?;
    let region = parts.next().filter(|r| !r.is_empty())?;
    let bytes = region.as_bytes();
    let zone_letters = bytes
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_lowercase())
        .count();
    let is_zone = zone_letters > 0
        && zone_letters < bytes.len()
        && bytes[bytes.len() - zone_letters - 1].is_ascii_digit();
    Some(if is_zone {
        region[..region.len() - zone_letters].to_string()
    } else {
        region.to_string()
    })
}

/// The instance ID of a provider ID (its last `/`-separated part).
pub fn decode_provider_id(provider_id: &str) -> Result<String, Status> {
    let id = provider_id.rsplit('/').next().unwrap_or_default();
    if !provider_id.starts_with("aws://") || !id.starts_with("i-") || id.len() < 3 {
        return Err(Status::invalid_argument(format!(
            "providerID {provider_id:?} is not of the form aws:///<region>/<instance-id>"
        )));
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_driver::Code;

    #[test]
    fn provider_ids_round_trip() {
        assert_eq!(
            provider_id("eu-west-1", "i-0abc"),
            "aws:///eu-west-1/i-0abc"
        );
        assert_eq!(
            decode_provider_id("aws:///eu-west-1/i-0abc").expect("ok"),
            "i-0abc"
        );
        assert_eq!(
            decode_provider_id("aws:///eu-west-1a/i-0abc").expect("ok"),
            "i-0abc"
        );
        for bad in [
            "",
            "i-0abc",
            "gce:///x/i-1",
            "aws:///eu-west-1/",
            "aws:///eu-west-1/vol-1",
        ] {
            assert_eq!(
                decode_provider_id(bad).expect_err(bad).code,
                Code::InvalidArgument
            );
        }
    }

    #[test]
    fn the_region_of_a_provider_id_is_where_the_vm_lives() {
        let r = |p: &str| provider_id_region(p);
        assert_eq!(r("aws:///eu-west-1/i-0abc").as_deref(), Some("eu-west-1"));
        assert_eq!(r("aws:///us-east-1a/i-0abc").as_deref(), Some("us-east-1"));
        assert_eq!(r("aws:///eu-west-1/i-0abc/").as_deref(), Some("eu-west-1"));
        assert_eq!(r("aws:////i-0abc"), None);
        assert_eq!(r("i-0abc"), None);
        assert_eq!(r("gce:///p/z/n"), None);
    }
}
