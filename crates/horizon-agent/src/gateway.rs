//! One player's session at their home gateway, sans-IO: which inputs are kept and re-sent,
//! where they go, which updates reach the player, when the player must be told the simulation
//! is unreachable. The agent's loop feeds it (an input, an update, a route, a covered copy,
//! the time) and carries out what it says.
//!
//! Inputs are kept until a stored copy of the universe backup covers them — acknowledged or
//! not — so that a holder restored from that copy gets every input it lacks (design.md §6,
//! I4). The route follows the player's bubble to any site that sends an update under a newer
//! epoch: epochs fence, so only the bubble's current holder writes under the newest one.

use std::collections::BTreeMap;
use std::time::Duration;

use horizon_proto::{Blob, BubbleId, Epoch, Name, Seq};
use std::time::Instant;

/// Inputs kept per player until a stored copy covers them. Beyond it the oldest applied ones are
/// forgotten (a restore could no longer replay them; counted); if none is applied yet, new
/// inputs are refused and counted.
pub(crate) const MAX_KEPT: usize = 1024;
/// The largest input a player may send: a move, a click, a command. A bigger one is refused
/// and the player's connection closed with `too_large` (nobody else is touched).
pub(crate) const MAX_INPUT_BYTES: usize = 16 << 10;
/// The most bytes of one player's inputs kept unacknowledged or uncovered (with
/// [`MAX_KEPT`]): beyond, as when too many are kept, new ones are refused.
pub(crate) const MAX_KEPT_BYTES: usize = 1 << 20;
/// An input not acknowledged after this is sent again to where the player is simulated.
pub(crate) const RESEND_AFTER: Duration = Duration::from_millis(400);
/// A routed player with no update for this long is told `Reconnecting` (once per silence).
/// (Longer than a handover's freeze, 150–250 ms, or a crashed server's restart.)
pub(crate) const STALL_NOTICE: Duration = Duration::from_secs(1);

/// What became of one input from the player.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InputVerdict {
    /// Applied or already kept: nothing to do.
    Duplicate,
    /// Kept, to be sent to the route; `forgot_applied` when the oldest applied input was
    /// forgotten to make room (before any copy covered it).
    Kept { forgot_applied: bool },
    /// Too many inputs (or bytes of them) waiting, none of them applied: refused.
    Refused,
    /// Over [`MAX_INPUT_BYTES`]: refused, and the player told.
    TooLarge,
}

/// What an update of a bubble means for this player.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpdateVerdict {
    /// Of a bubble the player is not routed to: not for them.
    NotTheirs,
    /// Deliver it; with `resend_all`, a new holder runs the bubble (a newer epoch): send it
    /// every kept input.
    Deliver { resend_all: bool },
}

/// The player's bubble moved to a new holder: the gap in their updates, as the gateway saw it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Moved {
    /// The site whose update came last before, and the one of the first update after.
    pub(crate) from: Name,
    pub(crate) to: Name,
    pub(crate) gap: Duration,
}

/// One player's session. See the module documentation.
#[derive(Debug)]
pub(crate) struct PlayerSession {
    route: Option<(BubbleId, Name)>,
    /// The newest epoch seen in an update of the routed bubble (0 until the first).
    route_epoch: Epoch,
    /// Inputs with `seq > covered`, each with when it was last sent.
    kept: BTreeMap<Seq, (Blob, Instant)>,
    /// The bytes of `kept`'s inputs.
    kept_bytes: usize,
    /// When each input not yet acknowledged first reached the gateway (at most one per kept input).
    received: BTreeMap<Seq, Instant>,
    /// How long each input acknowledged since the last [`PlayerSession::take_served`] took,
    /// from reaching the gateway to the update acknowledging it.
    served: Vec<Duration>,
    acked: Seq,
    covered: Seq,
    last_update: Option<Instant>,
    /// The site of the last update delivered.
    last_site: Option<Name>,
    /// The last move seen, until taken ([`PlayerSession::take_moved`]).
    moved: Option<Moved>,
    /// The bubble of the last update delivered.
    last_bubble: Option<BubbleId>,
    /// The last change of bubble seen (a border crossing, a merge), until taken
    /// ([`PlayerSession::take_crossed`]).
    crossed: Option<Moved>,
    told_reconnecting: bool,
    /// The gateway restarted under this session: the inputs the old one kept died with it.
    /// Its client sends again from `covered + 1` ([`PlayerSession::resume_after`], once), and
    /// every input after `covered` is kept again, acknowledged or not, until a copy covers it.
    rebuilt: bool,
    /// The seq the next resume starts from, when it is not the one after `acked`.
    resume_from: Option<Seq>,
}

impl PlayerSession {
    pub(crate) fn new(now: Instant) -> Self {
        PlayerSession {
            route: None,
            route_epoch: Epoch(0),
            kept: BTreeMap::new(),
            kept_bytes: 0,
            received: BTreeMap::new(),
            served: Vec::new(),
            acked: Seq(0),
            covered: Seq(0),
            last_update: Some(now),
            last_site: None,
            moved: None,
            last_bubble: None,
            crossed: None,
            told_reconnecting: false,
            rebuilt: false,
            resume_from: None,
        }
    }

    /// The session of a player whose gateway restarted, kept until its client resumes it:
    /// its inputs up to `covered` are in a stored copy; those after it only in its client, and
    /// in the state simulating it now, which a failover may lose. So its client sends again
    /// from the next one (chaos seed 5118 with `--overlapping`, where a restore from an older
    /// copy lost what the player was told, had it sent from its last acknowledgement).
    pub(crate) fn resumed(now: Instant, covered: Seq) -> Self {
        PlayerSession {
            acked: covered,
            covered,
            rebuilt: true,
            resume_from: Some(Seq(covered.0 + 1)),
            ..PlayerSession::new(now)
        }
    }

    /// The seq a client resuming now sends again from: the one after the last acknowledged,
    /// or, at the first resume after the gateway restarted, the one after the last covered.
    pub(crate) fn resume_after(&mut self) -> Seq {
        self.resume_from.take().unwrap_or(Seq(self.acked.0 + 1))
    }

    pub(crate) fn route(&self) -> Option<&(BubbleId, Name)> {
        self.route.as_ref()
    }

    /// The highest seq the simulation acknowledged.
    pub(crate) fn acked(&self) -> Seq {
        self.acked
    }

    /// An input from the player.
    pub(crate) fn input(&mut self, seq: Seq, bytes: Blob, now: Instant) -> InputVerdict {
        if bytes.0.len() > MAX_INPUT_BYTES {
            return InputVerdict::TooLarge;
        }
        // Acknowledged inputs are kept until a copy covers them: one not kept any more came
        // again. After a restart the gateway kept none: anything not covered is kept anew.
        let forgotten = if self.rebuilt { self.covered } else { self.acked };
        if seq <= forgotten || self.kept.contains_key(&seq) {
            return InputVerdict::Duplicate;
        }
        let mut forgot_applied = false;
        while self.kept.len() >= MAX_KEPT || self.kept_bytes + bytes.0.len() > MAX_KEPT_BYTES {
            match self.kept.first_key_value() {
                Some((&oldest, _)) if oldest <= self.acked => {
                    if let Some((gone, _)) = self.kept.remove(&oldest) {
                        self.kept_bytes -= gone.0.len();
                    }
                    forgot_applied = true;
                }
                _ => return InputVerdict::Refused,
            }
        }
        self.kept_bytes += bytes.0.len();
        self.kept.insert(seq, (bytes, now));
        if seq > self.acked {
            self.received.insert(seq, now);
        }
        InputVerdict::Kept { forgot_applied }
    }

    /// The core says where the player is simulated now. True when that changed: every kept
    /// input must go there (see [`PlayerSession::resend`]).
    pub(crate) fn set_route(&mut self, bubble: BubbleId, site: Name) -> bool {
        let new = Some((bubble, site));
        if self.route == new {
            return false;
        }
        if self.route.as_ref().is_none_or(|(b, _)| *b != bubble) {
            self.route_epoch = Epoch(0);
        }
        self.route = new;
        true
    }

    /// Whether a state of `bubble` under `epoch` from `site` is what the player is shown now:
    /// their route's bubble, under the epoch its updates already came with, from the site they
    /// came from. An own state ([`horizon_proto::Own`]) is delivered only then: it never moves
    /// a route or acknowledges anything, so it waits for an update to have done so.
    pub(crate) fn shows(&self, bubble: BubbleId, epoch: Epoch, site: &Name) -> bool {
        self.route.as_ref().is_some_and(|(b, _)| *b == bubble)
            && self.last_bubble == Some(bubble)
            && self.route_epoch == epoch
            && self.last_site.as_ref() == Some(site)
    }

    /// An update of `bubble` under `epoch`, acknowledging `acked`, from `site`.
    pub(crate) fn on_update(
        &mut self,
        bubble: BubbleId,
        epoch: Epoch,
        acked: Seq,
        site: &Name,
        now: Instant,
    ) -> UpdateVerdict {
        if self.route.as_ref().is_some_and(|(b, _)| *b != bubble) {
            return UpdateVerdict::NotTheirs;
        }
        let mut resend_all = false;
        if epoch > self.route_epoch {
            let first = self.route_epoch == Epoch(0);
            if first && acked < self.acked {
                // The first update of the bubble the player was routed to has applied less
                // than the one before: the state that crossed came from a restored copy
                // older than what the player was told. Its holder's acknowledgements are the
                // truth, and every kept input goes to it (those sent when the route changed
                // may have been lost on a link that was down).
                self.acked = acked;
                resend_all = true;
            }
            self.route_epoch = epoch;
            if self.route.as_ref().is_some_and(|(_, s)| s != site) {
                tracing::info!(bubble = bubble.0, %site, "route follows the bubble's newer epoch");
                self.route = Some((bubble, site.clone()));
            }
            if !first {
                // The new holder's acknowledgements are the truth from here on (a restore from
                // a copy may have fewer than the lost holder had).
                self.acked = acked;
                resend_all = true;
                if let (Some(last), Some(from)) = (self.last_update, self.last_site.clone()) {
                    let gap = now.saturating_duration_since(last);
                    self.moved = Some(Moved { from, to: site.clone(), gap });
                }
            }
        }
        if let (Some(prev), Some(last), Some(from)) =
            (self.last_bubble, self.last_update, self.last_site.clone())
            && prev != bubble
        {
            let gap = now.saturating_duration_since(last);
            self.crossed = Some(Moved { from, to: site.clone(), gap });
        }
        self.last_bubble = Some(bubble);
        if self.last_site.as_ref() != Some(site) {
            self.last_site = Some(site.clone());
        }
        self.acked = self.acked.max(acked);
        let waiting = self.received.split_off(&Seq(self.acked.0 + 1));
        let served = std::mem::replace(&mut self.received, waiting);
        self.served.extend(served.into_values().map(|at| now.saturating_duration_since(at)));
        self.last_update = Some(now);
        self.told_reconnecting = false;
        UpdateVerdict::Deliver { resend_all }
    }

    /// The delays of the inputs acknowledged since the last call: from reaching the gateway to
    /// the update that acknowledged them (the mesh's part of the player's click-to-screen).
    pub(crate) fn take_served(&mut self) -> Vec<Duration> {
        std::mem::take(&mut self.served)
    }

    /// The player's last change of bubble (a border crossing, a merge): the gap between the
    /// last update of the old bubble and the first of the new one, once.
    pub(crate) fn take_crossed(&mut self) -> Option<Moved> {
        self.crossed.take()
    }

    /// The last move of the player's bubble to a new holder (a newer epoch), once.
    pub(crate) fn take_moved(&mut self) -> Option<Moved> {
        self.moved.take()
    }

    /// A stored copy includes this player's inputs up to `seq`: they are forgotten.
    pub(crate) fn covered(&mut self, seq: Seq) {
        // Never beyond what was applied: a copy cannot include more.
        let seq = seq.min(self.acked);
        if seq > self.covered {
            self.covered = seq;
            self.kept = self.kept.split_off(&Seq(seq.0 + 1));
            self.kept_bytes = self.kept.values().map(|(b, _)| b.0.len()).sum();
        }
    }

    /// The inputs to send again: with `all`, every kept one (a new holder drops those it
    /// applied); else those not acknowledged and last sent at least [`RESEND_AFTER`] ago.
    pub(crate) fn resend(&mut self, all: bool, now: Instant) -> Vec<(Seq, Blob)> {
        if self.route.is_none() {
            return Vec::new();
        }
        let from = if all { Seq(0) } else { Seq(self.acked.0 + 1) };
        let mut out = Vec::new();
        for (seq, (bytes, sent)) in self.kept.range_mut(from..) {
            if all || now.duration_since(*sent) >= RESEND_AFTER {
                *sent = now;
                out.push((*seq, bytes.clone()));
            }
        }
        out
    }

    /// True once per silence: the player is routed and no update came for [`STALL_NOTICE`]
    /// (its bubble stopped: a lost lease, a crashed server, a cut link).
    pub(crate) fn stalled(&mut self, now: Instant) -> bool {
        let silent = self.last_update.is_some_and(|t| now.duration_since(t) >= STALL_NOTICE);
        if self.route.is_some() && silent && !self.told_reconnecting {
            self.told_reconnecting = true;
            return true;
        }
        false
    }

    /// The player was just told `Reconnecting` (their bubble's lease ran out here).
    pub(crate) fn told(&mut self) {
        self.told_reconnecting = true;
    }

    /// Inputs kept.
    pub(crate) fn kept(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn blob() -> Blob {
        Blob(vec![1, 2, 3])
    }

    /// A session routed to bubble 7 at MTL, having seen one update of epoch 5.
    fn routed(now: Instant) -> PlayerSession {
        let mut s = PlayerSession::new(now);
        assert!(s.set_route(BubbleId(7), name("MTL")));
        let v = s.on_update(BubbleId(7), Epoch(5), Seq(0), &name("MTL"), now);
        assert_eq!(v, UpdateVerdict::Deliver { resend_all: false }, "the first update");
        s
    }

    /// Routed as [`routed`]: inputs 1 to 6 sent and applied at MTL, a copy covering 2.
    fn six_applied_two_covered(t: Instant) -> PlayerSession {
        let mut s = routed(t);
        for seq in 1..=6 {
            s.input(Seq(seq), blob(), t);
        }
        s.on_update(BubbleId(7), Epoch(5), Seq(6), &name("MTL"), t);
        s.covered(Seq(2));
        s
    }

    fn seqs(v: &[(Seq, Blob)]) -> Vec<u64> {
        v.iter().map(|(s, _)| s.0).collect()
    }

    #[test]
    fn inputs_are_kept_after_their_ack_until_a_copy_covers_them() {
        let t = tokio::time::Instant::now().into_std();
        let mut s = routed(t);
        for seq in 1..=5 {
            assert_eq!(s.input(Seq(seq), blob(), t), InputVerdict::Kept { forgot_applied: false });
        }
        assert_eq!(s.input(Seq(3), blob(), t), InputVerdict::Duplicate);
        s.on_update(BubbleId(7), Epoch(5), Seq(4), &name("MTL"), t);
        assert_eq!(s.kept(), 5, "acknowledged, not yet covered");
        assert_eq!(s.input(Seq(2), blob(), t), InputVerdict::Duplicate, "applied already");
        s.covered(Seq(9));
        assert_eq!(s.kept(), 1, "covered up to the ack only: 5 stays");
        s.covered(Seq(2));
        assert_eq!(s.kept(), 1, "coverage never goes back");
    }

    #[test]
    fn the_timer_resends_only_the_unacknowledged_and_a_new_route_gets_everything_kept() {
        let t = tokio::time::Instant::now().into_std();
        let mut s = routed(t);
        for seq in 1..=4 {
            s.input(Seq(seq), blob(), t);
        }
        s.on_update(BubbleId(7), Epoch(5), Seq(2), &name("MTL"), t);
        assert!(s.resend(false, t + Duration::from_millis(100)).is_empty(), "too early");
        let late = t + RESEND_AFTER;
        assert_eq!(seqs(&s.resend(false, late)), vec![3, 4]);
        assert!(s.resend(false, late).is_empty(), "sent again just now");
        assert!(!s.set_route(BubbleId(7), name("MTL")), "same route");
        assert!(s.set_route(BubbleId(7), name("PAR")));
        assert_eq!(seqs(&s.resend(true, late)), vec![1, 2, 3, 4], "the new holder gets all");
    }

    #[test]
    fn an_update_under_a_newer_epoch_moves_the_route_and_replays_what_the_restore_lacks() {
        let t = tokio::time::Instant::now().into_std();
        let mut s = six_applied_two_covered(t);
        // Restored on PAR from the copy covering seq 2; MTL cannot hear the core.
        let v = s.on_update(BubbleId(7), Epoch(9), Seq(2), &name("PAR"), t);
        assert_eq!(v, UpdateVerdict::Deliver { resend_all: true });
        assert_eq!(s.route(), Some(&(BubbleId(7), name("PAR"))));
        assert_eq!(s.acked(), Seq(2), "the restored holder's acknowledgements count");
        assert_eq!(seqs(&s.resend(true, t)), vec![3, 4, 5, 6], "everything after the copy");
        // A late update of the old epoch changes nothing.
        let old = s.on_update(BubbleId(7), Epoch(5), Seq(6), &name("MTL"), t);
        assert_eq!(old, UpdateVerdict::Deliver { resend_all: false });
        assert_eq!(s.route(), Some(&(BubbleId(7), name("PAR"))));
        assert_eq!(
            s.on_update(BubbleId(8), Epoch(99), Seq(0), &name("HKG"), t),
            UpdateVerdict::NotTheirs
        );
    }

    /// Seed 8801223 of the chaos simulator: the player's bubble was restored from a copy
    /// older than what they were told was applied, and they crossed at once into another
    /// bubble with that older state, while the link to it was down. The new bubble's first
    /// update acknowledges less: the acknowledged inputs it lacks are sent again, and again
    /// on the timer until it applies them.
    #[test]
    fn a_new_bubble_that_applied_less_than_was_acknowledged_gets_the_kept_inputs_again() {
        let t = tokio::time::Instant::now().into_std();
        let mut s = six_applied_two_covered(t);
        assert!(s.set_route(BubbleId(8), name("PAR")));
        assert_eq!(seqs(&s.resend(true, t)), vec![3, 4, 5, 6], "sent on the route change");
        // Lost on the way; the new bubble's state applied up to 2 only.
        let v = s.on_update(BubbleId(8), Epoch(11), Seq(2), &name("PAR"), t);
        assert_eq!(v, UpdateVerdict::Deliver { resend_all: true });
        assert_eq!(s.acked(), Seq(2));
        let late = t + RESEND_AFTER;
        assert_eq!(seqs(&s.resend(false, late)), vec![3, 4, 5, 6], "and on the timer");
        // A first update that has applied at least as much changes nothing.
        assert!(s.set_route(BubbleId(9), name("HKG")));
        let v = s.on_update(BubbleId(9), Epoch(12), Seq(6), &name("HKG"), t);
        assert_eq!(v, UpdateVerdict::Deliver { resend_all: false });
    }

    #[test]
    fn an_input_over_the_size_limit_is_refused_and_kept_bytes_are_bounded() {
        let t = tokio::time::Instant::now().into_std();
        let mut s = routed(t);
        let big = Blob(vec![0; MAX_INPUT_BYTES + 1]);
        assert_eq!(s.input(Seq(1), big, t), InputVerdict::TooLarge);
        assert_eq!(s.kept(), 0);
        // Inputs at the limit: 1 MiB of them is all that is kept unacknowledged.
        let full = || Blob(vec![0; MAX_INPUT_BYTES]);
        let fit = (MAX_KEPT_BYTES / MAX_INPUT_BYTES) as u64;
        for seq in 1..=fit {
            assert!(matches!(s.input(Seq(seq), full(), t), InputVerdict::Kept { .. }));
        }
        assert_eq!(s.input(Seq(fit + 1), full(), t), InputVerdict::Refused, "none applied yet");
        // Once some are applied, the oldest make room.
        s.on_update(BubbleId(7), Epoch(5), Seq(2), &name("MTL"), t);
        assert_eq!(s.input(Seq(fit + 1), full(), t), InputVerdict::Kept { forgot_applied: true });
        assert_eq!(s.kept() as u64, fit);
        s.covered(Seq(2));
        assert_eq!(
            s.kept_bytes,
            (fit as usize - 1) * MAX_INPUT_BYTES,
            "counted again after a copy"
        );
    }

    #[test]
    fn kept_inputs_are_bounded_forgetting_applied_ones_first() {
        let t = tokio::time::Instant::now().into_std();
        let mut s = routed(t);
        for seq in 1..=MAX_KEPT as u64 {
            s.input(Seq(seq), blob(), t);
        }
        let next = Seq(MAX_KEPT as u64 + 1);
        assert_eq!(s.input(next, blob(), t), InputVerdict::Refused, "none applied yet");
        s.on_update(BubbleId(7), Epoch(5), Seq(10), &name("MTL"), t);
        assert_eq!(s.input(next, blob(), t), InputVerdict::Kept { forgot_applied: true });
        assert_eq!(s.kept(), MAX_KEPT);
    }

    #[test]
    fn a_silent_route_is_noticed_once_per_silence() {
        let t = tokio::time::Instant::now().into_std();
        let mut s = routed(t);
        assert!(!s.stalled(t + STALL_NOTICE / 2));
        assert!(s.stalled(t + STALL_NOTICE));
        assert!(!s.stalled(t + STALL_NOTICE * 2), "told once");
        let back = t + STALL_NOTICE * 3;
        s.on_update(BubbleId(7), Epoch(5), Seq(0), &name("MTL"), back);
        assert!(s.stalled(back + STALL_NOTICE), "a new silence is told again");
        let mut unrouted = PlayerSession::new(t);
        assert!(!unrouted.stalled(t + STALL_NOTICE * 5), "not simulated yet: nothing to tell");
    }

    #[test]
    fn each_input_is_timed_once_from_the_gateway_to_the_update_that_acknowledges_it() {
        let t0 = tokio::time::Instant::now().into_std();
        let mut s = routed(t0);
        for seq in 1..=3 {
            s.input(Seq(seq), blob(), t0 + Duration::from_millis(10 * seq));
        }
        s.on_update(BubbleId(7), Epoch(5), Seq(2), &name("MTL"), t0 + Duration::from_millis(50));
        let ms: Vec<u128> = s.take_served().iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [40, 30], "inputs 1 and 2, from their arrival");
        s.on_update(BubbleId(7), Epoch(5), Seq(2), &name("MTL"), t0 + Duration::from_millis(80));
        assert!(s.take_served().is_empty(), "an input is timed once");
        s.input(Seq(3), blob(), t0 + Duration::from_millis(90));
        s.on_update(BubbleId(7), Epoch(5), Seq(3), &name("MTL"), t0 + Duration::from_millis(100));
        let ms: Vec<u128> = s.take_served().iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [70], "a resent input is timed from its first arrival");
    }

    #[test]
    fn a_change_of_bubble_is_measured_once_as_the_gap_between_the_two_bubbles_updates() {
        let t0 = tokio::time::Instant::now().into_std();
        let mut s = routed(t0);
        assert_eq!(s.take_crossed(), None, "the first bubble is no crossing");
        assert!(s.set_route(BubbleId(8), name("PAR")));
        let late = t0 + Duration::from_millis(20);
        assert_eq!(
            s.on_update(BubbleId(7), Epoch(5), Seq(0), &name("MTL"), late),
            UpdateVerdict::NotTheirs
        );
        let t1 = t0 + Duration::from_millis(150);
        s.on_update(BubbleId(8), Epoch(3), Seq(0), &name("PAR"), t1);
        let crossed = Moved { from: name("MTL"), to: name("PAR"), gap: Duration::from_millis(150) };
        assert_eq!(s.take_crossed(), Some(crossed));
        s.on_update(BubbleId(8), Epoch(3), Seq(0), &name("PAR"), t1 + Duration::from_millis(30));
        assert_eq!(s.take_crossed(), None, "once");
    }

    #[test]
    fn a_move_to_a_new_holder_is_measured_once_as_the_gap_in_updates() {
        let t0 = tokio::time::Instant::now().into_std();
        let mut s = PlayerSession::new(t0);
        s.set_route(BubbleId(7), name("MTL"));
        let mtl = name("MTL");
        s.on_update(BubbleId(7), Epoch(5), Seq(0), &mtl, t0);
        s.on_update(BubbleId(7), Epoch(5), Seq(1), &mtl, t0 + Duration::from_millis(33));
        assert_eq!(s.take_moved(), None, "the first update is no move");
        let par = name("PAR");
        let after = t0 + Duration::from_millis(33 + 180);
        s.on_update(BubbleId(7), Epoch(6), Seq(1), &par, after);
        let moved = Moved { from: mtl, to: par.clone(), gap: Duration::from_millis(180) };
        assert_eq!(s.take_moved(), Some(moved));
        assert_eq!(s.take_moved(), None, "taken once");
        s.on_update(BubbleId(7), Epoch(6), Seq(2), &par, after + Duration::from_millis(33));
        assert_eq!(s.take_moved(), None, "the same holder: no move");
    }
}
