//! Draining an ended bubble from its copy. The brain ends a bubble (merged, deleted) once its
//! players have moved on, and their states cross from its holder to their new bubbles. Two
//! ways a player's newest state can then be lost with a site, while the ended bubble's last
//! stored copy still has it (and the player's home gateway every input after that copy, since
//! nothing stored since covers them):
//!
//! - the holder could not hear the core when the bubble ended (cut off, restarting, dead),
//!   or its server died as it ended: it never lets its players go;
//! - a player crossed from it into a bubble that failed before a copy of that bubble included
//!   them, and the crossing kept at the source is gone with it (the source site restarted).
//!
//! So the core restores that copy for a moment on a live site, under a new epoch (which fences
//! the old holder off), with no member and the departures to hand on: their states cross as in
//! any departure (the target keeps the state that applied more of the player's inputs), and the
//! bubble is revoked right behind them.
//!
//! ```text
//!  wanted ──► Waiting: until nobody writes the ended bubble any more (every lease of it ran
//!     out, plus the drift margin; or its holder registered since without it)
//!  ──► ReadBackup ──► BackupRead ──► Restore (minted epoch) to a live site
//!  ──► Done: Members { nobody, departed } and Revoke, in order; the drain is over
//! ```
//!
//! A holder that comes back still holding the bubble hands the states over itself (see
//! `register`): its drain is dropped. Nothing here is persisted: a restarted core forgets
//! ended bubbles (the players' crossings then time out at their new bubble, and they start
//! afresh).

use std::collections::{BTreeMap, BTreeSet};

use horizon_mesh::{SiteId, Span, Time};
use horizon_proto::control;
use horizon_proto::{Aabb, BubbleId, Epoch, Failure, LeaseRef, PlayerId, Region, WorldId};

use super::{Awaiting, ConnId, CoreMachine, Effect, StoredCopy};
use crate::machine::registry::Hosted;

/// Ended bubbles remembered, at most (the oldest is forgotten).
const MAX_ENDED: usize = 4096;
/// Drains under way at once, at most (the oldest is given up).
const MAX_DRAINS: usize = 1024;

/// A bubble the brain ended, as it last ran.
#[derive(Clone, Debug)]
pub(crate) struct Ended {
    holder: SiteId,
    world: u32,
    bounds: Aabb,
    /// Nobody writes it after this: every lease the core gave for it plus the drift margin.
    quiet_at: Time,
    /// Its holder registered since it ended, without it: nothing writes it any more.
    cleared: bool,
    /// Drained on this site over this connection: another drain goes there too, behind the
    /// first one's `Revoke` on the same ordered lane, until `quiet_at`.
    drained_on: Option<(SiteId, ConnId)>,
}

/// A drain: whose states to hand on (`None`: every remembered departure), and how far.
#[derive(Clone, Debug)]
pub(crate) struct Drain {
    players: Option<BTreeSet<PlayerId>>,
    step: DrainStep,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DrainStep {
    Waiting,
    /// Its copy is being read from the store.
    Reading,
    /// Its copy is being restored on `site` under `epoch`.
    Restoring {
        site: SiteId,
        epoch: u64,
    },
}

/// Ended bubbles and their drains.
#[derive(Debug, Default)]
pub(crate) struct Drains {
    ended: BTreeMap<BubbleId, Ended>,
    drains: BTreeMap<BubbleId, Drain>,
}

impl CoreMachine {
    /// The brain ended `bubble`; `heard`: its holder got the `Revoke` (and the departures
    /// before it). Remembered; drained later if the holder did not hear.
    pub(crate) fn bubble_ended(&mut self, bubble: BubbleId, reg: &Hosted, heard: bool) {
        let d = &mut self.drains;
        if !d.ended.contains_key(&bubble)
            && d.ended.len() >= MAX_ENDED
            && let Some(oldest) = d.ended.keys().next().copied()
        {
            d.ended.remove(&oldest);
        }
        let drift = Span::from_ms(self.cfg.thresholds.lease_drift_margin_ms);
        let ended = Ended {
            holder: reg.site(),
            world: reg.world(),
            bounds: reg.bounds(),
            quiet_at: reg.lease_until() + drift,
            cleared: false,
            drained_on: None,
        };
        d.ended.insert(bubble, ended);
        if !heard && !self.remembered_departures(bubble).is_empty() {
            tracing::info!(bubble = bubble.0, holder = %self.cfg.sites.name(reg.site()), "bubble ended while its holder is away: its players' states will be handed on from its copy");
            self.want_drain(bubble, None);
        }
    }

    /// A bubble restored from a copy that may lack players who crossed into it since: the
    /// ended bubbles they came from are drained for them (see the module documentation).
    pub(crate) fn drain_arrivals(&mut self, bubble: BubbleId, now: Time) {
        let mut wanted: BTreeMap<BubbleId, BTreeSet<PlayerId>> = BTreeMap::new();
        for (player, from) in self.arrivals_still_in(bubble) {
            if self.drains.ended.contains_key(&from) {
                wanted.entry(from).or_default().insert(player);
            }
        }
        for (from, players) in wanted {
            self.want_drain(from, Some(players));
        }
        self.drain_due(now);
    }

    /// A drain of `bubble` for `players` (`None`: all who left it), merged with one waiting.
    fn want_drain(&mut self, bubble: BubbleId, players: Option<BTreeSet<PlayerId>>) {
        let d = &mut self.drains.drains;
        if let Some(drain) = d.get_mut(&bubble) {
            // Waiting or under way: its departures are read when its copy runs.
            drain.players = match (drain.players.take(), players) {
                (Some(mut a), Some(b)) => {
                    a.extend(b);
                    Some(a)
                }
                _ => None,
            };
            return;
        }
        if d.len() >= MAX_DRAINS
            && let Some(oldest) = d.keys().next().copied()
        {
            tracing::warn!(bubble = oldest.0, "too many bubbles to drain: given up");
            d.remove(&oldest);
        }
        d.insert(bubble, Drain { players, step: DrainStep::Waiting });
    }

    /// When the next waiting drain may start.
    pub(crate) fn next_drain(&self) -> Option<Time> {
        let d = &self.drains;
        d.drains
            .iter()
            .filter(|(_, x)| x.step == DrainStep::Waiting)
            .filter_map(|(b, _)| d.ended.get(b).filter(|e| !e.cleared).map(|e| e.quiet_at))
            .min()
    }

    /// Starts the drains nobody writes any more.
    pub(crate) fn drain_due(&mut self, now: Time) {
        let d = &self.drains;
        let due: Vec<BubbleId> = d
            .drains
            .iter()
            .filter(|(b, x)| {
                x.step == DrainStep::Waiting
                    && d.ended
                        .get(b)
                        .is_some_and(|e| e.cleared || now >= e.quiet_at || self.pinned(e).is_some())
            })
            .map(|(&b, _)| b)
            .collect();
        for bubble in due {
            self.start_drain(bubble);
        }
    }

    /// The holder of an ended bubble lost its server: the departures it was told may have
    /// died with it (seed 9010789: a player moved on as the server was killed). Nobody writes
    /// the bubble any more; its copy is drained for them at once (the target keeps, of two
    /// states of one player, the one that applied more inputs, so a state that did leave
    /// loses nothing).
    pub(crate) fn ended_bubble_lost(&mut self, site: SiteId, bubble: BubbleId, now: Time) {
        let Some(e) = self.drains.ended.get_mut(&bubble).filter(|e| e.holder == site) else {
            return;
        };
        e.cleared = true;
        if !self.remembered_departures(bubble).is_empty() {
            tracing::info!(bubble = bubble.0, holder = %self.cfg.sites.name(site), "an ended bubble's server is gone: its players' states will be handed on from its copy");
            self.want_drain(bubble, None);
        }
        // Those who crossed in after its last copy (or before its first) are in no copy of
        // it: what the sites they crossed from kept goes to where they play now.
        self.redirect_arrivals(bubble);
        self.drain_due(now);
    }

    /// `site` registered holding `held`: the ended bubbles it held last and still holds are
    /// handed over by it (their drains dropped); those it no longer holds are written by nobody.
    /// Those are as in [`CoreMachine::ended_bubble_lost`] (their server died, its `Lost`
    /// undelivered while the site was cut from the core: seed 700267): those who crossed in
    /// after the last copy have what the sites they crossed from kept sent where they play now.
    pub(crate) fn drain_registered(&mut self, site: SiteId, held: &[control::Held], now: Time) {
        let d = &mut self.drains;
        let mut gone = Vec::new();
        for (bubble, e) in d.ended.iter_mut().filter(|(_, e)| e.holder == site) {
            if held.iter().any(|h| h.lease.bubble == *bubble) {
                if d.drains.get(bubble).is_some_and(|x| x.step == DrainStep::Waiting) {
                    d.drains.remove(bubble);
                }
            } else if !e.cleared {
                e.cleared = true;
                gone.push(*bubble);
            }
        }
        for bubble in gone {
            self.redirect_arrivals(bubble);
        }
        self.drain_due(now);
    }

    fn start_drain(&mut self, bubble: BubbleId) {
        if self.departures_to_drain(bubble).is_empty() {
            self.drains.drains.remove(&bubble);
            return;
        }
        if let Some(d) = self.drains.drains.get_mut(&bubble) {
            d.step = DrainStep::Reading;
            self.effects.push_back(Effect::ReadBackup { bubble });
        }
    }

    /// The departures a drain hands on: those remembered, for the players it is for.
    fn departures_to_drain(&self, bubble: BubbleId) -> Vec<control::Departure> {
        let only = self.drains.drains.get(&bubble).and_then(|d| d.players.as_ref());
        let mut all = self.remembered_departures(bubble);
        if let Some(only) = only {
            all.retain(|d| only.contains(&d.player));
        }
        all
    }

    /// The site an ended bubble was drained on, while still on the connection its `Revoke`
    /// went over (see `Ended::drained_on`).
    fn pinned(&self, e: &Ended) -> Option<SiteId> {
        let (site, conn) = e.drained_on?;
        (self.agents.speaks(site, conn) && self.agents.registered(site)).then_some(site)
    }

    /// Where a drain runs: where it ran before (see `Ended::drained_on`), else the live site
    /// most of its players went to (their crossings stay within it), else any live site.
    fn drain_site(
        &self,
        e: &Ended,
        departures: &[control::Departure],
        now: Time,
    ) -> Option<SiteId> {
        if let Some(site) = self.pinned(e) {
            return Some(site);
        }
        if e.drained_on.is_some() && !e.cleared && now < e.quiet_at {
            // Its last drain's site may still run it: wait until it is quiet.
            return None;
        }
        let live = |s: &SiteId| self.agents.registered(*s);
        let mut count: BTreeMap<SiteId, usize> = BTreeMap::new();
        for d in departures {
            if let Some(site) = self.cfg.sites.id(d.site.as_str()).filter(live) {
                *count.entry(site).or_default() += 1;
            }
        }
        let best = count.iter().max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)));
        best.map(|(s, _)| *s).or_else(|| self.agents.sites().find(live))
    }

    /// Its copy is being read for a drain.
    pub(crate) fn draining(&self, bubble: BubbleId) -> bool {
        self.drains.drains.get(&bubble).is_some_and(|d| d.step == DrainStep::Reading)
    }

    /// The copy of a bubble being drained was read: restore it on a live site.
    pub(crate) fn drain_read(&mut self, bubble: BubbleId, copy: Option<StoredCopy>, now: Time) {
        let Some(e) = self.drains.ended.get(&bubble).cloned() else {
            self.drains.drains.remove(&bubble);
            return;
        };
        let Some(copy) = copy else {
            tracing::warn!(bubble = bubble.0, "no copy to drain: its players start afresh");
            self.drains.drains.remove(&bubble);
            return;
        };
        let departures = self.departures_to_drain(bubble);
        let Some(site) = self.drain_site(&e, &departures, now) else {
            // No site may run it now: tried again when one registers, or it is quiet.
            self.drain_step(bubble, DrainStep::Waiting);
            return;
        };
        let epoch = match self.mesh.mint_epoch(bubble) {
            Ok(e) => e.0,
            Err(e) => {
                tracing::warn!(bubble = bubble.0, error = %e, "no epoch to drain with: given up");
                self.drains.drains.remove(&bubble);
                return;
            }
        };
        let lease = horizon_proto::Lease {
            bubble,
            epoch: Epoch(epoch),
            ttl_ms: self.cfg.thresholds.lease_ttl_ms as u32,
        };
        self.stats.restore(site, copy.kind());
        let restore =
            copy.restore(lease, Region { world: WorldId(e.world), bounds: Some(e.bounds) });
        tracing::info!(bubble = bubble.0, site = %self.cfg.sites.name(site), epoch, players = departures.len(), "draining an ended bubble from its copy");
        let order = self.order(site, restore);
        if self.track(order, Awaiting::Drain(bubble, epoch)) {
            self.drain_step(bubble, DrainStep::Restoring { site, epoch });
        } else {
            self.drain_step(bubble, DrainStep::Waiting);
        }
    }

    fn drain_step(&mut self, bubble: BubbleId, step: DrainStep) {
        if let Some(d) = self.drains.drains.get_mut(&bubble) {
            d.step = step;
        }
    }

    /// The drain site answered the restore: the states leave, the bubble ends.
    pub(crate) fn drain_restored(
        &mut self,
        bubble: BubbleId,
        epoch: u64,
        result: Result<control::Reply, Failure>,
        now: Time,
    ) {
        let Some(d) = self.drains.drains.get(&bubble) else { return };
        let DrainStep::Restoring { site, epoch: e } = d.step else { return };
        if e != epoch {
            return;
        }
        let departed = self.departures_to_drain(bubble);
        self.drains.drains.remove(&bubble);
        // The drain site holds it now, until its `Revoke` (or its lease's end).
        let ttl = Span::from_ms(self.cfg.thresholds.lease_ttl_ms);
        let drift = Span::from_ms(self.cfg.thresholds.lease_drift_margin_ms);
        let conn = self.agents.get(site).map(|a| a.conn);
        if let Some(e) = self.drains.ended.get_mut(&bubble) {
            e.holder = site;
            e.quiet_at = e.quiet_at.max(now + ttl + drift);
            e.cleared = false;
            e.drained_on = conn.map(|c| (site, c));
        }
        let lease = LeaseRef { bubble, epoch: Epoch(epoch) };
        match result {
            Ok(control::Reply::Done) => {
                tracing::info!(
                    bubble = bubble.0,
                    players = departed.len(),
                    "drained: its players' states cross on"
                );
                self.stats.drains.inc(site.index());
                self.order(
                    site,
                    control::Request::Members { lease, players: Vec::new(), departed },
                );
            }
            other => {
                tracing::warn!(bubble = bubble.0, result = ?other, "drain not restored: its players start afresh");
            }
        }
        self.order(site, control::Request::Revoke { leases: vec![lease] });
    }
}
