//! Where a link connects ([`Target`], a checked `host:port`, is `horizon-types`'): a name is
//! resolved again at every (re)connection, so a peer that moved (a rescheduled pod, a changed
//! record) is found where it is now.

use std::net::SocketAddr;

pub use horizon_types::{BadTarget, Target};

/// The addresses `target` names now, those of `ipv4`'s family first (the local endpoint's).
pub(crate) async fn resolve(target: &Target, ipv4: bool) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(target.as_str())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_resolves_at_each_call() {
        let t = Target::parse("localhost:7400").unwrap();
        let a = resolve(&t, true).await.unwrap();
        assert_eq!((a.ip().is_loopback(), a.port()), (true, 7400));
        let missing = Target::parse("no-such-host.invalid:1").unwrap();
        assert!(resolve(&missing, true).await.is_err());
    }
}
