//! The GCP driver against the in-repo Compute fake (`mcm-fake-gcp`), through
//! the official client and real service-account JWT signing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, GCEPersistentDiskVolumeSource, PersistentVolumeSpec, Secret,
};
use k8s_openapi::ByteString;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::conformance::{run_all, Fixture};
use mcm_driver::{Code, Driver, GetVolumeIdsRequest, ListMachinesRequest, MachineRequest};
use mcm_fake_gcp::{service_account_json, FakeGce, Fault, Method};
use mcm_provider_gcp::{Backoff, GcpDriver, GcpDriverConfig};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const PROJECT: &str = "mcm-test-project";
const ZONE: &str = "europe-west1-b";
const USER_DATA: &str = "#cloud-config\nhostname: test\n";

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn driver(fake: &FakeGce) -> GcpDriver {
    GcpDriver::new(GcpDriverConfig {
        operation_poll: Backoff {
            initial: Duration::from_millis(5),
            factor: 1.5,
            max: Duration::from_millis(20),
        },
        throttle_pause: Duration::from_millis(20),
        throttle_max_pause: Duration::from_millis(100),
        ..GcpDriverConfig::with_endpoint(fake.endpoint())
    })
}

fn secret_with(pairs: &[(&str, String)]) -> Secret {
    Secret {
        data: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn secret() -> Secret {
    secret_with(&[
        ("serviceAccountJSON", service_account_json(PROJECT)),
        ("userData", USER_DATA.into()),
    ])
}

fn spec(cluster: &str) -> Value {
    json!({
        "disks": [{"boot": true, "sizeGb": 50, "type": "pd-balanced", "image": "projects/gardenlinux/global/images/gl"}],
        "labels": {"name": "test"},
        "machineType": "n1-standard-2",
        "networkInterfaces": [{"network": "shoot-net", "subnetwork": "shoot-nodes"}],
        "scheduling": {"automaticRestart": true, "onHostMaintenance": "MIGRATE"},
        "serviceAccounts": [{"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["https://www.googleapis.com/auth/compute"]}],
        "tags": [format!("kubernetes-io-cluster-{cluster}"), "kubernetes-io-role-node", "extra"],
        "region": "europe-west1",
        "zone": ZONE
    })
}

fn class(name: &str, spec: Value) -> MachineClass {
    let mut c = MachineClass::new(name, spec);
    c.provider = "GCP".into();
    c.metadata.namespace = Some("default".into());
    c
}

static SEQ: AtomicU64 = AtomicU64::new(1);

fn machine() -> Machine {
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let mut m = Machine::new(&format!("shoot--m-{n}"), MachineSpec::default());
    m.metadata.namespace = Some("default".into());
    m.metadata.uid = Some(format!("00000000-0000-4000-8000-{n:012x}"));
    m
}

fn req(m: &Machine, c: &MachineClass) -> MachineRequest {
    MachineRequest {
        machine: m.clone(),
        machine_class: c.clone(),
        secret: secret(),
    }
}

async fn start() -> FakeGce {
    init_tracing();
    FakeGce::start().await.expect("fake")
}

#[tokio::test]
async fn the_driver_passes_the_conformance_kit_against_the_fake() {
    let fake = start().await;
    fake.set_polls_until_done(2);
    let d = driver(&fake);
    let f = Fixture {
        class: class("mine", spec("shoot--a")),
        other_class: class("theirs", spec("shoot--b")),
        secret: secret(),
        new_machine: Box::new(|_| machine()),
        invalid_classes: vec![
            (class("empty", json!({})), "machineType".into()),
            (class("garbage", json!("not a spec")), "providerSpec".into()),
            (
                class("no-zone-disk", json!({"machineType": "n1", "region": "r"})),
                "spec.zone".into(),
            ),
        ],
    };
    let failures = run_all(&d, &f).await;
    assert!(failures.is_empty(), "{failures:#?}");
    // The same checks out of process, through the gRPC hop.
    let served = mcm_driver_grpc::Loopback::start(std::sync::Arc::new(d), "gcp")
        .await
        .expect("served");
    let failures = run_all(&served.client, &f).await;
    served.stop().await;
    assert!(failures.is_empty(), "over gRPC: {failures:#?}");
    assert_eq!(
        fake.unauthenticated_requests(),
        0,
        "every call carried a bearer token"
    );
}

#[tokio::test]
async fn create_status_delete_and_the_api_calls_per_machine() {
    let fake = start().await;
    fake.set_polls_until_done(1);
    let d = driver(&fake);
    let c = class("c", spec("shoot--calls"));
    let m = machine();
    let r = req(&m, &c);
    let name = m.metadata.name.clone().unwrap();

    let created = d.create_machine(&r).await.unwrap();
    assert_eq!(
        created.provider_id,
        format!("gce:///{PROJECT}/{ZONE}/{name}")
    );
    assert_eq!(created.node_name, name);
    assert_eq!(
        created.last_known_state,
        format!("Created {}", created.provider_id)
    );
    assert!(
        created.addresses.iter().any(|a| a.type_ == "InternalIP"),
        "{:?}",
        created.addresses
    );
    let after_create = fake.requests();
    let status = d.get_machine_status(&r).await.unwrap();
    assert_eq!(status.provider_id, created.provider_id);
    let after_status = fake.requests();
    d.delete_machine(&r).await.unwrap();
    let after_delete = fake.requests();
    assert_eq!(fake.instance_count(), 0);

    let n =
        |m: &std::collections::BTreeMap<Method, u64>, k: Method| m.get(&k).copied().unwrap_or(0);
    // Create: insert, one operation poll (the operation needs one), a get for the addresses.
    assert_eq!(n(&after_create, Method::InstancesInsert), 1);
    assert_eq!(n(&after_create, Method::ZoneOperationsGet), 1);
    assert_eq!(n(&after_create, Method::InstancesGet), 1);
    // Status: one get.
    assert_eq!(
        n(&after_status, Method::InstancesGet) - n(&after_create, Method::InstancesGet),
        1
    );
    // Delete: a get (tags), the delete, one operation poll.
    assert_eq!(
        n(&after_delete, Method::InstancesGet) - n(&after_status, Method::InstancesGet),
        1
    );
    assert_eq!(n(&after_delete, Method::InstancesDelete), 1);
    assert_eq!(n(&after_delete, Method::ZoneOperationsGet), 2);
    let total: u64 = after_delete.values().sum();
    assert_eq!(total, 7, "{after_delete:?}");
    println!("API calls for create + status + delete of one machine: {after_delete:?}");
    assert_eq!(
        d.api_calls().values().sum::<u64>(),
        7,
        "{:?}",
        d.api_calls()
    );
}

#[tokio::test]
async fn the_inserted_instance_carries_user_data_uid_tags_and_string_int64s() {
    let fake = start().await;
    let d = driver(&fake);
    let m = machine();
    d.create_machine(&req(&m, &class("c", spec("shoot--wire"))))
        .await
        .unwrap();
    let sent = fake.inserted_bodies().pop().unwrap();
    assert_eq!(sent["name"], json!(m.metadata.name));
    assert_eq!(
        sent["machineType"],
        "zones/europe-west1-b/machineTypes/n1-standard-2"
    );
    assert_eq!(sent["disks"][0]["initializeParams"]["diskSizeGb"], "50");
    assert_eq!(
        sent["networkInterfaces"][0]["network"],
        format!("projects/{PROJECT}/global/networks/shoot-net")
    );
    let items = sent["metadata"]["items"].as_array().unwrap();
    assert!(items.contains(&json!({"key": "user-data", "value": USER_DATA})));
    assert!(items.contains(&json!({"key": "mcm-machine-uid", "value": m.metadata.uid})));
}

use mcm_driver::testing::GZIPPED_CLOUD_CONFIG;

#[tokio::test]
async fn userdata_that_is_not_utf8_is_refused_not_corrupted_into_the_metadata_string() {
    let fake = start().await;
    let d = driver(&fake);
    let m = machine();
    let mut r = req(&m, &class("c", spec("shoot--gzip")));
    if let Some(data) = r.secret.data.as_mut() {
        data.insert("userData".into(), ByteString(GZIPPED_CLOUD_CONFIG.to_vec()));
    }
    let e = d.create_machine(&r).await.unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e:?}");
    assert!(e.message.contains("userData is not UTF-8"), "{}", e.message);
    assert!(
        fake.inserted_bodies().is_empty(),
        "no instance with corrupted userdata"
    );
}

#[tokio::test]
async fn a_retried_create_after_a_lost_answer_gets_409_and_adopts_its_own_instance() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--adopt"));
    let m = machine();
    let r = req(&m, &c);
    fake.inject(Method::InstancesInsert, Fault::LostResponse, 1);
    let first = d.create_machine(&r).await.unwrap_err();
    assert_eq!(first.code, Code::Internal, "{first:?}");
    assert_eq!(
        fake.instance_count(),
        1,
        "the lost insert created the instance"
    );

    let second = d.create_machine(&r).await.unwrap();
    assert!(second
        .provider_id
        .ends_with(m.metadata.name.as_deref().unwrap()));
    assert_eq!(fake.instance_count(), 1, "adopted, not created twice");
    assert_eq!(fake.requests().get(&Method::InstancesInsert), Some(&2));
}

#[tokio::test]
async fn an_instance_of_the_same_name_with_another_uid_is_not_adopted() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--other"));
    let m = machine();
    let name = m.metadata.name.clone().unwrap();
    fake.put_instance(
        PROJECT,
        ZONE,
        json!({"name": name, "tags": {"items": ["kubernetes-io-cluster-shoot--other", "kubernetes-io-role-node"]},
               "metadata": {"items": [{"key": "mcm-machine-uid", "value": "someone-else"}]}}),
    );
    let e = d.create_machine(&req(&m, &c)).await.unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    assert!(e.message.contains("someone-else"), "{}", e.message);
    // Nor one without any UID and without the class's cluster tags.
    let m2 = machine();
    fake.put_instance(PROJECT, ZONE, json!({"name": m2.metadata.name}));
    let e = d.create_machine(&req(&m2, &c)).await.unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    assert!(e.message.contains("neither"), "{}", e.message);
    let uid = &fake.instances(PROJECT, ZONE)[&name]["metadata"]["items"][0]["value"];
    assert_eq!(
        uid, "someone-else",
        "the other machine's instance is untouched"
    );
}

#[tokio::test]
async fn an_instance_the_go_provider_created_for_the_machine_is_adopted_by_name_and_cluster_tags() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--migrated"));
    let m = machine();
    let name = m.metadata.name.clone().unwrap();
    // What machine-controller-manager-provider-gcp writes: the machine's
    // name, the class's network tags and labels, user-data; no UID.
    fake.put_instance(
        PROJECT,
        ZONE,
        json!({"name": name, "labels": {"name": "test"},
               "tags": {"items": ["kubernetes-io-cluster-shoot--migrated", "kubernetes-io-role-node", "extra"]},
               "metadata": {"items": [{"key": "user-data", "value": USER_DATA}]}}),
    );
    let created = d.create_machine(&req(&m, &c)).await.expect("adopted");
    assert_eq!(
        created.provider_id,
        format!("gce:///{PROJECT}/{ZONE}/{name}")
    );
    assert_eq!(fake.instance_count(), 1, "adopted, not created twice");
    // The same VM in another cluster's class is not this machine's.
    let other = class("o", spec("shoot--elsewhere"));
    let e = d.create_machine(&req(&m, &other)).await.unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    // Once adopted it is the machine's for every other call: its status,
    // the list of the class, and its deletion.
    let mut adopted = m.clone();
    adopted.spec.provider_id = created.provider_id.clone();
    let status = d
        .get_machine_status(&req(&adopted, &c))
        .await
        .expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = d
        .list_machines(&ListMachinesRequest {
            machine_class: c.clone(),
            secret: secret(),
        })
        .await
        .expect("list");
    assert_eq!(
        listed.machine_list.get(&created.provider_id),
        Some(&name),
        "{listed:?}"
    );
    d.delete_machine(&req(&adopted, &c)).await.expect("delete");
    assert_eq!(fake.instance_count(), 0);
}

#[tokio::test]
async fn a_vm_whose_tags_no_longer_match_the_class_is_deleted_by_the_machines_identity() {
    let fake = start().await;
    let d = driver(&fake);
    let m = machine();
    let mut created = m.clone();
    created.spec.provider_id = d
        .create_machine(&req(&m, &class("c", spec("shoot--before"))))
        .await
        .unwrap()
        .provider_id;
    // The class's cluster tag changed since: the VM carries this Machine's
    // UID, so it is deleted instead of keeping the Machine Terminating.
    let now = class("c", spec("shoot--after"));
    d.delete_machine(&req(&created, &now))
        .await
        .expect("deleted");
    assert_eq!(fake.instance_count(), 0);

    // The Go provider's VM (no UID) that the providerID names: deleted too.
    let go = machine();
    let name = go.metadata.name.clone().unwrap();
    fake.put_instance(
        PROJECT,
        ZONE,
        json!({"name": name, "tags": {"items": ["kubernetes-io-cluster-shoot--before", "kubernetes-io-role-node"]}}),
    );
    let mut go_m = go.clone();
    go_m.spec.provider_id = format!("gce:///{PROJECT}/{ZONE}/{name}");
    d.delete_machine(&req(&go_m, &now)).await.expect("deleted");
    assert_eq!(fake.instance_count(), 0);

    // Another Machine's VM under this name is kept, with a reason.
    let other = machine();
    let name = other.metadata.name.clone().unwrap();
    fake.put_instance(
        PROJECT,
        ZONE,
        json!({"name": name, "metadata": {"items": [{"key": "mcm-machine-uid", "value": "someone-else"}]}}),
    );
    let mut other_m = other.clone();
    other_m.spec.provider_id = format!("gce:///{PROJECT}/{ZONE}/{name}");
    let e = d.delete_machine(&req(&other_m, &now)).await.unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{e:?}");
    assert!(e.message.contains("someone-else"), "{}", e.message);
    assert_eq!(fake.instance_count(), 1, "kept");
    // Without a providerID, an instance of the name with neither identity
    // nor tags is not this machine's: nothing to delete.
    let stranger = machine();
    fake.put_instance(PROJECT, ZONE, json!({"name": stranger.metadata.name}));
    d.delete_machine(&req(&stranger, &now))
        .await
        .expect("nothing to delete");
    assert_eq!(fake.instance_count(), 2);
}

#[tokio::test]
async fn deleting_a_gone_instance_succeeds_also_when_it_vanishes_in_between() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--gone"));
    let m = machine();
    let r = req(&m, &c);
    d.delete_machine(&r).await.expect("no instance: success");
    d.create_machine(&r).await.unwrap();
    fake.inject(Method::InstancesDelete, Fault::not_found(), 1);
    d.delete_machine(&r).await.expect("404 on delete: success");
    // An instance of the name but without the class's tags is never deleted.
    let stranger = machine();
    fake.put_instance(
        PROJECT,
        ZONE,
        json!({"name": stranger.metadata.name, "tags": {"items": ["web"]}}),
    );
    d.delete_machine(&req(&stranger, &c)).await.unwrap();
    assert!(fake
        .instances(PROJECT, ZONE)
        .contains_key(stranger.metadata.name.as_deref().unwrap()));
    assert_eq!(
        d.get_machine_status(&req(&stranger, &c))
            .await
            .unwrap_err()
            .code,
        Code::NotFound
    );
}

#[tokio::test]
async fn list_machines_keeps_only_the_class_cluster_and_role_across_pages() {
    let fake = start().await;
    fake.set_max_page_size(2);
    let d = driver(&fake);
    let tags = |items: &[&str]| json!({"items": items});
    let put =
        |name: &str, t: Value| fake.put_instance(PROJECT, ZONE, json!({"name": name, "tags": t}));
    put(
        "a-1",
        tags(&["kubernetes-io-cluster-shoot--l", "kubernetes-io-role-node"]),
    );
    put(
        "a-2",
        tags(&[
            "x",
            "kubernetes-io-role-node",
            "kubernetes-io-cluster-shoot--l",
        ]),
    );
    put(
        "a-3",
        tags(&[
            "kubernetes-io-cluster-shoot--l",
            "kubernetes-io-role-node",
            "y",
        ]),
    );
    put(
        "b-1",
        tags(&[
            "kubernetes-io-cluster-shoot--other",
            "kubernetes-io-role-node",
        ]),
    );
    put(
        "c-1",
        tags(&[
            "kubernetes-io-cluster-shoot--l",
            "kubernetes-io-role-bastion",
        ]),
    );
    put("d-1", tags(&["kubernetes-io-cluster-shoot--l"]));
    fake.put_instance(PROJECT, ZONE, json!({"name": "e-1"}));
    let list = |spec: Value| {
        let d = &d;
        async move {
            d.list_machines(&ListMachinesRequest {
                machine_class: class("c", spec),
                secret: secret(),
            })
            .await
            .unwrap()
            .machine_list
        }
    };
    let got = list(spec("shoot--l")).await;
    let want: Vec<(String, String)> = ["a-1", "a-2", "a-3"]
        .iter()
        .map(|n| (format!("gce:///{PROJECT}/{ZONE}/{n}"), n.to_string()))
        .collect();
    assert_eq!(got.into_iter().collect::<Vec<_>>(), want);
    assert_eq!(
        fake.requests().get(&Method::InstancesList),
        Some(&4),
        "7 instances, pages of 2"
    );
    let mut no_role = spec("shoot--l");
    no_role["tags"] = json!(["kubernetes-io-cluster-shoot--l"]);
    assert!(
        list(no_role).await.is_empty(),
        "no role tag: nothing is listed"
    );
}

#[tokio::test]
async fn get_volume_ids_maps_pd_csi_handles_and_in_tree_disks() {
    let fake = start().await;
    let d = driver(&fake);
    let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
        csi: Some(CSIPersistentVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let in_tree = PersistentVolumeSpec {
        gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
            pd_name: "pd-in-tree".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let got = d
        .get_volume_ids(&GetVolumeIdsRequest {
            pv_specs: vec![
                csi("pd.csi.storage.gke.io", "projects/p/zones/z/disks/pvc-1"),
                csi("ebs.csi.aws.com", "vol-1"),
                in_tree,
                csi("pd.csi.storage.gke.io", ""),
                PersistentVolumeSpec::default(),
            ],
        })
        .await
        .unwrap();
    assert_eq!(
        got.volume_ids,
        ["projects/p/zones/z/disks/pvc-1", "pd-in-tree"]
    );
}

#[tokio::test]
async fn capacity_and_quota_errors_are_resource_exhausted_and_leave_no_instance() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--quota"));
    for fault in [
        Fault::zone_resource_pool_exhausted(),
        Fault::operation_quota_exceeded(),
        Fault::quota_exceeded(),
    ] {
        fake.inject(Method::InstancesInsert, fault.clone(), 1);
        let m = machine();
        let e = d.create_machine(&req(&m, &c)).await.unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted, "{fault:?}: {e:?}");
        assert!(
            e.message.starts_with(&format!(
                "Create machine {:?} failed: ",
                m.metadata.name.as_deref().unwrap()
            )),
            "{}",
            e.message
        );
        assert_eq!(fake.instance_count(), 0, "{fault:?}");
        // The next try of the same machine succeeds.
        d.create_machine(&req(&m, &c)).await.unwrap();
        d.delete_machine(&req(&m, &c)).await.unwrap();
    }
    fake.inject(
        Method::InstancesInsert,
        Fault::Http {
            status: 400,
            reason: "invalid".into(),
            message: "Invalid value for field 'resource.machineType': 'zones/z/machineTypes/x'. Machine type with name 'x' does not exist in zone 'z'.".into(),
        },
        1,
    );
    let e = d.create_machine(&req(&machine(), &c)).await.unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e:?}");
    fake.inject(
        Method::InstancesInsert,
        Fault::OperationError {
            code: "INVALID_USAGE".into(),
            message: "m".into(),
        },
        1,
    );
    let e = d.create_machine(&req(&machine(), &c)).await.unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e:?}");
}

#[tokio::test]
async fn a_throttled_call_pauses_its_quota_group_and_succeeds_on_retry() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--throttle"));
    let m = machine();
    d.create_machine(&req(&m, &c)).await.unwrap();
    let before = fake
        .requests()
        .get(&Method::InstancesGet)
        .copied()
        .unwrap_or(0);
    fake.inject(Method::InstancesGet, Fault::rate_limit_exceeded(), 2);
    let started = std::time::Instant::now();
    d.get_machine_status(&req(&m, &c)).await.unwrap();
    assert_eq!(
        fake.requests()
            .get(&Method::InstancesGet)
            .copied()
            .unwrap_or(0)
            - before,
        3
    );
    // 20 ms, then 40 ms of pause.
    assert!(
        started.elapsed() >= Duration::from_millis(55),
        "{:?}",
        started.elapsed()
    );
    fake.inject(Method::InstancesGet, Fault::rate_limit_exceeded(), 10);
    let e = d.get_machine_status(&req(&m, &c)).await.unwrap_err();
    assert_eq!(
        e.code,
        Code::Internal,
        "throttling that outlives the retries: {e:?}"
    );
}

#[tokio::test]
async fn invalid_specs_and_secrets_answer_the_reference_messages() {
    let fake = start().await;
    let d = driver(&fake);
    let m = machine();
    let name = m.metadata.name.clone().unwrap();
    let e = d
        .create_machine(&req(&m, &class("c", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(
        e.message,
        format!("Create machine {name:?} failed on validateProviderSpec: error while validating ProviderSpec [spec.disks: Required value: at least one disk is required spec.machineType: Required value: machineType is required spec.region: Required value: region is required spec.zone: Required value: zone is required spec.networkInterfaces.networkInterfaces: Required value: at least one network interface is required spec.scheduling.onHostMaintenance: Unsupported value: \"\": supported values: \"MIGRATE\", \"TERMINATE\"]")
    );
    let mut aws = class("c", spec("x"));
    aws.provider = "AWS".into();
    let e = d.create_machine(&req(&m, &aws)).await.unwrap_err();
    assert_eq!(
        e.message,
        "requested for Provider 'AWS', we only support 'GCP'"
    );
    // Status and delete only need a zone.
    let e = d
        .get_machine_status(&req(&m, &class("c", json!({}))))
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message
            .ends_with("failed on validateZone: error while validating Zone zone cannot be empty"),
        "{}",
        e.message
    );

    let bad_secret = |s: Secret| MachineRequest {
        machine: m.clone(),
        machine_class: class("c", spec("x")),
        secret: s,
    };
    let e = d
        .create_machine(&bad_secret(secret_with(&[])))
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.ends_with("error while validating Secret [secret serviceAccountJSON, serviceaccount.json or credentialsConfig is required field secret userData is required field]"), "{}", e.message);
    let mut sa: Value = serde_json::from_str(&service_account_json(PROJECT)).unwrap();
    sa["refresh_token"] = json!("x");
    let e = d
        .create_machine(&bad_secret(secret_with(&[
            ("serviceAccountJSON", sa.to_string()),
            ("userData", "x".into()),
        ])))
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::Internal);
    assert!(
        e.message.contains("forbidden fields are present"),
        "{}",
        e.message
    );
    assert!(!e.message.contains("PRIVATE KEY"));
    assert_eq!(
        fake.requests().values().sum::<u64>(),
        0,
        "nothing reached Compute"
    );
}

#[tokio::test]
async fn initialize_machine_is_unimplemented_and_the_project_may_come_from_the_secret() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--init"));
    let m = machine();
    let e = d.initialize_machine(&req(&m, &c)).await.unwrap_err();
    assert_eq!(e.code, Code::Unimplemented);
    let mut sa: Value = serde_json::from_str(&service_account_json(PROJECT)).unwrap();
    sa.as_object_mut().unwrap().remove("project_id");
    let r = MachineRequest {
        machine: m.clone(),
        machine_class: c,
        secret: secret_with(&[
            ("serviceaccount.json", sa.to_string()),
            ("projectID", "from-secret".into()),
            ("userData", "#!/bin/sh\n".into()),
        ]),
    };
    let created = d.create_machine(&r).await.unwrap();
    assert!(
        created.provider_id.starts_with("gce:///from-secret/"),
        "{}",
        created.provider_id
    );
    let sent = fake.inserted_bodies().pop().unwrap();
    assert_eq!(sent["metadata"]["items"][0]["key"], "startup-script");
}

// ---- The fake refuses what Compute Engine refuses; our inserts pass ----

/// A raw `instances.insert` against the fake, as a client that skipped our
/// driver would send it: the status and Google's error envelope.
async fn raw_insert(fake: &FakeGce, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances",
            fake.endpoint()
        ))
        .bearer_auth("token")
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON"))
}

/// The body our driver inserted (which the fake took), resent raw after
/// `spoil` changed it.
async fn spoiled_insert(fake: &FakeGce, spoil: impl FnOnce(&mut Value)) -> (u16, Value) {
    let mut body = fake
        .inserted_bodies()
        .into_iter()
        .rfind(|b| {
            b["name"] != "spoiled"
                && b["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("shoot--m-"))
        })
        .expect("the driver inserted");
    body["name"] = json!("spoiled");
    spoil(&mut body);
    raw_insert(fake, body).await
}

fn assert_google_invalid(status: u16, body: &Value, needle: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], 400, "{body}");
    let reason = body["error"]["errors"][0]["reason"].as_str().unwrap();
    assert!(matches!(reason, "invalid" | "required"), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message}");
}

#[tokio::test]
async fn unknown_and_mistyped_fields_are_refused_and_our_insert_fits_the_discovery_schema() {
    let fake = start().await;
    let d = driver(&fake);
    let mut s = spec("shoot--schema");
    s["minCpuPlatform"] = json!("Intel Skylake");
    s["description"] = json!("a node");
    s["deletionProtection"] = json!(false);
    d.create_machine(&req(&machine(), &class("c", s)))
        .await
        .expect("every field the driver sends is in the Instance schema");
    let (status, body) = spoiled_insert(&fake, |b| b["minCPUPlatform"] = json!("x")).await;
    assert_google_invalid(status, &body, "Unknown name \"minCPUPlatform\"");
    let (status, body) = spoiled_insert(&fake, |b| b["canIpForward"] = json!("yes")).await;
    assert_google_invalid(status, &body, "can_ip_forward");
    let (status, body) = spoiled_insert(&fake, |b| {
        b["scheduling"]["onHostMaintenance"] = json!("migrate")
    })
    .await;
    assert_google_invalid(status, &body, "on_host_maintenance");
    assert_eq!(
        fake.instance_count(),
        1,
        "no refused insert created anything"
    );
}

#[tokio::test]
async fn names_outside_rfc_1035_are_refused_and_the_driver_reports_the_refusal() {
    let fake = start().await;
    let d = driver(&fake);
    d.create_machine(&req(&machine(), &class("c", spec("shoot--names"))))
        .await
        .expect("a Machine name is a valid instance name");
    for bad in ["Upper", "under_score", "ends-", "1digit", &"x".repeat(64)] {
        let (status, body) = spoiled_insert(&fake, |b| b["name"] = json!(bad)).await;
        assert_google_invalid(status, &body, "resource.name");
    }
    // A Kubernetes name may hold a dot, an instance name may not: the
    // driver carries GCE's own answer to the Machine.
    let mut m = machine();
    m.metadata.name = Some("shoot.dotted".into());
    let e = d
        .create_machine(&req(&m, &class("c", spec("shoot--names"))))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("HTTP 400") && e.message.contains("resource.name"),
        "the envelope is parsed: {}",
        e.message
    );
    assert_eq!(fake.instance_count(), 1);
}

#[tokio::test]
async fn required_fields_and_label_syntax_are_checked_and_our_insert_carries_them() {
    let fake = start().await;
    let d = driver(&fake);
    let mut s = spec("shoot--labels");
    s["labels"] = json!({"name": "test", "pool": "worker-a_1"});
    d.create_machine(&req(&machine(), &class("c", s)))
        .await
        .expect("machine type, disks and labels as GCE takes them");
    let (status, body) = spoiled_insert(&fake, |b| {
        b.as_object_mut().unwrap().remove("machineType");
    })
    .await;
    assert_google_invalid(status, &body, "resource.machineType");
    let (status, body) = spoiled_insert(&fake, |b| b["disks"] = json!([])).await;
    assert_google_invalid(status, &body, "resource.disks");
    let (status, body) = spoiled_insert(&fake, |b| b["labels"]["Pool"] = json!("x")).await;
    assert_google_invalid(status, &body, "labels");
}

#[tokio::test]
async fn scheduling_combinations_gce_refuses_are_refused_and_valid_preemptible_and_gpu_classes_pass(
) {
    let fake = start().await;
    let d = driver(&fake);
    let mut preemptible = spec("shoot--sched");
    preemptible["scheduling"] =
        json!({"automaticRestart": false, "onHostMaintenance": "TERMINATE", "preemptible": true});
    d.create_machine(&req(&machine(), &class("p", preemptible)))
        .await
        .expect("a preemptible class as GCE takes it");
    let (status, body) =
        spoiled_insert(&fake, |b| b["scheduling"]["automaticRestart"] = json!(true)).await;
    assert_google_invalid(status, &body, "automaticRestart");
    let mut gpu = spec("shoot--sched");
    gpu["scheduling"] = json!({"automaticRestart": true, "onHostMaintenance": "TERMINATE"});
    gpu["gpu"] = json!({"acceleratorType": "nvidia-tesla-t4", "count": 1});
    d.create_machine(&req(&machine(), &class("g", gpu)))
        .await
        .expect("a GPU class as GCE takes it");
    let (status, body) = spoiled_insert(&fake, |b| {
        b["scheduling"]["onHostMaintenance"] = json!("MIGRATE")
    })
    .await;
    assert_google_invalid(status, &body, "guest accelerators");
    assert_eq!(fake.instance_count(), 2);
}

/// A GET of `path` under the project, raw.
async fn raw_get(fake: &FakeGce, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!(
            "{}/compute/v1/projects/{PROJECT}/{path}",
            fake.endpoint()
        ))
        .bearer_auth("token")
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON")
}

#[tokio::test]
async fn a_machine_type_the_zone_does_not_have_is_refused_as_gce_refuses_it() {
    let fake = start().await;
    let d = driver(&fake);
    d.create_machine(&req(&machine(), &class("c", spec("shoot--types"))))
        .await
        .expect("n1-standard-2 exists");
    for bad in ["n1-standard-x", "z9-standard-2", "n1-bogus-4", "custom-2"] {
        let (status, body) = spoiled_insert(&fake, |b| {
            b["machineType"] = json!(format!("zones/{ZONE}/machineTypes/{bad}"))
        })
        .await;
        assert_google_invalid(status, &body, "does not exist in zone");
    }
    for good in [
        "e2-medium",
        "n2-highmem-8",
        "n2-custom-4-8192",
        "custom-2-4096-ext",
        "c3-standard-4-lssd",
    ] {
        let (status, body) = spoiled_insert(&fake, |b| {
            b["machineType"] = json!(format!("zones/{ZONE}/machineTypes/{good}"));
            b["name"] = json!(format!("ok-{}", good.replace('-', "")));
        })
        .await;
        assert_eq!(status, 200, "{good}: {body}");
    }
    // The driver maps GCE's answer for a missing type to ResourceExhausted
    // (another zone may have it), as the reference does.
    let mut s = spec("shoot--types");
    s["machineType"] = json!("n1-nonsense-2");
    let e = d
        .create_machine(&req(&machine(), &class("c", s)))
        .await
        .unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e:?}");
}

#[tokio::test]
async fn gets_answer_as_gce_does_without_input_only_fields_and_with_the_external_ip() {
    let fake = start().await;
    let d = driver(&fake);
    let m = machine();
    d.create_machine(&req(&m, &class("c", spec("shoot--shape"))))
        .await
        .expect("create");
    let vm = raw_get(
        &fake,
        &format!(
            "zones/{ZONE}/instances/{}",
            m.metadata.name.clone().unwrap_or_default()
        ),
    )
    .await;
    for disk in vm["disks"].as_array().expect("disks") {
        assert!(disk.get("initializeParams").is_none(), "input only: {disk}");
        assert!(disk["diskSizeGb"].is_string(), "{disk}");
    }
    let nic = &vm["networkInterfaces"][0];
    let ac = &nic["accessConfigs"][0];
    assert!(
        ac["natIP"].is_string(),
        "an external IP has its address: {nic}"
    );
    // The driver still reads what it needs from such an answer.
    let status = d
        .get_machine_status(&req(&m, &class("c", spec("shoot--shape"))))
        .await
        .expect("status");
    assert!(!status.provider_id.is_empty());
}

#[tokio::test]
async fn a_stock_out_operation_fails_with_gces_503_and_a_quota_with_403() {
    let fake = start().await;
    let d = driver(&fake);
    let c = class("c", spec("shoot--stockout"));
    d.create_machine(&req(&machine(), &c))
        .await
        .expect("create");
    for (i, (code, http)) in [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", 503),
        ("QUOTA_EXCEEDED", 403),
    ]
    .into_iter()
    .enumerate()
    {
        fake.inject(
            Method::InstancesInsert,
            Fault::OperationError {
                code: code.into(),
                message: "m".into(),
            },
            1,
        );
        let (status, op) =
            spoiled_insert(&fake, |b| b["name"] = json!(format!("stockout-{i}"))).await;
        assert_eq!(status, 200, "{op}");
        let name = op["name"].as_str().expect("an operation").to_string();
        let mut done = Value::Null;
        for _ in 0..20 {
            done = raw_get(&fake, &format!("zones/{ZONE}/operations/{name}")).await;
            if done["status"] == "DONE" {
                break;
            }
        }
        assert_eq!(done["status"], "DONE", "{done}");
        assert_eq!(done["httpErrorStatusCode"], http, "{code}: {done}");
    }
}

#[tokio::test]
async fn a_missing_or_malformed_image_is_refused_as_gce_refuses_it() {
    let fake = start().await;
    let d = driver(&fake);
    d.create_machine(&req(&machine(), &class("c", spec("shoot--images"))))
        .await
        .expect("the class's image exists");
    let (status, body) = spoiled_insert(&fake, |b| {
        b["disks"][0]["initializeParams"]["sourceImage"] = json!("gardenlinux-1443")
    })
    .await;
    assert_google_invalid(status, &body, "sourceImage");
    fake.delete_image("projects/gardenlinux/global/images/gone");
    let mut s = spec("shoot--images");
    s["disks"][0]["image"] = json!("projects/gardenlinux/global/images/gone");
    let e = d
        .create_machine(&req(&machine(), &class("c", s)))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("404") && e.message.contains("was not found"),
        "{e:?}"
    );
    assert_eq!(
        fake.instance_count(),
        1,
        "no refused insert created anything"
    );
}
