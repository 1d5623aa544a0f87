//! Hot update (docs/design/providers/alicloud.md, "Hot update"): the
//! instance's tags follow the class's through TagResources and
//! UntagResources; every other providerSpec field needs a new instance.

use crate::config::ActionClass;
use crate::ecs::{Ecs, Instance, Params};
use crate::errors::EcsError;
use crate::spec::{AlicloudProviderSpec, CLUSTER_TAG_PREFIX, ROLE_TAG_PREFIX};
use mcm_driver::{changed_fields, InPlaceChanges, TagStyle};
use serde_json::Value;
use std::collections::BTreeMap;

/// TagResources and UntagResources take at most this many tags per call.
pub const MAX_TAGS_PER_CALL: usize = 20;

/// Which changes between two Alicloud providerSpecs a running instance can
/// take: tags, except the cluster and role tags (the driver finds a
/// machine's instance by its cluster tag's key and value).
pub fn in_place_changes(last_applied: &Value, current: &Value) -> InPlaceChanges {
    let mut out = InPlaceChanges::default();
    for field in changed_fields(last_applied, current) {
        match field.strip_prefix("tags.") {
            Some(key) if !key.contains(CLUSTER_TAG_PREFIX) && !key.contains(ROLE_TAG_PREFIX) => {
                out.in_place.push(field)
            }
            _ => out.need_replacement.push(field),
        }
    }
    out
}

/// What TagResources and UntagResources must do on an instance: the class's
/// tags whose value differs or is missing, and the keys the last-applied
/// spec had, the class no longer has, and the instance still carries (never
/// the identity, cluster or role tags, nor tags the class never managed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagPlan {
    /// Tags to set.
    pub set: BTreeMap<String, String>,
    /// Keys to remove.
    pub remove: Vec<String>,
}

impl TagPlan {
    /// Whether the instance already matches.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

/// The tag changes that make `instance` match `spec`.
pub fn tag_plan(
    spec: &AlicloudProviderSpec,
    last: &AlicloudProviderSpec,
    instance: &Instance,
) -> TagPlan {
    let have: BTreeMap<&str, &str> = instance
        .tags()
        .iter()
        .map(|t| (t.tag_key.as_str(), t.tag_value.as_str()))
        .collect();
    let set = spec
        .tags
        .iter()
        .filter(|(k, v)| have.get(k.as_str()) != Some(&v.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remove = last
        .tags
        .keys()
        .filter(|k| {
            !spec.tags.contains_key(*k)
                && have.contains_key(k.as_str())
                && !TagStyle::Slash.is_identity_key(k)
                && !k.contains(CLUSTER_TAG_PREFIX)
                && !k.contains(ROLE_TAG_PREFIX)
        })
        .cloned()
        .collect();
    TagPlan { set, remove }
}

/// The machine status of a failed TagResources/UntagResources: a tag ECS
/// rejects (`InvalidTagKey.Malformed`, `InvalidParameter.TagCount`, ...) is
/// `InvalidArgument` with ECS's message; everything else as other calls.
pub fn update_status(e: &EcsError, what: &str) -> mcm_driver::Status {
    let code = e.code();
    if code.starts_with("InvalidTag")
        || code.starts_with("InvalidParameter")
        || code.starts_with("MissingParameter")
    {
        mcm_driver::Status::invalid_argument(format!("{what}: {e}"))
    } else {
        e.status(what)
    }
}

impl Ecs {
    /// TagResources on one instance (in chunks of [`MAX_TAGS_PER_CALL`]).
    pub async fn tag_instance(
        &self,
        id: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), EcsError> {
        let list: Vec<(&String, &String)> = tags.iter().collect();
        for chunk in list.chunks(MAX_TAGS_PER_CALL) {
            let mut p = Params::new();
            p.set("RegionId", &self.region)
                .set("ResourceType", "instance")
                .set("ResourceId.1", id)
                .set_tags(chunk.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            self.call(ActionClass::TagResources, &p).await?;
        }
        Ok(())
    }

    /// UntagResources of these keys on one instance (in chunks of [`MAX_TAGS_PER_CALL`]).
    pub async fn untag_instance(&self, id: &str, keys: &[String]) -> Result<(), EcsError> {
        for chunk in keys.chunks(MAX_TAGS_PER_CALL) {
            let mut p = Params::new();
            p.set("RegionId", &self.region)
                .set("ResourceType", "instance")
                .set("ResourceId.1", id);
            for (i, k) in chunk.iter().enumerate() {
                p.set(format!("TagKey.{}", i + 1), k);
            }
            self.call(ActionClass::UntagResources, &p).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(tags: Value) -> Value {
        json!({"instanceType": "ecs.g6.large", "imageID": "m-1", "region": "cn-beijing", "tags": tags})
    }

    #[test]
    fn tags_are_in_place_and_the_cluster_tag_and_other_fields_are_not() {
        let a = spec(
            json!({"kubernetes.io/cluster/c": "1", "kubernetes.io/role/node": "1", "team": "a"}),
        );
        let mut b = spec(
            json!({"kubernetes.io/cluster/c": "2", "kubernetes.io/role/node": "1", "cost": "x"}),
        );
        b["instanceType"] = json!("ecs.g6.xlarge");
        let c = in_place_changes(&a, &b);
        assert_eq!(c.in_place, vec!["tags.cost", "tags.team"]);
        assert_eq!(
            c.need_replacement,
            vec!["instanceType", "tags.kubernetes.io/cluster/c"]
        );
    }

    fn decoded(tags: Value) -> AlicloudProviderSpec {
        AlicloudProviderSpec::from_json(&spec(tags)).unwrap_or_default()
    }

    fn instance(tags: &[(&str, &str)]) -> Instance {
        serde_json::from_value(json!({
            "InstanceId": "i-1",
            "Tags": {"Tag": tags.iter().map(|(k, v)| json!({"TagKey": k, "TagValue": v})).collect::<Vec<_>>()}
        }))
        .unwrap_or_default()
    }

    #[test]
    fn the_plan_sets_what_differs_and_removes_only_keys_the_class_dropped() {
        let last = decoded(json!({"kubernetes.io/cluster/c": "1", "team": "a", "old": "o"}));
        let want = decoded(json!({"kubernetes.io/cluster/c": "1", "team": "b"}));
        let i = instance(&[
            ("kubernetes.io/cluster/c", "1"),
            ("team", "a"),
            ("old", "o"),
            ("foreign", "f"),
            ("machine.sapcloud.io/uid", "u"),
        ]);
        let plan = tag_plan(&want, &last, &i);
        assert_eq!(
            plan.set,
            BTreeMap::from([("team".to_string(), "b".to_string())])
        );
        assert_eq!(plan.remove, vec!["old"]);
        let done = instance(&[("kubernetes.io/cluster/c", "1"), ("team", "b")]);
        assert!(tag_plan(&want, &last, &done).is_empty());
    }
}
