//! Endpoint selection in a Keystone v3 service catalog, as gophercloud (the
//! reference's client) does it, for the driver's own session
//! ([`crate::direct`]); openstack_sdk's session selects the same way but for
//! `region_id` (design: providers/openstack.md, "Catalog").
//!
//! - a service is found under its type or one of the aliases gophercloud
//!   lists for it (block storage: `block-storage`, `block-store`, `volume`,
//!   `volumev3`; not `volumev2`, which names the retired v2 API);
//! - only `public` endpoints (the reference never asks for another interface);
//! - the region matches the endpoint's `region` or its `region_id`.

use openstack_sdk::types::ServiceType;
use serde_json::Value;

/// The catalog types a service is listed under, preferred first.
pub(crate) fn service_types(service: &ServiceType) -> Vec<String> {
    match service {
        ServiceType::BlockStorage => ["block-storage", "block-store", "volume", "volumev3"]
            .map(String::from)
            .to_vec(),
        other => vec![other.to_string()],
    }
}

/// The URL of the public endpoint of `service` in `region`.
pub(crate) fn pick(catalog: &[Value], service: &ServiceType, region: &str) -> Option<String> {
    for kind in service_types(service) {
        for entry in catalog.iter().filter(|e| e["type"].as_str() == Some(&kind)) {
            let Some(endpoints) = entry["endpoints"].as_array() else {
                continue;
            };
            let found = endpoints.iter().find(|ep| {
                ep["interface"].as_str() == Some("public")
                    && (region.is_empty()
                        || ep["region"].as_str() == Some(region)
                        || ep["region_id"].as_str() == Some(region))
            });
            if let Some(url) = found.and_then(|ep| ep["url"].as_str()) {
                return Some(url.to_string());
            }
        }
    }
    None
}

/// A catalog URL with the API version the driver speaks, as gophercloud
/// adds it: Neutron's catalog entry is usually unversioned (`/v2.0` is
/// appended), Nova's and Cinder's carry their version (`/v2.1`, `/v3/<project>`)
/// and get one only when they lack it. Always ends with `/`.
pub(crate) fn versioned_url(service: &ServiceType, url: &str) -> String {
    let base = url.trim_end_matches('/');
    let has = |prefix: &str| {
        base.split('/').any(|seg| {
            seg.starts_with(prefix)
                && seg[prefix.len()..]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '.')
        })
    };
    let version = match service {
        ServiceType::Network if !has("v2") => Some("v2.0"),
        ServiceType::Compute if !has("v2") => Some("v2.1"),
        ServiceType::BlockStorage if !has("v3") => Some("v3"),
        _ => None,
    };
    match version {
        Some(v) => format!("{base}/{v}/"),
        None => format!("{base}/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(kind: &str, endpoints: Value) -> Value {
        json!({"type": kind, "endpoints": endpoints})
    }

    #[test]
    fn block_storage_is_found_under_each_alias_gophercloud_accepts_but_volumev2() {
        for kind in ["block-storage", "block-store", "volume", "volumev3"] {
            let c = [entry(
                kind,
                json!([{"interface": "public", "region": "r", "region_id": "r", "url": "https://c/v3/p"}]),
            )];
            assert_eq!(
                pick(&c, &ServiceType::BlockStorage, "r").as_deref(),
                Some("https://c/v3/p"),
                "{kind}"
            );
        }
        let c = [entry(
            "volumev2",
            json!([{"interface": "public", "region": "r", "url": "https://c/v2/p"}]),
        )];
        assert_eq!(pick(&c, &ServiceType::BlockStorage, "r"), None);
    }

    #[test]
    fn only_public_endpoints_of_the_region_by_name_or_id_are_picked() {
        let c = [entry(
            "compute",
            json!([
                {"interface": "internal", "region": "r", "url": "https://internal"},
                {"interface": "admin", "region": "r", "url": "https://admin"},
                {"interface": "public", "region": "other", "url": "https://other"},
                {"interface": "public", "region": "Region One", "region_id": "r", "url": "https://public"}
            ]),
        )];
        assert_eq!(
            pick(&c, &ServiceType::Compute, "r").as_deref(),
            Some("https://public")
        );
        assert_eq!(
            pick(&c, &ServiceType::Compute, "Region One").as_deref(),
            Some("https://public")
        );
        assert_eq!(pick(&c, &ServiceType::Compute, "elsewhere"), None);
        assert_eq!(pick(&c, &ServiceType::Network, "r"), None);
    }

    #[test]
    fn versions_are_added_only_where_the_catalog_lacks_them() {
        let v = |s: ServiceType, u: &str| versioned_url(&s, u);
        assert_eq!(
            v(ServiceType::Network, "https://n:9696"),
            "https://n:9696/v2.0/"
        );
        assert_eq!(
            v(ServiceType::Network, "https://n:9696/v2.0/"),
            "https://n:9696/v2.0/"
        );
        assert_eq!(
            v(ServiceType::Compute, "https://c/compute/v2.1"),
            "https://c/compute/v2.1/"
        );
        assert_eq!(
            v(ServiceType::Compute, "https://c:8774"),
            "https://c:8774/v2.1/"
        );
        assert_eq!(
            v(ServiceType::BlockStorage, "https://v/v3/p1"),
            "https://v/v3/p1/"
        );
        assert_eq!(
            v(ServiceType::BlockStorage, "https://v:8776"),
            "https://v:8776/v3/"
        );
    }
}
