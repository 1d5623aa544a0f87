//! Client-side token buckets, one per EC2 throttling class.
//!
//! EC2 throttles per account and region with token buckets per action class
//! (RunInstances: 5 requests burst, 2/s refill; describes: 100 burst, 20/s; ...).
//! The driver keeps a local copy of those buckets so that a scale-up waits in
//! the controller instead of drawing `RequestLimitExceeded` answers, and a
//! throttled answer pauses the whole class for everyone in this process.

use crate::config::RateLimits;

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
}

/// The buckets of one account and region: the shared cloud-budget limiter
/// (`mcm_driver::budget`) over EC2's action classes.
pub type Limiter = mcm_driver::budget::Limiter<ActionClass>;

/// A limiter with the configured limits (one that never waits when disabled).
pub fn limiter(limits: &RateLimits) -> Limiter {
    if !limits.enabled {
        return Limiter::disabled();
    }
    Limiter::new(ActionClass::ALL.iter().map(|c| (*c, limits.limit(*c))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_disabled_limiter_never_waits() {
        let l = limiter(&RateLimits {
            enabled: false,
            ..RateLimits::default()
        });
        for _ in 0..100 {
            assert_eq!(l.acquire(ActionClass::RunInstances).await, Duration::ZERO);
        }
    }
}
