//! # Node template sync, without I/O
//!
//! What the machine controller must change on a Node so that it carries the
//! Machine's `spec.nodeTemplate` (labels, annotations, taints) and the
//! MachineClass's `nodeTemplate.virtualCapacity` (in `status.capacity`).
//!
//! The Node remembers what was applied last in two annotations, in the
//! reference's format, so that objects written by the Go controller are
//! continued correctly:
//!
//! - `node.machine.sapcloud.io/last-applied-anno-labels-taints`: the JSON of
//!   the Machine's `nodeTemplate` (`{"metadata":{"labels":…,"annotations":…},"spec":{"taints":[…]}}`);
//! - `node.machine.sapcloud.io/last-applied-virtual-capacity`: the JSON of the
//!   class's `virtualCapacity` (absent when there is none).
//!
//! Rules ([`plan`]):
//!
//! - a label or annotation of the template is set when the Node lacks it or
//!   has another value;
//! - a taint of the template replaces the Node's taint with the same key and
//!   effect (never a second taint with the same key and effect, which the API
//!   server rejects); other taints keep their order;
//! - a label, annotation, taint or capacity key that was applied last time and
//!   has left the template is removed, but only while the Node still carries
//!   the value that was applied: a value someone else has written since is
//!   theirs and stays;
//! - everything else on the Node (other controllers' labels, the kubelet's
//!   capacity, `node.gardener.cloud/critical-components-not-ready`) is never
//!   touched;
//! - an unreadable last-applied annotation is reported and treated as empty,
//!   and is rewritten with the current template (the reference retries the
//!   parse forever);
//! - quantities are compared by value (`1000m` equals `1`), since the API
//!   server stores them in canonical form.
//!
//! The runtime writes the result with a resourceVersion precondition, so a
//! concurrent change of the taints (e.g. the removal of the
//! critical-components taint) is never undone.

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use mcm_api::constants as c;
use mcm_api::NodeTemplateSpec;
use std::collections::BTreeMap;

/// What the Node should carry.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSyncInput<'a> {
    /// The Machine's name (the `node.gardener.cloud/machine-name` label).
    pub machine_name: &'a str,
    /// The Machine's `spec.nodeTemplate`.
    pub template: &'a NodeTemplateSpec,
    /// The MachineClass's `nodeTemplate.virtualCapacity` (empty without one).
    pub virtual_capacity: &'a BTreeMap<String, Quantity>,
}

/// The changes to make on a Node. Empty maps / `None` mean "nothing to do".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSyncPlan {
    /// Labels to set (`Some`) or remove (`None`).
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations to set (`Some`) or remove (`None`), including the
    /// last-applied bookkeeping.
    pub annotations: BTreeMap<String, Option<String>>,
    /// The complete new taint list, when it changes.
    pub taints: Option<Vec<Taint>>,
    /// The complete new finalizer list, when the node finalizer is missing.
    pub finalizers: Option<Vec<String>>,
    /// `status.capacity` keys to set (`Some`) or remove (`None`).
    pub capacity: BTreeMap<String, Option<Quantity>>,
    /// Last-applied annotations that could not be read (treated as empty).
    pub unreadable: Vec<&'static str>,
}

impl NodeSyncPlan {
    /// Whether the Node already is as it should be.
    pub fn is_empty(&self) -> bool {
        !self.has_metadata_changes() && self.capacity.is_empty()
    }

    /// Whether labels, annotations, taints or finalizers change (one object
    /// patch), as opposed to only `status.capacity` (a status patch).
    pub fn has_metadata_changes(&self) -> bool {
        !self.labels.is_empty()
            || !self.annotations.is_empty()
            || self.taints.is_some()
            || self.finalizers.is_some()
    }

    /// Also removes the startup taint `key` (NoSchedule) in this plan's
    /// write: from the new taint list when the plan changes taints, else from
    /// `node_taints`. Answers whether the plan now removes it.
    pub fn drop_startup_taint(&mut self, key: &str, node_taints: &[Taint]) -> bool {
        use crate::machine::startup_taint::{has_startup_taint, without_startup_taint};
        let base = self.taints.as_deref().unwrap_or(node_taints);
        if !has_startup_taint(key, base) {
            return false;
        }
        self.taints = Some(without_startup_taint(key, base));
        true
    }
}

/// Decides what to change on `node`.
pub fn plan(input: &NodeSyncInput<'_>, node: &Node) -> NodeSyncPlan {
    let mut out = NodeSyncPlan::default();
    let empty = BTreeMap::new();
    let node_labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let node_annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);

    let (last, alt_ok) = last_applied_template(node_annotations);
    if !alt_ok {
        out.unreadable.push(c::LAST_APPLIED_ALT_ANNOTATION);
    }
    let (last_capacity, cap_ok) = last_applied_capacity(node_annotations);
    if !cap_ok {
        out.unreadable
            .push(c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION);
    }

    // Labels.
    let mut wanted_labels = input.template.metadata.labels.clone().unwrap_or_default();
    wanted_labels.insert(c::MACHINE_NAME_NODE_LABEL.into(), input.machine_name.into());
    out.labels = sync_map(
        &wanted_labels,
        node_labels,
        last.metadata.labels.as_ref().unwrap_or(&empty),
    );

    // Annotations (the bookkeeping keys are handled below).
    let wanted_annotations = input
        .template
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    out.annotations = sync_map(
        &wanted_annotations,
        node_annotations,
        last.metadata.annotations.as_ref().unwrap_or(&empty),
    );
    out.annotations.retain(|k, _| {
        k != c::LAST_APPLIED_ALT_ANNOTATION && k != c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION
    });

    // Taints.
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let wanted = dedup_taints(input.template.spec.taints.as_deref().unwrap_or_default());
    let last_taints = last.spec.taints.clone().unwrap_or_default();
    out.taints = sync_taints(&wanted, &current, &last_taints);

    // Bookkeeping of the template: rewritten when it differs from what the
    // Node records (compared as values, so the Go controller's JSON is kept).
    if !alt_ok || !same_template(&last, input.template) {
        let json = serde_json::to_string(input.template).unwrap_or_default();
        out.annotations
            .insert(c::LAST_APPLIED_ALT_ANNOTATION.into(), Some(json));
    }

    // Virtual capacity.
    let node_capacity = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.clone())
        .unwrap_or_default();
    for (k, v) in &last_capacity {
        if !input.virtual_capacity.contains_key(k)
            && node_capacity.get(k).is_some_and(|n| same_quantity(n, v))
        {
            out.capacity.insert(k.clone(), None);
        }
    }
    for (k, v) in input.virtual_capacity {
        if !node_capacity.get(k).is_some_and(|n| same_quantity(n, v)) {
            out.capacity.insert(k.clone(), Some(v.clone()));
        }
    }
    let recorded = node_annotations.contains_key(c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION);
    if input.virtual_capacity.is_empty() {
        if recorded {
            out.annotations
                .insert(c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION.into(), None);
        }
    } else if !recorded || !cap_ok || !same_capacity(&last_capacity, input.virtual_capacity) {
        let json = serde_json::to_string(input.virtual_capacity).unwrap_or_default();
        out.annotations.insert(
            c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION.into(),
            Some(json),
        );
    }

    // The node finalizer.
    let finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == c::NODE_FINALIZER) {
        let mut f = finalizers;
        f.push(c::NODE_FINALIZER.into());
        out.finalizers = Some(f);
    }
    out
}

/// Whether the Machine's node template (labels, annotations, taints), the
/// last-applied bookkeeping and the node finalizer are on `node`: node sync
/// has no object patch left to write. `status.capacity` is not part of it.
/// The startup taint waits for this (design: startup-taint.md).
pub fn template_applied(input: &NodeSyncInput<'_>, node: &Node) -> bool {
    !plan(input, node).has_metadata_changes()
}

/// The last applied template; `false` when the annotation is unreadable.
fn last_applied_template(annotations: &BTreeMap<String, String>) -> (NodeTemplateSpec, bool) {
    match annotations.get(c::LAST_APPLIED_ALT_ANNOTATION) {
        None => (NodeTemplateSpec::default(), true),
        Some(s) => match serde_json::from_str(s) {
            Ok(t) => (t, true),
            Err(_) => (NodeTemplateSpec::default(), false),
        },
    }
}

/// The last applied virtual capacity; `false` when the annotation is unreadable.
fn last_applied_capacity(
    annotations: &BTreeMap<String, String>,
) -> (BTreeMap<String, Quantity>, bool) {
    match annotations.get(c::LAST_APPLIED_VIRTUAL_CAPACITY_ANNOTATION) {
        None => (BTreeMap::new(), true),
        Some(s) => match serde_json::from_str::<Option<BTreeMap<String, Quantity>>>(s) {
            Ok(m) => (m.unwrap_or_default(), true),
            Err(_) => (BTreeMap::new(), false),
        },
    }
}

/// Set what `wanted` names, remove what `last` applied and `wanted` dropped
/// (only while the node still has the applied value).
fn sync_map(
    wanted: &BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
    last: &BTreeMap<String, String>,
) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for (k, v) in last {
        if !wanted.contains_key(k) && node.get(k) == Some(v) {
            out.insert(k.clone(), None);
        }
    }
    for (k, v) in wanted {
        if node.get(k) != Some(v) {
            out.insert(k.clone(), Some(v.clone()));
        }
    }
    out
}

fn same_taint_id(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    same_taint_id(a, b) && a.value.as_deref().unwrap_or("") == b.value.as_deref().unwrap_or("")
}

/// One taint per key and effect; a later duplicate wins (as the reference's map does).
fn dedup_taints(taints: &[Taint]) -> Vec<Taint> {
    let mut out: Vec<Taint> = Vec::new();
    for t in taints {
        match out.iter_mut().find(|o| same_taint_id(o, t)) {
            Some(o) => *o = t.clone(),
            None => out.push(t.clone()),
        }
    }
    out
}

/// The new taint list, or `None` when it stays as it is.
fn sync_taints(wanted: &[Taint], current: &[Taint], last: &[Taint]) -> Option<Vec<Taint>> {
    let mut out: Vec<Taint> = Vec::with_capacity(current.len() + wanted.len());
    let mut changed = false;
    for t in current {
        if let Some(w) = wanted.iter().find(|w| same_taint_id(w, t)) {
            if same_taint(w, t) {
                out.push(t.clone());
            } else {
                out.push(w.clone());
                changed = true;
            }
        } else if last.iter().any(|l| same_taint(l, t)) {
            changed = true; // applied by us, left the template
        } else {
            out.push(t.clone());
        }
    }
    for w in wanted {
        if !current.iter().any(|t| same_taint_id(t, w)) {
            out.push(w.clone());
            changed = true;
        }
    }
    changed.then_some(out)
}

/// Templates compared by what the sync applies (labels, annotations, taints).
fn same_template(a: &NodeTemplateSpec, b: &NodeTemplateSpec) -> bool {
    let labels = |t: &NodeTemplateSpec| t.metadata.labels.clone().unwrap_or_default();
    let annotations = |t: &NodeTemplateSpec| t.metadata.annotations.clone().unwrap_or_default();
    let taints = |t: &NodeTemplateSpec| t.spec.taints.clone().unwrap_or_default();
    labels(a) == labels(b) && annotations(a) == annotations(b) && {
        let (ta, tb) = (taints(a), taints(b));
        ta.len() == tb.len() && ta.iter().zip(tb.iter()).all(|(x, y)| same_taint(x, y))
    }
}

fn same_capacity(a: &BTreeMap<String, Quantity>, b: &BTreeMap<String, Quantity>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| same_quantity(v, w)))
}

/// Two quantities with the same value (`1000m` = `1`, `1Ki` = `1024`).
pub fn same_quantity(a: &Quantity, b: &Quantity) -> bool {
    if a.0 == b.0 {
        return true;
    }
    match (quantity_value(&a.0), quantity_value(&b.0)) {
        (Some(x), Some(y)) => {
            let scale = x.abs().max(y.abs()).max(1e-12);
            (x - y).abs() / scale < 1e-12
        }
        _ => false,
    }
}

/// The numeric value of a Kubernetes quantity string; `None` if malformed.
pub fn quantity_value(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|ch: char| !(ch.is_ascii_digit() || ch == '.' || ch == '+' || ch == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with('e') || e.starts_with('E') => {
            let exp: i32 = e[1..].parse().ok()?;
            10f64.powi(exp)
        }
        _ => return None,
    };
    Some(n * factor)
}

#[cfg(test)]
mod tests;
