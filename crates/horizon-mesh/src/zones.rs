//! Zones: the core site's regions, cut and joined as today's SMD does (design.md §1 and §4).
//!
//! Each world starts as its configured boxes (`[[zones]]`), or as one zone covering the whole
//! world. A zone simulates every counted player inside its box who is in no bubble: bubbles are
//! carved out of zones, and a player a bubble lets go of is back in the zone around them.
//!
//! The layout of a world is a binary tree under each configured box: a split cuts a leaf (a
//! zone) in two across one axis, the low half keeping the zone's id and the high half getting a
//! new one; a merge folds a cut whose two halves are both leaves back into one zone. Finding the
//! zone of a position is a walk down the tree, so a world cut into hundreds of zones costs a
//! few comparisons per player.
//!
//! The zones themselves are regions like the bubbles, stored with them in the brain's one table
//! (`crate::regions`); the tree's leaves name their slots there. The rule that decides *when*
//! and *where* (`crate::split`, the same for a bubble's parts) is applied in `mesh/zones.rs`;
//! this module is only the layout.

use rustc_hash::FxHashMap;

use crate::config::ConfigError;
use crate::geom::{Aabb, Vec3};
use crate::ids::{BubbleId, Epoch, SiteId, WorldId};
use crate::region::Region;
use crate::split::{Load, Quiet};
use crate::time::Time;

/// A configured zone box (`[[zones]]`): in the world's local coordinates.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ZoneSpec {
    pub world: WorldId,
    pub bounds: Aabb,
}

/// Checks configured boxes against each other and against the world's range `±limit` m:
/// every problem, named by the box's index in the list.
pub fn validate_specs(specs: &[ZoneSpec], limit: f64) -> Result<(), Vec<ConfigError>> {
    let mut errors = Vec::new();
    let bad = |index: usize, why: String| ConfigError::BadZone { index, why };
    for (i, z) in specs.iter().enumerate() {
        let b = z.bounds;
        if let Some(why) = box_problem(&b, limit) {
            errors.push(bad(i, why));
            continue;
        }
        if let Some(j) = specs[..i].iter().position(|o| o.world == z.world && o.bounds.overlaps(&b))
        {
            errors.push(bad(i, format!("its box overlaps zones[{j}] in the same world")));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// What is wrong with a configured box in a world of range `±limit` m, if anything.
pub(crate) fn box_problem(b: &Aabb, limit: f64) -> Option<String> {
    if !(b.min.is_finite() && b.max.is_finite()) {
        return Some("its corners must be finite numbers".into());
    }
    if (0..3).any(|a| b.min.axis(a) >= b.max.axis(a)) {
        return Some("its box is empty: min must be below max on every axis".into());
    }
    if (0..3).any(|a| b.min.axis(a) < -limit || b.max.axis(a) > limit) {
        return Some(format!(
            "its box leaves the world: every coordinate must be within ±{limit} m"
        ));
    }
    None
}

/// A zone: a box of a world simulated on the core site.
pub type Zone = Region<ZoneState>;

/// What only a zone has.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneState {
    /// Its load, as SMD counts it (`crate::split`, as a bubble's part's).
    pub load: Load,
}

/// A zone of the core site `site`, empty, under `epoch`.
pub(crate) fn new_zone(
    id: BubbleId,
    site: SiteId,
    world: WorldId,
    bounds: Aabb,
    epoch: Epoch,
    now: Option<Time>,
) -> Zone {
    Region {
        id,
        site,
        world,
        bounds,
        epoch,
        stalled_since: None,
        players: 0,
        kind: ZoneState { load: now.map_or_else(Load::default, |t| Load::changed(t, 0)) },
    }
}

#[derive(Clone, Debug)]
enum Node {
    /// A zone: its slot in the brain's table of regions (`crate::regions`).
    Leaf(u32),
    Cut {
        axis: u8,
        at: f64,
        low: u32,
        high: u32,
        /// Order of the splits: the most recent is undone first.
        seq: u64,
        /// The samples both halves have stayed quiet for together.
        quiet: Quiet,
    },
}

#[derive(Clone, Debug)]
struct Slot {
    bounds: Aabb,
    node: Node,
}

/// How every world is cut into zones: a tree of cuts under each root box, whose leaves name
/// the zones' slots in the brain's one table of regions (the zones themselves live there, with
/// the bubbles). Nodes are numbered apart from region slots: a *leaf* is a node.
#[derive(Clone, Debug, Default)]
pub struct ZoneLayout {
    nodes: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Per world: the root of each configured box (or the one whole-world root).
    roots: FxHashMap<WorldId, Vec<u32>>,
    /// A zone's region slot → its leaf.
    leaf_of: FxHashMap<u32, u32>,
    seq: u64,
}

/// How a box is cut into zones: the tree `ZoneLayout::regroup` rebuilds.
enum Plan {
    Leaf(u32),
    Cut { axis: usize, at: f64, bounds: Aabb, low: Box<Plan>, high: Box<Plan> },
}

/// A split made: the leaf of the zone that kept its id and the new zone's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Split {
    pub(crate) kept: u32,
    pub(crate) new: u32,
}

impl ZoneLayout {
    fn alloc(&mut self, slot: Slot) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = Some(slot);
                i
            }
            None => {
                self.nodes.push(Some(slot));
                self.nodes.len() as u32 - 1
            }
        }
    }

    fn slot(&self, node: u32) -> &Slot {
        // Invariant: node indices handed out point at live nodes.
        self.nodes[node as usize].as_ref().expect("live zone node")
    }

    fn slot_mut(&mut self, node: u32) -> &mut Slot {
        self.nodes[node as usize].as_mut().expect("live zone node")
    }

    /// Adds a root zone (a configured box, or a whole world) stored at region slot `region`.
    /// Returns its leaf.
    pub(crate) fn add_root(&mut self, region: u32, world: WorldId, bounds: Aabb) -> u32 {
        let leaf = self.alloc(Slot { bounds, node: Node::Leaf(region) });
        self.roots.entry(world).or_default().push(leaf);
        self.leaf_of.insert(region, leaf);
        leaf
    }

    /// Whether `world` has zones yet.
    pub fn has_world(&self, world: WorldId) -> bool {
        self.roots.contains_key(&world)
    }

    /// The leaf whose zone holds `pos` in `world`: inside a root box, or else the nearest one
    /// (configured boxes need not cover a world; nobody is left out). `None` for an unknown
    /// world.
    pub(crate) fn locate(&self, world: WorldId, pos: Vec3) -> Option<u32> {
        let roots = self.roots.get(&world)?;
        let mut node =
            *roots.iter().find(|&&r| self.slot(r).bounds.contains(pos)).or_else(|| {
                roots.iter().min_by(|&&a, &&b| {
                    self.slot(a).bounds.dist_sq(pos).total_cmp(&self.slot(b).bounds.dist_sq(pos))
                })
            })?;
        loop {
            match &self.slot(node).node {
                Node::Leaf(_) => return Some(node),
                Node::Cut { axis, at, low, high, .. } => {
                    node = if pos.axis(*axis as usize) < *at { *low } else { *high };
                }
            }
        }
    }

    /// The region slot of the zone at `leaf`.
    pub(crate) fn region(&self, leaf: u32) -> u32 {
        match self.slot(leaf).node {
            Node::Leaf(region) => region,
            // Invariant: callers pass leaves (from `locate`, `leaves`, `leaf`).
            Node::Cut { .. } => panic!("zone node {leaf} is a cut, not a zone"),
        }
    }

    /// The box of node `node`.
    pub(crate) fn bounds(&self, node: u32) -> Aabb {
        self.slot(node).bounds
    }

    /// The leaf of the zone at region slot `region`.
    pub(crate) fn leaf(&self, region: u32) -> Option<u32> {
        self.leaf_of.get(&region).copied()
    }

    /// Every zone's leaf, in node order (stable between ticks).
    pub(crate) fn leaves(&self) -> Vec<u32> {
        (0..self.nodes.len() as u32)
            .filter(|&i| matches!(self.nodes[i as usize], Some(Slot { node: Node::Leaf(_), .. })))
            .collect()
    }

    /// Cuts zone `leaf` at `at` across `axis`: the low half keeps the zone (its region slot),
    /// the high half is the zone at region slot `new`. Returns the two halves' leaves.
    pub(crate) fn split(&mut self, leaf: u32, axis: usize, at: f64, new: u32) -> Split {
        let kept = self.region(leaf);
        let (low_box, high_box) = self.slot(leaf).bounds.cut(axis, at);
        let low = self.alloc(Slot { bounds: low_box, node: Node::Leaf(kept) });
        let high = self.alloc(Slot { bounds: high_box, node: Node::Leaf(new) });
        self.seq += 1;
        self.slot_mut(leaf).node =
            Node::Cut { axis: axis as u8, at, low, high, seq: self.seq, quiet: Quiet::default() };
        self.leaf_of.insert(kept, low);
        self.leaf_of.insert(new, high);
        Split { kept: low, new: high }
    }

    /// After a restart, when every zone comes back as a root of its own: the world's zones
    /// lying inside `root` (a configured box, or the whole world) joined again under one tree
    /// of cuts, so that SMD's merges can fold them back. The store keeps each zone's box, not
    /// the order of the cuts: the tree rebuilt is one that cuts `root` into exactly those
    /// boxes (the first plane found that no zone straddles, on each side), a deeper cut
    /// counting as a more recent one. Returns false, changing nothing, when fewer than two
    /// zones lie inside or they do not tile `root` that way.
    pub(crate) fn regroup(&mut self, world: WorldId, root: Aabb) -> bool {
        let Some(roots) = self.roots.get(&world) else { return false };
        let inside: Vec<u32> = roots
            .iter()
            .copied()
            .filter(|&r| matches!(self.slot(r).node, Node::Leaf(_)))
            .filter(|&r| {
                let b = self.slot(r).bounds;
                (0..3)
                    .all(|a| root.min.axis(a) <= b.min.axis(a) && b.max.axis(a) <= root.max.axis(a))
            })
            .collect();
        if inside.len() < 2 {
            return false;
        }
        let Some(plan) = self.plan(root, &inside) else { return false };
        let top = self.build(plan);
        let roots = self.roots.entry(world).or_default();
        roots.retain(|r| !inside.contains(r));
        roots.push(top);
        true
    }

    fn plan(&self, bounds: Aabb, leaves: &[u32]) -> Option<Plan> {
        if let [leaf] = leaves {
            return (self.slot(*leaf).bounds == bounds).then_some(Plan::Leaf(*leaf));
        }
        for axis in 0..3 {
            let mut planes: Vec<f64> = leaves
                .iter()
                .map(|&l| self.slot(l).bounds.min.axis(axis))
                .filter(|&p| p > bounds.min.axis(axis))
                .collect();
            planes.sort_by(f64::total_cmp);
            planes.dedup();
            for at in planes {
                let (low, high): (Vec<u32>, Vec<u32>) =
                    leaves.iter().partition(|&&l| self.slot(l).bounds.max.axis(axis) <= at);
                if high.iter().any(|&l| self.slot(l).bounds.min.axis(axis) < at) {
                    continue;
                }
                // Zones cut from `bounds` by successive cuts are still so cut on each side of
                // any plane none of them straddles: the first such plane is as good as any,
                // and a side that cannot be planned means they were not (no other is tried).
                let (low_box, high_box) = bounds.cut(axis, at);
                let (low, high) = (self.plan(low_box, &low)?, self.plan(high_box, &high)?);
                return Some(Plan::Cut {
                    axis,
                    at,
                    bounds,
                    low: Box::new(low),
                    high: Box::new(high),
                });
            }
        }
        None
    }

    fn build(&mut self, plan: Plan) -> u32 {
        match plan {
            Plan::Leaf(leaf) => leaf,
            Plan::Cut { axis, at, bounds, low, high } => {
                // A cut is numbered before its halves: theirs are the more recent.
                self.seq += 1;
                let seq = self.seq;
                let (low, high) = (self.build(*low), self.build(*high));
                let cut =
                    Node::Cut { axis: axis as u8, at, low, high, seq, quiet: Quiet::default() };
                self.alloc(Slot { bounds, node: cut })
            }
        }
    }

    /// Cuts whose two halves are both zones, most recent split first: `(cut, low, high)`.
    pub(crate) fn mergeable(&self) -> Vec<(u32, u32, u32)> {
        let mut cuts: Vec<(u64, u32, u32, u32)> = Vec::new();
        for (i, s) in self.nodes.iter().enumerate() {
            let Some(Slot { node: Node::Cut { low, high, seq, .. }, .. }) = s else { continue };
            let leaf = |n: u32| matches!(self.slot(n).node, Node::Leaf(_));
            if leaf(*low) && leaf(*high) {
                cuts.push((*seq, i as u32, *low, *high));
            }
        }
        cuts.sort_by_key(|c| std::cmp::Reverse(c.0));
        cuts.into_iter().map(|(_, c, l, h)| (c, l, h)).collect()
    }

    /// The other half of the most recent cut zone `leaf` is a half of, if both halves are
    /// zones, with the samples they have stayed quiet for together.
    pub(crate) fn merge_partner(&self, leaf: u32) -> Option<(u32, Quiet)> {
        self.nodes.iter().flatten().find_map(|s| match s.node {
            Node::Cut { low, high, quiet, .. } if low == leaf || high == leaf => {
                let other = if low == leaf { high } else { low };
                matches!(self.slot(other).node, Node::Leaf(_)).then_some((other, quiet))
            }
            _ => None,
        })
    }

    /// The samples a cut's halves have stayed quiet for together.
    pub(crate) fn quiet_mut(&mut self, cut: u32) -> &mut Quiet {
        match &mut self.slot_mut(cut).node {
            Node::Cut { quiet, .. } => quiet,
            Node::Leaf(_) => panic!("zone node {cut} is a zone, not a cut"),
        }
    }

    /// Folds cut `cut` (both halves zones) back into one leaf, the low half's zone. Returns
    /// the region slots of the zone kept and of the zone that ends.
    pub(crate) fn merge(&mut self, cut: u32) -> (u32, u32) {
        let Node::Cut { low, high, .. } = self.slot(cut).node else {
            panic!("zone node {cut} is not a cut")
        };
        let (kept, ended) = (self.region(low), self.region(high));
        for n in [low, high] {
            self.nodes[n as usize] = None;
            self.free.push(n);
        }
        self.leaf_of.remove(&ended);
        self.leaf_of.insert(kept, cut);
        self.slot_mut(cut).node = Node::Leaf(kept);
        (kept, ended)
    }

    /// The regions were stored again (`crate::regions::Regions::renumber`): each leaf names
    /// its zone's new slot.
    pub(crate) fn renumber(&mut self, new_of_old: &[u32]) {
        for node in self.nodes.iter_mut().flatten() {
            if let Node::Leaf(region) = &mut node.node {
                *region = new_of_old[*region as usize];
            }
        }
        self.leaf_of = self.leaf_of.iter().map(|(&r, &l)| (new_of_old[r as usize], l)).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cube(x0: f64, x1: f64) -> Aabb {
        Aabb { min: Vec3::new(x0, -100.0, -100.0), max: Vec3::new(x1, 100.0, 100.0) }
    }

    #[test]
    fn splits_cut_a_leaf_in_two_and_merges_undo_the_latest_first() {
        // Region slots 10, 11, 12 (the tree only names them).
        let mut l = ZoneLayout::default();
        let w = WorldId(0);
        let root = l.add_root(10, w, cube(-100.0, 100.0));
        assert_eq!(l.locate(w, Vec3::new(50.0, 0.0, 0.0)), Some(root));
        let s = l.split(root, 0, 0.0, 11);
        assert_eq!((l.region(s.kept), l.region(s.new)), (10, 11));
        assert_eq!(l.bounds(s.new), cube(0.0, 100.0));
        assert_eq!(l.locate(w, Vec3::new(50.0, 0.0, 0.0)), Some(s.new));
        assert_eq!(l.locate(w, Vec3::new(-50.0, 0.0, 0.0)), Some(s.kept));
        let s2 = l.split(s.new, 0, 50.0, 12);
        assert_eq!(l.leaves().len(), 3);
        // Only the latest cut has two zones under it.
        let m = l.mergeable();
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].1, m[0].2), (s2.kept, s2.new));
        let cut = m[0].0;
        assert_eq!(l.merge(cut), (11, 12));
        assert_eq!((l.leaf(11), l.leaf(12)), (Some(cut), None));
        assert_eq!(l.bounds(cut), cube(0.0, 100.0));
        let cut = l.mergeable()[0].0;
        assert_eq!(l.merge(cut), (10, 11));
        assert_eq!(l.leaves(), vec![cut]);
        assert_eq!(l.bounds(cut), cube(-100.0, 100.0));
        assert_eq!(l.locate(w, Vec3::new(99.0, 0.0, 0.0)), Some(cut));
        l.renumber(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]);
        assert_eq!((l.region(cut), l.leaf(3)), (3, Some(cut)));
    }

    #[test]
    fn a_position_outside_every_configured_box_belongs_to_the_nearest() {
        let mut l = ZoneLayout::default();
        let w = WorldId(3);
        let a = l.add_root(0, w, cube(-100.0, 0.0));
        let b = l.add_root(1, w, cube(500.0, 600.0));
        assert_eq!(l.locate(w, Vec3::new(100.0, 0.0, 0.0)), Some(a));
        assert_eq!(l.locate(w, Vec3::new(400.0, 0.0, 0.0)), Some(b));
        assert_eq!(l.locate(WorldId(4), Vec3::ZERO), None);
    }

    #[test]
    fn bad_boxes_are_refused_each_by_its_index() {
        let w = WorldId(0);
        let specs = [
            ZoneSpec { world: w, bounds: cube(0.0, 100.0) },
            ZoneSpec { world: w, bounds: cube(50.0, 150.0) },
            ZoneSpec { world: w, bounds: cube(10.0, 10.0) },
            ZoneSpec { world: w, bounds: cube(1000.0, 2e9) },
            ZoneSpec { world: WorldId(1), bounds: cube(50.0, 150.0) },
            ZoneSpec { world: w, bounds: cube(150.0, 200.0) },
        ];
        let errors = validate_specs(&specs, 1e6).unwrap_err();
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(text[0].starts_with("zones[1]") && text[0].contains("overlaps zones[0]"));
        assert!(text[1].starts_with("zones[2]") && text[1].contains("empty"));
        assert!(text[2].starts_with("zones[3]") && text[2].contains("leaves the world"));
        // Touching faces and other worlds are fine.
        assert!(validate_specs(&[specs[0], specs[4], specs[5]], 1e6).is_ok());
    }
}
