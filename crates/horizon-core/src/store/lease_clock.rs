//! How long a leading core may count on its election lease, by its own clock: the decision
//! behind self-fencing (`etcd.rs`), kept apart from etcd so that the chaos simulator runs the
//! same rule against its simulated store.
//!
//! The store expires the lease by *its* clock, at least `ttl` after it handled the last
//! keep-alive, which was after this process *sent* it. So from the send of the last
//! acknowledged keep-alive, the lease lives at least the TTL the reply gave. The leader stops a
//! quarter of the TTL before that (clock rates differ a little, a process may pause), whatever
//! the replies say afterwards: counting from a reply's *receipt* instead would trust a lease
//! that a slow reply may have outlived.

use std::time::Duration;

/// The leader's view of its election lease. Times are offsets on this process's monotonic
/// clock (any origin, the same for every call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseClock {
    ttl: Duration,
    margin: Duration,
    deadline: Duration,
}

impl LeaseClock {
    /// A lease of `ttl` granted by a request sent at `sent`.
    pub fn granted(ttl: Duration, sent: Duration) -> LeaseClock {
        let margin = ttl / 4;
        LeaseClock { ttl, margin, deadline: sent + ttl - margin }
    }

    /// A keep-alive sent at `sent` was acknowledged, the lease having `left` to live then. A
    /// deadline never moves back (replies may overtake each other).
    pub fn acked(&mut self, sent: Duration, left: Duration) {
        self.deadline = self.deadline.max(sent + left.saturating_sub(self.margin));
    }

    /// When this core stops leading, unless a keep-alive is acknowledged before.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The core must stop granting and renewing now.
    pub fn fenced(&self, now: Duration) -> bool {
        now >= self.deadline
    }

    /// When to send the next keep-alive after one sent at `sent`: a third of the TTL later.
    pub fn next_keep_alive(&self, sent: Duration) -> Duration {
        sent + self.ttl / 3
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_lease_is_counted_from_the_send_of_the_last_acknowledged_keep_alive() {
        let mut lease = LeaseClock::granted(3 * S, Duration::ZERO);
        assert_eq!(lease.deadline(), Duration::from_millis(2_250));
        // Sent at 1 s, acknowledged (late) at 2.9 s with the full TTL left: the store handled
        // it between the two, so the lease lives at least until 4 s; fenced at 3.25 s.
        lease.acked(S, 3 * S);
        assert_eq!(lease.deadline(), Duration::from_millis(3_250));
        assert!(!lease.fenced(Duration::from_millis(3_249)));
        assert!(lease.fenced(Duration::from_millis(3_250)));
        // An older reply arriving after a newer one moves nothing back.
        lease.acked(Duration::from_millis(500), 3 * S);
        assert_eq!(lease.deadline(), Duration::from_millis(3_250));
        assert_eq!(lease.next_keep_alive(S), S + S);
    }

    /// The store handled a keep-alive at some instant between its send and its reply, and
    /// expires the lease TTL after that, by a clock up to 0.5 % off: the fence always comes
    /// first, however slow the reply.
    #[test]
    fn the_fence_comes_before_the_store_could_expire_the_lease_whatever_the_delays() {
        let ttl = 3 * S;
        for (to_store_ms, back_ms) in [(0, 0), (5, 2_000), (2_500, 10), (1, 9_000)] {
            for rate in [0.995, 1.0, 1.005] {
                let sent = 10 * S;
                let handled = sent + Duration::from_millis(to_store_ms);
                let received = handled + Duration::from_millis(back_ms);
                let mut lease = LeaseClock::granted(ttl, Duration::ZERO);
                lease.acked(sent, ttl);
                // The store's expiry, in this process's time (its clock runs at `rate`).
                let expires = handled + ttl.div_f64(rate);
                assert!(lease.deadline() < expires, "{to_store_ms}/{back_ms} ms at {rate}");
                // Counting from the receipt would have trusted it too long after a slow reply.
                let naive = received + ttl - ttl / 4;
                if back_ms > 1_000 {
                    assert!(naive > expires, "the naive count would have been safe here");
                }
            }
        }
    }
}
