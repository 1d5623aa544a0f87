//! Clouds whose service catalog or Keystone URL differ from the fake's
//! default, in the ways gophercloud (the reference's client) accepts: no block
//! storage at all, Cinder under another of its service types, endpoints that
//! match the region by `region_id`, `internal`/`admin` endpoints beside the
//! public one, and the auth URL with or without `/v3` and a trailing slash.

use crate::common;

use common::{class, env, machine, Env};
use mcm_driver::{Driver, ListMachinesRequest};
use mcm_fake_openstack::Catalog;
use serde_json::json;

/// Create, status, list and delete of one machine without volumes.
async fn lifecycle(env: &Env, spec: serde_json::Value) {
    let c = class("c", spec);
    let mut req = env.request(&c, machine("cat"));
    let created = env.driver.create_machine(&req).await.expect("create");
    req.machine.spec.provider_id = created.provider_id.clone();
    let status = env.driver.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: c.clone(),
            secret: env.secret(),
        })
        .await
        .expect("list");
    assert!(
        listed.machine_list.contains_key(&created.provider_id),
        "{listed:?}"
    );
    env.driver.delete_machine(&req).await.expect("delete");
    assert!(env.fake.servers().is_empty(), "{:?}", env.fake.servers());
}

#[tokio::test]
async fn a_catalog_without_block_storage_serves_machines_without_volumes() {
    let env = env().await;
    env.fake.set_catalog(Catalog {
        block_storage_types: vec![],
        ..Catalog::default()
    });
    lifecycle(&env, env.spec()).await;
}

#[tokio::test]
async fn a_machine_with_a_typed_root_volume_on_a_cloud_without_block_storage_fails_clearly() {
    let env = env().await;
    env.fake.set_catalog(Catalog {
        block_storage_types: vec![],
        ..Catalog::default()
    });
    let mut spec = env.spec();
    spec["spec"]["rootDiskSize"] = json!(50);
    spec["spec"]["rootDiskType"] = json!("ssd");
    let c = class("c", spec);
    let err = env
        .driver
        .create_machine(&env.request(&c, machine("novol")))
        .await
        .expect_err("no block storage");
    assert_eq!(err.code, mcm_driver::Code::Internal, "{err:?}");
    assert!(
        err.message.contains("block-storage") || err.message.contains("block storage"),
        "{err:?}"
    );
    assert!(env.fake.servers().is_empty());
}

/// Cinder listed under each service type gophercloud's block-storage v3
/// client accepts (`block-storage` and its aliases but `volumev2`).
#[tokio::test]
async fn cinder_is_found_under_each_of_its_service_type_aliases() {
    for kind in ["block-storage", "block-store", "volume", "volumev3"] {
        let env = env().await;
        env.fake.set_catalog(Catalog {
            block_storage_types: vec![kind.into()],
            ..Catalog::default()
        });
        let mut spec = env.spec();
        spec["spec"]["rootDiskSize"] = json!(20);
        spec["spec"]["rootDiskType"] = json!("ssd");
        let c = class("c", spec);
        let mut req = env.request(&c, machine("alias"));
        let created = env
            .driver
            .create_machine(&req)
            .await
            .unwrap_or_else(|e| panic!("Cinder as {kind}: {e:?}"));
        assert_eq!(env.fake.volumes().len(), 1, "{kind}");
        req.machine.spec.provider_id = created.provider_id;
        env.driver.delete_machine(&req).await.expect("delete");
        assert!(env.fake.volumes().is_empty(), "{kind}");
    }
}

#[tokio::test]
async fn the_spec_region_matches_an_endpoints_region_id_as_in_gophercloud() {
    let env = env().await;
    env.fake.set_catalog(Catalog {
        region: "Region One (Frankfurt)".into(),
        region_id: common::REGION.into(),
        ..Catalog::default()
    });
    lifecycle(&env, env.spec()).await;
}

#[tokio::test]
async fn the_spec_region_matches_an_endpoints_region_name() {
    let env = env().await;
    env.fake.set_catalog(Catalog {
        region: common::REGION.into(),
        region_id: "r-0001".into(),
        ..Catalog::default()
    });
    lifecycle(&env, env.spec()).await;
}

#[tokio::test]
async fn the_public_endpoints_are_used_when_internal_and_admin_ones_are_listed() {
    let env = env().await;
    env.fake.set_catalog(Catalog {
        unreachable_internal_and_admin: true,
        ..Catalog::default()
    });
    lifecycle(&env, env.spec()).await;
}

#[tokio::test]
async fn the_auth_url_works_with_or_without_v3_and_a_trailing_slash() {
    let base = |env: &Env| env.fake.auth_url().trim_end_matches("/v3").to_string();
    for form in ["{b}/v3", "{b}/v3/", "{b}", "{b}/"] {
        let env = env().await;
        let url = form.replace("{b}", &base(&env));
        let mut secret = env.secret();
        if let Some(d) = secret.data.as_mut() {
            d.insert(
                "authURL".into(),
                k8s_openapi::ByteString(url.clone().into()),
            );
        }
        let c = class("c", env.spec());
        let mut req = env.request(&c, machine("auth"));
        req.secret = secret;
        let created = env
            .driver
            .create_machine(&req)
            .await
            .unwrap_or_else(|e| panic!("authURL {url}: {e:?}"));
        req.machine.spec.provider_id = created.provider_id;
        env.driver.delete_machine(&req).await.expect("delete");
    }
}
