//! Hot update (docs/design/providers/gcp.md, "Hot update"): labels
//! (`instances.setLabels`), network tags (`instances.setTags`), metadata
//! items except the user data (`instances.setMetadata`), each with the
//! fingerprint Compute locks on, and larger persistent disks
//! (`disks.resize`). Every other providerSpec field needs a new instance.

use crate::instance::{MACHINE_UID_METADATA_KEY, STARTUP_SCRIPT_KEY, USER_DATA_KEY};
use crate::spec::{GcpDisk, GcpProviderSpec, DISK_TYPE_SCRATCH};
use google_cloud_compute_v1::model::{metadata, Instance};
use mcm_driver::{changed_fields, InPlaceChanges, TagStyle};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Metadata keys the driver writes itself: the user data (under either key)
/// and the Machine's UID. A class changing them needs a new instance.
pub const RESERVED_METADATA_KEYS: [&str; 3] =
    [USER_DATA_KEY, STARTUP_SCRIPT_KEY, MACHINE_UID_METADATA_KEY];

fn reserved(key: &str) -> bool {
    RESERVED_METADATA_KEYS.contains(&key)
}

/// Which changes between two GCP providerSpecs a running instance can take:
/// `labels.<key>`; `tags` unless the cluster or role tag changes (the
/// driver finds a machine's instance by them); `metadata` unless an item
/// under a reserved key changes; `disks[i].sizeGb` when a persistent disk
/// only grows. A spec that does not decode needs a replacement for every
/// changed field.
pub fn in_place_changes(last_applied: &Value, current: &Value) -> InPlaceChanges {
    let fields = changed_fields(last_applied, current);
    let (Ok(a), Ok(b)) = (
        GcpProviderSpec::from_json(last_applied),
        GcpProviderSpec::from_json(current),
    ) else {
        return InPlaceChanges::all_need_replacement(fields);
    };
    let mut out = InPlaceChanges::default();
    for field in fields {
        match field.as_str() {
            f if f == "labels" || f.starts_with("labels.") => out.in_place.push(field),
            "tags" if a.membership_tags() == b.membership_tags() => out.in_place.push(field),
            "metadata" if !changes_reserved_metadata(&a, &b) => out.in_place.push(field),
            "disks" => match grown_disks(&a.disks, &b.disks) {
                Some(paths) => out.in_place.extend(paths),
                None => out.need_replacement.push(field),
            },
            _ => out.need_replacement.push(field),
        }
    }
    out.in_place.sort();
    out
}

fn metadata_map(spec: &GcpProviderSpec) -> BTreeMap<&str, Option<&str>> {
    spec.metadata
        .iter()
        .map(|m| (m.key.as_str(), m.value.as_deref()))
        .collect()
}

fn changes_reserved_metadata(a: &GcpProviderSpec, b: &GcpProviderSpec) -> bool {
    let (ma, mb) = (metadata_map(a), metadata_map(b));
    ma.keys()
        .chain(mb.keys())
        .any(|k| ma.get(k) != mb.get(k) && reserved(k))
}

/// The `disks[i].sizeGb` paths when the only change between the disk lists
/// is persistent disks growing; `None` otherwise (a disk added, removed,
/// shrunk, or changed in any other way).
fn grown_disks(a: &[GcpDisk], b: &[GcpDisk]) -> Option<Vec<String>> {
    if a.len() != b.len() {
        return None;
    }
    let mut paths = Vec::new();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let same_but_size = GcpDisk {
            size_gb: y.size_gb,
            ..x.clone()
        };
        if same_but_size != *y {
            return None;
        }
        if x.size_gb != y.size_gb {
            if y.size_gb < x.size_gb || y.type_ == DISK_TYPE_SCRATCH {
                return None;
            }
            paths.push(format!("disks[{i}].sizeGb"));
        }
    }
    Some(paths)
}

/// What the update calls must do on an instance; `None` where it matches.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdatePlan {
    /// Every label the instance is to have (setLabels replaces them all).
    pub labels: Option<BTreeMap<String, String>>,
    /// Every network tag the instance is to have.
    pub tags: Option<Vec<String>>,
    /// Every metadata item the instance is to have, as `(key, value)`.
    pub metadata: Option<Vec<(String, Option<String>)>>,
    /// Disks to grow: `(disk name, size in GB)`.
    pub resize: Vec<(String, i64)>,
}

impl UpdatePlan {
    /// Whether the instance already matches.
    pub fn is_empty(&self) -> bool {
        self.labels.is_none()
            && self.tags.is_none()
            && self.metadata.is_none()
            && self.resize.is_empty()
    }
}

/// The changes that make `instance` match `spec`: the class's labels, tags
/// and metadata items are set; those the last-applied spec had and the class
/// dropped are removed; anything else on the instance (the identity labels,
/// the user data and UID items, what others set) stays. A disk is grown when
/// it is smaller than the class asks; one that is larger is an error (a
/// smaller disk needs a new instance).
pub fn update_plan(
    spec: &GcpProviderSpec,
    last: &GcpProviderSpec,
    instance: &Instance,
) -> Result<UpdatePlan, String> {
    let mut plan = UpdatePlan::default();

    let have: BTreeMap<String, String> = instance
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let managed = |k: &String| !TagStyle::Label.is_identity_key(k);
    let mut labels = have.clone();
    for k in last.labels.keys().filter(|k| managed(k)) {
        if !spec.labels.contains_key(k) {
            labels.remove(k);
        }
    }
    for (k, v) in spec.labels.iter().filter(|(k, _)| managed(k)) {
        labels.insert(k.clone(), v.clone());
    }
    if labels != have {
        plan.labels = Some(labels);
    }

    let have: Vec<String> = instance
        .tags
        .as_ref()
        .map(|t| t.items.clone())
        .unwrap_or_default();
    let dropped: BTreeSet<&String> = last
        .tags
        .iter()
        .filter(|t| !spec.tags.contains(t))
        .collect();
    let mut tags: Vec<String> = have
        .iter()
        .filter(|t| !dropped.contains(t))
        .cloned()
        .collect();
    for t in &spec.tags {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    if tags.iter().collect::<BTreeSet<_>>() != have.iter().collect::<BTreeSet<_>>() {
        plan.tags = Some(tags);
    }

    let have: Vec<(String, Option<String>)> = instance
        .metadata
        .as_ref()
        .map(|m| {
            m.items
                .iter()
                .map(|i| (i.key.clone().unwrap_or_default(), i.value.clone()))
                .collect()
        })
        .unwrap_or_default();
    let wanted = metadata_map(spec);
    let dropped: BTreeSet<&str> = metadata_map(last)
        .into_keys()
        .filter(|k| !wanted.contains_key(k) && !reserved(k))
        .collect();
    let mut items: Vec<(String, Option<String>)> = have
        .iter()
        .filter(|(k, _)| !dropped.contains(k.as_str()))
        .cloned()
        .collect();
    for (k, v) in wanted.iter().filter(|(k, _)| !reserved(k)) {
        let v = v.map(str::to_string);
        match items.iter_mut().find(|(have, _)| have == k) {
            Some(item) => item.1 = v,
            None => items.push((k.to_string(), v)),
        }
    }
    if items != have {
        plan.metadata = Some(items);
    }

    for (i, d) in spec.disks.iter().enumerate() {
        if d.size_gb <= 0 || d.type_ == DISK_TYPE_SCRATCH {
            continue;
        }
        let attached = instance
            .disks
            .iter()
            .find(|a| a.index == i32::try_from(i).ok())
            .or_else(|| instance.disks.get(i));
        let Some(a) = attached else {
            return Err(format!("the instance has no disk {i}"));
        };
        let (Some(have), Some(source)) = (a.disk_size_gb, a.source.as_deref()) else {
            return Err(format!(
                "the instance does not show the size and name of disk {i}"
            ));
        };
        let disk = source.rsplit('/').next().unwrap_or(source).to_string();
        if have > d.size_gb {
            return Err(format!(
                "disk {disk} has {have} GB, the class asks for {} GB: a smaller disk needs a new instance",
                d.size_gb
            ));
        }
        if have < d.size_gb {
            plan.resize.push((disk, d.size_gb));
        }
    }
    Ok(plan)
}

/// The `metadata::Items` of a plan's metadata.
pub fn metadata_items(items: &[(String, Option<String>)]) -> Vec<metadata::Items> {
    items
        .iter()
        .map(|(k, v)| {
            let item = metadata::Items::new().set_key(k.clone());
            match v {
                Some(v) => item.set_value(v.clone()),
                None => item,
            }
        })
        .collect()
}

mod call;
pub use call::update_status;

#[cfg(test)]
mod tests;
