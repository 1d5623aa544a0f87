//! Read your own writes: the Machine controller's status writes reach the
//! shared cache a moment later, and a reconcile started meanwhile (by a Node
//! event, a drain's end) from the older cached copy would redo the steps the
//! write recorded, and write their status again. [`OwnWrites`] keeps, per
//! machine, the object the API server answered to this process's last
//! write and the resourceVersions it superseded; a reconcile whose cached
//! copy is one of those starts from the answer instead (design: runtime.md,
//! "Reading our own writes").
//!
//! Only copies this process superseded are replaced: a copy with any other
//! resourceVersion (a change by someone else, or the cache catching up)
//! ends the entry, and the cache is read as before.

use crate::keys::ObjectKey;
use crate::pruned::Pruned;
use kube::ResourceExt;
use mcm_api::Machine;
use std::sync::{Arc, Mutex};

/// How many superseded resourceVersions an entry keeps (the writes of a
/// few reconciles the cache has not caught up with).
const KEEP: usize = 8;

#[derive(Default)]
struct Written {
    /// resourceVersions this process's writes superseded.
    superseded: Vec<String>,
    /// The API server's answer to the last write.
    answer: Option<Arc<Machine>>,
}

/// The last written copy of each machine (see the module's documentation).
#[derive(Default)]
pub(crate) struct OwnWrites {
    map: Mutex<Pruned<ObjectKey, Written>>,
}

impl OwnWrites {
    /// Records that this process replaced the copies at `superseded` with
    /// `answer` (the API server's answer to the write).
    pub(crate) fn wrote(
        &self,
        key: &ObjectKey,
        superseded: &[String],
        answer: &Machine,
        exists: impl Fn(&ObjectKey) -> bool,
    ) {
        let Ok(mut map) = self.map.lock() else {
            return;
        };
        let entry = map.entry(key, Written::default(), exists);
        for rv in superseded {
            if !rv.is_empty() && !entry.superseded.contains(rv) {
                entry.superseded.push(rv.clone());
            }
        }
        let excess = entry.superseded.len().saturating_sub(KEEP);
        entry.superseded.drain(..excess);
        entry.answer = Some(Arc::new(answer.clone()));
    }

    /// The copy a reconcile of `cached` starts from: the last answer when
    /// `cached` is a copy this process's writes superseded (same UID),
    /// `cached` otherwise.
    pub(crate) fn newest(&self, key: &ObjectKey, cached: Arc<Machine>) -> Arc<Machine> {
        let Ok(mut map) = self.map.lock() else {
            return cached;
        };
        let Some(entry) = map.get(key) else {
            return cached;
        };
        let rv = cached.resource_version().unwrap_or_default();
        match &entry.answer {
            Some(answer) if entry.superseded.contains(&rv) && answer.uid() == cached.uid() => {
                answer.clone()
            }
            _ => {
                map.remove(key);
                cached
            }
        }
    }
}

#[cfg(test)]
mod tests;
