//! Units of placement: clusters at the merge distance, joined only where their players' boxes
//! meet; the boxes they claim around their players are cut apart where they overlap.

use super::sweep::Sweep;
use super::*;

impl Mesh {
    /// Groups counted players at the speed-scaled merge distance, then joins groups whose
    /// players' boxes meet (no border can pass between them) until every unit's box is clear of
    /// the others. Each unit then claims its box grown by its margin, cut where it overlaps
    /// another's claim (a fast ship's margin reaches past the merge distance): the cut passes
    /// midway through the widest gap between the two units' players. Leaves the units and each
    /// one's tally, extent and claims on bubbles in `sc`.
    pub(super) fn form_units(&mut self, sc: &mut Scratch) {
        sc.slot_world.clear();
        let slots = 0..self.regions.slots() as u32;
        sc.slot_world.extend(slots.map(|s| self.regions.bubble(s).map_or(NONE, |b| b.world.0)));
        // Last tick's units lend their buffers.
        let mut clusters = std::mem::take(&mut sc.units);
        self.group_counted(sc, &mut clusters);
        self.describe(&clusters, sc);
        // One sweep of the clusters' claims finds every pair whose members' boxes may touch
        // (those lie within the claims) and every pair of claims to cut apart. A cluster's
        // claim is near the box of the bubble its members were in: the bubbles in the order
        // the last tick sorted them, each followed by the clusters claiming it, give the
        // clusters nearly sorted.
        self.guess_claims_order(clusters.len(), sc);
        sweep_claims(&sc.extents, &mut sc.sweep, &mut sc.pairs, &sc.claims_order);
        match unite_overlapping(&sc.extents, &sc.sweep, &sc.pairs, Extent::touch_box) {
            Some(root) => {
                let unit_of;
                (sc.units, unit_of) = self.join_clusters(&clusters, &root, sc);
                // Units that grew claim more: sweep the units' claims again, in the order the
                // clusters' were just found in.
                sc.claims_order.clear();
                sc.claims_order.extend(sc.sweep.sorted_ids().map(|c| unit_of[c as usize]));
                sweep_claims(&sc.extents, &mut sc.sweep, &mut sc.pairs, &sc.claims_order);
            }
            None => sc.units = clusters,
        }
        cut_claims(&mut sc.extents, &sc.pairs);
        sc.unit_delegation.clear();
        sc.unit_delegation.resize(sc.units.len(), NONE);
        if self.placement == Placement::Fixed && !self.delegations.is_empty() {
            self.join_delegated(sc);
        }
    }

    /// Leaves in `sc.claims_order` the `nc` clusters in the order of the bubbles they claim
    /// (`sc.slots_order`, last tick's sorted boxes); clusters claiming none are not listed
    /// ([`Sweep::push_guessed`] pushes them after).
    fn guess_claims_order(&self, nc: usize, sc: &mut Scratch) {
        // The clusters claiming each slot, as compressed rows.
        let nslots = self.regions.slots();
        let (start, claimants) = (&mut sc.slot_start, &mut sc.slot_claimants);
        start.clear();
        start.resize(nslots + 1, 0);
        for e in &sc.claims {
            start[e.slot as usize + 1] += 1;
        }
        for s in 0..nslots {
            start[s + 1] += start[s];
        }
        claimants.clear();
        claimants.resize(sc.claims.len(), 0);
        let mut fill = start[..nslots].to_vec();
        for c in 0..nc {
            for e in &sc.claims[sc.claim_start[c] as usize..sc.claim_start[c + 1] as usize] {
                claimants[fill[e.slot as usize] as usize] = c as u32;
                fill[e.slot as usize] += 1;
            }
        }
        sc.claims_order.clear();
        for &s in sc.slots_order.iter().filter(|&&s| (s as usize) < nslots) {
            let s = s as usize;
            sc.claims_order.extend_from_slice(&claimants[start[s] as usize..start[s + 1] as usize]);
        }
    }

    /// Groups the counted players at the merge distance into `out`, updating the grid for the
    /// players that changed since the last tick alone.
    fn group_counted(&mut self, sc: &mut Scratch, out: &mut Groups) {
        // In place order, the grid reads the changed players' items as it would a stream.
        self.changed.sort_unstable();
        let (items, npc, merge) = (&self.items, &self.npc, self.th.merge_distance_m);
        sc.grouper.regroup_into(items, npc, &self.changed, merge, out);
        for &i in &self.changed {
            let i = i as usize;
            if i < self.items.len() {
                self.changed_flag[i] = false;
                // NPCs are in no bubble (a player becomes one through an update: listed here).
                if self.npc[i] {
                    self.player_bubble[i] = NONE;
                }
            }
        }
        self.changed.clear();
    }

    /// Units from the clusters joined under `root`, with their tallies, extents and claims;
    /// and per cluster, its unit.
    pub(super) fn join_clusters(
        &self,
        clusters: &Groups,
        root: &[u32],
        sc: &mut Scratch,
    ) -> (Groups, Vec<u32>) {
        let (units, unit_of) = clusters.join(root);
        // A unit's figures are the sums of its clusters': no second pass over players.
        let mut tallies = std::mem::take(&mut sc.spare_tallies);
        while tallies.len() < units.len() {
            tallies.push(Tally::new(self.sites.len()));
        }
        for t in tallies.iter_mut().take(units.len()) {
            t.clear();
        }
        let mut boxes: Vec<Option<Extent>> = vec![None; units.len()];
        // The clusters of each unit, as compressed rows.
        let mut start = vec![0u32; units.len() + 1];
        for (c, &u) in unit_of.iter().enumerate() {
            let u = u as usize;
            tallies[u].merge(&sc.tallies[c]);
            let e = sc.extents[c];
            boxes[u] = Some(boxes[u].map_or(e, |b| b.join(&e)));
            start[u + 1] += 1;
        }
        for u in 0..units.len() {
            start[u + 1] += start[u];
        }
        let mut fill = start.clone();
        let mut of_unit = vec![0u32; clusters.len()];
        for (c, &u) in unit_of.iter().enumerate() {
            of_unit[fill[u as usize] as usize] = c as u32;
            fill[u as usize] += 1;
        }
        let mut claims: Vec<Claim> = Vec::with_capacity(sc.claims.len());
        let mut claim_start = Vec::with_capacity(units.len() + 1);
        for u in 0..units.len() {
            let first = claims.len();
            claim_start.push(first as u32);
            for &c in &of_unit[start[u] as usize..start[u + 1] as usize] {
                let c = c as usize;
                let from = &sc.claims[sc.claim_start[c] as usize..sc.claim_start[c + 1] as usize];
                for e in from {
                    match claims[first..].iter_mut().find(|o| o.slot == e.slot) {
                        Some(o) => o.add(e),
                        None => claims.push(*e),
                    }
                }
            }
        }
        claim_start.push(claims.len() as u32);
        sc.claims = claims;
        sc.claim_start = claim_start;
        sc.spare_tallies = std::mem::replace(&mut sc.tallies, tallies);
        // Invariant: every unit holds at least one cluster.
        sc.extents = boxes.into_iter().map(|b| b.expect("non-empty unit")).collect();
        (units, unit_of)
    }

    /// Per cluster: tally, extent (member box, largest speed-scaled border margin, the box
    /// where a border is too close) and the bubbles its members were in.
    pub(super) fn describe(&self, clusters: &Groups, sc: &mut Scratch) {
        let nc = clusters.len();
        while sc.tallies.len() < nc {
            sc.tallies.push(Tally::new(self.sites.len()));
        }
        sc.extents.clear();
        sc.claims.clear();
        sc.claim_start.clear();
        // An item's radius is `merge + v·lead`, so its border margin is `border + v·lead`.
        let extra = self.th.border_margin_m - self.th.merge_distance_m;
        // A player at rest has the radius `merge` and the margin `still`: the still members'
        // alert boxes make the members' box grown by half of it, so only moving ones are added
        // one by one.
        let still = self.th.merge_distance_m + extra;
        sc.breaks = 0;
        for c in 0..nc {
            let t = &mut sc.tallies[c];
            t.clear();
            let first_claim = sc.claims.len();
            sc.claim_start.push(first_claim as u32);
            let members = clusters.members(c);
            sc.breaks += members.windows(2).filter(|w| w[1] != w[0] + 1).count();
            let first = &self.items[members[0] as usize];
            let mut bounds = Aabb::point(first.pos);
            let (mut margin, mut moving_alert, mut any_still) = (0.0f64, None::<Aabb>, false);
            for &it in members {
                let (item, m) = (&self.items[it as usize], &self.members[it as usize]);
                t.add_one(m.gateway, m.access_ms, m.weight);
                bounds = bounds.include(item.pos);
                if item.radius == self.th.merge_distance_m {
                    any_still = true;
                } else {
                    let own = item.radius + extra;
                    margin = margin.max(own);
                    let alert = Aabb::point(item.pos).expand(own / 2.0);
                    moving_alert = Some(moving_alert.map_or(alert, |a| a.hull(alert)));
                }
                // A claim on the bubble it was in, if that bubble is of its world.
                let prev = self.player_bubble[it as usize];
                if prev == NONE || sc.slot_world.get(prev as usize) != Some(&item.world.0) {
                    continue;
                }
                let claim = Claim { slot: prev, weight: m.weight, min_id: m.id, count: 1 };
                match sc.claims[first_claim..].iter_mut().find(|e| e.slot == prev) {
                    Some(e) => e.add(&claim),
                    None => sc.claims.push(claim),
                }
            }
            let still_alert = any_still.then(|| bounds.expand(still / 2.0));
            // Invariant: a cluster has a member, so one of the two is set.
            let alert = match (still_alert, moving_alert) {
                (Some(a), Some(b)) => a.hull(b),
                (a, b) => a.or(b).expect("a cluster has a member"),
            };
            if any_still {
                margin = margin.max(still);
            }
            sc.extents.push(Extent {
                world: first.world,
                bounds,
                margin,
                claim: bounds.expand(margin),
                alert,
            });
        }
        sc.claim_start.push(sc.claims.len() as u32);
    }
}

/// What scoring and continuity read of a player (grouping reads its [`Item`]), next to it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Member {
    pub(super) id: PlayerId,
    pub(super) gateway: SiteId,
    pub(super) access_ms: f64,
    pub(super) weight: f64,
}

/// A unit's claim on a bubble its members were in.
#[derive(Clone, Copy, Debug)]
pub(super) struct Claim {
    pub(super) slot: u32,
    /// Weight of the unit's members that were in the bubble.
    pub(super) weight: f64,
    /// Smallest of their ids (the tie-break).
    pub(super) min_id: PlayerId,
    /// How many of them.
    pub(super) count: u32,
}

impl Claim {
    fn add(&mut self, o: &Claim) {
        self.weight += o.weight;
        self.min_id = self.min_id.min(o.min_id);
        self.count += o.count;
    }
}

/// Where a cluster (or unit) is: its world, its members' box, their largest speed-scaled
/// border margin, the box it claims, and its alert box.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Extent {
    pub(super) world: WorldId,
    pub(super) bounds: Aabb,
    pub(super) margin: f64,
    /// The members' box grown by the margin, cut where it overlapped another unit's claim.
    pub(super) claim: Aabb,
    /// Every member's position grown by half its own margin: a border that does not hold this
    /// box has a member within half its margin of the edge.
    pub(super) alert: Aabb,
}

/// Players' boxes closer than this along every axis are joined: a border between them would
/// leave a player less than half of it from the edge.
const TOUCH_M: f64 = 1.0;

impl Extent {
    /// An extent with no alert box beyond its members' box (for tests of joining and cutting).
    #[cfg(test)]
    pub(super) fn new(world: WorldId, bounds: Aabb, margin: f64) -> Extent {
        Extent { world, bounds, margin, claim: bounds.expand(margin), alert: bounds }
    }

    /// The members' box grown by half of [`TOUCH_M`]: two overlap when no border fits between.
    fn touch_box(&self) -> Aabb {
        self.bounds.expand(TOUCH_M / 2.0)
    }

    fn join(&self, o: &Extent) -> Extent {
        let (bounds, margin) = (self.bounds.hull(o.bounds), self.margin.max(o.margin));
        let alert = self.alert.hull(o.alert);
        Extent { world: self.world, bounds, margin, claim: bounds.expand(margin), alert }
    }
}

/// Sweeps the claims of `extents`, leaving in `pairs` every pair that overlaps. `guess` lists
/// extents' indices in an order close to sorted, if one is known: it only saves time.
pub(super) fn sweep_claims(
    extents: &[Extent],
    sweep: &mut Sweep,
    pairs: &mut Vec<(u32, u32)>,
    guess: &[u32],
) {
    sweep.clear();
    sweep.push_guessed(extents.len(), guess, |c| (extents[c].world, extents[c].claim));
    pairs.clear();
    pairs.extend_from_slice(sweep.overlapping_nearly_sorted());
}

/// Cuts apart the claims that overlap: for each overlapping pair, through the middle of the
/// widest gap between the two units' members' boxes, along that axis. A cut only shrinks claims
/// and leaves each containing its members; once a pair is cut it never overlaps again, so every
/// pair is visited once. `pairs` holds (at least) every overlapping pair of claims. The units'
/// boxes must be clear of each other by [`TOUCH_M`] along some axis (what [`unite_overlapping`]
/// on [`Extent::touch_box`] leaves).
pub(super) fn cut_claims(extents: &mut [Extent], pairs: &[(u32, u32)]) {
    for &(a, b) in pairs {
        let (a, b) = (a as usize, b as usize);
        if !extents[a].claim.overlaps(&extents[b].claim) {
            continue; // an earlier cut already separated them
        }
        // (gap, axis, lower unit, upper unit) of the widest gap between the members' boxes.
        let mut widest: Option<(f64, usize, usize, usize)> = None;
        for axis in 0..3 {
            let (ba, bb) = (&extents[a].bounds, &extents[b].bounds);
            let (gap, lo, hi) = if ba.max.axis(axis) <= bb.min.axis(axis) {
                (bb.min.axis(axis) - ba.max.axis(axis), a, b)
            } else {
                (ba.min.axis(axis) - bb.max.axis(axis), b, a)
            };
            if gap > 0.0 && widest.is_none_or(|w| gap > w.0) {
                widest = Some((gap, axis, lo, hi));
            }
        }
        let Some((_, axis, lo, hi)) = widest else {
            debug_assert!(false, "units {a} and {b} have touching boxes: they should be one");
            continue;
        };
        let cut = (extents[lo].bounds.max.axis(axis) + extents[hi].bounds.min.axis(axis)) / 2.0;
        let low = &mut extents[lo].claim;
        low.max = low.max.with_axis(axis, low.max.axis(axis).min(cut));
        let high = &mut extents[hi].claim;
        high.min = high.min.with_axis(axis, high.min.axis(axis).max(cut));
    }
}

/// For each cluster, the cluster representing its unit: clusters whose boxes (`key` of their
/// extent) overlap are joined, and joined boxes are checked again until no two units' boxes
/// overlap. `None` when no two clusters overlap. Works on boxes only.
///
/// `sweep` holds the clusters' claims as its last [`Sweep::overlapping`] sorted them, and
/// `claim_pairs` is what that found; every `key` box lies within its claim, so a pair whose keys
/// overlap is among them.
///
/// The result does not depend on the order of joins (a join only ever makes boxes larger), so
/// after the first round over every pair, each later round looks only at units that grew: a
/// unit that did not grow still has the box the first round found clear of every other
/// unchanged one.
pub(super) fn unite_overlapping(
    extents: &[Extent],
    sweep: &Sweep,
    claim_pairs: &[(u32, u32)],
    key: impl Fn(&Extent) -> Aabb,
) -> Option<Vec<u32>> {
    fn find(root: &mut [u32], mut x: u32) -> u32 {
        while root[x as usize] != x {
            root[x as usize] = root[root[x as usize] as usize];
            x = root[x as usize];
        }
        x
    }
    let overlap = |a: &Extent, b: &Extent| key(a).overlaps(&key(b));
    let mut pairs: Vec<(u32, u32)> = claim_pairs
        .iter()
        .copied()
        .filter(|&(a, b)| overlap(&extents[a as usize], &extents[b as usize]))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let n = extents.len();
    let mut root: Vec<u32> = (0..n as u32).collect();
    // The extents of units that grew (the others are their cluster's).
    let mut joined: FxHashMap<u32, Extent> = FxHashMap::default();
    let unit = |joined: &FxHashMap<u32, Extent>, u: u32| {
        joined.get(&u).copied().unwrap_or(extents[u as usize])
    };
    // Units that grew at some point, and those that grew in the last round.
    let mut ever: Vec<u32> = Vec::new();
    let mut fresh: Vec<u32> = Vec::new();
    let mut others = Sweep::default();
    while !pairs.is_empty() {
        fresh.clear();
        for &(a, b) in &pairs {
            let (ra, rb) = (find(&mut root, a), find(&mut root, b));
            if ra == rb {
                continue;
            }
            let (keep, gone) = (ra.min(rb), ra.max(rb));
            root[gone as usize] = keep;
            let grown = unit(&joined, keep).join(&unit(&joined, gone));
            if joined.insert(keep, grown).is_none() {
                ever.push(keep);
            }
            fresh.push(keep);
        }
        fresh.sort_unstable();
        fresh.dedup();
        fresh.retain(|&u| root[u as usize] == u);
        ever.retain(|&u| root[u as usize] == u);
        // Next round: each unit that grew against the clusters that never did (their claims
        // are in the sweep) and against every other unit that ever grew.
        pairs.clear();
        others.clear();
        for &h in &ever {
            let e = unit(&joined, h);
            others.push(e.world, key(&e), h);
        }
        others.overlapping();
        for &g in &fresh {
            let e = unit(&joined, g);
            let bx = key(&e);
            for c in sweep.overlapping_with(e.world, bx) {
                let untouched = root[c as usize] == c && !joined.contains_key(&c);
                if untouched && key(&extents[c as usize]).overlaps(&bx) {
                    pairs.push((g, c));
                }
            }
            for h in others.overlapping_with(e.world, bx) {
                if h != g {
                    pairs.push((g, h));
                }
            }
        }
    }
    Some((0..n as u32).map(|c| find(&mut root, c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Joins any two overlapping units until none overlap, comparing every pair each round.
    /// Which box of an extent two units are joined on.
    type Key = fn(&Extent) -> Aabb;

    fn brute(extents: &[Extent], key: Key) -> Vec<usize> {
        let mut label: Vec<usize> = (0..extents.len()).collect();
        let mut unit: Vec<Option<Extent>> = extents.iter().copied().map(Some).collect();
        loop {
            let mut joined = false;
            for a in 0..unit.len() {
                for b in a + 1..unit.len() {
                    let (Some(x), Some(y)) = (unit[a], unit[b]) else { continue };
                    if x.world == y.world && key(&x).overlaps(&key(&y)) {
                        unit[a] = Some(x.join(&y));
                        unit[b] = None;
                        label.iter_mut().filter(|l| **l == b).for_each(|l| *l = a);
                        joined = true;
                    }
                }
            }
            if !joined {
                return label;
            }
        }
    }

    /// Every kind of input between ticks (joins, moves, jumps, new speeds, roles to and from
    /// NPC, other worlds, departures) is listed for the grid: grouping from the changes alone
    /// finds the groups a fresh grouping of every player finds.
    #[test]
    fn the_grid_follows_every_kind_of_input() {
        use crate::config::{Sites, Thresholds};
        use crate::ids::{Generation, SiteName};
        use crate::player::{PlayerJoin, PlayerUpdate, Role};
        use crate::rng::Rng;
        use crate::time::Time;

        let name = |s: &str| SiteName::new(s).expect("valid site name");
        let sites = Sites::new(
            vec![name("PAR"), name("MTL")],
            &name("PAR"),
            &[(name("PAR"), name("MTL"), 85.0)],
        )
        .expect("valid sites");
        let config = MeshConfig {
            sites,
            thresholds: Thresholds::default(),
            generation: Generation(1),
            placement: Default::default(),
            zones: Vec::new(),
        };
        let mut mesh = Mesh::new(config, Time::ZERO).expect("valid config");
        let mut rng = Rng::new(3);
        let mut next_id = 1;
        let gateway = mesh.sites().ids().next().expect("a site");
        for tick in 0..12u64 {
            for _ in 0..60 {
                let n = mesh.players().len();
                let pick =
                    |mesh: &Mesh, rng: &mut Rng| mesh.players()[rng.below(n as u64) as usize].id;
                let update = match rng.below(8) {
                    _ if n < 20 => None,
                    0 => Some(PlayerUpdate {
                        position: Some(Vec3::new(rng.range(-9e3, 9e3), rng.range(-9e3, 9e3), 0.0)),
                        ..Default::default()
                    }),
                    1 => Some(PlayerUpdate {
                        velocity: Some(Vec3::new(rng.range(0.0, 300.0), 0.0, 0.0)),
                        ..Default::default()
                    }),
                    2 => Some(PlayerUpdate {
                        role: Some(if rng.below(2) == 0 { Role::Npc } else { Role::Pilot }),
                        ..Default::default()
                    }),
                    3 => Some(PlayerUpdate {
                        world: Some(WorldId(rng.below(2) as u32)),
                        ..Default::default()
                    }),
                    4 => {
                        let id = pick(&mesh, &mut rng);
                        mesh.handle_leave(id).expect("connected");
                        None
                    }
                    5 => Some(PlayerUpdate {
                        position: Some(Vec3::new(rng.range(-100.0, 100.0), 0.0, 0.0)),
                        ..Default::default()
                    }),
                    _ => None,
                };
                match update {
                    Some(u) => {
                        let id = pick(&mesh, &mut rng);
                        mesh.handle_update(id, &u).expect("connected");
                    }
                    None if n < 20 || rng.below(3) == 0 => {
                        let join = PlayerJoin {
                            id: PlayerId(next_id),
                            gateway,
                            access_rtt_ms: 20.0,
                            role: Role::Player,
                            world: WorldId(0),
                            position: Vec3::new(rng.range(-9e3, 9e3), rng.range(-9e3, 9e3), 0.0),
                            velocity: Vec3::ZERO,
                        };
                        next_id += 1;
                        mesh.handle_join(join).expect("new player");
                    }
                    None => {}
                }
            }
            let mut sc = std::mem::take(&mut mesh.scratch);
            let mut got = Groups::default();
            mesh.group_counted(&mut sc, &mut got);
            mesh.scratch = sc;
            let mut want = Groups::default();
            Grouper::new().group_into(&mesh.items, &mesh.npc, mesh.th.merge_distance_m, &mut want);
            for i in 0..mesh.items.len() {
                for j in 0..mesh.items.len() {
                    assert_eq!(
                        got.group_of(i) == got.group_of(j),
                        want.group_of(i) == want.group_of(j),
                        "tick {tick}: players {i} and {j}"
                    );
                }
            }
            mesh.tick(Time::from_secs(5 * tick));
        }
    }

    /// The claims swept, and their overlapping pairs.
    fn swept(extents: &[Extent]) -> (Sweep, Vec<(u32, u32)>) {
        let (mut sweep, mut pairs) = (Sweep::default(), Vec::new());
        sweep_claims(extents, &mut sweep, &mut pairs, &[]);
        (sweep, pairs)
    }

    /// Up to 80 boxes of up to 400 m in a 10 km square of two worlds, margins up to `margin`.
    fn extents(margin: f64) -> impl proptest::strategy::Strategy<Value = Vec<Extent>> {
        use proptest::strategy::Strategy;
        let corner = (0u32..2, -5_000.0f64..5_000.0, -5_000.0f64..5_000.0);
        let size = (0.0f64..400.0, 0.0f64..400.0, 1.0f64..margin);
        proptest::collection::vec((corner, size), 0..80).prop_map(|boxes| {
            boxes
                .into_iter()
                .map(|((w, x, y), (dx, dy, margin))| {
                    let (min, max) = (Vec3::new(x, y, 0.0), Vec3::new(x + dx, y + dy, 10.0));
                    Extent::new(WorldId(w), Aabb { min, max }, margin)
                })
                .collect()
        })
    }

    proptest::proptest! {
        /// After joining boxes that touch, cutting leaves no two claims overlapping, each claim
        /// still holding its members' box and never larger than the box grown by its margin.
        #[test]
        fn cut_claims_never_overlap_and_keep_their_members(clusters in extents(3_000.0)) {
            let (sweep, pairs) = swept(&clusters);
            let root = unite_overlapping(&clusters, &sweep, &pairs, Extent::touch_box)
                .unwrap_or_else(|| (0..clusters.len() as u32).collect());
            let mut units: Vec<Extent> = Vec::new();
            let mut unit_of = vec![usize::MAX; clusters.len()];
            for (c, &r) in root.iter().enumerate() {
                let r = r as usize;
                if unit_of[r] == usize::MAX {
                    unit_of[r] = units.len();
                    units.push(clusters[r]);
                }
                let u = unit_of[r];
                units[u] = units[u].join(&clusters[c]);
            }
            let (_, pairs) = swept(&units);
            cut_claims(&mut units, &pairs);
            let inside = |outer: Aabb, inner: Aabb| outer.contains(inner.min) && outer.contains(inner.max);
            for (i, a) in units.iter().enumerate() {
                proptest::prop_assert!(inside(a.claim, a.bounds), "{:?}", a);
                proptest::prop_assert!(inside(a.bounds.expand(a.margin), a.claim), "{:?}", a);
                for b in &units[i + 1..] {
                    proptest::prop_assert!(
                        a.world != b.world || !a.claim.overlaps(&b.claim), "{:?} {:?}", a, b
                    );
                }
            }
        }

        /// Sweeping boxes pushed nearly sorted (sorted by insertion) finds the pairs a full sort
        /// finds, and so does pushing them in any order (insertion gives up, the sort takes over).
        #[test]
        fn a_nearly_sorted_sweep_finds_what_a_sorted_one_finds(extents in extents(600.0), shuffle in proptest::collection::vec(0usize..1000, 80)) {
            let pairs = |sweep: &mut Sweep, nearly: bool| {
                let mut p: Vec<(u32, u32)> = if nearly {
                    sweep.overlapping_nearly_sorted().to_vec()
                } else {
                    sweep.overlapping().to_vec()
                };
                for pair in &mut p {
                    *pair = (pair.0.min(pair.1), pair.0.max(pair.1));
                }
                p.sort_unstable();
                p
            };
            let (mut sweep, _) = swept(&extents);
            let want = pairs(&mut sweep, false);
            // Pushed in sorted order, then in a scrambled one.
            let sorted: Vec<u32> = sweep.sorted_ids().collect();
            let mut scrambled = sorted.clone();
            for (i, &k) in shuffle.iter().enumerate().take(scrambled.len()) {
                let j = k % scrambled.len();
                scrambled.swap(i, j);
            }
            for order in [&sorted, &scrambled] {
                let mut again = Sweep::default();
                for &c in order {
                    let e = &extents[c as usize];
                    again.push(e.world, e.claim, c);
                }
                proptest::prop_assert_eq!(&pairs(&mut again, true), &want);
            }
            // Pushed in index order and sorted from a guess: the sorted order, a scrambled
            // one, one with repeats, indices out of range and some left out, or none. The
            // same pairs in the same order, and the boxes sorted alike.
            let want_in_order = sweep.overlapping().to_vec();
            let want_sorted: Vec<u32> = sweep.sorted_ids().collect();
            let mut odd: Vec<u32> = scrambled.iter().map(|&c| c * 2).collect();
            odd.truncate(odd.len() * 2 / 3);
            odd.extend(shuffle.iter().map(|&k| k as u32 % 200));
            for guess in [&sorted, &scrambled, &odd, &Vec::new()] {
                let (mut again, mut got) = (Sweep::default(), Vec::new());
                sweep_claims(&extents, &mut again, &mut got, guess);
                proptest::prop_assert_eq!(&got, &want_in_order);
                proptest::prop_assert_eq!(again.sorted_ids().collect::<Vec<_>>(), want_sorted.clone());
            }
        }

        /// Units are the fixpoint of joining overlapping claims, whatever the order of joins:
        /// the rounds that look only at grown units find what comparing all pairs finds — with
        /// the members' touch boxes (what the tick joins on) and with whole claims.
        #[test]
        fn units_match_joining_every_overlapping_pair(extents in extents(600.0)) {
            let (sweep, pairs) = swept(&extents);
            let keys: [(&str, Key); 2] = [("touch", Extent::touch_box), ("claim", |e| e.claim)];
            for (name, key) in keys {
                let want = brute(&extents, key);
                let got = unite_overlapping(&extents, &sweep, &pairs, key);
                let got: Vec<u32> = got.unwrap_or_else(|| (0..extents.len() as u32).collect());
                for a in 0..extents.len() {
                    for b in 0..extents.len() {
                        proptest::prop_assert_eq!(
                            want[a] == want[b],
                            got[a] == got[b],
                            "{} boxes: clusters {} and {}", name, a, b
                        );
                    }
                }
            }
        }
    }
}
