//! The objects `/metrics` reports, kept by a watch instead of a LIST per
//! scrape (design: docs/design/process-contract.md, "Metrics").
//!
//! [`watch`] returns the cache and the future that fills it; the process runs
//! that future only while it leads, so a standby makes no request for metrics.
//! A scrape reads [`Cache::state`], which is `None` until the first full list
//! arrived (also what `/readyz` waits for).

use futures::StreamExt;
use kube::runtime::reflector::{self, reflector, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tracing::debug;

/// A reflector store and whether it holds a full list.
pub struct Cache<K: Resource + Clone + 'static>
where
    K::DynamicType: Hash + Eq + Clone,
{
    store: Store<K>,
    synced: Arc<AtomicBool>,
}

impl<K: Resource + Clone + 'static> Cache<K>
where
    K::DynamicType: Hash + Eq + Clone,
{
    /// The cached objects, once the first list is complete.
    pub fn state(&self) -> Option<Vec<Arc<K>>> {
        self.is_synced().then(|| self.store.state())
    }

    /// Whether the first list is complete.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    /// The flag behind [`Cache::is_synced`] (for `/readyz`).
    pub fn synced_flag(&self) -> Arc<AtomicBool> {
        self.synced.clone()
    }
}

/// A cache of `api`'s objects and the future that keeps it (runs until dropped;
/// watch errors are retried with kube-runtime's default backoff).
pub fn watch<K>(api: Api<K>) -> (Cache<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Hash + Eq + Clone + Default + Send + Sync,
{
    let (store, writer) = reflector::store();
    let synced = Arc::new(AtomicBool::new(false));
    let flag = synced.clone();
    let fill = async move {
        let stream = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => flag.store(true, Ordering::Relaxed),
                Ok(_) => {}
                Err(e) => debug!(error = %e, "metrics cache: watch failed; retrying"),
            }
        }
    };
    (Cache { store, synced }, fill)
}
