//! The driver against the in-process fake: the conformance kit, creation
//! (what Nova and Neutron receive), adoption, failures and their codes, and
//! deletion with the port and volume clean-up.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::{class, env, machine, secret_with, CLUSTER_KEY, ROLE_KEY, USER_DATA};
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver, ListMachinesRequest};
use mcm_fake_openstack::{Fault, Op};
use mcm_provider_openstack::MACHINE_UID_KEY;
use serde_json::{json, Value};

#[tokio::test]
async fn the_conformance_kit_passes_against_the_fake() {
    let env = env().await;
    let other_net = env.fake.add_network("other-net");
    let other_subnet = env
        .fake
        .add_subnet(&other_net, "other-subnet", "10.251.0.0/24");
    let mut empty = class("empty", json!({}));
    empty.metadata.name = Some("empty".into());
    let garbage = class(
        "garbage",
        json!({"apiVersion": "openstack.machine.gardener.cloud/v1alpha1", "kind": "MachineProviderConfig", "spec": {"flavorName": "m1.small"}}),
    );
    let fixture = Fixture {
        class: class("mine", env.spec()),
        other_class: class(
            "theirs",
            common::spec_for(&other_net, &other_subnet, "kubernetes.io-cluster-other"),
        ),
        secret: env.secret(),
        new_machine: Box::new(|_| machine("conf")),
        invalid_classes: vec![(empty, "Kind".into()), (garbage, "spec.region".into())],
    };
    let failures = run_all(&env.driver, &fixture).await;
    assert!(failures.is_empty(), "{failures:#?}");
    // The same checks out of process, through the gRPC hop.
    let served = mcm_driver_grpc::Loopback::start(std::sync::Arc::new(env.driver), "openstack")
        .await
        .expect("served");
    let failures = run_all(&served.client, &fixture).await;
    served.stop().await;
    assert!(failures.is_empty(), "over gRPC: {failures:#?}");
    assert!(
        env.fake.servers().is_empty(),
        "servers left: {:?}",
        env.fake.servers()
    );
    assert!(
        env.fake.ports().is_empty(),
        "ports left: {:?}",
        env.fake.ports()
    );
}

#[tokio::test]
async fn create_sends_the_reference_server_and_a_tagged_port_with_pod_cidrs() {
    let env = env().await;
    let mut spec = env.spec();
    env.fake
        .add_server_group("11111111-2222-4333-8444-555555555555");
    spec["spec"]["serverGroupID"] = json!("11111111-2222-4333-8444-555555555555");
    spec["spec"]["useConfigDrive"] = json!(true);
    spec["spec"]["podNetworkCIDRs"] = json!(["100.96.0.0/11", "fd00::/64"]);
    let c = class("c", spec);
    let m = machine("create");
    let uid = m.metadata.uid.clone().unwrap();
    let req = env.request(&c, m);
    let created = env.driver.create_machine(&req).await.expect("create");
    let servers = env.fake.servers();
    assert_eq!(servers.len(), 1);
    let s = &servers[0];
    assert_eq!(
        created.provider_id,
        format!("openstack:///RegionOne/{}", s["id"].as_str().unwrap())
    );
    assert_eq!(
        created.node_name,
        req.machine.metadata.name.clone().unwrap()
    );
    assert_eq!(created.addresses.len(), 1);
    assert_eq!(created.addresses[0].type_, "InternalIP");
    let body = env.fake.last_server_create().expect("a create request");
    let srv = &body["server"];
    assert_eq!(srv["name"], json!(req.machine.metadata.name));
    assert_eq!(srv["flavorRef"], json!(env.flavor));
    assert_eq!(srv["imageRef"], json!(env.image));
    assert_eq!(srv["key_name"], "mcm-key");
    assert_eq!(srv["availability_zone"], "nova");
    assert_eq!(srv["config_drive"], true);
    assert_eq!(srv["security_groups"], json!([{"name": "mcm-nodes"}]));
    assert_eq!(srv["metadata"][CLUSTER_KEY], "1");
    assert_eq!(srv["metadata"][ROLE_KEY], "1");
    assert_eq!(srv["metadata"][MACHINE_UID_KEY], json!(uid));
    use base64::Engine;
    let ud = base64::engine::general_purpose::STANDARD
        .decode(srv["user_data"].as_str().unwrap())
        .unwrap();
    assert_eq!(ud, USER_DATA.as_bytes());
    assert_eq!(
        body["os:scheduler_hints"]["group"],
        json!("11111111-2222-4333-8444-555555555555"),
        "a string, as Nova's schema and gophercloud have it"
    );
    let ports = env.fake.ports();
    assert_eq!(ports.len(), 1);
    let port = &ports[0];
    assert_eq!(
        srv["networks"],
        json!([{"uuid": env.network, "port": port["id"]}])
    );
    assert_eq!(port["name"], json!(req.machine.metadata.name));
    assert_eq!(port["network_id"], json!(env.network));
    assert_eq!(port["fixed_ips"][0]["subnet_id"], json!(env.subnet));
    assert_eq!(port["security_groups"], json!([env.security_group]));
    let tags: Vec<&str> = port["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tags, vec![CLUSTER_KEY, ROLE_KEY]);
    let pairs: Vec<&str> = port["allowed_address_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ip_address"].as_str().unwrap())
        .collect();
    assert_eq!(
        pairs,
        vec!["100.96.0.0/11", "fd00::/64"],
        "every pod CIDR, not the last one only"
    );
}

#[tokio::test]
async fn a_retried_create_adopts_the_server_instead_of_duplicating_it() {
    let env = env().await;
    let c = class("c", env.spec());
    let req = env.request(&c, machine("retry"));
    let first = env.driver.create_machine(&req).await.expect("first create");
    let second = env
        .driver
        .create_machine(&req)
        .await
        .expect("second create");
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(env.fake.servers().len(), 1);
    assert_eq!(env.fake.ports().len(), 1);
    assert_eq!(env.fake.calls()["nova.servers.create"], 1);
    // Concurrent creates of one machine in one driver: still one server.
    let req2 = env.request(&c, machine("concurrent"));
    let (a, b) = tokio::join!(
        env.driver.create_machine(&req2),
        env.driver.create_machine(&req2)
    );
    assert_eq!(a.expect("a").provider_id, b.expect("b").provider_id);
    assert_eq!(env.fake.servers().len(), 2);
}

#[tokio::test]
async fn a_server_of_the_same_name_with_another_machines_uid_is_not_adopted() {
    let env = env().await;
    let c = class("c", env.spec());
    let m = machine("stale");
    let name = m.metadata.name.clone().unwrap();
    let stale = env.fake.add_server(
        &name,
        json!({CLUSTER_KEY: "1", ROLE_KEY: "1", MACHINE_UID_KEY: "another-uid"}),
    );
    // A longer name that Nova's regex name filter also returns.
    env.fake.add_server(
        &format!("{name}0"),
        json!({CLUSTER_KEY: "1", ROLE_KEY: "1"}),
    );
    let e = env
        .driver
        .create_machine(&env.request(&c, m))
        .await
        .expect_err("another machine's server of the name");
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    assert!(e.message.contains("another-uid"), "{}", e.message);
    assert_eq!(env.fake.servers().len(), 2, "no second server of the name");
    assert!(env.fake.servers().iter().any(|s| s["id"] == stale.as_str()));
}

#[tokio::test]
async fn a_server_the_go_provider_created_for_the_machine_is_adopted_by_name_and_cluster_metadata()
{
    let env = env().await;
    let c = class("c", env.spec());
    let m = machine("migrated");
    let name = m.metadata.name.clone().unwrap();
    // What machine-controller-manager-provider-openstack writes: the
    // machine's name and the class's tags as metadata, no UID.
    let theirs = env.fake.add_server_on(
        &name,
        json!({CLUSTER_KEY: "1", ROLE_KEY: "1"}),
        &env.network,
    );
    // A server of the name in another cluster is someone else's: ignored.
    env.fake.add_server(
        &name,
        json!({"kubernetes.io-cluster-other": "1", ROLE_KEY: "1"}),
    );
    let created = env
        .driver
        .create_machine(&env.request(&c, m))
        .await
        .expect("adopted");
    assert!(
        created.provider_id.ends_with(&theirs),
        "{}",
        created.provider_id
    );
    assert_eq!(
        env.fake.calls().get("nova.servers.create"),
        None,
        "nothing created"
    );
}

#[tokio::test]
async fn a_server_going_to_error_answers_internal_cleans_up_and_the_retry_succeeds() {
    let env = env().await;
    let c = class("c", env.spec());
    let req = env.request(&c, machine("error"));
    env.fake.set_build_polls(2);
    env.fake
        .fail_next_builds(1, "Build of instance aborted: hypervisor failure");
    let err = env
        .driver
        .create_machine(&req)
        .await
        .expect_err("ERROR server");
    assert_eq!(err.code, Code::Internal, "{err:?}");
    assert!(
        err.message.contains("reached unexpected status \"ERROR\""),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("hypervisor failure"),
        "{}",
        err.message
    );
    assert!(
        env.fake.servers().is_empty(),
        "the failed server is deleted"
    );
    assert!(
        env.fake.ports().is_empty(),
        "the failed server's port is deleted"
    );
    let created = env.driver.create_machine(&req).await.expect("retry");
    assert!(created.provider_id.starts_with("openstack:///RegionOne/"));
    assert_eq!(env.fake.servers().len(), 1);
    assert_eq!(env.fake.servers()[0]["status"], "ACTIVE");
}

#[tokio::test]
async fn no_valid_host_and_a_missing_flavor_are_resource_exhausted() {
    let env = env().await;
    let c = class("c", env.spec());
    env.fake.fail_next_builds(
        1,
        "No valid host was found. There are not enough hosts available.",
    );
    let err = env
        .driver
        .create_machine(&env.request(&c, machine("nvh")))
        .await
        .expect_err("no host");
    assert_eq!(err.code, Code::ResourceExhausted, "{err:?}");
    let mut spec = env.spec();
    spec["spec"]["flavorName"] = json!("m9.huge");
    let err = env
        .driver
        .create_machine(&env.request(&class("f", spec), machine("flavor")))
        .await
        .expect_err("no flavor");
    assert_eq!(err.code, Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message.contains("error resolving flavor"),
        "{}",
        err.message
    );
    assert!(env.fake.servers().is_empty());
    assert!(env.fake.ports().is_empty());
}

#[tokio::test]
async fn a_quota_error_is_resource_exhausted_and_leaves_nothing() {
    let env = env().await;
    let c = class("c", env.spec());
    env.fake.inject(Op::CreateServer, Fault::nova_quota(1));
    let err = env
        .driver
        .create_machine(&env.request(&c, machine("quota")))
        .await
        .expect_err("quota");
    assert_eq!(err.code, Code::ResourceExhausted, "{err:?}");
    assert!(err.message.contains("Quota exceeded"), "{}", err.message);
    assert!(env.fake.servers().is_empty());
    assert!(
        env.fake.ports().is_empty(),
        "the port made for the machine is removed"
    );
    env.fake.inject(
        Op::CreatePort,
        Fault::new(409, "Quota exceeded for resources: ['port'].", 1),
    );
    let err = env
        .driver
        .create_machine(&env.request(&c, machine("portquota")))
        .await
        .expect_err("port quota");
    assert_eq!(err.code, Code::ResourceExhausted, "{err:?}");
    env.fake.inject(
        Op::CreateServer,
        Fault::new(403, "Policy doesn't allow os_compute_api:servers:create", 1),
    );
    let err = env
        .driver
        .create_machine(&env.request(&c, machine("policy")))
        .await
        .expect_err("policy");
    assert_eq!(err.code, Code::PermissionDenied, "{err:?}");
}

#[tokio::test]
async fn delete_removes_the_server_and_the_machines_port_and_twice_is_ok() {
    let env = env().await;
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("del"));
    let created = env.driver.create_machine(&req).await.expect("create");
    assert_eq!(env.fake.ports().len(), 1);
    req.machine.spec.provider_id = created.provider_id.clone();
    env.driver.delete_machine(&req).await.expect("delete");
    assert!(env.fake.servers().is_empty());
    assert!(
        env.fake.ports().is_empty(),
        "the machine's port is deleted: {:?}",
        env.fake.ports()
    );
    env.driver
        .delete_machine(&req)
        .await
        .expect("second delete");
    let err = env.driver.get_machine_status(&req).await.expect_err("gone");
    assert_eq!(err.code, Code::NotFound);
    // A port left behind without a server (e.g. a crash between port and server) goes too.
    let orphan = env.request(&c, machine("orphan"));
    env.fake
        .inject(Op::CreateServer, Fault::new(500, "boom", 1));
    env.fake
        .inject(Op::DeletePort, Fault::new(500, "neutron down", 1));
    let err = env
        .driver
        .create_machine(&orphan)
        .await
        .expect_err("create fails");
    assert!(err.message.contains("Original error"), "{}", err.message);
    assert_eq!(
        env.fake.ports().len(),
        1,
        "the port survived the failed clean-up"
    );
    env.driver
        .delete_machine(&orphan)
        .await
        .expect("delete by name");
    assert!(env.fake.ports().is_empty());
}

#[tokio::test]
async fn boot_from_a_typed_root_volume_creates_and_deletes_the_volume() {
    let env = env().await;
    let mut spec = env.spec();
    spec["spec"]["rootDiskSize"] = json!(50);
    spec["spec"]["rootDiskType"] = json!("ssd");
    let c = class("c", spec);
    env.fake.set_build_polls(1);
    let mut req = env.request(&c, machine("vol"));
    let created = env.driver.create_machine(&req).await.expect("create");
    let vols = env.fake.volumes();
    assert_eq!(vols.len(), 1);
    assert_eq!(vols[0]["name"], json!(req.machine.metadata.name));
    assert_eq!(vols[0]["volume_type"], "ssd");
    assert_eq!(vols[0]["size"], 50);
    assert_eq!(vols[0]["metadata"][CLUSTER_KEY], "1");
    let bdm = &env.fake.last_server_create().unwrap()["server"]["block_device_mapping_v2"][0];
    assert_eq!(bdm["source_type"], "volume");
    assert_eq!(bdm["destination_type"], "volume");
    assert_eq!(bdm["uuid"], vols[0]["id"]);
    assert_eq!(bdm["delete_on_termination"], false);
    assert_eq!(bdm["boot_index"], "0");
    req.machine.spec.provider_id = created.provider_id;
    env.driver.delete_machine(&req).await.expect("delete");
    assert!(env.fake.volumes().is_empty(), "{:?}", env.fake.volumes());
    assert!(env.fake.ports().is_empty());
}

#[tokio::test]
async fn boot_from_an_image_volume_and_networks_by_name_need_no_port_of_our_own() {
    let env = env().await;
    let spec = json!({
        "apiVersion": "openstack.machine.gardener.cloud/v1alpha1",
        "kind": "MachineProviderConfig",
        "spec": {
            "imageID": env.image, "region": "RegionOne", "availabilityZone": "nova",
            "flavorName": "m1.large", "keyName": "mcm-key", "rootDiskSize": 30,
            "networks": [{"name": "mcm-net", "podNetwork": true}],
            "podNetworkCidr": "100.64.0.0/12",
            "tags": {CLUSTER_KEY: "1", ROLE_KEY: "1"}
        }
    });
    let c = class("c", spec);
    let mut req = env.request(&c, machine("img"));
    let created = env.driver.create_machine(&req).await.expect("create");
    let body = env.fake.last_server_create().unwrap();
    assert_eq!(body["server"]["networks"], json!([{"uuid": env.network}]));
    let bdm = &body["server"]["block_device_mapping_v2"][0];
    assert_eq!(bdm["source_type"], "image");
    assert_eq!(bdm["uuid"], json!(env.image));
    assert_eq!(bdm["volume_size"], 30);
    assert_eq!(bdm["delete_on_termination"], true);
    let ports = env.fake.ports();
    assert_eq!(ports.len(), 1, "Nova's own port");
    assert_eq!(
        ports[0]["allowed_address_pairs"][0]["ip_address"],
        "100.64.0.0/12"
    );
    req.machine.spec.provider_id = created.provider_id;
    env.driver.delete_machine(&req).await.expect("delete");
    assert!(
        env.fake.volumes().is_empty(),
        "the image volume goes with the server"
    );
    assert!(env.fake.ports().is_empty());
}

#[tokio::test]
async fn list_machines_returns_only_servers_with_both_membership_keys() {
    let env = env().await;
    let c = class("c", env.spec());
    let a = env
        .driver
        .create_machine(&env.request(&c, machine("list")))
        .await
        .expect("create");
    env.fake.add_server("no-role", json!({CLUSTER_KEY: "1"}));
    env.fake.add_server(
        "other",
        json!({"kubernetes.io-cluster-other": "1", ROLE_KEY: "1"}),
    );
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: c,
            secret: env.secret(),
        })
        .await
        .expect("list");
    assert_eq!(listed.machine_list.len(), 1, "{:?}", listed.machine_list);
    assert!(listed.machine_list.contains_key(&a.provider_id));
}

#[tokio::test]
async fn input_errors_are_invalid_argument_with_the_reference_messages() {
    let env = env().await;
    let mut wrong = class("c", env.spec());
    wrong.provider = "AWS".into();
    let err = env
        .driver
        .create_machine(&env.request(&wrong, machine("p")))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    assert_eq!(
        err.message,
        "requested for Provider 'AWS', we only support 'OpenStack'"
    );
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("s"));
    req.secret = secret_with(&[("authURL", &env.fake.auth_url()), ("userData", "x")]);
    let err = env.driver.create_machine(&req).await.unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument);
    assert!(
        err.message.contains("data[domainName]: Required value"),
        "{}",
        err.message
    );
    assert!(
        env.fake.calls().is_empty(),
        "nothing reached the cloud: {:?}",
        env.fake.calls()
    );
}

#[tokio::test]
async fn a_wrong_password_is_unauthenticated_and_application_credentials_work() {
    let env = env().await;
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("auth"));
    let mut bad: Value = json!({});
    for (k, v) in req.secret.data.clone().unwrap() {
        bad[k] = json!(String::from_utf8(v.0).unwrap());
    }
    bad["password"] = json!("wrong");
    let pairs: Vec<(String, String)> = bad
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    req.secret = secret_with(&refs);
    let err = env.driver.create_machine(&req).await.unwrap_err();
    assert_eq!(err.code, Code::Unauthenticated, "{err:?}");
    req.secret = secret_with(&[
        ("authURL", &env.fake.auth_url()),
        ("applicationCredentialID", mcm_fake_openstack::APP_CRED_ID),
        (
            "applicationCredentialSecret",
            mcm_fake_openstack::APP_CRED_SECRET,
        ),
        ("domainName", mcm_fake_openstack::DOMAIN),
        ("tenantName", mcm_fake_openstack::PROJECT),
        ("userData", USER_DATA),
    ]);
    env.driver
        .create_machine(&req)
        .await
        .expect("application credential");
}

#[tokio::test]
async fn initialize_is_unimplemented_and_volume_ids_read_cinder_and_csi() {
    use k8s_openapi::api::core::v1::{
        CSIPersistentVolumeSource, CinderPersistentVolumeSource, PersistentVolumeSpec,
    };
    let env = env().await;
    let c = class("c", env.spec());
    let err = env
        .driver
        .initialize_machine(&env.request(&c, machine("i")))
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::Unimplemented);
    let specs = vec![
        PersistentVolumeSpec {
            cinder: Some(CinderPersistentVolumeSource {
                volume_id: "in-tree".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
        PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: "cinder.csi.openstack.org".into(),
                volume_handle: "csi-vol".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
        PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: "ebs.csi.aws.com".into(),
                volume_handle: "vol-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    let ids = env
        .driver
        .get_volume_ids(&mcm_driver::GetVolumeIdsRequest { pv_specs: specs })
        .await
        .unwrap();
    assert_eq!(
        ids.volume_ids,
        vec!["in-tree".to_string(), "csi-vol".to_string()]
    );
}

use mcm_driver::testing::GZIPPED_CLOUD_CONFIG;

#[tokio::test]
async fn gzipped_userdata_reaches_nova_byte_for_byte() {
    let env = env().await;
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("gzip"));
    if let Some(data) = req.secret.data.as_mut() {
        data.insert(
            "userData".into(),
            k8s_openapi::ByteString(GZIPPED_CLOUD_CONFIG.to_vec()),
        );
    }
    env.driver.create_machine(&req).await.expect("create");
    let body = env.fake.last_server_create().expect("a create request");
    use base64::Engine;
    let sent = base64::engine::general_purpose::STANDARD
        .decode(body["server"]["user_data"].as_str().unwrap())
        .unwrap();
    assert_eq!(sent, GZIPPED_CLOUD_CONFIG);
}

#[tokio::test]
async fn a_cancelled_create_leaves_no_create_lock_entry() {
    let env = env().await;
    let c = class("c", env.spec());
    let req = env.request(&c, machine("cancel"));
    // The server stays in BUILD for good: the create polls until its caller
    // gives up on it.
    env.fake.set_build_polls(u32::MAX);
    // Two creates of one machine: one holds the lock (polling the server),
    // the other waits for the lock; both futures are dropped.
    let both = async {
        tokio::join!(
            env.driver.create_machine(&req),
            env.driver.create_machine(&req)
        )
    };
    let cancelled = tokio::time::timeout(std::time::Duration::from_millis(500), both).await;
    assert!(cancelled.is_err(), "both creates were still running");
    assert_eq!(
        env.driver.create_locks_in_use(),
        0,
        "a create cancelled mid-call left its create-lock entry"
    );
    assert_eq!(
        env.fake.servers().len(),
        1,
        "the lock kept it to one server"
    );
}

// ---- The fake refuses what Nova refuses; our server create passes ----

/// Creates a machine through the driver (with a server group, a key pair
/// and a zone the fake knows) and answers the create body it sent.
async fn created_body(env: &common::Env) -> Value {
    let mut spec = env.spec();
    env.fake
        .add_server_group("11111111-2222-4333-8444-555555555555");
    spec["spec"]["serverGroupID"] = json!("11111111-2222-4333-8444-555555555555");
    let req = env.request(&class("c", spec), machine("refusal"));
    env.driver
        .create_machine(&req)
        .await
        .expect("Nova's checks pass for a valid class");
    env.fake.last_server_create().expect("the body")
}

/// Sends a spoiled copy of a create body, raw, with a token of the
/// fake's Keystone: the status and Nova's error envelope.
async fn raw_create(env: &common::Env, body: Value) -> (u16, Value) {
    let http = reqwest::Client::new();
    let auth = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {"name": mcm_fake_openstack::USERNAME, "domain": {"name": mcm_fake_openstack::DOMAIN}, "password": mcm_fake_openstack::PASSWORD}}},
        "scope": {"project": {"name": mcm_fake_openstack::PROJECT, "domain": {"name": mcm_fake_openstack::DOMAIN}}}
    }});
    let r = http
        .post(format!("{}/auth/tokens", env.fake.auth_url()))
        .json(&auth)
        .send()
        .await
        .expect("token");
    let token = r.headers()["x-subject-token"].to_str().unwrap().to_string();
    let r = http
        .post(format!("{}/compute/v2.1/servers", env.fake.base_url()))
        .header("x-auth-token", token)
        .json(&body)
        .send()
        .await
        .expect("create");
    let status = r.status().as_u16();
    (status, r.json().await.expect("JSON"))
}

fn assert_bad_request(status: u16, body: &Value, needle: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["badRequest"]["code"], 400, "Nova's envelope: {body}");
    let message = body["badRequest"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message}");
}

#[tokio::test]
async fn members_outside_novas_schema_are_refused_and_our_body_has_none() {
    let env = env().await;
    let body = created_body(&env).await;
    let mut b = body.clone();
    b["server"]["keyName"] = json!("mcm-key");
    let (status, answer) = raw_create(&env, b).await;
    assert_bad_request(
        status,
        &answer,
        "Additional properties are not allowed ('keyName' was unexpected)",
    );
    let mut b = body;
    b["os:scheduler_hints"]["group"] = json!(["11111111-2222-4333-8444-555555555555"]);
    let (status, answer) = raw_create(&env, b).await;
    assert_bad_request(status, &answer, "is not of type 'string'");
    assert_eq!(env.fake.servers().len(), 1, "nothing else was created");
}

#[tokio::test]
async fn an_unknown_key_pair_is_refused_and_the_driver_reports_novas_message() {
    let env = env().await;
    let mut b = created_body(&env).await;
    b["server"]["key_name"] = json!("nobodys-key");
    let (status, answer) = raw_create(&env, b).await;
    assert_bad_request(status, &answer, "Invalid key_name provided.");
    let mut spec = env.spec();
    spec["spec"]["keyName"] = json!("nobodys-key");
    let e = env
        .driver
        .create_machine(&env.request(&class("c", spec), machine("nokey")))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("Invalid key_name provided."),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn an_unknown_availability_zone_is_refused_and_the_driver_reports_novas_message() {
    let env = env().await;
    let mut b = created_body(&env).await;
    b["server"]["availability_zone"] = json!("eu-nowhere-1");
    let (status, answer) = raw_create(&env, b).await;
    assert_bad_request(status, &answer, "availability zone is not available");
    env.fake.add_availability_zone("eu-nl-1b");
    let mut spec = env.spec();
    spec["spec"]["availabilityZone"] = json!("eu-nl-1b");
    env.driver
        .create_machine(&env.request(&class("c", spec), machine("zone")))
        .await
        .expect("a zone the cloud has");
}

#[tokio::test]
async fn a_server_group_nova_does_not_have_is_refused_and_the_driver_reports_novas_message() {
    let env = env().await;
    let mut b = created_body(&env).await;
    b["os:scheduler_hints"]["group"] = json!("99999999-2222-4333-8444-555555555555");
    let (status, answer) = raw_create(&env, b).await;
    assert_bad_request(
        status,
        &answer,
        "Instance group 99999999-2222-4333-8444-555555555555 could not be found.",
    );
    let mut spec = env.spec();
    spec["spec"]["serverGroupID"] = json!("99999999-2222-4333-8444-555555555555");
    let e = env
        .driver
        .create_machine(&env.request(&class("c", spec), machine("nogroup")))
        .await
        .unwrap_err();
    assert!(e.message.contains("could not be found"), "{}", e.message);
    assert_eq!(env.fake.servers().len(), 1, "nothing else was created");
}
