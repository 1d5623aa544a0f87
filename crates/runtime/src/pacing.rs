//! The controller's queue in front of the cloud (design: docs/design/runtime.md,
//! "Pacing cloud calls").
//!
//! A driver declares its cloud's rate limits ([`Driver::rate_limits`]) and the
//! scope they apply to ([`Driver::rate_limit_scope`]). Before a machine's
//! provider call the controller takes a token of that operation from the
//! scope's budget. A token due within [`HOLD`] is waited for in the reconcile;
//! a later one stays reserved for the machine, which is requeued until its
//! turn and frees its worker meanwhile. Tokens are handed out in the order
//! machines asked, so a scale-up of hundreds of machines is one queue that
//! drains at the cloud's rate, not a storm of throttled calls.
//!
//! A throttled answer pauses the operation for the whole scope (the limits
//! were wrong or another client shares the account) and is never counted as
//! the machine's failure.
//!
//! A reserved turn that will not be spent is given back
//! ([`mcm_driver::budget::TokenBucket::refund`]), so the queue behind it moves up instead of
//! waiting out debt nobody owes: the turns of a machine being deleted
//! ([`Pacer::give_back`], [`Pacer::forget`]), a turn whose machine did not
//! come back within [`STALE`] of it (swept by [`Pacer::admit`]), and the
//! turns of a machine whose entry is pruned because it is gone.

use crate::keys::ObjectKey;
use crate::pruned::Pruned;
use mcm_driver::budget::{BucketLimit, Budget, Limiter, Turn};
use mcm_driver::{CloudOp, Driver, MachineRequest};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The longest wait for a token spent inside a reconcile; a later token is
/// reserved and the machine requeued until it is due.
pub(crate) const HOLD: Duration = Duration::from_secs(1);

/// The first pause of an operation after a throttled answer (doubles per
/// consecutive throttled answer, up to [`PAUSE_MAX`]).
pub(crate) const PAUSE_BASE: Duration = Duration::from_secs(1);
/// The longest pause after throttled answers.
pub(crate) const PAUSE_MAX: Duration = Duration::from_secs(30);

/// A turn that passed more than this long ago without its machine coming
/// back for it is stale: it is given back (the queue behind it moves up),
/// and a machine that comes back later queues again. A requeued machine
/// comes back at its turn; this much lateness covers a busy worker pool.
pub(crate) const STALE: Duration = HOLD;

/// The answer of [`Pacer::admit`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Call now (the token was taken; any short wait is over).
    Go,
    /// Not before this long: requeue; the token stays reserved for the machine.
    Wait(Duration),
}

/// The share of a declared refill rate the pacer uses, and the burst it
/// keeps back: the cloud's bucket and ours start and refill at slightly
/// different instants, and a call that arrives a millisecond early is
/// throttled, so ours runs a little behind the cloud's.
const RATE_MARGIN: f64 = 0.97;
const BURST_MARGIN: u32 = 1;

/// The budgets of every driver and the machines' reserved tokens (per
/// machine, per operation: a status probe never spends a create turn).
#[derive(Default)]
pub struct Pacer {
    budgets: Mutex<HashMap<String, Arc<Budget<CloudOp>>>>,
    reserved: Mutex<Pruned<ObjectKey, Vec<Held>>>,
    /// When stale turns were last swept (at most once per [`STALE`]).
    swept: Mutex<Option<Instant>>,
}

/// The budget of a driver's declared limits, with the pacer's margins.
async fn build_budget(driver: &dyn Driver) -> (Budget<CloudOp>, usize) {
    let limits: Vec<_> = driver
        .rate_limits()
        .await
        .into_iter()
        .map(|(op, l)| {
            let capacity = l.capacity.saturating_sub(BURST_MARGIN).max(1);
            (
                op,
                BucketLimit::new(capacity, l.refill_per_sec * RATE_MARGIN),
            )
        })
        .collect();
    let n = limits.len();
    (Budget::new(n > 0, limits), n)
}

/// A machine's reserved turn of one operation.
struct Held {
    op: CloudOp,
    /// When the machine may call (the turn's slot, or later while the
    /// operation is paused after a throttled answer).
    due: Instant,
    /// What gives the turn back (`None`: the operation has no bucket).
    turn: Option<Turn>,
    limiter: Arc<Limiter<CloudOp>>,
}

impl Held {
    fn stale(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.due) > STALE
    }
}

/// Gives the turns back to their buckets.
async fn refund(turns: Vec<Held>) {
    for h in turns {
        if let Some(turn) = h.turn {
            h.limiter.refund(h.op, turn).await;
        }
    }
}

impl Pacer {
    /// An empty pacer.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    async fn budget(&self, provider: &str, driver: &dyn Driver) -> Option<Arc<Budget<CloudOp>>> {
        if let Some(b) = self.budgets.lock().ok()?.get(provider) {
            return Some(b.clone());
        }
        let (built, _) = build_budget(driver).await;
        let mut budgets = self.budgets.lock().ok()?;
        Some(
            budgets
                .entry(provider.to_string())
                .or_insert_with(|| Arc::new(built))
                .clone(),
        )
    }

    /// Registers (again) the rate limits `driver` declares now for
    /// `provider`, replacing what an earlier call found: a driver in another
    /// process declares its limits only once it answers (its `Info`), which
    /// may be after the first machine asked. Turns reserved on the replaced
    /// budget stay valid for their machines. Returns how many operations
    /// are limited.
    pub async fn register(&self, provider: &str, driver: &dyn Driver) -> usize {
        let (built, n) = build_budget(driver).await;
        if let Ok(mut budgets) = self.budgets.lock() {
            budgets.insert(provider.to_string(), Arc::new(built));
        }
        n
    }

    /// Whether machine `key` may make its `op` call now. `exists` says which
    /// machines still exist (the reservations of gone ones are given back
    /// when their entries are pruned).
    pub(crate) async fn admit(
        &self,
        key: &ObjectKey,
        provider: &str,
        driver: &dyn Driver,
        req: &MachineRequest,
        op: CloudOp,
        exists: impl Fn(&ObjectKey) -> bool,
    ) -> Admission {
        let now = Instant::now();
        let mut give_back = self.sweep(now);
        // A turn that passed more than STALE ago is stale: the cloud's
        // bucket banked at most its burst meanwhile, so machines that all
        // come back late must not spend their old turns at once. Such a
        // machine gives its turn back and queues again.
        let held = match self.reserved.lock() {
            Ok(mut r) => r.get_mut(key).and_then(|mine| {
                let i = mine.iter().position(|h| h.op == op)?;
                if mine[i].stale(now) {
                    give_back.push(mine.remove(i));
                    None
                } else {
                    Some(mine[i].due)
                }
            }),
            Err(_) => None,
        };
        refund(give_back).await;
        let due = match held {
            Some(due) => due,
            None => {
                let Some(budget) = self.budget(provider, driver).await else {
                    return Admission::Go;
                };
                let limiter = budget.scope(&driver.rate_limit_scope(req));
                // Prune first: the turns of gone machines go back before
                // this one queues behind them.
                let mut pruned = Vec::new();
                if let Ok(mut r) = self.reserved.lock() {
                    r.entry_collecting(key, Vec::new(), &exists, &mut pruned);
                }
                refund(pruned.into_iter().flatten().collect()).await;
                let (turn, wait) = limiter.reserve_turn(op).await;
                let due = now + wait;
                if wait > HOLD {
                    if let Ok(mut r) = self.reserved.lock() {
                        r.entry(key, Vec::new(), &exists).push(Held {
                            op,
                            due,
                            turn,
                            limiter,
                        });
                    }
                }
                due
            }
        };
        let wait = due.saturating_duration_since(now);
        if wait > HOLD {
            return Admission::Wait(wait);
        }
        // The turn is spent now.
        if let Ok(mut r) = self.reserved.lock() {
            if let Some(mine) = r.get_mut(key) {
                mine.retain(|h| h.op != op);
                if mine.is_empty() {
                    r.remove(key);
                }
            }
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Admission::Go
    }

    /// Takes the stale turns of every machine out of the reservations, at
    /// most once per [`STALE`] (the sweep walks every reservation).
    fn sweep(&self, now: Instant) -> Vec<Held> {
        let mut stale = Vec::new();
        let Ok(mut swept) = self.swept.lock() else {
            return stale;
        };
        if swept.is_some_and(|at| now.saturating_duration_since(at) < STALE) {
            return stale;
        }
        *swept = Some(now);
        if let Ok(mut r) = self.reserved.lock() {
            r.retain(|_, mine| {
                let mut i = 0;
                while i < mine.len() {
                    if mine[i].stale(now) {
                        stale.push(mine.remove(i));
                    } else {
                        i += 1;
                    }
                }
                !mine.is_empty()
            });
        }
        stale
    }

    /// Records the answer of an admitted call: a throttled one pauses `op`
    /// for the scope; any other ends the scope's run of throttled answers.
    pub(crate) async fn answered(
        &self,
        provider: &str,
        driver: &dyn Driver,
        req: &MachineRequest,
        op: CloudOp,
        throttled: bool,
    ) {
        let Some(budget) = self.budget(provider, driver).await else {
            return;
        };
        let limiter = budget.scope(&driver.rate_limit_scope(req));
        if throttled {
            limiter.penalize(op, PAUSE_BASE, PAUSE_MAX).await;
        } else {
            limiter.succeeded(op).await;
        }
    }

    /// Gives back machine `key`'s reserved turns of `ops` (e.g. a machine
    /// being deleted will never create).
    pub(crate) async fn give_back(&self, key: &ObjectKey, ops: &[CloudOp]) {
        let mut turns = Vec::new();
        if let Ok(mut r) = self.reserved.lock() {
            if let Some(mine) = r.get_mut(key) {
                let mut i = 0;
                while i < mine.len() {
                    if ops.contains(&mine[i].op) {
                        turns.push(mine.remove(i));
                    } else {
                        i += 1;
                    }
                }
                if mine.is_empty() {
                    r.remove(key);
                }
            }
        }
        refund(turns).await;
    }

    /// Forgets a machine's reservations and gives their turns back (it was
    /// deleted or needs no call).
    pub(crate) async fn forget(&self, key: &ObjectKey) {
        let turns = match self.reserved.lock() {
            Ok(mut r) => r.remove(key).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        refund(turns).await;
    }

    /// How long machine `key` still waits for its reserved `op` turn
    /// (`None`: it holds none), for tests and diagnostics.
    pub fn turn(&self, key: &ObjectKey, op: CloudOp) -> Option<Duration> {
        let now = Instant::now();
        let r = self.reserved.lock().ok()?;
        r.get(key)?
            .iter()
            .find(|h| h.op == op)
            .map(|h| h.due.saturating_duration_since(now))
    }

    /// How many turns are reserved.
    pub fn reserved_turns(&self) -> usize {
        self.reserved
            .lock()
            .map(|r| r.values().map(Vec::len).sum())
            .unwrap_or(0)
    }
}

#[cfg(test)]
pub(crate) mod tests;
