//! MachineClasses and their Secrets: finalizers, the merged secret, bootstrap
//! tokens, and the class controller that releases classes no machine uses.

use crate::Error;
use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info};

async fn add_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let mut f = obj.finalizers().to_vec();
    f.push(finalizer.into());
    let patch = json!({"metadata": {"finalizers": f, "resourceVersion": obj.resource_version()}});
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if !obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(());
    }
    let f: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|x| *x != finalizer)
        .cloned()
        .collect();
    let patch = json!({"metadata": {"finalizers": f, "resourceVersion": obj.resource_version()}});
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn secret_refs(class: &MachineClass) -> Vec<(String, String)> {
    let ns = class.namespace().unwrap_or_default();
    [&class.secret_ref, &class.credentials_secret_ref]
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let name = r.name.clone().filter(|n| !n.is_empty())?;
            Some((
                r.namespace
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| ns.clone()),
                name,
            ))
        })
        .collect()
}

/// Adds the MCM finalizer to a class and the secret finalizer to its Secrets.
pub async fn ensure_class_finalizer(client: &Client, class: &MachineClass) -> Result<(), Error> {
    let api: Api<MachineClass> =
        Api::namespaced(client.clone(), &class.namespace().unwrap_or_default());
    add_finalizer(&api, class, c::MCM_FINALIZER).await?;
    for (ns, name) in secret_refs(class) {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        if let Some(s) = secrets.get_opt(&name).await? {
            add_finalizer(&secrets, &s, c::MC_SECRET_FINALIZER).await?;
        }
    }
    Ok(())
}

/// The data of the class's `secretRef` then `credentialsSecretRef` merged (later
/// keys win). `Err(name)` names a referenced Secret that does not exist.
pub async fn merged_secret(
    client: &Client,
    class: &MachineClass,
) -> Result<Result<Secret, String>, Error> {
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    for (ns, name) in secret_refs(class) {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        match secrets.get_opt(&name).await? {
            Some(s) => data.extend(s.data.unwrap_or_default()),
            None => return Ok(Err(format!("{ns}/{name}"))),
        }
    }
    Ok(Ok(Secret {
        data: Some(data),
        ..Default::default()
    }))
}

fn token_secret_name(m: &Machine) -> String {
    let id = mcm_core::machine::bootstrap_token_id(&m.name_any(), &m.uid().unwrap_or_default());
    format!("bootstrap-token-{id}")
}

/// Creates (or reuses) the machine's bootstrap token in the target cluster and
/// returns `<id>.<secret>`. A reused token's expiration is refreshed.
pub async fn bootstrap_token(
    target: &Client,
    m: &Machine,
    valid_for: Duration,
    extra_groups: &str,
) -> Result<String, Error> {
    let api: Api<Secret> = Api::namespaced(target.clone(), "kube-system");
    let name = token_secret_name(m);
    let id = name.trim_start_matches("bootstrap-token-").to_string();
    let expiration = (Utc::now() + chrono::Duration::from_std(valid_for).unwrap_or_default())
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if let Some(existing) = api.get_opt(&name).await? {
        let data = existing.data.unwrap_or_default();
        if let Some(secret) = data.get("token-secret") {
            let patch = json!({"stringData": {"expiration": expiration}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(format!("{id}.{}", String::from_utf8_lossy(&secret.0)));
        }
    }
    let token_secret: String = {
        use rand::Rng;
        const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut rng = rand::rng();
        (0..16)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect()
    };
    let mut string_data = BTreeMap::from([
        (
            "description".to_string(),
            format!(
                "A bootstrap token for machine {} generated by MachineControllerManager.",
                m.name_any()
            ),
        ),
        ("token-id".to_string(), id.clone()),
        ("token-secret".to_string(), token_secret.clone()),
        ("expiration".to_string(), expiration),
        (
            "usage-bootstrap-authentication".to_string(),
            "true".to_string(),
        ),
        ("usage-bootstrap-signing".to_string(), "true".to_string()),
    ]);
    if !extra_groups.is_empty() {
        string_data.insert("auth-extra-groups".into(), extra_groups.into());
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(string_data),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(format!("{id}.{token_secret}"))
}

/// Deletes the machine's bootstrap token (after it joined). NotFound is fine.
pub async fn delete_bootstrap_token(target: &Client, m: &Machine) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(target.clone(), "kube-system");
    match api.delete(&token_secret_name(m), &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The class controller: a class (and its Secrets) keeps its finalizer while
/// any machine uses it; a deleted class with no machines is released.
pub async fn run(
    client: Client,
    namespace: String,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let classes: Api<MachineClass> = Api::namespaced(client.clone(), &namespace);
    let machines: Api<Machine> = Api::namespaced(client.clone(), &namespace);
    Controller::new(classes, watcher::Config::default())
        .watches(machines, watcher::Config::default(), |m: Machine| {
            let ns = m.namespace().unwrap_or_default();
            Some(kube::runtime::reflector::ObjectRef::new(&m.spec.class.name).within(&ns))
        })
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile_class,
            |_, _, _| Action::requeue(Duration::from_secs(5)),
            Arc::new(client),
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile_class(class: Arc<MachineClass>, client: Arc<Client>) -> Result<Action, Error> {
    let ns = class.namespace().unwrap_or_default();
    let name = class.name_any();
    let machines: Api<Machine> = Api::namespaced((*client).clone(), &ns);
    let users = machines
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|m| m.spec.class.name == name)
        .count();
    let api: Api<MachineClass> = Api::namespaced((*client).clone(), &ns);
    if class.meta().deletion_timestamp.is_none() {
        if users > 0 {
            ensure_class_finalizer(&client, &class).await?;
        }
        return Ok(Action::requeue(Duration::from_secs(600)));
    }
    if users > 0 {
        debug!(class = %name, users, "class is being deleted but still used by machines");
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    // Release the secrets no other class uses, then the class.
    let others: Vec<MachineClass> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.name_any() != name && c.meta().deletion_timestamp.is_none())
        .collect();
    for (sns, sname) in secret_refs(&class) {
        let used = others
            .iter()
            .any(|o| secret_refs(o).contains(&(sns.clone(), sname.clone())));
        if !used {
            let secrets: Api<Secret> = Api::namespaced((*client).clone(), &sns);
            if let Some(s) = secrets.get_opt(&sname).await? {
                remove_finalizer(&secrets, &s, c::MC_SECRET_FINALIZER).await?;
            }
        }
    }
    remove_finalizer(&api, &class, c::MCM_FINALIZER).await?;
    info!(class = %name, "released deleted MachineClass");
    Ok(Action::await_change())
}
