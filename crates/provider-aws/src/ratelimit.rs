//! Client-side token buckets, one per EC2 throttling class.
//!
//! EC2 throttles per account and region with token buckets per action class
//! (RunInstances: 5 requests burst, 2/s refill; describes: 100 burst, 20/s; ...).
//! The driver keeps a local copy of those buckets so that a scale-up waits in
//! the controller instead of drawing `RequestLimitExceeded` answers, and a
//! throttled answer pauses the whole class for everyone in this process.

use crate::config::{BucketLimit, RateLimits};
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The EC2 throttling classes the driver's calls fall into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionClass {
    /// RunInstances (its own request bucket).
    RunInstances,
    /// TerminateInstances (its own request bucket).
    TerminateInstances,
    /// Describe* calls (the non-mutating bucket).
    Describe,
    /// Other mutating actions: ModifyNetworkInterfaceAttribute, DeleteVolume, DetachNetworkInterface.
    Mutating,
    /// AssignIpv6Addresses (uncategorized bucket).
    AssignIpv6Addresses,
    /// DeleteNetworkInterface (uncategorized bucket).
    NetworkInterfaces,
}

impl ActionClass {
    /// All classes.
    pub const ALL: [ActionClass; 6] = [
        ActionClass::RunInstances,
        ActionClass::TerminateInstances,
        ActionClass::Describe,
        ActionClass::Mutating,
        ActionClass::AssignIpv6Addresses,
        ActionClass::NetworkInterfaces,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

struct BucketState {
    /// Tokens available; negative when callers have reserved future tokens.
    tokens: f64,
    last: Instant,
    /// No token is handed out before this instant (after a throttled answer).
    paused_until: Instant,
    /// Consecutive throttled answers, for the growing pause.
    strikes: u32,
}

/// One token bucket. Callers reserve a token and sleep until it is due, so
/// waiting callers are served in arrival order and nobody polls.
pub struct TokenBucket {
    capacity: f64,
    refill_per_sec: f64,
    state: Mutex<BucketState>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(limit: BucketLimit) -> Self {
        let now = Instant::now();
        TokenBucket {
            capacity: f64::from(limit.capacity.max(1)),
            refill_per_sec: limit.refill_per_sec.max(0.001),
            state: Mutex::new(BucketState {
                tokens: f64::from(limit.capacity.max(1)),
                last: now,
                paused_until: now,
                strikes: 0,
            }),
        }
    }

    fn refill(&self, s: &mut BucketState, now: Instant) {
        let elapsed = now.saturating_duration_since(s.last).as_secs_f64();
        s.tokens = (s.tokens + elapsed * self.refill_per_sec).min(self.capacity);
        s.last = now;
    }

    /// Takes one token, waiting until it is available. Returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let wait = {
            let mut s = self.state.lock().await;
            let now = Instant::now();
            self.refill(&mut s, now);
            s.tokens -= 1.0;
            let deficit = if s.tokens < 0.0 {
                Duration::from_secs_f64(-s.tokens / self.refill_per_sec)
            } else {
                Duration::ZERO
            };
            deficit + s.paused_until.saturating_duration_since(now)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        wait
    }

    /// Records a throttled answer: empties the bucket and pauses it for a
    /// pause that doubles with every consecutive strike (capped), returning the pause.
    pub async fn penalize(&self, base: Duration, max: Duration) -> Duration {
        let mut s = self.state.lock().await;
        let now = Instant::now();
        self.refill(&mut s, now);
        s.strikes = s.strikes.saturating_add(1);
        let factor = 2u32.saturating_pow(s.strikes.saturating_sub(1).min(16));
        let pause = base.saturating_mul(factor).min(max);
        s.tokens = s.tokens.min(0.0);
        let until = now + pause;
        if until > s.paused_until {
            s.paused_until = until;
        }
        pause
    }

    /// Records a successful answer (resets the strike count).
    pub async fn succeeded(&self) {
        let mut s = self.state.lock().await;
        s.strikes = 0;
    }
}

/// The buckets of one account and region.
pub struct Limiter {
    buckets: Option<Vec<TokenBucket>>,
}

impl Limiter {
    /// Buckets with the configured limits (none when disabled).
    pub fn new(limits: &RateLimits) -> Self {
        if !limits.enabled {
            return Limiter { buckets: None };
        }
        let buckets = ActionClass::ALL
            .iter()
            .map(|c| TokenBucket::new(limits.limit(*c)))
            .collect();
        Limiter {
            buckets: Some(buckets),
        }
    }

    fn bucket(&self, class: ActionClass) -> Option<&TokenBucket> {
        self.buckets.as_ref().and_then(|b| b.get(class.index()))
    }

    /// Takes a token of the class.
    pub async fn acquire(&self, class: ActionClass) -> Duration {
        match self.bucket(class) {
            Some(b) => b.acquire().await,
            None => Duration::ZERO,
        }
    }

    /// Pauses the class after a throttled answer; returns the pause.
    pub async fn penalize(&self, class: ActionClass, base: Duration, max: Duration) -> Duration {
        match self.bucket(class) {
            Some(b) => b.penalize(base, max).await,
            None => base.min(max),
        }
    }

    /// Records a success of the class.
    pub async fn succeeded(&self, class: ActionClass) {
        if let Some(b) = self.bucket(class) {
            b.succeeded().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_free_then_the_refill_rate_paces() {
        let b = TokenBucket::new(BucketLimit {
            capacity: 5,
            refill_per_sec: 2.0,
        });
        let start = Instant::now();
        for _ in 0..5 {
            assert_eq!(b.acquire().await, Duration::ZERO);
        }
        for _ in 0..4 {
            b.acquire().await;
        }
        // 4 tokens past the burst at 2/s: 2 seconds.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1990) && took <= Duration::from_millis(2100),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_are_paced_together() {
        let b = std::sync::Arc::new(TokenBucket::new(BucketLimit {
            capacity: 1,
            refill_per_sec: 10.0,
        }));
        let start = Instant::now();
        let tasks: Vec<_> = (0..11)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move { b.acquire().await })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(990) && took <= Duration::from_millis(1100),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_answer_pauses_the_class_with_growing_pauses() {
        let b = TokenBucket::new(BucketLimit {
            capacity: 100,
            refill_per_sec: 100.0,
        });
        let base = Duration::from_millis(100);
        let max = Duration::from_millis(350);
        assert_eq!(b.penalize(base, max).await, Duration::from_millis(100));
        assert_eq!(b.penalize(base, max).await, Duration::from_millis(200));
        assert_eq!(b.penalize(base, max).await, Duration::from_millis(350));
        let start = Instant::now();
        b.acquire().await;
        assert!(start.elapsed() >= Duration::from_millis(350));
        b.succeeded().await;
        assert_eq!(b.penalize(base, max).await, Duration::from_millis(100));
    }

    #[tokio::test]
    async fn a_disabled_limiter_never_waits() {
        let l = Limiter::new(&RateLimits {
            enabled: false,
            ..RateLimits::default()
        });
        for _ in 0..100 {
            assert_eq!(l.acquire(ActionClass::RunInstances).await, Duration::ZERO);
        }
    }
}
