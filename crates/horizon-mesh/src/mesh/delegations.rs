//! The fixed stage's delegations in the brain (`delegation.rs` has the configuration): each
//! delegation is one region, a bubble with the delegation's box on its site. Checked and set
//! here, created here at the tick, and its players' units joined into one here; the tick's
//! other passes treat it as any bubble, kept whatever the scoring says.

use super::units::{Claim, sweep_claims};
use super::*;

impl Mesh {
    /// The delegations [`Placement::Fixed`] places by (`[[delegations]]`), checked: every
    /// problem is returned and nothing is changed.
    pub fn set_delegations(
        &mut self,
        delegations: Vec<crate::Delegation>,
    ) -> Result<(), Vec<ConfigError>> {
        let limit = self.th.position_limit_m();
        crate::validate_delegations(&delegations, self.sites.core(), limit)?;
        if let Some(i) = delegations.iter().position(|d| d.site.index() >= self.sites.len()) {
            let why = "it names a site the mesh does not have".to_owned();
            return Err(vec![ConfigError::BadDelegation { index: i, why }]);
        }
        self.delegations = delegations;
        Ok(())
    }

    /// The delegation whose region bubble `slot` is, under [`Placement::Fixed`]: the one whose
    /// world and box it has.
    pub(super) fn delegation_of_slot(&self, slot: u32) -> Option<usize> {
        if self.placement != Placement::Fixed {
            return None;
        }
        let b = self.regions.bubble(slot)?;
        let limit = self.th.position_limit_m();
        self.delegations.iter().position(|d| d.world == b.world && d.region(limit) == b.bounds)
    }

    /// The fixed delegation whose region `bubble` is, if it is one (under
    /// [`Placement::Fixed`]): its box is the delegation's, not one grown around players.
    pub fn delegation_of(&self, bubble: BubbleId) -> Option<&crate::Delegation> {
        let slot = self.regions.slot(bubble)?;
        self.delegation_of_slot(slot).map(|d| &self.delegations[d])
    }

    /// Per delegation, the slot of its bubble (`NONE`: it has none now).
    pub(super) fn delegation_slots(&self) -> Vec<u32> {
        let mut slots = vec![NONE; self.delegations.len()];
        for slot in 0..self.regions.slots() as u32 {
            if let Some(d) = self.delegation_of_slot(slot) {
                slots[d] = slot;
            }
        }
        slots
    }

    /// The site of the delegation unit `c` plays under, if it plays under one.
    pub(super) fn unit_site(&self, sc: &Scratch, c: usize) -> Option<SiteId> {
        match sc.unit_delegation.get(c).copied().unwrap_or(NONE) {
            NONE => None,
            d => Some(self.delegations[d as usize].site),
        }
    }

    /// Under fixed delegations: each delegation with no bubble gets its region on its site as
    /// soon as the site has a server for it, with nobody in it yet (players inside its box
    /// enter it at the next tick); a delegation with no bubble on its site is counted waiting.
    pub(super) fn open_delegations(&mut self, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
        if self.placement != Placement::Fixed {
            return;
        }
        let limit = self.th.position_limit_m();
        for (d, slot) in self.delegation_slots().into_iter().enumerate() {
            let delegation = self.delegations[d];
            if slot != NONE {
                stats.delegations_waiting += u32::from(self.bubble(slot).site != delegation.site);
                continue;
            }
            let (site, world, bounds) =
                (delegation.site, delegation.world, delegation.region(limit));
            let clear = !self.bubbles().any(|b| b.world == world && b.bounds.overlaps(&bounds));
            let created = match clear && self.can_host(site, 1) {
                true => self.insert_bubble(site, world, bounds, 0, now, Hysteresis::default()),
                false => None,
            };
            let Some((slot, epoch)) = created else {
                stats.delegations_waiting += 1;
                continue;
            };
            let bubble = self.bubble(slot).id;
            self.commands.push_back(Command::Create {
                bubble,
                site,
                previous_site: None,
                world,
                bounds,
                epoch,
                players: Vec::new(),
                reason: CreateReason::Delegation,
            });
            Self::mark_touched(sc, slot);
            stats.created += 1;
        }
    }

    /// Under fixed delegations: joins every unit playing under a delegation (its box's centre
    /// in the delegation's region) into one unit, which claims the delegation's region and,
    /// above any other claim, the delegation's bubble (so it keeps it, and absorbs whatever
    /// other bubbles its players were in). Leaves each unit's delegation in
    /// `sc.unit_delegation`, and the units' claims swept again for [`Mesh::settle_bounds`].
    pub(super) fn join_delegated(&self, sc: &mut Scratch) {
        let n = sc.units.len();
        let of: Vec<u32> = (0..n)
            .map(|u| {
                let e = &sc.extents[u];
                let d = self.delegations.iter().position(|d| d.holds(e.world, &e.bounds));
                d.map_or(NONE, |d| d as u32)
            })
            .collect();
        let mut first = vec![NONE; self.delegations.len()];
        let root: Vec<u32> = (0..n as u32)
            .map(|u| match of[u as usize] {
                NONE => u,
                d => {
                    let f = &mut first[d as usize];
                    if *f == NONE {
                        *f = u;
                    }
                    *f
                }
            })
            .collect();
        let units = std::mem::take(&mut sc.units);
        let unit_of;
        (sc.units, unit_of) = self.join_clusters(&units, &root, sc);
        sc.unit_delegation.clear();
        sc.unit_delegation.resize(sc.units.len(), NONE);
        for (u, &d) in of.iter().enumerate() {
            sc.unit_delegation[unit_of[u] as usize] = d;
        }
        // Each delegation's unit claims its region, and its bubble above anything else.
        let (limit, slots) = (self.th.position_limit_m(), self.delegation_slots());
        let mut claims: Vec<Claim> = Vec::with_capacity(sc.claims.len() + first.len());
        let mut claim_start = Vec::with_capacity(sc.units.len() + 1);
        for u in 0..sc.units.len() {
            let first_claim = claims.len();
            claim_start.push(first_claim as u32);
            claims.extend_from_slice(
                &sc.claims[sc.claim_start[u] as usize..sc.claim_start[u + 1] as usize],
            );
            let d = sc.unit_delegation[u];
            if d == NONE {
                continue;
            }
            let region = self.delegations[d as usize].region(limit);
            let e = &mut sc.extents[u];
            // A box that is not the region is reset to it (`settle_bounds` reads the alert box).
            (e.claim, e.alert) = (region, region);
            let slot = slots[d as usize];
            if slot == NONE {
                continue;
            }
            let above = Claim { slot, weight: f64::INFINITY, min_id: PlayerId(0), count: 0 };
            match claims[first_claim..].iter_mut().find(|c| c.slot == slot) {
                Some(c) => c.weight = f64::INFINITY,
                None => claims.push(above),
            }
        }
        claim_start.push(claims.len() as u32);
        (sc.claims, sc.claim_start) = (claims, claim_start);
        sc.claims_order.clear();
        sc.claims_order.extend(sc.sweep.sorted_ids().map(|c| unit_of[c as usize]));
        sweep_claims(&sc.extents, &mut sc.sweep, &mut sc.pairs, &sc.claims_order);
    }
}
