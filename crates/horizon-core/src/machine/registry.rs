//! What really runs where: each region's holder, epoch, box, members, parts and phase, as the
//! core drives it. The brain's view changes first (a handover already places the bubble at its
//! target); the registry follows what the agents have done. Only this file changes a region:
//! every change is a named step below.

use std::collections::BTreeMap;

use horizon_mesh::{SiteId, Time};
use horizon_proto::{Aabb, BubbleId, Epoch, HandoverId, LeaseRef, PlayerId};

/// Where a region is in its life, as the core drives it. One at a time: a handover or a
/// failover takes over from a `Create` not answered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Its `Create` is not answered yet: players cross into it only once it runs (their
    /// region keeps simulating them meanwhile), while new players join it at once (their
    /// members list follows the `Create` on the site's ordered lane).
    Creating,
    /// Running on its holder.
    Running,
    /// A handover of it to another site is in flight.
    Moving(HandoverId),
    /// A failover is restoring it on `site` from its latest copy: not running yet.
    Restoring,
}

/// What a zone's holder was last told of the bubbles carved out of it, and what that was
/// worked out from (`carve.rs`): while none of it changes, the zone is not looked at again
/// (that runs after every reconcile).
#[derive(Clone, Debug)]
pub(crate) struct Carved {
    /// The epoch the holder was told under (a new epoch is a new server: it knows none).
    pub(crate) epoch: u64,
    /// The zone's box then.
    pub(crate) bounds: Aabb,
    /// The brain's count of bubble-box changes then
    /// ([`horizon_mesh::Mesh::bubble_boxes_changes`]).
    pub(crate) boxes: u64,
    pub(crate) holes: Vec<Aabb>,
}

/// A region (a bubble or a zone) as it really runs. The brain's view changes first during a
/// handover (it already places the bubble at the target) and a restore (at the new site before
/// its server runs).
#[derive(Clone, Debug)]
pub(crate) struct Hosted {
    site: SiteId,
    epoch: u64,
    world: u32,
    bounds: Aabb,
    /// Each member and the site whose gateway they entered at (routes and covered inputs go there).
    members: BTreeMap<PlayerId, SiteId>,
    phase: Phase,
    /// Taken back after a restart during a handover's freeze, at the target under the epoch it
    /// was pre-authorised for: the source and the epoch it held the bubble under, until that
    /// source registers. Until then either may be running it (the source if it never froze,
    /// the target if the seal reached it): it fails over only once both have said they do not.
    fallback: Option<(SiteId, u64)>,
    /// The parts last sent to the holder (`Parts`) and each member's part; empty while the
    /// bubble is on one server.
    parts: Vec<Aabb>,
    part_of: BTreeMap<PlayerId, u32>,
    /// No lease the core gave for this bubble (grant, renewal, handover, restore) runs past
    /// this, by the core's clock: after it plus the drift margin, nobody writes it any more.
    lease_until: Time,
    /// (old, new) epochs of the last `Regrant` to the holder (a handover given up before its
    /// freeze): a renewal of the old one may still cross it (see `renew`).
    regrant: Option<(u64, u64)>,
    /// When this core created it, or took it back after a restart.
    since: Time,
    /// Its last change worth a line on the console, and when (`timeline.rs`).
    changed: Option<(Time, String)>,
    /// The brain ended it (merged, deleted) and its members are still leaving, since then: it
    /// ends once they have left, or after a lease (see `carry_out_commands`).
    ending_since: Option<Time>,
    /// A zone's: the bubbles carved out of it last told to its holder (`carve.rs`).
    holes: Option<Carved>,
    /// Taken back after a restart: until this time, or until every site has said who plays
    /// where (`Players`), its members are not known yet, so an empty member list does not end
    /// it (see `carry_out_commands`).
    members_unknown_until: Option<Time>,
}

impl Hosted {
    pub(crate) fn new(site: SiteId, epoch: u64, world: u32, bounds: Aabb, now: Time) -> Self {
        Hosted {
            site,
            epoch,
            world,
            bounds,
            members: BTreeMap::new(),
            phase: Phase::Running,
            fallback: None,
            parts: Vec::new(),
            part_of: BTreeMap::new(),
            lease_until: now,
            regrant: None,
            since: now,
            changed: None,
            members_unknown_until: None,
            ending_since: None,
            holes: None,
        }
    }

    /// Taken back after a restart (`rejoin.rs`): maybe still running at `fallback`'s source
    /// (see the field), its members not known before `members_unknown_until`.
    pub(crate) fn taken_back(
        mut self,
        fallback: Option<(SiteId, u64)>,
        unknown_until: Time,
    ) -> Self {
        self.fallback = fallback;
        self.members_unknown_until = Some(unknown_until);
        self
    }

    pub(crate) fn site(&self) -> SiteId {
        self.site
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(crate) fn world(&self) -> u32 {
        self.world
    }

    pub(crate) fn bounds(&self) -> Aabb {
        self.bounds
    }

    /// Each member and the site whose gateway they entered at.
    pub(crate) fn members(&self) -> &BTreeMap<PlayerId, SiteId> {
        &self.members
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// See the field.
    pub(crate) fn fallback(&self) -> Option<(SiteId, u64)> {
        self.fallback
    }

    /// The parts last sent to the holder; empty while the bubble is on one server.
    pub(crate) fn parts(&self) -> &[Aabb] {
        &self.parts
    }

    /// Each member's part, as last sent to the holder.
    pub(crate) fn part_of(&self) -> &BTreeMap<PlayerId, u32> {
        &self.part_of
    }

    /// No lease the core gave for it runs past this, by the core's clock.
    pub(crate) fn lease_until(&self) -> Time {
        self.lease_until
    }

    /// (old, new) epochs of the last `Regrant` to the holder.
    pub(crate) fn regrant(&self) -> Option<(u64, u64)> {
        self.regrant
    }

    /// When this core created it, or took it back after a restart.
    pub(crate) fn since(&self) -> Time {
        self.since
    }

    /// Its last change worth a line on the console, and when.
    pub(crate) fn changed(&self) -> Option<&(Time, String)> {
        self.changed.as_ref()
    }

    /// Since when the brain has ended it while its members leave.
    pub(crate) fn ending_since(&self) -> Option<Time> {
        self.ending_since
    }

    /// A zone's bubbles carved out of it, as last told to its holder.
    pub(crate) fn holes(&self) -> Option<&Carved> {
        self.holes.as_ref()
    }

    /// Until when its members are not known (taken back after a restart).
    pub(crate) fn members_unknown_until(&self) -> Option<Time> {
        self.members_unknown_until
    }

    /// No handover or restore in flight: orders for it may go out.
    pub(crate) fn settled(&self) -> bool {
        matches!(self.phase, Phase::Running | Phase::Creating)
    }

    /// The handover in flight, if any.
    pub(crate) fn moving(&self) -> Option<HandoverId> {
        match self.phase {
            Phase::Moving(h) => Some(h),
            _ => None,
        }
    }

    /// Being restored from its copy (a failover), not running yet.
    pub(crate) fn restoring(&self) -> bool {
        self.phase == Phase::Restoring
    }

    pub(crate) fn lease_ref(&self, bubble: BubbleId) -> LeaseRef {
        LeaseRef { bubble, epoch: Epoch(self.epoch) }
    }

    // The steps. Each is one change of what runs where, named for what happened.

    /// Its `Create` is on its way: players cross in once it runs.
    pub(crate) fn creating(&mut self) {
        self.phase = Phase::Creating;
    }

    /// Its holder runs it: it was created, restored, or a handover of it was given up.
    pub(crate) fn running(&mut self) {
        self.phase = Phase::Running;
    }

    /// A handover of it began.
    pub(crate) fn moving_by(&mut self, handover: HandoverId) {
        self.phase = Phase::Moving(handover);
    }

    /// A failover restores it at `site` under `epoch`, on one server, from its copy.
    pub(crate) fn restoring_at(&mut self, site: SiteId, epoch: u64) {
        (self.site, self.epoch, self.phase) = (site, epoch, Phase::Restoring);
        self.one_server();
    }

    /// A handover of it committed: `site` runs it under `epoch`, on one server.
    pub(crate) fn moved_to(&mut self, site: SiteId, epoch: u64) {
        (self.site, self.epoch, self.phase) = (site, epoch, Phase::Running);
        self.one_server();
    }

    /// A handover given up: its source runs it on, on one server.
    pub(crate) fn stays(&mut self) {
        self.phase = Phase::Running;
        self.one_server();
    }

    /// Its holder was regranted it under `epoch` (a newer one).
    pub(crate) fn regranted(&mut self, epoch: u64) {
        self.regrant = Some((self.epoch, epoch));
        self.epoch = epoch;
    }

    /// Taken back at a handover's target, which registered holding it under `epoch`: the
    /// fallback is over.
    pub(crate) fn held_at(&mut self, site: SiteId, epoch: u64) {
        (self.site, self.epoch, self.fallback) = (site, epoch, None);
    }

    /// The fallback's source said whether it runs it: either way, there is no fallback now.
    pub(crate) fn fallback_settled(&mut self) {
        self.fallback = None;
    }

    /// A lease running to `until` was given for it.
    pub(crate) fn leased_until(&mut self, until: Time) {
        self.lease_until = self.lease_until.max(until);
    }

    /// The brain resized it.
    pub(crate) fn resized(&mut self, bounds: Aabb) {
        self.bounds = bounds;
    }

    /// The brain ended it at `now` (kept while its members leave): since when, the first time.
    pub(crate) fn ending(&mut self, now: Time) -> Time {
        *self.ending_since.get_or_insert(now)
    }

    /// `player`, who entered at `gateway`'s gateway, is a member.
    pub(crate) fn joined(&mut self, player: PlayerId, gateway: SiteId) {
        self.members.insert(player, gateway);
    }

    /// `player` is no longer a member.
    pub(crate) fn left(&mut self, player: PlayerId) {
        self.members.remove(&player);
    }

    /// The holder was told these parts and which part holds each member (one part: none).
    pub(crate) fn spread(&mut self, parts: Vec<Aabb>, part_of: BTreeMap<PlayerId, u32>) {
        if parts.len() > 1 {
            (self.parts, self.part_of) = (parts, part_of);
        } else {
            self.one_server();
        }
    }

    fn one_server(&mut self) {
        self.parts.clear();
        self.part_of.clear();
    }

    /// The zone's holder was told these holes.
    pub(crate) fn carved(&mut self, holes: Carved) {
        self.holes = Some(holes);
    }

    /// Its holder's servers may be new: its holes are to be told again.
    pub(crate) fn forget_holes(&mut self) {
        self.holes = None;
    }

    /// A change worth a line on the console.
    pub(crate) fn note(&mut self, now: Time, text: String) {
        self.changed = Some((now, text));
    }
}

/// Every region as it really runs. Its regions change only through [`Hosted`]'s steps.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    regions: BTreeMap<BubbleId, Hosted>,
}

impl Registry {
    pub(crate) fn get(&self, bubble: &BubbleId) -> Option<&Hosted> {
        self.regions.get(bubble)
    }

    /// The region, to take one of its steps.
    pub(crate) fn get_mut(&mut self, bubble: &BubbleId) -> Option<&mut Hosted> {
        self.regions.get_mut(bubble)
    }

    pub(crate) fn contains(&self, bubble: &BubbleId) -> bool {
        self.regions.contains_key(bubble)
    }

    /// A region created, or taken back after a restart.
    pub(crate) fn insert(&mut self, bubble: BubbleId, region: Hosted) {
        self.regions.insert(bubble, region);
    }

    /// A region ended.
    pub(crate) fn remove(&mut self, bubble: &BubbleId) -> Option<Hosted> {
        self.regions.remove(bubble)
    }

    pub(crate) fn len(&self) -> usize {
        self.regions.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&BubbleId, &Hosted)> {
        self.regions.iter()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&BubbleId, &mut Hosted)> {
        self.regions.iter_mut()
    }
}

impl std::ops::Index<&BubbleId> for Registry {
    type Output = Hosted;

    fn index(&self, bubble: &BubbleId) -> &Hosted {
        &self.regions[bubble]
    }
}

impl<'a> IntoIterator for &'a Registry {
    type Item = (&'a BubbleId, &'a Hosted);
    type IntoIter = std::collections::btree_map::Iter<'a, BubbleId, Hosted>;

    fn into_iter(self) -> Self::IntoIter {
        self.regions.iter()
    }
}

#[cfg(test)]
mod tests {
    use horizon_mesh::Span;
    use horizon_proto::Vec3;

    use super::*;

    fn cube(side: f64) -> Aabb {
        Aabb { min: Vec3::default(), max: Vec3 { x: side, y: side, z: side } }
    }

    fn site(name: &str) -> SiteId {
        crate::machine::tests::sites().id(name).expect(name)
    }

    /// A region of PAR under epoch 3, spread over two parts with one member on each.
    fn spread_region() -> Hosted {
        let mut r = Hosted::new(site("PAR"), 3, 0, cube(100.0), Time::from_secs(1));
        r.joined(PlayerId(1), site("PAR"));
        r.joined(PlayerId(2), site("MTL"));
        let part_of = BTreeMap::from([(PlayerId(1), 0), (PlayerId(2), 1)]);
        r.spread(vec![cube(50.0), cube(100.0)], part_of);
        r
    }

    #[test]
    fn a_region_is_spread_over_several_parts_only() {
        let mut r = spread_region();
        assert_eq!(r.parts().len(), 2);
        assert_eq!(r.part_of()[&PlayerId(2)], 1);
        r.spread(vec![cube(100.0)], BTreeMap::from([(PlayerId(1), 0)]));
        assert!(r.parts().is_empty() && r.part_of().is_empty(), "one part: one server");
    }

    #[test]
    fn a_move_or_a_restore_lands_the_region_on_one_server_of_its_new_holder() {
        let mut r = spread_region();
        r.moving_by(HandoverId(7));
        assert_eq!((r.moving(), r.settled()), (Some(HandoverId(7)), false));
        r.moved_to(site("MTL"), 4);
        assert_eq!((r.site(), r.epoch(), r.phase()), (site("MTL"), 4, Phase::Running));
        assert!(r.parts().is_empty(), "the snapshot is made on one server");
        assert_eq!(r.members().len(), 2, "its members move with it");

        let mut r = spread_region();
        r.restoring_at(site("HKG"), 5);
        assert!(r.restoring() && !r.settled());
        assert_eq!((r.site(), r.epoch()), (site("HKG"), 5));
        assert!(r.parts().is_empty());
        r.running();
        assert!(r.settled());
    }

    #[test]
    fn a_move_given_up_stays_with_its_source_under_a_regrant() {
        let mut r = spread_region();
        r.moving_by(HandoverId(7));
        r.stays();
        r.regranted(6);
        assert_eq!((r.site(), r.epoch(), r.phase()), (site("PAR"), 6, Phase::Running));
        assert_eq!(r.regrant(), Some((3, 6)), "a renewal of epoch 3 may still cross it");
        assert!(r.parts().is_empty());
    }

    #[test]
    fn a_region_taken_back_mid_handover_keeps_its_fallback_until_either_end_registers() {
        let until = Time::from_secs(1) + Span::from_ms(10_000);
        let r = Hosted::new(site("MTL"), 4, 0, cube(10.0), Time::from_secs(1))
            .taken_back(Some((site("PAR"), 3)), until);
        assert_eq!(r.fallback(), Some((site("PAR"), 3)));
        assert_eq!(r.members_unknown_until(), Some(until));
        // The source registered still holding it: it is the holder again.
        let mut back = r.clone();
        back.held_at(site("PAR"), 3);
        assert_eq!((back.site(), back.epoch(), back.fallback()), (site("PAR"), 3, None));
        // The target registered holding it.
        let mut kept = r;
        kept.fallback_settled();
        assert_eq!((kept.site(), kept.epoch(), kept.fallback()), (site("MTL"), 4, None));
    }

    #[test]
    fn leases_only_lengthen_and_an_ending_keeps_its_first_time() {
        let mut r = spread_region();
        r.leased_until(Time::from_secs(20));
        r.leased_until(Time::from_secs(15));
        assert_eq!(r.lease_until(), Time::from_secs(20));
        assert_eq!(r.ending(Time::from_secs(30)), Time::from_secs(30));
        assert_eq!(r.ending(Time::from_secs(40)), Time::from_secs(30));
        assert_eq!(r.ending_since(), Some(Time::from_secs(30)));
    }

    #[test]
    fn the_registry_holds_each_region_once() {
        let mut reg = Registry::default();
        assert!(reg.is_empty());
        reg.insert(BubbleId(1), spread_region());
        reg.insert(BubbleId(2), spread_region());
        reg.get_mut(&BubbleId(2)).expect("2").left(PlayerId(1));
        assert_eq!(reg.len(), 2);
        assert_eq!(reg[&BubbleId(1)].members().len(), 2);
        assert_eq!(reg.get(&BubbleId(2)).map(|r| r.members().len()), Some(1));
        assert!(reg.remove(&BubbleId(1)).is_some() && !reg.contains(&BubbleId(1)));
        assert_eq!(reg.iter().map(|(b, _)| *b).collect::<Vec<_>>(), [BubbleId(2)]);
    }
}
