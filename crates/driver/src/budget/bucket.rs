//! The buckets themselves: [`TokenBucket`], [`Limiter`] and [`Budget`] (they
//! sleep on tokio's clock, so they sit behind the `budget` feature).

use super::BucketLimit;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

struct BucketState {
    /// Tokens available; negative when callers have reserved future tokens.
    tokens: f64,
    last: Instant,
    /// No token is handed out before this instant (after a throttled answer).
    paused_until: Instant,
    /// Consecutive throttled answers, for the growing pause.
    strikes: u32,
    /// Slots of refunded turns that were still ahead: each was debited
    /// from `tokens` when it was reserved, so the next caller takes one
    /// instead of a new debit (the schedule of calls stays the one the
    /// bucket allowed; only the owner changes).
    free: BTreeMap<Instant, u32>,
    /// Counts the times the bucket was found out of debt (`tokens >= 0`): a
    /// turn reserved in an earlier epoch whose slot has passed gives
    /// nothing back (see [`TokenBucket::refund`]).
    epoch: u64,
    in_debt: bool,
}

/// A reserved token: when it is due and what [`TokenBucket::refund`] needs
/// to give it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Its slot: when the bucket holds its token (a pause after a throttled
    /// answer may make the caller wait longer, see [`TokenBucket::reserve_turn`]).
    pub slot: Instant,
    epoch: u64,
}

/// One token bucket.
pub struct TokenBucket {
    capacity: f64,
    refill_per_sec: f64,
    state: StdMutex<BucketState>,
}

/// Two slots this close are one (float rounding of the refill arithmetic).
const SLOT_EPSILON: Duration = Duration::from_millis(1);

impl TokenBucket {
    /// A full bucket.
    pub fn new(limit: BucketLimit) -> Self {
        let now = Instant::now();
        let capacity = f64::from(limit.capacity.max(1));
        let refill_per_sec = if limit.refill_per_sec.is_finite() {
            limit.refill_per_sec.max(0.001)
        } else {
            0.001
        };
        TokenBucket {
            capacity,
            refill_per_sec,
            state: StdMutex::new(BucketState {
                tokens: capacity,
                last: now,
                paused_until: now,
                strikes: 0,
                free: BTreeMap::new(),
                epoch: 0,
                in_debt: false,
            }),
        }
    }

    /// The state; a poisoned lock still holds consistent numbers (no
    /// section panics half-way), so it is used as is.
    fn state(&self) -> MutexGuard<'_, BucketState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn refill(&self, s: &mut BucketState, now: Instant) {
        let elapsed = now.saturating_duration_since(s.last).as_secs_f64();
        s.tokens = (s.tokens + elapsed * self.refill_per_sec).min(self.capacity);
        s.last = now;
        if s.tokens >= 0.0 && s.in_debt {
            // Out of debt: tokens refilled past every debited slot, so a
            // freed slot is worth nothing more than what the bucket holds.
            s.in_debt = false;
            s.epoch = s.epoch.wrapping_add(1);
            s.free.clear();
        }
        // Free slots that passed unused are given back as passed turns are.
        while let Some((&slot, _)) = s.free.first_key_value() {
            if slot + SLOT_EPSILON > now {
                break;
            }
            let n = s.free.remove(&slot).unwrap_or(0);
            for _ in 0..n {
                Self::give_back_passed(s);
            }
        }
    }

    /// Gives back the token of a turn whose slot passed unused, while the
    /// bucket is still in the debt it was in when the turn was reserved
    /// (see [`TokenBucket::refund`]).
    fn give_back_passed(s: &mut BucketState) {
        if s.in_debt && s.tokens < 0.0 {
            s.tokens = (s.tokens + 1.0).min(0.0);
        }
    }

    /// The slot of the last debited token (the queue's tail), if in debt.
    fn tail(&self, s: &BucketState, now: Instant) -> Option<Instant> {
        (s.tokens < 0.0).then(|| now + Duration::from_secs_f64(-s.tokens / self.refill_per_sec))
    }

    /// Takes one token, waiting until it is available. Returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let wait = self.reserve().await;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        wait
    }

    /// Takes one token now and returns when it is due (zero: at once). The
    /// caller may spend it later, e.g. a controller that requeues a machine
    /// until its turn instead of holding a worker: callers are served in
    /// the order they reserved, so a queue of waiting machines never stampedes.
    pub async fn reserve(&self) -> Duration {
        self.reserve_turn().await.1
    }

    /// Like [`TokenBucket::reserve`], also returning the [`Turn`] to give
    /// back with [`TokenBucket::refund`] if it will not be spent. The
    /// earliest free slot of a refunded turn still ahead is taken first;
    /// otherwise a token is debited at the queue's tail.
    pub async fn reserve_turn(&self) -> (Turn, Duration) {
        let mut s = self.state();
        let now = Instant::now();
        self.refill(&mut s, now);
        let slot = match s.free.first_entry() {
            Some(mut e) => {
                let slot = *e.key();
                if *e.get() > 1 {
                    *e.get_mut() -= 1;
                } else {
                    e.remove();
                }
                slot
            }
            None => {
                s.tokens -= 1.0;
                if s.tokens < 0.0 && !s.in_debt {
                    s.in_debt = true;
                }
                self.tail(&s, now).unwrap_or(now)
            }
        };
        let turn = Turn {
            slot,
            epoch: s.epoch,
        };
        let wait =
            slot.saturating_duration_since(now) + s.paused_until.saturating_duration_since(now);
        (turn, wait)
    }

    /// Gives back a reserved turn that will not be spent (its caller is
    /// gone, or came back too late to use it).
    ///
    /// - A slot still ahead is kept for the next caller: nobody queued
    ///   behind it is moved (their turns are promised), but the next
    ///   reservation takes that slot instead of a new one at the tail. A
    ///   freed slot at the tail shrinks the debt instead, so a queue freed
    ///   from its end is gone entirely.
    /// - A slot that passed unused gives its token back to the debt (never
    ///   above zero: it shrinks the queue, it never adds a burst), and only
    ///   while the bucket has stayed in debt since the turn was reserved: a
    ///   bucket that refilled meanwhile already holds every token the cloud
    ///   banked. The cloud's bucket, whose burst is larger than the one the
    ///   caller configures here (the runtime's pacer keeps one back), banked
    ///   the unused token, so the queue moving up by one stays within it.
    pub async fn refund(&self, turn: Turn) {
        let mut s = self.state();
        let now = Instant::now();
        self.refill(&mut s, now);
        if turn.slot > now + SLOT_EPSILON {
            *s.free.entry(turn.slot).or_insert(0) += 1;
            // Free slots at the tail are debt nobody waits for.
            while let (Some(tail), Some((&last, _))) = (self.tail(&s, now), s.free.last_key_value())
            {
                if last + SLOT_EPSILON < tail {
                    break;
                }
                if let Some(n) = s.free.get_mut(&last) {
                    *n -= 1;
                    if *n == 0 {
                        s.free.remove(&last);
                    }
                }
                s.tokens += 1.0;
            }
        } else if turn.epoch == s.epoch {
            Self::give_back_passed(&mut s);
        }
    }

    /// How many refunded slots wait for a caller.
    pub async fn free_slots(&self) -> usize {
        let s = self.state();
        s.free.values().map(|n| *n as usize).sum()
    }

    /// How long a caller arriving now would wait for a token (without taking it).
    pub async fn wait_estimate(&self) -> Duration {
        let mut s = self.state();
        let now = Instant::now();
        self.refill(&mut s, now);
        let deficit = match s.free.first_key_value() {
            Some((slot, _)) => slot.saturating_duration_since(now),
            None if s.tokens < 1.0 => {
                Duration::from_secs_f64((1.0 - s.tokens) / self.refill_per_sec)
            }
            None => Duration::ZERO,
        };
        deficit + s.paused_until.saturating_duration_since(now)
    }

    /// Records a throttled answer: empties the bucket and pauses it for a
    /// pause that doubles with every consecutive strike (capped), returning the pause.
    pub async fn penalize(&self, base: Duration, max: Duration) -> Duration {
        let mut s = self.state();
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
        let mut s = self.state();
        s.strikes = 0;
    }
}

/// The buckets of one scope (e.g. one account and region), one per class `C`.
/// A disabled limiter never waits.
pub struct Limiter<C> {
    buckets: Option<HashMap<C, TokenBucket>>,
}

impl<C: Copy + Eq + Hash> Limiter<C> {
    /// Buckets with the given limits; a class without a limit is not limited.
    pub fn new(limits: impl IntoIterator<Item = (C, BucketLimit)>) -> Self {
        let buckets = limits
            .into_iter()
            .map(|(c, l)| (c, TokenBucket::new(l)))
            .collect();
        Limiter {
            buckets: Some(buckets),
        }
    }

    /// A limiter that never waits.
    pub fn disabled() -> Self {
        Limiter { buckets: None }
    }

    fn bucket(&self, class: C) -> Option<&TokenBucket> {
        self.buckets.as_ref().and_then(|b| b.get(&class))
    }

    /// Takes a token of the class; returns how long it waited.
    pub async fn acquire(&self, class: C) -> Duration {
        match self.bucket(class) {
            Some(b) => b.acquire().await,
            None => Duration::ZERO,
        }
    }

    /// Takes a token of `class` now and returns when it is due (see
    /// [`TokenBucket::reserve`]); zero for a class without a bucket.
    pub async fn reserve(&self, class: C) -> Duration {
        match self.bucket(class) {
            Some(b) => b.reserve().await,
            None => Duration::ZERO,
        }
    }

    /// Like [`Limiter::reserve`], with the [`Turn`] to give back; `None`
    /// for a class without a bucket (nothing to give back).
    pub async fn reserve_turn(&self, class: C) -> (Option<Turn>, Duration) {
        match self.bucket(class) {
            Some(b) => {
                let (turn, wait) = b.reserve_turn().await;
                (Some(turn), wait)
            }
            None => (None, Duration::ZERO),
        }
    }

    /// Gives back a turn of `class` that will not be spent (see
    /// [`TokenBucket::refund`]).
    pub async fn refund(&self, class: C, turn: Turn) {
        if let Some(b) = self.bucket(class) {
            b.refund(turn).await;
        }
    }

    /// How long a call of the class would wait now.
    pub async fn wait_estimate(&self, class: C) -> Duration {
        match self.bucket(class) {
            Some(b) => b.wait_estimate().await,
            None => Duration::ZERO,
        }
    }

    /// Pauses the class after a throttled answer; returns the pause.
    pub async fn penalize(&self, class: C, base: Duration, max: Duration) -> Duration {
        match self.bucket(class) {
            Some(b) => b.penalize(base, max).await,
            None => base.min(max),
        }
    }

    /// Records a success of the class.
    pub async fn succeeded(&self, class: C) {
        if let Some(b) = self.bucket(class) {
            b.succeeded().await;
        }
    }
}

/// The limiters of every scope a driver talks to (accounts, regions,
/// projects), created on first use with the same limits. A scope unused for
/// [`Budget::IDLE`] is dropped at the next look-up, so credentials that come
/// and go do not pile up.
pub struct Budget<C> {
    enabled: bool,
    limits: Vec<(C, BucketLimit)>,
    scopes: StdMutex<HashMap<String, Scope<C>>>,
}

/// A scope's limiter and when it was last used.
type Scope<C> = (Arc<Limiter<C>>, Instant);

impl<C: Copy + Eq + Hash> Budget<C> {
    /// How long a scope is kept without use.
    pub const IDLE: Duration = Duration::from_secs(3600);

    /// A budget with these limits per scope; `enabled = false` never waits.
    pub fn new(enabled: bool, limits: impl IntoIterator<Item = (C, BucketLimit)>) -> Self {
        Budget {
            enabled,
            limits: limits.into_iter().collect(),
            scopes: StdMutex::new(HashMap::new()),
        }
    }

    /// The limiter of a scope (e.g. `"<access key>/<region>"`; hash secrets first).
    pub fn scope(&self, key: &str) -> Arc<Limiter<C>> {
        let now = Instant::now();
        let mut scopes = match self.scopes.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        scopes.retain(|k, (l, used)| {
            k == key
                || Arc::strong_count(l) > 1
                || now.saturating_duration_since(*used) < Self::IDLE
        });
        let entry = scopes.entry(key.to_string()).or_insert_with(|| {
            let limiter = if self.enabled {
                Limiter::new(self.limits.iter().copied())
            } else {
                Limiter::disabled()
            };
            (Arc::new(limiter), now)
        });
        entry.1 = now;
        entry.0.clone()
    }

    /// How many scopes are kept.
    pub fn scope_count(&self) -> usize {
        match self.scopes.lock() {
            Ok(g) => g.len(),
            Err(poisoned) => poisoned.into_inner().len(),
        }
    }
}
