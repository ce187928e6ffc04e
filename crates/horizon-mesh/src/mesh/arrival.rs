//! At connection (design.md §4): a player who spawns inside a bubble plays in it at once, and
//! a player alone at their spawn gets a bubble on their home site at once, with no handover at
//! all, instead of waiting up to a tick for one.

use super::*;

impl Mesh {
    /// Places a player who just connected ([`Mesh::handle_join`]; call it once every player
    /// who arrived together has joined, so that friends joining at once see each other):
    ///
    /// - spawned inside a running bubble's box: they enter that bubble now (a
    ///   [`Command::Enter`] with no previous site), since it simulates that space already;
    /// - else alone — nobody counted within the larger of the two grouping radii (as grouping
    ///   links players), no bubble's box meeting the box they would claim — and with a seat on
    ///   their home site: a bubble around them there now (a [`Command::Create`] with reason
    ///   `Join` and no previous site); under [`Placement::AllCore`] (SMD) and
    ///   [`Placement::Fixed`] (where a delegation's region is entered as any bubble) they play
    ///   in their zone instead, and so do the core site's players under [`Placement::Smdg`]
    ///   (bubbles are carved out of the zones only for groups placed off the core site);
    /// - otherwise (someone near, a stalled bubble, no seat, already placed, unknown) the next
    ///   tick places them, as after [`Mesh::handle_join`] alone.
    pub fn place_arrival(&mut self, id: PlayerId, now: Time) {
        self.now_hint = self.now_hint.max(now);
        let Some(&i) = self.player_index.get(&id) else { return };
        let place = self.place_of[i as usize] as usize;
        if self.npc[place] || self.player_bubble[place] != NONE {
            return;
        }
        let gateway = self.players[i as usize].gateway;
        let item = self.items[place];
        let inside = (0..self.regions.slots() as u32).find(|&s| {
            self.regions
                .bubble(s)
                .is_some_and(|b| b.world == item.world && b.bounds.contains(item.pos))
        });
        if let Some(slot) = inside {
            if self.bubble(slot).stalled_since.is_some() {
                // Nobody simulates it now: the tick places them.
                return;
            }
            self.player_bubble[place] = slot;
            let b = self.bubble(slot);
            let (bubble, site) = (b.id, b.site);
            self.commands.push_back(Command::Enter {
                bubble,
                site,
                from_site: None,
                players: vec![id],
            });
            return;
        }
        let near = self.items.iter().enumerate().any(|(q, other)| {
            q != place
                && !self.npc[q]
                && other.world == item.world
                && item.pos.dist_sq(other.pos) <= item.radius.max(other.radius).powi(2)
        });
        if near {
            return;
        }
        // The claim a lone member makes at a tick: their position grown by their border margin.
        let margin = item.radius + self.th.border_margin_m - self.th.merge_distance_m;
        let bounds = Aabb::point(item.pos).expand(margin);
        if self.bubbles().any(|b| b.world == item.world && b.bounds.overlaps(&bounds)) {
            return;
        }
        let site = match self.placement {
            // SMD: they play in the zone around them.
            Placement::AllCore => return,
            // Fixed delegations: a delegation's region is a bubble of its own, entered above
            // when it runs; outside one (or before it runs), the zone around them.
            Placement::Fixed => return,
            // SMD-G: a player who entered at the core site plays in the zone around them; a
            // bubble is carved only for a group placed off the core site.
            Placement::Smdg if gateway == self.sites.core() => return,
            _ => gateway,
        };
        if !self.can_host(site, 1) {
            return;
        }
        let hysteresis = Hysteresis::default();
        let Some((slot, epoch)) = self.insert_bubble(site, item.world, bounds, 1, now, hysteresis)
        else {
            return;
        };
        self.player_bubble[place] = slot;
        let bubble = self.bubble(slot).id;
        self.commands.push_back(Command::Create {
            bubble,
            site,
            previous_site: None,
            world: item.world,
            bounds,
            epoch,
            players: vec![id],
            reason: CreateReason::Join,
        });
    }
}
