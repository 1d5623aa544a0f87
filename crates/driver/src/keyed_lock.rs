//! Per-key async locks whose table entry lives exactly as long as someone
//! holds or waits for it: the providers serialize the creates of one machine
//! with them (`CreateMachine` must not launch two VMs for one machine).
//!
//! The entry is removed by the guard's `Drop`, so a create whose future is
//! dropped mid-call (the controller's call timed out, its task was aborted)
//! leaves no entry behind, whether it was waiting for the lock or holding it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

type Table = HashMap<String, Arc<AsyncMutex<()>>>;

/// A table of async locks, one per key, created on demand.
#[derive(Debug, Default)]
pub struct KeyedLocks {
    table: Mutex<Table>,
}

impl KeyedLocks {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The table. A panic while it was locked cannot leave it inconsistent
    /// (every change is one insert or remove), so a poisoned lock is used.
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for `key`'s lock. The entry is released when the returned guard
    /// drops, and also when this future is dropped before it resolved.
    pub async fn lock(&self, key: &str) -> KeyedGuard<'_> {
        let lock = Arc::clone(self.table().entry(key.to_string()).or_default());
        let mut guard = KeyedGuard {
            locks: self,
            key: key.to_string(),
            lock: Some(Arc::clone(&lock)),
            held: None,
        };
        // If this await is cancelled, `guard` drops here and releases the entry.
        guard.held = Some(lock.lock_owned().await);
        guard
    }

    /// How many keys have an entry (held or waited for).
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether no key has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The lock of one key, held (or, inside [`KeyedLocks::lock`], waited for).
#[derive(Debug)]
pub struct KeyedGuard<'a> {
    locks: &'a KeyedLocks,
    key: String,
    lock: Option<Arc<AsyncMutex<()>>>,
    held: Option<OwnedMutexGuard<()>>,
}

impl Drop for KeyedGuard<'_> {
    fn drop(&mut self) {
        // Unlock first: the owned guard holds a reference of its own.
        drop(self.held.take());
        let Some(lock) = self.lock.take() else {
            return;
        };
        // References are only taken under the table's lock, so with it held,
        // a count of 2 (the table's and ours) means nobody else holds or
        // waits for this key.
        let mut table = self.locks.table();
        let ours = table
            .get(&self.key)
            .is_some_and(|l| Arc::ptr_eq(l, &lock) && Arc::strong_count(l) == 2);
        if ours {
            table.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_entry_goes_when_the_last_holder_drops_its_guard() {
        let locks = KeyedLocks::new();
        let a = locks.lock("m").await;
        assert_eq!(locks.len(), 1);
        drop(a);
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn a_waiter_keeps_the_entry_and_removes_it_after_its_turn() {
        let locks = Arc::new(KeyedLocks::new());
        let first = locks.lock("m").await;
        let l = Arc::clone(&locks);
        let waiter = tokio::spawn(async move {
            let _second = l.lock("m").await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(locks.len() <= 1, "the waiter's entry may still be there");
        waiter.await.expect("waiter");
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn cancelling_a_holder_or_a_waiter_leaves_no_entry() {
        let locks = KeyedLocks::new();
        // A holder whose future is dropped mid-work.
        let held = tokio::time::timeout(Duration::from_millis(20), async {
            let _g = locks.lock("m").await;
            std::future::pending::<()>().await;
        })
        .await;
        assert!(held.is_err());
        assert!(locks.is_empty(), "the cancelled holder left its entry");

        // A waiter whose future is dropped while it waits for the lock.
        let first = locks.lock("m").await;
        let waited = tokio::time::timeout(Duration::from_millis(20), locks.lock("m")).await;
        assert!(waited.is_err());
        assert_eq!(locks.len(), 1, "the holder's entry stays");
        drop(first);
        assert!(locks.is_empty(), "the cancelled waiter left its entry");
    }
}
