//! Driver endpoints: `unix:///path/to.sock` (the default transport),
//! `https://host:port` (TCP with TLS and client certificates) or
//! `tcp://host:port` (plain TCP: loopback only).

use std::path::PathBuf;

/// Where a driver listens or is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket.
    Unix(PathBuf),
    /// A TCP address `host:port`, plain: allowed on loopback only.
    Tcp(String),
    /// A TCP address `host:port` with TLS (client certificates required).
    Tls(String),
}

/// An endpoint that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid driver endpoint {given:?}: {why} (expected unix:///absolute/path.sock, https://host:port or tcp://127.0.0.1:port)")]
pub struct EndpointError {
    /// The text given.
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Endpoint {
    /// Parses `unix:///abs/path`, `unix:/abs/path`, `https://host:port` or
    /// `tcp://host:port`.
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
        for (scheme, make) in [
            ("tcp://", Endpoint::Tcp as fn(String) -> Endpoint),
            ("https://", Endpoint::Tls),
        ] {
            if let Some(rest) = text.strip_prefix(scheme) {
                let rest = rest.trim_end_matches('/');
                return match rest.rsplit_once(':') {
                    Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                        Ok(make(rest.to_string()))
                    }
                    _ => Err(err("a TCP endpoint needs host:port")),
                };
            }
        }
        Err(err("unknown scheme"))
    }

    /// The host of a TCP endpoint (brackets of an IPv6 address removed).
    pub fn host(&self) -> Option<&str> {
        match self {
            Endpoint::Unix(_) => None,
            Endpoint::Tcp(a) | Endpoint::Tls(a) => a
                .rsplit_once(':')
                .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']')),
        }
    }

    /// Whether a TCP endpoint's host is a loopback address (`localhost`,
    /// 127.0.0.0/8, `::1`), judged from the text: a name other than
    /// `localhost` is not loopback, whatever it resolves to. Plain TCP is
    /// allowed there only: the Secret in every request travels unencrypted.
    pub fn is_loopback(&self) -> bool {
        match self.host() {
            None => false,
            Some(h) => {
                h.eq_ignore_ascii_case("localhost")
                    || h.parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Tls(a) => write!(f, "https://{a}"),
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
        let s = Endpoint::parse("https://driver.example:7443").expect("tls");
        assert_eq!(s, Endpoint::Tls("driver.example:7443".into()));
        assert_eq!(s.to_string(), "https://driver.example:7443");
        assert_eq!(s.host(), Some("driver.example"));
    }

    #[test]
    fn only_localhost_and_loopback_addresses_count_as_loopback() {
        for yes in [
            "tcp://127.0.0.1:1",
            "tcp://127.8.0.1:1",
            "tcp://localhost:1",
            "tcp://[::1]:1",
        ] {
            assert!(Endpoint::parse(yes).expect(yes).is_loopback(), "{yes}");
        }
        for no in [
            "tcp://0.0.0.0:1",
            "tcp://[::]:1",
            "tcp://10.0.0.1:1",
            "tcp://driver:1",
            "tcp://localhost.evil.example:1",
            "unix:///x.sock",
        ] {
            assert!(!Endpoint::parse(no).expect(no).is_loopback(), "{no}");
        }
    }

    #[test]
    fn relative_paths_missing_ports_and_other_schemes_are_refused() {
        for bad in [
            "unix://relative.sock",
            "unix://",
            "tcp://host",
            "tcp://:1",
            "https://host",
            "http://x:1",
            "",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
