//! Name → ID look-ups (flavors, images, networks, security groups), cached
//! per MachineClass for a few minutes: a scale-up of N machines resolves
//! each name once instead of N times.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a cached name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A Nova flavor.
    Flavor,
    /// An image (Nova's image proxy).
    Image,
    /// A Neutron network.
    Network,
    /// A Neutron security group.
    SecurityGroup,
}

type Key = (String, Kind, String);

/// The cache: `(class, kind, name)` → ID, each entry for `ttl`.
pub struct LookupCache {
    ttl: Duration,
    entries: Mutex<HashMap<Key, (String, Instant)>>,
}

impl LookupCache {
    /// An empty cache whose entries live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        LookupCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The cached ID, if still fresh.
    pub fn get(&self, class: &str, kind: Kind, name: &str) -> Option<String> {
        let mut m = self.entries.lock().ok()?;
        let key = (class.to_string(), kind, name.to_string());
        match m.get(&key) {
            Some((id, at)) if at.elapsed() < self.ttl => Some(id.clone()),
            Some(_) => {
                m.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Remembers an ID.
    pub fn put(&self, class: &str, kind: Kind, name: &str, id: &str) {
        if let Ok(mut m) = self.entries.lock() {
            let ttl = self.ttl;
            m.retain(|_, (_, at)| at.elapsed() < ttl);
            m.insert(
                (class.to_string(), kind, name.to_string()),
                (id.to_string(), Instant::now()),
            );
        }
    }

    /// Forgets a class's entries (after the cloud rejected one of its IDs).
    pub fn forget_class(&self, class: &str) {
        if let Ok(mut m) = self.entries.lock() {
            m.retain(|(c, _, _), _| c != class);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_ttl_and_are_per_class() {
        let c = LookupCache::new(Duration::from_millis(30));
        c.put("ns/a", Kind::Flavor, "m1", "1");
        assert_eq!(c.get("ns/a", Kind::Flavor, "m1").as_deref(), Some("1"));
        assert_eq!(c.get("ns/b", Kind::Flavor, "m1"), None);
        assert_eq!(c.get("ns/a", Kind::Image, "m1"), None);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get("ns/a", Kind::Flavor, "m1"), None);
    }

    #[test]
    fn forgetting_a_class_drops_only_its_entries() {
        let c = LookupCache::new(Duration::from_secs(60));
        c.put("ns/a", Kind::Flavor, "m1", "1");
        c.put("ns/b", Kind::Flavor, "m1", "2");
        c.forget_class("ns/a");
        assert_eq!(c.get("ns/a", Kind::Flavor, "m1"), None);
        assert_eq!(c.get("ns/b", Kind::Flavor, "m1").as_deref(), Some("2"));
    }
}
