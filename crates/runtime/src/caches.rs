//! One watch per kind for the whole process, shared by every controller
//! (design: docs/design/runtime.md, "Shared caches").
//!
//! A [`Shared`] cache is one watch of one kind feeding one reflector store.
//! Every controller that needs the kind reads the store and subscribes to its
//! changes; none opens a watch of its own. [`Caches`] holds the caches of one
//! process: Machines, MachineSets, MachineDeployments, MachineClasses and
//! Secrets of the control namespace, and the target cluster's Nodes.
//!
//! Why not kube-runtime's `store_shared` streams: they deliver only applied
//! objects (the set controllers need deletions and the end of a re-list), and
//! a subscriber that is not polled (a half that does not lead) holds up every
//! other one. Here each subscriber gets its own unbounded channel, a late
//! subscriber is told to look at the whole store, and a dropped subscriber is
//! forgotten at the next change.
//!
//! A watch starts when the first controller that needs it starts (while this
//! replica leads: a standby opens no watch) and runs until the caches are
//! dropped.
//!
//! Memory: every object is trimmed before it is stored ([`Trim`]): no
//! `managedFields` (no controller reads them, and a write never sends them
//! back, so the API server keeps its own), and a Node without its
//! `status.images` list. The change handed to subscribers is the store's own
//! `Arc`, not a second copy (design: runtime.md, "Shared caches").

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use mcm_api::{Machine, MachineClass, MachineDeployment, MachineSet};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tracing::{debug, warn};

/// A change a subscriber is told about.
#[derive(Debug)]
pub(crate) enum Change<K> {
    /// The object was created or changed (also every object of a re-list).
    Applied(Arc<K>),
    /// The object is gone.
    Deleted(Arc<K>),
    /// A full list completed (or the subscriber joined after one): anything
    /// may have changed, look at the whole store.
    Listed,
}

/// The subscribers of one cache.
struct Hub<K> {
    subscribers: Mutex<Vec<UnboundedSender<Change<K>>>>,
}

impl<K> Hub<K> {
    fn send(&self, make: impl Fn() -> Change<K>) {
        if let Ok(mut subs) = self.subscribers.lock() {
            subs.retain(|s| s.unbounded_send(make()).is_ok());
        }
    }
}

/// What starts a cache's watch once.
type Starter = Box<dyn FnOnce() -> tokio::task::JoinHandle<()> + Send>;

struct Inner<K: Resource + 'static>
where
    K::DynamicType: Hash + Eq,
{
    store: Store<K>,
    synced: Arc<AtomicBool>,
    hub: Arc<Hub<K>>,
    start: Mutex<Option<Starter>>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl<K: Resource + 'static> Drop for Inner<K>
where
    K::DynamicType: Hash + Eq,
{
    fn drop(&mut self) {
        if let Ok(mut t) = self.task.lock() {
            if let Some(t) = t.take() {
                t.abort();
            }
        }
    }
}

/// One watch of one kind and its store, shared by every controller.
pub struct Shared<K: Resource + 'static>
where
    K::DynamicType: Hash + Eq,
{
    inner: Arc<Inner<K>>,
}

impl<K: Resource + 'static> Clone for Shared<K>
where
    K::DynamicType: Hash + Eq,
{
    fn clone(&self) -> Self {
        Shared {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Resource + 'static> Deref for Shared<K>
where
    K::DynamicType: Hash + Eq,
{
    type Target = Store<K>;

    fn deref(&self) -> &Store<K> {
        &self.inner.store
    }
}

impl<K> Shared<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Hash + Eq + Clone + Default + Send + Sync,
{
    /// A cache of `api`'s objects; its watch starts with [`Shared::start`].
    pub fn new(api: Api<K>) -> Self
    where
        K: Trim,
    {
        let (store, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let hub = Arc::new(Hub {
            subscribers: Mutex::new(Vec::new()),
        });
        let (flag, to) = (synced.clone(), hub.clone());
        let starter: Starter = Box::new(move || tokio::spawn(fill(api, writer, flag, to)));
        Shared {
            inner: Arc::new(Inner {
                store,
                synced,
                hub,
                start: Mutex::new(Some(starter)),
                task: Mutex::new(None),
            }),
        }
    }

    /// Starts the watch (once; later calls do nothing).
    pub fn start(&self) {
        let starter = self.inner.start.lock().ok().and_then(|mut s| s.take());
        if let Some(starter) = starter {
            let handle = starter();
            if let Ok(mut t) = self.inner.task.lock() {
                *t = Some(handle.abort_handle());
            }
        }
    }

    /// The changes from now on; starts the watch. A subscriber that joins
    /// after the first full list gets [`Change::Listed`] first.
    pub(crate) fn subscribe(&self) -> UnboundedReceiver<Change<K>> {
        let (tx, rx) = unbounded();
        if let Ok(mut subs) = self.inner.hub.subscribers.lock() {
            // Under the lock: a list completing now is either seen by this
            // check or sent to this subscriber, never lost between the two.
            if self.is_synced() {
                let _ = tx.unbounded_send(Change::Listed);
            }
            subs.push(tx);
        }
        self.start();
        rx
    }

    /// Whether the first full list is in the store.
    pub fn is_synced(&self) -> bool {
        self.inner.synced.load(Ordering::Acquire)
    }

    /// Whether object `namespace/name` may exist: it is in the store, or
    /// the store is not filled yet (so nothing is taken for gone early).
    pub(crate) fn may_hold(&self, namespace: &str, name: &str) -> bool
    where
        K: Resource<DynamicType = ()>,
    {
        !self.is_synced()
            || self
                .get(&reflector::ObjectRef::new(name).within(namespace))
                .is_some()
    }

    /// The flag behind [`Shared::is_synced`] (for `/readyz`).
    pub fn synced_flag(&self) -> Arc<AtomicBool> {
        self.inner.synced.clone()
    }

    /// The cached objects once the first list is complete (`None` before).
    pub fn synced_state(&self) -> Option<Vec<Arc<K>>> {
        self.is_synced().then(|| self.inner.store.state())
    }

    /// Waits until the first full list is in the store (starts the watch).
    pub async fn synced(&self) {
        self.start();
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        while !self.is_synced() {
            tick.tick().await;
        }
    }
}

/// What a cache drops from each object before storing it.
pub trait Trim {
    /// Drops the fields no controller reads.
    fn trim(&mut self);
}

/// Drops an object's `managedFields`.
fn drop_managed_fields<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

macro_rules! trim_managed_fields {
    ($($k:ty),*) => {$(
        impl Trim for $k {
            fn trim(&mut self) {
                drop_managed_fields(self);
            }
        }
    )*};
}
trim_managed_fields!(Machine, MachineSet, MachineDeployment, MachineClass, Secret);

impl Trim for Node {
    /// Also the container images the kubelet lists (tens of entries on a
    /// real Node): no controller reads them.
    fn trim(&mut self) {
        drop_managed_fields(self);
        if let Some(status) = self.status.as_mut() {
            status.images = None;
        }
    }
}

/// Runs one watch into the store and tells the subscribers.
async fn fill<K>(
    api: Api<K>,
    mut writer: reflector::store::Writer<K>,
    synced: Arc<AtomicBool>,
    hub: Arc<Hub<K>>,
) where
    K: Resource + Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Hash + Eq + Clone + Default + Send + Sync,
{
    let reader = writer.as_reader();
    // The store's own copy of an applied object: what subscribers get (no
    // second copy per change).
    let stored = |o: K| {
        reader
            .get(&ObjectRef::from_obj(&o))
            .unwrap_or_else(|| Arc::new(o))
    };
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                warn!(kind = %K::kind(&Default::default()), error = %e, "watch failed; retrying");
                continue;
            }
        };
        let event = event.modify(Trim::trim);
        writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Apply(o) => {
                let o = stored(o);
                hub.send(|| Change::Applied(o.clone()));
            }
            // A re-list's objects reach the store at its end (`InitDone`).
            watcher::Event::InitApply(o) => {
                let o = Arc::new(o);
                hub.send(|| Change::Applied(o.clone()));
            }
            watcher::Event::Delete(o) => {
                let o = Arc::new(o);
                hub.send(|| Change::Deleted(o.clone()));
            }
            watcher::Event::InitDone => {
                // Under the hub's lock, so that a subscriber joining now sees
                // either the flag or this message (see `subscribe`).
                if let Ok(subs) = hub.subscribers.lock() {
                    synced.store(true, Ordering::Release);
                    drop(subs);
                }
                debug!(kind = %K::kind(&Default::default()), "cache listed");
                hub.send(|| Change::Listed);
            }
            watcher::Event::Init => {}
        }
    }
}

/// The caches of one process.
#[derive(Clone)]
pub struct Caches {
    /// Machines of the control namespace.
    pub machines: Shared<Machine>,
    /// MachineSets of the control namespace.
    pub sets: Shared<MachineSet>,
    /// MachineDeployments of the control namespace.
    pub deployments: Shared<MachineDeployment>,
    /// MachineClasses of the control namespace.
    pub classes: Shared<MachineClass>,
    /// Secrets of the control namespace (class secrets).
    pub secrets: Shared<Secret>,
    /// Nodes of the target cluster (`None` without one).
    pub nodes: Option<Shared<Node>>,
}

impl Caches {
    /// The caches of `namespace` on `control` and of the Nodes on `target`.
    /// No watch starts before a controller needs it.
    pub fn new(control: &Client, target: Option<&Client>, namespace: &str) -> Self {
        Caches {
            machines: Shared::new(Api::namespaced(control.clone(), namespace)),
            sets: Shared::new(Api::namespaced(control.clone(), namespace)),
            deployments: Shared::new(Api::namespaced(control.clone(), namespace)),
            classes: Shared::new(Api::namespaced(control.clone(), namespace)),
            secrets: Shared::new(Api::namespaced(control.clone(), namespace)),
            nodes: target.map(|t| Shared::new(Api::all(t.clone()))),
        }
    }

    /// A Secret of the control namespace from the cache.
    pub(crate) fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        self.secrets.get(&ObjectRef::new(name).within(namespace))
    }

    /// A MachineClass from the cache.
    pub(crate) fn class(&self, namespace: &str, name: &str) -> Option<Arc<MachineClass>> {
        self.classes.get(&ObjectRef::new(name).within(namespace))
    }
}

/// Keeps only the changes whose trigger hash moved (kube-runtime's predicates,
/// for shared changes): `Applied` objects whose `hash` is the one last seen are
/// dropped; `Listed` passes every object of the store (a re-list may hide
/// anything); `Deleted` forgets the object.
pub(crate) struct Triggers<K: Resource + 'static>
where
    K::DynamicType: Hash + Eq,
{
    seen: HashMap<ObjectRef<K>, u64>,
    hash: fn(&K) -> Option<u64>,
}

impl<K> Triggers<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Hash + Eq + Clone + Default,
{
    /// A filter by this trigger hash.
    pub(crate) fn new(hash: fn(&K) -> Option<u64>) -> Self {
        Triggers {
            seen: HashMap::new(),
            hash,
        }
    }

    /// The objects this change makes worth a reconcile.
    pub(crate) fn filter(&mut self, change: Change<K>, store: &Store<K>) -> Vec<Arc<K>> {
        match change {
            Change::Applied(o) => {
                let key = ObjectRef::from_obj(&*o);
                match (self.hash)(&o) {
                    Some(h) if self.seen.get(&key) == Some(&h) => Vec::new(),
                    Some(h) => {
                        self.seen.insert(key, h);
                        vec![o]
                    }
                    None => vec![o],
                }
            }
            Change::Deleted(o) => {
                self.seen.remove(&ObjectRef::from_obj(&*o));
                Vec::new()
            }
            Change::Listed => {
                let all = store.state();
                self.seen.retain(|k, _| store.get(k).is_some());
                for o in &all {
                    if let Some(h) = (self.hash)(o) {
                        self.seen.insert(ObjectRef::from_obj(&**o), h);
                    }
                }
                all
            }
        }
    }
}

#[cfg(test)]
mod tests;
