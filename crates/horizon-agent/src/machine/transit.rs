//! Players' states in transit between bubbles, as this agent holds them: a part of the agent
//! machine that owns its state. `crossings.rs`, `bubbles.rs` and `peers.rs` decide when a state
//! moves; this file keeps what is on its way and for how long:
//! - **stashed**: states that came from another bubble before the member list saying where
//!   they go, by (player, the bubble they are for);
//! - **awaiting**: members whose state is on its way here from another bubble;
//! - **forwards**: bubbles here each player left, and where they went last, so a state that
//!   reaches a bubble its player has left goes on;
//! - **outbound**: states sent to another site, until it takes them;
//! - **delivered**: states taken, kept a while in case their bubble is restored from a copy
//!   without the player.

use std::collections::{BTreeMap, VecDeque};

use horizon_proto::{Blob, BubbleId, Name, PlayerId, Seq, control, transfer};
use std::time::Instant;

use super::{
    AWAIT_DEADLINE, CROSSING_BACKOFF, CROSSING_DEADLINE, CROSSING_KEEP, CROSSING_RETRY,
    CROSSING_TTL, MAX_CROSSINGS,
};

/// Bubbles remembered per player in [`Forward::left`].
const MAX_FORWARD_BUBBLES: usize = 16;

/// A player's state from another bubble that arrived before the core said where it goes.
struct Stashed {
    at: Instant,
    last_applied: Seq,
    state: Blob,
}

/// Where to send on a crossing that reaches a bubble its player has left.
struct Forward {
    /// The bubbles here the player left (at most [`MAX_FORWARD_BUBBLES`], the latest kept).
    left: VecDeque<BubbleId>,
    /// Their last departure from here.
    to: control::Departure,
    at: Instant,
}

/// A player's state on its way to another site, until that site takes it.
struct Outbound {
    site: Name,
    request: transfer::Request,
    since: Instant,
    /// When it was last sent, while an answer is awaited.
    sent: Option<Instant>,
    /// Not sent again before this.
    retry_at: Instant,
}

/// A crossing taken, kept a while: its bubble may be restored from a copy without the player.
struct Delivered {
    at: Instant,
    request: transfer::Request,
    /// The player has moved on from the bubble that took it (that bubble hands their state
    /// on): it goes again only when the core asks for it (`Recover`), never on a route.
    moved_on: bool,
}

#[derive(Default)]
pub(super) struct Transit {
    stashed: BTreeMap<(PlayerId, BubbleId), Stashed>,
    /// Player → (the bubble here it is awaited in, since).
    awaiting: BTreeMap<PlayerId, (BubbleId, Instant)>,
    forwards: BTreeMap<PlayerId, Forward>,
    outbound: BTreeMap<PlayerId, Outbound>,
    delivered: BTreeMap<PlayerId, Delivered>,
}

impl Transit {
    // Stashed states.

    /// Keeps a state that came for `to` before its member list: of two states of one player
    /// for one bubble, the one that applied more of its inputs. `false` when too many are
    /// kept already (nothing kept).
    pub(super) fn stash(
        &mut self,
        player: PlayerId,
        to: BubbleId,
        last_applied: Seq,
        state: &Blob,
        now: Instant,
    ) -> bool {
        let key = (player, to);
        if self.stashed.len() >= MAX_CROSSINGS && !self.stashed.contains_key(&key) {
            return false;
        }
        if self.stashed.get(&key).is_none_or(|c| c.last_applied <= last_applied) {
            self.stashed.insert(key, Stashed { at: now, last_applied, state: state.clone() });
        }
        true
    }

    /// A state of `player` that applied their inputs up to `last_applied` passes through here
    /// (it leaves a bubble, or comes into one): a state of theirs stashed for any bubble that
    /// applied fewer is older than it, and is forgotten. Joined later (the player coming back
    /// to that bubble, their newer state on its way) it would set them back.
    pub(super) fn newer_state(&mut self, player: PlayerId, last_applied: Seq) {
        let older: Vec<(PlayerId, BubbleId)> = self
            .stashed
            .range((player, BubbleId(0))..=(player, BubbleId(u64::MAX)))
            .filter(|(_, c)| c.last_applied < last_applied)
            .map(|(k, _)| *k)
            .collect();
        for key in older {
            self.stashed.remove(&key);
        }
    }

    /// The state stashed for `player` in `bubble`, taken out.
    pub(super) fn unstash(&mut self, player: PlayerId, bubble: BubbleId) -> Option<(Seq, Blob)> {
        self.stashed.remove(&(player, bubble)).map(|c| (c.last_applied, c.state))
    }

    /// Forgets stashed states older than [`CROSSING_TTL`].
    pub(super) fn expire_stashed(&mut self, now: Instant) {
        self.stashed.retain(|_, c| now.saturating_duration_since(c.at) < CROSSING_TTL);
    }

    // Members awaited.

    /// `player` is a member of `bubble` whose state is on its way here.
    pub(super) fn await_state(&mut self, player: PlayerId, bubble: BubbleId, now: Instant) {
        self.awaiting.insert(player, (bubble, now));
    }

    pub(super) fn awaits(&self, player: PlayerId, bubble: BubbleId) -> bool {
        self.awaiting.get(&player).is_some_and(|(b, _)| *b == bubble)
    }

    /// `player`'s state is no longer awaited in `bubble` (it left the member list); whether
    /// it was.
    pub(super) fn stop_awaiting(&mut self, player: PlayerId, bubble: BubbleId) -> bool {
        let awaited = self.awaits(player, bubble);
        if awaited {
            self.awaiting.remove(&player);
        }
        awaited
    }

    /// `player`'s state came.
    pub(super) fn arrived(&mut self, player: PlayerId) {
        self.awaiting.remove(&player);
    }

    /// The members awaited for [`AWAIT_DEADLINE`], no longer awaited: they start afresh.
    pub(super) fn overdue(&mut self, now: Instant) -> Vec<(PlayerId, BubbleId)> {
        let overdue: Vec<(PlayerId, BubbleId)> = self
            .awaiting
            .iter()
            .filter(|(_, (_, since))| now.saturating_duration_since(*since) >= AWAIT_DEADLINE)
            .map(|(p, (b, _))| (*p, *b))
            .collect();
        for (player, _) in &overdue {
            self.awaiting.remove(player);
        }
        overdue
    }

    // Forwards.

    /// `player` left `bubble` for `d`: a state of theirs that reaches `bubble` later goes on
    /// there.
    pub(super) fn forward_later(
        &mut self,
        player: PlayerId,
        bubble: BubbleId,
        d: control::Departure,
        now: Instant,
    ) {
        if self.forwards.len() >= MAX_CROSSINGS && !self.forwards.contains_key(&player) {
            return;
        }
        let f = self.forwards.entry(player).or_insert_with(|| Forward {
            left: VecDeque::new(),
            to: d.clone(),
            at: now,
        });
        f.left.retain(|b| *b != bubble);
        if f.left.len() >= MAX_FORWARD_BUBBLES {
            f.left.pop_front();
        }
        f.left.push_back(bubble);
        (f.to, f.at) = (d, now);
    }

    /// `player` is back in `bubble`: a state for it is for here again.
    pub(super) fn back_in(&mut self, player: PlayerId, bubble: BubbleId) {
        if let Some(f) = self.forwards.get_mut(&player) {
            f.left.retain(|b| *b != bubble);
        }
    }

    /// Where a state of `player` reaching `to` goes on to, when `to` is a bubble they left and
    /// it is not `expected` there: each bubble forwards once, so a state never circles.
    pub(super) fn forward_from(
        &mut self,
        player: PlayerId,
        to: BubbleId,
        expected: bool,
    ) -> Option<control::Departure> {
        match self.forwards.get_mut(&player) {
            Some(f) if !expected && f.left.contains(&to) => {
                f.left.retain(|b| *b != to);
                Some(f.to.clone())
            }
            _ => None,
        }
    }

    // Outbound and delivered.

    /// A state leaves for `site`: sent until taken.
    pub(super) fn send(
        &mut self,
        player: PlayerId,
        site: Name,
        request: transfer::Request,
        now: Instant,
    ) {
        let crossing = Outbound { site, request, since: now, sent: None, retry_at: now };
        self.outbound.insert(player, crossing);
    }

    /// A state of `player` is on its way from here.
    pub(super) fn sending(&self, player: PlayerId) -> bool {
        self.outbound.contains_key(&player)
    }

    /// A state of `player` is on its way from here, or was taken not long ago.
    pub(super) fn holds(&self, player: PlayerId) -> bool {
        self.outbound.contains_key(&player) || self.delivered.contains_key(&player)
    }

    /// `player`'s crossing, to send now: none is awaiting an answer and its backoff is over.
    pub(super) fn due(&self, player: PlayerId, now: Instant) -> Option<(Name, transfer::Request)> {
        let c = self.outbound.get(&player)?;
        if c.sent.is_some() || now < c.retry_at {
            return None;
        }
        Some((c.site.clone(), c.request.clone()))
    }

    /// `player`'s crossing was sent: its answer is awaited.
    pub(super) fn sent(&mut self, player: PlayerId, now: Instant) {
        if let Some(c) = self.outbound.get_mut(&player) {
            c.sent = Some(now);
        }
    }

    /// `request`, `player`'s crossing, was taken here: no longer sent, and kept as delivered
    /// when `keep`. Taking it may have sent the state on, to where the player went from that
    /// bubble: the crossing that carried it on replaced this one (on its way, or kept as
    /// delivered), and stays (`keep` is then false).
    pub(super) fn taken_here(
        &mut self,
        player: PlayerId,
        request: transfer::Request,
        now: Instant,
        keep: bool,
    ) {
        if self.outbound.get(&player).is_some_and(|c| c.request == request) {
            self.outbound.remove(&player);
        }
        if keep {
            self.keep_delivered(player, request, now);
        }
    }

    /// The answer to `player`'s crossing: taken (kept as delivered), or to be sent again after
    /// [`CROSSING_BACKOFF`].
    pub(super) fn answered(&mut self, player: PlayerId, taken: bool, now: Instant) {
        if taken {
            if let Some(c) = self.outbound.remove(&player) {
                self.keep_delivered(player, c.request, now);
            }
        } else if let Some(c) = self.outbound.get_mut(&player) {
            c.sent = None;
            c.retry_at = now + CROSSING_BACKOFF;
        }
    }

    pub(super) fn keep_delivered(
        &mut self,
        player: PlayerId,
        request: transfer::Request,
        now: Instant,
    ) {
        if self.delivered.len() < MAX_CROSSINGS || self.delivered.contains_key(&player) {
            let kept = Delivered { at: now, request, moved_on: false };
            self.delivered.insert(player, kept);
        }
    }

    /// `player`'s crossing on its way (or, if none, the one delivered not long ago) goes to
    /// `d` now, at once; whether there is one.
    pub(super) fn redirect(
        &mut self,
        player: PlayerId,
        d: &control::Departure,
        now: Instant,
    ) -> bool {
        if !self.outbound.contains_key(&player)
            && let Some(Delivered { request, .. }) = self.delivered.remove(&player)
        {
            let site = d.site.clone();
            self.outbound
                .insert(player, Outbound { site, request, since: now, sent: None, retry_at: now });
        }
        let Some(c) = self.outbound.get_mut(&player) else { return false };
        if let transfer::Request::Cross { to, epoch, .. } = &mut c.request {
            *to = d.to.bubble;
            *epoch = d.to.epoch;
        }
        c.site = d.site.clone();
        c.sent = None;
        c.retry_at = now;
        true
    }

    /// `player` plays in `bubble` now (the core's `Route`): whether a state of theirs from here
    /// must follow it — one on its way, into any bubble, or one delivered into `bubble` not
    /// long ago that the player has not moved on from. A state delivered into another bubble
    /// is marked moved on: only a `Recover` sends it again.
    pub(super) fn follows(&mut self, player: PlayerId, bubble: BubbleId) -> bool {
        let into = |req: &transfer::Request| matches!(req, transfer::Request::Cross { to, .. } if *to == bubble);
        let moved = self.outbound.contains_key(&player)
            || self.delivered.get(&player).is_some_and(|d| !d.moved_on && into(&d.request));
        if let Some(d) = self.delivered.get_mut(&player).filter(|d| !into(&d.request)) {
            d.moved_on = true;
        }
        moved
    }

    /// The crossings to `site`, to send again at once (its route changed).
    pub(super) fn again_towards(&mut self, site: &Name, now: Instant) -> Vec<PlayerId> {
        let players: Vec<PlayerId> =
            self.outbound.iter().filter(|(_, c)| &c.site == site).map(|(&p, _)| p).collect();
        for player in &players {
            if let Some(c) = self.outbound.get_mut(player) {
                c.sent = None;
                c.retry_at = now;
            }
        }
        players
    }

    /// The deadlines: delivered states kept [`CROSSING_KEEP`], forwards and crossings
    /// [`CROSSING_DEADLINE`] (the crossings given up are returned), and an answer not back
    /// after [`CROSSING_RETRY`] taken as lost. Returns (given up, every crossing still on its
    /// way).
    pub(super) fn deadlines(&mut self, now: Instant) -> (Vec<PlayerId>, Vec<PlayerId>) {
        let late = |since: Instant| now.saturating_duration_since(since) >= CROSSING_DEADLINE;
        self.delivered.retain(|_, d| now.saturating_duration_since(d.at) < CROSSING_KEEP);
        self.forwards.retain(|_, f| !late(f.at));
        let lost: Vec<PlayerId> =
            self.outbound.iter().filter(|(_, c)| late(c.since)).map(|(p, _)| *p).collect();
        for player in &lost {
            self.outbound.remove(player);
        }
        for c in self.outbound.values_mut() {
            // An answer not back after this is taken as lost (the request is idempotent).
            if c.sent.is_some_and(|t| now.saturating_duration_since(t) >= CROSSING_RETRY) {
                c.sent = None;
            }
        }
        (lost, self.outbound.keys().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use horizon_proto::{Epoch, LeaseRef};

    use super::*;

    const P: PlayerId = PlayerId(7);

    fn name(s: &str) -> Name {
        Name::new(s).expect("name")
    }

    fn cross(to: u64, last_applied: u64) -> transfer::Request {
        transfer::Request::Cross {
            player: P,
            from: BubbleId(1),
            to: BubbleId(to),
            epoch: Epoch(1),
            last_applied: Seq(last_applied),
            state: Blob::default(),
        }
    }

    fn departure(to: u64, site: &str) -> control::Departure {
        let to = LeaseRef { bubble: BubbleId(to), epoch: Epoch(3) };
        control::Departure { player: P, to, site: name(site) }
    }

    #[test]
    fn of_two_stashed_states_the_one_that_applied_more_inputs_is_kept_and_the_stash_is_bounded() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        assert!(t.stash(P, BubbleId(2), Seq(5), &Blob::default(), now));
        assert!(t.stash(P, BubbleId(2), Seq(3), &Blob::default(), now), "older: not kept");
        assert_eq!(t.unstash(P, BubbleId(2)).map(|(s, _)| s), Some(Seq(5)));
        assert_eq!(t.unstash(P, BubbleId(2)), None, "taken once");
        for i in 0..MAX_CROSSINGS as u64 {
            assert!(t.stash(PlayerId(1000 + i), BubbleId(2), Seq(1), &Blob::default(), now));
        }
        assert!(!t.stash(P, BubbleId(2), Seq(1), &Blob::default(), now), "full");
        assert!(t.stash(PlayerId(1000), BubbleId(2), Seq(2), &Blob::default(), now), "kept one");
        t.expire_stashed(now + CROSSING_TTL);
        assert!(t.stash(P, BubbleId(2), Seq(1), &Blob::default(), now), "room again");
    }

    #[test]
    fn a_state_reaching_a_bubble_its_player_left_goes_on_once_unless_expected_or_back() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        t.forward_later(P, BubbleId(2), departure(4, "MTL"), now);
        assert_eq!(t.forward_from(P, BubbleId(2), true), None, "expected there: stays");
        assert_eq!(t.forward_from(P, BubbleId(2), false).map(|d| d.to.bubble), Some(BubbleId(4)));
        assert_eq!(t.forward_from(P, BubbleId(2), false), None, "each bubble forwards once");
        t.forward_later(P, BubbleId(2), departure(4, "MTL"), now);
        t.back_in(P, BubbleId(2));
        assert_eq!(t.forward_from(P, BubbleId(2), false), None, "back in it: for here again");
    }

    #[test]
    fn a_crossing_is_sent_until_taken_then_kept_delivered_and_follows_its_bubble_when_redirected() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        t.send(P, name("PAR"), cross(2, 9), now);
        assert_eq!(t.due(P, now).map(|(site, _)| site), Some(name("PAR")));
        t.sent(P, now);
        assert_eq!(t.due(P, now), None, "its answer is awaited");
        t.answered(P, false, now);
        assert_eq!(t.due(P, now), None, "refused: backs off");
        assert!(t.due(P, now + CROSSING_BACKOFF).is_some());
        t.answered(P, true, now);
        assert!(!t.sending(P) && t.holds(P), "taken: kept delivered");
        // Its bubble was restored at MTL: the delivered state goes there, as a crossing again.
        assert!(t.redirect(P, &departure(2, "MTL"), now));
        let (site, request) = t.due(P, now).expect("due at once");
        assert_eq!(site, name("MTL"));
        assert!(matches!(request, transfer::Request::Cross { epoch: Epoch(3), .. }));
    }

    #[test]
    fn a_newer_state_of_a_player_makes_their_older_stashed_states_forgotten() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        let other = PlayerId(P.0 + 1);
        t.stash(P, BubbleId(1), Seq(40), &Blob(vec![1]), now);
        t.stash(P, BubbleId(2), Seq(95), &Blob(vec![2]), now);
        t.stash(other, BubbleId(1), Seq(10), &Blob(vec![3]), now);
        t.newer_state(P, Seq(90));
        assert_eq!(t.unstash(P, BubbleId(1)), None, "older: forgotten");
        assert_eq!(t.unstash(P, BubbleId(2)).map(|(s, _)| s), Some(Seq(95)), "newer: kept");
        assert_eq!(t.unstash(other, BubbleId(1)).map(|(s, _)| s), Some(Seq(10)), "not theirs");
    }

    #[test]
    fn a_crossing_taken_here_leaves_the_one_that_replaced_it_on_its_way() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        t.send(P, name("MTL"), cross(2, 9), now);
        t.taken_here(P, cross(2, 9), now, true);
        assert!(!t.sending(P) && t.holds(P), "taken: kept delivered");
        // Taking it sent the state on (the player had left bubble 2): that one stays.
        t.send(P, name("MTL"), cross(2, 9), now);
        t.send(P, name("PAR"), cross(4, 9), now);
        t.taken_here(P, cross(2, 9), now, false);
        assert_eq!(t.due(P, now).map(|(site, _)| site), Some(name("PAR")));
        // Sent on into a bubble here (kept as delivered there): that one stays too.
        let mut t = Transit::default();
        t.send(P, name("MTL"), cross(2, 9), now);
        t.keep_delivered(P, cross(4, 9), now);
        t.taken_here(P, cross(2, 9), now, false);
        assert!(t.follows(P, BubbleId(4)), "the state delivered into bubble 4 follows it");
    }

    #[test]
    fn an_unanswered_crossing_is_sent_again_and_given_up_at_its_deadline() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        t.send(P, name("PAR"), cross(2, 9), now);
        t.sent(P, now);
        let (lost, retry) = t.deadlines(now + CROSSING_RETRY - Duration::from_millis(1));
        assert!(lost.is_empty() && retry == [P]);
        assert_eq!(t.due(P, now + CROSSING_RETRY - Duration::from_millis(1)), None);
        t.deadlines(now + CROSSING_RETRY);
        assert!(t.due(P, now + CROSSING_RETRY).is_some(), "an answer not back is taken as lost");
        let (lost, retry) = t.deadlines(now + CROSSING_DEADLINE);
        assert_eq!((lost, retry), (vec![P], vec![]));
        assert!(!t.holds(P));
    }

    #[test]
    fn a_route_into_the_bubble_a_state_was_delivered_to_sends_it_and_another_marks_it_moved_on() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        t.keep_delivered(P, cross(2, 9), now);
        assert!(t.follows(P, BubbleId(2)), "the player's bubble was restored: the state follows");
        assert!(!t.follows(P, BubbleId(5)), "the player moved on: not on a route");
        assert!(!t.follows(P, BubbleId(2)), "moved on: only a Recover sends it again");
        assert!(t.holds(P));
    }

    #[test]
    fn a_member_whose_state_never_comes_is_no_longer_awaited_after_the_deadline() {
        let (mut t, now) = (Transit::default(), tokio::time::Instant::now().into_std());
        t.await_state(P, BubbleId(2), now);
        assert!(t.awaits(P, BubbleId(2)) && !t.awaits(P, BubbleId(3)));
        assert!(t.overdue(now).is_empty());
        assert_eq!(t.overdue(now + AWAIT_DEADLINE), [(P, BubbleId(2))]);
        assert!(!t.stop_awaiting(P, BubbleId(2)));
    }
}
