//! Expectations: creations and deletions made and not yet observed.

use super::*;
use std::time::Instant;

/// How the cache currently shows a machine the controller created or deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not in the cache.
    Absent,
    /// In the cache, not being deleted.
    Present,
    /// In the cache with a deletion timestamp or phase Terminating.
    Deleting,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Expectation {
    creates: BTreeSet<String>,
    deletes: BTreeSet<String>,
    since: Option<Instant>,
}

/// Creations and deletions a controller made and has not yet observed in its
/// cache, per MachineSet key. Until they are observed (or
/// [`EXPECTATIONS_TIMEOUT`] passed) the set's replica count is not trusted,
/// so a lagging cache can never make the controller create the same
/// machines twice or delete one machine too many.
///
/// Their age is measured on a monotonic clock (`now` is an [`Instant`], the
/// runtime passes `Instant::now()`): a wall-clock step (NTP, a suspended VM,
/// an operator) neither expires them at once (a forward step: the next sync
/// would trust a cache that does not show the new machines yet and create
/// them again) nor pins them for as long as the step (a backward step: the
/// set would not create or delete anything until the wall clock catches up).
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    entries: HashMap<String, Expectation>,
}

impl Expectations {
    /// A fresh, empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records machines created for `key` at monotonic time `now`.
    pub fn expect_creations(
        &mut self,
        key: &str,
        names: impl IntoIterator<Item = String>,
        now: Instant,
    ) {
        let e = self.entries.entry(key.to_string()).or_default();
        e.creates.extend(names);
        e.since = Some(now);
    }

    /// Records machines deleted for `key` at monotonic time `now`.
    pub fn expect_deletions(
        &mut self,
        key: &str,
        names: impl IntoIterator<Item = String>,
        now: Instant,
    ) {
        let e = self.entries.entry(key.to_string()).or_default();
        e.deletes.extend(names);
        e.since = Some(now);
    }

    /// Drops everything recorded for `key` (the set is gone).
    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Removes what the cache now shows and answers whether nothing is
    /// pending any more. An entry older than [`EXPECTATIONS_TIMEOUT`] at
    /// monotonic time `now` is dropped (the cache may never show a machine
    /// someone else deleted).
    pub fn satisfied(&mut self, key: &str, seen: impl Fn(&str) -> Seen, now: Instant) -> bool {
        let Some(e) = self.entries.get_mut(key) else {
            return true;
        };
        e.creates.retain(|n| seen(n) == Seen::Absent);
        e.deletes.retain(|n| seen(n) == Seen::Present);
        let expired = e
            .since
            .is_none_or(|t| now.saturating_duration_since(t) >= EXPECTATIONS_TIMEOUT);
        if expired || (e.creates.is_empty() && e.deletes.is_empty()) {
            self.entries.remove(key);
            return true;
        }
        false
    }
}
