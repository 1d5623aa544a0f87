//! UpdateMachine against the Compute fake, through the official client:
//! labels, network tags, metadata and a larger boot disk converge on the same
//! instance with the fingerprints Compute locks on; a second run makes no
//! call that changes anything; a failure half-way converges on the retry; a
//! value Compute rejects is `InvalidArgument` with its message; a machine
//! type change is refused without a call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::{Machine, MachineClass, MachineSpec};
use mcm_driver::{Code, Driver, MachineRequest, UpdateMachineRequest};
use mcm_fake_gcp::{service_account_json, FakeGce, Fault, Method};
use mcm_provider_gcp::{Backoff, GcpDriver, GcpDriverConfig};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const PROJECT: &str = "mcm-test-project";
const ZONE: &str = "europe-west1-b";
const USER_DATA: &str = "#cloud-config\nhostname: test\n";
const MUTATIONS: [Method; 4] = [
    Method::InstancesSetLabels,
    Method::InstancesSetTags,
    Method::InstancesSetMetadata,
    Method::DisksResize,
];

fn driver(fake: &FakeGce) -> GcpDriver {
    GcpDriver::new(GcpDriverConfig {
        operation_poll: Backoff {
            initial: Duration::from_millis(5),
            factor: 1.5,
            max: Duration::from_millis(20),
        },
        ..GcpDriverConfig::with_endpoint(fake.endpoint())
    })
}

fn secret() -> Secret {
    Secret {
        data: Some(
            [
                ("serviceAccountJSON", service_account_json(PROJECT)),
                ("userData", USER_DATA.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
            .collect(),
        ),
        ..Default::default()
    }
}

fn spec() -> Value {
    json!({
        "disks": [{"boot": true, "sizeGb": 50, "type": "pd-balanced", "image": "projects/gardenlinux/global/images/gl"}],
        "labels": {"name": "test", "team": "a", "stale": "s"},
        "machineType": "n1-standard-2",
        "metadata": [{"key": "ash", "value": "1"}, {"key": "gone", "value": "g"}],
        "networkInterfaces": [{"network": "shoot-net", "subnetwork": "shoot-nodes"}],
        "scheduling": {"automaticRestart": true, "onHostMaintenance": "MIGRATE"},
        "serviceAccounts": [{"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["https://www.googleapis.com/auth/compute"]}],
        "tags": ["kubernetes-io-cluster-shoot--hot", "kubernetes-io-role-node", "web"],
        "region": "europe-west1",
        "zone": ZONE
    })
}

/// `spec()` with every in-place field changed.
fn changed() -> Value {
    let mut after = spec();
    after["labels"] = json!({"name": "test", "team": "b", "cost": "x"});
    after["tags"] = json!([
        "kubernetes-io-cluster-shoot--hot",
        "kubernetes-io-role-node",
        "db"
    ]);
    after["metadata"] = json!([{"key": "ash", "value": "2"}]);
    after["disks"][0]["sizeGb"] = json!(80);
    after
}

fn class(spec: Value) -> MachineClass {
    let mut c = MachineClass::new("hot", spec);
    c.provider = "GCP".into();
    c.metadata.namespace = Some("default".into());
    c
}

static SEQ: AtomicU64 = AtomicU64::new(1);

struct Env {
    fake: FakeGce,
    driver: GcpDriver,
    machine: Machine,
}

/// A fake, a driver and a machine created from `spec()`.
async fn created() -> Env {
    let fake = FakeGce::start().await.expect("fake");
    fake.set_polls_until_done(1);
    let driver = driver(&fake);
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let mut machine = Machine::new(&format!("shoot--hot-{n}"), MachineSpec::default());
    machine.metadata.namespace = Some("default".into());
    machine.metadata.uid = Some(format!("00000000-0000-4000-8000-{n:012x}"));
    let out = driver
        .create_machine(&MachineRequest {
            machine: machine.clone(),
            machine_class: class(spec()),
            secret: secret(),
        })
        .await
        .expect("create");
    machine.spec.provider_id = out.provider_id;
    Env {
        fake,
        driver,
        machine,
    }
}

impl Env {
    fn update(&self, want: &Value) -> UpdateMachineRequest {
        UpdateMachineRequest {
            machine: self.machine.clone(),
            machine_class: class(want.clone()),
            secret: secret(),
            last_applied_provider_spec: spec(),
        }
    }

    fn instance(&self) -> Value {
        let name = self.machine.metadata.name.clone().unwrap();
        let all = self.fake.instances(PROJECT, ZONE);
        assert_eq!(all.len(), 1, "one instance, never replaced");
        all.get(&name).cloned().expect("the machine's instance")
    }

    fn mutations(&self) -> Vec<u64> {
        let r = self.fake.requests();
        MUTATIONS
            .iter()
            .map(|m| r.get(m).copied().unwrap_or(0))
            .collect()
    }
}

fn labels(i: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(i["labels"].clone()).unwrap_or_default()
}

fn tags(i: &Value) -> Vec<String> {
    serde_json::from_value(i["tags"]["items"].clone()).unwrap_or_default()
}

fn metadata(i: &Value) -> BTreeMap<String, String> {
    i["metadata"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["key"].as_str().unwrap_or_default().to_string(),
                m["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The instance has every in-place change of `changed()` and kept what the
/// driver and others own.
fn assert_converged(i: &Value) {
    let l = labels(i);
    assert_eq!(l.get("team").map(String::as_str), Some("b"), "{l:?}");
    assert_eq!(l.get("cost").map(String::as_str), Some("x"), "{l:?}");
    assert!(!l.contains_key("stale"), "dropped from the class: {l:?}");
    assert!(
        l.contains_key(mcm_driver::TagStyle::Label.uid_key()),
        "identity label kept: {l:?}"
    );
    assert_eq!(
        tags(i),
        [
            "kubernetes-io-cluster-shoot--hot",
            "kubernetes-io-role-node",
            "db"
        ]
    );
    let md = metadata(i);
    assert_eq!(md.get("ash").map(String::as_str), Some("2"), "{md:?}");
    assert!(!md.contains_key("gone"), "{md:?}");
    assert_eq!(md.get("user-data").map(String::as_str), Some(USER_DATA));
    assert!(md.contains_key("mcm-machine-uid"), "{md:?}");
    assert_eq!(i["disks"][0]["diskSizeGb"], json!("80"));
}

#[tokio::test]
async fn labels_tags_metadata_and_disk_size_converge_and_a_second_run_changes_nothing() {
    let env = created().await;
    let changes = env.driver.in_place_changes(&spec(), &changed());
    assert!(changes.all_in_place(), "{changes:?}");
    let req = env.update(&changed());
    env.driver.update_machine(&req).await.expect("update");
    let i = env.instance();
    assert_converged(&i);
    assert_eq!(env.mutations(), [1, 1, 1, 1]);

    let again = env.driver.update_machine(&req).await.expect("second");
    assert_eq!(env.mutations(), [1, 1, 1, 1], "a second run only reads");
    assert_eq!(again.last_known_state, "");
    assert_eq!(env.instance(), i);
}

#[tokio::test]
async fn a_failure_half_way_converges_on_the_retry() {
    let env = created().await;
    env.fake.inject(
        Method::InstancesSetMetadata,
        Fault::OperationError {
            code: "INTERNAL_ERROR".into(),
            message: "Internal error. Please try again".into(),
        },
        1,
    );
    let req = env.update(&changed());
    let e = env
        .driver
        .update_machine(&req)
        .await
        .expect_err("metadata fails");
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(
        e.message.contains("Internal error. Please try again"),
        "{e}"
    );
    let half = env.instance();
    assert_eq!(labels(&half).get("team").map(String::as_str), Some("b"));
    assert!(metadata(&half).contains_key("gone"), "not applied yet");
    assert_eq!(half["disks"][0]["diskSizeGb"], json!("50"));

    env.driver.update_machine(&req).await.expect("retry");
    assert_converged(&env.instance());
    assert_eq!(
        env.mutations(),
        [1, 1, 2, 1],
        "only the failed part and what followed it are sent again"
    );
}

#[tokio::test]
async fn a_lost_answer_is_retried_without_a_stale_fingerprint() {
    let env = created().await;
    env.fake
        .inject(Method::InstancesSetLabels, Fault::LostResponse, 1);
    let req = env.update(&changed());
    env.driver
        .update_machine(&req)
        .await
        .expect_err("the answer was lost");
    env.driver.update_machine(&req).await.expect("retry");
    assert_converged(&env.instance());
}

#[tokio::test]
async fn a_label_compute_rejects_is_invalid_argument_with_its_message() {
    let env = created().await;
    let mut want = spec();
    want["labels"]["Team"] = json!("b");
    let e = env
        .driver
        .update_machine(&env.update(&want))
        .await
        .expect_err("rejected");
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(
        e.message.contains("Invalid value for field 'labels'"),
        "{e}"
    );
    assert!(!labels(&env.instance()).contains_key("Team"));
}

#[tokio::test]
async fn a_machine_type_change_is_refused_without_a_call() {
    let env = created().await;
    let mut want = changed();
    want["machineType"] = json!("n1-standard-4");
    let changes = env.driver.in_place_changes(&spec(), &want);
    assert_eq!(changes.need_replacement, vec!["machineType"]);
    let before = env.fake.requests();
    let e = env
        .driver
        .update_machine(&env.update(&want))
        .await
        .expect_err("refused");
    assert_eq!(e.code, Code::FailedPrecondition, "{e}");
    assert!(e.message.contains("machineType"), "{e}");
    assert_eq!(env.fake.requests(), before, "no call at all");
}

#[tokio::test]
async fn a_class_that_no_longer_validates_is_reported_and_not_applied() {
    let env = created().await;
    let mut want = changed();
    want["machineType"] = json!("");
    let before = env.fake.requests();
    let e = env
        .driver
        .update_machine(&env.update(&want))
        .await
        .expect_err("invalid");
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("machineType"), "{e}");
    assert_eq!(env.fake.requests(), before, "no call at all");
}

#[tokio::test]
async fn the_conformance_kits_update_checks_pass() {
    use mcm_driver::conformance::{run_update_checks, Fixture, UpdateFixture};
    use std::sync::Arc;
    let fake = Arc::new(FakeGce::start().await.expect("fake"));
    fake.set_polls_until_done(1);
    let d = driver(&fake);
    let mut updated = spec();
    updated["labels"]["team"] = json!("blue");
    let mut other = spec();
    other["tags"] = json!(["kubernetes-io-cluster-other", "kubernetes-io-role-node"]);
    let fixture = Fixture {
        class: class(spec()),
        other_class: class(other),
        secret: secret(),
        new_machine: Box::new(|_| {
            let n = SEQ.fetch_add(1, Ordering::SeqCst);
            let mut m = Machine::new(&format!("shoot--conf-{n}"), MachineSpec::default());
            m.metadata.namespace = Some("default".into());
            m.metadata.uid = Some(format!("00000000-0000-4000-8000-{n:012x}"));
            m
        }),
        invalid_classes: Vec::new(),
    };
    let (a, b, c) = (fake.clone(), fake.clone(), fake.clone());
    let u = UpdateFixture {
        updated_class: class(updated),
        break_updates: Box::new(move || {
            a.inject(
                Method::InstancesSetLabels,
                Fault::Http {
                    status: 500,
                    reason: "backendError".into(),
                    message: "Internal error".into(),
                },
                1000,
            );
            Box::pin(async {})
        }),
        heal: Box::new(move || {
            b.clear_faults();
            Box::pin(async {})
        }),
        converged: Box::new(move |provider_id| {
            let name = provider_id
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let team = c
                .instances(PROJECT, ZONE)
                .get(&name)
                .map(|i| i["labels"]["team"].clone());
            Box::pin(async move {
                match team {
                    Some(t) if t == json!("blue") => Ok(()),
                    other => Err(format!("instance {name}: team is {other:?}")),
                }
            })
        }),
    };
    let failures = run_update_checks(&d, &fixture, &u).await;
    assert!(failures.is_empty(), "{failures:#?}");
}
