//! Hot update (docs/design/providers/aws.md, "Hot update"): which
//! providerSpec changes a running instance can take ([`in_place_changes`]),
//! what differs between the spec and the instance's actual state
//! ([`update_plan`], pure) and the EC2 calls that converge it.

use super::initialize::InitStep;
use super::{machine_name, multiple_vms, AwsDriver};
use crate::ec2_update::{MetadataChange, VolumeChange};
use crate::errors::Ec2Error;
use crate::spec::{
    canonical_keys, is_efa_type, AwsProviderSpec, CLUSTER_TAG_PREFIX, ROLE_TAG_PREFIX,
    ROOT_DEVICE_NAME,
};
use aws_sdk_ec2::types::{Instance, NetworkInterface, Volume};
use mcm_driver::{
    changed_fields, Code, DriverResult, InPlaceChanges, Status, TagStyle, UpdateMachineRequest,
    UpdateMachineResponse,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use tracing::{debug, info, warn};

/// Fields of a block device's EBS volume that ModifyVolume changes.
const VOLUME_FIELDS: [&str; 3] = ["ebs.volumeType", "ebs.iops", "ebs.throughput"];
/// Fields of a network interface that InitializeMachine's calls converge.
const INTERFACE_FIELDS: [&str; 2] = ["ipv6AddressCount", "ipv6PrefixCount"];

/// Which changes between two AWS providerSpecs a running instance can take:
/// tags (except adding or removing the cluster and role keys, which make the
/// instance another cluster's), an EBS volume's type, IOPS, throughput and
/// a larger size, `srcAndDstChecksEnabled`, an interface's IPv6 address
/// and prefix counts, and `instanceMetadataOptions`. A different number of
/// block devices or interfaces, and every other field, needs a new instance.
pub fn in_place_changes(last_applied: &Value, current: &Value) -> InPlaceChanges {
    let (a, _) = canonical_keys(last_applied);
    let (b, _) = canonical_keys(current);
    let mut out = InPlaceChanges::default();
    for field in changed_fields(&a, &b) {
        let top = field.split('.').next().unwrap_or_default();
        match top {
            "blockDevices" => classify_list(
                "blockDevices",
                &a,
                &b,
                |sub, x, y| {
                    VOLUME_FIELDS.contains(&sub) || (sub == "ebs.volumeSize" && size(y) >= size(x))
                },
                &mut out,
            ),
            "networkInterfaces" => classify_list(
                "networkInterfaces",
                &a,
                &b,
                |sub, _, _| INTERFACE_FIELDS.contains(&sub),
                &mut out,
            ),
            "tags" => {
                let key = field.strip_prefix("tags.").unwrap_or_default();
                let both = |v: &Value| v.get("tags").and_then(|t| t.get(key)).is_some();
                let cluster_or_role =
                    key.contains(CLUSTER_TAG_PREFIX) || key.contains(ROLE_TAG_PREFIX);
                if key.is_empty() || (cluster_or_role && !(both(&a) && both(&b))) {
                    out.need_replacement.push(field);
                } else {
                    out.in_place.push(field);
                }
            }
            "srcAndDstChecksEnabled" | "instanceMetadataOptions" => out.in_place.push(field),
            _ => out.need_replacement.push(field),
        }
    }
    for v in [&mut out.in_place, &mut out.need_replacement] {
        v.sort();
        v.dedup();
    }
    out
}

fn size(disk: &Value) -> i64 {
    disk.get("ebs")
        .and_then(|e| e.get("volumeSize"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Classifies the changes of a list field element by element
/// (`list[i].sub.path`); lists of different lengths need a replacement.
fn classify_list(
    key: &str,
    a: &Value,
    b: &Value,
    in_place: impl Fn(&str, &Value, &Value) -> bool,
    out: &mut InPlaceChanges,
) {
    let (x, y) = (a.get(key), b.get(key));
    let (Some(Value::Array(x)), Some(Value::Array(y))) = (x, y) else {
        out.need_replacement.push(key.to_string());
        return;
    };
    if x.len() != y.len() {
        out.need_replacement.push(key.to_string());
        return;
    }
    for (i, (xe, ye)) in x.iter().zip(y).enumerate() {
        for sub in changed_fields(xe, ye) {
            let path = format!("{key}[{i}].{sub}");
            if in_place(&sub, xe, ye) {
                out.in_place.push(path);
            } else {
                out.need_replacement.push(path);
            }
        }
    }
}

/// One call of UpdateMachine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateStep {
    /// CreateTags: the class's tags on resources that lack one of them.
    Tag {
        /// Instance, volume and interface IDs.
        resources: Vec<String>,
        /// The class's tags (without `Name`).
        tags: BTreeMap<String, String>,
    },
    /// DeleteTags: keys removed from the class, on resources that still have them.
    Untag {
        /// Instance, volume and interface IDs.
        resources: Vec<String>,
        /// The keys.
        keys: Vec<String>,
    },
    /// ModifyVolume.
    Volume {
        /// The volume.
        id: String,
        /// What changes.
        change: VolumeChange,
    },
    /// ModifyInstanceMetadataOptions.
    Metadata(MetadataChange),
    /// ModifyNetworkInterfaceAttribute(SourceDestCheck).
    SourceDestCheck {
        /// The interface.
        eni: String,
        /// The wanted value.
        on: bool,
    },
    /// AssignIpv6Addresses (the InitializeMachine step).
    Assign(InitStep),
    /// UnassignIpv6Addresses of the surplus the class no longer asks for.
    Unassign {
        /// The interface.
        eni: String,
        /// Addresses to release.
        addresses: Vec<String>,
        /// Prefixes to release.
        prefixes: Vec<String>,
    },
}

/// The actual state UpdateMachine compares the spec with.
pub struct Actual<'a> {
    /// The instance (DescribeInstances).
    pub instance: &'a Instance,
    /// Its attached volumes (DescribeVolumes).
    pub volumes: &'a [Volume],
    /// Its interfaces (DescribeNetworkInterfaces, for their tags).
    pub interfaces: &'a [NetworkInterface],
}

/// The calls that make an instance match `spec`, given the spec it was last
/// updated with (`last`: only what it names is ever removed). Empty when the
/// instance already matches: running it again after a success plans nothing.
pub fn update_plan(
    spec: &AwsProviderSpec,
    last: &AwsProviderSpec,
    now: &Actual<'_>,
) -> Vec<UpdateStep> {
    let mut plan = tag_steps(spec, last, now);
    plan.extend(volume_steps(spec, now));
    if let Some(c) = metadata_change(spec, now.instance) {
        plan.push(UpdateStep::Metadata(c));
    }
    plan.extend(interface_steps(spec, last, now.instance));
    plan
}

fn tag_steps(spec: &AwsProviderSpec, last: &AwsProviderSpec, now: &Actual<'_>) -> Vec<UpdateStep> {
    let want: BTreeMap<String, String> = spec
        .tags
        .iter()
        .filter(|(k, _)| k.as_str() != "Name")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let removed: BTreeSet<&String> = last
        .tags
        .keys()
        .filter(|k| {
            !spec.tags.contains_key(*k)
                && k.as_str() != "Name"
                && !TagStyle::Slash.is_identity_key(k)
                && !k.contains(CLUSTER_TAG_PREFIX)
                && !k.contains(ROLE_TAG_PREFIX)
        })
        .collect();
    let mut resources: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    let pairs = |tags: &[aws_sdk_ec2::types::Tag]| -> BTreeMap<String, String> {
        tags.iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
            .collect()
    };
    if let Some(id) = now.instance.instance_id() {
        resources.push((id.to_string(), pairs(now.instance.tags())));
    }
    for v in now.volumes {
        if let Some(id) = v.volume_id() {
            resources.push((id.to_string(), pairs(v.tags())));
        }
    }
    for n in now.interfaces {
        if let Some(id) = n.network_interface_id() {
            resources.push((id.to_string(), pairs(n.tag_set())));
        }
    }
    let mut plan = Vec::new();
    let lacking: Vec<String> = resources
        .iter()
        .filter(|(_, have)| want.iter().any(|(k, v)| have.get(k) != Some(v)))
        .map(|(id, _)| id.clone())
        .collect();
    if !lacking.is_empty() {
        plan.push(UpdateStep::Tag {
            resources: lacking,
            tags: want,
        });
    }
    let stale: Vec<String> = resources
        .iter()
        .filter(|(_, have)| removed.iter().any(|k| have.contains_key(*k)))
        .map(|(id, _)| id.clone())
        .collect();
    if !stale.is_empty() {
        plan.push(UpdateStep::Untag {
            resources: stale,
            keys: removed.into_iter().cloned().collect(),
        });
    }
    plan
}

fn volume_steps(spec: &AwsProviderSpec, now: &Actual<'_>) -> Vec<UpdateStep> {
    let single = spec.block_devices.len() == 1;
    let root = now.instance.root_device_name().unwrap_or_default();
    let mut plan = Vec::new();
    for disk in &spec.block_devices {
        if !disk.no_device.is_empty() || !disk.virtual_name.is_empty() {
            continue;
        }
        let device = if single || disk.device_name == ROOT_DEVICE_NAME {
            root
        } else {
            disk.device_name.as_str()
        };
        let Some(vol_id) = now
            .instance
            .block_device_mappings()
            .iter()
            .find(|m| m.device_name() == Some(device))
            .and_then(|m| m.ebs())
            .and_then(|e| e.volume_id())
        else {
            continue;
        };
        let Some(vol) = now.volumes.iter().find(|v| v.volume_id() == Some(vol_id)) else {
            continue;
        };
        let e = &disk.ebs;
        let change = VolumeChange {
            size: (e.volume_size > vol.size().unwrap_or(0)).then_some(e.volume_size),
            volume_type: (!e.volume_type.is_empty()
                && vol.volume_type().map(|t| t.as_str()) != Some(e.volume_type.as_str()))
            .then(|| e.volume_type.clone()),
            iops: (e.iops > 0 && vol.iops() != Some(e.iops)).then_some(e.iops),
            throughput: e.throughput.filter(|t| vol.throughput() != Some(*t)),
        };
        if !change.is_empty() {
            plan.push(UpdateStep::Volume {
                id: vol_id.to_string(),
                change,
            });
        }
    }
    plan
}

fn metadata_change(spec: &AwsProviderSpec, instance: &Instance) -> Option<MetadataChange> {
    let md = spec.instance_metadata_options.as_ref()?;
    let have = instance.metadata_options();
    let differs = |want: &str, have: Option<&str>| {
        (!want.is_empty() && have != Some(want)).then(|| want.to_string())
    };
    let c = MetadataChange {
        http_endpoint: differs(
            &md.http_endpoint,
            have.and_then(|h| h.http_endpoint()).map(|s| s.as_str()),
        ),
        http_tokens: differs(
            &md.http_tokens,
            have.and_then(|h| h.http_tokens()).map(|s| s.as_str()),
        ),
        http_put_response_hop_limit: md
            .http_put_response_hop_limit
            .filter(|w| have.and_then(|h| h.http_put_response_hop_limit()) != Some(*w)),
        http_protocol_ipv6: differs(
            &md.http_protocol_ipv6,
            have.and_then(|h| h.http_protocol_ipv6())
                .map(|s| s.as_str()),
        ),
    };
    (!c.is_empty()).then_some(c)
}

/// The source/destination check follows `srcAndDstChecksEnabled` both ways,
/// but is turned back on only when the last-applied spec turned it off (a
/// CNI may manage it otherwise). IPv6 counts are topped up; a surplus is
/// released only when the class lowered the count below what it asked before.
fn interface_steps(
    spec: &AwsProviderSpec,
    last: &AwsProviderSpec,
    instance: &Instance,
) -> Vec<UpdateStep> {
    let mut plan = Vec::new();
    let mut enis: Vec<_> = instance.network_interfaces().iter().collect();
    enis.sort_by_key(|n| {
        n.attachment()
            .and_then(|a| a.device_index())
            .unwrap_or(i32::MAX)
    });
    let want_on = spec.src_and_dst_checks_enabled != Some(false);
    let was_off = last.src_and_dst_checks_enabled == Some(false);
    for n in &enis {
        let Some(id) = n.network_interface_id() else {
            continue;
        };
        if is_efa_type(n.interface_type()) {
            continue;
        }
        let on = n.source_dest_check().unwrap_or(true);
        if on != want_on && (!want_on || was_off) {
            plan.push(UpdateStep::SourceDestCheck {
                eni: id.to_string(),
                on: want_on,
            });
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
        let before = last.interface_for_device_index(idx);
        let prefixes: Vec<String> = n
            .ipv6_prefixes()
            .iter()
            .filter_map(|p| p.ipv6_prefix().map(str::to_string))
            .collect();
        let addresses: Vec<String> = n
            .ipv6_addresses()
            .iter()
            .filter(|a| a.is_primary_ipv6() != Some(true))
            .filter_map(|a| a.ipv6_address().map(str::to_string))
            .collect();
        let want_p = want.ipv6_prefix_count.unwrap_or(0);
        let want_a = want.ipv6_address_count.unwrap_or(0);
        let have_p = prefixes.len() as i32;
        let have_a = n.ipv6_addresses().len() as i32;
        if want_p > have_p {
            plan.push(UpdateStep::Assign(InitStep::AssignIpv6Prefixes {
                eni: id.to_string(),
                count: want_p - have_p,
            }));
        }
        if want_a > have_a {
            plan.push(UpdateStep::Assign(InitStep::AssignIpv6Addresses {
                eni: id.to_string(),
                count: want_a - have_a,
            }));
        }
        let lowered = |f: fn(&crate::spec::NetworkInterface) -> Option<i32>, w: i32| {
            before.and_then(f).unwrap_or(0) > w
        };
        let drop_p: Vec<String> = if want_p < have_p && lowered(|n| n.ipv6_prefix_count, want_p) {
            prefixes[want_p.max(0) as usize..].to_vec()
        } else {
            Vec::new()
        };
        let drop_a: Vec<String> = if want_a < have_a && lowered(|n| n.ipv6_address_count, want_a) {
            let surplus = (have_a - want_a) as usize;
            addresses[addresses.len().saturating_sub(surplus)..].to_vec()
        } else {
            Vec::new()
        };
        if !drop_p.is_empty() || !drop_a.is_empty() {
            plan.push(UpdateStep::Unassign {
                eni: id.to_string(),
                addresses: drop_a,
                prefixes: drop_p,
            });
        }
    }
    plan
}

impl AwsDriver {
    pub(super) async fn update(
        &self,
        req: &UpdateMachineRequest,
    ) -> DriverResult<UpdateMachineResponse> {
        let p = self.prepare(&req.machine_class, &req.secret, true)?;
        let name = machine_name(&req.machine)?;
        let changes = in_place_changes(
            &req.last_applied_provider_spec,
            &req.machine_class.provider_spec,
        );
        if !changes.need_replacement.is_empty() {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "machine {name}: these providerSpec changes need a new VM, nothing was changed: {}",
                    changes.need_replacement.join(", ")
                ),
            ));
        }
        let last = AwsProviderSpec::from_json(&req.last_applied_provider_spec).unwrap_or_default();
        let found = self.find(&p, &req.machine).await?;
        let instance = match found.as_slice() {
            [] => {
                return Err(Status::not_found(format!(
                    "no VM backs machine {name}; nothing to update"
                )))
            }
            [one] => one,
            many => return Err(multiple_vms(name, many)),
        };
        let ec2 = if req.machine.spec.provider_id.is_empty() {
            p.ec2.clone()
        } else {
            self.ec2_for_vm(&p, &req.machine.spec.provider_id)?
        };
        let vm = instance.instance_id().unwrap_or_default().to_string();
        let volume_ids: Vec<String> = instance
            .block_device_mappings()
            .iter()
            .filter_map(|m| m.ebs().and_then(|e| e.volume_id()).map(str::to_string))
            .collect();
        let eni_ids: Vec<String> = instance
            .network_interfaces()
            .iter()
            .filter_map(|n| n.network_interface_id().map(str::to_string))
            .collect();
        let volumes = ec2
            .volumes(&volume_ids)
            .await
            .map_err(|e| e.lookup_status(&format!("describing the volumes of VM {vm}")))?;
        let interfaces = ec2
            .network_interfaces(&eni_ids)
            .await
            .map_err(|e| e.lookup_status(&format!("describing the interfaces of VM {vm}")))?;
        let plan = update_plan(
            &p.spec,
            &last,
            &Actual {
                instance,
                volumes: &volumes,
                interfaces: &interfaces,
            },
        );
        if plan.is_empty() {
            debug!(instance_id = %vm, "the VM already matches its class");
        }
        // Every step runs even when one fails, so that a retry has less to do;
        // the first failure is the answer.
        let mut first_err: Option<(String, Ec2Error)> = None;
        for step in &plan {
            let res = match step {
                UpdateStep::Tag { resources, tags } => ec2.create_tags(resources, tags).await,
                UpdateStep::Untag { resources, keys } => ec2.delete_tags(resources, keys).await,
                UpdateStep::Volume { id, change } => ec2.modify_volume(id, change).await,
                UpdateStep::Metadata(c) => ec2.modify_metadata_options(&vm, c).await,
                UpdateStep::SourceDestCheck { eni, on } => {
                    ec2.set_source_dest_check(eni, *on).await
                }
                UpdateStep::Assign(InitStep::AssignIpv6Prefixes { eni, count }) => {
                    ec2.assign_ipv6(eni, None, Some(*count)).await.map(|_| ())
                }
                UpdateStep::Assign(InitStep::AssignIpv6Addresses { eni, count }) => {
                    ec2.assign_ipv6(eni, Some(*count), None).await.map(|_| ())
                }
                UpdateStep::Assign(InitStep::DisableSourceDestCheck { eni }) => {
                    ec2.set_source_dest_check(eni, false).await
                }
                UpdateStep::Unassign {
                    eni,
                    addresses,
                    prefixes,
                } => ec2.unassign_ipv6(eni, addresses, prefixes).await,
            };
            match res {
                Ok(()) => info!(instance_id = %vm, step = ?step, "updated in place"),
                Err(e) => {
                    warn!(instance_id = %vm, step = ?step, error = %e, "update step failed");
                    if first_err.is_none() {
                        first_err = Some((format!("{step:?}"), e));
                    }
                }
            }
        }
        if let Some((step, e)) = first_err {
            return Err(e.status(&format!("updating VM {vm} of machine {name} ({step})")));
        }
        Ok(UpdateMachineResponse::default())
    }
}

#[cfg(test)]
#[path = "update_tests.rs"]
mod tests;
