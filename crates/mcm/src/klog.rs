//! klog's text format for `tracing` events, the reference's log lines:
//!
//! ```text
//! I1203 15:04:05.123456       1 machine.rs:42] Machine created machine="m-1" namespace="shoot"
//! ```
//!
//! Severity letter (`E`rror, `W`arning, `I`nfo for everything else, as klog's
//! V-levels are all `I`), month and day, UTC time with microseconds, the
//! process id right-aligned in 7 columns, `file:line`, `] `, the message and
//! the event's and its spans' fields as `key=value` (strings quoted, as
//! klog's structured logging writes them). One event is one line: line
//! breaks in the message are written as `\n`. No colour codes. Gardener's
//! fluent-bit parser for machine-controller-manager reads severity, time, pid
//! and source from this header (docs/design/process-contract.md, "Logs").

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The klog line format.
pub struct Klog {
    pid: u32,
}

impl Klog {
    /// For this process.
    pub fn new() -> Klog {
        Klog {
            pid: std::process::id(),
        }
    }
}

/// klog's severity letter.
pub fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// (month, day, hours, minutes, seconds, microseconds) in UTC.
fn civil(t: SystemTime) -> (u32, u32, u64, u64, u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a proleptic Gregorian month and day
    // (H. Hinnant's algorithm, for non-negative days).
    let z = days + 719_468;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        month,
        day,
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        d.subsec_micros(),
    )
}

/// The header `I1203 15:04:05.123456       1 file.rs:42] `.
pub fn header(level: &Level, t: SystemTime, pid: u32, file: &str, line: u32) -> String {
    let (mo, day, h, mi, s, us) = civil(t);
    let file = file.rsplit('/').next().unwrap_or(file);
    let file = if file.is_empty() { "unknown" } else { file };
    format!(
        "{}{mo:02}{day:02} {h:02}:{mi:02}:{s:02}.{us:06} {pid:>7} {file}:{line}] ",
        severity(level)
    )
}

/// The message and the `key=value` pairs of one event.
#[derive(Default)]
struct Fields {
    message: String,
    pairs: String,
}

impl Fields {
    fn pair(&mut self, name: &str, value: fmt::Arguments<'_>) {
        let _ = write!(self.pairs, " {name}={value}");
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.pair(field.name(), format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let text = format!("{value:?}");
            if text.contains(char::is_whitespace) && !text.starts_with('"') {
                self.pair(field.name(), format_args!("{text:?}"));
            } else {
                self.pair(field.name(), format_args!("{text}"));
            }
        }
    }
}

/// One line: line breaks escaped.
fn one_line(text: &str) -> String {
    text.replace('\r', "\\r").replace('\n', "\\n")
}

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let file = meta.file().unwrap_or(meta.target());
        let head = header(
            meta.level(),
            SystemTime::now(),
            self.pid,
            file,
            meta.line().unwrap_or(0),
        );
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = fields.message;
        line.push_str(&fields.pairs);
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(f) = ext.get::<FormattedFields<N>>() {
                    if !f.is_empty() {
                        line.push(' ');
                        line.push_str(f);
                    }
                }
            }
        }
        writeln!(writer, "{head}{}", one_line(&line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_header_is_klogs_with_utc_time_and_the_pid_in_seven_columns() {
        // 2026-12-03T15:04:05.123456Z
        let t = UNIX_EPOCH + Duration::from_micros(1_796_310_245_123_456);
        assert_eq!(
            header(&Level::INFO, t, 1, "crates/runtime/src/machine.rs", 42),
            "I1203 15:04:05.123456       1 machine.rs:42] "
        );
        assert_eq!(
            header(&Level::WARN, t, 1234567, "a.rs", 7),
            "W1203 15:04:05.123456 1234567 a.rs:7] "
        );
        assert!(header(&Level::ERROR, t, 1, "a.rs", 1).starts_with('E'));
        assert!(header(&Level::DEBUG, t, 1, "a.rs", 1).starts_with('I'));
        assert!(header(&Level::TRACE, t, 1, "a.rs", 1).starts_with('I'));
    }

    #[test]
    fn dates_convert_across_leap_days_and_year_ends() {
        let at = |secs: u64| civil(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), (1, 1, 0, 0, 0, 0));
        // 2024-02-29T23:59:59Z
        assert_eq!(at(1_709_251_199), (2, 29, 23, 59, 59, 0));
        // 2025-12-31T12:00:00Z
        assert_eq!(at(1_767_182_400), (12, 31, 12, 0, 0, 0));
    }

    /// Events written through a subscriber with the klog format.
    fn capture(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                if let Ok(mut v) = self.0.lock() {
                    v.extend_from_slice(b);
                }
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || buf.clone())
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .event_format(Klog::new())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = out.0.lock().map(|v| v.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn events_are_klog_lines_with_message_then_event_and_span_fields() {
        let text = capture(|| {
            let span = tracing::info_span!("machine", namespace = "shoot", machine = "m-1");
            let _g = span.enter();
            tracing::warn!(phase = "Pending", attempt = 2, "creation\nfailed");
        });
        let line = text.strip_suffix('\n').unwrap_or(&text);
        assert!(!line.contains('\n'), "one line: {text:?}");
        let (head, rest) = line.split_once("] ").unwrap_or(("", ""));
        assert!(head.starts_with('W'), "{line}");
        assert!(
            head.contains(&format!(" {} klog.rs:", std::process::id())),
            "{line}"
        );
        assert_eq!(
            rest,
            "creation\\nfailed phase=\"Pending\" attempt=2 namespace=\"shoot\" machine=\"m-1\""
        );
        assert!(!line.contains('\x1b'));
    }

    #[test]
    fn a_message_with_line_breaks_stays_one_line() {
        assert_eq!(one_line("a\nb\r\nc"), "a\\nb\\r\\nc");
    }
}
