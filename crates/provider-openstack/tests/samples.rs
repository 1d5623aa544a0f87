//! Keeps the fake honest: every fake answer the driver reads has the keys and
//! value types of the matching official API sample (requests the fake takes,
//! such as server metadata, are the official request samples) shipped in OpenStack's own
//! source distributions (`nova` 34.0.0: `doc/api_samples`, `neutron-lib`
//! 5.0.1: `api-ref/source/v2/samples`, `keystone` 26.0.0 and `cinder` 25.0.0:
//! `api-ref/source/v3/samples`).
//!
//! The sdists are fetched once with pip into `~/.cache/mcm-rs/openstack-samples`
//! (or `$MCM_OPENSTACK_SAMPLES`). Without pip or the registry the test skips
//! visibly, except in CI, where it fails (`mcm_testenv::require`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use crate::common;

use common::{class, env, machine};
use mcm_driver::Driver;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const NOVA: &str = "nova-34.0.0";
const NEUTRON_LIB: &str = "neutron_lib-5.0.1";
const KEYSTONE: &str = "keystone-26.0.0";
const CINDER: &str = "cinder-25.0.0";

/// Each unpacked distribution and the samples folder taken from it.
const FOLDERS: [(&str, &str); 4] = [
    (NOVA, "doc/api_samples"),
    (NEUTRON_LIB, "api-ref/source/v2/samples"),
    (KEYSTONE, "api-ref/source/v3/samples"),
    (CINDER, "api-ref/source/v3/samples"),
];

fn cache_dir() -> PathBuf {
    if let Ok(d) = std::env::var("MCM_OPENSTACK_SAMPLES") {
        return PathBuf::from(d);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/tmp".into());
    PathBuf::from(home).join(".cache/mcm-rs/openstack-samples")
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The samples folder, fetched and unpacked on first use.
fn samples() -> Result<PathBuf, String> {
    let dir = cache_dir();
    let ready = FOLDERS
        .iter()
        .all(|(dist, folder)| dir.join(dist).join(folder).is_dir());
    if ready {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let python = if Command::new("python3").arg("--version").output().is_ok() {
        "python3"
    } else {
        "python"
    };
    run(Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
        ])
        .args([
            "nova==34.0.0",
            "neutron-lib==5.0.1",
            "keystone==26.0.0",
            "cinder==25.0.0",
            "-d",
        ])
        .arg(&dir))?;
    for (dist, folder) in FOLDERS {
        run(Command::new("tar")
            .arg("xzf")
            .arg(dir.join(format!("{dist}.tar.gz")))
            .arg("-C")
            .arg(&dir)
            .args(["--wildcards", &format!("{dist}/{folder}/*")]))?;
    }
    Ok(dir)
}

fn load(dir: &Path, file: &str) -> Value {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Keys that OpenStack only sends sometimes: `servers_links` appears when
/// there is a next page; Cinder shows a volume's host and migration
/// attributes only to admins (policies `volume_extension:volume_host_attribute`
/// and `volume_mig_status_attribute` are `rule:admin_api` in
/// `cinder/policies/volumes.py`), and the driver's user is a project member.
const OPTIONAL: [&str; 4] = [
    "servers_links",
    "os-vol-host-attr:host",
    "os-vol-mig-status-attr:migstat",
    "os-vol-mig-status-attr:name_id",
];

/// Objects whose keys are data (metadata, networks by name), not schema.
const FREE_FORM: [&str; 2] = ["metadata", "addresses"];

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every key of `sample` must be in `fake` with a value of the same type
/// (null on either side matches anything; arrays compare their items).
fn shape(sample: &Value, fake: &Value, path: &str, out: &mut Vec<String>) {
    match (sample, fake) {
        (Value::Null, _) | (_, Value::Null) => {}
        (Value::Object(s), Value::Object(f)) => {
            let free = FREE_FORM.iter().any(|k| path.ends_with(&format!(".{k}")));
            if free {
                if let Some(sv) = s.values().next() {
                    for (k, fv) in f {
                        shape(sv, fv, &format!("{path}.{k}"), out);
                    }
                }
                return;
            }
            for (k, sv) in s {
                match f.get(k) {
                    Some(fv) => shape(sv, fv, &format!("{path}.{k}"), out),
                    None if OPTIONAL.contains(&k.as_str()) => {}
                    None => out.push(format!("{path}.{k}: missing")),
                }
            }
        }
        (Value::Array(s), Value::Array(f)) => {
            if let Some(si) = s.first() {
                for (i, fi) in f.iter().enumerate() {
                    shape(si, fi, &format!("{path}[{i}]"), out);
                }
            }
        }
        (s, f) if kind(s) == kind(f) => {}
        (s, f) => out.push(format!(
            "{path}: sample has {}, fake has {}",
            kind(s),
            kind(f)
        )),
    }
}

struct Raw {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Raw {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-auth-token", &self.token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.expect("request");
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
        resp.json().await.expect("json")
    }

    /// A call whose answer has no body (Cinder's volume delete): its status
    /// and its body's text.
    async fn bodiless(&self, method: reqwest::Method, path: &str) -> (u16, String) {
        let resp = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-auth-token", &self.token)
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("body"))
    }
}

/// Keystone's token answer to `auth`: the token (`X-Subject-Token`) and the body.
async fn issue(auth_url: &str, auth: Value) -> (String, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{auth_url}/auth/tokens"))
        .json(&auth)
        .send()
        .await
        .expect("token");
    assert_eq!(resp.status().as_u16(), 201, "Keystone answers 201 Created");
    let token = resp.headers()["x-subject-token"]
        .to_str()
        .unwrap()
        .to_string();
    (token, resp.json().await.expect("json"))
}

#[tokio::test]
async fn fake_answers_have_the_shapes_of_the_official_api_samples() {
    let Some(dir) = mcm_testenv::require(
        "fake_answers_have_the_shapes_of_the_official_api_samples",
        mcm_testenv::service::OPENSTACK_SAMPLES,
        samples(),
    ) else {
        return;
    };
    let nova = |f: &str| load(&dir, &format!("{NOVA}/doc/api_samples/{f}"));
    let neutron = |f: &str| {
        load(
            &dir,
            &format!("{NEUTRON_LIB}/api-ref/source/v2/samples/{f}"),
        )
    };
    let keystone = |f: &str| load(&dir, &format!("{KEYSTONE}/api-ref/source/v3/samples/{f}"));
    // The driver's Cinder calls ask for microversion 3.0 (the SDK's floor):
    // the samples outside the `v3.x` folders.
    let cinder = |f: &str| load(&dir, &format!("{CINDER}/api-ref/source/v3/samples/{f}"));

    // Resources as the driver makes them: a server with the machine's port.
    let env = env().await;
    let c = class("c", env.spec());
    let created = env
        .driver
        .create_machine(&env.request(&c, machine("samples")))
        .await
        .expect("create");
    let server_id = created.provider_id.rsplit('/').next().unwrap().to_string();
    let port_id = env.fake.ports()[0]["id"].as_str().unwrap().to_string();

    // The token requests the driver sends (`src/direct.rs`, `auth_body`):
    // an application credential, and a password scoped to the project.
    use mcm_fake_openstack::{APP_CRED_ID, APP_CRED_SECRET, DOMAIN, PASSWORD, PROJECT, USERNAME};
    let (token, app_cred_token) = issue(
        &env.fake.auth_url(),
        json!({"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
            "id": APP_CRED_ID, "secret": APP_CRED_SECRET}}}}),
    )
    .await;
    let (_, password_token) = issue(
        &env.fake.auth_url(),
        json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": USERNAME, "password": PASSWORD, "domain": {"name": DOMAIN}}}},
            "scope": {"project": {"name": PROJECT, "domain": {"name": DOMAIN}}}}}),
    )
    .await;
    let project = app_cred_token["token"]["project"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let raw = Raw {
        http: reqwest::Client::new(),
        base: env.fake.base_url(),
        token,
    };
    use reqwest::Method;
    let create_body = json!({"server": {"name": "raw", "flavorRef": env.flavor, "imageRef": env.image, "networks": [{"uuid": env.network}]}});
    let mut pairs: Vec<(Value, Value)> = vec![
        (
            nova("versions/v21-version-get-resp.json"),
            raw.call(Method::GET, "/compute/v2.1/", None).await,
        ),
        (
            nova("servers/server-create-resp.json"),
            raw.call(Method::POST, "/compute/v2.1/servers", Some(create_body))
                .await,
        ),
        (
            nova("servers/server-get-resp.json"),
            raw.call(
                Method::GET,
                &format!("/compute/v2.1/servers/{server_id}"),
                None,
            )
            .await,
        ),
        (
            nova("servers/servers-details-resp.json"),
            raw.call(Method::GET, "/compute/v2.1/servers/detail", None)
                .await,
        ),
        (
            nova("server-metadata/server-metadata-all-resp.json"),
            raw.call(
                Method::POST,
                &format!("/compute/v2.1/servers/{server_id}/metadata"),
                Some(nova("server-metadata/server-metadata-all-req.json")),
            )
            .await,
        ),
        (
            nova("server-metadata/server-metadata-all-resp.json"),
            raw.call(
                Method::PUT,
                &format!("/compute/v2.1/servers/{server_id}/metadata"),
                Some(nova("server-metadata/server-metadata-all-req.json")),
            )
            .await,
        ),
        (
            nova("flavors/flavors-detail-resp.json"),
            raw.call(Method::GET, "/compute/v2.1/flavors/detail", None)
                .await,
        ),
        (
            nova("images/images-details-get-resp.json"),
            raw.call(Method::GET, "/compute/v2.1/images/detail", None)
                .await,
        ),
        (
            neutron("networks/networks-list-response.json"),
            raw.call(Method::GET, "/network/v2.0/networks", None).await,
        ),
        (
            neutron("subnets/subnet-show-response.json"),
            raw.call(
                Method::GET,
                &format!("/network/v2.0/subnets/{}", env.subnet),
                None,
            )
            .await,
        ),
        (
            neutron("security-groups/security-groups-list-response.json"),
            raw.call(Method::GET, "/network/v2.0/security-groups", None)
                .await,
        ),
        (
            neutron("ports/ports-list-response.json"),
            raw.call(Method::GET, "/network/v2.0/ports", None).await,
        ),
        (
            neutron("ports/port-create-response.json"),
            raw.call(
                Method::POST,
                "/network/v2.0/ports",
                Some(json!({"port": {"name": "p", "network_id": env.network}})),
            )
            .await,
        ),
        (
            neutron("ports/port-update-response.json"),
            raw.call(
                Method::PUT,
                &format!("/network/v2.0/ports/{port_id}"),
                Some(json!({"port": {"allowed_address_pairs": [{"ip_address": "10.0.0.0/8"}]}})),
            )
            .await,
        ),
        (
            neutron("tag/tag-update-response.json"),
            raw.call(
                Method::PUT,
                &format!("/network/v2.0/ports/{port_id}/tags"),
                Some(json!({"tags": ["a", "b"]})),
            )
            .await,
        ),
        (
            keystone("admin/auth-application-credential-response.json"),
            app_cred_token,
        ),
        (
            keystone("admin/auth-password-project-scoped-response.json"),
            password_token,
        ),
    ];

    // Cinder, after Nova's samples were held against an image-booted server
    // (Nova answers `"image": ""` for a server booted from a volume): a
    // machine booted from a typed root volume, and a volume created with the
    // body `api::create_volume` sends.
    let mut spec = env.spec();
    spec["spec"]["rootDiskSize"] = json!(20);
    spec["spec"]["rootDiskType"] = json!("ssd");
    let c = class("v", spec);
    let request = env.request(&c, machine("samples-volume"));
    let volume_name = request.machine.metadata.name.clone().unwrap();
    env.driver.create_machine(&request).await.expect("create");
    let volume_id = env.fake.volumes()[0]["id"].as_str().unwrap().to_string();
    let volumes = format!("/volume/v3/{project}/volumes");
    let volume_body = json!({"volume": {"name": "raw", "size": 10, "volume_type": "ssd",
        "imageRef": env.image, "availability_zone": "nova", "metadata": {"k": "v"}}});
    let raw_volume = raw.call(Method::POST, &volumes, Some(volume_body)).await;
    let raw_volume_id = raw_volume["volume"]["id"].as_str().unwrap().to_string();
    let listed = raw
        .call(
            Method::GET,
            &format!("{volumes}/detail?name={volume_name}"),
            None,
        )
        .await;
    // An empty list would hold nothing against the sample.
    assert_eq!(
        listed["volumes"].as_array().map(Vec::len),
        Some(1),
        "the list by name finds the machine's volume"
    );
    pairs.extend([
        (
            cinder("volumes/volumes-list-detailed-response.json"),
            listed,
        ),
        (
            cinder("volumes/volume-show-response.json"),
            raw.call(Method::GET, &format!("{volumes}/{volume_id}"), None)
                .await,
        ),
        (cinder("volumes/volume-create-response.json"), raw_volume),
    ]);
    // Cinder answers a volume delete with 202 and no body.
    assert_eq!(
        raw.bodiless(Method::DELETE, &format!("{volumes}/{raw_volume_id}"))
            .await,
        (202, String::new())
    );
    let mut problems = Vec::new();
    for (i, (sample, fake)) in pairs.iter().enumerate() {
        shape(sample, fake, &format!("answer {i}"), &mut problems);
    }
    assert!(
        problems.is_empty(),
        "the fake differs from the official samples:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_shape_check_reports_missing_keys_and_type_changes() {
    let mut out = Vec::new();
    shape(
        &json!({"a": 1, "b": "x", "c": [{"d": true}], "metadata": {"k": "v"}}),
        &json!({"a": 2, "b": 3, "c": [{"e": true}], "metadata": {"other": "w"}}),
        "r",
        &mut out,
    );
    assert_eq!(
        out,
        vec![
            "r.b: sample has string, fake has number",
            "r.c[0].d: missing"
        ]
    );
}
