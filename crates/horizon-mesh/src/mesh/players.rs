//! Players in and out (design.md §2): a join, an update, the home the measure stage found, a
//! departure; each checked first (a refused input leaves the mesh unchanged), and what the tick
//! reads of a player kept up to date with it.

use super::*;

impl Mesh {
    /// A player connected to a site's gateway.
    pub fn handle_join(&mut self, join: PlayerJoin) -> Result<(), InputError> {
        if self.player_index.contains_key(&join.id) {
            return Err(InputError::DuplicatePlayer(join.id));
        }
        if join.gateway.index() >= self.sites.len() {
            return Err(InputError::UnknownSite(join.gateway.index()));
        }
        check_rtt(join.access_rtt_ms)?;
        self.check_position(join.position)?;
        check_vec("velocity", join.velocity)?;
        let (i, place) = (self.players.len() as u32, self.items.len() as u32);
        self.player_index.insert(join.id, i);
        let player = Player::from_join(&join);
        let (item, member) = self.describe_player(&player);
        self.place_of.push(place);
        self.player_at.push(i);
        self.items.push(item);
        self.members.push(member);
        self.npc.push(!player.role.is_counted());
        self.npcs += usize::from(!player.role.is_counted());
        self.players.push(player);
        self.player_bubble.push(NONE);
        self.changed_flag.push(false);
        self.mark_changed(place as usize);
        self.fresh.push(true);
        self.fresh_count += 1;
        // A counted player's world gets its zone; an NPC's does not (NPCs never change an
        // outcome: not even which world's zone opens first).
        if self.players[i as usize].role.is_counted() {
            self.open_world(join.world);
        }
        Ok(())
    }

    /// A player changed (position, velocity, role, world, or a new access RTT sample).
    pub fn handle_update(&mut self, id: PlayerId, update: &PlayerUpdate) -> Result<(), InputError> {
        let &i = self.player_index.get(&id).ok_or(InputError::UnknownPlayer(id))?;
        if let Some(r) = update.access_rtt_ms {
            check_rtt(r)?;
        }
        if let Some(p) = update.position {
            self.check_position(p)?;
        }
        if let Some(v) = update.velocity {
            check_vec("velocity", v)?;
        }
        let (i, place) = (i as usize, self.place_of[i as usize] as usize);
        self.players[i].apply(update);
        (self.items[place], self.members[place]) = self.describe_player(&self.players[i]);
        let npc = !self.players[i].role.is_counted();
        self.npcs = self.npcs + usize::from(npc) - usize::from(self.npc[place]);
        self.npc[place] = npc;
        self.mark_changed(place);
        if !npc && (update.world.is_some() || update.role.is_some()) {
            self.open_world(self.players[i].world);
        }
        Ok(())
    }

    /// The measure stage found `id`'s home: `home`, the site of lowest RTT in the probe table
    /// their gateway believed (design.md §8, stage 1). Fixed for the session once measured: the
    /// same home again (a table sent again to a core) changes nothing, another is refused.
    /// Only figures read a home: placement keeps measuring every site from the player's
    /// gateway, so a client's claims about other sites never move anyone.
    pub fn handle_measured_home(&mut self, id: PlayerId, home: SiteId) -> Result<(), InputError> {
        let &i = self.player_index.get(&id).ok_or(InputError::UnknownPlayer(id))?;
        if home.index() >= self.sites.len() {
            return Err(InputError::UnknownSite(home.index()));
        }
        let player = &mut self.players[i as usize];
        if player.home_measured && player.home != home {
            return Err(InputError::HomeFixed { player: id, home: player.home.index() });
        }
        (player.home, player.home_measured) = (home, true);
        Ok(())
    }

    /// A player disconnected.
    pub fn handle_leave(&mut self, id: PlayerId) -> Result<(), InputError> {
        let i = self.player_index.remove(&id).ok_or(InputError::UnknownPlayer(id))? as usize;
        let place = self.place_of[i] as usize;
        // The last player record takes its index...
        self.players.swap_remove(i);
        self.place_of.swap_remove(i);
        if let Some(moved) = self.players.get(i) {
            self.player_index.insert(moved.id, i as u32);
            self.player_at[self.place_of[i] as usize] = i as u32;
        }
        // ... and the player at the last place takes its place.
        self.player_at.swap_remove(place);
        self.items.swap_remove(place);
        self.members.swap_remove(place);
        self.npcs -= usize::from(self.npc.swap_remove(place));
        self.player_bubble.swap_remove(place);
        self.changed_flag.swap_remove(place);
        self.fresh.swap_remove(place);
        if place < self.player_at.len() {
            self.place_of[self.player_at[place] as usize] = place as u32;
            // Always listed, even if its flag says it is: that was for its old place.
            self.changed_flag[place] = true;
            self.changed.push(place as u32);
        }
        Ok(())
    }

    pub(super) fn weight(&self, p: &Player) -> f64 {
        self.th.weights.of(p.role)
    }

    /// Lists the player at `place` as changed since the last tick (once).
    pub(super) fn mark_changed(&mut self, place: usize) {
        if !self.changed_flag[place] {
            self.changed_flag[place] = true;
            self.changed.push(place as u32);
        }
    }

    /// A player as grouping and scoring read it.
    pub(super) fn describe_player(&self, p: &Player) -> (Item, units::Member) {
        let speed = if p.velocity == Vec3::ZERO { 0.0 } else { p.speed() };
        let radius = self.th.scaled(self.th.merge_distance_m, speed);
        let member = units::Member {
            id: p.id,
            gateway: p.gateway,
            access_ms: p.access_rtt_min_ms,
            weight: self.weight(p),
        };
        (Item { world: p.world, pos: p.position, radius }, member)
    }

    /// Finite, and within the grouping grid's range for the smallest grouping distance.
    pub(super) fn check_position(&self, p: Vec3) -> Result<(), InputError> {
        check_vec("position", p)?;
        let limit = self.th.position_limit_m();
        match [p.x, p.y, p.z].into_iter().find(|c| c.abs() > limit) {
            Some(value) => Err(InputError::PositionOutOfRange { value, limit }),
            None => Ok(()),
        }
    }
}

fn check_rtt(ms: f64) -> Result<(), InputError> {
    if ms.is_finite() && ms >= 0.0 {
        Ok(())
    } else {
        Err(InputError::BadNumber { field: "access_rtt_ms", value: ms, extra: " and >= 0" })
    }
}

fn check_vec(field: &'static str, v: Vec3) -> Result<(), InputError> {
    if v.is_finite() {
        Ok(())
    } else {
        let bad = [v.x, v.y, v.z].into_iter().find(|c| !c.is_finite()).unwrap_or(f64::NAN);
        Err(InputError::BadNumber { field, value: bad, extra: "" })
    }
}
