//! The cloud budget: client-side token buckets per cloud operation class.
//!
//! Clouds throttle per account (and region or project) with token buckets per
//! class of operation: EC2's RunInstances bucket holds 5 requests and refills
//! 2 per second, Compute Engine counts writes per minute, and so on. A driver
//! keeps a local copy of those buckets, so that a scale-up waits in the
//! controller instead of drawing throttling answers, and a throttled answer
//! pauses the whole class for everyone in this process. Every provider crate
//! uses this one mechanism with its cloud's published limits
//! (see `docs/design/driver.md`, "Cloud budget").
//!
//! - [`TokenBucket`]: one bucket; callers reserve a token and sleep until it is
//!   due, so waiting callers are served in arrival order and nobody polls. A
//!   reserved [`Turn`] that will not be spent can be given back
//!   ([`TokenBucket::refund`]), so the queue behind it moves up.
//! - [`Limiter`]: the buckets of one scope (account + region, project, ...),
//!   one per operation class `C`.
//! - [`Budget`]: the limiters of every scope a driver talks to, created on
//!   first use and dropped when no call has used them for a while.
//!
//! [`BucketLimit`] is part of the driver contract ([`crate::Driver::rate_limits`])
//! and always here; the buckets sleep on tokio's clock and come with the
//! `budget` feature, so that crates which only read the contract's types
//! (mcm-core) do not build tokio.

#[cfg(any(test, feature = "budget"))]
mod bucket;
#[cfg(any(test, feature = "budget"))]
pub use bucket::{Budget, Limiter, TokenBucket, Turn};

/// One token bucket's limits: burst capacity and refill rate (tokens per second).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketLimit {
    /// Burst size.
    pub capacity: u32,
    /// Sustained rate, tokens per second.
    pub refill_per_sec: f64,
}

impl BucketLimit {
    /// A limit of `capacity` burst and `refill_per_sec` sustained.
    pub const fn new(capacity: u32, refill_per_sec: f64) -> Self {
        BucketLimit {
            capacity,
            refill_per_sec,
        }
    }

    /// A limit given per minute, as Compute Engine and Azure publish theirs:
    /// the whole minute's quota is the burst.
    pub fn per_minute(per_minute: u32) -> Self {
        BucketLimit {
            capacity: per_minute.max(1),
            refill_per_sec: f64::from(per_minute.max(1)) / 60.0,
        }
    }
}

#[cfg(test)]
mod tests;
