//! Within a site (SMD): split an overloaded bubble across more servers, undo the latest split.

use super::*;

impl Mesh {
    pub(super) fn balance_load(&mut self, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
        let pps = self.th.players_per_server;
        // Counted players per bubble part.
        let mut counts: Vec<Vec<u32>> = Vec::with_capacity(self.bubbles.len());
        let mut parts: Vec<Vec<Aabb>> = Vec::with_capacity(self.bubbles.len());
        for b in &self.bubbles {
            let p = b.as_ref().map(|b| b.parts()).unwrap_or_default();
            counts.push(vec![0; p.len()]);
            parts.push(p);
        }
        for (p, &slot) in self.players.iter().zip(&self.player_bubble) {
            if slot != NONE && p.role.is_counted() {
                let s = slot as usize;
                if parts[s].len() == 1 {
                    counts[s][0] += 1;
                } else {
                    let k = part_of(&parts[s], p.position);
                    counts[s][k] += 1;
                }
            }
        }
        for slot in 0..self.bubbles.len() {
            let Some(b) = self.bubbles[slot].as_mut() else {
                continue;
            };
            b.players = counts[slot].iter().sum();
            if b.stalled_since.is_some() {
                continue;
            }
            let low_tps = |i: usize| {
                b.load
                    .tps
                    .get(i)
                    .copied()
                    .flatten()
                    .is_some_and(|t| t < self.th.tps_min)
            };
            let hot = (0..counts[slot].len()).filter(|&i| counts[slot][i] > pps || low_tps(i));
            let hottest = hot.max_by_key(|&i| counts[slot][i]);
            let settled = b
                .load
                .last_change
                .is_none_or(|t| now.since(t) >= Span::from_ms(self.th.settle_ms));
            if let Some(part) = hottest {
                b.load.low_since = None;
                let since = *b.load.overloaded_since.get_or_insert(now);
                if now.since(since) < Span::from_ms(self.th.split_sustain_ms) || !settled {
                    continue;
                }
                let site = b.site;
                if !self.can_host(site, 1) {
                    continue;
                }
                let Some(cut) = self.cut_for(sc, slot as u32, &parts[slot], part) else {
                    continue;
                };
                let b = self.bubble_mut(slot as u32);
                b.cuts.push(cut);
                self.after_load_change(slot as u32, 1, LoadReason::Overload, now);
                stats.load_changes += 1;
                sc.touched.resize(self.bubbles.len(), false);
            } else if let Some(last) = b.cuts.last().copied() {
                b.load.overloaded_since = None;
                let pair = counts[slot][last.part as usize] + counts[slot][b.cuts.len()];
                if (pair as f64) > pps as f64 * self.th.merge_fill_ratio {
                    b.load.low_since = None;
                    continue;
                }
                let since = *b.load.low_since.get_or_insert(now);
                if now.since(since) < Span::from_ms(self.th.merge_low_ms) || !settled {
                    continue;
                }
                b.cuts.pop();
                self.after_load_change(slot as u32, -1, LoadReason::Underload, now);
                stats.load_changes += 1;
            } else {
                b.load.overloaded_since = None;
                b.load.low_since = None;
            }
        }
    }

    pub(super) fn after_load_change(
        &mut self,
        slot: u32,
        delta: i32,
        reason: LoadReason,
        now: Time,
    ) {
        let b = self.bubble_mut(slot);
        b.load.last_change = Some(now);
        b.load.overloaded_since = None;
        b.load.low_since = None;
        b.load.tps = vec![None; b.servers() as usize];
        let (id, site, parts) = (b.id, b.site, b.parts());
        let used = &mut self.used[site.index()];
        *used = if delta > 0 {
            *used + 1
        } else {
            used.saturating_sub(1)
        };
        self.commands.push_back(Command::Servers {
            bubble: id,
            site,
            parts,
            reason,
        });
    }

    /// Where to cut part `part` of a bubble: the widest gap between its groups (grouping radius),
    /// so that no group is ever cut. `None` if its players form one unbroken group.
    pub(super) fn cut_for(
        &self,
        sc: &Scratch,
        slot: u32,
        parts: &[Aabb],
        part: usize,
    ) -> Option<Cut> {
        let bx = parts[part];
        let members: Vec<&Player> = sc
            .members(slot)
            .iter()
            .map(|&i| &self.players[i as usize])
            .filter(|p| part_of(parts, p.position) == part)
            .collect();
        let items: Vec<Item> = members
            .iter()
            .map(|p| Item {
                world: p.world,
                pos: p.position,
                radius: self.th.scaled(self.th.group_radius_m, p.speed()),
            })
            .collect();
        let groups = Grouper::new().group(&items, self.th.group_radius_m);
        let boxes: Vec<(Aabb, u32)> = (0..groups.len())
            .map(|g| {
                let m = groups.members(g);
                let first = Aabb::point(items[m[0] as usize].pos);
                (
                    m.iter()
                        .fold(first, |b, &i| b.include(items[i as usize].pos)),
                    m.len() as u32,
                )
            })
            .collect();
        let (axis, at, _) = widest_gap(&boxes)?;
        (bx.min.axis(axis) < at && at < bx.max.axis(axis)).then_some(Cut {
            part: part as u16,
            axis: axis as u8,
            at,
        })
    }
}
