//! Alibaba's ECS 2014-05-26 API metadata (an excerpt of `api-docs.json`, see
//! `metadata/extract.py`): the parameters and error codes of the three actions
//! the fake serves, which keep the fake and the client honest.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

const METADATA: &str = include_str!("../metadata/ecs-2014-05-26.json");

/// One documented parameter.
#[derive(Clone, Debug, Deserialize)]
pub struct Parameter {
    /// Name, e.g. `Tag`, `SystemDisk.Category`.
    pub name: String,
    /// `repeatList` (`Name.N.Prop`), `flat` (`Name.Prop`) or `simple`.
    #[serde(default)]
    pub style: String,
    /// JSON schema type.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Properties of list elements or flat objects.
    #[serde(default)]
    pub properties: Vec<String>,
    /// Most elements of a repeat list.
    #[serde(default, rename = "maxItems")]
    pub max_items: Option<u64>,
}

/// One documented action.
#[derive(Clone, Debug, Deserialize)]
pub struct Api {
    /// Its parameters.
    pub parameters: Vec<Parameter>,
    /// HTTP status → error codes.
    #[serde(rename = "errorCodes")]
    pub error_codes: BTreeMap<String, Vec<String>>,
}

/// The metadata excerpt.
#[derive(Clone, Debug, Deserialize)]
pub struct Metadata {
    /// Action → API.
    pub apis: BTreeMap<String, Api>,
    /// Gateway codes (throttling) → HTTP status → actions that list them.
    #[serde(rename = "gatewayErrorCodes")]
    pub gateway_error_codes: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

/// The parsed metadata (`None` only if the embedded file were broken, which a test rules out).
pub fn metadata() -> Option<&'static Metadata> {
    static META: OnceLock<Option<Metadata>> = OnceLock::new();
    META.get_or_init(|| serde_json::from_str(METADATA).ok())
        .as_ref()
}

impl Metadata {
    /// Whether `name` (e.g. `Tag.3.Key`, `SystemDisk.Size`, `InstanceIds`) is a
    /// documented parameter of `action`.
    pub fn param_known(&self, action: &str, name: &str) -> bool {
        let Some(api) = self.apis.get(action) else {
            return false;
        };
        if api.parameters.iter().any(|p| p.name == name) {
            return true;
        }
        let mut parts = name.splitn(3, '.');
        let (Some(head), Some(second)) = (parts.next(), parts.next()) else {
            return false;
        };
        let rest = parts.next();
        api.parameters.iter().any(|p| {
            if p.name != head {
                return false;
            }
            match (second.parse::<u64>(), rest) {
                // `List.N.Prop`
                (Ok(n), Some(prop)) => {
                    p.style == "repeatList"
                        && n >= 1
                        && p.max_items.is_none_or(|m| n <= m)
                        && p.properties.iter().any(|q| q == prop)
                }
                // `List.N` of a list of scalars
                (Ok(n), None) => p.style == "repeatList" && p.properties.is_empty() && n >= 1,
                // `Object.Prop`
                (Err(_), None) => p.style == "flat" && p.properties.iter().any(|q| q == second),
                (Err(_), Some(_)) => false,
            }
        })
    }

    /// The HTTP status the metadata documents for `code` on `action`: the
    /// action's own list, or the product's gateway (throttling) codes.
    pub fn error_status(&self, action: &str, code: &str) -> Option<u16> {
        let own = self.apis.get(action).and_then(|api| {
            api.error_codes
                .iter()
                .find(|(_, codes)| codes.iter().any(|c| c == code))
                .map(|(status, _)| status.clone())
        });
        let status = own.or_else(|| {
            self.gateway_error_codes
                .get(code)
                .and_then(|by_status| by_status.keys().next().cloned())
        })?;
        status.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_metadata_parses_and_holds_the_three_actions() {
        let m = metadata().expect("metadata parses");
        for a in ["RunInstances", "DescribeInstances", "DeleteInstance"] {
            assert!(m.apis.contains_key(a), "{a}");
        }
    }

    #[test]
    fn flattened_names_are_checked_against_lists_and_objects() {
        let m = metadata().expect("metadata");
        for ok in [
            "ImageId",
            "Tag.1.Key",
            "Tag.20.Value",
            "DataDisk.2.DeleteWithInstance",
            "SystemDisk.Category",
            "SystemDisk.Size",
            "ClientToken",
            "UserData",
        ] {
            assert!(m.param_known("RunInstances", ok), "{ok}");
        }
        for bad in [
            "Tag.0.Key",
            "Tag.1.Colour",
            "DataDisk.1",
            "Imageid",
            "SystemDisk.Colour",
        ] {
            assert!(!m.param_known("RunInstances", bad), "{bad}");
        }
        assert!(m.param_known("DescribeInstances", "NextToken"));
        assert!(m.param_known("DeleteInstance", "Force"));
        assert!(!m.param_known("DeleteInstance", "RegionId"));
    }

    #[test]
    fn error_statuses_come_from_the_action_or_the_gateway_list() {
        let m = metadata().expect("metadata");
        assert_eq!(
            m.error_status("RunInstances", "OperationDenied.NoStock"),
            Some(403)
        );
        assert_eq!(m.error_status("RunInstances", "Zone.NotOnSale"), Some(400));
        assert_eq!(
            m.error_status("DeleteInstance", "InvalidInstanceId.NotFound"),
            Some(404)
        );
        assert_eq!(
            m.error_status("DescribeInstances", "Throttling.User"),
            Some(400)
        );
        assert_eq!(m.error_status("RunInstances", "NoSuchCode"), None);
    }
}
