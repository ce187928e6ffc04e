//! The game servers each site's agent would run for what the brain placed there (SPEC section
//! 8, "Cost"): several regions per server, seated by the agents' own rule,
//! [`horizon_mesh::packing::pick`].
//!
//! Called every tick with the regions on each site: a part of a bubble is seated when first
//! seen (with the players it has then), keeps its server while it stays on the site (as an
//! agent keeps it: nothing moves a running region between servers), and leaves it when the
//! bubble ends or moves away. A server holding nothing is given back. A bubble spread over
//! several servers counts as that many regions, its players shared evenly between them.
//! The core site's zones are regions too, seated alike: a zone that splits keeps its server
//! and its new half is seated as a new region, as SMD gives it to another server.

use horizon_mesh::packing::{Seat, pick};
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

/// Every site's servers, kept from tick to tick.
#[derive(Debug)]
pub(crate) struct Servers {
    sites: Vec<SitePool>,
    tick: u64,
    seats: u32,
    players_per_server: u32,
}

impl Servers {
    pub(crate) fn new(sites: usize, th: &Thresholds) -> Self {
        Servers {
            sites: (0..sites).map(|_| SitePool::default()).collect(),
            tick: 0,
            seats: th.seats_per_server(),
            players_per_server: th.players_per_server,
        }
    }

    /// Seats what `mesh` runs now.
    pub(crate) fn update(&mut self, mesh: &Mesh) {
        self.tick += 1;
        let tick = self.tick;
        for b in mesh.bubbles() {
            let parts = b.servers();
            let pool = &mut self.sites[b.site.index()];
            for part in 0..parts {
                // Even shares, the remainder on the first parts.
                let players = b.players / parts + u32::from(part < b.players % parts);
                pool.seat((b.id, part), players, self.seats, tick);
            }
        }
        let core = &mut self.sites[mesh.sites().core().index()];
        // An empty zone takes no seat: its box rides along on a server already running.
        for z in mesh.zones().filter(|z| z.players > 0) {
            core.seat((z.id, 0), z.players, self.seats, tick);
        }
        for pool in &mut self.sites {
            pool.sweep(tick);
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
}
