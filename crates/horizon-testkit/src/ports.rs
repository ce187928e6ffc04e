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
use std::time::Duration;

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
    /// Reserves a loopback port below the kernel's ephemeral range. A kernel whose range was
    /// widened to leave no room below it gets ports the kernel picks instead, locked all the
    /// same (free of other reservations, not of every process). Fails if no port is free, or
    /// the lock directory cannot be written.
    pub fn new() -> io::Result<ReservedPort> {
        ReservedPort::given(ephemeral_range().as_deref())
    }

    /// [`ReservedPort::new`] with the kernel's range as `range` says ("low high").
    fn given(range: Option<&str>) -> io::Result<ReservedPort> {
        let found = match range.and_then(below) {
            Some((first, end)) => {
                let count = end - first;
                let start = fastrand::u16(0..count);
                let candidates = (0..count).map(|step| first + (start + step) % count);
                ReservedPort::first_free(candidates)?
            }
            None => ReservedPort::first_free((0..64).filter_map(|_| kernel_pick()))?,
        };
        found.ok_or_else(|| {
            io::Error::new(io::ErrorKind::AddrNotAvailable, "no loopback port free for TCP and UDP")
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

/// How long a restarted daemon waits for its ports, at most.
const PORTS_FREE_WITHIN: Duration = Duration::from_secs(15);

/// Waits (at most [`PORTS_FREE_WITHIN`]) until every one of `ports` can be bound again, UDP and TCP. A
/// daemon stopped in this process lets its QUIC sockets go only once its connections have
/// drained (quinn keeps an endpoint's socket for its connections' closing periods, about three
/// round-trip timeouts, seconds on the emulated backbone), where a restarted process would find
/// them free at once; the ports are reserved, so nothing else takes them meanwhile.
pub(crate) async fn until_free(ports: &[SocketAddr]) -> io::Result<()> {
    let within = PORTS_FREE_WITHIN;
    let until = tokio::time::Instant::now() + within;
    loop {
        let busy: Vec<SocketAddr> = ports
            .iter()
            .copied()
            .filter(|&a| UdpSocket::bind(a).is_err() || TcpListener::bind(a).is_err())
            .collect();
        if busy.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= until {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("ports {busy:?} still in use {within:?} after their daemon stopped"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The kernel's ephemeral range, "low high" (`None` off Linux).
fn ephemeral_range() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()
}

/// A port the kernel picks for a `bind(0)`, from its ephemeral range.
fn kernel_pick() -> Option<u16> {
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    UdpSocket::bind(any).and_then(|s| s.local_addr()).ok().map(|a| a.port())
}

/// The ports reservations choose from, `[low - SPAN, low)` from the kernel's "low high", if
/// at least `SPAN` ports above 1024 fit below it.
fn below(text: &str) -> Option<(u16, u16)> {
    let low: u16 = text.split_whitespace().next()?.parse().ok()?;
    let first = low.checked_sub(SPAN).filter(|&f| f >= 1024)?;
    Some((first, low))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_below_the_ephemeral_range_and_never_shared() {
        let range = ephemeral_range().expect("Linux");
        let (first, end) = below(&range).expect("room below the ephemeral range");
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
    fn a_range_widened_to_leave_no_room_below_it_gets_the_kernels_picks_locked() {
        let range = ephemeral_range().expect("Linux");
        let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
        let picked = ReservedPort::given(Some("1024 65535")).expect("a port");
        assert!(picked.addr().port() >= low, "{picked:?} is the kernel's pick");
        let again = ReservedPort::given(Some("1024 65535")).expect("another port");
        assert_ne!(picked.addr().port(), again.addr().port(), "never one held");
    }

    #[test]
    fn the_range_is_the_span_below_the_kernels() {
        assert_eq!(below("32768\t60999\n"), Some((20768, 32768)));
        assert_eq!(below("5000 60999"), None, "widened: the kernel picks instead");
        assert_eq!(below("garbage"), None);
    }
}
