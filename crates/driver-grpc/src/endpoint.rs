//! Driver endpoints: `unix:///path/to.sock` (the default transport) or
//! `tcp://host:port`.

use std::path::PathBuf;

/// Where a driver listens or is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket.
    Unix(PathBuf),
    /// A TCP address `host:port`.
    Tcp(String),
}

/// An endpoint that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid driver endpoint {given:?}: {why} (expected unix:///absolute/path.sock or tcp://host:port)")]
pub struct EndpointError {
    /// The text given.
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Endpoint {
    /// Parses `unix:///abs/path`, `unix:/abs/path` or `tcp://host:port`.
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        let err = |why| EndpointError {
            given: text.to_string(),
            why,
        };
        if let Some(rest) = text
            .strip_prefix("unix://")
            .or_else(|| text.strip_prefix("unix:"))
        {
            if !rest.starts_with('/') {
                return Err(err("a Unix socket path must be absolute"));
            }
            if rest.len() < 2 {
                return Err(err("empty Unix socket path"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(rest)));
        }
        if let Some(rest) = text.strip_prefix("tcp://") {
            let rest = rest.trim_end_matches('/');
            match rest.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    return Ok(Endpoint::Tcp(rest.to_string()))
                }
                _ => return Err(err("a TCP endpoint needs host:port")),
            }
        }
        Err(err("unknown scheme"))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_and_tcp_endpoints_parse_and_print_back() {
        let u = Endpoint::parse("unix:///run/mcm/driver.sock").expect("unix");
        assert_eq!(u, Endpoint::Unix("/run/mcm/driver.sock".into()));
        assert_eq!(u.to_string(), "unix:///run/mcm/driver.sock");
        let t = Endpoint::parse("tcp://127.0.0.1:7000").expect("tcp");
        assert_eq!(t, Endpoint::Tcp("127.0.0.1:7000".into()));
        assert_eq!(t.to_string(), "tcp://127.0.0.1:7000");
    }

    #[test]
    fn relative_paths_missing_ports_and_other_schemes_are_refused() {
        for bad in [
            "unix://relative.sock",
            "unix://",
            "tcp://host",
            "tcp://:1",
            "http://x:1",
            "",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
