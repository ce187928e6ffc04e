//! Within a site (SMD): split an overloaded bubble across more servers, undo the latest split.

use super::*;

impl Mesh {
    /// Splits a bubble whose part is overloaded (more players than a server holds, or a low tick
    /// rate) for the sustain time, through the widest gap between its groups; undoes the latest
    /// split once its two parts have stayed low long enough. A settle window follows each change.
    pub(super) fn balance_load(&mut self, sc: &mut Scratch, now: Time, stats: &mut TickStats) {
        let pps = self.th.players_per_server;
        let settle = Span::from_ms(self.th.settle_ms);
        for slot in 0..self.bubbles.len() as u32 {
            let members = sc.members(slot);
            let Some(b) = self.bubbles[slot as usize].as_mut() else {
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
            let parts = if b.kind.cuts.is_empty() { vec![] } else { b.parts() };
            let counts: Vec<u32> = if parts.is_empty() {
                vec![b.players]
            } else {
                let mut counts = vec![0; parts.len()];
                for &pi in members {
                    counts[part_of(&parts, self.items[pi as usize].pos)] += 1;
                }
                counts
            };
            let low_tps = |i: usize| {
                b.kind.load.tps.get(i).copied().flatten().is_some_and(|t| t < self.th.tps_min)
            };
            let hottest = (0..counts.len())
                .filter(|&i| counts[i] > pps || low_tps(i))
                .max_by_key(|&i| counts[i]);
            let settled = b.kind.load.last_change.is_none_or(|t| now.since(t) >= settle);
            if let Some(part) = hottest {
                b.kind.load.low_since = None;
                let since = *b.kind.load.overloaded_since.get_or_insert(now);
                if now.since(since) < Span::from_ms(self.th.split_sustain_ms) || !settled {
                    continue;
                }
                let parts = if parts.is_empty() { vec![b.bounds] } else { parts };
                if !self.can_host(self.bubble(slot).site, 1) {
                    continue;
                }
                let Some(cut) = self.cut_for(sc, slot, &parts, part) else {
                    continue;
                };
                self.bubble_mut(slot).kind.cuts.push(cut);
                self.after_load_change(slot, LoadReason::Overload, now);
                stats.load_changes += 1;
            } else if let Some(last) = b.kind.cuts.last().copied() {
                b.kind.load.overloaded_since = None;
                let pair = counts[last.part as usize] + counts[b.kind.cuts.len()];
                if (pair as f64) > pps as f64 * self.th.merge_fill_ratio {
                    b.kind.load.low_since = None;
                    continue;
                }
                let since = *b.kind.load.low_since.get_or_insert(now);
                if now.since(since) < Span::from_ms(self.th.merge_low_ms) || !settled {
                    continue;
                }
                b.kind.cuts.pop();
                self.after_load_change(slot, LoadReason::Underload, now);
                stats.load_changes += 1;
            } else {
                b.kind.load.overloaded_since = None;
                b.kind.load.low_since = None;
            }
        }
    }

    pub(super) fn after_load_change(&mut self, slot: u32, reason: LoadReason, now: Time) {
        let b = self.bubble_mut(slot);
        b.kind.load.last_change = Some(now);
        b.kind.load.overloaded_since = None;
        b.kind.load.low_since = None;
        b.kind.load.tps = vec![None; b.servers() as usize];
        let (id, site, parts) = (b.id, b.site, b.parts());
        // Seats do not change: the same players, on more servers (or fewer).
        self.commands.push_back(Command::Servers { bubble: id, site, parts, reason });
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
            .map(|&place| self.player_at(place))
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
                (m.iter().fold(first, |b, &i| b.include(items[i as usize].pos)), m.len() as u32)
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
