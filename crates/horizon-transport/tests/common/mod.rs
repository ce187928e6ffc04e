//! Shared set-up for the QUIC tests: a dev CA with three sites in a temporary directory,
//! listeners and links on loopback.
#![allow(dead_code, unreachable_pub)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use horizon_proto::{Channel, Name};
use horizon_transport::tls::{DevCa, Identity, client_config, server_config};
use horizon_transport::{
    Authenticator, Dial, HelloParams, Limits, Link, LinkEvent, LinkParts, Listener,
    SiteCertificate, TransportStats, client_endpoint, site_dns_name,
};

pub struct Pki {
    pub ca: DevCa,
    _dir: TempDir,
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "horizon-{tag}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Pki {
    pub fn new() -> Self {
        let dir = TempDir::new("pki");
        let ca = DevCa::new(&dir.0);
        ca.create(&["PAR", "MTL", "HKG"], false).unwrap();
        Pki { ca, _dir: dir }
    }
}

pub fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

pub fn loopback() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, 0).into()
}

/// Short timeouts so failure paths finish quickly on loopback.
pub fn quick_limits() -> Limits {
    Limits {
        request_timeout: Duration::from_secs(3),
        handshake_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_millis(800),
        keep_alive: Duration::from_millis(200),
        reconnect_min: Duration::from_millis(50),
        reconnect_max: Duration::from_millis(300),
        ..Limits::default()
    }
}

/// A site listener with mutual TLS.
pub fn site_listener<C: Channel>(pki: &Pki, site: &str, limits: &Limits) -> Listener<C> {
    let config = server_config(
        &pki.ca.identity(site).unwrap(),
        Some(&pki.ca.roots().unwrap()),
        C::ID,
        limits,
    )
    .unwrap();
    let stats = TransportStats::default();
    Listener::bind(loopback(), config, name(site), Arc::new(SiteCertificate), limits.clone(), stats)
        .unwrap()
}

/// A listener that authenticates clients with `auth` and asks for no client certificate.
pub fn token_listener<C: Channel>(
    pki: &Pki,
    site: &str,
    auth: impl Authenticator,
    limits: &Limits,
) -> Listener<C> {
    token_listener_counted(pki, site, auth, limits, TransportStats::default())
}

/// [`token_listener`], counting in `stats`.
pub fn token_listener_counted<C: Channel>(
    pki: &Pki,
    site: &str,
    auth: impl Authenticator,
    limits: &Limits,
    stats: TransportStats,
) -> Listener<C> {
    let config = server_config(&pki.ca.identity(site).unwrap(), None, C::ID, limits).unwrap();
    Listener::bind(loopback(), config, name(site), Arc::new(auth), limits.clone(), stats).unwrap()
}

/// A link from `from` (presenting its site certificate from `pki`) to `to` at `addr`.
pub fn site_link<C: Channel>(
    pki: &Pki,
    from: &str,
    to: &str,
    addr: SocketAddr,
    limits: &Limits,
) -> LinkParts<C> {
    dial(pki, Some(pki.ca.identity(from).unwrap()), to, addr, HelloParams::new(name(from)), limits)
}

/// A link from `from` to `to`, which may answer at any of `addrs` (a core and its standby).
pub fn site_link_to_any<C: Channel>(
    pki: &Pki,
    from: &str,
    to: &str,
    addrs: &[SocketAddr],
    limits: &Limits,
) -> LinkParts<C> {
    let identity = pki.ca.identity(from).unwrap();
    let config = client_config(&pki.ca.roots().unwrap(), Some(&identity), C::ID, limits).unwrap();
    Link::connect(Dial {
        endpoint: client_endpoint(Ipv4Addr::LOCALHOST.into()).unwrap(),
        addrs: addrs.iter().map(|&a| a.into()).collect(),
        server_name: site_dns_name(to),
        config,
        hello: HelloParams::new(name(from)),
        limits: limits.clone(),
        stats: TransportStats::default(),
    })
}

/// A link to site `to` at `addr` that trusts `pki`'s CA, presents `identity` (if any) and says
/// `hello`: for the tests that lie about who they are.
pub fn dial<C: Channel>(
    pki: &Pki,
    identity: Option<Identity>,
    to: &str,
    addr: SocketAddr,
    hello: HelloParams,
    limits: &Limits,
) -> LinkParts<C> {
    let config = client_config(&pki.ca.roots().unwrap(), identity.as_ref(), C::ID, limits).unwrap();
    Link::connect(Dial {
        endpoint: client_endpoint(Ipv4Addr::LOCALHOST.into()).unwrap(),
        addrs: vec![addr.into()],
        server_name: site_dns_name(to),
        config,
        hello,
        limits: limits.clone(),
        stats: TransportStats::default(),
    })
}

/// Waits for the link's next `Up`, failing on timeout; returns the events seen before it.
pub async fn wait_up<C: Channel>(parts: &mut LinkParts<C>, within: Duration) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let event = tokio::time::timeout_at(deadline, parts.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no Up within {within:?}; saw {seen:?}"))
            .unwrap();
        match event {
            LinkEvent::Up(_) => return seen,
            other => seen.push(format!("{other:?}")),
        }
    }
}

/// The next link event that is not `Up`, as text.
pub async fn next_failure<C: Channel>(parts: &mut LinkParts<C>, within: Duration) -> String {
    let event =
        tokio::time::timeout(within, parts.events.recv()).await.expect("an event in time").unwrap();
    match event {
        LinkEvent::Up(_) => panic!("connected, but a failure was expected"),
        LinkEvent::Retry { error, .. } | LinkEvent::Down(error) => error.to_string(),
    }
}
