//! Machine error codes: the gRPC-style codes of the reference's `machinecodes/codes`.

use std::fmt;

/// A machine error code. The numeric values and names are part of the wire
/// contract with out-of-process providers and must never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// Not an error.
    Ok,
    /// The operation was cancelled.
    Canceled,
    /// An unknown error, also used for errors that cannot be decoded.
    Unknown,
    /// The request (e.g. the providerSpec) is invalid.
    InvalidArgument,
    /// A deadline passed before the operation completed.
    DeadlineExceeded,
    /// The VM (or another entity) was not found.
    NotFound,
    /// The entity already exists.
    AlreadyExists,
    /// The caller lacks permission.
    PermissionDenied,
    /// Quota or capacity is exhausted.
    ResourceExhausted,
    /// The system is not in a state required for the operation.
    FailedPrecondition,
    /// The operation was aborted, typically a concurrency conflict.
    Aborted,
    /// The operation went past the valid range.
    OutOfRange,
    /// The operation is not implemented by this provider.
    Unimplemented,
    /// An internal error of the provider.
    Internal,
    /// The service is unavailable; retrying may help.
    Unavailable,
    /// Unrecoverable data loss.
    DataLoss,
    /// The request lacks valid credentials.
    Unauthenticated,
    /// The VM exists but its post-creation initialization has not completed.
    Uninitialized,
    /// A numeric value outside 0..=17, kept so that nothing is lost in decoding.
    Other(u32),
}

const NAMES: [(Code, &str); 18] = [
    (Code::Ok, "OK"),
    (Code::Canceled, "Canceled"),
    (Code::Unknown, "Unknown"),
    (Code::InvalidArgument, "InvalidArgument"),
    (Code::DeadlineExceeded, "DeadlineExceeded"),
    (Code::NotFound, "NotFound"),
    (Code::AlreadyExists, "AlreadyExists"),
    (Code::PermissionDenied, "PermissionDenied"),
    (Code::ResourceExhausted, "ResourceExhausted"),
    (Code::FailedPrecondition, "FailedPrecondition"),
    (Code::Aborted, "Aborted"),
    (Code::OutOfRange, "OutOfRange"),
    (Code::Unimplemented, "Unimplemented"),
    (Code::Internal, "Internal"),
    (Code::Unavailable, "Unavailable"),
    (Code::DataLoss, "DataLoss"),
    (Code::Unauthenticated, "Unauthenticated"),
    (Code::Uninitialized, "Uninitialized"),
];

impl Code {
    /// All defined codes, in numeric order.
    pub fn all() -> impl Iterator<Item = Code> {
        NAMES.iter().map(|(c, _)| *c)
    }

    /// The numeric value (0 for OK ... 17 for Uninitialized).
    pub fn value(self) -> u32 {
        match self {
            Code::Other(n) => n,
            c => NAMES
                .iter()
                .position(|(k, _)| *k == c)
                .map_or(2, |p| p as u32),
        }
    }

    /// The code for a numeric value; values past 17 are kept as [`Code::Other`].
    pub fn from_value(n: u32) -> Code {
        NAMES
            .get(n as usize)
            .map(|(c, _)| *c)
            .unwrap_or(Code::Other(n))
    }

    /// The code for a name as printed by [`Code::name`]. Unknown names give
    /// [`Code::Unknown`], like the reference's `StringToCode`.
    pub fn from_name(name: &str) -> Code {
        if let Some((c, _)) = NAMES.iter().find(|(_, n)| *n == name) {
            return *c;
        }
        name.strip_prefix("Code(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n as usize >= NAMES.len())
            .map_or(Code::Unknown, Code::Other)
    }

    /// The name as the reference prints it; unknown values print as `Code(<n>)`.
    pub fn name(self) -> String {
        match self {
            Code::Other(n) => format!("Code({n})"),
            c => NAMES
                .iter()
                .find(|(k, _)| *k == c)
                .map_or_else(|| "Unknown".to_string(), |(_, n)| (*n).to_string()),
        }
    }

    /// Codes that mean "try again soon": the reference retries these with the
    /// short period in the deletion flow.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Unavailable
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_the_reference_numbers_and_names() {
        assert_eq!(Code::Ok.value(), 0);
        assert_eq!(Code::NotFound.value(), 5);
        assert_eq!(Code::ResourceExhausted.value(), 8);
        assert_eq!(Code::Unimplemented.value(), 12);
        assert_eq!(Code::Uninitialized.value(), 17);
        assert_eq!(Code::Uninitialized.name(), "Uninitialized");
        assert_eq!(Code::Ok.name(), "OK");
        for (i, c) in Code::all().enumerate() {
            assert_eq!(c.value() as usize, i);
            assert_eq!(Code::from_value(i as u32), c);
            assert_eq!(Code::from_name(&c.name()), c);
        }
    }

    #[test]
    fn unknown_names_decode_as_unknown_and_big_values_print_like_go() {
        assert_eq!(Code::from_name("NoSuchCode"), Code::Unknown);
        assert_eq!(Code::from_value(42), Code::Other(42));
        assert_eq!(Code::Other(42).name(), "Code(42)");
        assert_eq!(Code::from_name("Code(42)"), Code::Other(42));
        assert_eq!(Code::from_name("Code(3)"), Code::Unknown);
    }
}
