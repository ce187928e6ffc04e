//! Invariants of the brain, as property tests over seeded populations. A failure prints the
//! minimal failing input, seed included: rerun with it to reproduce.

#![allow(clippy::unwrap_used)] // Tests fail loudly on purpose.

mod common;

use std::collections::BTreeMap;

use common::*;
use horizon_mesh::scoring::best_site;
use horizon_mesh::{
    Command, Mesh, MoveReason, Player, PlayerId, PlayerJoin, PlayerUpdate, Role, SiteId, SiteScore,
    Span, Tally, Thresholds, Time, WorldId,
};
use proptest::prelude::*;

const TICK_S: u64 = 5;

/// What a run produced: every command with its time, and where each player ended.
#[derive(Debug, PartialEq)]
struct Outcome {
    commands: Vec<(Time, Command)>,
    sites: BTreeMap<PlayerId, Option<SiteId>>,
}

/// Runs `joins` (even ids at once, odd ids a minute later) for `ticks` ticks with motion, calling `hook`
/// before each tick, and `check` after it.
fn simulate(
    joins: &[PlayerJoin],
    ticks: u64,
    motion: bool,
    mut hook: impl FnMut(u64, &mut Mesh),
    mut check: impl FnMut(u64, &Mesh, &[(Time, Command)]),
) -> Outcome {
    let mut m = mesh(Thresholds::default());
    let mut commands = Vec::new();
    for tick in 0..ticks {
        let now = Time::from_secs(tick * TICK_S);
        if tick == 0 || tick == 12 {
            // Even ids join first, odd ids a minute later (by id, so filtering keeps timing).
            // Placed at connection when alone (a bubble at once), else at the tick.
            let arriving: Vec<_> =
                joins.iter().filter(|j| (j.id.0 % 2 == 0) == (tick == 0)).collect();
            for j in &arriving {
                m.handle_join((*j).clone()).unwrap();
            }
            for j in &arriving {
                m.place_arrival(j.id, now);
            }
        }
        let moved: Vec<(PlayerId, horizon_mesh::Vec3)> = m
            .players()
            .iter()
            .filter(|p| motion && p.velocity.norm_sq() > 0.0)
            .map(|p| (p.id, p.position + p.velocity * TICK_S as f64))
            .collect();
        for (id, pos) in moved {
            m.handle_update(id, &PlayerUpdate { position: Some(pos), ..Default::default() })
                .unwrap();
        }
        hook(tick, &mut m);
        renew_all(&mut m, now, &[]);
        m.handle_timeout(now);
        let from = commands.len();
        while let Some(c) = m.poll_command() {
            commands.push((now, c));
        }
        check(tick, &m, &commands[from..]);
    }
    let sites = m.players().iter().map(|p| (p.id, m.site_of(p.id))).collect();
    Outcome { commands, sites }
}

/// `n` players scattered over one world about 3 km apart, each with their own heading: most
/// walk (1–8 m/s), one in five flies (30–300 m/s).
fn crowd(seed: u64, n: usize) -> Vec<PlayerJoin> {
    use horizon_mesh::rng::Rng;
    let mut rng = Rng::new(seed);
    // About one player per 3 km × 3 km: just beyond the merge distance of walkers.
    let half = 1_500.0 * (n as f64).sqrt();
    (1..=n as u64)
        .map(|id| {
            let speed = if rng.unit() < 0.2 { rng.range(30.0, 300.0) } else { rng.range(1.0, 8.0) };
            let heading = rng.range(0.0, std::f64::consts::TAU);
            let mut j = join(
                id,
                rng.below(3) as usize,
                rng.range(2.0, 60.0),
                Role::Player,
                horizon_mesh::Vec3::new(rng.range(-half, half), rng.range(-half, half), 0.0),
            );
            j.velocity = horizon_mesh::Vec3::new(heading.cos(), heading.sin(), 0.0) * speed;
            j
        })
        .collect()
}

fn no_hook(_: u64, _: &mut Mesh) {}
fn no_check(_: u64, _: &Mesh, _: &[(Time, Command)]) {}

/// Structural invariants after every tick.
fn check_structure(tick: u64, m: &Mesh, _: &[(Time, Command)]) {
    let bubbles: Vec<_> = m.bubbles().collect();
    for (i, a) in bubbles.iter().enumerate() {
        for b in &bubbles[i + 1..] {
            assert!(
                a.world != b.world || !a.bounds.overlaps(&b.bounds),
                "tick {tick}: {} and {} overlap",
                a.id,
                b.id
            );
        }
        assert!(m.leases().is_current(a.id, a.epoch), "tick {tick}: {} lost its epoch", a.id);
    }
    for p in m.players() {
        if let Some(b) = m.bubble_of(p.id) {
            assert!(b.bounds.contains(p.position), "tick {tick}: {:?} outside {}", p.id, b.id);
            assert_eq!(b.world, p.world);
        } else if p.role.is_counted() {
            // Always simulated: a counted player no bubble holds is in a zone of their world.
            let z = m.zone_of(p.id);
            assert!(z.is_some_and(|z| z.world == p.world), "tick {tick}: {:?} nowhere", p.id);
        }
    }
    // Zones of a world never overlap, and their players add up to those in no bubble.
    let zones: Vec<_> = m.zones().collect();
    for (i, a) in zones.iter().enumerate() {
        for b in &zones[i + 1..] {
            assert!(a.world != b.world || !a.bounds.overlaps(&b.bounds), "tick {tick}");
        }
    }
    let in_zones: u32 = zones.iter().map(|z| z.players).sum();
    assert_eq!(in_zones as usize, m.unsimulated().count(), "tick {tick}");
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 12, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_same_inputs_and_seed_give_the_same_output(seed in any::<u64>(), n in 1usize..300) {
        let joins = population(seed, n);
        let a = simulate(&joins, 40, true, no_hook, no_check);
        let b = simulate(&joins, 40, true, no_hook, no_check);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn structure_holds_after_every_tick(seed in any::<u64>(), n in 1usize..300) {
        simulate(&population(seed, n), 60, true, no_hook, check_structure);
    }

    /// A crowd about 3 km apart where each moves their own way (walkers and ships) and turns
    /// back now and then: borders move, go stale and are reset in chains, never overlapping.
    #[test]
    fn structure_holds_in_a_crowd_whose_members_turn_back(seed in any::<u64>(), n in 20usize..200) {
        let joins = crowd(seed, n);
        let turn_back = |tick: u64, m: &mut Mesh| {
            let turning: Vec<(PlayerId, horizon_mesh::Vec3)> = m
                .players()
                .iter()
                .filter(|p| (p.id.0 + tick).is_multiple_of(5))
                .map(|p| (p.id, p.velocity * -1.0))
                .collect();
            for (id, velocity) in turning {
                let update = PlayerUpdate { velocity: Some(velocity), ..Default::default() };
                m.handle_update(id, &update).unwrap();
            }
        };
        simulate(&joins, 60, true, turn_back, check_structure);
    }

    /// Inflating one's ping (any delay, any player, any time) never changes a decision: the
    /// session minimum cannot be raised, and a delay adds the same to every site anyway.
    #[test]
    fn adding_delay_to_access_rtt_never_changes_placement(
        seed in any::<u64>(),
        n in 1usize..200,
        delays in proptest::collection::vec((0usize..200, 0.0f64..500.0, 1u64..40), 1..30),
    ) {
        let joins = population(seed, n);
        let base: BTreeMap<PlayerId, f64> = joins.iter().map(|j| (j.id, j.access_rtt_ms)).collect();
        let plain = simulate(&joins, 40, true, no_hook, no_check);
        let cheated = simulate(&joins, 40, true, |tick, m| {
            for &(who, delay, at) in &delays {
                let id = joins[who % joins.len()].id;
                if at == tick && m.player(id).is_some() {
                    let update = PlayerUpdate { access_rtt_ms: Some(base[&id] + delay), ..Default::default() };
                    m.handle_update(id, &update).unwrap();
                }
            }
        }, no_check);
        prop_assert_eq!(plain, cheated);
    }

    /// NPCs never change an outcome: the same population with and without them decides the same.
    #[test]
    fn npcs_never_change_an_outcome(seed in any::<u64>(), n in 1usize..300) {
        let joins = population(seed, n);
        let without: Vec<PlayerJoin> = joins.iter().filter(|j| j.role != Role::Npc).cloned().collect();
        let a = simulate(&joins, 40, true, no_hook, no_check);
        let b = simulate(&without, 40, true, no_hook, no_check);
        prop_assert_eq!(a.commands, b.commands);
    }

    /// No bubble changes site twice within the hold time, unless by failover; with link losses.
    #[test]
    fn no_bubble_moves_twice_within_hold_unless_by_failover(
        seed in any::<u64>(),
        n in 1usize..300,
        outages in proptest::collection::vec((1usize..3, 0u64..60, 1u64..20), 0..3),
    ) {
        let joins = population(seed, n);
        let hold = Span::from_ms(Thresholds::default().hold_ms);
        let mut last: BTreeMap<horizon_mesh::BubbleId, Time> = BTreeMap::new();
        let mut m = mesh(Thresholds::default());
        for j in &joins {
            m.handle_join(j.clone()).unwrap();
        }
        for tick in 0..120u64 {
            let now = Time::from_secs(tick * TICK_S);
            // RTT churn and motion make best sites change all the time.
            let updates: Vec<(PlayerId, PlayerUpdate)> = m.players().iter().map(|p| (p.id, PlayerUpdate {
                position: Some(p.position + p.velocity * TICK_S as f64),
                access_rtt_ms: Some(p.access_rtt_min_ms * 0.97),
                ..Default::default()
            })).collect();
            for (id, u) in updates {
                m.handle_update(id, &u).unwrap();
            }
            let silent: Vec<SiteId> = outages.iter()
                .filter(|(_, from, len)| (*from..from + len).contains(&tick))
                .map(|(s, _, _)| site(*s))
                .collect();
            for s in [MTL, HKG] {
                m.handle_site_link(site(s), !silent.contains(&site(s)));
            }
            renew_all(&mut m, now, &silent);
            m.handle_timeout(now);
            while let Some(c) = m.poll_command() {
                if let Command::Move { bubble, reason, .. } = c {
                    if reason != MoveReason::Failover
                        && let Some(&t) = last.get(&bubble)
                    {
                        prop_assert!(now.since(t) >= hold, "seed {seed}: {bubble} moved at {t} and {now}");
                    }
                    last.insert(bubble, now);
                }
            }
        }
    }

    /// In a world where nothing changes, placement converges: no bubble moves twice (a group
    /// carved out of the core site's zones, or a bubble dissolving into them, is a move), no
    /// bubble is created, merged or deleted otherwise once everyone is in.
    #[test]
    fn a_static_world_never_flaps(seed in any::<u64>(), n in 1usize..300) {
        // Velocities stay (they scale margins and distances) but nobody actually moves.
        let joins = population(seed, n);
        let out = simulate(&joins, 200, false, no_hook, no_check);
        let mut count: BTreeMap<horizon_mesh::BubbleId, u32> = BTreeMap::new();
        for (_, c) in &out.commands {
            if let Command::Move { bubble, .. }
            | Command::Create { bubble, reason: horizon_mesh::CreateReason::Carve, .. }
            | Command::Delete { bubble, reason: horizon_mesh::DeleteReason::Dissolve, .. } = c
            {
                *count.entry(*bubble).or_default() += 1;
            }
        }
        prop_assert!(count.values().all(|&c| c <= 1), "{count:?}");
        // Nor do bubbles churn: once everyone has joined (tick 12), nothing is created or merged.
        let settled = Time::from_secs(13 * TICK_S);
        let churn: Vec<_> = out.commands.iter()
            .filter(|(t, c)| *t >= settled && matches!(c, Command::Merge { .. }
                | Command::Create { reason: horizon_mesh::CreateReason::Join | horizon_mesh::CreateReason::ServerReady
                    | horizon_mesh::CreateReason::Split | horizon_mesh::CreateReason::Travel
                    | horizon_mesh::CreateReason::Delegation, .. }
                | Command::Delete { reason: horizon_mesh::DeleteReason::Empty | horizon_mesh::DeleteReason::Stage, .. }))
            .collect();
        prop_assert!(churn.is_empty(), "{churn:?}");
    }
}

/// A random group's tally, for the pure scoring properties.
fn group() -> impl Strategy<Value = Vec<Player>> {
    proptest::collection::vec((0usize..3, 0.0f64..150.0, 0usize..4), 1..12).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (home, rtt, role))| Player {
                id: PlayerId(i as u64),
                gateway: site(home),
                home: site(home),
                home_measured: false,
                access_rtt_min_ms: rtt,
                role: [Role::Pilot, Role::Player, Role::Afk, Role::Npc][role],
                world: WorldId(0),
                position: at(0.0),
                velocity: at(0.0),
            })
            .collect()
    })
}

fn tally(players: &[Player]) -> Tally {
    let w = horizon_mesh::Weights::default();
    let mut t = Tally::new(3);
    for p in players {
        t.add(p, w.of(p.role));
    }
    t
}

proptest! {
    /// The cap is respected whenever some site satisfies it.
    #[test]
    fn the_cap_is_respected_whenever_some_site_satisfies_it(players in group(), current in 0usize..3) {
        let s = sites();
        let t = tally(&players);
        let best = best_site(&t, &s, 180.0, Some(site(current)), |_| true);
        let feasible = s.ids().any(|x| t.worst_ms(&s, x) <= 180.0);
        if feasible {
            prop_assert!(best.worst_ms <= 180.0 + 1e-6);
        }
    }

    /// A delay on one player's access RTT adds the same amount to every site's cost, so the
    /// cheapest site stays the cheapest. (Exact cost ties fall to the worst-latency tie-break,
    /// which a delay could sway: that is why decisions use the session minimum, which no delay can
    /// raise — `adding_delay_to_access_rtt_never_changes_placement` checks the whole mesh.)
    #[test]
    fn a_delay_shifts_every_cost_equally(players in group(), who in 0usize..12, delay in 0.0f64..400.0) {
        let s = sites();
        let mut slower = players.clone();
        let k = who % slower.len();
        slower[k].access_rtt_min_ms += delay;
        let (t0, t1) = (tally(&players), tally(&slower));
        let shift = t1.cost(&s, site(PAR)) - t0.cost(&s, site(PAR));
        for x in s.ids() {
            prop_assert!((t1.cost(&s, x) - t0.cost(&s, x) - shift).abs() < 1e-6);
        }
        let costs: Vec<f64> = s.ids().map(|x| t0.cost(&s, x)).collect();
        let min = costs.iter().cloned().fold(f64::INFINITY, f64::min);
        let unique = costs.iter().filter(|&&c| c - min < 1e-6).count() == 1;
        if unique {
            let before = best_site(&t0, &s, f64::INFINITY, None, |_| true).site;
            let after = best_site(&t1, &s, f64::INFINITY, None, |_| true).site;
            prop_assert_eq!(before, after);
        }
    }

    /// A site's score is the tally's cost and worst latency there, exactly.
    #[test]
    fn a_site_score_is_the_cost_and_the_worst_latency(players in group()) {
        let s = sites();
        let t = tally(&players);
        for x in s.ids() {
            let score = SiteScore::of(&t, &s, x);
            prop_assert_eq!((score.cost, score.worst_ms), (t.cost(&s, x), t.worst_ms(&s, x)));
        }
    }

    /// NPCs are never counted: adding any number of them changes no score.
    #[test]
    fn npcs_weigh_nothing(players in group(), npcs in 0usize..50) {
        let mut more = players.clone();
        for i in 0..npcs {
            let mut npc = players[0].clone();
            npc.id = PlayerId(1000 + i as u64);
            npc.role = Role::Npc;
            npc.access_rtt_min_ms = 999.0;
            more.push(npc);
        }
        prop_assert_eq!(tally(&players), tally(&more));
    }
}
