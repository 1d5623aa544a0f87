//! InitializeMachine: what differs from the spec on the instance's
//! interfaces ([`init_plan`]) and the calls that fix it.

use super::status::{decode_provider_id, identity};
use super::{machine_name, multiple_vms, AwsDriver};
use crate::errors::Ec2Error;
use crate::spec::{is_efa_type, AwsProviderSpec};
use aws_sdk_ec2::types::Instance;
use k8s_openapi::api::core::v1::NodeAddress;
use mcm_driver::{Code, DriverResult, InitializeMachineRequest, InitializeMachineResponse, Status};
use tracing::{debug, info, warn};

impl AwsDriver {
    pub(super) async fn initialize(
        &self,
        req: &InitializeMachineRequest,
    ) -> DriverResult<InitializeMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        let name = machine_name(&req.machine)?;
        // Right after a create, its description of the instance is as good
        // as a new one (and each is used once: a retry describes again).
        let launched = decode_provider_id(&req.machine.spec.provider_id)
            .ok()
            .and_then(|id| self.launched.take(&id));
        let found = match launched {
            Some(i) => {
                debug!("planning on the description the create just made");
                vec![i]
            }
            None => self.find(&p, &req.machine).await?,
        };
        let instance = match found.as_slice() {
            [] => {
                return Err(Status::new(
                    Code::Uninitialized,
                    format!(
                        "{}",
                        Status::not_found(format!("no VM backs machine {name}"))
                    ),
                ))
            }
            [one] => one,
            many => return Err(multiple_vms(name, many)),
        };
        let mut id = identity(&p.spec, &req.machine, instance);
        let plan = init_plan(&p.spec, instance);
        if plan.is_empty() {
            debug!(provider_id = %id.provider_id, "nothing to initialize");
        }
        let mut last_err: Option<Ec2Error> = None;
        for step in &plan {
            let res = match step {
                InitStep::DisableSourceDestCheck { eni } => p
                    .ec2
                    .disable_source_dest_check(eni)
                    .await
                    .map(|_| Vec::new()),
                InitStep::AssignIpv6Prefixes { eni, count } => {
                    p.ec2.assign_ipv6(eni, None, Some(*count)).await
                }
                InitStep::AssignIpv6Addresses { eni, count } => {
                    p.ec2.assign_ipv6(eni, Some(*count), None).await
                }
            };
            match res {
                Ok(addresses) => {
                    info!(step = %step, "initialized");
                    for a in addresses {
                        let addr = NodeAddress {
                            type_: "InternalIP".into(),
                            address: a,
                        };
                        if !id.addresses.contains(&addr) {
                            id.addresses.push(addr);
                        }
                    }
                }
                Err(e) => {
                    warn!(step = %step, error = %e, "initialization step failed");
                    last_err = Some(e);
                }
            }
        }
        if let Some(e) = last_err {
            return Err(Status::new(
                Code::Uninitialized,
                format!("initializing VM {} of machine {name}: {e}", id.provider_id),
            ));
        }
        Ok(InitializeMachineResponse {
            provider_id: id.provider_id,
            node_name: id.node_name,
            addresses: id.addresses,
        })
    }
}

/// One change InitializeMachine makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitStep {
    /// ModifyNetworkInterfaceAttribute(SourceDestCheck=false).
    DisableSourceDestCheck {
        /// The interface.
        eni: String,
    },
    /// AssignIpv6Addresses(Ipv6PrefixCount).
    AssignIpv6Prefixes {
        /// The interface.
        eni: String,
        /// Missing prefixes.
        count: i32,
    },
    /// AssignIpv6Addresses(Ipv6AddressCount).
    AssignIpv6Addresses {
        /// The interface.
        eni: String,
        /// Missing addresses.
        count: i32,
    },
}

impl std::fmt::Display for InitStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitStep::DisableSourceDestCheck { eni } => {
                write!(f, "source/destination check still on for {eni}")
            }
            InitStep::AssignIpv6Prefixes { eni, count } => {
                write!(f, "{count} IPv6 prefix(es) missing on {eni}")
            }
            InitStep::AssignIpv6Addresses { eni, count } => {
                write!(f, "{count} IPv6 address(es) missing on {eni}")
            }
        }
    }
}

pub(super) fn describe_plan(plan: &[InitStep]) -> String {
    plan.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What InitializeMachine still has to do on an instance: turn the
/// source/destination check off on every non-EFA interface (when the spec
/// says `srcAndDstChecksEnabled: false`), and top up IPv6 prefixes and
/// addresses to the counts of the spec interface with the same device index.
/// Empty = initialized. Never asks to remove anything.
pub fn init_plan(spec: &AwsProviderSpec, instance: &Instance) -> Vec<InitStep> {
    let mut plan = Vec::new();
    let mut enis: Vec<_> = instance.network_interfaces().iter().collect();
    enis.sort_by_key(|n| {
        n.attachment()
            .and_then(|a| a.device_index())
            .unwrap_or(i32::MAX)
    });
    if spec.src_and_dst_checks_enabled == Some(false) {
        for n in &enis {
            if is_efa_type(n.interface_type()) {
                continue;
            }
            if let (Some(id), true) = (
                n.network_interface_id(),
                n.source_dest_check().unwrap_or(true),
            ) {
                plan.push(InitStep::DisableSourceDestCheck {
                    eni: id.to_string(),
                });
            }
        }
    }
    for n in &enis {
        let (Some(id), Some(idx)) = (
            n.network_interface_id(),
            n.attachment().and_then(|a| a.device_index()),
        ) else {
            continue;
        };
        let Some(want) = spec.interface_for_device_index(idx) else {
            continue;
        };
        let have_prefixes = n.ipv6_prefixes().len() as i32;
        if let Some(w) = want.ipv6_prefix_count.filter(|w| *w > have_prefixes) {
            plan.push(InitStep::AssignIpv6Prefixes {
                eni: id.to_string(),
                count: w - have_prefixes,
            });
        }
        let have_addresses = n.ipv6_addresses().len() as i32;
        if let Some(w) = want.ipv6_address_count.filter(|w| *w > have_addresses) {
            plan.push(InitStep::AssignIpv6Addresses {
                eni: id.to_string(),
                count: w - have_addresses,
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::test_support::{eni, spec};
    use serde_json::json;

    #[test]
    fn init_plan_covers_src_dst_efa_prefixes_and_addresses() {
        let s = spec(
            json!({"srcAndDstChecksEnabled": false, "networkInterfaces": [
                {"subnetID": "a", "securityGroupIDs": ["g"], "ipv6PrefixCount": 2, "ipv6AddressCount": 1},
                {"subnetID": "b", "securityGroupIDs": ["g"], "interfaceType": "efa"},
                {"subnetID": "c", "securityGroupIDs": ["g"], "ipv6PrefixCount": 1}
            ]}),
        );
        let i = Instance::builder()
            .network_interfaces(eni("eni-0", 0, Some(true), "interface", 0, 1))
            .network_interfaces(eni("eni-1", 1, Some(true), "efa", 0, 0))
            .network_interfaces(eni("eni-2", 2, None, "interface", 0, 3))
            .build();
        assert_eq!(
            init_plan(&s, &i),
            vec![
                InitStep::DisableSourceDestCheck {
                    eni: "eni-0".into()
                },
                InitStep::DisableSourceDestCheck {
                    eni: "eni-2".into()
                },
                InitStep::AssignIpv6Prefixes {
                    eni: "eni-0".into(),
                    count: 1
                },
                InitStep::AssignIpv6Addresses {
                    eni: "eni-0".into(),
                    count: 1
                },
            ],
            "EFA skipped, an absent check counts as on, surplus prefixes are left alone"
        );
        let done = Instance::builder()
            .network_interfaces(eni("eni-0", 0, Some(false), "interface", 1, 2))
            .network_interfaces(eni("eni-1", 1, Some(true), "efa", 0, 0))
            .network_interfaces(eni("eni-2", 2, Some(false), "interface", 0, 1))
            .build();
        assert!(init_plan(&s, &done).is_empty());
        let checks_on =
            spec(json!({"networkInterfaces": [{"subnetID": "a", "securityGroupIDs": ["g"]}]}));
        assert!(init_plan(&checks_on, &i).is_empty());
    }
}
