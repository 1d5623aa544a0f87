//! Decoding the providerSpec JSON with the key matching of Go's `encoding/json`.
//!
//! The Go provider decodes the providerSpec with `json.Unmarshal`, which
//! matches an object key to a struct field exactly or, failing that,
//! case-insensitively: `subnetId` fills `subnetID`, `IAM` fills `iam`. Classes
//! written that way work with the Go provider, so they work here too:
//! [`canonical_keys`] renames such keys to their canonical spelling before
//! serde decodes the spec, and reports each renaming as a warning (the
//! MachineClass controller publishes it as a Warning Event on the class).
//!
//! Which key wins when several spell the same field:
//! - the exactly spelled key wins over every other spelling (the others are
//!   ignored, with a warning). Go decodes every key in document order, so there
//!   the last one wins; after the API server, which stores the providerSpec
//!   with its keys sorted, that is the one that sorts last, which is not
//!   necessarily what the user meant;
//! - among several other spellings, the one that sorts last (byte order) wins,
//!   as in Go after the API server.
//!
//! Only field names are matched this way; the keys of `tags` are the user's
//! data and are kept as written.

use serde_json::{Map, Value};

/// What lies under a key of a providerSpec object.
#[derive(Clone, Copy)]
enum Below {
    /// A value whose keys (if any) are not fields (scalars, lists of strings, `tags`).
    Value,
    /// An object of the given shape.
    Object(&'static [Field]),
    /// A list of objects of the given shape.
    List(&'static [Field]),
}

/// One field of a providerSpec object type: its canonical JSON key and what lies below it.
type Field = (&'static str, Below);

const LEAF: Below = Below::Value;

/// `AwsProviderSpec`.
const SPEC: &[Field] = &[
    ("apiVersion", LEAF),
    ("ami", LEAF),
    ("blockDevices", Below::List(BLOCK_DEVICE)),
    ("capacityReservation", Below::Object(CAPACITY_RESERVATION)),
    ("ebsOptimized", LEAF),
    ("iam", Below::Object(IAM)),
    ("machineType", LEAF),
    ("keyName", LEAF),
    ("monitoring", LEAF),
    ("networkInterfaces", Below::List(NETWORK_INTERFACE)),
    ("region", LEAF),
    ("spotPrice", LEAF),
    ("srcAndDstChecksEnabled", LEAF),
    ("tags", LEAF),
    (
        "instanceMetadataOptions",
        Below::Object(INSTANCE_METADATA_OPTIONS),
    ),
    ("cpuOptions", Below::Object(CPU_OPTIONS)),
    ("placement", Below::Object(PLACEMENT)),
    (
        "instanceMarketOptions",
        Below::Object(INSTANCE_MARKET_OPTIONS),
    ),
];

/// `BlockDevice`.
const BLOCK_DEVICE: &[Field] = &[
    ("deviceName", LEAF),
    ("ebs", Below::Object(EBS)),
    ("noDevice", LEAF),
    ("virtualName", LEAF),
];

/// `EbsVolume`.
const EBS: &[Field] = &[
    ("deleteOnTermination", LEAF),
    ("encrypted", LEAF),
    ("iops", LEAF),
    ("throughput", LEAF),
    ("kmsKeyID", LEAF),
    ("snapshotID", LEAF),
    ("volumeSize", LEAF),
    ("volumeType", LEAF),
];

/// `CapacityReservation`.
const CAPACITY_RESERVATION: &[Field] = &[
    ("capacityReservationPreference", LEAF),
    ("capacityReservationId", LEAF),
    ("capacityReservationResourceGroupArn", LEAF),
    ("isMLCapacityBlock", LEAF),
];

/// `IamProfile`.
const IAM: &[Field] = &[("arn", LEAF), ("name", LEAF)];

/// `NetworkInterface`.
const NETWORK_INTERFACE: &[Field] = &[
    ("associatePublicIPAddress", LEAF),
    ("ipv6AddressCount", LEAF),
    ("ipv6PrefixCount", LEAF),
    ("deleteOnTermination", LEAF),
    ("description", LEAF),
    ("securityGroupIDs", LEAF),
    ("subnetID", LEAF),
    ("interfaceType", LEAF),
    ("networkCardIndex", LEAF),
    ("deviceIndex", LEAF),
    ("primaryIpv6", LEAF),
];

/// `InstanceMetadataOptions`.
const INSTANCE_METADATA_OPTIONS: &[Field] = &[
    ("httpEndpoint", LEAF),
    ("httpPutResponseHopLimit", LEAF),
    ("httpTokens", LEAF),
    ("httpProtocolIpv6", LEAF),
];

/// `CpuOptions`.
const CPU_OPTIONS: &[Field] = &[
    ("coreCount", LEAF),
    ("threadsPerCore", LEAF),
    ("amdSevSnp", LEAF),
];

/// `PlacementSpec`.
const PLACEMENT: &[Field] = &[
    ("groupId", LEAF),
    ("tenancy", LEAF),
    ("hostId", LEAF),
    ("partitionNumber", LEAF),
    ("affinity", LEAF),
];

/// `InstanceMarketOptions`.
const INSTANCE_MARKET_OPTIONS: &[Field] = &[("marketType", LEAF)];

/// A key as Go's `encoding/json` compares it when no field matches exactly:
/// ASCII letters in one case, and the two non-ASCII letters that fold onto
/// ASCII ones (`ſ` → `s`, the Kelvin sign `K` → `k`).
fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{17F}' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// The providerSpec with every key that Go's `encoding/json` would match to
/// a field case-insensitively renamed to the field's canonical key, and one
/// warning per renamed or ignored key (naming the canonical key). Keys that
/// match no field are kept as they are (unknown keys are ignored later).
pub fn canonical_keys(value: &Value) -> (Value, Vec<String>) {
    let mut warnings = Vec::new();
    let out = walk(value, Below::Object(SPEC), "providerSpec", &mut warnings);
    (out, warnings)
}

fn walk(value: &Value, below: Below, path: &str, warnings: &mut Vec<String>) -> Value {
    match (below, value) {
        (Below::Object(fields), Value::Object(map)) => {
            Value::Object(object(map, fields, path, warnings))
        }
        (Below::List(fields), Value::Array(items)) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    walk(
                        item,
                        Below::Object(fields),
                        &format!("{path}[{i}]"),
                        warnings,
                    )
                })
                .collect(),
        ),
        // Anything else is decoded (or rejected) by serde as it is.
        _ => value.clone(),
    }
}

fn object(
    map: &Map<String, Value>,
    fields: &'static [Field],
    path: &str,
    warnings: &mut Vec<String>,
) -> Map<String, Value> {
    let mut out = Map::new();
    // Keys that match no field are kept for serde, which ignores them.
    for (key, value) in map {
        let folded = fold(key);
        if !fields.iter().any(|(name, _)| fold(name) == folded) {
            out.insert(key.clone(), value.clone());
        }
    }
    for &(name, below) in fields {
        let folded = fold(name);
        // Every spelling of this field, in byte order, as the API server
        // stores them (Go decodes them in that order: the last one wins there).
        let mut spellings: Vec<&String> = map.keys().filter(|k| fold(k) == folded).collect();
        spellings.sort();
        let winner = match spellings.iter().find(|k| k.as_str() == name) {
            Some(exact) => *exact,
            None => match spellings.last() {
                Some(last) => {
                    warnings.push(format!(
                        "{path}.{last}: read as {name}, as Go's encoding/json matches keys case-insensitively; write {name}, the canonical key"
                    ));
                    *last
                }
                None => continue,
            },
        };
        for other in spellings.iter().filter(|k| **k != winner) {
            warnings.push(format!(
                "{path}.{other}: ignored: {path}.{winner} spells the same field {name} and wins; write {name} once"
            ));
        }
        if let Some(value) = map.get(winner) {
            out.insert(
                name.to_string(),
                walk(value, below, &format!("{path}.{name}"), warnings),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests;
