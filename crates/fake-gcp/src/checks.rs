//! What Compute Engine checks on `instances.insert` before it starts an
//! operation, each refused with the status, reason and message shape the
//! real API answers (Google's JSON error envelope):
//!
//! - the body against the `Instance` schema of the Compute v1 discovery
//!   document (`testdata/compute.v1.subset.json`): an unknown field, a value
//!   of the wrong JSON type, a value outside an enum are `400 invalid`
//!   ("Invalid JSON payload received. …", "Invalid value at …");
//! - the instance name against the pattern the API documents for
//!   `Instance.name` (RFC 1035: `[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?`);
//! - the required `machineType`, at least one disk;
//! - label keys and values (lower-case letters, digits, `_`, `-`, at most 63
//!   characters, a key starts with a letter; at most 64 labels);
//! - combinations GCE refuses: a preemptible or Spot instance with
//!   `automaticRestart: true` or `onHostMaintenance: MIGRATE`, an instance
//!   with guest accelerators and `onHostMaintenance: MIGRATE`.

use serde_json::Value;
use std::sync::OnceLock;

const DISCOVERY: &str = include_str!("../testdata/compute.v1.subset.json");

fn discovery() -> Option<&'static Value> {
    static DOC: OnceLock<Option<Value>> = OnceLock::new();
    DOC.get_or_init(|| serde_json::from_str(DISCOVERY).ok())
        .as_ref()
}

/// A refused request: HTTP status, `errors[].reason`, message.
pub(crate) type Refused = (u16, &'static str, String);

fn invalid(message: String) -> Refused {
    (400, "invalid", message)
}

/// The field path in the API's snake_case spelling, as its parse errors
/// name it (`instance_resource.scheduling.on_host_maintenance`).
fn snake(path: &str) -> String {
    let mut out = String::new();
    for c in path.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first place `v` leaves schema `schema` (a discovery schema object).
fn schema_check(doc: &Value, schema: &Value, v: &Value, path: &str) -> Result<(), Refused> {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => match doc["schemas"].get(r) {
            Some(s) => s,
            None => return Ok(()),
        },
        None => schema,
    };
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let format = schema.get("format").and_then(Value::as_str);
    let wrong = || invalid(format!("Invalid value at '{}' ({ty}), {v}", snake(path)));
    match (ty, v) {
        (_, Value::Null) => Ok(()),
        ("object", Value::Object(o)) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, child) in o {
                    match props.get(k) {
                        Some(s) => schema_check(doc, s, child, &format!("{path}.{k}"))?,
                        None => {
                            return Err(invalid(format!(
                                "Invalid JSON payload received. Unknown name \"{k}\" at '{}': Cannot find field.",
                                snake(path)
                            )))
                        }
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties") {
                for (k, child) in o {
                    schema_check(doc, ap, child, &format!("{path}.{k}"))?;
                }
            }
            Ok(())
        }
        ("array", Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                schema_check(doc, &schema["items"], item, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        ("string", Value::String(s)) => {
            if let Some(values) = schema.get("enum").and_then(Value::as_array) {
                if !values.contains(v) {
                    return Err(wrong());
                }
            }
            // int64/uint64 travel as strings, but must hold a number.
            if matches!(format, Some("int64" | "uint64")) && s.parse::<i128>().is_err() {
                return Err(wrong());
            }
            Ok(())
        }
        // The JSON parser also takes an int64 as a number.
        ("string", Value::Number(_)) if matches!(format, Some("int64" | "uint64")) => Ok(()),
        ("integer", Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(()),
        ("integer", Value::String(s)) if s.parse::<i64>().is_ok() => Ok(()),
        ("boolean", Value::Bool(_)) | ("number", Value::Number(_)) => Ok(()),
        _ => Err(wrong()),
    }
}

/// RFC 1035, as `Instance.name` documents it.
pub(crate) fn name_ok(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A label key or value as Compute allows it.
pub(crate) fn label_ok(s: &str, key: bool) -> bool {
    s.len() <= 63
        && (!key || s.starts_with(|c: char| c.is_ascii_lowercase()))
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Label syntax and count (`instances.insert` and `setLabels`).
pub(crate) fn labels(labels: &Value) -> Result<(), Refused> {
    let Some(map) = labels.as_object() else {
        return Err(invalid("Invalid value for field 'labels'".into()));
    };
    if map.len() > 64 {
        return Err(invalid("Resource has more than 64 labels".into()));
    }
    for (k, v) in map {
        let value = v.as_str().unwrap_or_default();
        if !label_ok(k, true) || !label_ok(value, false) {
            return Err(invalid(format!(
                "Invalid value for field 'labels': '{k}={value}'. Label keys and values can only contain lowercase letters, numeric characters, underscores and dashes, at most 63 characters; keys must start with a lowercase letter."
            )));
        }
    }
    Ok(())
}

/// Everything `instances.insert` checks before it accepts `instance`.
pub(crate) fn insert(instance: &Value) -> Result<(), Refused> {
    if let Some(doc) = discovery() {
        schema_check(
            doc,
            &serde_json::json!({"$ref": "Instance"}),
            instance,
            "instanceResource",
        )?;
    }
    let name = instance["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        return Err((
            400,
            "required",
            "Required field 'resource.name' not specified".into(),
        ));
    }
    if !name_ok(name) {
        return Err(invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        )));
    }
    if instance["machineType"].as_str().is_none_or(str::is_empty) {
        return Err((
            400,
            "required",
            "Required field 'resource.machineType' not specified".into(),
        ));
    }
    if instance["disks"].as_array().is_none_or(Vec::is_empty) {
        return Err((
            400,
            "required",
            "Required field 'resource.disks' not specified".into(),
        ));
    }
    if let Some(l) = instance.get("labels") {
        labels(l)?;
    }
    let s = &instance["scheduling"];
    let preemptible =
        s["preemptible"].as_bool() == Some(true) || s["provisioningModel"].as_str() == Some("SPOT");
    let migrate = s["onHostMaintenance"].as_str() == Some("MIGRATE");
    if preemptible && s["automaticRestart"].as_bool() == Some(true) {
        return Err(invalid(
            "Invalid value for field 'resource.scheduling.automaticRestart': 'true'. Preemptible instances cannot be automatically restarted.".into(),
        ));
    }
    if preemptible && migrate {
        return Err(invalid(
            "Invalid value for field 'resource.scheduling.onHostMaintenance': 'MIGRATE'. Scheduling must have preemptible be false when OnHostMaintenance isn't TERMINATE.".into(),
        ));
    }
    let gpus = instance["guestAccelerators"]
        .as_array()
        .is_some_and(|a| !a.is_empty());
    if gpus && migrate {
        return Err(invalid(
            "Invalid value for field 'resource.scheduling.onHostMaintenance': 'MIGRATE'. Instances with guest accelerators do not support live migration.".into(),
        ));
    }
    Ok(())
}
