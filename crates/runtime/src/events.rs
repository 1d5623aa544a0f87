//! Events in `core/v1` (not `events.k8s.io`), as the reference's
//! client-go recorder writes them and as Gardener's RBAC grants them: the
//! `source.component` is the reporting controller's name, a repeated event
//! (same object, type, reason and message) increments `count` and
//! `lastTimestamp` of the first one instead of creating another object, and a
//! failure to write an event is a warning in the log, never an error of the
//! reconcile.
//!
//! [`Recorder`] has the interface of `kube::runtime::events::Recorder`
//! (`new(client, reporter)`, `publish(&event, &reference)`), so a call site
//! switches by its import.

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::Client;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tracing::warn;

/// How many distinct events a recorder remembers for aggregation.
const CACHE_LIMIT: usize = 4096;

#[derive(Clone, Hash, PartialEq, Eq)]
struct Key {
    uid: String,
    namespace: String,
    name: String,
    type_: String,
    reason: String,
    message: String,
}

#[derive(Clone)]
struct Seen {
    event_name: String,
    count: i32,
}

/// Writes core/v1 Events for one reporting component.
#[derive(Clone)]
pub(crate) struct Recorder {
    client: Client,
    reporter: Reporter,
    seen: Arc<Mutex<HashMap<Key, Seen>>>,
}

impl Recorder {
    /// A recorder whose events carry `reporter.controller` as `source.component`
    /// and `reporter.instance` (e.g. the pod name) as `source.host`.
    pub(crate) fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            seen: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The one way the controllers publish an Event about `obj`: the note is
    /// cut to 1000 characters, `action` names what the controller was doing.
    /// Returns whether it was written; a failure is logged (never fails a
    /// reconcile).
    pub(crate) async fn note<K: kube::Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: kube::runtime::events::EventType,
        reason: &str,
        note: String,
        action: &str,
    ) -> bool {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: action.to_string(),
            secondary: None,
        };
        self.publish(&ev, &obj.object_ref(&())).await.is_ok()
    }

    /// Publishes `ev` about the object `reference`. Errors are logged as
    /// warnings and also returned, for call sites that want them.
    pub(crate) async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let r = self.write(ev, reference).await;
        if let Err(e) = &r {
            warn!(
                error = %e,
                reason = %ev.reason,
                kind = reference.kind.as_deref().unwrap_or_default(),
                name = reference.name.as_deref().unwrap_or_default(),
                namespace = reference.namespace.as_deref().unwrap_or_default(),
                "could not write the event"
            );
        }
        r
    }

    async fn write(&self, ev: &Event, reference: &ObjectReference) -> Result<(), kube::Error> {
        let namespace = reference
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let type_ = match ev.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let message = ev.note.clone().unwrap_or_default();
        let key = Key {
            uid: reference.uid.clone().unwrap_or_default(),
            namespace: namespace.clone(),
            name: reference.name.clone().unwrap_or_default(),
            type_: type_.to_string(),
            reason: ev.reason.clone(),
            message: message.clone(),
        };
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), &namespace);
        let now = Timestamp::now();
        let previous = self.seen.lock().ok().and_then(|s| s.get(&key).cloned());
        if let Some(prev) = previous {
            let count = prev.count.saturating_add(1);
            let patch = json!({"count": count, "lastTimestamp": Time(now)});
            match api
                .patch(
                    &prev.event_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.remember(key, prev.event_name, count);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let base = reference.name.clone().unwrap_or_else(|| "object".into());
        let event_name = format!("{base}.{:x}", now.as_nanosecond());
        let event = CoreEvent {
            metadata: ObjectMeta {
                name: Some(event_name.clone()),
                namespace: Some(namespace),
                ..Default::default()
            },
            involved_object: reference.clone(),
            reason: Some(ev.reason.clone()),
            message: Some(message),
            type_: Some(type_.to_string()),
            source: Some(EventSource {
                component: Some(self.reporter.controller.clone()),
                host: self.reporter.instance.clone(),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            event_time: None::<MicroTime>,
            reporting_component: Some(self.reporter.controller.clone()),
            reporting_instance: self.reporter.instance.clone(),
            action: Some(ev.action.clone()).filter(|a| !a.is_empty()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &event).await?;
        self.remember(key, event_name, 1);
        Ok(())
    }

    fn remember(&self, key: Key, event_name: String, count: i32) {
        if let Ok(mut seen) = self.seen.lock() {
            if seen.len() >= CACHE_LIMIT && !seen.contains_key(&key) {
                seen.clear();
            }
            seen.insert(key, Seen { event_name, count });
        }
    }
}
