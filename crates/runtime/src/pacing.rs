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

use crate::bounded::Pruned;
use mcm_driver::budget::{BucketLimit, Budget};
use mcm_driver::{CloudOp, Driver, MachineRequest};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The longest wait for a token spent inside a reconcile; a later token is
/// reserved and the machine requeued until it is due.
pub const HOLD: Duration = Duration::from_secs(1);

/// The first pause of an operation after a throttled answer (doubles per
/// consecutive throttled answer, up to [`PAUSE_MAX`]).
pub const PAUSE_BASE: Duration = Duration::from_secs(1);
/// The longest pause after throttled answers.
pub const PAUSE_MAX: Duration = Duration::from_secs(30);

/// The answer of [`Pacer::admit`].
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
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
    reserved: Mutex<Pruned<Vec<(CloudOp, Instant)>>>,
}

impl Pacer {
    /// An empty pacer.
    pub fn new() -> Self {
        Self::default()
    }

    async fn budget(&self, provider: &str, driver: &dyn Driver) -> Option<Arc<Budget<CloudOp>>> {
        if let Some(b) = self.budgets.lock().ok()?.get(provider) {
            return Some(b.clone());
        }
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
        let mut budgets = self.budgets.lock().ok()?;
        Some(
            budgets
                .entry(provider.to_string())
                .or_insert_with(|| Arc::new(Budget::new(!limits.is_empty(), limits)))
                .clone(),
        )
    }

    /// Whether machine `key` may make its `op` call now. `exists` says which
    /// machines still exist (reservations of gone ones are dropped).
    pub async fn admit(
        &self,
        key: &str,
        provider: &str,
        driver: &dyn Driver,
        req: &MachineRequest,
        op: CloudOp,
        exists: impl Fn(&str) -> bool,
    ) -> Admission {
        let now = Instant::now();
        let held = self.reserved.lock().ok().and_then(|r| {
            r.get(key)
                .and_then(|v| v.iter().find(|(o, _)| *o == op).map(|(_, due)| *due))
        });
        // A turn that passed more than HOLD ago is stale: the cloud's bucket
        // banked at most its burst meanwhile, so machines that all come back
        // late must not spend their old turns at once. Such a machine queues
        // again.
        let held = held.filter(|due| now.saturating_duration_since(*due) <= HOLD);
        let due = match held {
            Some(due) => due,
            None => {
                let Some(budget) = self.budget(provider, driver).await else {
                    return Admission::Go;
                };
                let limiter = budget.scope(&driver.rate_limit_scope(req));
                now + limiter.reserve(op).await
            }
        };
        let wait = due.saturating_duration_since(now);
        if let Ok(mut r) = self.reserved.lock() {
            let mine = r.entry(key, Vec::new(), exists);
            mine.retain(|(o, _)| *o != op);
            if wait > HOLD {
                mine.push((op, due));
            } else if mine.is_empty() {
                r.remove(key);
            }
        }
        if wait > HOLD {
            return Admission::Wait(wait);
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Admission::Go
    }

    /// Records the answer of an admitted call: a throttled one pauses `op`
    /// for the scope; any other ends the scope's run of throttled answers.
    pub async fn answered(
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

    /// Forgets a machine's reservation (it was deleted or needs no call).
    pub fn forget(&self, key: &str) {
        if let Ok(mut r) = self.reserved.lock() {
            r.remove(key);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
