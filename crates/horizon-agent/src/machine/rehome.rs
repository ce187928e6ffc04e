//! A whole region moved off an overfull server with its state (design.md §4, "Within a site"):
//! everything its server holds moves, not only its players. The core fences the old server
//! off first: this site asks (`Rehome`), the core answers with a `Regrant` under a newer
//! epoch, a ready server stands by under it, and the old server's snapshot, deltas and seal go
//! to it, exactly as a handover target takes them from another site. The new server runs from
//! the seal's next tick; the old one is released.
//!
//! The `Regrant` is answered when the region runs on its new server, so the core's later
//! orders (the site serves them in order) find it there. What goes wrong before the old server
//! froze leaves the region where it was, regranted in place; after it froze, the region is
//! lost here and the core fails it over from its copy, as after a crash. Without the core the
//! region moves as before, players only ([`AfterRegroup::Relieve`](super::parts)).

use super::*;

/// How long a granted move may take before it is given up: less than the 5 s after which the
/// site serves the core's next order anyway, so none overtakes the move.
pub(super) const REHOME_DEADLINE: Duration = Duration::from_secs(4);

/// How long the core's `Regrant` may take to come after it said yes.
const ASKED_DEADLINE: Duration = Duration::from_secs(30);

/// A region on its way to another server of this site.
#[derive(Debug)]
pub(super) struct Rehome {
    /// The overfull server it leaves.
    from: Name,
    /// When it was asked for, or granted.
    at: Instant,
    step: Step,
}

#[derive(Debug)]
enum Step {
    /// `Rehome` sent to the core; its `Regrant` comes on the ordered lane.
    Asked,
    /// The core's `Regrant` (`token`, answered when done) fenced `from` off with `lease`.
    Granted {
        token: Token,
        lease: Lease,
        received: Instant,
        /// The server standing by under `lease`, once it took the region.
        to: Option<Name>,
        /// `from` answered its `Freeze`: it writes nothing more, its seal is on its way.
        frozen: bool,
        /// Players' states that came for the region meanwhile (crossings): joined where it
        /// runs once it landed, or stays. On `from`, after its snapshot, they would be lost.
        joins: Vec<(PlayerId, Seq, Blob)>,
    },
}

/// What a request of a move waits for; the old server's answers name the move by the epoch
/// the core granted it (an answer for a move given up since changes nothing).
#[derive(Debug)]
pub(super) enum Awaited {
    /// The core's answer to `Rehome`.
    Asked,
    /// The old server began its snapshot and deltas.
    Copying(Epoch),
    /// The old server froze.
    Frozen(Epoch),
}

impl AgentMachine {
    /// Moves `bubble` off `from`, an overfull server, with its state: asks the core first.
    pub(super) fn rehome(&mut self, bubble: BubbleId, from: &Name, now: Instant) {
        let Some(local) = self.bubbles.get(&bubble) else { return };
        let lease = local.lease_ref();
        self.rehomes.insert(bubble, Rehome { from: from.clone(), at: now, step: Step::Asked });
        let then = Then::Rehome { bubble, awaited: Awaited::Asked };
        self.ask_core(then, control::Request::Rehome { lease });
    }

    /// Whether `bubble` is moving to another server (asked for, or under way).
    pub(super) fn rehoming(&self, bubble: BubbleId) -> bool {
        self.rehomes.contains_key(&bubble)
    }

    /// Whether `bubble`'s move is under way (granted): its member changes wait, no copy of it
    /// is taken.
    pub(super) fn rehome_granted(&self, bubble: BubbleId) -> bool {
        self.rehomes.get(&bubble).is_some_and(|r| matches!(r.step, Step::Granted { .. }))
    }

    /// A reply to one of a move's requests.
    pub(super) fn rehome_answered(
        &mut self,
        bubble: BubbleId,
        awaited: Awaited,
        ok: Result<(), Failure>,
        now: Instant,
    ) {
        let current = |epoch: Epoch| {
            matches!(
                self.rehomes.get(&bubble),
                Some(Rehome { step: Step::Granted { lease, .. }, .. }) if lease.epoch == epoch
            )
        };
        match awaited {
            Awaited::Copying(epoch) | Awaited::Frozen(epoch) if !current(epoch) => return,
            _ => {}
        }
        match (awaited, ok) {
            (Awaited::Asked, Ok(())) => {}
            (Awaited::Asked, Err(e)) => {
                // Refused (it is changing), or no answer: it stays. A `Regrant` the core sent
                // all the same is carried out in place.
                if self.rehomes.get(&bubble).is_some_and(|r| matches!(r.step, Step::Asked)) {
                    self.rehomes.remove(&bubble);
                }
                tracing::debug!(site = %self.cfg.site, bubble = bubble.0, error = %e, "region not moved: the core said no");
            }
            (Awaited::Copying(_), Ok(())) => self.freeze_old(bubble),
            (Awaited::Copying(_), Err(e)) => self.move_back(bubble, &format!("copy: {e}"), now),
            (Awaited::Frozen(_), Ok(())) => {
                if let Some(Rehome { step: Step::Granted { frozen, .. }, .. }) =
                    self.rehomes.get_mut(&bubble)
                {
                    *frozen = true;
                }
            }
            // Refused: it did not freeze, and runs on. Unanswered: it may have; the deadline
            // decides.
            (Awaited::Frozen(_), Err(Failure::Refused(f))) => {
                self.move_back(bubble, &format!("freeze: {}", f.message), now)
            }
            (Awaited::Frozen(_), Err(_)) => {}
        }
    }

    /// The core's `Regrant` for a region this site asked to move: a server stands by under
    /// the new lease. `false`: not a move this machine can make now (the caller regrants in
    /// place).
    pub(super) fn rehome_regranted(
        &mut self,
        token: Token,
        old: LeaseRef,
        lease: Lease,
        received: Instant,
        now: Instant,
    ) -> bool {
        let Some(r) = self.rehomes.get(&old.bubble) else { return false };
        let from = r.from.clone();
        let can = matches!(r.step, Step::Asked)
            && !self.regrouping(old.bubble)
            && self.fleet.contains(&from)
            && self.bubbles.get(&old.bubble).is_some_and(|l| {
                l.lease().epoch == old.epoch
                    && l.phase() == Phase::Running
                    && l.extra().is_empty()
                    && *l.server() == from
            });
        if !can {
            self.rehomes.remove(&old.bubble);
            return false;
        }
        let step =
            Step::Granted { token, lease, received, to: None, frozen: false, joins: Vec::new() };
        self.rehomes.insert(old.bubble, Rehome { from, at: now, step });
        let local = &self.bubbles[&old.bubble];
        let (region, players) = (local.region(), local.members().len().max(1) as u32);
        let job = AssignJob::Rehome { lease: LeaseRef { bubble: old.bubble, epoch: lease.epoch } };
        if let Err(fault) = self.assign(lease, region, players, true, job, received, now) {
            self.move_back(old.bubble, &fault.message, now);
        }
        true
    }

    /// A server took (or refused) the region as its new home, standing by.
    pub(super) fn rehome_assigned(
        &mut self,
        new: LeaseRef,
        server: Name,
        refused: Option<Fault>,
        now: Instant,
    ) {
        let bubble = new.bubble;
        let current = matches!(
            self.rehomes.get(&bubble),
            Some(Rehome { step: Step::Granted { lease, .. }, .. }) if lease.epoch == new.epoch
        );
        if let Some(fault) = refused {
            if current {
                self.move_back(bubble, &format!("server {server}: {}", fault.message), now);
            }
            return;
        }
        let old = self.bubbles.get(&bubble).map(|l| l.lease_ref());
        let standing_by = match self.rehomes.get_mut(&bubble) {
            Some(Rehome { from, step: Step::Granted { to, .. }, .. }) if current => {
                *to = Some(server.clone());
                Some(from.clone())
            }
            _ => None,
        };
        let (Some(from), Some(lease)) = (standing_by, old) else {
            // Given up meanwhile: the server goes back.
            if self.release(&server, bubble) {
                let request = server::Request::Release { lease: new };
                self.ask_server(&server, Then::Nothing("release"), request);
            }
            return;
        };
        // Its snapshot, then every tick's delta, go to the new server (`rehome_target`).
        let then = Then::Rehome { bubble, awaited: Awaited::Copying(new.epoch) };
        self.ask_server(&from, then, server::Request::Copy { lease, deltas: true });
    }

    /// The old server copies: it stops at its next tick and seals.
    fn freeze_old(&mut self, bubble: BubbleId) {
        let Some(Rehome { from, step: Step::Granted { lease: granted, .. }, .. }) =
            self.rehomes.get(&bubble)
        else {
            return;
        };
        let Some(lease) = self.bubbles.get(&bubble).map(|l| l.lease_ref()) else { return };
        let (from, epoch) = (from.clone(), granted.epoch);
        let then = Then::Rehome { bubble, awaited: Awaited::Frozen(epoch) };
        self.ask_server(&from, then, server::Request::Freeze { lease });
    }

    /// Where a state item from `server` goes instead of the core or a handover's target: the
    /// server standing by for the region it moves off.
    pub(super) fn rehome_target(&self, server: &Name, bubble: BubbleId) -> Option<Name> {
        match self.rehomes.get(&bubble)? {
            Rehome { from, step: Step::Granted { to: Some(to), .. }, .. } if from == server => {
                Some(to.clone())
            }
            _ => None,
        }
    }

    /// The region's first update from its new server, under the new epoch: it lives there now.
    /// `true` when this was that update (the caller fans it out as any).
    pub(super) fn rehome_landed(&mut self, server: &Name, epoch: Epoch, bubble: BubbleId) -> bool {
        let landed = matches!(
            self.rehomes.get(&bubble),
            Some(Rehome { step: Step::Granted { to: Some(to), lease, .. }, .. })
                if to == server && lease.epoch == epoch
        );
        if !landed {
            return false;
        }
        let Some(Rehome {
            from,
            step: Step::Granted { token, lease, received, to, joins, .. },
            ..
        }) = self.rehomes.remove(&bubble)
        else {
            return false;
        };
        let Some(local) = self.bubbles.get_mut(&bubble) else { return false };
        let old = local.lease_ref();
        local.rehomed(lease, received, to.unwrap_or_else(|| server.clone()));
        let new = local.lease_ref();
        for (player, last_applied, state) in joins {
            let server = self.bubbles[&bubble].server_of(player).clone();
            self.join(&server, new, player, last_applied, state);
        }
        if self.release(&from, bubble) {
            self.ask_server(
                &from,
                Then::Nothing("release"),
                server::Request::Release { lease: old },
            );
        }
        self.stats.regions_moved.fetch_add(1, Ordering::Relaxed);
        tracing::info!(site = %self.cfg.site, bubble = bubble.0, %from, to = %server, epoch = epoch.0, "region moved off an overfull server with its state");
        self.answer(token, Ok(control::Reply::Done));
        true
    }

    /// After [`Self::rehome_landed`] and the update's fan-out: the member changes that waited,
    /// and this site's players' inputs the old server dropped after it froze, now.
    pub(super) fn rehome_settled(&mut self, bubble: BubbleId, now: Instant) {
        self.apply_deferred(bubble, now);
        let ours: Vec<PlayerId> = self.bubbles.get(&bubble).map_or_else(Vec::new, |l| {
            l.members()
                .iter()
                .filter(|(_, home)| **home == self.cfg.site)
                .map(|(&p, _)| p)
                .collect()
        });
        for player in ours {
            self.resend(player, true, now);
        }
    }

    /// A move given up before the old server froze: the region stays there, regranted in
    /// place under the new epoch; the server that stood by goes back.
    fn move_back(&mut self, bubble: BubbleId, why: &str, now: Instant) {
        if !self.rehome_granted(bubble) {
            return;
        }
        let Some(Rehome {
            step: Step::Granted { token, lease, received, to, frozen, joins }, ..
        }) = self.rehomes.remove(&bubble)
        else {
            return;
        };
        self.release_standby(bubble, to, lease);
        if frozen {
            self.stats.region_moves_lost.fetch_add(1, Ordering::Relaxed);
            self.keep_joins(bubble, joins, now);
            self.move_lost(bubble, token, lease, why);
            return;
        }
        self.stats.region_moves_given_up.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(site = %self.cfg.site, bubble = bubble.0, %why, "region not moved: it stays on its server");
        let Some(old) = self.bubbles.get(&bubble).map(|l| l.lease_ref()) else {
            self.answer(token, Err(unknown(bubble)));
            return;
        };
        let result = self.regrant(token, old, lease, received, now);
        // The states that waited join where it stays (after the regrant, if one goes out).
        for (player, last_applied, state) in joins {
            if let Some(local) = self.bubbles.get(&bubble) {
                let (server, lease) = (local.server_of(player).clone(), local.lease_ref());
                self.join(&server, lease, player, last_applied, state);
            }
        }
        match result {
            // The member changes that waited for the move apply once the regrant is done.
            Ok(()) => {}
            Err(fault) => {
                self.answer(token, Err(fault));
                self.apply_deferred(bubble, now);
            }
        }
    }

    /// States held for a region that stops here while moving: kept as crossings are, for a
    /// restore of it here (the core fails it over from its copy, which may lack them).
    fn keep_joins(&mut self, bubble: BubbleId, joins: Vec<(PlayerId, Seq, Blob)>, now: Instant) {
        for (player, last_applied, state) in joins {
            self.transit.stash(player, bubble, last_applied, &state, now);
        }
    }

    /// Holds a state joining `bubble` while it moves to another server here (see
    /// [`Step::Granted`]); `None` when it does not move, and the state is given back.
    pub(super) fn rehome_hold_join(
        &mut self,
        bubble: BubbleId,
        player: PlayerId,
        last_applied: Seq,
        state: Blob,
    ) -> Option<(Seq, Blob)> {
        match self.rehomes.get_mut(&bubble) {
            Some(Rehome { step: Step::Granted { joins, .. }, .. })
                if joins.len() < MAX_CROSSINGS =>
            {
                joins.push((player, last_applied, state));
                None
            }
            _ => Some((last_applied, state)),
        }
    }

    /// A move that failed after the old server froze: the region runs nowhere here. The core
    /// hears it at once (`Lost`) and fails it over from its copy.
    fn move_lost(&mut self, bubble: BubbleId, token: Token, lease: Lease, why: &str) {
        tracing::error!(site = %self.cfg.site, bubble = bubble.0, %why, "region lost while moving to another server");
        self.drop_bubble(bubble);
        let fault = Fault::new(ErrorCode::NotReady, format!("the region's move failed: {why}"));
        self.answer(token, Err(fault));
        let leases = vec![LeaseRef { bubble, epoch: lease.epoch }];
        let request = control::Request::Lost { leases, reason: why.to_owned() };
        self.ask_core(Then::Nothing("lost bubbles"), request);
    }

    fn release_standby(&mut self, bubble: BubbleId, to: Option<Name>, lease: Lease) {
        if let Some(to) = to
            && self.release(&to, bubble)
        {
            let lease = LeaseRef { bubble, epoch: lease.epoch };
            self.ask_server(&to, Then::Nothing("release"), server::Request::Release { lease });
        }
    }

    /// The bubble stops here (dropped, or its old server gone): its move stops too, and the
    /// core's `Regrant` is refused. Returns the lease the core holds it under now.
    pub(super) fn abandon_rehome(&mut self, bubble: BubbleId) -> Option<LeaseRef> {
        let r = self.rehomes.remove(&bubble)?;
        let Step::Granted { token, lease, to, joins, .. } = r.step else { return None };
        self.release_standby(bubble, to, lease);
        if !joins.is_empty() {
            // Their crossings stay kept where they came from (`Recover` finds them).
            tracing::warn!(site = %self.cfg.site, bubble = bubble.0, players = joins.len(), "states that came for a region stopped while moving: not joined");
        }
        let fault = Fault::new(ErrorCode::NotReady, "the region stopped here while moving");
        self.answer(token, Err(fault));
        Some(LeaseRef { bubble, epoch: lease.epoch })
    }

    /// The server standing by for a move is gone: before the freeze the region stays where it
    /// was; after, it is lost. `true` when `server` was one.
    pub(super) fn rehome_server_lost(
        &mut self,
        server: &Name,
        bubble: BubbleId,
        now: Instant,
    ) -> bool {
        let standing_by = matches!(
            self.rehomes.get(&bubble),
            Some(Rehome { step: Step::Granted { to: Some(to), .. }, .. }) if to == server
        );
        if standing_by {
            if let Some(Rehome { step: Step::Granted { to, .. }, .. }) =
                self.rehomes.get_mut(&bubble)
            {
                // Gone with the server: nothing to release.
                *to = None;
            }
            self.move_back(bubble, &format!("server {server} gone"), now);
        }
        standing_by
    }

    /// Moves past their deadline: given up.
    pub(super) fn rehome_deadlines(&mut self, now: Instant) {
        let late: Vec<(BubbleId, bool)> = self
            .rehomes
            .iter()
            .filter_map(|(&b, r)| {
                let granted = matches!(r.step, Step::Granted { .. });
                let deadline = if granted { REHOME_DEADLINE } else { ASKED_DEADLINE };
                (now.saturating_duration_since(r.at) > deadline).then_some((b, granted))
            })
            .collect();
        for (bubble, granted) in late {
            if granted {
                self.move_back(bubble, "not running on its new server in time", now);
            } else {
                self.rehomes.remove(&bubble);
            }
        }
    }
}
