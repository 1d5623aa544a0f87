//! MachineClasses and their Secrets: finalizers, the merged secret, bootstrap
//! tokens, and the class controller that releases classes no machine uses.

use crate::caches::{Caches, Change};
use crate::keys::{Kind, ObjectKey};
use crate::routing::{error_policy, key_of, Route};
use crate::{is_conflict, is_not_found};
use crate::{Context, Error};
use chrono::Utc;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt};
use mcm_api::constants as c;
use mcm_api::{Machine, MachineClass};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info};

pub(crate) mod spec_warnings;

/// Adds a finalizer; a conflict (someone else wrote first) is retried by the next reconcile.
async fn add_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match crate::metadata::finalizer::add(api, obj, finalizer).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Ok(()),
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
            // Never follow a reference out of the class's namespace (validation
            // rejects such classes; this keeps the guarantee if it is bypassed).
            match r.namespace.as_deref() {
                Some(other) if !other.is_empty() && other != ns => None,
                _ => Some((ns.clone(), name)),
            }
        })
        .collect()
}

/// Adds the MCM finalizer to a class and the secret finalizer to its Secrets
/// (read from the caches; only a missing finalizer costs a write).
pub(crate) async fn ensure_class_finalizer(
    ctx: &Context,
    class: &MachineClass,
) -> Result<(), Error> {
    let api: Api<MachineClass> =
        Api::namespaced(ctx.client.clone(), &class.namespace().unwrap_or_default());
    add_finalizer(&api, class, c::MCM_FINALIZER).await?;
    for (ns, name) in secret_refs(class) {
        if let Some(s) = ctx.caches.secret(&ns, &name) {
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            add_finalizer(&secrets, &*s, c::MC_SECRET_FINALIZER).await?;
        }
    }
    Ok(())
}

/// The data of the class's `secretRef` then `credentialsSecretRef` merged
/// (later keys win), from the Secret cache. `Err(name)` names a referenced
/// Secret that does not exist.
pub(crate) fn merged_secret(caches: &Caches, class: &MachineClass) -> Result<Secret, String> {
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    for (ns, name) in secret_refs(class) {
        match caches.secret(&ns, &name) {
            Some(s) => data.extend(s.data.clone().unwrap_or_default()),
            None => return Err(format!("{ns}/{name}")),
        }
    }
    Ok(Secret {
        data: Some(data),
        ..Default::default()
    })
}

/// The annotation on a bootstrap-token Secret naming the UID of the machine it
/// was made for: only a Secret carrying this machine's UID is reused or deleted.
pub const BOOTSTRAP_TOKEN_OWNER_ANNOTATION: &str =
    "machine.sapcloud.io/mcm-rs-bootstrap-token-owner";

/// How many token IDs a machine may try when the first ones are taken by
/// Secrets that are not its own.
const TOKEN_ID_CANDIDATES: u32 = 4;

/// The name of the machine's `attempt`-th candidate bootstrap-token Secret
/// (`bootstrap-token-<id>`; stable for a machine, so a retry finds its token).
pub fn bootstrap_token_secret_name(m: &Machine, attempt: u32) -> String {
    let uid = m.uid().unwrap_or_default();
    let salted = if attempt == 0 {
        uid
    } else {
        format!("{uid}/{attempt}")
    };
    let id = mcm_core::machine::bootstrap_token_id(&m.name_any(), &salted);
    format!("bootstrap-token-{id}")
}

/// Whether a bootstrap-token Secret was made for this machine.
fn owned_by(secret: &Secret, m: &Machine) -> bool {
    let uid = m.uid().unwrap_or_default();
    !uid.is_empty()
        && secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BOOTSTRAP_TOKEN_OWNER_ANNOTATION))
            .is_some_and(|owner| *owner == uid)
}

/// Deletes a Secret only if it is still the one read (UID precondition). NotFound and a changed Secret are fine.
async fn delete_exact(api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: secret.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&secret.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates (or reuses) the machine's bootstrap token in the target cluster and
/// returns `<id>.<secret>`.
///
/// Only a Secret carrying this machine's UID in
/// [`BOOTSTRAP_TOKEN_OWNER_ANNOTATION`] is reused (while unexpired) or
/// replaced (when expired); a Secret of the same name that is not the
/// machine's is left alone and the machine's next candidate ID is used.
pub async fn bootstrap_token(
    target: &Client,
    m: &Machine,
    valid_for: Duration,
    extra_groups: &str,
) -> Result<IssuedToken, Error> {
    let api: Api<Secret> = Api::namespaced(target.clone(), "kube-system");
    for attempt in 0..TOKEN_ID_CANDIDATES {
        let name = bootstrap_token_secret_name(m, attempt);
        if let Some((token, uid)) = token_at(&api, m, &name, valid_for, extra_groups).await? {
            return Ok(IssuedToken {
                token,
                secret: TokenSecret { name, uid },
            });
        }
        debug!(machine = %m.name_any(), namespace = %m.namespace().unwrap_or_default(), secret = %name,
               "a bootstrap token of this name belongs to something else; trying the next ID");
    }
    Err(Error::Config(format!(
        "no free bootstrap token ID for machine {}: the Secrets of all {TOKEN_ID_CANDIDATES} candidates belong to others",
        m.name_any()
    )))
}

/// A bootstrap token handed to a machine's userData, and the Secret holding it.
pub struct IssuedToken {
    /// `<id>.<secret>`.
    pub token: String,
    /// The Secret.
    pub secret: TokenSecret,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("token", &"<redacted>")
            .field("secret", &self.secret)
            .finish()
    }
}

/// The kube-system Secret of a machine's bootstrap token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSecret {
    /// Its name.
    pub name: String,
    /// Its UID (empty when the API server did not say).
    pub uid: String,
}

/// Deletes the Secret `secret` of a token this process issued, by name under
/// its UID (no read first: the UID says it is the one made for the
/// machine). NotFound and a changed Secret are fine.
pub async fn delete_issued_token(target: &Client, secret: &TokenSecret) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(target.clone(), "kube-system");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(secret.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&secret.name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The machine's token in Secret `name` (and the Secret's UID), made if
/// needed; `None` when that Secret belongs to something else.
///
/// The common case costs one request: the Secret is created; only when the
/// name is taken (a retry, a collision) is the existing one read.
async fn token_at(
    api: &Api<Secret>,
    m: &Machine,
    name: &str,
    valid_for: Duration,
    extra_groups: &str,
) -> Result<Option<(String, String)>, Error> {
    let id = name.trim_start_matches("bootstrap-token-").to_string();
    // Gardener grants create, delete, get and list on kube-system Secrets, not
    // patch: an unexpired token is reused as it is, an expired one replaced.
    for _ in 0..2 {
        let (secret, token) = token_secret(m, name, &id, valid_for, extra_groups);
        match api.create(&PostParams::default(), &secret).await {
            Ok(made) => return Ok(Some((token, made.uid().unwrap_or_default()))),
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
        // Taken: this machine's (reuse it, or replace it when expired), or
        // someone else's (the caller tries the next candidate name).
        let Some(existing) = api.get_opt(name).await? else {
            continue; // deleted meanwhile: create again
        };
        if !owned_by(&existing, m) {
            return Ok(None);
        }
        if let Some(token) = unexpired_token(&existing, &id) {
            return Ok(Some((token, existing.uid().unwrap_or_default())));
        }
        delete_exact(api, &existing).await?;
    }
    Err(Error::Config(format!(
        "bootstrap token {name} exists but is unusable"
    )))
}

/// A new bootstrap-token Secret for the machine and its `<id>.<secret>`.
fn token_secret(
    m: &Machine,
    name: &str,
    id: &str,
    valid_for: Duration,
    extra_groups: &str,
) -> (Secret, String) {
    let expiration = (Utc::now() + chrono::Duration::from_std(valid_for).unwrap_or_default())
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
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
        ("token-id".to_string(), id.to_string()),
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
    let uid = m.uid().unwrap_or_default();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("kube-system".into()),
            annotations: Some(BTreeMap::from([(
                BOOTSTRAP_TOKEN_OWNER_ANNOTATION.to_string(),
                uid,
            )])),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(string_data),
        ..Default::default()
    };
    (secret, format!("{id}.{token_secret}"))
}

/// `<id>.<secret>` of a bootstrap-token Secret that is valid for at least another minute.
fn unexpired_token(secret: &Secret, id: &str) -> Option<String> {
    let data = secret.data.clone().unwrap_or_default();
    let token = data.get("token-secret")?;
    let expiration = data.get("expiration")?;
    let expires =
        chrono::DateTime::parse_from_rfc3339(&String::from_utf8_lossy(&expiration.0)).ok()?;
    (expires.with_timezone(&Utc) > Utc::now() + chrono::Duration::minutes(1))
        .then(|| format!("{id}.{}", String::from_utf8_lossy(&token.0)))
}

/// Deletes the machine's bootstrap token (after it joined): only a Secret
/// carrying its UID in [`BOOTSTRAP_TOKEN_OWNER_ANNOTATION`]. None is fine.
///
/// The candidate names are tried in the order creation tried them: a later
/// candidate was only used when an earlier name was taken by someone else,
/// so the walk stops at the first name that is free or the machine's (the
/// common case: one GET and one DELETE, no LIST of kube-system Secrets).
pub async fn delete_bootstrap_token(target: &Client, m: &Machine) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(target.clone(), "kube-system");
    for attempt in 0..TOKEN_ID_CANDIDATES {
        let name = bootstrap_token_secret_name(m, attempt);
        match api.get_opt(&name).await? {
            Some(secret) if owned_by(&secret, m) => return delete_exact(&api, &secret).await,
            Some(_) => debug!(machine = %m.name_any(), secret = %name,
                              "not deleting a bootstrap token that is not this machine's"),
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The class controller: a class (and its Secrets) keeps its finalizer while
/// any machine uses it; a deleted class with no machines is released. Reads
/// classes, machines and Secrets from the process's shared caches.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let caches = ctx.caches.clone();
    let ns = ctx.config.namespace.clone();
    let route = Route::new(&ctx, (*caches.classes).clone());
    let own = route.own(caches.classes.subscribe(), route.applied_or_all());
    let machine_events = route.mapped(caches.machines.subscribe(), move |change| match change {
        Change::Applied(m) | Change::Deleted(m) => {
            vec![ObjectKey::new(Kind::MachineClass, &ns, &m.spec.class.name)]
        }
        Change::Listed => Vec::new(),
    });
    let shutdown = shutdown.boxed().shared();
    tokio::select! {
        _ = async {
            caches.classes.synced().await;
            caches.machines.synced().await;
            caches.secrets.synced().await;
        } => {},
        _ = shutdown.clone() => return,
    }
    let concurrency = ctx.config.concurrent_syncs;
    route
        .controller(own, concurrency)
        .reconcile_on(machine_events)
        .graceful_shutdown_on(shutdown)
        .run(reconcile_class, error_policy::<MachineClass>, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile_class(class: Arc<MachineClass>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&*class);
    let _work = ctx.workqueues.work_on("machineclass", &key);
    let action = keep_or_release(&class, &ctx).await?;
    ctx.reset_backoff(&key);
    Ok(action)
}

/// Keeps the finalizer of a class in use; releases a deleted class no
/// machine uses (and its Secrets no other class uses).
async fn keep_or_release(class: &MachineClass, ctx: &Context) -> Result<Action, Error> {
    let ns = class.namespace().unwrap_or_default();
    let name = class.name_any();
    let users = ctx
        .caches
        .machines
        .state()
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(ns.as_str()) && m.spec.class.name == name)
        .count();
    let api: Api<MachineClass> = Api::namespaced(ctx.client.clone(), &ns);
    if class.meta().deletion_timestamp.is_none() {
        spec_warnings::report(ctx, class).await;
        if users > 0 {
            ensure_class_finalizer(ctx, class).await?;
        }
        return Ok(Action::requeue(Duration::from_secs(600)));
    }
    if users > 0 {
        debug!(class = %name, users, "class is being deleted but still used by machines");
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    // Release the secrets no other class uses, then the class.
    let others: Vec<Arc<MachineClass>> = ctx
        .caches
        .classes
        .state()
        .into_iter()
        .filter(|c| c.name_any() != name && c.meta().deletion_timestamp.is_none())
        .collect();
    for (sns, sname) in secret_refs(class) {
        let used = others
            .iter()
            .any(|o| secret_refs(o).contains(&(sns.clone(), sname.clone())));
        if !used {
            if let Some(s) = ctx.caches.secret(&sns, &sname) {
                let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &sns);
                crate::metadata::finalizer::remove(&secrets, &*s, c::MC_SECRET_FINALIZER).await?;
            }
        }
    }
    crate::metadata::finalizer::remove(&api, class, c::MCM_FINALIZER).await?;
    info!(class = %name, "released deleted MachineClass");
    Ok(Action::await_change())
}
