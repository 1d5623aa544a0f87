//! What ECS checks of a request's values before it acts, each refused with
//! an error code the ECS metadata documents for the action (HTTP 400):
//!
//! - a value that does not parse as the metadata's `type` (`integer`,
//!   `number`, `boolean`) → `InvalidParameter`;
//! - `RunInstances`' `InstanceName` outside ECS's naming rule (2 to 128
//!   characters, starting with a letter, then letters, digits, `.`, `_`,
//!   `:`, `,` and `-`) → `InvalidInstanceName.Malformed`;
//! - tag keys of more than 128 characters, or starting with `aliyun` or
//!   `acs:`, or holding `http://` / `https://` → `InvalidTagKey.Malformed`;
//!   values of more than 128 characters or holding a URL scheme →
//!   `InvalidTagValue.Malformed`;
//! - a system or data disk category outside ECS's list →
//!   `InvalidSystemDiskCategory.ValueNotSupported` /
//!   `InvalidDataDiskCategory.ValueNotSupported`.

use crate::metadata::Metadata;
use std::collections::BTreeMap;

/// A refusal: error code and message (always HTTP 400).
pub type Refused = (&'static str, String);

/// The disk categories ECS documents for `SystemDisk.Category` and
/// `DataDisk.N.Category`.
pub const DISK_CATEGORIES: &[&str] = &[
    "cloud",
    "cloud_efficiency",
    "cloud_ssd",
    "cloud_essd",
    "cloud_auto",
    "cloud_essd_entry",
    "ephemeral_ssd",
];

fn not_valid(code: &'static str, name: &str) -> Refused {
    (
        code,
        format!("The specified parameter {name} is not valid."),
    )
}

/// The metadata type of a parameter (`Tag.3.Key` → `Tag`'s property type
/// is not kept, so only simple parameters are typed).
fn type_of<'m>(meta: &'m Metadata, action: &str, name: &str) -> Option<&'m str> {
    meta.apis
        .get(action)?
        .parameters
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.kind.as_deref())
}

/// ECS's instance name rule.
pub fn instance_name_ok(name: &str) -> bool {
    let len = name.chars().count();
    (2..=128).contains(&len)
        && name.starts_with(|c: char| c.is_alphabetic())
        && !name.starts_with("http://")
        && !name.starts_with("https://")
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || ".:_,-".contains(c))
}

fn tag_key_ok(k: &str) -> bool {
    let len = k.chars().count();
    (1..=128).contains(&len)
        && !k.starts_with("aliyun")
        && !k.starts_with("acs:")
        && !k.contains("http://")
        && !k.contains("https://")
}

fn tag_value_ok(v: &str) -> bool {
    v.chars().count() <= 128 && !v.contains("http://") && !v.contains("https://")
}

/// Checks the values of `params` for `action`.
pub fn values(
    meta: &Metadata,
    action: &str,
    params: &BTreeMap<String, String>,
) -> Result<(), Refused> {
    for (name, value) in params {
        let ok = match type_of(meta, action, name) {
            Some("integer") => value.parse::<i64>().is_ok(),
            Some("number") => value.parse::<f64>().is_ok(),
            Some("boolean") => matches!(value.as_str(), "true" | "false"),
            _ => true,
        };
        if !ok {
            return Err(not_valid("InvalidParameter", name));
        }
        let parts: Vec<&str> = name.split('.').collect();
        match parts.as_slice() {
            ["Tag", _, "Key"] if !tag_key_ok(value) => {
                return Err(not_valid("InvalidTagKey.Malformed", name))
            }
            ["Tag", _, "Value"] if !tag_value_ok(value) => {
                return Err(not_valid("InvalidTagValue.Malformed", name))
            }
            _ => {}
        }
        if action != "RunInstances" {
            continue;
        }
        match parts.as_slice() {
            ["InstanceName"] if !instance_name_ok(value) => {
                return Err(not_valid("InvalidInstanceName.Malformed", name))
            }
            ["SystemDisk", "Category"] if !DISK_CATEGORIES.contains(&value.as_str()) => {
                return Err(not_valid(
                    "InvalidSystemDiskCategory.ValueNotSupported",
                    name,
                ))
            }
            ["DataDisk", _, "Category"] if !DISK_CATEGORIES.contains(&value.as_str()) => {
                return Err(not_valid("InvalidDataDiskCategory.ValueNotSupported", name))
            }
            _ => {}
        }
    }
    Ok(())
}
