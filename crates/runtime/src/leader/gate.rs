//! One tenure deadline that every mutating cloud call and every drain request
//! checks first (design: docs/design/leader-election.md, "One tenure
//! deadline").
//!
//! The leader's renewal task moves the deadline forward after each
//! successful renewal ([`TenureGate::extend_to`]: the start of the write plus
//! the renew deadline, [`super::election::Tenure::deadline`]) and closes it
//! when leadership ends. A replica paused (SIGSTOP, a CPU freeze) past that
//! deadline may be polled again before its renewal task notices: whatever
//! the work then tries is refused by [`TenureGate::check`], which reads the
//! monotonic clock, not a flag that the renewal task has yet to clear.
//!
//! Without leader election the gate is [`TenureGate::unbounded`] and never
//! refuses. The decision is [`judge`], unit-tested with the clock as an
//! argument.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The state word: no tenure (not leading, or leadership ended).
const CLOSED: u64 = 0;
/// The state word: no leader election, nothing is ever refused.
const UNBOUNDED: u64 = u64::MAX;

/// The tenure's end as the decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// Without leader election: no end.
    Unbounded,
    /// Not leading (before the Lease is acquired, or after it was lost).
    Closed,
    /// Leading until this instant, unless renewed meanwhile.
    At(Instant),
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenureEnded {
    /// This replica does not hold the Lease.
    #[error("refused: this replica does not lead (it does not hold the leader lease)")]
    NotLeading,
    /// The last successful renewal is older than the renew deadline.
    #[error(
        "refused: the leader tenure ended {0:?} ago (no lease renewal within the renew deadline)"
    )]
    Expired(Duration),
}

impl From<TenureEnded> for mcm_driver::Status {
    fn from(e: TenureEnded) -> Self {
        // Unavailable: transient for this replica; the new leader acts.
        mcm_driver::Status::new(mcm_driver::Code::Unavailable, e.to_string())
    }
}

/// Whether a call at `now` is within the tenure ending at `deadline`.
pub(crate) fn judge(deadline: Deadline, now: Instant) -> Result<(), TenureEnded> {
    match deadline {
        Deadline::Unbounded => Ok(()),
        Deadline::Closed => Err(TenureEnded::NotLeading),
        Deadline::At(end) if now < end => Ok(()),
        Deadline::At(end) => Err(TenureEnded::Expired(now.saturating_duration_since(end))),
    }
}

/// The shared tenure deadline of one half (clones share it).
#[derive(Debug, Clone)]
pub struct TenureGate {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The origin of the state word's nanoseconds.
    base: Instant,
    /// [`CLOSED`], [`UNBOUNDED`] or the deadline in nanoseconds after `base`.
    state: AtomicU64,
}

impl Default for TenureGate {
    fn default() -> Self {
        Self::unbounded()
    }
}

impl TenureGate {
    fn with_state(state: u64) -> Self {
        TenureGate {
            inner: Arc::new(Inner {
                base: Instant::now(),
                state: AtomicU64::new(state),
            }),
        }
    }

    /// A gate that never refuses (no leader election).
    pub(crate) fn unbounded() -> Self {
        Self::with_state(UNBOUNDED)
    }

    /// A gate that refuses until a tenure begins.
    pub fn closed() -> Self {
        Self::with_state(CLOSED)
    }

    /// Refuses everything from now on (leadership ended, or not yet begun).
    pub(crate) fn close(&self) {
        self.inner.state.store(CLOSED, Ordering::SeqCst);
    }

    /// Leads until `deadline`; never moves an open deadline back.
    pub(crate) fn extend_to(&self, deadline: Instant) {
        let nanos = deadline
            .saturating_duration_since(self.inner.base)
            .as_nanos();
        // 1..UNBOUNDED-1: a deadline at `base` still counts as open until then.
        let word = u64::try_from(nanos)
            .unwrap_or(UNBOUNDED - 1)
            .clamp(1, UNBOUNDED - 1);
        let _ =
            self.inner
                .state
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| match cur {
                    UNBOUNDED => None,
                    cur => Some(cur.max(word)),
                });
    }

    /// The deadline as it stands.
    pub(crate) fn deadline(&self) -> Deadline {
        match self.inner.state.load(Ordering::SeqCst) {
            CLOSED => Deadline::Closed,
            UNBOUNDED => Deadline::Unbounded,
            n => Deadline::At(self.inner.base + Duration::from_nanos(n)),
        }
    }

    /// `Ok` while this replica leads by the monotonic clock; checked before
    /// every mutating cloud call and every drain request.
    pub fn check(&self) -> Result<(), TenureEnded> {
        judge(self.deadline(), Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_call_before_the_deadline_is_allowed_and_at_or_after_it_refused() {
        let t0 = Instant::now();
        let d = Deadline::At(t0 + secs(10));
        assert_eq!(judge(d, t0 + secs(9)), Ok(()));
        assert_eq!(judge(d, t0 + secs(10)), Err(TenureEnded::Expired(secs(0))));
        assert_eq!(judge(d, t0 + secs(40)), Err(TenureEnded::Expired(secs(30))));
    }

    #[test]
    fn without_leader_election_nothing_is_refused_and_without_a_lease_everything_is() {
        let t0 = Instant::now();
        assert_eq!(judge(Deadline::Unbounded, t0 + secs(1_000_000)), Ok(()));
        assert_eq!(judge(Deadline::Closed, t0), Err(TenureEnded::NotLeading));
        assert!(TenureGate::unbounded().check().is_ok());
        assert_eq!(TenureGate::closed().check(), Err(TenureEnded::NotLeading));
    }

    #[test]
    fn a_renewal_moves_the_deadline_forward_never_back_and_closing_ends_it() {
        let gate = TenureGate::closed();
        let t0 = Instant::now();
        gate.extend_to(t0 + secs(10));
        assert!(gate.check().is_ok(), "leading after the first write");
        gate.extend_to(t0 + secs(12));
        gate.extend_to(t0 + secs(11));
        assert_eq!(
            judge(gate.deadline(), t0 + secs(11)),
            Ok(()),
            "a late answer to an older renewal never moves the deadline back"
        );
        assert!(judge(gate.deadline(), t0 + secs(12)).is_err());
        let clone = gate.clone();
        gate.close();
        assert_eq!(
            clone.check(),
            Err(TenureEnded::NotLeading),
            "clones share it"
        );
    }

    #[test]
    fn a_deadline_in_the_past_refuses_at_once() {
        let gate = TenureGate::closed();
        gate.extend_to(Instant::now());
        assert!(matches!(gate.check(), Err(TenureEnded::Expired(_))));
    }

    #[test]
    fn an_unbounded_gate_stays_unbounded() {
        let gate = TenureGate::unbounded();
        gate.extend_to(Instant::now());
        assert_eq!(gate.deadline(), Deadline::Unbounded);
    }

    #[test]
    fn a_refusal_is_an_unavailable_status_naming_the_reason() {
        let s: mcm_driver::Status = TenureEnded::Expired(secs(3)).into();
        assert_eq!(s.code, mcm_driver::Code::Unavailable);
        assert!(s.to_string().contains("tenure ended"), "{s}");
    }
}
