//! The fake's own behaviour, over HTTP.

use super::*;
use serde_json::json;

async fn token(fake: &FakeOpenStack, http: &reqwest::Client) -> String {
    let body = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {"name": USERNAME, "domain": {"name": DOMAIN}, "password": PASSWORD}}},
        "scope": {"project": {"name": PROJECT, "domain": {"name": DOMAIN}}}
    }});
    let r = http
        .post(format!("{}/auth/tokens", fake.auth_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    r.headers()["x-subject-token"].to_str().unwrap().to_string()
}

#[tokio::test]
async fn a_wrong_password_is_401_and_calls_without_token_are_401() {
    let fake = FakeOpenStack::start().await.unwrap();
    let http = reqwest::Client::new();
    let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": USERNAME, "domain": {"name": DOMAIN}, "password": "nope"}}}}});
    let r = http
        .post(format!("{}/auth/tokens", fake.auth_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(format!("{}/compute/v2.1/servers/detail", fake.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn an_application_credential_token_names_its_credential_and_a_password_token_none() {
    let fake = FakeOpenStack::start().await.unwrap();
    let http = reqwest::Client::new();
    let issue = |body: serde_json::Value| {
        let r = http
            .post(format!("{}/auth/tokens", fake.auth_url()))
            .json(&body)
            .send();
        async move {
            let r = r.await.unwrap();
            assert_eq!(r.status(), 201);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let by_id = issue(
        json!({"auth": {"identity": {"methods": ["application_credential"],
        "application_credential": {"id": APP_CRED_ID, "secret": APP_CRED_SECRET}}}}),
    )
    .await;
    assert_eq!(
        by_id["token"]["application_credential"],
        json!({"id": APP_CRED_ID, "name": "mcm-app-cred", "restricted": true})
    );
    let by_name = issue(json!({"auth": {"identity": {"methods": ["application_credential"],
        "application_credential": {"name": "ci", "user": {"name": USERNAME, "domain": {"name": DOMAIN}},
            "secret": APP_CRED_SECRET}}}}))
    .await;
    assert_eq!(by_name["token"]["application_credential"]["name"], "ci");
    let password = issue(json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {"name": USERNAME, "domain": {"name": DOMAIN}, "password": PASSWORD}}},
        "scope": {"project": {"name": PROJECT, "domain": {"name": DOMAIN}}}
    }}))
    .await;
    assert!(password["token"].get("application_credential").is_none());
    assert_eq!(password["token"]["methods"], json!(["password"]));
}

#[tokio::test]
async fn a_server_builds_then_is_active_and_its_nova_port_goes_with_it() {
    let fake = FakeOpenStack::start().await.unwrap();
    let http = reqwest::Client::new();
    let t = token(&fake, &http).await;
    let flavor = fake.add_flavor("m1.small");
    let image = fake.add_image("ubuntu");
    let net = fake.add_network("net");
    fake.add_subnet(&net, "sub", "10.0.1.0/24");
    fake.set_build_polls(1);
    let body = json!({"server": {"name": "m-1", "flavorRef": flavor, "imageRef": image, "networks": [{"uuid": net}], "metadata": {"a": "b"}}});
    let r = http
        .post(format!("{}/compute/v2.1/servers", fake.base_url()))
        .header("x-auth-token", &t)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let id = r.json::<Value>().await.unwrap()["server"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let get = || async {
        http.get(format!("{}/compute/v2.1/servers/{id}", fake.base_url()))
            .header("x-auth-token", &t)
            .send()
            .await
            .unwrap()
    };
    assert_eq!(
        get().await.json::<Value>().await.unwrap()["server"]["status"],
        "BUILD"
    );
    let active = get().await.json::<Value>().await.unwrap();
    assert_eq!(active["server"]["status"], "ACTIVE");
    assert_eq!(active["server"]["addresses"]["net"][0]["version"], 4);
    assert_eq!(fake.ports().len(), 1);
    let r = http
        .delete(format!("{}/compute/v2.1/servers/{id}", fake.base_url()))
        .header("x-auth-token", &t)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(get().await.status(), 404);
    assert!(fake.ports().is_empty());
}

#[tokio::test]
async fn an_injected_fault_fails_exactly_the_given_number_of_calls() {
    let fake = FakeOpenStack::start().await.unwrap();
    let http = reqwest::Client::new();
    let t = token(&fake, &http).await;
    fake.inject(Op::ListFlavors, Fault::new(500, "boom", 1));
    let url = format!("{}/compute/v2.1/flavors/detail", fake.base_url());
    let r = http
        .get(&url)
        .header("x-auth-token", &t)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.json::<Value>().await.unwrap()["computeFault"]["message"],
        "boom"
    );
    let r = http
        .get(&url)
        .header("x-auth-token", &t)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(fake.calls()["nova.flavors.list"], 2);
}
