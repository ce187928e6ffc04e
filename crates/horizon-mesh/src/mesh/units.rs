//! Units of placement: clusters at the merge distance, joined while their claimed boxes overlap.

use super::*;

impl Mesh {
    /// Groups counted players at the speed-scaled merge distance, then joins groups whose
    /// claimed boxes overlap (a fast ship's margins reach past the merge distance) until every
    /// unit's box is clear of the others. Leaves each unit's tally and box in `sc`.
    pub(super) fn form_units(&mut self, sc: &mut Scratch) -> Groups {
        sc.items.clear();
        sc.item_player.clear();
        for (i, p) in self.players.iter().enumerate() {
            if p.role.is_counted() {
                let radius = self.th.scaled(self.th.merge_distance_m, p.speed());
                sc.items.push(Item { world: p.world, pos: p.position, radius });
                sc.item_player.push(i as u32);
            } else {
                self.player_bubble[i] = NONE;
            }
        }
        let clusters = sc.grouper.group(&sc.items, self.th.merge_distance_m);
        self.describe(&clusters, sc);
        let Some(root) = unite_overlapping(&sc.extents, &mut sc.sweep) else {
            return clusters;
        };
        let units = clusters.join(&root);
        // A unit's figures are the sums of its clusters': no second pass over players.
        let mut tallies = std::mem::take(&mut sc.spare_tallies);
        while tallies.len() < units.len() {
            tallies.push(Tally::new(self.sites.len()));
        }
        for t in tallies.iter_mut().take(units.len()) {
            t.clear();
        }
        let mut boxes: Vec<Option<Extent>> = vec![None; units.len()];
        for c in 0..clusters.len() {
            let u = units.group_of(clusters.members(c)[0] as usize);
            tallies[u].merge(&sc.tallies[c]);
            let e = sc.extents[c];
            boxes[u] = Some(boxes[u].map_or(e, |b| b.join(&e)));
        }
        sc.spare_tallies = std::mem::replace(&mut sc.tallies, tallies);
        // Invariant: every unit holds at least one cluster.
        sc.extents = boxes.into_iter().map(|b| b.expect("non-empty unit")).collect();
        units
    }

    /// Per cluster: tally, member box and the largest speed-scaled border margin.
    pub(super) fn describe(&self, clusters: &Groups, sc: &mut Scratch) {
        let nc = clusters.len();
        while sc.tallies.len() < nc {
            sc.tallies.push(Tally::new(self.sites.len()));
        }
        sc.extents.clear();
        // An item's radius is `merge + v·lead`, so its border margin is `border + v·lead`.
        let extra = self.th.border_margin_m - self.th.merge_distance_m;
        for c in 0..nc {
            let t = &mut sc.tallies[c];
            t.clear();
            let members = clusters.members(c);
            let first = &sc.items[members[0] as usize];
            let mut extent =
                Extent { world: first.world, bounds: Aabb::point(first.pos), margin: 0.0 };
            for &it in members {
                let item = &sc.items[it as usize];
                let p = &self.players[sc.item_player[it as usize] as usize];
                t.add(p, self.th.weights.of(p.role));
                extent.bounds = extent.bounds.include(item.pos);
                extent.margin = extent.margin.max(item.radius + extra);
            }
            sc.extents.push(extent);
        }
    }
}

/// Where a cluster (or unit) is: its world, its members' box and their largest speed-scaled
/// border margin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Extent {
    pub(super) world: WorldId,
    pub(super) bounds: Aabb,
    pub(super) margin: f64,
}

impl Extent {
    /// The box it claims: its members' box grown by their largest margin.
    pub(super) fn claim(&self) -> Aabb {
        self.bounds.expand(self.margin)
    }

    fn join(&self, o: &Extent) -> Extent {
        Extent {
            world: self.world,
            bounds: self.bounds.hull(o.bounds),
            margin: self.margin.max(o.margin),
        }
    }
}

/// Finds the overlapping pairs among boxes of the same world: sort on (world, min x) as compact
/// integer keys, then sweep along x. Keeps its buffers from tick to tick.
#[derive(Debug, Default)]
pub(super) struct Sweep {
    boxes: Vec<(WorldId, Aabb, u32)>,
    order: Vec<(u32, u64, u64, u32)>,
    pairs: Vec<(u32, u32)>,
}

impl Sweep {
    pub(super) fn clear(&mut self) {
        self.boxes.clear();
    }

    pub(super) fn push(&mut self, world: WorldId, bx: Aabb, id: u32) {
        self.boxes.push((world, bx, id));
    }

    /// The ids of every overlapping pair pushed since the last `clear`.
    pub(super) fn overlapping(&mut self) -> &[(u32, u32)] {
        // f64 → u64 preserving order (no NaN here: positions are checked at the door).
        let ordered = |x: f64| {
            let b = x.to_bits();
            if b >> 63 == 1 { !b } else { b | 1 << 63 }
        };
        // (world, min x, max x, index): the sweep reads only this dense array until two boxes
        // overlap along x, so it does not chase every box in memory.
        self.order.clear();
        self.order.extend(
            self.boxes
                .iter()
                .enumerate()
                .map(|(i, (w, b, _))| (w.0, ordered(b.min.x), ordered(b.max.x), i as u32)),
        );
        self.order.sort_unstable();
        self.pairs.clear();
        for (k, &(world, _, max_x, i)) in self.order.iter().enumerate() {
            for &(w, min_x, _, j) in &self.order[k + 1..] {
                if w != world || min_x >= max_x {
                    break;
                }
                let (a, b) = (&self.boxes[i as usize], &self.boxes[j as usize]);
                if a.1.overlaps(&b.1) {
                    self.pairs.push((a.2, b.2));
                }
            }
        }
        &self.pairs
    }
}

/// For each cluster, the cluster representing its unit: clusters whose claimed boxes overlap
/// are joined, and joined boxes are checked again until no two units' boxes overlap. `None` when
/// no two clusters overlap. Works on boxes only; at most as many rounds as clusters.
pub(super) fn unite_overlapping(extents: &[Extent], sweep: &mut Sweep) -> Option<Vec<u32>> {
    fn find(root: &mut [u32], mut x: u32) -> u32 {
        while root[x as usize] != x {
            root[x as usize] = root[root[x as usize] as usize];
            x = root[x as usize];
        }
        x
    }
    let n = extents.len();
    let mut root: Vec<u32> = (0..n as u32).collect();
    let mut unit: Vec<Extent> = extents.to_vec();
    let mut reps: Vec<u32> = root.clone();
    let mut joined = false;
    loop {
        sweep.clear();
        for &c in &reps {
            let e = &unit[c as usize];
            sweep.push(e.world, e.claim(), c);
        }
        let pairs = sweep.overlapping();
        if pairs.is_empty() {
            return joined.then_some((0..n as u32).map(|c| find(&mut root, c)).collect());
        }
        joined = true;
        for &(a, b) in pairs {
            let (ra, rb) = (find(&mut root, a), find(&mut root, b));
            if ra == rb {
                continue;
            }
            let (keep, gone) = (ra.min(rb), ra.max(rb));
            root[gone as usize] = keep;
            unit[keep as usize] = unit[keep as usize].join(&unit[gone as usize]);
        }
        reps.retain(|&c| root[c as usize] == c);
    }
}
