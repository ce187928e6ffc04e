//! Units of placement: clusters at the merge distance, joined while their claimed boxes overlap.

use super::*;

impl Mesh {
    /// Per cluster: tally, member box and the largest speed-scaled border margin.
    pub(super) fn describe(&self, clusters: &Groups, sc: &mut Scratch) {
        let nc = clusters.len();
        while sc.tallies.len() < nc {
            sc.tallies.push(Tally::new(self.sites.len()));
        }
        sc.cluster_box.clear();
        for c in 0..nc {
            let t = &mut sc.tallies[c];
            t.clear();
            let members = clusters.members(c);
            let first = self.players[sc.item_player[members[0] as usize] as usize].position;
            let mut bx = Aabb::point(first);
            let mut margin: f64 = 0.0;
            for &it in members {
                let p = &self.players[sc.item_player[it as usize] as usize];
                t.add(p, self.th.weights.of(p.role));
                bx = bx.include(p.position);
                margin = margin.max(self.th.scaled(self.th.border_margin_m, p.speed()));
            }
            sc.cluster_box.push((bx, margin));
        }
    }
}

/// The box a cluster claims: its members' box grown by their largest speed-scaled margin.
pub(super) fn claimed_box((bx, margin): (Aabb, f64)) -> Aabb {
    bx.expand(margin)
}

/// Overlapping pairs among `boxes` (same world), by sweeping along x.
pub(super) fn overlapping(boxes: &mut [(WorldId, Aabb, u32)]) -> Vec<(u32, u32)> {
    boxes.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.min.x.total_cmp(&b.1.min.x)));
    let mut pairs = Vec::new();
    for i in 0..boxes.len() {
        for j in i + 1..boxes.len() {
            if boxes[j].0 != boxes[i].0 || boxes[j].1.min.x >= boxes[i].1.max.x {
                break;
            }
            if boxes[i].1.overlaps(&boxes[j].1) {
                pairs.push((boxes[i].2, boxes[j].2));
            }
        }
    }
    pairs
}

/// Joins clusters whose claimed boxes overlap; `None` when no two overlap.
pub(super) fn unite_overlapping(
    clusters: &Groups,
    items: &[Item],
    boxes: &[(Aabb, f64)],
) -> Option<Groups> {
    let mut claims: Vec<(WorldId, Aabb, u32)> = (0..clusters.len())
        .map(|c| {
            (
                items[clusters.members(c)[0] as usize].world,
                claimed_box(boxes[c]),
                c as u32,
            )
        })
        .collect();
    let pairs = overlapping(&mut claims);
    if pairs.is_empty() {
        return None;
    }
    let mut root: Vec<u32> = (0..clusters.len() as u32).collect();
    fn find(root: &mut [u32], mut x: u32) -> u32 {
        while root[x as usize] != x {
            root[x as usize] = root[root[x as usize] as usize];
            x = root[x as usize];
        }
        x
    }
    for (a, b) in pairs {
        let (ra, rb) = (find(&mut root, a), find(&mut root, b));
        root[ra.max(rb) as usize] = ra.min(rb);
    }
    let labels: Vec<u32> = (0..items.len())
        .map(|it| find(&mut root, clusters.group_of(it) as u32))
        .collect();
    Some(Groups::from_labels(&labels, clusters.len()))
}
