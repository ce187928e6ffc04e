//! A bot's inputs as a client keeps them: those not acknowledged yet, the latest acknowledged
//! ones (a restarted gateway asks for them again), and how far the player's screen shows
//! them, which times click-to-screen.

use std::collections::{BTreeMap, VecDeque};

use horizon_proto::gateway::{self, Gateway};
use horizon_proto::{Blob, Seq};
use tokio::time::Instant;

/// A session's inputs sent and not yet acknowledged by an update, and how far the player's
/// screen shows them: click-to-screen is measured here.
#[derive(Debug, Default)]
pub(super) struct Sent {
    /// Per seq: when it was sent (monotonic, and wall µs) and its bytes, for a re-send.
    pub(super) pending: BTreeMap<u64, (Instant, u64, Blob)>,
    /// The latest acknowledged inputs (at most [`KEPT_ACKED`]): a gateway that restarted
    /// asks for those after its player's last stored copy again.
    acked: VecDeque<(u64, Blob)>,
    /// The highest seq on screen already, by an own state or an update.
    shown: u64,
}

/// What an update acknowledged (see [`Sent::update`]).
#[derive(Debug, Default)]
pub(super) struct Acknowledged {
    /// Click-to-screen of the inputs it showed first (no own state had).
    pub(super) first_shown_ms: Vec<f64>,
    /// Click-to-update of every input it acknowledged.
    pub(super) update_ms: Vec<f64>,
    /// When each was sent, wall µs (for the input delivery time).
    pub(super) sent_wall_us: Vec<u64>,
}

impl Sent {
    /// As a client does after its session resumed: sends again, on the new connection's input
    /// stream, every input it still has from `resume_after` (what the gateway says it may not
    /// have applied: after a restart, everything after the last stored copy), in order.
    pub(super) async fn resend(
        &self,
        inputs: &mut horizon_transport::StreamSender<Gateway>,
        resume_after: Seq,
    ) -> Result<(), String> {
        let acked = self.acked.iter().filter(|(s, _)| *s >= resume_after.0).map(|(s, b)| (*s, b));
        let pending = self.pending.range(resume_after.0..).map(|(s, (_, _, b))| (*s, b));
        for (s, bytes) in acked.chain(pending) {
            let item = gateway::Item::Input { seq: Seq(s), bytes: bytes.clone() };
            inputs.send(&item).await.map_err(|e| format!("resend: {e}"))?;
        }
        Ok(())
    }

    /// An own state showing the inputs up to `applied` reached the player at `at`: the
    /// click-to-screen of those not on screen yet. They stay kept: only an update acknowledges.
    pub(super) fn own(&mut self, applied: u64, at: Instant) -> Vec<f64> {
        if applied <= self.shown {
            return Vec::new();
        }
        let news = self.pending.range(self.shown + 1..=applied);
        let ms = news.map(|(_, (sent, _, _))| ms_between(*sent, at)).collect();
        self.shown = applied;
        ms
    }

    /// An update acknowledging the inputs up to `acked` reached the player at `at`: they are
    /// no longer kept.
    pub(super) fn update(&mut self, acked: u64, at: Instant) -> Acknowledged {
        let later = self.pending.split_off(&(acked + 1));
        let done = std::mem::replace(&mut self.pending, later);
        let mut out = Acknowledged::default();
        for (seq, (sent, wall, bytes)) in done {
            if self.acked.len() >= KEPT_ACKED {
                self.acked.pop_front();
            }
            self.acked.push_back((seq, bytes));
            let ms = ms_between(sent, at);
            out.update_ms.push(ms);
            if seq > self.shown {
                out.first_shown_ms.push(ms);
            }
            out.sent_wall_us.push(wall);
        }
        self.shown = self.shown.max(acked);
        out
    }
}

/// Acknowledged inputs a bot keeps, as many as its gateway keeps (`MAX_KEPT`): stored copies
/// lag seconds behind, but a bubble spread over several servers stores no whole copy
/// (docs/protocol.md §8, "Resuming after the gateway restarted").
const KEPT_ACKED: usize = 1024;

fn ms_between(from: Instant, to: Instant) -> f64 {
    to.duration_since(from).as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sent(seqs: std::ops::RangeInclusive<u64>, at: Instant) -> Sent {
        let mut s = Sent::default();
        for seq in seqs {
            s.pending.insert(seq, (at, 0, Blob::default()));
        }
        s
    }

    #[test]
    fn batched_an_update_puts_inputs_on_screen_and_is_timed_both_ways() {
        let t0 = Instant::now();
        let mut s = sent(1..=3, t0);
        let done = s.update(2, t0 + Duration::from_millis(30));
        assert_eq!(done.first_shown_ms, [30.0, 30.0]);
        assert_eq!(done.update_ms, [30.0, 30.0]);
        assert_eq!(s.pending.keys().copied().collect::<Vec<_>>(), [3], "3 is still kept");
        let done = s.update(3, t0 + Duration::from_millis(45));
        assert_eq!((done.first_shown_ms, done.update_ms), (vec![45.0], vec![45.0]));
    }

    #[test]
    fn an_own_state_shows_inputs_first_and_the_update_only_acknowledges_them() {
        let t0 = Instant::now();
        let mut s = sent(1..=3, t0);
        assert_eq!(s.own(2, t0 + Duration::from_millis(10)), [10.0, 10.0]);
        assert_eq!(s.pending.len(), 3, "an own state acknowledges nothing: inputs stay kept");
        assert!(
            s.own(1, t0 + Duration::from_millis(12)).is_empty(),
            "an older one shows nothing new"
        );
        let done = s.update(3, t0 + Duration::from_millis(30));
        assert_eq!(done.first_shown_ms, [30.0], "only 3 was not on screen yet");
        assert_eq!(done.update_ms, [30.0, 30.0, 30.0], "the batched path, for every input");
        assert!(s.pending.is_empty());
    }
}
