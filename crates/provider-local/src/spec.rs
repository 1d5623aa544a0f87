//! The providerSpec of a local MachineClass: parsing, validation and the
//! network settings it asks for.
//!
//! ```json
//! {
//!   "image": "local/ubuntu-24.04",
//!   "instanceType": "local.medium",
//!   "zone": "local-1a",
//!   "srcAndDstChecksEnabled": false,
//!   "ipv6AddressCount": 1,
//!   "ipv6PrefixCount": 1,
//!   "tags": {
//!     "kubernetes.io/cluster/shoot--demo": "1",
//!     "kubernetes.io/role/node": "1"
//!   }
//! }
//! ```
//!
//! `image` and `instanceType` are required non-empty strings; `tags` must hold
//! exactly one `kubernetes.io/cluster/<name>` key and the key
//! `kubernetes.io/role/node`. `srcAndDstChecksEnabled` defaults to `true`,
//! the IPv6 counts to 0 (at most [`MAX_IPV6_COUNT`]). `zone` is optional (the
//! server's zone is used when absent).

use mcm_driver::provider_spec::{
    FieldError, Join, Messages, ProviderSpec, SecretData, SecretUse, ROOT,
};
use mcm_driver::spec_decode::{DecodeError, Decoded};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The prefix of the tag key naming the cluster a VM belongs to.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// The tag key marking a VM as a worker node.
pub const ROLE_NODE_TAG: &str = "kubernetes.io/role/node";
/// The largest IPv6 address or prefix count a spec may ask for.
pub const MAX_IPV6_COUNT: u64 = 64;

/// A validated providerSpec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalProviderSpec {
    /// The (simulated) image of the VM.
    pub image: String,
    /// The (simulated) instance type.
    pub instance_type: String,
    /// The zone, when the spec names one.
    pub zone: Option<String>,
    /// The tags put on the VM.
    pub tags: BTreeMap<String, String>,
    /// Whether source/destination checking stays enabled (default `true`).
    pub src_and_dst_checks_enabled: bool,
    /// How many IPv6 addresses the VM must have.
    pub ipv6_address_count: u32,
    /// How many IPv6 prefixes the VM must have.
    pub ipv6_prefix_count: u32,
}

/// Why a providerSpec is invalid: one message per problem, each naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid providerSpec: {}", .problems.join("; "))]
pub struct SpecError {
    /// The problems, e.g. `providerSpec.image: required`.
    pub problems: Vec<String>,
}

/// The network settings that InitializeMachine establishes (and CreateMachine does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WantedNetwork {
    /// The wanted source/destination check flag.
    pub src_dst_check: bool,
    /// The wanted number of IPv6 addresses.
    pub ipv6_address_count: usize,
    /// The wanted number of IPv6 prefixes.
    pub ipv6_prefix_count: usize,
}

fn required_string(
    obj: &serde_json::Map<String, Value>,
    field: &str,
    problems: &mut Vec<String>,
) -> String {
    match obj.get(field) {
        None | Some(Value::Null) => {
            problems.push(format!("providerSpec.{field}: required"));
            String::new()
        }
        Some(Value::String(s)) if s.trim().is_empty() => {
            problems.push(format!(
                "providerSpec.{field}: required (must not be empty)"
            ));
            String::new()
        }
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            problems.push(format!("providerSpec.{field}: must be a string"));
            String::new()
        }
    }
}

fn count(obj: &serde_json::Map<String, Value>, field: &str, problems: &mut Vec<String>) -> u32 {
    match obj.get(field) {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_IPV6_COUNT => n as u32,
            _ => {
                problems.push(format!(
                    "providerSpec.{field}: must be an integer between 0 and {MAX_IPV6_COUNT}"
                ));
                0
            }
        },
    }
}

fn tags(
    obj: &serde_json::Map<String, Value>,
    problems: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let map = match obj.get("tags") {
        None | Some(Value::Null) => {
            problems.push(format!(
                "providerSpec.tags: required (with a key {CLUSTER_TAG_PREFIX}<name> and the key {ROLE_NODE_TAG})"
            ));
            return BTreeMap::new();
        }
        Some(Value::Object(m)) => m,
        Some(_) => {
            problems.push("providerSpec.tags: must be a map of strings".to_string());
            return BTreeMap::new();
        }
    };
    let mut tags = BTreeMap::new();
    for (k, v) in map {
        match v {
            Value::String(s) => {
                tags.insert(k.clone(), s.clone());
            }
            _ => problems.push(format!("providerSpec.tags[{k}]: must be a string")),
        }
    }
    let clusters: Vec<&String> = tags
        .keys()
        .filter(|k| k.starts_with(CLUSTER_TAG_PREFIX))
        .collect();
    match clusters.as_slice() {
        [] => problems.push(format!(
            "providerSpec.tags: a key {CLUSTER_TAG_PREFIX}<name> is required"
        )),
        [one] if one.len() == CLUSTER_TAG_PREFIX.len() => problems.push(format!(
            "providerSpec.tags: the key {CLUSTER_TAG_PREFIX}<name> needs a cluster name"
        )),
        [_] => {}
        _ => problems.push(format!(
            "providerSpec.tags: exactly one key {CLUSTER_TAG_PREFIX}<name> is allowed"
        )),
    }
    if !tags.contains_key(ROLE_NODE_TAG) {
        problems.push(format!(
            "providerSpec.tags: the key {ROLE_NODE_TAG} is required"
        ));
    }
    tags
}

impl LocalProviderSpec {
    /// Parses and validates a providerSpec, collecting every problem.
    pub fn parse(spec: &Value) -> Result<LocalProviderSpec, SpecError> {
        let Value::Object(obj) = spec else {
            let what = match spec {
                Value::Null => "required (a JSON object)",
                _ => "must be a JSON object",
            };
            return Err(SpecError {
                problems: vec![format!("providerSpec: {what}")],
            });
        };
        let mut problems = Vec::new();
        let image = required_string(obj, "image", &mut problems);
        let instance_type = required_string(obj, "instanceType", &mut problems);
        let zone = match obj.get("zone") {
            None | Some(Value::Null) => None,
            Some(Value::String(z)) if !z.is_empty() && !z.contains('/') => Some(z.clone()),
            Some(_) => {
                problems
                    .push("providerSpec.zone: must be a non-empty string without '/'".to_string());
                None
            }
        };
        let src_and_dst_checks_enabled = match obj.get("srcAndDstChecksEnabled") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                problems.push("providerSpec.srcAndDstChecksEnabled: must be a boolean".to_string());
                true
            }
        };
        let ipv6_address_count = count(obj, "ipv6AddressCount", &mut problems);
        let ipv6_prefix_count = count(obj, "ipv6PrefixCount", &mut problems);
        let tags = tags(obj, &mut problems);
        if !problems.is_empty() {
            return Err(SpecError { problems });
        }
        Ok(LocalProviderSpec {
            image,
            instance_type,
            zone,
            tags,
            src_and_dst_checks_enabled,
            ipv6_address_count,
            ipv6_prefix_count,
        })
    }

    /// The cluster tag key (`kubernetes.io/cluster/<name>`) of a validated spec.
    pub fn cluster_tag(&self) -> &str {
        self.tags
            .keys()
            .find(|k| k.starts_with(CLUSTER_TAG_PREFIX))
            .map_or("", String::as_str)
    }

    /// The network settings this spec asks InitializeMachine to establish.
    pub fn wanted_network(&self) -> WantedNetwork {
        WantedNetwork {
            src_dst_check: self.src_and_dst_checks_enabled,
            ipv6_address_count: self.ipv6_address_count as usize,
            ipv6_prefix_count: self.ipv6_prefix_count as usize,
        }
    }
}

/// The drivers' shared front half (docs/design/driver.md, "Provider
/// skeleton"). The local cloud's spec has no reference to match: it is
/// parsed by hand ([`LocalProviderSpec::parse`], every problem at once, no
/// key in another spelling), and the local cloud needs no Secret.
impl ProviderSpec for LocalProviderSpec {
    const PROVIDER: &'static str = crate::driver::PROVIDER_NAME;
    const MESSAGES: Messages = Messages {
        join: Join::Aggregate,
        decode: "invalid providerSpec: ",
        spec: "invalid providerSpec: ",
        secret: None,
    };

    /// An empty `provider` is the local driver's too, and case does not matter.
    fn serves(provider: &str) -> bool {
        provider.is_empty() || provider.eq_ignore_ascii_case(Self::PROVIDER)
    }

    fn wrong_provider(found: &str) -> String {
        format!(
            "machineClass.provider: {found:?} is not supported by the local driver (want {:?})",
            Self::PROVIDER
        )
    }

    fn decode(value: &Value) -> Result<Decoded<Self>, DecodeError> {
        LocalProviderSpec::parse(value)
            .map(|value| Decoded {
                value,
                warnings: Vec::new(),
            })
            .map_err(|e| DecodeError {
                field: ROOT.into(),
                message: e.problems.join("; "),
                warnings: Vec::new(),
            })
    }

    fn decode_failed(e: &DecodeError) -> String {
        format!("{}{}", Self::MESSAGES.decode, e.message)
    }

    /// [`LocalProviderSpec::parse`] has checked everything.
    fn validate(&self) -> Vec<FieldError> {
        Vec::new()
    }

    fn validate_secret(_secret: SecretData<'_>, _purpose: SecretUse) -> Vec<FieldError> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({
            "image": "local/ubuntu",
            "instanceType": "local.small",
            "srcAndDstChecksEnabled": false,
            "ipv6AddressCount": 2,
            "ipv6PrefixCount": 1,
            "tags": {"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/node": "1", "team": "x"}
        })
    }

    #[test]
    fn parses_a_full_spec() {
        let s = LocalProviderSpec::parse(&good()).expect("valid");
        assert_eq!(s.cluster_tag(), "kubernetes.io/cluster/c1");
        assert_eq!(
            s.wanted_network(),
            WantedNetwork {
                src_dst_check: false,
                ipv6_address_count: 2,
                ipv6_prefix_count: 1
            }
        );
        assert_eq!(s.zone, None);
    }

    #[test]
    fn defaults_keep_checks_on_and_no_ipv6() {
        let mut v = good();
        let o = v.as_object_mut().expect("object");
        o.remove("srcAndDstChecksEnabled");
        o.remove("ipv6AddressCount");
        o.remove("ipv6PrefixCount");
        let s = LocalProviderSpec::parse(&v).expect("valid");
        assert!(s.src_and_dst_checks_enabled);
        assert_eq!(s.ipv6_address_count, 0);
        assert_eq!(s.ipv6_prefix_count, 0);
    }

    #[test]
    fn names_each_bad_field() {
        let e = LocalProviderSpec::parse(&json!({})).expect_err("invalid");
        let text = e.to_string();
        assert!(text.contains("providerSpec.image: required"), "{text}");
        assert!(
            text.contains("providerSpec.instanceType: required"),
            "{text}"
        );
        assert!(text.contains("providerSpec.tags"), "{text}");

        let e = LocalProviderSpec::parse(&json!("garbage")).expect_err("invalid");
        assert_eq!(
            e.problems,
            vec!["providerSpec: must be a JSON object".to_string()]
        );
        let e = LocalProviderSpec::parse(&Value::Null).expect_err("invalid");
        assert!(e.to_string().contains("providerSpec: required"));

        let mut v = good();
        v["image"] = json!(7);
        v["ipv6PrefixCount"] = json!(-1);
        v["tags"] = json!({"kubernetes.io/cluster/a": "1", "kubernetes.io/cluster/b": "1"});
        let text = LocalProviderSpec::parse(&v)
            .expect_err("invalid")
            .to_string();
        assert!(
            text.contains("providerSpec.image: must be a string"),
            "{text}"
        );
        assert!(text.contains("providerSpec.ipv6PrefixCount"), "{text}");
        assert!(text.contains("exactly one key"), "{text}");
        assert!(text.contains(ROLE_NODE_TAG), "{text}");
    }
}
