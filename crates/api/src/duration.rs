//! Go `time.Duration` strings (`metav1.Duration` on the wire): `"20m"`, `"1h30m"`, `"2.5s"`,
//! `"300ms"`.
//!
//! The API keeps timeouts as the strings the user wrote (so objects round-trip byte for byte);
//! these helpers convert them when the controllers need a value.

use std::time::Duration;

/// Why a Go duration string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty or not of the form `[-+]?(<number><unit>)+`.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number is not followed by a unit.
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit other than ns, us, µs, ms, s, m, h.
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit {
        /// The offending unit.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// More than Go's maximum duration (about 292 years).
    #[error("duration {0:?} is out of range")]
    Overflow(String),
    /// A negative duration where only non-negative ones make sense (timeouts).
    #[error("duration {0:?} is negative")]
    Negative(String),
}

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;
/// Go durations are int64 nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Parses a Go duration string (the syntax of Go's `time.ParseDuration`) into a non-negative
/// [`Duration`]. `"0"` is zero; a leading `-` is rejected unless the value is zero.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(mcm_api::parse_duration("20m").unwrap(), Duration::from_secs(1200));
/// assert_eq!(mcm_api::parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
/// assert_eq!(mcm_api::parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
/// assert!(mcm_api::parse_duration("20").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_owned());
    let mut rest = input;
    let mut negative = false;
    if let Some(stripped) = rest.strip_prefix('-') {
        negative = true;
        rest = stripped;
    } else if let Some(stripped) = rest.strip_prefix('+') {
        rest = stripped;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }

    let mut total: u128 = 0;
    while !rest.is_empty() {
        // Integer part.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after_int) = rest.split_at(int_len);
        // Optional fraction.
        let (frac_digits, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        // Unit: everything up to the next digit or '.'.
        let unit_len = after_number
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after_number.len(), |(index, _)| index);
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_owned()));
        }
        let scale = match unit {
            "ns" => 1,
            "us" | "\u{00b5}s" | "\u{03bc}s" => NANOS_PER_MICRO,
            "ms" => NANOS_PER_MILLI,
            "s" => NANOS_PER_SECOND,
            "m" => NANOS_PER_MINUTE,
            "h" => NANOS_PER_HOUR,
            other => {
                return Err(DurationError::UnknownUnit {
                    unit: other.to_owned(),
                    input: input.to_owned(),
                })
            }
        };
        let overflow = || DurationError::Overflow(input.to_owned());
        let mut value: u128 = 0;
        for digit in int_digits.bytes() {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u128::from(digit - b'0')))
                .filter(|v| *v <= MAX_NANOS)
                .ok_or_else(overflow)?;
        }
        let mut nanos = value.checked_mul(scale).ok_or_else(overflow)?;
        // Fraction, truncated to nanosecond precision like Go.
        let mut frac_scale = scale;
        for digit in frac_digits.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * frac_scale;
        }
        total = total
            .checked_add(nanos)
            .filter(|t| *t <= MAX_NANOS)
            .ok_or_else(overflow)?;
        rest = after_unit;
    }

    if negative && total != 0 {
        return Err(DurationError::Negative(input.to_owned()));
    }
    let secs = u64::try_from(total / NANOS_PER_SECOND).map_err(|_| invalid())?;
    let sub_nanos = u32::try_from(total % NANOS_PER_SECOND).map_err(|_| invalid())?;
    Ok(Duration::new(secs, sub_nanos))
}

/// Formats a duration the way Go's `time.Duration.String()` does (`"20m0s"`, `"1h30m0s"`,
/// `"1.5s"`, `"300ms"`, `"0s"`), which is how the Go controller writes durations back.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(mcm_api::format_duration(Duration::from_secs(1200)), "20m0s");
/// assert_eq!(mcm_api::format_duration(Duration::from_millis(1500)), "1.5s");
/// assert_eq!(mcm_api::format_duration(Duration::ZERO), "0s");
/// ```
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < NANOS_PER_SECOND {
        let (unit, scale) = if nanos < NANOS_PER_MICRO {
            ("ns", 1)
        } else if nanos < NANOS_PER_MILLI {
            ("\u{00b5}s", NANOS_PER_MICRO)
        } else {
            ("ms", NANOS_PER_MILLI)
        };
        return format!("{}{unit}", fixed_point(nanos, scale));
    }
    let hours = nanos / NANOS_PER_HOUR;
    let minutes = (nanos % NANOS_PER_HOUR) / NANOS_PER_MINUTE;
    let seconds = fixed_point(nanos % NANOS_PER_MINUTE, NANOS_PER_SECOND);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// `value / scale` as a decimal without trailing zeros (`1500, 1000` → `"1.5"`).
fn fixed_point(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let fraction = value % scale;
    if fraction == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("20m", Duration::from_secs(1200)),
            ("10m", Duration::from_secs(600)),
            ("2h", Duration::from_secs(7200)),
            ("1h30m", Duration::from_secs(5400)),
            ("+5s", Duration::from_secs(5)),
            ("1.5h", Duration::from_secs(5400)),
            (".5s", Duration::from_millis(500)),
            ("5.s", Duration::from_secs(5)),
            ("300ms", Duration::from_millis(300)),
            ("10us", Duration::from_micros(10)),
            ("10\u{00b5}s", Duration::from_micros(10)),
            ("10\u{03bc}s", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("1h1m1s1ms", Duration::from_millis(3_661_001)),
            ("1.0000000001s", Duration::from_secs(1)),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_duration(input), Ok(expected), "{input}");
        }
    }

    #[test]
    fn rejects_malformed_durations() {
        assert!(matches!(parse_duration(""), Err(DurationError::Invalid(_))));
        assert!(matches!(
            parse_duration("-"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("."),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("m"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("20"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("1h20"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("20d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("20 m"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("-5m"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_duration("9999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration("3000000h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m0s");
        assert_eq!(format_duration(Duration::from_secs(61)), "1m1s");
        assert_eq!(format_duration(Duration::from_millis(300)), "300ms");
        assert_eq!(format_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(format_duration(Duration::from_nanos(1500)), "1.5\u{00b5}s");
        assert_eq!(format_duration(Duration::from_nanos(7)), "7ns");
        assert_eq!(format_duration(Duration::from_millis(61_250)), "1m1.25s");
        for input in ["20m0s", "1h30m0s", "1.5s", "300ms"] {
            let parsed = parse_duration(input).unwrap();
            assert_eq!(format_duration(parsed), input);
        }
    }
}
