//! Short-lived answers one driver call leaves for the next call of the same
//! machine, so that the controller's usual sequence (status probe → create →
//! initialize) does not ask EC2 the same question twice:
//!
//! - a status probe by name that found no VM lets the create that follows
//!   within [`ABSENT_TTL`] skip its own look-up by name (RunInstances carries
//!   the machine's ClientToken, so even a VM that a concurrent create launched
//!   meanwhile comes back instead of a second one);
//! - the create's description of the instance (RunInstances' answer, or the
//!   DescribeInstances answer it waited for) lets the InitializeMachine that
//!   follows within [`LAUNCHED_TTL`] plan without describing again.
//!
//! Each answer is used once (taken), so a retry after a failure asks EC2.
//! See `docs/design/providers/aws.md`, "EC2 calls per machine".

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long a status probe's "no VM" stands in for the create's look-up.
pub const ABSENT_TTL: Duration = Duration::from_secs(10);

/// How long a create's instance description stands in for InitializeMachine's.
pub const LAUNCHED_TTL: Duration = Duration::from_secs(30);

/// How many answers a memory holds at most (expired ones go first).
const CAP: usize = 4096;

/// Answers by key, each valid for `ttl` and used at most once.
pub struct Recent<V> {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, V)>>,
}

impl<V> Recent<V> {
    /// An empty memory whose answers live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Recent {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Remembers an answer (replacing an earlier one of the key).
    pub fn put(&self, key: &str, value: V) {
        let Ok(mut m) = self.entries.lock() else {
            return;
        };
        if m.len() >= CAP {
            let ttl = self.ttl;
            m.retain(|_, (at, _)| at.elapsed() < ttl);
            if m.len() >= CAP {
                m.clear();
            }
        }
        m.insert(key.to_string(), (Instant::now(), value));
    }

    /// The key's answer if it is still fresh; it is forgotten either way.
    pub fn take(&self, key: &str) -> Option<V> {
        let (at, v) = self.entries.lock().ok()?.remove(key)?;
        (at.elapsed() < self.ttl).then_some(v)
    }

    /// Forgets the key's answer.
    pub fn forget(&self, key: &str) {
        if let Ok(mut m) = self.entries.lock() {
            m.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_used_once_and_only_while_fresh() {
        let r = Recent::new(Duration::from_secs(10));
        r.put("m", 1);
        assert_eq!(r.take("m"), Some(1));
        assert_eq!(r.take("m"), None, "used once");
        r.put("m", 2);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(r.take("m"), None, "expired");
        r.put("m", 3);
        r.forget("m");
        assert_eq!(r.take("m"), None, "forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn the_memory_stays_bounded() {
        let r = Recent::new(Duration::from_secs(10));
        for i in 0..(3 * CAP) {
            r.put(&i.to_string(), i);
        }
        let len = r.entries.lock().map(|m| m.len()).unwrap_or(usize::MAX);
        assert!(len <= CAP, "{len}");
    }
}
