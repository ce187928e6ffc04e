use super::*;

fn item(x: f64, r: f64) -> Item {
    Item { world: WorldId(0), pos: Vec3::new(x, 0.0, 0.0), radius: r }
}

impl Grouper {
    /// A fresh grouping of `items` at base 300 m, leaving out the skipped ones.
    fn group_masked(&mut self, items: &[Item], skip: &[bool]) -> Groups {
        let mut out = Groups::default();
        self.group_into(items, skip, 300.0, &mut out);
        out
    }
}

/// Reference: O(n²) components.
fn brute(items: &[Item]) -> Vec<usize> {
    let n = items.len();
    let mut label: Vec<usize> = (0..n).collect();
    loop {
        let mut changed = false;
        for i in 0..n {
            for j in 0..n {
                let (a, b) = (&items[i], &items[j]);
                let r = a.radius.max(b.radius);
                if a.world == b.world && a.pos.dist_sq(b.pos) <= r * r && label[j] > label[i] {
                    label[j] = label[i];
                    changed = true;
                }
            }
        }
        if !changed {
            return label;
        }
    }
}

fn same_partition(groups: &Groups, reference: &[usize]) -> bool {
    let n = reference.len();
    (0..n).all(|i| {
        (0..n).all(|j| (groups.group_of(i) == groups.group_of(j)) == (reference[i] == reference[j]))
    })
}

#[test]
fn chain_links_and_gap_separates() {
    let items = [item(0.0, 300.0), item(250.0, 300.0), item(520.0, 300.0), item(900.0, 300.0)];
    let g = Grouper::new().group(&items, 300.0);
    assert_eq!(g.len(), 2);
    assert_eq!(g.members(0), &[0, 1, 2]);
    assert_eq!(g.members(1), &[3]);
}

#[test]
fn joined_groups_keep_left_out_items_out() {
    let items = [item(0.0, 300.0), item(5_000.0, 300.0), item(10_000.0, 300.0)];
    let mut groups = Groups::default();
    Grouper::new().group_into(&items, &[false, true, false], 300.0, &mut groups);
    assert_eq!(groups.len(), 2);
    let (joined, of) = groups.join(&[0, 0]);
    assert_eq!((joined.len(), joined.members(0), &of[..]), (1, &[0, 2][..], &[0, 0][..]));
    assert_eq!(joined.group_of(1), u32::MAX as usize);
    assert_eq!((joined.group_of(0), joined.group_of(2)), (0, 0));
}

#[test]
fn worlds_never_mix() {
    let mut items = [item(0.0, 300.0), item(0.0, 300.0)];
    items[1].world = WorldId(1);
    assert_eq!(Grouper::new().group(&items, 300.0).len(), 2);
}

#[test]
fn fast_ship_reaches_far() {
    // A ship at 1 km/s with a 30 s lead reaches 30.3 km.
    let items = [item(0.0, 30_300.0), item(25_000.0, 300.0), item(40_000.0, 300.0)];
    let g = Grouper::new().group(&items, 300.0);
    assert_eq!(g.len(), 2);
    assert_eq!(g.members(0), &[0, 1]);
}

/// Sub-cells left empty are forgotten once they outnumber the occupied ones, and a grouper
/// that remembers any history groups as a fresh one does.
#[test]
fn forgets_emptied_sub_cells_and_groups_as_a_fresh_grouper() {
    let mut rng = crate::rng::Rng::new(5);
    let mut grouper = Grouper::new();
    for round in 0..6 {
        // Every round, 3,000 items (nearly all alone in their sub-cell) in sub-cells none
        // used before.
        let shift = round as f64 * 1e7;
        let items: Vec<Item> = (0..3_000)
            .map(|_| item(shift + rng.range(0.0, 2e6), 300.0 + rng.range(0.0, 600.0)))
            .collect();
        let reused = grouper.group(&items, 300.0);
        let fresh = Grouper::new().group(&items, 300.0);
        let labels: Vec<usize> = (0..items.len()).map(|i| fresh.group_of(i)).collect();
        assert!(same_partition(&reused, &labels), "round {round}");
    }
    // 18,000 sub-cells were used; the emptied ones were forgotten on the way.
    assert!(grouper.subs.len() < 9_000, "{} sub-cells remembered", grouper.subs.len());
}

proptest::proptest! {
    #[test]
    fn matches_brute_force(
        pts in proptest::collection::vec(
            (0u32..2, -3000.0f64..3000.0, -3000.0f64..3000.0, -50.0f64..50.0, 0.0f64..4000.0, proptest::bool::weighted(0.1)),
            0..120),
    ) {
        let items: Vec<Item> = pts.iter().map(|&(w, x, y, z, extra, fast)| Item {
            world: WorldId(w),
            pos: Vec3::new(x, y, z),
            radius: 300.0 + if fast { extra } else { 0.0 },
        }).collect();
        let groups = Grouper::new().group(&items, 300.0);
        proptest::prop_assert!(same_partition(&groups, &brute(&items)));
        // Groups in order of their smallest member, members ascending.
        let firsts: Vec<u32> = (0..groups.len()).map(|g| groups.members(g)[0]).collect();
        proptest::prop_assert!(firsts.windows(2).all(|w| w[0] < w[1]));
        for g in 0..groups.len() {
            proptest::prop_assert!(groups.members(g).windows(2).all(|w| w[0] < w[1]));
        }
    }

    /// Dense crowds: many items per cell and per octant.
    #[test]
    fn matches_brute_force_in_crowds(
        pts in proptest::collection::vec((-500.0f64..500.0, -500.0f64..500.0, -5.0f64..5.0), 0..150),
        base in 20.0f64..300.0,
    ) {
        let items: Vec<Item> = pts.iter().map(|&(x, y, z)| Item {
            world: WorldId(0),
            pos: Vec3::new(x, y, z),
            radius: base,
        }).collect();
        let groups = Grouper::new().group(&items, base);
        proptest::prop_assert!(same_partition(&groups, &brute(&items)));
    }

    /// Fast items among many cells of one slab: the cells within reach are found column by
    /// column (the slab is too long to read whole).
    #[test]
    fn matches_brute_force_in_a_long_slab(
        pts in proptest::collection::vec(
            (-300.0f64..300.0, -6_000.0f64..6_000.0, -6_000.0f64..6_000.0, 0.0f64..900.0, proptest::bool::weighted(0.2)),
            150..300),
    ) {
        let items: Vec<Item> = pts.iter().map(|&(x, y, z, extra, fast)| Item {
            world: WorldId(0),
            pos: Vec3::new(x, y, z),
            radius: 300.0 + if fast { extra } else { 0.0 },
        }).collect();
        let groups = Grouper::new().group(&items, 300.0);
        proptest::prop_assert!(same_partition(&groups, &brute(&items)));
    }

    /// One grouper called again and again (its remembered sub-cells are only hints): items
    /// move a little or jump, some leave, some come, and every call matches brute force.
    #[test]
    fn matches_brute_force_call_after_call(
        pts in proptest::collection::vec(
            (0u32..2, -3000.0f64..3000.0, -3000.0f64..3000.0, 0.0f64..2000.0, proptest::bool::weighted(0.1)),
            0..100),
        steps in proptest::collection::vec(
            (proptest::collection::vec((-400.0f64..400.0, -400.0f64..400.0, proptest::bool::weighted(0.1)), 100), 0usize..30, 0usize..30),
            1..5),
    ) {
        let mut items: Vec<Item> = pts.iter().map(|&(w, x, y, extra, fast)| Item {
            world: WorldId(w),
            pos: Vec3::new(x, y, 0.0),
            radius: 300.0 + if fast { extra } else { 0.0 },
        }).collect();
        let mut grouper = Grouper::new();
        for (moves, leave, come) in steps {
            let groups = grouper.group(&items, 300.0);
            proptest::prop_assert!(same_partition(&groups, &brute(&items)));
            for (item, &(dx, dy, jump)) in items.iter_mut().zip(&moves) {
                let k = if jump { 10.0 } else { 1.0 };
                item.pos = item.pos + Vec3::new(dx * k, dy * k, 0.0);
            }
            items.truncate(items.len().saturating_sub(leave));
            for &(dx, dy, _) in moves.iter().take(come) {
                items.insert(0, item(dx * 5.0, 300.0));
                items[0].pos.y = dy * 5.0;
            }
        }
        let groups = grouper.group(&items, 300.0);
        proptest::prop_assert!(same_partition(&groups, &brute(&items)));
    }

    /// Packed keys order as (world, cell x, y, z, sub-cell), unpack to what was packed, and
    /// step to neighbour cells, at any coordinates the grid holds.
    #[test]
    fn packed_keys_order_and_unpack_like_their_fields(
        a in (0u32..3, -(1i64 << 28)..(1i64 << 28), -(1i64 << 28)..(1i64 << 28), -5i64..5, 0u8..64),
        b in (0u32..3, -(1i64 << 28)..(1i64 << 28), -(1i64 << 28)..(1i64 << 28), -5i64..5, 0u8..64),
        d in (-1i32..=1, -1i32..=1, -1i32..=1),
    ) {
        let key = |(w, x, y, z, s): (u32, i64, i64, i64, u8)| Key::pack(w, [x, y, z], s);
        let (ka, kb) = (key(a), key(b));
        proptest::prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        proptest::prop_assert_eq!((ka.world(), ka.cell_xyz()), (a.0, [a.1, a.2, a.3]));
        let moved = [a.1 + i64::from(d.0), a.2 + i64::from(d.1), a.3 + i64::from(d.2)];
        proptest::prop_assert_eq!(ka.offset(d.0, d.1, d.2), Key::pack(a.0, moved, 0));
    }

    /// Searching outwards from any cell finds what a binary search finds.
    #[test]
    fn partition_near_matches_partition_point(
        mut xs in proptest::collection::vec(-50i32..50, 0..60),
        near in 0usize..70,
        target in -60i32..60,
    ) {
        xs.sort_unstable();
        let cells: Vec<Cell> = xs.iter().map(|&x| Cell {
            key: Key::pack(0, [i64::from(x), 0, 0], 0),
            start: 0,
            end: 0,
            reach: 0.0,
        }).collect();
        let target = Key::pack(0, [i64::from(target), 0, 0], 0);
        let below = |c: &Cell| c.key < target;
        proptest::prop_assert_eq!(partition_near(&cells, near, below), cells.partition_point(below));
    }

    /// Items left out are in no group and change nothing for the others.
    #[test]
    fn skipped_items_are_in_no_group(
        pts in proptest::collection::vec((-3000.0f64..3000.0, -3000.0f64..3000.0, proptest::bool::weighted(0.3)), 0..100),
    ) {
        let items: Vec<Item> = pts.iter().map(|&(x, y, _)| Item {
            world: WorldId(0),
            pos: Vec3::new(x, y, 0.0),
            radius: 300.0,
        }).collect();
        let skip: Vec<bool> = pts.iter().map(|p| p.2).collect();
        let mut groups = Groups::default();
        Grouper::new().group_into(&items, &skip, 300.0, &mut groups);
        let kept: Vec<Item> = items.iter().zip(&skip).filter(|p| !*p.1).map(|p| *p.0).collect();
        let reference = brute(&kept);
        let mut k = 0;
        let mut kept_groups = Vec::new();
        for (i, &skipped) in skip.iter().enumerate() {
            if skipped {
                proptest::prop_assert_eq!(groups.group_of(i), u32::MAX as usize);
            } else {
                kept_groups.push(groups.group_of(i));
                k += 1;
            }
        }
        proptest::prop_assert_eq!(k, kept.len());
        for a in 0..k {
            for b in 0..k {
                proptest::prop_assert_eq!(kept_groups[a] == kept_groups[b], reference[a] == reference[b]);
            }
        }
        let total: usize = (0..groups.len()).map(|g| groups.members(g).len()).sum();
        proptest::prop_assert_eq!(total, k);
    }

    /// Regrouping from the changed items alone finds what grouping everything finds, through
    /// moves, jumps, new radii, worlds and skip flags, arrivals and departures (the last
    /// item taking the departed one's place, as the mesh stores players).
    #[test]
    fn regrouping_the_changed_items_matches_grouping_them_all(
        start in proptest::collection::vec((0u32..2, -3000.0f64..3000.0, -3000.0f64..3000.0), 0..60),
        steps in proptest::collection::vec(
            proptest::collection::vec((0u8..6, 0usize..100, -500.0f64..500.0, -500.0f64..500.0), 0..25),
            1..6),
    ) {
        let mut items: Vec<Item> = start.iter().map(|&(w, x, y)| Item {
            world: WorldId(w), pos: Vec3::new(x, y, 0.0), radius: 300.0,
        }).collect();
        let mut skip = vec![false; items.len()];
        let mut grouper = Grouper::new();
        let mut out = Groups::default();
        let mut changed: Vec<u32> = Vec::new();
        for ops in steps {
            grouper.regroup_into(&items, &skip, &changed, 300.0, &mut out);
            let mut fresh_grouper = Grouper::new();
            let fresh = fresh_grouper.group_masked(&items, &skip);
            // The same runs, each with the largest radius of its items.
            let runs = |g: &Grouper| -> Vec<(Key, u32, f64)> {
                g.runs.iter().map(|r| (r.key, r.end - r.start, r.reach)).collect()
            };
            proptest::prop_assert_eq!(runs(&grouper), runs(&fresh_grouper));
            for i in 0..items.len() {
                for j in 0..items.len() {
                    proptest::prop_assert_eq!(
                        out.group_of(i) == out.group_of(j),
                        fresh.group_of(i) == fresh.group_of(j),
                        "items {} and {}", i, j
                    );
                }
            }
            changed.clear();
            for (op, who, dx, dy) in ops {
                let n = items.len();
                let i = who % n.max(1);
                match op {
                    0 if n > 0 => items[i].pos = items[i].pos + Vec3::new(dx, dy, 0.0),
                    1 if n > 0 => items[i].pos = Vec3::new(dx * 10.0, dy * 10.0, 0.0),
                    2 if n > 0 => items[i].radius = 300.0 + dx.abs() * 4.0,
                    3 if n > 0 => skip[i] = !skip[i],
                    4 if n > 0 => {
                        // The last item takes its place.
                        items.swap_remove(i);
                        skip.swap_remove(i);
                    }
                    _ => {
                        let (world, pos) = (WorldId(who as u32 % 2), Vec3::new(dx, dy, 0.0));
                        items.push(Item { world, pos, radius: 300.0 });
                        skip.push(false);
                        changed.push(n as u32);
                        continue;
                    }
                }
                changed.push(i as u32);
            }
        }
    }

    /// Items at the same position are always one group.
    #[test]
    fn identical_positions_are_one_group(
        x in -1e7f64..1e7, y in -1e7f64..1e7, n in 2usize..40, base in 1.0f64..5_000.0,
    ) {
        let items = vec![Item { world: WorldId(3), pos: Vec3::new(x, y, 0.0), radius: base }; n];
        proptest::prop_assert_eq!(Grouper::new().group(&items, base).len(), 1);
    }
}
