//! Template propagation into existing machines.

use super::*;

/// The inline `MachineConfiguration` fields of a MachineSpec (JSON names).
pub const MACHINE_CONFIGURATION_FIELDS: [&str; 8] = [
    "drainTimeout",
    "healthTimeout",
    "creationTimeout",
    "inPlaceUpdateTimeout",
    "machinePreserveTimeout",
    "disableHealthTimeout",
    "maxEvictRetries",
    "nodeConditions",
];

/// The machine spec after pushing the set template's in-place fields into it,
/// or `None` when nothing changes (design: sets-and-deployments.md, "Template propagation").
///
/// `spec.nodeTemplate` is pushed into machines that are neither Failed nor
/// Terminating, the inline machine configuration likewise, `spec.class.kind`
/// into every machine. Both specs are the JSON form of a MachineSpec; the
/// comparison treats `null`, `{}` and `[]` as absent. The reference mutates
/// its informer cache while doing this (design: sets-and-deployments.md,
/// "Where mcm-rs differs from the reference", item 10); here the caller gets a
/// fresh value and writes it with a resourceVersion precondition.
pub fn propagate_template(
    template_spec: &serde_json::Value,
    machine_spec: &serde_json::Value,
    phase: &MachinePhase,
    machine_deleting: bool,
) -> Option<serde_json::Value> {
    use serde_json::Value;
    let tpl = template_spec.as_object()?;
    let mut out = machine_spec.as_object().cloned().unwrap_or_default();
    let mut changed = false;
    let active = phase.is_active() && !machine_deleting;
    let mut sync_field = |key: &str, out: &mut serde_json::Map<String, Value>| {
        let want = tpl.get(key).map(normalize).filter(|v| !v.is_null());
        let have = out.get(key).map(normalize).filter(|v| !v.is_null());
        if want != have {
            match tpl.get(key) {
                Some(v) if want.is_some() => {
                    out.insert(key.to_string(), v.clone());
                }
                _ => {
                    out.remove(key);
                }
            }
            changed = true;
        }
    };
    if active {
        sync_field("nodeTemplate", &mut out);
        for key in MACHINE_CONFIGURATION_FIELDS {
            sync_field(key, &mut out);
        }
    }
    let want_kind = tpl
        .get("class")
        .and_then(|c| c.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let have_kind = out
        .get("class")
        .and_then(|c| c.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if want_kind != have_kind {
        let class = out
            .entry("class".to_string())
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(obj) = class.as_object_mut() {
            obj.insert("kind".to_string(), Value::String(want_kind.to_string()));
            changed = true;
        }
    }
    changed.then_some(Value::Object(out))
}

/// A JSON value with `null`, empty objects and empty arrays removed
/// recursively (Go's semantic equality treats nil and empty alike; an absent
/// value normalizes to `null`).
pub fn normalize(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let n = normalize(v);
                if !n.is_null() {
                    out.insert(k.clone(), n);
                }
            }
            if out.is_empty() {
                Value::Null
            } else {
                Value::Object(out)
            }
        }
        Value::Array(a) => {
            if a.is_empty() {
                Value::Null
            } else {
                Value::Array(a.iter().map(normalize).collect())
            }
        }
        other => other.clone(),
    }
}

/// The `generateName` of machines created for a set: `<set>-`, or `<set>`
/// when the dashed form would be too long to be a valid name prefix.
pub fn machine_generate_name(set_name: &str) -> String {
    // Kubernetes appends 5 random characters and names are at most 253 long.
    let dashed = format!("{set_name}-");
    if dashed.len() + 5 <= 253 {
        dashed
    } else {
        set_name.chars().take(248).collect()
    }
}
