//! The bubbles this site simulates, or stands by for, as the agent holds them: each one's
//! lease and how long it runs by this agent's clock, its region, its servers (part 0 and the
//! others when spread) with where each member is simulated, its members' homes, its phase in a
//! handover or a restore, and what waits for it to run. Only this file changes a bubble: each
//! change is a named step below; the machine's files decide when.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use horizon_proto::control;
use horizon_proto::{
    Blob, BubbleId, Epoch, HandoverId, Lease, LeaseRef, Name, PlayerId, Region, Seq, Tick,
};
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Running,
    /// Target of a handover: fed by the source, starts at the seal.
    Standby {
        handover: HandoverId,
    },
    /// Source of a handover: still simulating until the freeze.
    Leaving {
        handover: HandoverId,
    },
    /// Source of a handover after the freeze: sealed, waiting for the commit. Never runs again.
    Sealed {
        handover: HandoverId,
    },
    /// Restored from a copy (a failover): the server has the copy and its seal; the bubble
    /// runs from the server's first update under the new epoch, which answers the core.
    Restoring,
}

/// A bubble simulated (or standing by) here.
pub(super) struct Local {
    lease: Lease,
    /// The lease's end by this agent's clock: `ttl_ms` from when the granting renewal was sent
    /// (or the granting order received). Past it the servers have stopped by their own clocks.
    valid_until: Instant,
    /// This site's players in the bubble were told `Reconnecting` since it stopped.
    told_reconnecting: bool,
    /// The core refused its renewal then: it is never renewed again, and released after
    /// `REFUSED_KEEP` (see there).
    refused_at: Option<Instant>,
    /// The acknowledgements of the bubble's last update (its tick): what a copy made after it
    /// includes at least.
    acked_at: Option<(Tick, Vec<(PlayerId, Seq)>)>,
    region: Region,
    /// The bubble's server; when spread over several (design.md §4, within a site), the
    /// server of part 0, which takes new players and makes the handover snapshot.
    server: Name,
    members: BTreeMap<PlayerId, Name>,
    phase: Phase,
    /// Parts 1.. when the bubble is spread over several servers (part 0 is `server`).
    extra: Vec<Name>,
    /// Where each member is simulated while the bubble is spread; absent: `server`.
    holder: BTreeMap<PlayerId, Name>,
    /// Each part's box while spread, part 0 first (empty on one server).
    part_regions: Vec<Region>,
    /// The member list (and departures) that came while the bubble was being restored: its
    /// server has not taken the copy yet, so joins and leaves wait for its first update.
    deferred: Option<(Vec<control::Member>, Vec<control::Departure>)>,
    /// Stored copies its players adopt from, that came while they moved between its servers
    /// (at most [`MAX_ADOPTS_WAITING`], the newest kept).
    adopts: VecDeque<(Vec<PlayerId>, Blob)>,
}

/// Adoptions kept per bubble while its parts change (the core sends one per restore and per
/// copy showing members behind: a few at most).
const MAX_ADOPTS_WAITING: usize = 4;

impl Local {
    pub(super) fn new(
        lease: Lease,
        region: Region,
        server: Name,
        phase: Phase,
        received: Instant,
    ) -> Self {
        Local {
            lease,
            valid_until: received + Duration::from_millis(u64::from(lease.ttl_ms)),
            told_reconnecting: false,
            refused_at: None,
            acked_at: None,
            region,
            server,
            members: BTreeMap::new(),
            phase,
            extra: Vec::new(),
            holder: BTreeMap::new(),
            part_regions: Vec::new(),
            deferred: None,
            adopts: VecDeque::new(),
        }
    }

    pub(super) fn server_of(&self, player: PlayerId) -> &Name {
        self.holder.get(&player).unwrap_or(&self.server)
    }

    /// Every server simulating part of the bubble, part 0 first.
    pub(super) fn servers(&self) -> impl Iterator<Item = &Name> {
        std::iter::once(&self.server).chain(&self.extra)
    }

    pub(super) fn lease_ref(&self) -> LeaseRef {
        LeaseRef { bubble: self.lease.bubble, epoch: self.lease.epoch }
    }

    /// Whether `server` writing the bubble under `epoch` is its holder here (fencing, design.md
    /// §6): one of its servers, under the lease's epoch.
    pub(super) fn written_by(&self, server: &Name, epoch: Epoch) -> bool {
        self.lease.epoch == epoch && self.servers().any(|s| s == server)
    }

    pub(super) fn lease(&self) -> Lease {
        self.lease
    }

    /// The lease's end by this agent's clock.
    pub(super) fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Its players were told `Reconnecting` since it stopped.
    pub(super) fn told_reconnecting(&self) -> bool {
        self.told_reconnecting
    }

    /// When the core refused its renewal.
    pub(super) fn refused_at(&self) -> Option<Instant> {
        self.refused_at
    }

    /// The acknowledgements of its last update, and that update's tick.
    pub(super) fn acked_at(&self) -> Option<&(Tick, Vec<(PlayerId, Seq)>)> {
        self.acked_at.as_ref()
    }

    pub(super) fn region(&self) -> Region {
        self.region
    }

    /// Its server (part 0 when spread).
    pub(super) fn server(&self) -> &Name {
        &self.server
    }

    /// Each member and their home site.
    pub(super) fn members(&self) -> &BTreeMap<PlayerId, Name> {
        &self.members
    }

    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// Parts 1.. when spread.
    pub(super) fn extra(&self) -> &[Name] {
        &self.extra
    }

    /// Where each member is simulated while spread, when not on part 0.
    #[cfg(test)]
    pub(super) fn holder(&self) -> &BTreeMap<PlayerId, Name> {
        &self.holder
    }

    // The steps.

    /// The core's lease for it as it stands (a registration kept it).
    pub(super) fn kept(&mut self, lease: Lease) {
        self.lease = lease;
    }

    /// A renewal granted it until `until` (by this agent's clock): it runs again if it had
    /// stopped, and its players hear of the next stop.
    pub(super) fn renewed(&mut self, until: Instant) {
        self.valid_until = self.valid_until.max(until);
        self.told_reconnecting = false;
    }

    /// The core refused its renewal at `now`: it has stopped. `false` if it had already.
    pub(super) fn refused(&mut self, now: Instant) -> bool {
        if self.refused_at.is_some() {
            return false;
        }
        self.refused_at = Some(now);
        self.valid_until = self.valid_until.min(now);
        true
    }

    /// Its lease ran out here: its players are told, once. `false` if they were already.
    pub(super) fn lapsed(&mut self) -> bool {
        !std::mem::replace(&mut self.told_reconnecting, true)
    }

    /// Its last update acknowledged these inputs at `tick`.
    pub(super) fn acked(&mut self, tick: Tick, acked: Vec<(PlayerId, Seq)>) {
        self.acked_at = Some((tick, acked));
    }

    /// Its region changed.
    pub(super) fn resized(&mut self, region: Region) {
        self.region = region;
    }

    /// The core's member list: the members before it.
    pub(super) fn replace_members(
        &mut self,
        members: BTreeMap<PlayerId, Name>,
    ) -> BTreeMap<PlayerId, Name> {
        std::mem::replace(&mut self.members, members)
    }

    /// `player`, whose home is `home`, is a member.
    pub(super) fn joined(&mut self, player: PlayerId, home: Name) {
        self.members.insert(player, home);
    }

    /// A member list (and departures) that came while it cannot take them: kept until it
    /// runs. A newer list replaces the one kept; departures add up (the newest for a player).
    pub(super) fn defer(
        &mut self,
        players: Vec<control::Member>,
        departed: Vec<control::Departure>,
    ) {
        let (_, gone) = self.deferred.get_or_insert_with(Default::default);
        let mut all: Vec<control::Departure> = std::mem::take(gone);
        all.retain(|d| !departed.iter().any(|n| n.player == d.player));
        all.extend(departed);
        self.deferred = Some((players, all));
    }

    /// What was deferred until it runs.
    pub(super) fn take_deferred(
        &mut self,
    ) -> Option<(Vec<control::Member>, Vec<control::Departure>)> {
        self.deferred.take()
    }

    /// Players to adopt from a stored copy once they stopped moving between servers.
    pub(super) fn defer_adopt(&mut self, players: Vec<PlayerId>, copy: Blob) {
        if self.adopts.len() >= MAX_ADOPTS_WAITING {
            self.adopts.pop_front();
        }
        self.adopts.push_back((players, copy));
    }

    /// The adoptions deferred, taken.
    pub(super) fn take_adopts(&mut self) -> VecDeque<(Vec<PlayerId>, Blob)> {
        std::mem::take(&mut self.adopts)
    }

    /// `player` is simulated on `server` (a part other than 0).
    pub(super) fn held_on(&mut self, player: PlayerId, server: Name) {
        self.holder.insert(player, server);
    }

    /// `player` is no longer simulated apart from part 0: the server it was on, if any.
    pub(super) fn unheld(&mut self, player: PlayerId) -> Option<Name> {
        self.holder.remove(&player)
    }

    /// It runs on `servers` from now on, each simulating its box of `regions`, part 0 first:
    /// members on a server it left are on part 0.
    pub(super) fn spread_over(&mut self, servers: &[Name], regions: &[Region]) {
        let Some((main, extra)) = servers.split_first() else { return };
        self.server = main.clone();
        self.extra = extra.to_vec();
        self.holder.retain(|_, s| s != main && extra.contains(s));
        self.part_regions = if extra.is_empty() { Vec::new() } else { regions.to_vec() };
    }

    /// Each part's box while spread, part 0 first (empty on one server).
    pub(super) fn part_regions(&self) -> &[Region] {
        &self.part_regions
    }

    /// Regranted under `lease` (received at `received`): it runs here under the new epoch.
    pub(super) fn regranted(&mut self, lease: Lease, received: Instant) {
        self.phase = Phase::Running;
        self.lease = lease;
        self.valid_until = received + Duration::from_millis(u64::from(lease.ttl_ms));
    }

    /// It moved whole to `server` of this site under `lease` (received at `received`): its
    /// last update's acknowledgements were the old server's.
    pub(super) fn rehomed(&mut self, lease: Lease, received: Instant, server: Name) {
        self.lease = lease;
        self.valid_until = received + Duration::from_millis(u64::from(lease.ttl_ms));
        self.server = server;
        self.acked_at = None;
    }

    /// It runs here (created, restored, sealed and given back, or a handover given up).
    pub(super) fn running(&mut self) {
        self.phase = Phase::Running;
    }

    /// Source of `handover`: simulating until the freeze.
    pub(super) fn leaving(&mut self, handover: HandoverId) {
        self.phase = Phase::Leaving { handover };
    }

    /// Source of `handover` after the freeze: never runs again unless given back.
    pub(super) fn sealed(&mut self, handover: HandoverId) {
        self.phase = Phase::Sealed { handover };
    }
}

/// The bubbles simulated (or standing by) here. They change only through [`Local`]'s steps.
#[derive(Default)]
pub(super) struct Locals {
    bubbles: BTreeMap<BubbleId, Local>,
}

impl std::ops::Index<&BubbleId> for Locals {
    type Output = Local;

    fn index(&self, bubble: &BubbleId) -> &Local {
        &self.bubbles[bubble]
    }
}

impl Locals {
    pub(super) fn get(&self, bubble: &BubbleId) -> Option<&Local> {
        self.bubbles.get(bubble)
    }

    /// The bubble, to take one of its steps.
    pub(super) fn get_mut(&mut self, bubble: &BubbleId) -> Option<&mut Local> {
        self.bubbles.get_mut(bubble)
    }

    pub(super) fn contains(&self, bubble: &BubbleId) -> bool {
        self.bubbles.contains_key(bubble)
    }

    /// A bubble taken (created, restored, or standing by for a handover).
    pub(super) fn insert(&mut self, bubble: BubbleId, local: Local) {
        self.bubbles.insert(bubble, local);
    }

    /// A bubble let go.
    pub(super) fn remove(&mut self, bubble: &BubbleId) -> Option<Local> {
        self.bubbles.remove(bubble)
    }

    pub(super) fn len(&self) -> usize {
        self.bubbles.len()
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.bubbles.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&BubbleId, &Local)> {
        self.bubbles.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&BubbleId, &mut Local)> {
        self.bubbles.iter_mut()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Local> {
        self.bubbles.values()
    }
}

#[cfg(test)]
mod tests {
    use horizon_proto::{Vec3, WorldId};

    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn lease(epoch: u64) -> Lease {
        Lease { bubble: BubbleId(1), epoch: Epoch(epoch), ttl_ms: 10_000 }
    }

    fn local(t0: Instant) -> Local {
        let region = Region { world: WorldId(0), bounds: None };
        Local::new(lease(1), region, n("gs-0"), Phase::Running, t0)
    }

    fn member(player: u64) -> control::Member {
        let (player, home, pos) = (PlayerId(player), n("MTL"), Vec3::default());
        control::Member { player, home, pos, crossing: false }
    }

    fn departure(player: u64, to: u64) -> control::Departure {
        let to = LeaseRef { bubble: BubbleId(to), epoch: Epoch(1) };
        control::Departure { player: PlayerId(player), to, site: n("PAR") }
    }

    #[test]
    fn a_lease_runs_to_its_latest_renewal_and_stops_at_a_refusal() {
        let t0 = tokio::time::Instant::now().into_std();
        let mut b = local(t0);
        assert_eq!(b.valid_until(), t0 + Duration::from_secs(10));
        b.renewed(t0 + Duration::from_secs(5));
        assert_eq!(b.valid_until(), t0 + Duration::from_secs(10), "never shortened");
        assert!(b.lapsed(), "its players are told once");
        assert!(!b.lapsed());
        b.renewed(t0 + Duration::from_secs(20));
        assert!(!b.told_reconnecting(), "running again: the next stop is told");
        assert!(b.refused(t0 + Duration::from_secs(12)));
        assert!(!b.refused(t0 + Duration::from_secs(13)), "refused once");
        assert_eq!(b.valid_until(), t0 + Duration::from_secs(12));
        assert_eq!(b.refused_at(), Some(t0 + Duration::from_secs(12)));
    }

    #[test]
    fn a_deferred_list_keeps_the_newest_members_and_every_departure_once() {
        let mut b = local(tokio::time::Instant::now().into_std());
        b.defer(vec![member(1), member(2)], vec![departure(3, 7)]);
        b.defer(vec![member(2)], vec![departure(3, 8), departure(1, 7)]);
        let (members, departed) = b.take_deferred().expect("deferred");
        assert_eq!(members.iter().map(|m| m.player).collect::<Vec<_>>(), [PlayerId(2)]);
        let to: Vec<(PlayerId, BubbleId)> =
            departed.iter().map(|d| (d.player, d.to.bubble)).collect();
        assert_eq!(to, [(PlayerId(3), BubbleId(8)), (PlayerId(1), BubbleId(7))]);
        assert!(b.take_deferred().is_none(), "taken once");
    }

    #[test]
    fn spread_over_fewer_servers_brings_their_members_back_to_part_zero() {
        let mut b = local(tokio::time::Instant::now().into_std());
        b.spread_over(&[n("gs-0"), n("gs-1"), n("gs-2")], &[]);
        b.held_on(PlayerId(1), n("gs-1"));
        b.held_on(PlayerId(2), n("gs-2"));
        assert_eq!(b.servers().count(), 3);
        b.spread_over(&[n("gs-0"), n("gs-1")], &[]);
        assert_eq!(b.server_of(PlayerId(1)), &n("gs-1"));
        assert_eq!(b.server_of(PlayerId(2)), &n("gs-0"), "gs-2 left the bubble");
        assert_eq!(b.unheld(PlayerId(1)), Some(n("gs-1")));
        assert_eq!(b.server_of(PlayerId(1)), &n("gs-0"));
        // Part 0 moving to a server that held a part: nobody is held apart on it.
        b.held_on(PlayerId(3), n("gs-1"));
        b.spread_over(&[n("gs-1")], &[]);
        assert!(b.holder().is_empty() && b.extra().is_empty());
        assert!(b.written_by(&n("gs-1"), Epoch(1)) && !b.written_by(&n("gs-0"), Epoch(1)));
    }

    #[test]
    fn a_regrant_or_a_move_to_another_server_runs_under_the_new_lease() {
        let t0 = tokio::time::Instant::now().into_std();
        let mut b = local(t0);
        b.acked(Tick(5), vec![(PlayerId(1), Seq(3))]);
        b.leaving(HandoverId(2));
        b.regranted(lease(2), t0 + Duration::from_secs(1));
        assert_eq!((b.phase(), b.lease_ref().epoch), (Phase::Running, Epoch(2)));
        assert_eq!(b.valid_until(), t0 + Duration::from_secs(11));
        assert!(!b.written_by(&n("gs-0"), Epoch(1)), "the old epoch is fenced off");
        b.rehomed(lease(3), t0 + Duration::from_secs(2), n("gs-4"));
        assert_eq!((b.server(), b.lease().epoch), (&n("gs-4"), Epoch(3)));
        assert!(b.acked_at().is_none(), "the old server's acknowledgements");
    }

    #[test]
    fn a_new_member_list_replaces_the_old_one() {
        let mut b = local(tokio::time::Instant::now().into_std());
        b.joined(PlayerId(1), n("MTL"));
        let new = BTreeMap::from([(PlayerId(2), n("PAR"))]);
        let old = b.replace_members(new);
        assert_eq!(old.keys().collect::<Vec<_>>(), [&PlayerId(1)]);
        assert_eq!(b.members().keys().collect::<Vec<_>>(), [&PlayerId(2)]);
    }
}
