//! Players' states crossing between bubbles: sent to the site that simulates the player now
//! until it is taken (retried, redirected when the target bubble moves, kept a while after
//! delivery), sent on from a bubble the player has left, and the deadlines of each.

use super::peers::Took;
use super::*;

impl AgentMachine {
    /// Sends a departed player's state to the site that simulates them now.
    pub(super) fn cross(
        &mut self,
        player: PlayerId,
        from: BubbleId,
        d: control::Departure,
        last_applied: Seq,
        state: Blob,
        now: Instant,
    ) {
        self.stats.crossings.fetch_add(1, Ordering::Relaxed);
        self.transit.newer_state(player, last_applied);
        let request = transfer::Request::Cross {
            player,
            from,
            to: d.to.bubble,
            epoch: d.to.epoch,
            last_applied,
            state,
        };
        if d.site == self.cfg.site {
            match self.take_crossing(&request, now) {
                // Taken, or kept until its bubble says the player comes: either way, kept in
                // case that bubble is restored from a copy without them.
                Ok(Took::Joined | Took::Kept) => self.transit.keep_delivered(player, request, now),
                // Sent on: the crossing that carried it on keeps it, as delivered where it went
                // (or on its way there), not this one into a bubble the player left.
                Ok(Took::SentOn) => {}
                Err(fault) => {
                    tracing::warn!(player = player.0, %fault, "crossing within the site lost")
                }
            }
            return;
        }
        // Sent until that site takes it into its bubble: its link may be down, the site
        // restarting, or not told yet that the player comes.
        self.transit.send(player, d.site, request, now);
        self.send_crossing(player, now);
    }

    /// Sends a crossing (again) if no answer is awaited: taken here if its bubble runs here now
    /// (restored here meanwhile), else sent to its site if the link is up.
    pub(super) fn send_crossing(&mut self, player: PlayerId, now: Instant) {
        let Some((site, request)) = self.transit.due(player, now) else { return };
        if let transfer::Request::Cross { to, .. } = &request
            && self.bubbles.get(to).is_some_and(|b| b.phase() == Phase::Running)
        {
            match self.take_crossing(&request, now) {
                Ok(Took::Joined) => self.transit.taken_here(player, request, now, true),
                // The crossing that carried it on keeps it (see `cross`).
                Ok(Took::SentOn) => self.transit.taken_here(player, request, now, false),
                Ok(Took::Kept) | Err(_) => {}
            }
            return;
        }
        if !self.reaches(&site) {
            return;
        }
        self.transit.sent(player, now);
        self.ask_peer(&site, Pending(Then::Crossed { player }), request);
    }

    /// A crossing still on its way — or taken not long ago, by a bubble since restored from a
    /// copy that may lack the player — goes to where its bubble runs now.
    pub(super) fn redirect_crossing(
        &mut self,
        player: PlayerId,
        d: control::Departure,
        now: Instant,
    ) {
        if self.transit.redirect(player, &d, now) {
            self.send_crossing(player, now);
        }
    }

    /// The bubble each of these players is in was restored from a copy that may lack them: a
    /// state of theirs kept here (a crossing on its way, or delivered not long ago, into
    /// whichever bubble) goes to it. Its server keeps the state that applied more inputs.
    pub(super) fn recover(&mut self, routes: Vec<control::PlayerRoute>, now: Instant) {
        for r in routes {
            if self.transit.holds(r.player) {
                let to = LeaseRef { bubble: r.bubble, epoch: Epoch(0) };
                let d = control::Departure { player: r.player, to, site: r.site };
                self.redirect_crossing(r.player, d, now);
            }
        }
    }

    /// The answer to a crossing: taken, or to be sent again (after [`CROSSING_BACKOFF`]).
    pub(super) fn crossed(&mut self, player: PlayerId, taken: bool, now: Instant) {
        self.transit.answered(player, taken, now);
    }

    /// Crossings are retried until taken or [`CROSSING_DEADLINE`]; members whose crossing
    /// has not come by [`AWAIT_DEADLINE`] start afresh.
    pub(super) fn crossing_deadlines(&mut self, now: Instant) {
        let (lost, retry) = self.transit.deadlines(now);
        for player in lost {
            self.stats.crossings_lost.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(player = player.0, "crossing not taken in time: given up");
        }
        for player in retry {
            self.send_crossing(player, now);
        }
        for (player, bubble) in self.transit.overdue(now) {
            let Some(local) = self.bubbles.get(&bubble) else { continue };
            let (server, lease) = (local.server_of(player).clone(), local.lease_ref());
            tracing::warn!(
                player = player.0,
                bubble = bubble.0,
                "crossing state never came: the player starts afresh"
            );
            self.join(&server, lease, player, Seq(0), Blob::default());
        }
    }

    pub(super) fn route(&mut self, routes: Vec<control::PlayerRoute>, now: Instant) {
        for r in routes {
            // The player's bubble runs elsewhere now (restored): a crossing into it from here,
            // on its way or taken not long ago, follows it.
            // (Restored on the same site too, after a server crash: the copy may lack them. A
            // state the bubble already has is ignored there.) And a crossing from here not
            // taken yet, into any bubble: the player plays in this one now (the bubble it went
            // to never took it: its holder cut from the core, or gone), so its state goes here.
            // A crossing taken by a bubble the player has left since is of no use to where
            // they play now while that bubble hands their state on: never sent on a route
            // again (a route back into that bubble would send an old state), but kept for a
            // `Recover`, in case that bubble's holder dies before it does.
            if self.transit.follows(r.player, r.bubble) {
                // A crossing from here still on its way: it follows the player's bubble, under
                // whatever epoch runs it there.
                let to = LeaseRef { bubble: r.bubble, epoch: Epoch(0) };
                let d = control::Departure { player: r.player, to, site: r.site.clone() };
                self.redirect_crossing(r.player, d, now);
            }
            // Every input kept goes to the new holder, which applies each (player, seq) once.
            self.follow_route(r.player, r.bubble, r.site, now);
        }
    }
}
