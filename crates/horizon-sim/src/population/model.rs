//! The population model: who is online, where they are and what they do, one tick at a time.
//!
//! It only reads its configuration and its own seeded generator, never a policy's decisions, so
//! every policy sees exactly the same stream of joins, moves and leaves for a given seed.

use horizon_mesh::rng::Rng;
use horizon_mesh::{PlayerId, PlayerJoin, PlayerUpdate, Role, SiteId, Vec3, WorldId};

use super::config::PopulationConfig;

/// What happens during one tick, in the order a policy must apply it.
#[derive(Clone, Debug, Default)]
pub struct Step {
    pub t_ms: u64,
    pub joins: Vec<PlayerJoin>,
    pub updates: Vec<(PlayerId, PlayerUpdate)>,
    pub leaves: Vec<PlayerId>,
}

/// Figures about the population itself (the same for every policy).
#[derive(Clone, Debug, Default)]
pub struct PopulationStats {
    /// Human sessions started.
    pub sessions: u64,
    pub npcs: u64,
    pub events: u64,
    pub peak_online: u64,
    /// Σ online humans over ticks (divide by ticks for the mean).
    pub online_tick_sum: u64,
    pub ticks: u64,
    /// Each session's access RTT, by home site index and city (homes with `cities` only).
    pub access_by_city: std::collections::BTreeMap<(usize, usize), Vec<f64>>,
}

struct Poi {
    world: u32,
    pos: Vec3,
    community: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Activity {
    Travel { target: Vec3, speed: f64 },
    Stay { until_ms: u64 },
    Afk { until_ms: u64 },
    Event { until_ms: u64 },
}

struct Agent {
    id: PlayerId,
    home: usize,
    pilot: bool,
    leave_ms: u64,
    world: u32,
    pos: Vec3,
    vel: Vec3,
    role: Role,
    activity: Activity,
    /// Party members follow their leader at a fixed offset.
    leader: Option<PlayerId>,
    offset: Vec3,
}

/// A scheduled large event.
struct Gathering {
    start_ms: u64,
    poi: usize,
    size: u32,
}

/// The population, advanced by [`Population::step`].
pub struct Population<'a> {
    cfg: &'a PopulationConfig,
    rng: Rng,
    t_ms: u64,
    next_id: u64,
    pois: Vec<Poi>,
    /// Points of interest per `world * sites + community`.
    pois_by_home: Vec<Vec<usize>>,
    /// Points of interest of world `w`: `w * per_world .. (w + 1) * per_world`.
    pois_per_world: usize,
    agents: Vec<Agent>,
    /// Per player id: index in `agents`, or `u32::MAX` once gone (NPCs are not agents).
    slot: Vec<u32>,
    gatherings: Vec<Gathering>,
    next_gathering: usize,
    /// Cumulative home-site shares, for drawing a home.
    share_cdf: Vec<(usize, f64)>,
    pub stats: PopulationStats,
}

impl std::fmt::Debug for Population<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Population")
            .field("t_ms", &self.t_ms)
            .field("online", &self.agents.len())
            .finish()
    }
}

const GONE: u32 = u32::MAX;

impl<'a> Population<'a> {
    pub fn new(cfg: &'a PopulationConfig) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let n_sites = cfg.sites.len();
        let mut share_cdf = Vec::new();
        let mut acc = 0.0;
        for h in &cfg.homes {
            acc += h.share;
            share_cdf.push((h.site.index(), acc));
        }
        let mut p = Population {
            cfg,
            rng: Rng::new(0),
            t_ms: 0,
            next_id: 1,
            pois: Vec::new(),
            pois_by_home: vec![Vec::new(); n_sites * cfg.worlds() as usize],
            pois_per_world: cfg.world.points_of_interest as usize,
            agents: Vec::new(),
            slot: vec![GONE],
            gatherings: Vec::new(),
            next_gathering: 0,
            share_cdf,
            stats: PopulationStats::default(),
        };
        let size = cfg.world.size_m;
        for world in 0..cfg.worlds() {
            for _ in 0..p.pois_per_world {
                let pos = Vec3::new(rng.range(0.0, size), rng.range(0.0, size), 0.0);
                let community = draw_home(&p.share_cdf, &mut rng);
                p.pois_by_home[world as usize * n_sites + community].push(p.pois.len());
                p.pois.push(Poi { world, pos, community });
            }
        }
        let hours = cfg.hours;
        let n_events = (cfg.events.per_day * hours / 24.0).round() as usize;
        let duration_ms = cfg.duration_ms();
        for _ in 0..n_events {
            let [lo, hi] = cfg.events.players;
            p.gatherings.push(Gathering {
                start_ms: (rng.unit() * duration_ms as f64) as u64,
                poi: rng.below(p.pois.len() as u64) as usize,
                size: lo + rng.below(u64::from(hi - lo) + 1) as u32,
            });
        }
        p.gatherings.sort_by_key(|g| g.start_ms);
        p.rng = rng;
        p
    }

    pub fn online(&self) -> usize {
        self.agents.len()
    }

    /// Online humans per home site (by site index).
    pub fn online_by_home(&self) -> Vec<u32> {
        let mut v = vec![0; self.cfg.sites.len()];
        for a in &self.agents {
            v[a.home] += 1;
        }
        v
    }

    /// Activity of home `h` at time `t` relative to its daily mean (mean 1 over a day).
    fn activity(&self, h: usize, t_ms: u64) -> f64 {
        let Some(home) = self.cfg.homes.iter().find(|x| x.site.index() == h) else {
            return 0.0;
        };
        let hour = t_ms as f64 / 3_600_000.0;
        let phase = 2.0 * std::f64::consts::PI * (hour - home.peak_utc_h) / 24.0;
        let a = home.trough + (1.0 - home.trough) * (0.5 + 0.5 * phase.cos());
        a / (home.trough + (1.0 - home.trough) * 0.5)
    }

    fn target_online(&self, h: usize, t_ms: u64) -> f64 {
        let share = self.cfg.homes.iter().find(|x| x.site.index() == h).map_or(0.0, |x| x.share);
        f64::from(self.cfg.players) * share * self.activity(h, t_ms)
    }

    fn normal(&mut self) -> f64 {
        let u1 = self.rng.unit().max(1e-12);
        let u2 = self.rng.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    fn poisson(&mut self, mean: f64) -> u64 {
        if mean <= 0.0 {
            return 0;
        }
        if mean > 30.0 {
            return (mean + mean.sqrt() * self.normal()).round().max(0.0) as u64;
        }
        let (limit, mut k, mut prod) = ((-mean).exp(), 0u64, self.rng.unit());
        while prod > limit {
            k += 1;
            prod *= self.rng.unit();
        }
        k
    }

    /// A new session's access RTT to home `h`: log-normal; with cities, a city drawn by its
    /// share and its route to the site added to that last mile.
    fn access_rtt(&mut self, h: usize) -> f64 {
        let cfg = self.cfg;
        let Some(home) = cfg.homes.iter().find(|x| x.site.index() == h) else {
            return 10.0;
        };
        let sigma = (home.access_p95_ms / home.access_median_ms).ln() / 1.645;
        let z = self.normal().clamp(-4.0, 4.0);
        let last_mile = (home.access_median_ms.ln() + sigma * z).exp();
        if home.cities.is_empty() {
            return last_mile;
        }
        let mut draw = self.rng.unit();
        let city = home
            .cities
            .iter()
            .position(|c| {
                draw -= c.share;
                draw < 0.0
            })
            .unwrap_or(home.cities.len() - 1);
        let rtt = last_mile + home.cities[city].route_ms;
        self.stats.access_by_city.entry((h, city)).or_default().push(rtt);
        rtt
    }

    fn clamp_world(&self, v: Vec3) -> Vec3 {
        let s = self.cfg.world.size_m;
        Vec3::new(v.x.clamp(0.0, s), v.y.clamp(0.0, s), 0.0)
    }

    /// A point uniformly in the disc of radius `r` around `c`, inside the world (drawn again when
    /// it falls outside: clamping would pile players up along the edges).
    fn around(&mut self, c: Vec3, r: f64) -> Vec3 {
        let s = self.cfg.world.size_m;
        let mut p = c;
        for _ in 0..32 {
            let (a, d) = (self.rng.range(0.0, std::f64::consts::TAU), r * self.rng.unit().sqrt());
            p = c + Vec3::new(a.cos() * d, a.sin() * d, 0.0);
            if (0.0..=s).contains(&p.x) && (0.0..=s).contains(&p.y) {
                return p;
            }
        }
        self.clamp_world(p)
    }

    /// A point of interest for a player of home `h`: their community's with the configured
    /// affinity, any otherwise; among those, walkers take the nearest.
    fn pick_poi(&mut self, h: usize, world: u32, from: Vec3, walker: bool) -> Option<usize> {
        let own_set = world as usize * self.cfg.sites.len() + h;
        let own = self.rng.unit() < self.cfg.behaviour.poi_home_affinity
            && !self.pois_by_home[own_set].is_empty();
        let all: Vec<usize>;
        let set: &[usize] = if own {
            &self.pois_by_home[own_set]
        } else {
            let first = world as usize * self.pois_per_world;
            all = (first..first + self.pois_per_world).collect();
            &all
        };
        if walker {
            let near = set.iter().copied().min_by(|&a, &b| {
                self.pois[a].pos.dist_sq(from).total_cmp(&self.pois[b].pos.dist_sq(from))
            })?;
            let reach = 2.0 * self.cfg.behaviour.walk_trip_m;
            (self.pois[near].pos.dist_sq(from) <= reach * reach).then_some(near)
        } else {
            Some(set[self.rng.below(set.len() as u64) as usize])
        }
    }

    /// The next trip of a leader or solo player at `from`.
    fn plan_trip(&mut self, h: usize, world: u32, pilot: bool, from: Vec3) -> Activity {
        let b = &self.cfg.behaviour;
        let (poi_share, r) = (b.poi_share, self.cfg.world.poi_radius_m);
        let trip = if pilot { b.fly_trip_m } else { b.walk_trip_m };
        let speed = if pilot {
            self.rng.range(b.fly_mps[0], b.fly_mps[1])
        } else {
            self.rng.range(b.walk_mps[0], b.walk_mps[1])
        };
        let poi =
            if self.rng.unit() < poi_share { self.pick_poi(h, world, from, !pilot) } else { None };
        let target = match poi {
            Some(i) => {
                let c = self.pois[i].pos;
                self.around(c, r)
            }
            None => self.around(from, trip),
        };
        Activity::Travel { target, speed }
    }

    fn stay(&mut self) -> Activity {
        let [lo, hi] = self.cfg.behaviour.stay_s;
        Activity::Stay { until_ms: self.t_ms + (self.rng.range(lo, hi.max(lo)) * 1000.0) as u64 }
    }

    fn session_ms(&mut self) -> u64 {
        let (mean, min) = (self.cfg.session_mean_s, self.cfg.session_min_s);
        let extra = -(mean - min).max(1.0) * self.rng.unit().max(1e-12).ln();
        ((min + extra) * 1000.0) as u64
    }

    fn new_id(&mut self) -> PlayerId {
        let id = PlayerId(self.next_id);
        self.next_id += 1;
        id
    }

    fn push_agent(&mut self, a: Agent, step: &mut Step) {
        let role = a.role;
        step.joins.push(PlayerJoin {
            id: a.id,
            // `Sites` hands out ids in index order; `h` came from one.
            gateway: self.site(a.home),
            access_rtt_ms: self.access_rtt(a.home),
            role,
            world: WorldId(a.world),
            position: a.pos,
            velocity: a.vel,
        });
        debug_assert_eq!(self.slot.len() as u64, a.id.0);
        self.slot.push(self.agents.len() as u32);
        self.agents.push(a);
        self.stats.sessions += 1;
    }

    fn site(&self, h: usize) -> SiteId {
        self.cfg.sites.ids().nth(h).unwrap_or(self.cfg.sites.core())
    }

    /// A solo player or a party arriving, with sessions of `session_ms` (`None`: drawn).
    fn arrive(&mut self, h: usize, session_ms: Option<u64>, step: &mut Step) -> u32 {
        let b = self.cfg.behaviour.clone();
        let size = if self.rng.unit() < b.party_share {
            b.party_size[0]
                + self.rng.below(u64::from(b.party_size[1] - b.party_size[0]) + 1) as u32
        } else {
            1
        };
        let session = session_ms.unwrap_or_else(|| self.session_ms());
        let leave_ms = self.t_ms + session;
        let r = self.cfg.world.poi_radius_m;
        let world = self.rng.below(u64::from(self.cfg.worlds())) as u32;
        let spawn_poi = if self.rng.unit() < b.poi_share {
            self.pick_poi(h, world, Vec3::ZERO, false)
        } else {
            None
        };
        let pos = match spawn_poi {
            Some(i) => {
                let c = self.pois[i].pos;
                self.around(c, r)
            }
            None => {
                let s = self.cfg.world.size_m;
                Vec3::new(self.rng.range(0.0, s), self.rng.range(0.0, s), 0.0)
            }
        };
        let leader = self.new_id();
        let pilot = self.rng.unit() < b.pilot_share;
        let activity =
            if spawn_poi.is_some() { self.stay() } else { self.plan_trip(h, world, pilot, pos) };
        let role = if pilot { Role::Pilot } else { Role::Player };
        let vel = velocity(pos, activity);
        let a = Agent {
            id: leader,
            home: h,
            pilot,
            leave_ms,
            world,
            pos,
            vel,
            role,
            activity,
            leader: None,
            offset: Vec3::ZERO,
        };
        self.push_agent(a, step);
        for _ in 1..size {
            let home = if self.rng.unit() < b.party_mixed {
                draw_home(&self.share_cdf, &mut self.rng)
            } else {
                h
            };
            let offset = Vec3::new(self.rng.range(-15.0, 15.0), self.rng.range(-15.0, 15.0), 0.0);
            let id = self.new_id();
            let a = Agent {
                id,
                home,
                pilot,
                leave_ms,
                world,
                pos: self.clamp_world(pos + offset),
                vel,
                role,
                activity,
                leader: Some(leader),
                offset,
            };
            self.push_agent(a, step);
        }
        size
    }

    /// Advances to the next tick and returns what happened during it.
    pub fn step(&mut self) -> Step {
        let mut step = Step { t_ms: self.t_ms, ..Step::default() };
        let dt_ms = self.cfg.tick_ms;
        if self.t_ms == 0 {
            self.populate(&mut step);
        } else {
            self.leave(&mut step);
            self.arrivals(dt_ms, &mut step);
            self.gather(&mut step);
            self.behave(dt_ms, &mut step);
        }
        let online = self.agents.len() as u64;
        self.stats.peak_online = self.stats.peak_online.max(online);
        self.stats.online_tick_sum += online;
        self.stats.ticks += 1;
        self.t_ms += dt_ms;
        step
    }

    /// Time zero: the NPCs of every point of interest, and the players already online.
    fn populate(&mut self, step: &mut Step) {
        let r = self.cfg.world.poi_radius_m;
        for i in 0..self.pois.len() {
            for _ in 0..self.cfg.world.npcs_per_poi {
                let id = self.new_id();
                let c = self.pois[i].pos;
                let pos = self.around(c, r);
                step.joins.push(PlayerJoin {
                    id,
                    gateway: self.site(self.pois[i].community),
                    access_rtt_ms: 0.0,
                    role: Role::Npc,
                    world: WorldId(self.pois[i].world),
                    position: pos,
                    velocity: Vec3::ZERO,
                });
                self.slot.push(GONE);
                self.stats.npcs += 1;
            }
        }
        for h in 0..self.cfg.sites.len() {
            let target = self.target_online(h, 0).round() as u32;
            let mut n = 0;
            while n < target {
                // Sessions already under way: the remaining time is exponential too.
                let remaining = self.session_ms();
                n += self.arrive(h, Some(remaining), step);
            }
        }
    }

    fn leave(&mut self, step: &mut Step) {
        let mut i = 0;
        while i < self.agents.len() {
            if self.agents[i].leave_ms <= self.t_ms {
                let a = self.agents.swap_remove(i);
                self.slot[a.id.0 as usize] = GONE;
                if let Some(moved) = self.agents.get(i) {
                    self.slot[moved.id.0 as usize] = i as u32;
                }
                step.leaves.push(a.id);
            } else {
                i += 1;
            }
        }
    }

    fn arrivals(&mut self, dt_ms: u64, step: &mut Step) {
        let b = &self.cfg.behaviour;
        let mean_size = 1.0 - b.party_share
            + b.party_share * f64::from(b.party_size[0] + b.party_size[1]) / 2.0;
        let dt_s = dt_ms as f64 / 1000.0;
        for h in 0..self.cfg.sites.len() {
            let now = self.target_online(h, self.t_ms);
            let next = self.target_online(h, self.t_ms + dt_ms);
            let rate = now / self.cfg.session_mean_s * dt_s + (next - now).max(0.0);
            let n = self.poisson(rate / mean_size);
            for _ in 0..n {
                self.arrive(h, None, step);
            }
        }
    }

    /// Large events starting now pull a crowd from everywhere to one point of interest.
    fn gather(&mut self, step: &mut Step) {
        while let Some(g) = self.gatherings.get(self.next_gathering) {
            if g.start_ms > self.t_ms {
                break;
            }
            let (poi, size) = (g.poi, g.size as usize);
            self.next_gathering += 1;
            self.stats.events += 1;
            let until_ms = self.t_ms + (self.cfg.events.duration_s * 1000.0) as u64;
            let (centre, world) = (self.pois[poi].pos, self.pois[poi].world);
            let spread = self.cfg.world.poi_radius_m * 2.0;
            let mut taken = 0;
            let n = self.agents.len();
            for _ in 0..n.min(size * 4) {
                if taken >= size || n == 0 {
                    break;
                }
                let i = self.rng.below(n as u64) as usize;
                let a = &self.agents[i];
                if a.leader.is_some()
                    || matches!(a.activity, Activity::Event { .. } | Activity::Afk { .. })
                {
                    continue;
                }
                let pos = self.around(centre, spread);
                let a = &mut self.agents[i];
                // Players from other worlds jump there.
                let jumped = (a.world != world).then_some(WorldId(world));
                a.world = world;
                a.pos = pos;
                a.vel = Vec3::ZERO;
                a.activity = Activity::Event { until_ms };
                let u = PlayerUpdate {
                    world: jumped,
                    position: Some(pos),
                    velocity: Some(Vec3::ZERO),
                    ..Default::default()
                };
                step.updates.push((a.id, u));
                taken += 1;
            }
        }
    }

    /// Motion, stays, AFK spells and party members following their leader.
    #[allow(clippy::needless_range_loop)] // Indices: the loop body borrows `self` mutably.
    fn behave(&mut self, dt_ms: u64, step: &mut Step) {
        let dt_s = dt_ms as f64 / 1000.0;
        let afk_p = self.cfg.behaviour.afk_per_hour * dt_s / 3600.0;
        let mut follower_role: Vec<Option<Role>> = vec![None; self.agents.len()];
        for i in 0..self.agents.len() {
            let mut role = self.agents[i].role;
            let a = &self.agents[i];
            let (home, pilot, world, pos0, vel0) = (a.home, a.pilot, a.world, a.pos, a.vel);
            let mut activity = self.agents[i].activity;
            let mut pos = pos0;
            // AFK spells, for anyone.
            match activity {
                Activity::Afk { until_ms } if until_ms <= self.t_ms => {
                    role = if pilot { Role::Pilot } else { Role::Player };
                    activity = self.stay();
                }
                Activity::Afk { .. } | Activity::Event { .. } => {}
                _ if self.rng.unit() < afk_p => {
                    role = Role::Afk;
                    let d = -self.cfg.behaviour.afk_mean_s * self.rng.unit().max(1e-12).ln();
                    activity = Activity::Afk { until_ms: self.t_ms + (d * 1000.0) as u64 };
                }
                _ => {}
            }
            if self.agents[i].leader.is_none() {
                match activity {
                    Activity::Travel { target, speed } => {
                        let d = (target - pos).norm();
                        if d <= speed * dt_s {
                            pos = target;
                            activity = self.stay();
                        } else {
                            pos = pos + (target - pos) * (speed * dt_s / d);
                        }
                    }
                    Activity::Stay { until_ms } | Activity::Event { until_ms }
                        if until_ms <= self.t_ms =>
                    {
                        activity = self.plan_trip(home, world, pilot, pos);
                    }
                    _ => {}
                }
            }
            let a = &mut self.agents[i];
            a.activity = activity;
            let mut u = PlayerUpdate::default();
            if role != a.role {
                a.role = role;
                u.role = Some(role);
            }
            if a.leader.is_some() {
                // Followers move in the second pass; their update is emitted there, whole.
                follower_role[i] = u.role;
                continue;
            }
            a.pos = pos;
            a.vel = velocity(pos, activity);
            if a.pos != pos0 {
                u.position = Some(a.pos);
            }
            if a.vel != vel0 {
                u.velocity = Some(a.vel);
            }
            if u != PlayerUpdate::default() {
                step.updates.push((a.id, u));
            }
        }
        // Party members follow their leader, wherever the leader went this tick.
        for i in 0..self.agents.len() {
            let Some(leader) = self.agents[i].leader else { continue };
            let l = self.slot.get(leader.0 as usize).copied().unwrap_or(GONE);
            let Some(l) = self.agents.get(l as usize) else { continue };
            let (lpos, lvel, lworld) = (l.pos, l.vel, l.world);
            let pos = self.clamp_world(lpos + self.agents[i].offset);
            let a = &mut self.agents[i];
            let u = PlayerUpdate {
                role: follower_role[i],
                world: (a.world != lworld).then_some(WorldId(lworld)),
                position: (a.pos != pos).then_some(pos),
                velocity: (a.vel != lvel).then_some(lvel),
                ..Default::default()
            };
            a.world = lworld;
            a.pos = pos;
            a.vel = lvel;
            if u != PlayerUpdate::default() {
                step.updates.push((a.id, u));
            }
        }
    }
}

/// A home site (index) drawn by the cumulative shares.
fn draw_home(share_cdf: &[(usize, f64)], rng: &mut Rng) -> usize {
    let u = rng.unit() * share_cdf.last().map_or(1.0, |s| s.1);
    share_cdf.iter().find(|s| u < s.1).or(share_cdf.last()).map_or(0, |s| s.0)
}

fn velocity(pos: Vec3, activity: Activity) -> Vec3 {
    match activity {
        Activity::Travel { target, speed } => {
            let d = (target - pos).norm();
            if d > 0.0 { (target - pos) * (speed / d) } else { Vec3::ZERO }
        }
        _ => Vec3::ZERO,
    }
}
