//! Hot update on the local cloud (design: hot-update.md): which
//! providerSpec changes a running instance takes ([`in_place_changes`]) and
//! the tags the update removes ([`removed_tags`]).
//!
//! In place: the value of a tag, a tag added or removed (except the
//! `kubernetes.io/cluster/<name>` and `kubernetes.io/role/node` keys, which
//! make the instance another cluster's or not a node), and `instanceType`.
//! Everything else (`image`, `zone`, the network settings) needs a new
//! instance.

use crate::spec::{CLUSTER_TAG_PREFIX, ROLE_NODE_TAG};
use mcm_driver::{changed_fields, InPlaceChanges};
use serde_json::Value;

fn has_tag(spec: &Value, key: &str) -> bool {
    spec.get("tags").and_then(|t| t.get(key)).is_some()
}

/// Which changes between two local providerSpecs a running instance takes.
pub fn in_place_changes(last_applied: &Value, current: &Value) -> InPlaceChanges {
    let mut out = InPlaceChanges::default();
    for field in changed_fields(last_applied, current) {
        let in_place = match field.strip_prefix("tags.") {
            Some(key) => {
                let identity = key.starts_with(CLUSTER_TAG_PREFIX) || key == ROLE_NODE_TAG;
                // A value change keeps the key; adding or removing one of these does not.
                !identity || (has_tag(last_applied, key) && has_tag(current, key))
            }
            None => field == "instanceType",
        };
        if in_place {
            out.in_place.push(field);
        } else {
            out.need_replacement.push(field);
        }
    }
    out
}

/// The tag keys the last-applied spec had and the current one has not.
pub fn removed_tags(last_applied: &Value, current: &Value) -> Vec<String> {
    let Some(Value::Object(old)) = last_applied.get("tags") else {
        return Vec::new();
    };
    old.keys()
        .filter(|k| !has_tag(current, k))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(tags: Value, ty: &str, image: &str) -> Value {
        json!({"image": image, "instanceType": ty, "tags": tags})
    }

    fn base_tags() -> Value {
        json!({"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/node": "1", "team": "a"})
    }

    #[test]
    fn tag_values_added_and_removed_tags_and_the_instance_type_change_in_place() {
        let a = spec(base_tags(), "small", "img");
        let b = spec(
            json!({"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/node": "1", "team": "b", "cost": "x"}),
            "large",
            "img",
        );
        let c = in_place_changes(&a, &b);
        assert_eq!(c.in_place, vec!["instanceType", "tags.cost", "tags.team"]);
        assert!(c.need_replacement.is_empty());
        let removed = spec(
            json!({"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/node": "1"}),
            "small",
            "img",
        );
        assert!(in_place_changes(&a, &removed).all_in_place());
    }

    #[test]
    fn the_image_and_the_zone_need_a_new_instance() {
        let a = spec(base_tags(), "small", "img-1");
        let mut b = spec(base_tags(), "small", "img-2");
        b["zone"] = json!("z2");
        let c = in_place_changes(&a, &b);
        assert!(c.in_place.is_empty());
        assert_eq!(c.need_replacement, vec!["image", "zone"]);
    }

    #[test]
    fn the_network_settings_need_a_new_instance() {
        let a = spec(base_tags(), "small", "img");
        let mut b = a.clone();
        b["ipv6AddressCount"] = json!(1);
        b["srcAndDstChecksEnabled"] = json!(false);
        let c = in_place_changes(&a, &b);
        assert_eq!(
            c.need_replacement,
            vec!["ipv6AddressCount", "srcAndDstChecksEnabled"]
        );
    }

    #[test]
    fn moving_an_instance_to_another_cluster_needs_a_new_instance() {
        let a = spec(base_tags(), "small", "img");
        let b = spec(
            json!({"kubernetes.io/cluster/c2": "1", "kubernetes.io/role/node": "1", "team": "a"}),
            "small",
            "img",
        );
        let c = in_place_changes(&a, &b);
        assert_eq!(
            c.need_replacement,
            vec![
                "tags.kubernetes.io/cluster/c1",
                "tags.kubernetes.io/cluster/c2"
            ]
        );
    }

    #[test]
    fn removed_tags_are_the_old_keys_the_new_spec_lacks() {
        let a = spec(base_tags(), "small", "img");
        let b = spec(
            json!({"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/node": "1", "new": "1"}),
            "small",
            "img",
        );
        assert_eq!(removed_tags(&a, &b), vec!["team".to_string()]);
        assert!(removed_tags(&a, &a).is_empty());
    }
}
