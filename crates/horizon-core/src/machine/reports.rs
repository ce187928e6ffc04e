//! What agents report, checked against what each site owns: a site speaks only for the players
//! it is home to (their RTTs and roles, their leaves), joins only player ids handed to it, and
//! feeds the brain the load and the players' positions of only the regions it holds. Anything
//! else is refused, counted in `horizon_core_refused_total{site, reason}` and logged; the rest
//! of the report goes on.

use std::collections::{BTreeMap, VecDeque};

use horizon_mesh::{PlayerUpdate, SiteId, Time};
use horizon_proto::control;
use horizon_proto::server::MAX_POSITIONS;
use horizon_proto::{BubbleId, PlayerId};

use super::{CoreMachine, MAX_ID_BLOCK, reconcile};
use crate::store::Record;

/// Blocks remembered per site: far more than a site asks for while its players come and go
/// (each block is up to 65,536 ids).
const BLOCKS_PER_SITE: usize = 256;

/// Which site was handed which player ids, since this core started. Ids handed out before it
/// started (by an earlier core: the store keeps only the next free id) belong to whichever
/// site speaks for them first.
#[derive(Debug)]
pub(crate) struct IdBlocks {
    before_start: u64,
    blocks: BTreeMap<SiteId, VecDeque<(u64, u64)>>,
}

impl IdBlocks {
    pub(crate) fn new(next_at_start: u64) -> Self {
        IdBlocks { before_start: next_at_start, blocks: BTreeMap::new() }
    }

    pub(crate) fn handed(&mut self, site: SiteId, first: u64, count: u32) {
        let blocks = self.blocks.entry(site).or_default();
        if blocks.len() >= BLOCKS_PER_SITE {
            blocks.pop_front();
        }
        blocks.push_back((first, first + u64::from(count)));
    }

    /// `player` may be joined by `site`.
    pub(crate) fn owns(&self, site: SiteId, player: PlayerId) -> bool {
        player.0 < self.before_start
            || self
                .blocks
                .get(&site)
                .is_some_and(|b| b.iter().any(|&(lo, hi)| (lo..hi).contains(&player.0)))
    }
}

impl CoreMachine {
    /// `player` is known to the brain, and entered at `site`'s gateway.
    fn entered_at(&self, player: PlayerId, site: SiteId) -> bool {
        self.mesh.player(player).is_some_and(|p| p.gateway == site)
    }

    /// A block of fresh player ids for an agent, persisted (ahead of the reply) before use.
    pub(super) fn player_ids(&mut self, site: SiteId, count: u32) -> control::Reply {
        let count = count.clamp(1, MAX_ID_BLOCK);
        let first = self.next_player;
        self.next_player += u64::from(count);
        self.ids.handed(site, first, count);
        self.persist(Record::PlayerIds { next: self.next_player });
        tracing::debug!(site = %self.cfg.sites.name(site), first, count, "player ids handed out");
        control::Reply::PlayerIds { first, count }
    }

    /// Whether every site's agent said who plays where (`Players`) since this core started:
    /// until then, the members of a bubble taken back are not all known.
    pub(crate) fn all_resynced(&self) -> bool {
        self.resynced.len() == self.cfg.sites.len()
    }

    /// An agent's full list of its players (after each registration): those the brain does not
    /// know join — into the bubble they play in, if it is still the one simulating them —, and
    /// the brain's players of this site missing from the list leave.
    pub(super) fn players(&mut self, site: SiteId, players: &[control::PlacedPlayer]) {
        self.resynced.insert(site);
        let listed: std::collections::BTreeSet<u64> =
            players.iter().map(|p| p.sample.player.0).collect();
        let gone: Vec<horizon_mesh::PlayerId> = self
            .mesh
            .players()
            .iter()
            .filter(|p| p.gateway == site && !listed.contains(&p.id.0))
            .map(|p| p.id)
            .collect();
        for p in gone {
            let _ = self.mesh.handle_leave(p);
        }
        let mut joined_in: BTreeMap<BubbleId, Vec<PlayerId>> = BTreeMap::new();
        for p in players {
            let id = p.sample.player;
            if self.mesh.player(id).is_some() {
                continue;
            }
            if !self.ids.owns(site, p.sample.player) {
                self.stats.refused(site, "player_id_not_its_own");
                continue;
            }
            let j = &p.sample;
            let join = reconcile::player_join(site, j);
            let bubble = p.bubble.filter(|b| self.registry.contains(b));
            let joined = match bubble {
                Some(b) => self.mesh.handle_join_in(join, b),
                None => self.mesh.handle_join(join),
            };
            match (joined, bubble) {
                (Err(e), _) => {
                    tracing::debug!(player = j.player.0, error = %e, "resynced player refused")
                }
                (Ok(_), Some(b)) => {
                    // It plays there now, as its holder knows: where its membership is. A move
                    // from there is a crossing that carries its state.
                    self.place(j.player, b);
                    if let Some(r) = self.registry.get_mut(&b) {
                        r.joined(j.player, site);
                        joined_in.entry(b).or_default().push(j.player);
                    }
                }
                (Ok(_), None) => {}
            }
            if self.mesh.player(j.player).is_some() {
                self.take_measured_home(j.player);
            }
        }
        // Their bubble's holder is told: it may not have them as members (it restored the
        // bubble from a copy while this core was down, or before this resync came). A bubble
        // being restored or handed over gets its full list when that is done.
        for (b, players) in joined_in {
            if self.registry.get(&b).is_some_and(|r| r.settled()) {
                self.send_full_members(b);
            }
            self.placed_by_resync(b, &players);
        }
    }

    /// Where the game servers of `site` put the players of the regions they run: the only
    /// positions placement uses (a player's join gives the place they enter at; after that,
    /// nothing a client says moves them). A region's list counts only from its holder, under the
    /// epoch in force, and only for its members: a player who crossed on since is placed by
    /// their new region's server.
    pub(super) fn positions(&mut self, site: SiteId, regions: &[control::RegionPositions]) {
        for region in regions {
            let holder = self.registry.get(&region.lease.bubble).filter(|r| {
                r.site() == site && r.epoch() == region.lease.epoch.0 && !r.restoring()
            });
            let Some(r) = holder else {
                self.stats.refused(site, "positions_not_its_region");
                continue;
            };
            if region.players.len() > MAX_POSITIONS {
                self.stats.refused(site, "too_many_positions");
                continue;
            }
            let world = Some(horizon_mesh::WorldId(r.world()));
            for p in region.players.iter().filter(|p| r.members().contains_key(&p.player)) {
                let update = PlayerUpdate {
                    world,
                    position: Some(p.pos),
                    velocity: Some(p.vel),
                    ..PlayerUpdate::default()
                };
                if let Err(e) = self.mesh.handle_update(p.player, &update) {
                    tracing::debug!(player = p.player.0, error = %e, "a server's position refused");
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn report(
        &mut self,
        site: SiteId,
        joins: &[control::PlayerSample],
        leaves: &[PlayerId],
        players: &[control::PlayerSample],
        backbone: &[control::BackboneSample],
        servers: &[control::ServerLoad],
        now: Time,
    ) {
        for j in joins {
            if !self.ids.owns(site, j.player) {
                self.stats.refused(site, "player_id_not_its_own");
                tracing::warn!(site = %self.cfg.sites.name(site), player = j.player.0, "a join of a player id not handed to this site: refused");
                continue;
            }
            match self.mesh.handle_join(reconcile::player_join(site, j)) {
                Ok(()) => self.take_measured_home(j.player),
                Err(e) => tracing::debug!(player = j.player.0, error = %e, "join refused"),
            }
        }
        // Placed at once (design.md §4, "At connection"): into the bubble they spawn in, or a
        // bubble of their own when alone. Once the whole batch is in: friends connecting
        // together see each other.
        for j in joins {
            self.mesh.place_arrival(j.player, now);
        }
        self.carry_out_commands(now);
        for p in players {
            if !self.entered_at(p.player, site) {
                self.stats.refused(site, "not_its_player");
                continue;
            }
            // What a client claims of its place (`pos`, `vel`, `world`) is never read: players
            // are placed where the game server simulating them puts them (`positions`).
            let update = PlayerUpdate {
                access_rtt_ms: Some(f64::from(p.access_rtt_ms)),
                role: Some(p.role),
                ..PlayerUpdate::default()
            };
            let _ = self.mesh.handle_update(p.player, &update);
        }
        for l in leaves {
            if !self.entered_at(*l, site) {
                self.stats.refused(site, "not_its_player");
                continue;
            }
            let _ = self.mesh.handle_leave(*l);
            self.measure.forget(*l);
        }
        for b in backbone {
            if let (Some(other), Some(rtt)) = (self.cfg.sites.id(b.site.as_str()), b.rtt_ms)
                && rtt.is_finite()
                && rtt >= 0.0
            {
                let rtt = f64::from(rtt);
                match self.mesh.handle_backbone_rtt(site, other, rtt) {
                    Ok(()) => self.stats.backbone(site, other, rtt),
                    Err(floor) => {
                        self.stats.below_floor(site, other);
                        tracing::debug!(from = %self.site_name(site), to = %self.site_name(other), rtt_ms = rtt, floor_ms = floor, "a backbone round trip below its physical floor: not used");
                    }
                }
            }
        }
        self.backbone_said(site, backbone);
        // Tick rates feed the brain's load rules (design.md §4): a server's rate is that of
        // every region it holds (several share a server). The agent lists a spread bubble's
        // servers in part order; a count that does not match the cut in force (a `Parts` on its
        // way) is skipped.
        let mut by_bubble: BTreeMap<BubbleId, Vec<f32>> = BTreeMap::new();
        for srv in servers {
            for &region in &srv.bubbles {
                by_bubble.entry(region).or_default().push(srv.tps);
            }
        }
        for (bubble, tps) in by_bubble {
            let in_force = self.registry.get(&bubble).is_some_and(|r| {
                r.site() == site && r.settled() && r.parts().len().max(1) == tps.len()
            });
            if !in_force {
                continue;
            }
            for (part, t) in tps.into_iter().enumerate().filter(|(_, t)| t.is_finite()) {
                let _ = self.mesh.handle_server_load(bubble, part, f64::from(t));
            }
        }
        self.agents.servers(site, servers.to_vec());
        self.update_capacity(site);
    }
}
