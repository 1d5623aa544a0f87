//! Keystone and the APIs behind mutual TLS: the fake served over TLS, and
//! refusing any connection without a client certificate its CA signed. The
//! Secret's `clientCert`/`clientKey` (with `caCert` for the server) make
//! every call work; without them, or with a certificate of another CA, the
//! handshake is refused and the driver says so.

use crate::common;

use common::{class, machine, secret_with, seeded, Env, USER_DATA};
use mcm_driver::{Code, Driver, ListMachinesRequest};
use mcm_fake_openstack::{tls, FakeOpenStack};

async fn tls_env() -> Env {
    seeded(FakeOpenStack::start_tls().await.expect("TLS fake starts"))
}

fn secret(env: &Env, cert: Option<(&str, &str)>) -> k8s_openapi::api::core::v1::Secret {
    let auth_url = env.fake.auth_url();
    let mut pairs = vec![
        ("authURL", auth_url.as_str()),
        ("username", mcm_fake_openstack::USERNAME),
        ("password", mcm_fake_openstack::PASSWORD),
        ("domainName", mcm_fake_openstack::DOMAIN),
        ("tenantName", mcm_fake_openstack::PROJECT),
        ("caCert", tls::CA),
        ("userData", USER_DATA),
    ];
    if let Some((c, k)) = cert {
        pairs.push(("clientCert", c));
        pairs.push(("clientKey", k));
    }
    secret_with(&pairs)
}

#[tokio::test]
async fn every_call_presents_the_secrets_client_certificate() {
    let env = tls_env().await;
    assert!(env.fake.auth_url().starts_with("https://"));
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("mtls"));
    req.secret = secret(&env, Some((tls::CLIENT_CERT, tls::CLIENT_KEY)));
    let created = env.driver.create_machine(&req).await.expect("create");
    req.machine.spec.provider_id = created.provider_id.clone();
    let status = env.driver.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    let listed = env
        .driver
        .list_machines(&ListMachinesRequest {
            machine_class: c.clone(),
            secret: req.secret.clone(),
        })
        .await
        .expect("list");
    assert!(listed.machine_list.contains_key(&created.provider_id));
    env.driver.delete_machine(&req).await.expect("delete");
    assert!(env.fake.servers().is_empty());
    assert!(env.fake.ports().is_empty(), "{:?}", env.fake.ports());
    assert_eq!(env.fake.refused_handshakes(), 0);
    let calls = env.fake.calls();
    assert!(calls.contains_key("nova.servers.create"), "{calls:?}");
}

#[tokio::test]
async fn the_conformance_kit_passes_over_mutual_tls() {
    use mcm_driver::conformance::{run_all, Fixture};
    let env = tls_env().await;
    let other_net = env.fake.add_network("other-net");
    let other_subnet = env
        .fake
        .add_subnet(&other_net, "other-subnet", "10.251.0.0/24");
    let fixture = Fixture {
        class: class("mine", env.spec()),
        other_class: class(
            "theirs",
            common::spec_for(&other_net, &other_subnet, "kubernetes.io-cluster-other"),
        ),
        secret: secret(&env, Some((tls::CLIENT_CERT, tls::CLIENT_KEY))),
        new_machine: Box::new(|_| machine("conf")),
        invalid_classes: vec![],
    };
    let failures = run_all(&env.driver, &fixture).await;
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(env.fake.servers().is_empty(), "{:?}", env.fake.servers());
    assert_eq!(env.fake.refused_handshakes(), 0);
}

#[tokio::test]
async fn a_typed_root_volume_works_over_mutual_tls_too() {
    let env = tls_env().await;
    let mut spec = env.spec();
    spec["spec"]["rootDiskSize"] = serde_json::json!(20);
    spec["spec"]["rootDiskType"] = serde_json::json!("ssd");
    let c = class("c", spec);
    let mut req = env.request(&c, machine("mtlsvol"));
    req.secret = secret(&env, Some((tls::CLIENT_CERT, tls::CLIENT_KEY)));
    let created = env.driver.create_machine(&req).await.expect("create");
    assert_eq!(env.fake.volumes().len(), 1);
    req.machine.spec.provider_id = created.provider_id;
    env.driver.delete_machine(&req).await.expect("delete");
    assert!(env.fake.volumes().is_empty());
}

#[tokio::test]
async fn without_a_client_certificate_the_handshake_is_refused() {
    let env = tls_env().await;
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("nocert"));
    req.secret = secret(&env, None);
    let err = env.driver.create_machine(&req).await.expect_err("refused");
    assert_eq!(err.code, Code::Unavailable, "{err:?}");
    assert!(env.fake.refused_handshakes() > 0);
    assert!(env.fake.servers().is_empty());
}

#[tokio::test]
async fn a_client_certificate_of_another_ca_is_refused() {
    let env = tls_env().await;
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("stranger"));
    req.secret = secret(&env, Some((tls::STRANGER_CERT, tls::STRANGER_KEY)));
    let err = env.driver.create_machine(&req).await.expect_err("refused");
    assert_eq!(err.code, Code::Unavailable, "{err:?}");
    assert!(env.fake.refused_handshakes() > 0);
    assert!(env.fake.servers().is_empty());
}

#[tokio::test]
async fn a_client_key_that_is_not_pem_is_invalid_argument_and_not_echoed() {
    let env = tls_env().await;
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("badkey"));
    req.secret = secret(&env, Some((tls::CLIENT_CERT, "not-a-key-s3cr3t")));
    let err = env.driver.create_machine(&req).await.expect_err("invalid");
    assert_eq!(err.code, Code::InvalidArgument, "{err:?}");
    assert!(!err.message.contains("s3cr3t"), "{err:?}");
    assert!(!err.message.contains("PRIVATE KEY"), "{err:?}");
}

#[tokio::test]
async fn a_revoked_token_is_replaced_once_and_the_call_succeeds() {
    let env = tls_env().await;
    let c = class("c", env.spec());
    let mut req = env.request(&c, machine("reauth"));
    req.secret = secret(&env, Some((tls::CLIENT_CERT, tls::CLIENT_KEY)));
    let created = env.driver.create_machine(&req).await.expect("create");
    req.machine.spec.provider_id = created.provider_id.clone();
    let tokens = |env: &Env| env.fake.calls().get("keystone.tokens.create").copied();
    assert_eq!(tokens(&env), Some(1));
    env.fake.revoke_tokens();
    let status = env.driver.get_machine_status(&req).await.expect("status");
    assert_eq!(status.provider_id, created.provider_id);
    assert_eq!(tokens(&env), Some(2), "one new token after the 401");
    env.driver.delete_machine(&req).await.expect("delete");
}
