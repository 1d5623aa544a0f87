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

/// The machine type families Compute Engine offers (its "Machine families
/// resource and comparison guide"): `<family>-<type>[-<vCPUs>]`, shared-core
/// `e2-micro|small|medium`, `f1-micro`, `g1-small`, and custom types
/// (`[<family>-]custom-<vCPUs>-<MiB>[-ext]`).
const FAMILIES: &[&str] = &[
    "e2", "n1", "n2", "n2d", "n4", "c2", "c2d", "c3", "c3d", "c4", "c4a", "c4d", "t2d", "t2a",
    "m1", "m2", "m3", "m4", "a2", "a3", "a4", "g2", "h3", "z3",
];
const TYPES: &[&str] = &[
    "standard",
    "highmem",
    "highcpu",
    "micro",
    "small",
    "medium",
    "megamem",
    "ultramem",
    "hypermem",
    "highgpu",
    "megagpu",
    "ultragpu",
    "edgegpu",
    "highlssd",
    "standardlssd",
];

/// Whether `name` is a machine type Compute Engine has.
pub(crate) fn machine_type_exists(name: &str) -> bool {
    if matches!(name, "f1-micro" | "g1-small") {
        return true;
    }
    let parts: Vec<&str> = name.split('-').collect();
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let custom = |p: &[&str]| match p {
        ["custom", cpus, mem] | ["custom", cpus, mem, "ext"] => number(cpus) && number(mem),
        _ => false,
    };
    match parts.as_slice() {
        ["custom", ..] => custom(&parts),
        [family, rest @ ..] if FAMILIES.contains(family) => match rest {
            ["custom", ..] => custom(rest),
            [ty] => TYPES.contains(ty),
            [ty, n] => TYPES.contains(ty) && number(n),
            [ty, n, "lssd" | "metal"] => TYPES.contains(ty) && number(n),
            _ => false,
        },
        _ => false,
    }
}

/// `machineType` (`zones/<zone>/machineTypes/<name>` or a full URL) must name
/// a machine type of its zone, as `instances.insert` checks.
fn machine_type(mt: &str) -> Result<(), Refused> {
    let (zone, name) = match mt.rsplit_once("/machineTypes/") {
        Some((head, name)) => (head.rsplit('/').next().unwrap_or_default(), name),
        None => ("", mt),
    };
    if machine_type_exists(name) {
        return Ok(());
    }
    Err(invalid(format!(
        "Invalid value for field 'resource.machineType': '{mt}'. Machine type with name '{name}' does not exist in zone '{zone}'."
    )))
}

/// The URL prefix a full resource reference may carry.
pub(crate) const API_PREFIX: &str = "https://www.googleapis.com/compute/v1/";

/// The boot and image disks' `sourceImage` must be an image reference
/// (`projects/<p>/global/images/<name>` or `…/images/family/<family>`,
/// optionally a full URL) and must exist (`deleted` are the images that do
/// not).
pub(crate) fn source_images(
    instance: &Value,
    deleted: &std::collections::BTreeSet<String>,
) -> Result<(), Refused> {
    let disks = instance["disks"].as_array().cloned().unwrap_or_default();
    for (i, d) in disks.iter().enumerate() {
        let Some(image) = d["initializeParams"]["sourceImage"].as_str() else {
            continue;
        };
        let path = image.trim_start_matches(API_PREFIX);
        let parts: Vec<&str> = path.split('/').collect();
        let well_formed = match parts.as_slice() {
            ["projects", p, "global", "images", name] => !p.is_empty() && !name.is_empty(),
            ["projects", p, "global", "images", "family", f] => !p.is_empty() && !f.is_empty(),
            ["global", "images", name] => !name.is_empty(),
            _ => false,
        };
        if !well_formed {
            return Err(invalid(format!(
                "Invalid value for field 'resource.disks[{i}].initializeParams.sourceImage': '{image}'. The URL is malformed."
            )));
        }
        if deleted.contains(path) {
            return Err((
                404,
                "notFound",
                format!("The resource '{path}' was not found"),
            ));
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
    if let Some(mt) = instance["machineType"].as_str() {
        machine_type(mt)?;
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
