//! Where a link connects: `host:port`, where the host is an IP address or a name (a Kubernetes
//! Service, a DNS name), checked when it is made. `horizon-transport` resolves a name again at
//! every (re)connection, so a peer that moved (a rescheduled pod, a changed record) is found
//! where it is now; a machine only carries the address.

use std::fmt;
use std::net::SocketAddr;

/// A `host:port` to dial, checked when it is made, resolved at each connection.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target(String);

/// Why a `host:port` is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadTarget {
    pub given: String,
    pub why: &'static str,
}

impl fmt::Display for BadTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: not host:port ({})", self.given, self.why)
    }
}

impl std::error::Error for BadTarget {}

impl Target {
    /// Checks `s` is `host:port` (a port 1–65535; an IPv6 host in brackets).
    pub fn parse(s: &str) -> Result<Target, BadTarget> {
        let bad = |why| BadTarget { given: s.to_owned(), why };
        if s.parse::<SocketAddr>().is_ok() {
            return Ok(Target(s.to_owned()));
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad("the port must be 1 to 65535")),
        }
        let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
        if host.is_empty() || host.len() > 253 || !host.chars().all(name_char) {
            return Err(bad("the host must be an IP address or a DNS name"));
        }
        Ok(Target(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<SocketAddr> for Target {
    fn from(a: SocketAddr) -> Self {
        Target(a.to_string())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_are_targets_and_the_rest_is_refused() {
        for good in ["127.0.0.1:7400", "[::1]:7400", "core.horizon.svc:7400", "localhost:1"] {
            assert!(Target::parse(good).is_ok(), "{good}");
        }
        for bad in ["core", "core:", "core:0", "core:70000", ":7400", "a b:1", "http://x:1"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        let e = Target::parse("core").expect_err("no port");
        assert_eq!(e.to_string(), "\"core\": not host:port (no port)");
    }
}
