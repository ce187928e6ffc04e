//! Players' places and bubbles' slots (in the table of regions) in unit order.
//!
//! Every pass of the tick reads players unit by unit, at their *places* (their index in the
//! arrays the tick reads: grouping items, scoring figures, bubble, flags), and each unit's
//! bubble at its *slot*. When a unit's members sit next to each other, and units' bubbles follow
//! each other, those reads stream; when they are scattered (players join in any order, groups
//! form and re-form as they travel, bubbles are created into freed slots), each one is a cache
//! miss, which at a million players is most of the tick. The tick counts how often a unit's
//! next member is not at the next place, and a unit's bubble not at the slot after the previous
//! unit's; when either happens more than once in [`SCATTERED`], it gives every player a new
//! place and every bubble a new slot, in unit order, once, at its end. Player records (and
//! [`Mesh::players`]) keep their order and bubbles their ids: only places and slots move.
//!
//! Renumbering keeps the units' order and each unit's members' order, so a tick that follows
//! with nothing changed forms and visits the same units in the same order and decides exactly
//! the same. Players who join or leave afterwards take and free places at the end, as always,
//! and bubbles are scored in slot order, so later ticks may list commands in another order,
//! give new bubbles other ids, or (when a site runs out of servers) serve another bubble first
//! than a run that never renumbered; who is simulated with whom, and where, is otherwise the
//! same (tested below).

use super::*;

/// Renumber when more than one counted player in this many is not at the place after the
/// member of its cluster before it, or more than one unit in this many does not hold the slot
/// after the previous unit's.
const SCATTERED: usize = 8;

/// Below this many players, everything the tick reads fits in the caches: never renumber.
pub(super) const RENUMBER_MIN_PLAYERS: usize = 1 << 15;

impl Mesh {
    /// Whether players or bubbles are scattered enough to be given new places and slots: more
    /// than one counted player in [`SCATTERED`] is not at the place after the member of its
    /// cluster before it, or more than one unit in [`SCATTERED`] does not hold the slot after
    /// the previous unit's.
    pub(super) fn scattered(&self, sc: &Scratch, counted: usize) -> bool {
        if self.items.len() < self.renumber_min_players {
            return false;
        }
        if sc.breaks * SCATTERED > counted {
            return true;
        }
        let held = || sc.cluster_bubble.iter().filter(|&&s| s != NONE);
        let slot_breaks = held().zip(held().skip(1)).filter(|&(&a, &b)| b != a + 1).count();
        slot_breaks * SCATTERED > sc.cluster_bubble.len()
    }

    /// New places: the members of this tick's units unit after unit, then the players in no
    /// unit (NPCs) in their order; and new slots: the units' bubbles in unit order, with no
    /// free slot left between them. Player records, their indices and ids, and bubble ids
    /// stay. Between ticks only: nothing may have changed since the units were formed (no place
    /// listed as changed, none fresh, no slot retired).
    pub(super) fn renumber(&mut self, sc: &mut Scratch) {
        debug_assert!(self.changed.is_empty() && self.fresh_count == 0, "between ticks only");
        debug_assert!(!self.regions.has_retired(), "between ticks only");
        let (units, n) = (&sc.units, self.items.len());
        let mut old_of_new: Vec<u32> = Vec::with_capacity(n);
        for u in 0..units.len() {
            old_of_new.extend_from_slice(units.members(u));
        }
        // Units hold every player but NPCs.
        old_of_new.extend((0..n as u32).filter(|&p| self.npc[p as usize]));
        debug_assert_eq!(old_of_new.len(), n, "every place once");
        permute(&mut self.items, &old_of_new);
        permute(&mut self.members, &old_of_new);
        permute(&mut self.npc, &old_of_new);
        permute(&mut self.player_bubble, &old_of_new);
        permute(&mut self.player_at, &old_of_new);
        // `fresh` and `changed_flag` are all false between ticks: nothing to move.
        for (place, &i) in self.player_at.iter().enumerate() {
            self.place_of[i as usize] = place as u32;
        }
        sc.grouper.renumber(&old_of_new);

        // The units' bubbles first, in unit order; then every other region (the zones, a
        // bubble kept while empty) in slot order.
        let held = sc.cluster_bubble.iter().copied().filter(|&s| s != NONE);
        let slot_of_old = self.regions.renumber(held);
        self.zones.renumber(&slot_of_old);
        for slot in self.player_bubble.iter_mut().filter(|s| **s != NONE) {
            *slot = slot_of_old[*slot as usize];
        }
        // What the next tick reads of this one, by slot: its guess at the order of claims.
        sc.slots_order.retain_mut(|slot| {
            *slot = slot_of_old.get(*slot as usize).copied().unwrap_or(NONE);
            *slot != NONE
        });
    }
}

/// `v[new] = v[old_of_new[new]]` for every index.
fn permute<T: Copy>(v: &mut Vec<T>, old_of_new: &[u32]) {
    *v = old_of_new.iter().map(|&old| v[old as usize]).collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Thresholds;
    use crate::ids::SiteName;
    use crate::player::Role;
    use crate::rng::Rng;

    fn mesh(renumber_from: usize) -> Mesh {
        let name = |s: &str| SiteName::new(s).expect("valid site name");
        let sites = Sites::new(
            vec![name("PAR"), name("MTL"), name("HKG")],
            &name("PAR"),
            &[
                (name("PAR"), name("MTL"), 85.0),
                (name("PAR"), name("HKG"), 185.0),
                (name("MTL"), name("HKG"), 225.0),
            ],
        )
        .expect("valid sites");
        let config = MeshConfig {
            sites,
            thresholds: Thresholds::default(),
            generation: Generation(1),
            placement: Placement::Smdg,
            zones: Vec::new(),
        };
        let mut mesh = Mesh::new(config, Time::ZERO).expect("valid config");
        mesh.renumber_min_players = renumber_from;
        mesh
    }

    /// Groups of 1–12 players around random centres, listed in a shuffled order (players do not
    /// join group by group), a few of them NPCs, a tenth moving.
    fn joins(seed: u64, n: usize) -> Vec<PlayerJoin> {
        let mut rng = Rng::new(seed);
        let homes: Vec<SiteId> = mesh(0).sites().ids().collect();
        let mut out: Vec<PlayerJoin> = Vec::with_capacity(n);
        while out.len() < n {
            let centre = Vec3::new(rng.range(-2e4, 2e4), rng.range(-2e4, 2e4), 0.0);
            let home = homes[rng.below(3) as usize];
            for _ in 0..(1 + rng.below(12)).min((n - out.len()) as u64) {
                let role = match rng.below(10) {
                    0 => Role::Npc,
                    1 => Role::Afk,
                    2 | 3 => Role::Pilot,
                    _ => Role::Player,
                };
                let velocity = match rng.below(10) {
                    0 => Vec3::new(rng.range(-8.0, 8.0), rng.range(-8.0, 8.0), 0.0),
                    _ => Vec3::ZERO,
                };
                out.push(PlayerJoin {
                    id: PlayerId(out.len() as u64 + 1),
                    gateway: if rng.below(5) == 0 { homes[rng.below(3) as usize] } else { home },
                    access_rtt_ms: rng.range(3.0, 60.0),
                    role,
                    world: WorldId(rng.below(2) as u32),
                    position: centre
                        + Vec3::new(rng.range(-60.0, 60.0), rng.range(-60.0, 60.0), 0.0),
                    velocity,
                });
            }
        }
        for i in (1..out.len()).rev() {
            out.swap(i, rng.below(i as u64 + 1) as usize);
        }
        out
    }

    fn drain(mesh: &mut Mesh) -> Vec<Command> {
        std::iter::from_fn(|| mesh.poll_command()).collect()
    }

    /// Every place holds its player: the two maps are inverse, and what the tick reads at a
    /// place is that player's. Every bubble id names the slot holding that bubble.
    fn assert_places_hold_their_players(mesh: &Mesh) {
        for (slot, region) in mesh.regions.iter() {
            assert_eq!(mesh.regions.slot(region.id()), Some(slot));
        }
        for leaf in mesh.zones.leaves() {
            assert!(mesh.regions.zone(mesh.zones.region(leaf)).is_some(), "a leaf names a zone");
        }
        assert_eq!(mesh.npcs, mesh.npc.iter().filter(|&&npc| npc).count(), "NPCs counted");
        assert_eq!(mesh.place_of.len(), mesh.players.len());
        assert_eq!(mesh.player_at.len(), mesh.players.len());
        for (i, p) in mesh.players.iter().enumerate() {
            let place = mesh.place_of[i] as usize;
            assert_eq!(mesh.player_at[place] as usize, i, "player {i}");
            assert_eq!(mesh.player_index[&p.id] as usize, i, "player {i}");
            let (item, member) = mesh.describe_player(p);
            assert_eq!(mesh.items[place], item, "player {i}");
            assert_eq!(mesh.members[place].id, member.id, "player {i}");
            assert_eq!(mesh.npc[place], !p.role.is_counted(), "player {i}");
        }
    }

    /// Players joined in a shuffled order are stored again in unit order at the end of the
    /// first tick; the next tick (nothing changed in between) decides exactly what it decides
    /// without renumbering, and finds the units' members next to each other.
    #[test]
    fn renumbering_changes_no_decision_of_the_next_tick() {
        for seed in 0..4 {
            let (mut plain, mut stored) = (mesh(usize::MAX), mesh(0));
            for j in joins(seed, 1500) {
                plain.handle_join(j.clone()).expect("new player");
                stored.handle_join(j).expect("new player");
            }
            let bubble_of = |m: &Mesh| -> Vec<Option<BubbleId>> {
                m.players.iter().map(|p| m.bubble_of(p.id).map(|b| b.id)).collect()
            };
            assert!(!plain.tick(Time::ZERO).renumbered, "seed {seed}");
            assert!(stored.tick(Time::ZERO).renumbered, "seed {seed}");
            assert_eq!(drain(&mut plain), drain(&mut stored), "seed {seed}: tick 0");
            let identity = (0..stored.players.len() as u32).collect::<Vec<_>>();
            assert_eq!(plain.place_of, identity, "seed {seed}: never renumbered");
            assert_ne!(stored.place_of, identity, "seed {seed}: renumbered");
            assert_places_hold_their_players(&stored);
            assert_eq!(bubble_of(&plain), bubble_of(&stored), "seed {seed}");

            let (a, b) = (plain.tick(Time::from_secs(5)), stored.tick(Time::from_secs(5)));
            assert_eq!(a, b, "seed {seed}: tick 5");
            assert_eq!(drain(&mut plain), drain(&mut stored), "seed {seed}: tick 5");
            assert_eq!(bubble_of(&plain), bubble_of(&stored), "seed {seed}");
            assert!(plain.scratch.breaks > 200, "seed {seed}: {}", plain.scratch.breaks);
            assert_eq!(stored.scratch.breaks, 0, "seed {seed}");
        }
    }

    /// Who is simulated with whom, and where: per bubble, its players and site, sorted.
    fn placement(m: &Mesh) -> Vec<(Vec<PlayerId>, SiteId)> {
        let mut by_bubble: FxHashMap<BubbleId, (Vec<PlayerId>, SiteId)> = FxHashMap::default();
        for p in &m.players {
            if let Some(b) = m.bubble_of(p.id) {
                by_bubble.entry(b.id).or_insert_with(|| (Vec::new(), b.site)).0.push(p.id);
            }
        }
        let mut v: Vec<_> = by_bubble.into_values().collect();
        for (players, _) in &mut v {
            players.sort_unstable();
        }
        v.sort_unstable();
        v
    }

    /// Over ticks of moves, arrivals, departures and role changes, renumbering whenever the
    /// players are scattered places the same players together on the same sites as never
    /// renumbering (bubble ids aside), and every place keeps holding its player.
    #[test]
    fn renumbering_as_players_come_go_and_move_places_everyone_alike() {
        for seed in 0..6 {
            let (mut plain, mut stored) = (mesh(usize::MAX), mesh(0));
            let mut rng = Rng::new(100 + seed);
            let mut waiting = joins(seed, 1800);
            let mut renumbered = 0;
            for tick in 0..30u64 {
                let mut inputs: Vec<(PlayerId, Option<PlayerUpdate>)> = Vec::new();
                for _ in 0..60 {
                    let n = plain.players.len();
                    if n == 0 {
                        break;
                    }
                    let p = &plain.players[rng.below(n as u64) as usize];
                    let update = match rng.below(6) {
                        0 => None,
                        1 => Some(PlayerUpdate {
                            role: Some([Role::Npc, Role::Afk, Role::Pilot][rng.below(3) as usize]),
                            ..Default::default()
                        }),
                        _ => Some(PlayerUpdate {
                            position: Some(
                                p.position + Vec3::new(rng.range(-90.0, 90.0), 0.0, 0.0),
                            ),
                            ..Default::default()
                        }),
                    };
                    inputs.push((p.id, update));
                }
                for m in [&mut plain, &mut stored] {
                    for (id, update) in &inputs {
                        // A player picked twice may have left already.
                        let _ = match update {
                            Some(u) => m.handle_update(*id, u),
                            None => m.handle_leave(*id),
                        };
                    }
                }
                for j in waiting.drain(..waiting.len().min(200)) {
                    plain.handle_join(j.clone()).expect("new player");
                    stored.handle_join(j).expect("new player");
                }
                let now = Time::from_secs(5 * tick);
                plain.tick(now);
                let stats = stored.tick(now);
                if stats.renumbered {
                    renumbered += 1;
                    // Slots too: in unit order, none free.
                    assert_eq!(
                        stored.regions.slots(),
                        stored.regions.len(),
                        "seed {seed}, tick {tick}"
                    );
                }
                drain(&mut plain);
                drain(&mut stored);
                assert_places_hold_their_players(&stored);
                assert_eq!(placement(&plain), placement(&stored), "seed {seed}, tick {tick}");
            }
            assert!(renumbered >= 3, "seed {seed}: renumbered {renumbered} times");
        }
    }
}
