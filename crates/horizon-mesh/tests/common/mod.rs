//! Helpers shared by the brain's integration tests.
#![allow(dead_code, unreachable_pub)]

use horizon_mesh::{
    Command, Generation, Mesh, MeshConfig, Placement, PlayerId, PlayerJoin, Role, SiteId, SiteName,
    Sites, Thresholds, Time, Vec3, WorldId,
};

pub const PAR: usize = 0;
pub const MTL: usize = 1;
pub const HKG: usize = 2;

/// PAR (core), MTL, HKG with the default backbone RTTs (design.md §2).
pub fn sites() -> Sites {
    sites_cored_at(PAR)
}

/// The same sites and backbone with the core at `core`. SMD-G keeps no bubble on the core
/// site (its players play in its zones): tests of how bubbles move between PAR and MTL put
/// the core at HKG, where none of their players is.
pub fn sites_cored_at(core: usize) -> Sites {
    let n = |s: &str| SiteName::new(s).unwrap();
    let names = [n("PAR"), n("MTL"), n("HKG")];
    Sites::new(
        names.to_vec(),
        &names[core],
        &[(n("PAR"), n("MTL"), 85.0), (n("PAR"), n("HKG"), 185.0), (n("MTL"), n("HKG"), 225.0)],
    )
    .unwrap()
}

pub fn site(i: usize) -> SiteId {
    sites().ids().nth(i).unwrap()
}

pub fn mesh(th: Thresholds) -> Mesh {
    mesh_placing(th, Placement::Smdg)
}

/// A dynamic mesh whose core is at `core` (see [`sites_cored_at`]).
pub fn mesh_cored_at(th: Thresholds, core: usize) -> Mesh {
    Mesh::new(
        MeshConfig {
            sites: sites_cored_at(core),
            thresholds: th,
            generation: Generation(1),
            placement: Placement::Smdg,
            zones: Vec::new(),
        },
        Time::ZERO,
    )
    .unwrap()
}

pub fn mesh_placing(th: Thresholds, placement: Placement) -> Mesh {
    Mesh::new(
        MeshConfig {
            sites: sites(),
            thresholds: th,
            generation: Generation(1),
            placement,
            zones: Vec::new(),
        },
        Time::ZERO,
    )
    .unwrap()
}

pub fn join(id: u64, gateway: usize, rtt: f64, role: Role, pos: Vec3) -> PlayerJoin {
    PlayerJoin {
        id: PlayerId(id),
        gateway: site(gateway),
        access_rtt_ms: rtt,
        role,
        world: WorldId(0),
        position: pos,
        velocity: Vec3::ZERO,
    }
}

pub fn at(x: f64) -> Vec3 {
    Vec3::new(x, 0.0, 0.0)
}

/// The next command, leaving out zones opening (a world's first player opens its zone; tests of
/// bubbles are not about that): tests of zones read [`Mesh::poll_command`] themselves.
pub fn poll(mesh: &mut Mesh) -> Option<Command> {
    std::iter::from_fn(|| mesh.poll_command()).find(|c| !matches!(c, Command::ZoneCreate { .. }))
}

/// Runs ticks every period from `from_s` to `to_s` inclusive, renewing every lease (all links up),
/// and returns every command emitted with its time, but zones opening (see [`poll`]).
pub fn run(mesh: &mut Mesh, from_s: u64, to_s: u64) -> Vec<(Time, Command)> {
    let period = mesh.thresholds().period_ms / 1000;
    let mut out = Vec::new();
    let mut t = from_s;
    while t <= to_s {
        let now = Time::from_secs(t);
        renew_all(mesh, now, &[]);
        mesh.handle_timeout(now);
        while let Some(c) = poll(mesh) {
            out.push((now, c));
        }
        t += period.max(1);
    }
    out
}

/// Every second from `from_s` to `to_s` inclusive: every lease renewed but those of `silent`,
/// then the timeouts; every command with its second, but zones opening (see [`poll`]).
pub fn run_silent(mesh: &mut Mesh, from_s: u64, to_s: u64, silent: SiteId) -> Vec<(u64, Command)> {
    let mut seen = Vec::new();
    for t in from_s..=to_s {
        let now = Time::from_secs(t);
        renew_all(mesh, now, &[silent]);
        mesh.handle_timeout(now);
        seen.extend(std::iter::from_fn(|| poll(mesh)).map(|c| (t, c)));
    }
    seen
}

/// Renews every lease (bubbles and zones) except those of the `silent` sites.
pub fn renew_all(mesh: &mut Mesh, now: Time, silent: &[SiteId]) {
    let sites: Vec<SiteId> = mesh.sites().ids().collect();
    for s in sites {
        if silent.contains(&s) {
            continue;
        }
        let batch = mesh.leases_held(s);
        let _ = mesh.handle_renewal(s, &batch, now);
    }
}

pub fn moves(cmds: &[(Time, Command)]) -> Vec<(Time, SiteId, SiteId)> {
    cmds.iter()
        .filter_map(|(t, c)| match c {
            Command::Move { from, to, .. } => Some((*t, *from, *to)),
            _ => None,
        })
        .collect()
}

/// A seeded population: `n` players in clusters of 1–20 (a few of 60–150), mixed homes, some
/// pilots, AFK players and NPCs, some moving, spread over two worlds.
pub fn population(seed: u64, n: usize) -> Vec<PlayerJoin> {
    use horizon_mesh::rng::Rng;
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    let mut id = 1;
    while out.len() < n {
        let size = if rng.unit() < 0.03 { 60 + rng.below(90) } else { 1 + rng.below(20) } as usize;
        let center = Vec3::new(rng.range(-2e5, 2e5), rng.range(-2e5, 2e5), rng.range(-2e3, 2e3));
        let world = WorldId(rng.below(2) as u32);
        let main_home = rng.below(3) as usize;
        let spread = rng.range(10.0, 1500.0);
        let speed = if rng.unit() < 0.2 { rng.range(1.0, 300.0) } else { 0.0 };
        let dir = Vec3::new(rng.range(-1.0, 1.0), rng.range(-1.0, 1.0), 0.0);
        for _ in 0..size.min(n - out.len()) {
            let home = if rng.unit() < 0.7 { main_home } else { rng.below(3) as usize };
            let role = match rng.below(20) {
                0 => Role::Npc,
                1 | 2 => Role::Afk,
                3..=5 => Role::Pilot,
                _ => Role::Player,
            };
            let offset = Vec3::new(rng.range(-spread, spread), rng.range(-spread, spread), 0.0);
            out.push(PlayerJoin {
                id: PlayerId(id),
                gateway: site(home),
                access_rtt_ms: rng.range(2.0, 60.0),
                role,
                world,
                position: center + offset,
                velocity: dir * speed,
            });
            id += 1;
        }
    }
    out
}
