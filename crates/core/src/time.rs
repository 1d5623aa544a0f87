//! The one conversion between Kubernetes times and chrono.
//!
//! A Kubernetes `metav1.Time` travels as RFC 3339 with whole seconds: the
//! API server stores no fraction. [`to_k8s`] therefore truncates to whole
//! seconds, so a value mcm-rs builds equals the value it reads back and a
//! status write never differs from the stored one by sub-second noise.
//! [`from_k8s`] keeps whatever the value holds (whole seconds when it came
//! from the API server).

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// A Kubernetes time as a chrono time. Never fails: every Kubernetes time
/// fits in chrono's range (the epoch is returned if one ever did not).
pub fn from_k8s(t: &Time) -> DateTime<Utc> {
    let (mut secs, mut nanos) = (t.0.as_second(), t.0.subsec_nanosecond());
    // jiff gives a negative fraction for times before the epoch; chrono
    // wants a fraction in [0, 1 s).
    if nanos < 0 {
        secs -= 1;
        nanos += 1_000_000_000;
    }
    DateTime::from_timestamp(secs, u32::try_from(nanos).unwrap_or(0)).unwrap_or_default()
}

/// A chrono time as a Kubernetes time, truncated to whole seconds as the API
/// server stores it (times outside Kubernetes' range, years -9999..=9999,
/// become the epoch).
pub fn to_k8s(t: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(t.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn k8s(secs: i64, nanos: i32) -> Time {
        Time(Timestamp::new(secs, nanos).unwrap())
    }

    #[test]
    fn to_k8s_truncates_to_whole_seconds() {
        let t = Utc.timestamp_opt(1_700_000_000, 999_999_999).unwrap();
        assert_eq!(to_k8s(t), k8s(1_700_000_000, 0));
    }

    #[test]
    fn from_k8s_keeps_the_fraction() {
        let t = from_k8s(&k8s(1_700_000_000, 250_000_000));
        assert_eq!(t, Utc.timestamp_opt(1_700_000_000, 250_000_000).unwrap());
    }

    #[test]
    fn whole_seconds_round_trip_unchanged() {
        let t = Utc.timestamp_opt(1_700_000_123, 0).unwrap();
        assert_eq!(from_k8s(&to_k8s(t)), t);
        let k = k8s(-86_400, 0);
        assert_eq!(to_k8s(from_k8s(&k)), k);
    }

    #[test]
    fn from_k8s_before_the_epoch_keeps_the_instant() {
        // -1.5 s: jiff says (-1 s, -0.5 s), chrono wants (-2 s, +0.5 s).
        let t = from_k8s(&k8s(-1, -500_000_000));
        assert_eq!(t, Utc.timestamp_opt(-2, 500_000_000).unwrap());
    }

    #[test]
    fn to_k8s_truncates_before_the_epoch_to_the_earlier_second() {
        let t = Utc.timestamp_opt(-2, 500_000_000).unwrap();
        assert_eq!(to_k8s(t), k8s(-2, 0));
    }

    #[test]
    fn to_k8s_outside_the_kubernetes_range_is_the_epoch() {
        let far = Utc.with_ymd_and_hms(20_000, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(to_k8s(far), k8s(0, 0));
    }
}
