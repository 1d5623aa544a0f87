//! The one way a controller learns what to reconcile (design:
//! docs/design/runtime.md, "Routing events to controllers").
//!
//! kube-runtime's shared-reflector style (its example
//! `shared_stream_controllers.rs`): every kind has one shared cache
//! (`caches.rs`); a controller is `Controller::for_shared_stream` on its own
//! kind's cache, and every other source of work is a stream of keys handed
//! to `reconcile_on`. A [`Route`] builds both for one reconciled kind:
//!
//! - [`Route::own`]: the changes of the kind's own cache, each picked by the
//!   controller's rule (the machine controller's trigger hash, "every
//!   applied object" for the sets); a deleted object is no longer waiting;
//! - [`Route::mapped`]: the changes of another cache, mapped to the typed
//!   [`ObjectKey`]s they concern (a Machine to its MachineSet, a Node to its
//!   Machine);
//! - [`Route::keys`]: keys from elsewhere (a finished drain);
//! - [`Route::controller`]: the controller on the shared store, with the
//!   process's `--concurrent-syncs`.
//!
//! Every key queued for an object the cache holds is recorded as waiting
//! on the kind's workqueue series (`mcm_workqueue_*`); a key of no object
//! starts no reconcile and is not recorded. Failed reconciles of every
//! controller go through one [`error_policy`].

use crate::caches::Change;
use crate::keys::{Kind, ObjectKey};
use crate::metrics::workqueue::WorkQueues;
use crate::{Context, Error};
use futures::{Stream, StreamExt};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use mcm_api::{Machine, MachineClass, MachineDeployment, MachineSet};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;

/// A kind a controller reconciles: its workqueue name (the reference's) and
/// the kind of its keys.
pub(crate) trait Reconciled:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// The workqueue name of the reference (`mcm_workqueue_*{name}`).
    const QUEUE: &'static str;
    /// The kind of its keys.
    const KIND: Kind;
}

impl Reconciled for Machine {
    const QUEUE: &'static str = "machine";
    const KIND: Kind = Kind::Machine;
}

impl Reconciled for MachineSet {
    const QUEUE: &'static str = "machineset";
    const KIND: Kind = Kind::MachineSet;
}

impl Reconciled for MachineDeployment {
    const QUEUE: &'static str = "machinedeployment";
    const KIND: Kind = Kind::MachineDeployment;
}

impl Reconciled for MachineClass {
    const QUEUE: &'static str = "machineclass";
    const KIND: Kind = Kind::MachineClass;
}

/// The key of a reconciled object.
pub(crate) fn key_of<K: Reconciled>(obj: &K) -> ObjectKey {
    ObjectKey::new(
        K::KIND,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
    )
}

/// The object reference of a key, for the controller's queue.
fn object_ref<K: Reconciled>(key: &ObjectKey) -> ObjectRef<K> {
    ObjectRef::new(&key.name).within(&key.namespace)
}

/// The one error policy of every controller: a conflict (someone wrote
/// first; the cache will show it) is retried soon and quietly, anything else
/// is a warning and backs off per key ([`Context::requeue_after_error`]).
pub(crate) fn error_policy<K: Reconciled>(obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.requeue_after_error(K::QUEUE, &key_of(&*obj), err)
}

/// Where the work of the controller of `K` comes from (see the module docs).
pub(crate) struct Route<K: Reconciled> {
    store: Store<K>,
    queues: Arc<WorkQueues>,
}

impl<K: Reconciled> Clone for Route<K> {
    fn clone(&self) -> Self {
        Route {
            store: self.store.clone(),
            queues: self.queues.clone(),
        }
    }
}

impl<K: Reconciled> Route<K> {
    /// The route of the controller of `K` over the shared `store` of `K`.
    pub(crate) fn new(ctx: &Context, store: Store<K>) -> Self {
        Route {
            store,
            queues: ctx.workqueues.clone(),
        }
    }

    /// Records `key` as waiting when its object exists; answers its reference.
    fn queue(&self, key: &ObjectKey) -> ObjectRef<K> {
        let r = object_ref::<K>(key);
        if self.store.get(&r).is_some() {
            self.queues.queued(K::QUEUE, key);
        }
        r
    }

    /// The controller's own objects: `pick` decides which of them a change of
    /// their shared cache reconciles; a deleted object stops waiting.
    pub(crate) fn own(
        &self,
        changes: impl Stream<Item = Change<K>> + Send + 'static,
        mut pick: impl FnMut(Change<K>) -> Vec<Arc<K>> + Send + 'static,
    ) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let queues = self.queues.clone();
        changes.flat_map(move |change| {
            if let Change::Deleted(o) = &change {
                queues.forget(K::QUEUE, &key_of(&**o));
            }
            let picked = pick(change);
            for o in &picked {
                queues.queued(K::QUEUE, &key_of(&**o));
            }
            futures::stream::iter(picked)
        })
    }

    /// Every object of the own cache, for a `pick` that answers a full list.
    pub(crate) fn all(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// The `pick` most controllers use for [`Route::own`]: every applied
    /// object, and after a (re)list every one (it may have hidden deletions).
    pub(crate) fn applied_or_all(&self) -> impl FnMut(Change<K>) -> Vec<Arc<K>> + Send + 'static {
        let route = self.clone();
        move |change| match change {
            Change::Applied(o) => vec![o],
            Change::Deleted(_) => Vec::new(),
            Change::Listed => route.all(),
        }
    }

    /// [`Route::mapped`] where an applied or deleted object of the other kind
    /// concerns the keys `keys_of` answers, and a (re)list concerns every key
    /// of the own cache.
    pub(crate) fn mapped_or_all<S: Send + Sync + 'static>(
        &self,
        changes: impl Stream<Item = Change<S>> + Send + 'static,
        mut keys_of: impl FnMut(&S) -> Vec<ObjectKey> + Send + 'static,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
        let all = self.clone();
        self.mapped(changes, move |change| match change {
            Change::Applied(o) | Change::Deleted(o) => keys_of(&o),
            Change::Listed => all.all_keys(),
        })
    }

    /// The keys of `K` that each change of another kind's cache concerns.
    pub(crate) fn mapped<S: Send + Sync + 'static>(
        &self,
        changes: impl Stream<Item = Change<S>> + Send + 'static,
        mut map: impl FnMut(Change<S>) -> Vec<ObjectKey> + Send + 'static,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
        let route = self.clone();
        changes.flat_map(move |change| {
            let refs: Vec<ObjectRef<K>> = map(change).iter().map(|k| route.queue(k)).collect();
            futures::stream::iter(refs)
        })
    }

    /// Keys of `K` from elsewhere (a finished drain).
    pub(crate) fn keys(
        &self,
        keys: impl Stream<Item = ObjectKey> + Send + 'static,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
        let route = self.clone();
        keys.map(move |k| route.queue(&k))
    }

    /// Every key of the own cache, for a `map` that answers a full list.
    pub(crate) fn all_keys(&self) -> Vec<ObjectKey> {
        self.store.state().iter().map(|o| key_of(&**o)).collect()
    }

    /// The controller of `K` on the shared store, fed by `own`, with
    /// `concurrency` reconciles at most at once.
    pub(crate) fn controller(
        &self,
        own: impl Stream<Item = Arc<K>> + Send + 'static,
        concurrency: u16,
    ) -> Controller<K> {
        Controller::for_shared_stream(own, self.store.clone())
            .with_config(ControllerConfig::default().concurrency(concurrency))
    }
}
