//! Bounded caches for drivers: per-credential clients must not grow without
//! limit as Secrets rotate (design: driver.md, "Cloud budget").

use std::collections::HashMap;
use std::hash::Hash;

/// How many per-credential clients a driver keeps at most.
pub const CLIENT_CACHE_CAP: usize = 64;

/// Inserts `value` under `key`, first evicting one other entry when the map
/// already holds `cap` entries, so the map never grows beyond `cap`. A client
/// evicted here is simply built again on its next use.
pub fn insert_bounded<K: Eq + Hash + Clone, V>(
    map: &mut HashMap<K, V>,
    key: K,
    value: V,
    cap: usize,
) {
    if !map.contains_key(&key) && map.len() >= cap.max(1) {
        if let Some(victim) = map.keys().next().cloned() {
            map.remove(&victim);
        }
    }
    map.insert(key, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_cache_never_holds_more_than_its_cap_as_keys_rotate() {
        let mut m = HashMap::new();
        for i in 0..1000u64 {
            insert_bounded(&mut m, i, i, 64);
            assert!(m.len() <= 64);
        }
        assert!(m.contains_key(&999), "the newest entry is kept");
    }

    #[test]
    fn replacing_an_existing_key_evicts_nothing() {
        let mut m = HashMap::new();
        for i in 0..3u64 {
            insert_bounded(&mut m, i, 0, 3);
        }
        insert_bounded(&mut m, 1, 7, 3);
        assert_eq!(m.len(), 3);
        assert_eq!(m.get(&1), Some(&7));
    }
}
