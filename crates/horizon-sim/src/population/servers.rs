//! The game servers each site's agent would run for what the brain placed there (design.md §8,
//! "Cost"): several regions per server, seated by the agents' own rule,
//! [`horizon_mesh::packing::pick`].
//!
//! Called every tick with the regions on each site: a part of a bubble is seated when first
//! seen (with the players it has then), keeps its server while it stays on the site, and
//! leaves it when the bubble ends or moves away. A server holding nothing is given back. A
//! bubble spread over several servers counts as that many regions, each with the players the
//! brain counted in that part. The core site's zones are regions too, seated alike: a zone that splits keeps
//! its server and its new half is seated as a new region, as SMD gives it to another server.
//!
//! A server over `players_per_server` with several regions for 10 s gives whole regions away
//! by the agents' rule too ([`give_away`], then [`pick`] for each, never the same server), and
//! not again within 15 s: the agents' `RELIEVE_AFTER` and `RELIEVE_SETTLE`, in ticks.

use horizon_mesh::packing::{Seat, give_away, pick};
use horizon_mesh::{BubbleId, Mesh, Thresholds};
use rustc_hash::FxHashMap;

/// One site's servers.
#[derive(Debug, Default)]
struct SitePool {
    servers: Vec<Server>,
    placed: FxHashMap<(BubbleId, u32), Placed>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Server {
    players: u32,
    regions: u32,
    /// Ticks in a row over `players_per_server` with several regions.
    over_ticks: u32,
    /// Ticks in a row over `players_per_server`, however many regions it holds.
    overfull_ticks: u32,
    /// The tick it last gave regions away.
    relieved: Option<u64>,
}

/// When an overfull server gives regions away, in ticks.
#[derive(Clone, Copy, Debug)]
struct Relief {
    capacity: u32,
    seats: u32,
    after_ticks: u32,
    settle_ticks: u64,
}

#[derive(Clone, Copy, Debug)]
struct Placed {
    server: u32,
    players: u32,
    seen: u64,
}

impl SitePool {
    fn seat(&mut self, key: (BubbleId, u32), players: u32, seats: u32, tick: u64) {
        if let Some(p) = self.placed.get_mut(&key) {
            let s = &mut self.servers[p.server as usize];
            s.players = s.players - p.players + players;
            p.players = players;
            p.seen = tick;
            return;
        }
        let offered = self.servers.iter().enumerate().map(|(i, s)| Seat {
            server: i as u32,
            players: s.players,
            regions: s.regions,
        });
        let server = pick(offered, players, seats).unwrap_or_else(|| {
            self.servers.push(Server::default());
            self.servers.len() as u32 - 1
        });
        let s = &mut self.servers[server as usize];
        s.players += players;
        s.regions += 1;
        self.placed.insert(key, Placed { server, players, seen: tick });
    }

    /// Servers over capacity with several regions for long enough give whole regions away,
    /// each to the server [`pick`] names among the others. Returns the regions moved.
    fn relieve(&mut self, tick: u64, r: Relief) -> u64 {
        let mut moved = 0;
        for i in 0..self.servers.len() {
            let s = &mut self.servers[i];
            if s.players <= r.capacity || s.regions < 2 {
                s.over_ticks = 0;
                continue;
            }
            s.over_ticks += 1;
            let settled = s.relieved.is_none_or(|t| tick >= t + r.settle_ticks);
            if s.over_ticks < r.after_ticks || !settled {
                continue;
            }
            s.over_ticks = 0;
            s.relieved = Some(tick);
            let mut regions: Vec<((BubbleId, u32), u32)> = self
                .placed
                .iter()
                .filter(|(_, p)| p.server as usize == i)
                .map(|(k, p)| (*k, p.players))
                .collect();
            regions.sort_unstable_by_key(|&((b, part), _)| (b.0, part));
            for key in give_away(&regions, r.capacity) {
                let Some(p) = self.placed.get(&key).copied() else { continue };
                let from = &mut self.servers[i];
                from.players -= p.players;
                from.regions -= 1;
                let offered =
                    self.servers.iter().enumerate().filter(|&(j, _)| j != i).map(|(j, s)| Seat {
                        server: j as u32,
                        players: s.players,
                        regions: s.regions,
                    });
                let to = pick(offered, p.players, r.seats).unwrap_or_else(|| {
                    self.servers.push(Server::default());
                    self.servers.len() as u32 - 1
                });
                let s = &mut self.servers[to as usize];
                s.players += p.players;
                s.regions += 1;
                self.placed.insert(key, Placed { server: to, ..p });
                moved += 1;
            }
        }
        moved
    }

    /// Regions not seen at `tick` leave their servers.
    fn sweep(&mut self, tick: u64) {
        let servers = &mut self.servers;
        self.placed.retain(|_, p| {
            if p.seen == tick {
                return true;
            }
            let s = &mut servers[p.server as usize];
            s.players -= p.players;
            s.regions -= 1;
            false
        });
    }

    fn hosting(&self) -> impl Iterator<Item = &Server> {
        self.servers.iter().filter(|s| s.regions > 0)
    }
}

/// What the servers of one site looked like at one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SiteServers {
    /// Servers holding at least one region (bubbles' parts and core-site zones).
    pub servers: u32,
    /// Of those, servers simulating more players than `players_per_server` (regions grew
    /// after they were seated).
    pub overfull: u32,
}

/// Server-ticks over `players_per_server` over a run, every site together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Overfull {
    /// Every tick a server spent over it.
    pub ticks: u64,
    /// Only the ticks past the grace a region needs to be cut or moved (design.md §4: split
    /// after `split_after_samples` samples, the settle window, a server's start): a server
    /// over capacity this long is one SMD's rule left there.
    pub beyond_grace_ticks: u64,
}

/// Every site's servers, kept from tick to tick.
#[derive(Debug)]
pub(crate) struct Servers {
    sites: Vec<SitePool>,
    tick: u64,
    seats: u32,
    players_per_server: u32,
    relief: Relief,
    /// Regions moved whole off overfull servers so far.
    moved: u64,
    overfull: Overfull,
    /// Ticks a server may stay over capacity while its region is cut or moved.
    grace_ticks: u32,
    /// The most counted players one region (a bubble's part, a zone) held at a tick.
    largest_region: u32,
}

/// The agents' `RELIEVE_AFTER` and `RELIEVE_SETTLE` (`horizon-agent` `machine/mod.rs`).
const RELIEVE_AFTER_S: f64 = 10.0;
const RELIEVE_SETTLE_S: f64 = 15.0;

/// How long a server may be over capacity while SMD's rule cuts its region: the overload
/// samples (one a second), then the settle window.
fn grace_s(th: &Thresholds) -> f64 {
    f64::from(th.split_after_samples) + th.settle_ms as f64 / 1000.0
}

impl Servers {
    /// `tick_s`: the seconds between two calls of [`Servers::update`].
    pub(crate) fn new(sites: usize, th: &Thresholds, tick_s: f64) -> Self {
        let ticks = |s: f64| (s / tick_s).ceil().max(1.0);
        Servers {
            sites: (0..sites).map(|_| SitePool::default()).collect(),
            tick: 0,
            seats: th.seats_per_server(),
            players_per_server: th.players_per_server,
            relief: Relief {
                capacity: th.players_per_server,
                seats: th.seats_per_server(),
                after_ticks: ticks(RELIEVE_AFTER_S) as u32,
                settle_ticks: ticks(RELIEVE_SETTLE_S) as u64,
            },
            moved: 0,
            overfull: Overfull::default(),
            grace_ticks: ticks(grace_s(th)) as u32,
            largest_region: 0,
        }
    }

    /// Server-ticks over capacity so far.
    pub(crate) fn overfull(&self) -> Overfull {
        self.overfull
    }

    /// The most counted players one region held at a tick so far.
    pub(crate) fn largest_region(&self) -> u32 {
        self.largest_region
    }

    /// Regions moved whole off overfull servers so far.
    pub(crate) fn moved(&self) -> u64 {
        self.moved
    }

    /// Seats what `mesh` runs now.
    pub(crate) fn update(&mut self, mesh: &Mesh) {
        self.tick += 1;
        let tick = self.tick;
        for b in mesh.bubbles() {
            let parts = b.servers();
            let counted = |part: u32| b.part_load(part as usize).map_or(0, |l| l.players);
            // Before the brain's first sample of it (its parts' counts not summing up yet):
            // even shares, the remainder on the first parts.
            let even = (0..parts).map(counted).sum::<u32>() != b.players;
            let pool = &mut self.sites[b.site.index()];
            for part in 0..parts {
                let players = if even {
                    b.players / parts + u32::from(part < b.players % parts)
                } else {
                    counted(part)
                };
                self.largest_region = self.largest_region.max(players);
                pool.seat((b.id, part), players, self.seats, tick);
            }
        }
        let core = &mut self.sites[mesh.sites().core().index()];
        // An empty zone takes no seat: its box rides along on a server already running.
        for z in mesh.zones().filter(|z| z.players > 0) {
            self.largest_region = self.largest_region.max(z.players);
            core.seat((z.id, 0), z.players, self.seats, tick);
        }
        for pool in &mut self.sites {
            pool.sweep(tick);
            self.moved += pool.relieve(tick, self.relief);
            for s in &mut pool.servers {
                if s.players <= self.players_per_server {
                    s.overfull_ticks = 0;
                    continue;
                }
                s.overfull_ticks += 1;
                self.overfull.ticks += 1;
                if s.overfull_ticks > self.grace_ticks {
                    self.overfull.beyond_grace_ticks += 1;
                }
            }
        }
    }

    /// Site `s` now.
    pub(crate) fn site(&self, s: usize) -> SiteServers {
        let pool = &self.sites[s];
        let over = pool.hosting().filter(|x| x.players > self.players_per_server).count();
        SiteServers { servers: pool.hosting().count() as u32, overfull: over as u32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: u64) -> (BubbleId, u32) {
        (BubbleId(id), 0)
    }

    #[test]
    fn regions_share_servers_up_to_the_seats_and_an_emptied_server_is_given_back() {
        let mut pool = SitePool::default();
        for id in 1..=4 {
            pool.seat(b(id), 20, 60, 1);
        }
        assert_eq!(pool.hosting().count(), 2, "three of 20 on one, the fourth on a second");
        // The fourth grows past the seats of an empty server: it keeps its server.
        pool.seat(b(4), 70, 60, 2);
        for id in 1..=3 {
            pool.seat(b(id), 20, 60, 2);
        }
        pool.sweep(2);
        assert_eq!(pool.hosting().count(), 2);
        // Bubble 4 ends: its server holds nothing and is given back.
        for id in 1..=3 {
            pool.seat(b(id), 20, 60, 3);
        }
        pool.sweep(3);
        assert_eq!(pool.hosting().count(), 1);
        // A new one takes the given-back server only when the first is full.
        pool.seat(b(5), 1, 60, 4);
        assert_eq!(pool.hosting().count(), 2, "60 + 1 exceeds the seats");
    }

    #[test]
    fn an_overfull_server_gives_whole_regions_away_after_two_ticks_then_settles() {
        // 10 s of overload is two 5 s ticks; the settle window of 15 s is three.
        let r = Relief { capacity: 75, seats: 60, after_ticks: 2, settle_ticks: 3 };
        let mut pool = SitePool::default();
        pool.seat(b(1), 30, 60, 1);
        pool.seat(b(2), 25, 60, 1);
        assert_eq!(pool.hosting().count(), 1);
        // Both grow: 50 + 40 = 90 over 75.
        pool.seat(b(1), 50, 60, 2);
        pool.seat(b(2), 40, 60, 2);
        assert_eq!(pool.relieve(2, r), 0, "one tick over: not yet");
        assert_eq!(pool.relieve(3, r), 1, "two ticks over: the lighter side goes");
        let on = |pool: &SitePool, id| pool.placed[&b(id)].server;
        assert_ne!(on(&pool, 1), on(&pool, 2));
        assert_eq!(pool.hosting().map(|s| s.players).collect::<Vec<_>>(), [50, 40]);
        // The server keeping bubble 1 fills again with a third region: it waits its settle
        // window before it gives anything away.
        pool.seat(b(3), 1, 60, 4);
        pool.seat(b(3), 30, 60, 4);
        let first = on(&pool, 1);
        assert_eq!(on(&pool, 3), first, "placed on the fullest that fitted");
        assert_eq!(pool.relieve(4, r), 0);
        assert_eq!(pool.relieve(5, r), 0, "within 3 ticks of its last move");
        assert_eq!(pool.relieve(6, r), 1);
        assert_eq!(pool.servers.iter().filter(|s| s.players > 75).count(), 0);
    }
}
