//! Within a site (SMD): a bubble's parts split and joined by the rule every region obeys
//! (`crate::split`, as the core site's zones in `zones.rs`).

use super::*;
use crate::split::{Load, MergeCounting, Uncut};

impl Mesh {
    /// Samples every part of every bubble (`weight`: this tick's sample's): a part overloaded
    /// for `split_after_samples` samples and settled is cut by SMD's rule, each such part of a
    /// bubble in the same tick (as each overloaded zone is), and its halves again while they
    /// hold more than a server takes, while its site has a server for it; with none due, the
    /// most recent cut is undone once its two halves have stayed quiet for
    /// `merge_after_samples` samples and are both settled.
    ///
    /// A cut needs a server, not a seat: an overfull part holds more players than its server
    /// seats, so the site's seats may all be taken while some of its ready servers are idle.
    /// A site has a server for one more part while it has more ready servers than its bubbles
    /// have parts (sharing servers, they may use fewer: this errs on the side of waiting for
    /// the agent's next server), or a seat free.
    pub(super) fn balance_load(
        &mut self,
        sc: &mut Scratch,
        weight: f64,
        now: Time,
        stats: &mut TickStats,
    ) {
        let mut parts_on = vec![0u32; self.sites.len()];
        for b in self.regions.bubbles() {
            parts_on[b.site.index()] += b.servers();
        }
        for slot in 0..self.regions.slots() as u32 {
            let members = sc.members(slot);
            let Some(b) = self.regions.bubble_mut(slot) else {
                continue;
            };
            let seats = b.seats();
            b.players = members.len() as u32;
            let used = &mut self.used[b.site.index()];
            *used = used.saturating_sub(seats) + b.seats();
            if b.stalled_since.is_some() {
                continue;
            }
            // Counted players per part; a bubble on one server needs no geometry.
            let n = b.servers() as usize;
            let mut counts = vec![0u32; n];
            if n == 1 {
                counts[0] = b.players;
            } else {
                for &pi in members {
                    counts[part_of(&b.kind.cuts, self.items[pi as usize].pos)] += 1;
                }
            }
            b.kind.load.parts.resize(n, Load::default());
            let due: Vec<usize> = (0..n)
                .filter(|&i| b.kind.load.parts[i].sample(counts[i], weight, now, &self.th))
                .collect();
            let site = b.site;
            let mut cut = false;
            // A part due is cut, and its halves again while they hold more than a server
            // takes: a crowd of any size is on enough servers after one split's samples.
            let mut queue = due;
            while let Some(part) = queue.pop() {
                if !self.server_for_a_part(site, parts_on[site.index()]) {
                    break;
                }
                match self.cut_part(sc, slot, part, now) {
                    Ok(halves) => {
                        cut = true;
                        parts_on[site.index()] += 1;
                        let over = halves.into_iter().filter(|h| h.1 > self.th.players_per_server);
                        queue.extend(over.map(|h| h.0));
                    }
                    Err(_) => stats.uncut += 1,
                }
            }
            if cut {
                self.bubble_mut(slot).kind.load.quiet = Default::default();
                self.load_changed(slot, LoadReason::Overload);
                stats.load_changes += 1;
                continue;
            }
            let th = &self.th;
            let Some(b) = self.regions.bubble_mut(slot) else { continue };
            let Some(last) = b.kind.cuts.last().copied() else { continue };
            let (low, high) = (last.part as usize, b.kind.cuts.len());
            let quiet = b.kind.load.quiet.sample(counts[low] + counts[high], weight, th);
            let loads = &b.kind.load.parts;
            if quiet && loads[low].settled(now, th) && loads[high].settled(now, th) {
                b.kind.cuts.pop();
                b.kind.load.parts.truncate(high);
                b.kind.load.parts[low] = Load::changed(now, counts[low] + counts[high]);
                b.kind.load.quiet = Default::default();
                self.load_changed(slot, LoadReason::Underload);
                stats.load_changes += 1;
            }
        }
    }

    /// Cuts part `part` of the bubble at `slot` by SMD's rule through its members there: the
    /// low half keeps the part's index, the high half is a new last part. Returns each half's
    /// (index, players).
    fn cut_part(
        &mut self,
        sc: &Scratch,
        slot: u32,
        part: usize,
        now: Time,
    ) -> Result<[(usize, u32); 2], Uncut> {
        let b = self.bubble(slot);
        if b.servers() as usize >= crate::split::MAX_PARTS {
            return Err(Uncut::TooManyParts);
        }
        let bounds = b.parts()[part];
        let cuts = &b.kind.cuts;
        let positions: Vec<Vec3> = sc
            .members(slot)
            .iter()
            .map(|&pi| self.items[pi as usize].pos)
            .filter(|&p| part_of(cuts, p) == part)
            .collect();
        let (axis, at) = crate::split::cut(bounds, &positions)?;
        let high = positions.iter().filter(|p| p.axis(axis) >= at).count() as u32;
        let b = self.bubble_mut(slot);
        b.kind.cuts.push(Cut { part: part as u16, axis: axis as u8, at });
        let low = positions.len() as u32 - high;
        b.kind.load.parts[part] = Load::changed(now, low);
        b.kind.load.parts.push(Load::changed(now, high));
        Ok([(part, low), (b.kind.cuts.len(), high)])
    }

    /// The bubble at `slot` is spread over other parts: its holder is told.
    fn load_changed(&mut self, slot: u32, reason: LoadReason) {
        let b = self.bubble(slot);
        let (id, site, parts) = (b.id, b.site, b.parts());
        // Seats do not change: the same players, on more servers (or fewer).
        self.commands.push_back(Command::Servers { bubble: id, site, parts, reason });
    }

    /// Counts, per site index, the regions holding more counted players than a server takes
    /// after this tick's splits and merges (read through [`Mesh::regions_over_capacity`]).
    pub(super) fn count_over_capacity(&mut self) {
        let cap = self.th.players_per_server;
        let mut over = std::mem::take(&mut self.over_capacity);
        over.clear();
        over.resize(self.sites.len(), 0);
        for (_, region) in self.regions.iter() {
            match region {
                Entry::Zone(z) => over[z.site.index()] += u32::from(z.players > cap),
                Entry::Bubble(b) => {
                    let parts = b.kind.load.parts.iter().take(b.servers() as usize);
                    over[b.site.index()] += parts.filter(|l| l.players > cap).count() as u32;
                }
            }
        }
        self.over_capacity = over;
    }

    /// Regions holding more counted players than a server takes at the last tick, per site
    /// index: the core site's zones and every bubble's parts (design.md §4). SMD's rule cuts
    /// each within `split_after_samples` samples and the settle window; one counted here
    /// longer is waiting for a server of its site, or cannot be cut ([`TickStats::uncut`]:
    /// a crowd stacked on one point, a region too thin).
    pub fn regions_over_capacity(&self) -> &[u32] {
        &self.over_capacity
    }

    /// What SMD's rule counts for zone `id` at `now` (`None`: no such zone).
    pub fn zone_counting(&self, id: BubbleId, now: Time) -> Option<crate::split::Counting> {
        let leaf = self.zones.leaf(self.regions.slot(id)?)?;
        let z = self.zone(leaf);
        let merge = self.zones.merge_partner(leaf).map(|(other, quiet)| MergeCounting {
            with: self.zone(other).id.0,
            quiet_samples: quiet.samples(),
            merge_after_samples: self.th.merge_after_samples,
        });
        let mut load = z.kind.load.clone();
        load.players = z.players;
        Some(load.counting(merge, now, &self.th))
    }

    /// What SMD's rule counts for each part of bubble `id` at `now`, in part order (`None`:
    /// no such bubble).
    pub fn bubble_counting(&self, id: BubbleId, now: Time) -> Option<Vec<crate::split::Counting>> {
        let b = self.bubble_by_id(id)?;
        let last = b.kind.cuts.last().map(|c| (c.part as usize, b.kind.cuts.len()));
        let counts = (0..b.servers() as usize).map(|i| {
            let merge = last.and_then(|(low, high)| {
                let with = if i == low {
                    high
                } else if i == high {
                    low
                } else {
                    return None;
                };
                Some(MergeCounting {
                    with: with as u64,
                    quiet_samples: b.kind.load.quiet.samples(),
                    merge_after_samples: self.th.merge_after_samples,
                })
            });
            b.part_load(i).cloned().unwrap_or_default().counting(merge, now, &self.th)
        });
        Some(counts.collect())
    }
}

impl Mesh {
    /// Whether `site`, whose bubbles have `parts` parts, has a server for one more: a seat
    /// free, or more ready servers than parts (see [`Mesh::balance_load`]). The core site's
    /// pool always grows.
    fn server_for_a_part(&self, site: SiteId, parts: u32) -> bool {
        if self.down[site.index()] {
            return false;
        }
        self.can_host(site, 1) || self.ready[site.index()].is_none_or(|ready| ready > parts)
    }
}
