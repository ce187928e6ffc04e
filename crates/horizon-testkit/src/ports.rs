//! Ports a test binds again later, kept from everyone else meanwhile.
//!
//! A restarted core or agent comes back on its own ports (the emulators point at them), and a
//! standby core binds its control port only once elected. A port found with `bind(0)` comes
//! from the kernel's ephemeral range, where any process's next `bind(0)` or outgoing
//! connection may take it while it is free: CI's lanes run side by side and one lost its
//! standby that way (`Address already in use` once elected). A [`ReservedPort`] comes from
//! below that range instead, which the kernel never hands out by itself, and holds a lock file
//! for its port so that no other reservation (another sandbox, thread or process) takes it
//! while it lives.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;

/// How many ports below the ephemeral range reservations choose from.
const SPAN: u16 = 12_000;

/// A loopback port free for both TCP and UDP when reserved, and no other reservation's while
/// this lives.
#[derive(Debug)]
pub struct ReservedPort {
    addr: SocketAddr,
    _lock: File,
}

impl ReservedPort {
    /// Reserves a loopback port below the kernel's ephemeral range. Fails if none is free
    /// there, or the lock directory cannot be written.
    pub fn new() -> io::Result<ReservedPort> {
        let (first, end) = range()?;
        let count = end - first;
        let start = fastrand::u16(0..count);
        let candidates = (0..count).map(|step| first + (start + step) % count);
        ReservedPort::first_free(candidates)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("no loopback port free for TCP and UDP in {first}..{end}"),
            )
        })
    }

    /// The first of `candidates` that no reservation holds and nothing has bound.
    fn first_free(candidates: impl Iterator<Item = u16>) -> io::Result<Option<ReservedPort>> {
        let dir = lock_dir();
        std::fs::create_dir_all(&dir)?;
        for port in candidates {
            let lock = File::create(dir.join(port.to_string()))?;
            if lock.try_lock().is_err() {
                continue;
            }
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            if TcpListener::bind(addr).is_ok() && UdpSocket::bind(addr).is_ok() {
                return Ok(Some(ReservedPort { addr, _lock: lock }));
            }
        }
        Ok(None)
    }

    /// The reserved address (127.0.0.1 and the port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Where the lock files live: one per port, shared by every process of this user.
fn lock_dir() -> PathBuf {
    std::env::temp_dir().join("horizon-reserved-ports")
}

/// The ports reservations choose from: the `SPAN` just below the ephemeral range.
fn range() -> io::Result<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .unwrap_or_else(|_| "32768 60999".into());
    parse_range(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("ip_local_port_range leaves no room below it: {}", text.trim()),
        )
    })
}

/// `[low - SPAN, low)` from the kernel's "low high", if at least `SPAN` ports above 1024 fit.
fn parse_range(text: &str) -> Option<(u16, u16)> {
    let low: u16 = text.split_whitespace().next()?.parse().ok()?;
    let first = low.checked_sub(SPAN).filter(|&f| f >= 1024)?;
    Some((first, low))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_below_the_ephemeral_range_and_never_shared() {
        let (first, end) = range().unwrap();
        let held: Vec<ReservedPort> = (0..50).map(|_| ReservedPort::new().unwrap()).collect();
        let mut ports: Vec<u16> = held.iter().map(|r| r.addr().port()).collect();
        assert!(ports.iter().all(|p| (first..end).contains(p)), "{ports:?}");
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50, "a port was reserved twice");
    }

    #[test]
    fn a_port_held_or_bound_is_skipped() {
        let held = ReservedPort::new().unwrap();
        let bound = ReservedPort::new().unwrap();
        let free = ReservedPort::new().unwrap();
        let (bound_port, free_port) = (bound.addr().port(), free.addr().port());
        // `bound`'s port stays bound by a plain socket, its lock released; `free`'s lock is
        // released too, so it can be reserved again.
        let listener = TcpListener::bind(bound.addr()).unwrap();
        drop((bound, free));
        let ports = [held.addr().port(), bound_port, free_port];
        let got = ReservedPort::first_free(ports.into_iter()).unwrap().unwrap();
        assert_eq!(got.addr().port(), free_port);
        drop(got);
        let none = ReservedPort::first_free(ports[..2].iter().copied()).unwrap();
        assert!(none.is_none(), "{none:?}");
        drop(listener);
    }

    #[test]
    fn the_range_is_the_span_below_the_kernels() {
        let (first, end) = parse_range("32768 60999").unwrap();
        assert_eq!((first, end), (20768, 32768));
        assert_eq!(parse_range("5000 60999"), None);
        assert_eq!(parse_range("garbage"), None);
    }
}
