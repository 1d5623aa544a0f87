//! The fake's answers are what Compute Engine answers: every response body is
//! parsed by the official client's generated types (`google-cloud-compute-v1`),
//! and every JSON key (recursively) is checked against the Compute v1
//! discovery document (`testdata/compute.v1.subset.json`, extracted from the
//! copy that google-api-python-client 2.202.0 on PyPI ships), including the
//! rule that int64/uint64 fields travel as JSON strings.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use google_cloud_compute_v1::model::{Instance, InstanceList, Operation};
use mcm_fake_gcp::{FakeGce, Fault, Method};
use serde_json::{json, Value};

const DISCOVERY: &str = include_str!("../testdata/compute.v1.subset.json");

fn discovery() -> Value {
    serde_json::from_str(DISCOVERY).expect("discovery subset")
}

/// Checks `v` against schema `name`; returns every violation.
fn check(doc: &Value, schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => match doc["schemas"].get(r) {
            Some(s) => s,
            None => {
                out.push(format!("{path}: unknown schema {r}"));
                return;
            }
        },
        None => schema,
    };
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let format = schema.get("format").and_then(Value::as_str);
    match (ty, v) {
        ("object", Value::Object(o)) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, child) in o {
                    match props.get(k) {
                        Some(s) => check(doc, s, child, &format!("{path}.{k}"), out),
                        None => out.push(format!("{path}.{k}: not in the discovery schema")),
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties") {
                for (k, child) in o {
                    check(doc, ap, child, &format!("{path}.{k}"), out);
                }
            }
        }
        ("array", Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                check(doc, &schema["items"], item, &format!("{path}[{i}]"), out);
            }
        }
        ("string", Value::String(s)) => {
            if format == Some("byte") && !is_base64(s) {
                out.push(format!("{path}: {s:?} is not base64 (format byte)"));
            }
            if let Some(values) = schema.get("enum").and_then(Value::as_array) {
                if !values.contains(v) {
                    out.push(format!("{path}: {v} is not one of the enum values"));
                }
            }
        }
        ("integer", Value::Number(_)) if !matches!(format, Some("int64" | "uint64")) => {}
        ("boolean", Value::Bool(_)) => {}
        ("number", Value::Number(_)) => {}
        _ => out.push(format!(
            "{path}: {v} does not fit type {ty} (format {format:?})"
        )),
    }
    // int64/uint64 are strings on the wire.
    if matches!(format, Some("int64" | "uint64")) && !v.is_string() {
        out.push(format!("{path}: {format:?} must be a JSON string, got {v}"));
    }
}

fn is_base64(s: &str) -> bool {
    s.len().is_multiple_of(4)
        && s.trim_end_matches('=')
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/')
        && s.len() - s.trim_end_matches('=').len() <= 2
}

fn assert_matches_schema(schema: &str, v: &Value) {
    let doc = discovery();
    let mut out = Vec::new();
    check(&doc, &json!({"$ref": schema}), v, schema, &mut out);
    assert!(
        out.is_empty(),
        "{schema} violations:\n{}\n{v:#}",
        out.join("\n")
    );
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(fake: &FakeGce) -> Self {
        Client {
            http: reqwest::Client::new(),
            base: format!("{}/compute/v1/projects/p/zones/z", fake.endpoint()),
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth("token");
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("JSON body"))
    }
}

fn instance_body(name: &str) -> Value {
    json!({
        "name": name,
        "machineType": "zones/z/machineTypes/n1-standard-2",
        "canIpForward": false,
        "labels": {"name": "mc"},
        "tags": {"items": ["kubernetes-io-cluster-c", "kubernetes-io-role-node"]},
        "scheduling": {"automaticRestart": true, "onHostMaintenance": "MIGRATE", "preemptible": false},
        "disks": [{"type": "PERSISTENT", "boot": true, "autoDelete": true,
                   "initializeParams": {"diskSizeGb": "50", "diskType": "zones/z/diskTypes/pd-ssd",
                                        "sourceImage": "projects/p/global/images/i"}}],
        "metadata": {"items": [{"key": "user-data", "value": "#cloud-config\n"}]},
        "networkInterfaces": [{"network": "projects/p/global/networks/n", "accessConfigs": [{}]}],
        "serviceAccounts": [{"email": "sa@p.iam.gserviceaccount.com", "scopes": ["s"]}]
    })
}

#[tokio::test]
async fn every_answer_parses_with_the_official_types_and_fits_the_discovery_schema() {
    let fake = FakeGce::start().await.unwrap();
    fake.set_polls_until_done(2);
    let c = Client::new(&fake);
    let post = reqwest::Method::POST;

    // insert → a PENDING operation with a decimal uint64 id.
    let (status, op) = c
        .send(post.clone(), "/instances", Some(instance_body("vm-1")))
        .await;
    assert_eq!(status, 200);
    assert_matches_schema("Operation", &op);
    let parsed: Operation = serde_json::from_value(op.clone()).expect("Operation");
    assert!(parsed.id.is_some_and(|id| id > 0));
    let op_name = parsed.name.clone().unwrap();

    // get while provisioning, list, operation polls to DONE.
    let (_, inst) = c.send(reqwest::Method::GET, "/instances/vm-1", None).await;
    assert_matches_schema("Instance", &inst);
    let i: Instance = serde_json::from_value(inst).expect("Instance");
    assert_eq!(i.name.as_deref(), Some("vm-1"));
    for want in ["RUNNING", "DONE"] {
        let (_, op) = c
            .send(
                reqwest::Method::GET,
                &format!("/operations/{op_name}"),
                None,
            )
            .await;
        assert_matches_schema("Operation", &op);
        assert_eq!(op["status"], want);
        serde_json::from_value::<Operation>(op).expect("Operation");
    }
    let (_, inst) = c.send(reqwest::Method::GET, "/instances/vm-1", None).await;
    assert_eq!(inst["status"], "RUNNING");
    assert_matches_schema("Instance", &inst);

    let (_, list) = c.send(reqwest::Method::GET, "/instances", None).await;
    assert_matches_schema("InstanceList", &list);
    let l: InstanceList = serde_json::from_value(list).expect("InstanceList");
    assert_eq!(l.items.len(), 1);

    // An operation that ends with a capacity error.
    fake.inject(
        Method::InstancesInsert,
        Fault::zone_resource_pool_exhausted(),
        1,
    );
    fake.set_polls_until_done(0);
    let (_, op) = c
        .send(post.clone(), "/instances", Some(instance_body("vm-2")))
        .await;
    assert_matches_schema("Operation", &op);
    let failed: Operation = serde_json::from_value(op).expect("Operation");
    let errors = &failed.error.as_ref().expect("error").errors;
    assert_eq!(
        errors[0].code.as_deref(),
        Some("ZONE_RESOURCE_POOL_EXHAUSTED")
    );
    assert!(
        !fake.instances("p", "z").contains_key("vm-2"),
        "a failed insert leaves no instance"
    );

    // delete → operation; the instance is gone when it is DONE.
    let (_, op) = c
        .send(reqwest::Method::DELETE, "/instances/vm-1", None)
        .await;
    assert_matches_schema("Operation", &op);
    assert_eq!(op["operationType"], "delete");
    assert_eq!(fake.instance_count(), 0);
    let (_, list) = c.send(reqwest::Method::GET, "/instances", None).await;
    assert_matches_schema("InstanceList", &list);
    assert_eq!(fake.unauthenticated_requests(), 0);
}

#[tokio::test]
async fn errors_use_the_google_envelope_with_reasons() {
    let fake = FakeGce::start().await.unwrap();
    let c = Client::new(&fake);
    let (status, body) = c.send(reqwest::Method::GET, "/instances/nope", None).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], 404);
    assert_eq!(body["error"]["errors"][0]["reason"], "notFound");

    c.send(
        reqwest::Method::POST,
        "/instances",
        Some(instance_body("dup")),
    )
    .await;
    let (status, body) = c
        .send(
            reqwest::Method::POST,
            "/instances",
            Some(instance_body("dup")),
        )
        .await;
    assert_eq!(
        status, 409,
        "a duplicate insert is 409 like the real API: {body}"
    );
    assert_eq!(body["error"]["errors"][0]["reason"], "alreadyExists");

    fake.inject(Method::InstancesInsert, Fault::quota_exceeded(), 1);
    let (status, body) = c
        .send(
            reqwest::Method::POST,
            "/instances",
            Some(instance_body("q")),
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["errors"][0]["reason"], "QUOTA_EXCEEDED");

    let (status, _) = c
        .send(reqwest::Method::DELETE, "/instances/nope", None)
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn list_pages_and_filters() {
    let fake = FakeGce::start().await.unwrap();
    fake.set_polls_until_done(0);
    let c = Client::new(&fake);
    for n in 0..5 {
        let mut body = instance_body(&format!("vm-{n}"));
        body["labels"]["parity"] = json!(if n % 2 == 0 { "even" } else { "odd" });
        c.send(reqwest::Method::POST, "/instances", Some(body))
            .await;
    }
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let (_, page) = c
            .send(
                reqwest::Method::GET,
                &format!("/instances?maxResults=2&pageToken={token}"),
                None,
            )
            .await;
        assert_matches_schema("InstanceList", &page);
        let l: InstanceList = serde_json::from_value(page).unwrap();
        assert!(l.items.len() <= 2);
        names.extend(l.items.into_iter().filter_map(|i| i.name));
        match l.next_page_token {
            Some(t) => token = t,
            None => break,
        }
    }
    assert_eq!(names, ["vm-0", "vm-1", "vm-2", "vm-3", "vm-4"]);
    let (_, odd) = c
        .send(
            reqwest::Method::GET,
            "/instances?filter=labels.parity%20%3D%20odd",
            None,
        )
        .await;
    let l: InstanceList = serde_json::from_value(odd).unwrap();
    let odd: Vec<_> = l.items.into_iter().filter_map(|i| i.name).collect();
    assert_eq!(odd, ["vm-1", "vm-3"]);
    let (status, _) = c
        .send(reqwest::Method::GET, "/instances?filter=name%20~%20x", None)
        .await;
    assert_eq!(status, 400);
    assert_eq!(fake.list_filters().len(), 5);
}

#[tokio::test]
async fn a_lost_response_still_creates_the_instance() {
    let fake = FakeGce::start().await.unwrap();
    fake.inject(Method::InstancesInsert, Fault::LostResponse, 1);
    let c = Client::new(&fake);
    let (status, body) = c
        .send(
            reqwest::Method::POST,
            "/instances",
            Some(instance_body("lost")),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(fake.instances("p", "z").contains_key("lost"));
    assert_eq!(fake.requests().get(&Method::InstancesInsert), Some(&1));
}

#[tokio::test]
async fn hot_update_calls_take_the_discovery_bodies_lock_on_fingerprints_and_answer_operations() {
    let fake = FakeGce::start().await.unwrap();
    fake.set_polls_until_done(0);
    let c = Client::new(&fake);
    let post = reqwest::Method::POST;
    c.send(post.clone(), "/instances", Some(instance_body("vm")))
        .await;
    let (_, inst) = c.send(reqwest::Method::GET, "/instances/vm", None).await;
    assert_matches_schema("Instance", &inst);
    let i: Instance = serde_json::from_value(inst.clone()).expect("Instance");
    assert!(i.label_fingerprint.is_some());
    let disk = &i.disks[0];
    assert_eq!(disk.disk_size_gb, Some(50));
    let disk_name = disk.source.as_deref().unwrap().rsplit('/').next().unwrap();

    // Each call: the body as the discovery document describes it, a stale
    // fingerprint refused with 412, the current one accepted.
    let calls = [
        (
            "setLabels",
            "InstancesSetLabelsRequest",
            json!({"labels": {"team": "b"}, "labelFingerprint": inst["labelFingerprint"]}),
            "labelFingerprint",
        ),
        (
            "setTags",
            "Tags",
            json!({"items": ["kubernetes-io-cluster-c", "db"], "fingerprint": inst["tags"]["fingerprint"]}),
            "fingerprint",
        ),
        (
            "setMetadata",
            "Metadata",
            json!({"items": [{"key": "ash", "value": "2"}], "fingerprint": inst["metadata"]["fingerprint"]}),
            "fingerprint",
        ),
    ];
    for (method, schema, body, fp) in calls {
        assert_matches_schema(schema, &body);
        let mut stale = body.clone();
        stale[fp] = json!("c3RhbGU=");
        let path = format!("/instances/vm/{method}");
        let (status, e) = c.send(post.clone(), &path, Some(stale)).await;
        assert_eq!(status, 412, "{method}: {e}");
        assert_eq!(e["error"]["errors"][0]["reason"], "conditionNotMet");
        let (status, op) = c.send(post.clone(), &path, Some(body)).await;
        assert_eq!(status, 200, "{method}: {op}");
        assert_matches_schema("Operation", &op);
        let parsed: Operation = serde_json::from_value(op.clone()).expect("Operation");
        assert_eq!(parsed.operation_type.as_deref(), Some(method));
        assert_eq!(op["status"], "DONE");
    }
    let (_, after) = c.send(reqwest::Method::GET, "/instances/vm", None).await;
    assert_matches_schema("Instance", &after);
    assert_eq!(after["labels"], json!({"team": "b"}));
    assert_eq!(
        after["tags"]["items"],
        json!(["kubernetes-io-cluster-c", "db"])
    );
    assert_eq!(
        after["metadata"]["items"],
        json!([{"key": "ash", "value": "2"}])
    );
    for (k, path) in [
        ("labels", "labelFingerprint"),
        ("tags", "tags"),
        ("metadata", "metadata"),
    ] {
        assert_ne!(after[path], inst[path], "{k}: a new fingerprint");
    }

    // disks.resize grows, and refuses a size that is not larger.
    let body = json!({"sizeGb": "80"});
    assert_matches_schema("DisksResizeRequest", &body);
    let path = format!("/disks/{disk_name}/resize");
    let (status, op) = c.send(post.clone(), &path, Some(body)).await;
    assert_eq!(status, 200, "{op}");
    assert_matches_schema("Operation", &op);
    serde_json::from_value::<Operation>(op).expect("Operation");
    let (status, e) = c
        .send(post.clone(), &path, Some(json!({"sizeGb": "60"})))
        .await;
    assert_eq!(status, 400, "{e}");
    let (_, grown) = c.send(reqwest::Method::GET, "/instances/vm", None).await;
    assert_eq!(grown["disks"][0]["diskSizeGb"], json!("80"));
    let (status, _) = c
        .send(post, "/disks/nope/resize", Some(json!({"sizeGb": "80"})))
        .await;
    assert_eq!(status, 404);
}
