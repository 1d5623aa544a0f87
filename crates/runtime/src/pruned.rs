//! [`Pruned`]: a map of per-object bookkeeping (failure counters, last
//! creation attempts) that forgets objects which are gone.
//!
//! Entries are normally removed when their object succeeds or is deleted by
//! this controller; an object that disappears otherwise (its finalizer removed
//! by hand, deleted while failing in another process) would keep its entry
//! for the life of the process. So whenever the map grows past its
//! high-water mark, entries whose object no longer exists are dropped, and
//! the mark is set to twice what is left (at least [`MIN_HIGH_WATER`]):
//! pruning costs O(1) amortised per insertion and the map stays within twice
//! the live objects.

use std::collections::HashMap;

/// The smallest high-water mark: below it the map is never pruned.
pub(crate) const MIN_HIGH_WATER: usize = 256;

/// A map keyed by object key that prunes gone objects.
#[derive(Debug)]
pub(crate) struct Pruned<K, V> {
    map: HashMap<K, V>,
    high_water: usize,
}

impl<K, V> Default for Pruned<K, V> {
    fn default() -> Self {
        Pruned {
            map: HashMap::new(),
            high_water: MIN_HIGH_WATER,
        }
    }
}

impl<K: Eq + std::hash::Hash + Clone, V> Pruned<K, V> {
    /// An empty map.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The entry of `key` (inserted with `default` when missing). Before
    /// inserting past the high-water mark, drops every other entry for which
    /// `exists` says the object is gone.
    pub(crate) fn entry(&mut self, key: &K, default: V, exists: impl Fn(&K) -> bool) -> &mut V {
        self.entry_collecting(key, default, exists, &mut Vec::new())
    }

    /// Like [`Pruned::entry`], handing the values of the pruned entries to
    /// `pruned` (e.g. reservations that must be given back).
    pub(crate) fn entry_collecting(
        &mut self,
        key: &K,
        default: V,
        exists: impl Fn(&K) -> bool,
        pruned: &mut Vec<V>,
    ) -> &mut V {
        if !self.map.contains_key(key) && self.map.len() >= self.high_water {
            let gone: Vec<K> = self
                .map
                .keys()
                .filter(|k| *k != key && !exists(k))
                .cloned()
                .collect();
            pruned.extend(gone.iter().filter_map(|k| self.map.remove(k)));
            self.high_water = (self.map.len() * 2).max(MIN_HIGH_WATER);
        }
        self.map.entry(key.clone()).or_insert(default)
    }

    /// Keeps the entries for which `keep` says so (it may also edit them).
    pub(crate) fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        self.map.retain(keep);
    }

    /// The entry of `key`, if any.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Forgets `key`, returning its value.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    /// The entry of `key` to edit, if any.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// The values.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values()
    }

    /// How many entries there are.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_gone_objects_are_dropped_past_the_high_water_mark() {
        let mut m: Pruned<String, u32> = Pruned::new();
        // Objects 0..MIN_HIGH_WATER fail once each, then all but 10 are deleted.
        for i in 0..MIN_HIGH_WATER {
            *m.entry(&format!("ns/m{i}"), 0, |_| true) += 1;
        }
        assert_eq!(m.len(), MIN_HIGH_WATER);
        let live = |k: &String| {
            k.strip_prefix("ns/m")
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n < 10)
        };
        *m.entry(&"ns/new".to_string(), 0, live) += 1;
        assert_eq!(m.len(), 11, "the 10 live objects and the new one remain");
        assert_eq!(
            m.get(&"ns/m3".to_string()),
            Some(&1),
            "live counters are kept"
        );
        assert_eq!(m.get(&"ns/m100".to_string()), None);
    }

    #[test]
    fn the_map_stays_within_twice_the_live_objects_under_churn() {
        let mut m: Pruned<String, u32> = Pruned::new();
        // 100 objects live at any time; 10 000 come and go.
        for i in 0..10_000usize {
            let live = |k: &String| k.parse::<usize>().is_ok_and(|n| n + 100 > i && n <= i);
            *m.entry(&i.to_string(), 0, live) += 1;
            assert!(m.len() <= MIN_HIGH_WATER.max(200) + 1, "{} at {i}", m.len());
        }
    }

    #[test]
    fn existing_keys_never_prune_and_remove_forgets() {
        let mut m: Pruned<String, u32> = Pruned::new();
        for i in 0..MIN_HIGH_WATER {
            m.entry(&i.to_string(), 0, |_| true);
        }
        *m.entry(&"0".to_string(), 0, |_| false) += 5;
        assert_eq!(
            m.len(),
            MIN_HIGH_WATER,
            "updating an existing key prunes nothing"
        );
        m.remove(&"0".to_string());
        assert_eq!(m.get(&"0".to_string()), None);
    }
}
