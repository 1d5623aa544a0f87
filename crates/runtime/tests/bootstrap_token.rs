//! Bootstrap tokens are reused and deleted only when they carry this
//! machine's ownership marker: a Secret of the same name that belongs to
//! something else is neither handed out nor deleted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test fails by panicking

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use mcm_api::{Machine, MachineSpec};
use mcm_runtime::class::{
    bootstrap_token, bootstrap_token_secret_name, delete_bootstrap_token, delete_issued_token,
    TokenSecret, BOOTSTRAP_TOKEN_OWNER_ANNOTATION,
};
use mcm_testenv::TestEnv;
use std::collections::BTreeMap;
use std::time::Duration;

fn machine(uid: &str) -> Machine {
    let suffix = format!("{:08x}", rand::random::<u32>());
    let mut m = Machine::new(&format!("bt-{suffix}"), MachineSpec::default());
    m.metadata.namespace = Some("default".into());
    m.metadata.uid = Some(format!("{uid}-{suffix}"));
    m
}

/// A bootstrap-token Secret that is not any machine's (e.g. made by hand or by another controller).
fn foreign(name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(BTreeMap::from([
            (
                "token-id".to_string(),
                name.trim_start_matches("bootstrap-token-").to_string(),
            ),
            ("token-secret".to_string(), "foreignsecret000".to_string()),
            ("expiration".to_string(), "2999-01-01T00:00:00Z".to_string()),
        ])),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_token_secret_that_is_not_the_machines_is_neither_reused_nor_deleted() {
    let Some(env) = TestEnv::new("bootstrap-token").await else {
        return;
    };
    let api: Api<Secret> = Api::namespaced(env.client.clone(), "kube-system");
    let m = machine("uid-a");
    let taken = bootstrap_token_secret_name(&m, 0);
    let planted = api
        .create(&PostParams::default(), &foreign(&taken))
        .await
        .expect("a foreign Secret under the machine's first token name");

    let issued = bootstrap_token(&env.client, &m, Duration::from_secs(600), "")
        .await
        .expect("a token");
    let token = issued.token.clone();
    assert!(
        !token.contains("foreignsecret000"),
        "the foreign Secret's token is not handed out: {token}"
    );
    let own = bootstrap_token_secret_name(&m, 1);
    assert!(
        token.starts_with(&format!("{}.", own.trim_start_matches("bootstrap-token-"))),
        "{token}"
    );
    let made = api.get(&own).await.expect("the machine's own token Secret");
    assert_eq!(issued.secret.name, own, "the issued Secret is named");
    assert_eq!(
        issued.secret.uid,
        made.uid().unwrap_or_default(),
        "with its UID"
    );
    assert_eq!(
        made.metadata
            .annotations
            .unwrap_or_default()
            .get(BOOTSTRAP_TOKEN_OWNER_ANNOTATION),
        m.metadata.uid.as_ref(),
        "it carries the machine's UID"
    );
    // A retry reuses the machine's own token.
    let again = bootstrap_token(&env.client, &m, Duration::from_secs(600), "")
        .await
        .expect("the token again");
    assert_eq!(again.token, token);
    assert_eq!(again.secret, issued.secret);

    // After the join only the machine's own Secret is deleted: by name and
    // UID when this process issued it (no read), and a Secret re-made under
    // that name meanwhile is not touched.
    let stranger = TokenSecret {
        name: own.clone(),
        uid: "not-the-secrets-uid".into(),
    };
    delete_issued_token(&env.client, &stranger)
        .await
        .expect("a changed Secret is fine");
    assert!(
        api.get_opt(&own).await.expect("get").is_some(),
        "a UID that is not the Secret's deletes nothing"
    );
    delete_issued_token(&env.client, &issued.secret)
        .await
        .expect("delete");
    assert!(
        api.get_opt(&own).await.expect("get").is_none(),
        "its own token is gone"
    );
    // The look-up path (a token issued by another process) finds nothing left.
    delete_bootstrap_token(&env.client, &m)
        .await
        .expect("delete");
    assert!(
        api.get_opt(&own).await.expect("get").is_none(),
        "its own token is gone"
    );
    let kept = api
        .get_opt(&taken)
        .await
        .expect("get")
        .expect("the foreign Secret stays");
    assert_eq!(kept.metadata.uid, planted.metadata.uid);

    let _ = api.delete(&taken, &DeleteParams::default()).await;
}
