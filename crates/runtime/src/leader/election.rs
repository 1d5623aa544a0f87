//! The decisions of leader election, without I/O (design:
//! docs/design/leader-election.md).
//!
//! - [`Durations::validate`]: client-go's start-up checks of the three flags.
//! - [`Observer`]: when this replica last *saw* the Lease record change, by its
//!   own monotonic clock, and whether the record's holder may still be leading.
//!   The remote `renewTime` is never compared with the local clock, so clock
//!   skew between replicas cannot shorten a lease.
//! - [`Tenure`]: how long the current leader may keep leading without a
//!   successful renewal (the renew deadline), and how long the next attempt
//!   may take.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use std::time::{Duration, Instant};

/// client-go's `JitterFactor`: acquisition retries wait between the retry
/// period and 2.2 times it, and the renew deadline must exceed 1.2 retry periods.
pub(crate) const JITTER_FACTOR: f64 = 1.2;

/// `--leader-elect-lease-duration`, `-renew-deadline` and `-retry-period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durations {
    /// How long a candidate waits, from when it saw the record change, before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

/// A combination of durations client-go's `NewLeaderElector` rejects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDurations {
    /// One of the durations is zero.
    #[error("--leader-elect-{0} must be greater than zero")]
    Zero(&'static str),
    /// `lease_duration <= renew_deadline`: a candidate could take over while the leader still works.
    #[error("--leader-elect-lease-duration ({lease:?}) must be greater than --leader-elect-renew-deadline ({renew:?})")]
    LeaseNotAboveRenew {
        /// The lease duration.
        lease: Duration,
        /// The renew deadline.
        renew: Duration,
    },
    /// `renew_deadline <= retry_period * 1.2`: not even one renewal fits in the deadline.
    #[error("--leader-elect-renew-deadline ({renew:?}) must be greater than --leader-elect-retry-period ({retry:?}) times {JITTER_FACTOR}")]
    RenewNotAboveRetry {
        /// The renew deadline.
        renew: Duration,
        /// The retry period.
        retry: Duration,
    },
}

impl Durations {
    /// client-go's checks: all above zero, lease > renew > retry·1.2.
    pub fn validate(&self) -> Result<(), InvalidDurations> {
        for (name, d) in [
            ("lease-duration", self.lease_duration),
            ("renew-deadline", self.renew_deadline),
            ("retry-period", self.retry_period),
        ] {
            if d.is_zero() {
                return Err(InvalidDurations::Zero(name));
            }
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(InvalidDurations::LeaseNotAboveRenew {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline.as_secs_f64() <= self.retry_period.as_secs_f64() * JITTER_FACTOR {
            return Err(InvalidDurations::RenewNotAboveRetry {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }

    /// `spec.leaseDurationSeconds` to write: whole seconds, rounded up, so a
    /// candidate reading the record never waits less than the configured duration.
    pub(crate) fn lease_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX).max(1)
    }
}

/// The parts of a Lease whose change proves its holder (or someone) is alive:
/// client-go compares the whole leader-election record; the resourceVersion
/// changes on every write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Record {
    /// `spec.holderIdentity` ("" when released or unset).
    pub(crate) holder: String,
    /// `spec.leaseDurationSeconds`.
    pub(crate) lease_duration_seconds: Option<i32>,
    /// `spec.acquireTime`.
    pub(crate) acquire_time: Option<MicroTime>,
    /// `spec.renewTime`.
    pub(crate) renew_time: Option<MicroTime>,
    /// `spec.leaseTransitions`.
    pub(crate) transitions: Option<i32>,
    /// `metadata.resourceVersion`.
    pub(crate) resource_version: Option<String>,
}

impl Record {
    /// The record of a Lease.
    pub(crate) fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds,
            acquire_time: spec.acquire_time,
            renew_time: spec.renew_time,
            transitions: spec.lease_transitions,
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// What to do with the Lease as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// This replica holds it: write a new renewTime.
    Renew,
    /// Nobody holds it, or its holder has not changed it for a lease duration: take it over.
    TakeOver,
    /// Another replica holds it and may still be leading.
    Held {
        /// The holder.
        holder: String,
        /// How long until it may be taken over, if it does not change meanwhile.
        remaining: Duration,
    },
}

/// The last Lease record this replica saw and when (by its monotonic clock) it
/// first saw it in that state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observer {
    seen: Option<(Record, Instant)>,
}

impl Observer {
    /// A candidate that has seen nothing yet.
    pub(crate) fn new() -> Self {
        Observer::default()
    }

    /// Records a read (or our own successful write) of the Lease at `now`: the
    /// observation time moves only when the record differs from the last one.
    pub(crate) fn observe(&mut self, record: Record, now: Instant) {
        match &self.seen {
            Some((last, _)) if *last == record => {}
            _ => self.seen = Some((record, now)),
        }
    }

    /// The last record seen.
    pub(crate) fn record(&self) -> Option<&Record> {
        self.seen.as_ref().map(|(r, _)| r)
    }

    /// What to do, for `identity`, with the record last observed. The record's
    /// own `leaseDurationSeconds` counts (its holder wrote it); `fallback` when
    /// it has none. Without an observation there is nothing to hold: take over.
    pub(crate) fn decide(&self, identity: &str, fallback: Duration, now: Instant) -> Decision {
        let Some((record, seen_at)) = &self.seen else {
            return Decision::TakeOver;
        };
        if record.holder == identity {
            return Decision::Renew;
        }
        if record.holder.is_empty() {
            return Decision::TakeOver;
        }
        let duration = match record.lease_duration_seconds {
            Some(s) if s > 0 => Duration::from_secs(u64::from(s.unsigned_abs())),
            _ => fallback,
        };
        let expires = *seen_at + duration;
        if now >= expires {
            Decision::TakeOver
        } else {
            Decision::Held {
                holder: record.holder.clone(),
                remaining: expires - now,
            }
        }
    }
}

/// The leader's clock: it leads until `renew_deadline` after the start of its
/// last successful write. The write was committed after it started, so every
/// candidate sees the change after that start and waits a lease duration
/// (longer than the renew deadline) from then: the leader has stopped first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tenure {
    last_success: Instant,
    renew_deadline: Duration,
}

impl Tenure {
    /// Leadership won by a write that started at `started`.
    pub(crate) fn new(started: Instant, renew_deadline: Duration) -> Self {
        Tenure {
            last_success: started,
            renew_deadline,
        }
    }

    /// A renewal that started at `started` succeeded.
    pub(crate) fn renewed(&mut self, started: Instant) {
        self.last_success = self.last_success.max(started);
    }

    /// When leadership ends without another successful renewal.
    pub(crate) fn deadline(&self) -> Instant {
        self.last_success + self.renew_deadline
    }

    /// How long an attempt starting at `now` may take; `None`: leadership is over.
    pub(crate) fn budget(&self, now: Instant) -> Option<Duration> {
        let left = self.deadline().saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn durations(lease: u64, renew: u64, retry: u64) -> Durations {
        Durations {
            lease_duration: secs(lease),
            renew_deadline: secs(renew),
            retry_period: secs(retry),
        }
    }

    fn held_by(holder: &str, rv: &str) -> Record {
        Record {
            holder: holder.into(),
            lease_duration_seconds: Some(15),
            resource_version: Some(rv.into()),
            ..Record::default()
        }
    }

    #[test]
    fn the_reference_defaults_are_valid() {
        assert_eq!(durations(15, 10, 2).validate(), Ok(()));
    }

    #[test]
    fn durations_are_rejected_as_client_go_does() {
        assert_eq!(
            durations(10, 10, 2).validate(),
            Err(InvalidDurations::LeaseNotAboveRenew {
                lease: secs(10),
                renew: secs(10)
            })
        );
        assert!(matches!(
            durations(15, 12, 10).validate(),
            Err(InvalidDurations::RenewNotAboveRetry { .. })
        ));
        // 2.4s is exactly 1.2 × 2s: not greater.
        let edge = Durations {
            renew_deadline: Duration::from_millis(2400),
            ..durations(15, 0, 2)
        };
        assert!(matches!(
            edge.validate(),
            Err(InvalidDurations::RenewNotAboveRetry { .. })
        ));
        assert_eq!(
            durations(15, 10, 0).validate(),
            Err(InvalidDurations::Zero("retry-period"))
        );
        assert_eq!(
            durations(0, 10, 2).validate(),
            Err(InvalidDurations::Zero("lease-duration"))
        );
    }

    #[test]
    fn lease_seconds_round_up_so_candidates_never_wait_less() {
        let d = Durations {
            lease_duration: Duration::from_millis(1500),
            ..durations(0, 1, 0)
        };
        assert_eq!(d.lease_seconds(), 2);
        assert_eq!(durations(15, 10, 2).lease_seconds(), 15);
    }

    #[test]
    fn a_lease_held_by_another_is_taken_only_a_lease_duration_after_its_last_observed_change() {
        let t0 = Instant::now();
        let mut o = Observer::new();
        o.observe(held_by("a", "1"), t0);
        assert!(matches!(
            o.decide("b", secs(15), t0 + secs(14)),
            Decision::Held { remaining, .. } if remaining == secs(1)
        ));
        assert_eq!(o.decide("b", secs(15), t0 + secs(15)), Decision::TakeOver);
    }

    #[test]
    fn every_change_of_the_record_restarts_the_wait() {
        let t0 = Instant::now();
        let mut o = Observer::new();
        o.observe(held_by("a", "1"), t0);
        o.observe(held_by("a", "2"), t0 + secs(10));
        // The same record read again does not move the observation time.
        o.observe(held_by("a", "2"), t0 + secs(20));
        assert!(matches!(
            o.decide("b", secs(15), t0 + secs(24)),
            Decision::Held { .. }
        ));
        assert_eq!(o.decide("b", secs(15), t0 + secs(25)), Decision::TakeOver);
    }

    #[test]
    fn the_remote_renew_time_is_never_compared_with_the_local_clock() {
        let t0 = Instant::now();
        let mut o = Observer::new();
        // The holder's clock is an hour behind: its renewTime looks stale.
        let stale = Timestamp::now()
            .checked_sub(jiff_hours(1))
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let record = Record {
            renew_time: Some(MicroTime(stale)),
            ..held_by("a", "7")
        };
        o.observe(record, t0);
        assert!(matches!(
            o.decide("b", secs(15), t0 + secs(1)),
            Decision::Held { .. }
        ));
    }

    fn jiff_hours(h: i64) -> k8s_openapi::jiff::SignedDuration {
        k8s_openapi::jiff::SignedDuration::from_hours(h)
    }

    #[test]
    fn a_released_or_missing_lease_is_taken_at_once_and_our_own_is_renewed() {
        let t0 = Instant::now();
        let mut o = Observer::new();
        assert_eq!(o.decide("b", secs(15), t0), Decision::TakeOver);
        o.observe(held_by("", "3"), t0);
        assert_eq!(o.decide("b", secs(15), t0), Decision::TakeOver);
        o.observe(held_by("b", "4"), t0);
        assert_eq!(o.decide("b", secs(15), t0), Decision::Renew);
    }

    #[test]
    fn the_records_lease_duration_counts_and_the_flag_is_the_fallback() {
        let t0 = Instant::now();
        let mut o = Observer::new();
        o.observe(
            Record {
                lease_duration_seconds: Some(40),
                ..held_by("a", "1")
            },
            t0,
        );
        assert!(matches!(
            o.decide("b", secs(15), t0 + secs(30)),
            Decision::Held { .. }
        ));
        o.observe(
            Record {
                lease_duration_seconds: None,
                ..held_by("a", "2")
            },
            t0,
        );
        assert_eq!(o.decide("b", secs(15), t0 + secs(15)), Decision::TakeOver);
    }

    #[test]
    fn the_leader_stops_a_renew_deadline_after_its_last_successful_write_started() {
        let t0 = Instant::now();
        let mut t = Tenure::new(t0, secs(10));
        assert_eq!(t.budget(t0 + secs(4)), Some(secs(6)));
        t.renewed(t0 + secs(2));
        assert_eq!(t.deadline(), t0 + secs(12));
        // A late answer to an older attempt never moves the deadline back.
        t.renewed(t0 + secs(1));
        assert_eq!(t.deadline(), t0 + secs(12));
        assert_eq!(t.budget(t0 + secs(12)), None);
    }

    #[test]
    fn the_leader_stops_before_any_candidate_may_take_over() {
        // The candidate sees the leader's last write no earlier than the write
        // started; it waits lease_duration from then, the leader stops after
        // renew_deadline (< lease_duration) from then.
        let d = durations(15, 10, 2);
        let write_started = Instant::now();
        let tenure = Tenure::new(write_started, d.renew_deadline);
        let mut candidate = Observer::new();
        candidate.observe(held_by("a", "9"), write_started);
        let first_takeover = write_started + d.lease_duration;
        assert_eq!(
            candidate.decide("b", d.lease_duration, first_takeover),
            Decision::TakeOver
        );
        assert!(tenure.deadline() < first_takeover);
        assert!(matches!(
            candidate.decide("b", d.lease_duration, tenure.deadline()),
            Decision::Held { .. }
        ));
    }
}
