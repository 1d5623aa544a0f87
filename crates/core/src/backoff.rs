//! Per-machine exponential backoff with jitter.
//!
//! The reference retries with fixed periods (5 s, 3 min, 10 min). mcm-rs backs
//! off exponentially between the short and the long period, with jitter so that
//! many machines failing together do not retry in lock-step, and resets on
//! success. Cloud throttling starts further up the ladder.

use std::time::Duration;

/// The reference's fixed retry periods (`machineutils`).
pub mod periods {
    use std::time::Duration;
    /// Retry after an optimistic-concurrency conflict.
    pub const CONFLICT: Duration = Duration::from_millis(200);
    /// The short retry period.
    pub const SHORT: Duration = Duration::from_secs(5);
    /// The medium retry period.
    pub const MEDIUM: Duration = Duration::from_secs(180);
    /// The long retry period (also the periodic re-check).
    pub const LONG: Duration = Duration::from_secs(600);
}

/// How a failure should be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// An ordinary failure: start at the short period.
    Normal,
    /// The cloud throttled us (rate limit, `ResourceExhausted`): start higher.
    Throttled,
}

/// Backoff policy: `min * 2^failures`, capped at `max`, with ±`jitter` fraction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first delay.
    pub min: Duration,
    /// The largest delay.
    pub max: Duration,
    /// The jitter fraction (0.0..=1.0) applied symmetrically.
    pub jitter: f64,
    /// Extra doublings applied to throttling failures.
    pub throttle_boost: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            min: crate::defaults::MIN_RETRY_PERIOD.value,
            max: crate::defaults::MAX_RETRY_PERIOD.value,
            jitter: 0.2,
            throttle_boost: 3,
        }
    }
}

impl Backoff {
    /// The un-jittered delay after `failures` consecutive failures (1 = first failure).
    pub fn base_delay(&self, failures: u32, kind: FailureKind) -> Duration {
        let boost = match kind {
            FailureKind::Normal => 0,
            FailureKind::Throttled => self.throttle_boost,
        };
        let exp = failures.saturating_sub(1).saturating_add(boost).min(30);
        let d = self.min.saturating_mul(1u32 << exp);
        d.min(self.max)
    }

    /// The delay with jitter; `unit` is a uniform sample in `[0, 1)` (the caller
    /// supplies randomness, which keeps this function pure).
    ///
    /// The jitter is applied AFTER the cap ("equal jitter"): the delay is drawn
    /// from `[capped × (1 − jitter), capped]`, never below `min`. So machines
    /// that all reached the cap still spread out instead of retrying together,
    /// and nothing is retried more often than `min`. Never panics, whatever
    /// the settings (a `max` below `min` acts as `min`).
    pub fn delay(&self, failures: u32, kind: FailureKind, unit: f64) -> Duration {
        let capped = self.base_delay(failures, kind).max(self.min).as_secs_f64();
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let jitter = if self.jitter.is_finite() {
            self.jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let lower = (capped * (1.0 - jitter)).max(self.min.as_secs_f64());
        let secs = lower + (capped - lower).max(0.0) * unit;
        Duration::try_from_secs_f64(secs).unwrap_or(self.min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_short_and_cap_at_long() {
        let b = Backoff::default();
        assert_eq!(b.base_delay(1, FailureKind::Normal), Duration::from_secs(5));
        assert_eq!(
            b.base_delay(2, FailureKind::Normal),
            Duration::from_secs(10)
        );
        assert_eq!(
            b.base_delay(4, FailureKind::Normal),
            Duration::from_secs(40)
        );
        assert_eq!(b.base_delay(20, FailureKind::Normal), periods::LONG);
        assert_eq!(b.base_delay(u32::MAX, FailureKind::Normal), periods::LONG);
    }

    #[test]
    fn throttling_starts_further_up_the_ladder() {
        let b = Backoff::default();
        assert_eq!(
            b.base_delay(1, FailureKind::Throttled),
            Duration::from_secs(40)
        );
        assert!(b.base_delay(1, FailureKind::Throttled) > b.base_delay(1, FailureKind::Normal));
    }

    #[test]
    fn jitter_stays_within_its_band_and_spreads_retries() {
        let b = Backoff::default();
        let lo = b.delay(3, FailureKind::Normal, 0.0);
        let hi = b.delay(3, FailureKind::Normal, 0.999);
        assert!(lo >= Duration::from_secs_f64(20.0 * 0.8 - 0.001));
        assert!(hi <= Duration::from_secs(20));
        assert!(hi > lo);
        // never above the cap, even with jitter
        assert!(b.delay(50, FailureKind::Throttled, 0.999) <= periods::LONG);
    }

    #[test]
    fn capped_retries_are_spread_not_lumped_at_the_cap() {
        let b = Backoff::default();
        let at_cap: Vec<Duration> = [0.0, 0.25, 0.5, 0.75, 0.999]
            .iter()
            .map(|u| b.delay(40, FailureKind::Throttled, *u))
            .collect();
        assert!(at_cap.windows(2).all(|w| w[0] < w[1]), "{at_cap:?}");
        assert!(at_cap[0] >= periods::LONG.mul_f64(0.8 - 1e-9));
        assert!(at_cap[4] <= periods::LONG);
    }

    #[test]
    fn never_more_often_than_the_minimum_and_never_panics() {
        let b = Backoff::default();
        for failures in [0, 1, 2] {
            assert!(b.delay(failures, FailureKind::Normal, 0.0) >= periods::SHORT);
        }
        // A max below min (a bad flag pair) acts as min instead of panicking.
        let odd = Backoff {
            min: Duration::from_secs(60),
            max: Duration::from_secs(10),
            jitter: 5.0,
            throttle_boost: 3,
        };
        assert_eq!(
            odd.delay(3, FailureKind::Normal, f64::NAN),
            Duration::from_secs(60)
        );
        assert_eq!(
            odd.delay(u32::MAX, FailureKind::Throttled, 0.5),
            Duration::from_secs(60)
        );
    }
}
