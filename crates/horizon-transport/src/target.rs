//! Where a link connects: `host:port`, where the host is an IP address or a name (a Kubernetes
//! Service, a DNS name). A name is resolved again at every (re)connection, so a peer that moved
//! (a rescheduled pod, a changed record) is found where it is now.

use std::fmt;
use std::net::SocketAddr;

/// A `host:port` to dial, checked when it is made, resolved at each connection.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target(String);

/// Why a `host:port` is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{given:?}: not host:port ({why})")]
pub struct BadTarget {
    pub given: String,
    pub why: &'static str,
}

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

    /// The addresses it names now, those of `ipv4`'s family first (the local endpoint's).
    pub async fn resolve(&self, ipv4: bool) -> Result<SocketAddr, String> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(self.0.as_str())
            .await
            .map_err(|e| format!("cannot resolve: {e}"))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4() == ipv4)
            .or(addrs.first())
            .copied()
            .ok_or_else(|| "resolves to no address".to_owned())
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
    }

    #[tokio::test]
    async fn a_name_resolves_at_each_call() {
        let t = Target::parse("localhost:7400").unwrap();
        let a = t.resolve(true).await.unwrap();
        assert_eq!((a.ip().is_loopback(), a.port()), (true, 7400));
        let missing = Target::parse("no-such-host.invalid:1").unwrap();
        assert!(missing.resolve(true).await.is_err());
    }
}
