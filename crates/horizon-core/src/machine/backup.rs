//! The universe backup: state copies arrive from the holders in chunks, are assembled, kept
//! only from a bubble's current holder under its current epoch (fencing: an old writer's copy
//! is refused), and stored. Once a whole copy is stored, its holder's `Covers` says which input
//! of each player it includes, and the players' home gateways are told (`Covered`): they may
//! forget those inputs, a restore from this copy (or the copy kept for them, `keep.rs`) no
//! longer needs them.

use std::collections::BTreeMap;

use horizon_mesh::{SiteId, Time};
use horizon_proto::control;
use horizon_proto::{BubbleId, PlayerId, Seq};

use super::{CoreMachine, Effect};
use crate::store::{self, StoredPart};

/// Copies being assembled from their chunks, at most this many at once (beyond, one is
/// dropped: the first in key order, the lowest bubble id and epoch and tick).
const MAX_BACKUPS_IN_FLIGHT: usize = 256;
/// Largest backup accepted, in chunks.
const MAX_BACKUP_CHUNKS: u32 = 4096;
/// Players listed in one `Covers`, at most (a bubble holds far fewer).
const MAX_COVERED: usize = 65_536;
/// Bytes of chunks held for copies being assembled, every copy together: past it other copies
/// are dropped, first in key order (their holders send the next copy in a few seconds); a copy that alone
/// would exceed it is refused.
pub(crate) const MAX_ASSEMBLING_BYTES: usize = 512 << 20;

/// A state copy: bubble, epoch, tick, part (`u32::MAX` for a whole copy).
type CopyKey = (BubbleId, u64, u64, u32);

/// Copies being assembled, and the last whole copy stored per bubble.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    chunks: BTreeMap<CopyKey, Vec<Option<Vec<u8>>>>,
    /// The bytes held in `chunks`.
    bytes: usize,
    /// (epoch, tick) of each bubble's last whole copy stored.
    stored_whole: BTreeMap<BubbleId, (u64, u64)>,
}

/// What became of a chunk.
#[derive(Debug, PartialEq)]
enum Added {
    /// Its copy is whole: every chunk, in order.
    Whole(Vec<u8>),
    Waiting,
    /// Inconsistent with the chunks before it, or over the byte budget alone.
    Refused,
}

fn held_bytes(parts: &[Option<Vec<u8>>]) -> usize {
    parts.iter().flatten().map(Vec::len).sum()
}

impl Assembly {
    /// Adds chunk `index` of `total` of copy `key`, within [`MAX_BACKUPS_IN_FLIGHT`] copies and
    /// [`MAX_ASSEMBLING_BYTES`] (other copies go, first in key order).
    fn add(&mut self, key: CopyKey, index: u32, total: u32, bytes: Vec<u8>) -> Added {
        if !self.chunks.contains_key(&key) && self.chunks.len() >= MAX_BACKUPS_IN_FLIGHT {
            self.drop_first();
        }
        let parts = self.chunks.entry(key).or_insert_with(|| vec![None; total as usize]);
        if parts.len() != total as usize {
            self.remove(&key);
            return Added::Refused;
        }
        let replaced = parts[index as usize].as_ref().map_or(0, Vec::len);
        let copy_bytes = held_bytes(parts) - replaced + bytes.len();
        if copy_bytes > MAX_ASSEMBLING_BYTES {
            self.remove(&key);
            return Added::Refused;
        }
        self.bytes = self.bytes - replaced + bytes.len();
        parts[index as usize] = Some(bytes);
        while self.bytes > MAX_ASSEMBLING_BYTES {
            // Never the copy this chunk belongs to: it alone fits.
            let Some(other) = self.chunks.keys().find(|k| **k != key).copied() else { break };
            self.remove(&other);
        }
        if self.chunks[&key].iter().any(Option::is_none) {
            return Added::Waiting;
        }
        let parts = self.remove(&key).unwrap_or_default();
        Added::Whole(parts.into_iter().flatten().collect::<Vec<_>>().concat())
    }

    fn remove(&mut self, key: &CopyKey) -> Option<Vec<Option<Vec<u8>>>> {
        let parts = self.chunks.remove(key)?;
        self.bytes -= held_bytes(&parts);
        Some(parts)
    }

    fn drop_first(&mut self) {
        if let Some(&first) = self.chunks.keys().next() {
            self.remove(&first);
        }
    }
}

struct Chunk {
    lease: horizon_proto::LeaseRef,
    part: Option<(u32, u32)>,
    tick: u64,
    index: u32,
    total: u32,
    bytes: Vec<u8>,
}

impl CoreMachine {
    /// Takes one item of a holder's backup stream.
    pub(crate) fn backup(&mut self, site: SiteId, item: control::Backup, _now: Time) {
        let chunk = match item {
            control::Backup::Chunk { lease, tick, index, total, bytes } => {
                Chunk { lease, part: None, tick: tick.0, index, total, bytes: bytes.0 }
            }
            control::Backup::Part { lease, part, parts, tick, index, total, bytes } => {
                let part = Some((part, parts));
                Chunk { lease, part, tick: tick.0, index, total, bytes: bytes.0 }
            }
            control::Backup::Covers { lease, tick, acked } => {
                return self.covers(site, lease, tick.0, acked);
            }
        };
        self.chunk(site, chunk);
    }

    fn chunk(&mut self, site: SiteId, c: Chunk) {
        let bubble = c.lease.bubble;
        let current = self.registry.get(&bubble).is_some_and(|r| {
            let cut = match c.part {
                None => true,
                Some((part, parts)) => r.parts().len() == parts as usize && part < parts,
            };
            r.site() == site && r.epoch() == c.lease.epoch.0 && r.settled() && cut
        });
        if !current || c.total == 0 || c.total > MAX_BACKUP_CHUNKS || c.index >= c.total {
            self.stats.backups_refused.inc(site.index());
            return;
        }
        let key = (bubble, c.lease.epoch.0, c.tick, c.part.map_or(u32::MAX, |p| p.0));
        let bytes = match self.assembling.add(key, c.index, c.total, c.bytes) {
            Added::Whole(bytes) => bytes,
            Added::Waiting => return,
            Added::Refused => {
                self.stats.backups_refused.inc(site.index());
                return;
            }
        };
        let (epoch, tick) = (key.1, key.2);
        let stored = self.stored.get(&bubble.0);
        let newer = stored.is_none_or(|b| match c.part {
            // A whole copy after a spread one of the same epoch: the bubble is on one server again.
            None => epoch > b.epoch || (epoch == b.epoch && (!b.parts.is_empty() || tick > b.tick)),
            // A part's copy newer than the one kept of its layout, whether the layout a restore
            // reads or one being gathered (a new layout's first copy included).
            Some((part, parts)) => {
                epoch > b.epoch
                    || (epoch == b.epoch
                        && b.part_of((epoch, parts), part).is_none_or(|p| p.tick < tick))
            }
        });
        if !newer {
            return;
        }
        let len = bytes.len() as u64;
        // As the store folds the record (`StoreState::apply`): what a restore would read.
        match c.part {
            None => {
                store::put_whole(&mut self.stored, bubble.0, epoch, tick, len);
                self.assembling.stored_whole.insert(bubble, (epoch, tick));
            }
            Some((part, parts)) => {
                let stored = StoredPart { tick, bytes: len };
                store::put_part(&mut self.stored, bubble.0, (epoch, parts), part, stored);
                self.assembling.stored_whole.remove(&bubble);
            }
        }
        self.stats.backups.inc(site.index());
        self.effects.push_back(Effect::PutBackup { bubble, epoch, tick, part: c.part, bytes });
    }

    /// The holder says which inputs its last whole copy includes: tell the players' gateways.
    fn covers(
        &mut self,
        site: SiteId,
        lease: horizon_proto::LeaseRef,
        tick: u64,
        acked: Vec<(PlayerId, Seq)>,
    ) {
        let bubble = lease.bubble;
        let stored = self.assembling.stored_whole.get(&bubble) == Some(&(lease.epoch.0, tick));
        let Some(reg) = self.registry.get(&bubble) else { return };
        if !stored
            || reg.site() != site
            || reg.epoch() != lease.epoch.0
            || acked.len() > MAX_COVERED
        {
            return;
        }
        let at = super::CopyAt { bubble, epoch: lease.epoch.0, tick };
        tracing::debug!(
            bubble = bubble.0,
            epoch = lease.epoch.0,
            tick,
            ?acked,
            "a whole copy covers"
        );
        for pin in self.keep.covered(at, &acked) {
            self.effects.push_back(match pin {
                super::keep::Pin::Keep(at) => Effect::PinBackup { at, players: acked.clone() },
                super::keep::Pin::Release(at) => Effect::UnpinBackup { at },
            });
        }
        // Members this copy holds with fewer of their inputs than a copy kept for them: their
        // state went back (it never crossed in, or crossed from a copy older than what they
        // were told): they adopt it from that copy (seed 9014480).
        for (from, players) in self.keep.behind(at, &acked) {
            let players: Vec<PlayerId> =
                players.into_iter().filter(|p| reg.members().contains_key(p)).collect();
            if !players.is_empty() {
                let adopt = super::Adoption { bubble, epoch: at.epoch, from, players };
                self.effects.push_back(Effect::ReadPinned { adopt });
            }
        }
        let mut per_gateway: BTreeMap<SiteId, Vec<control::CoveredInput>> = BTreeMap::new();
        for (player, seq) in acked {
            if let Some(&gateway) = reg.members().get(&player) {
                per_gateway.entry(gateway).or_default().push(control::CoveredInput { player, seq });
            }
        }
        for (gateway, players) in per_gateway {
            self.order(gateway, control::Request::Covered { players });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(bubble: u64, tick: u64) -> CopyKey {
        (BubbleId(bubble), 1, tick, u32::MAX)
    }

    #[test]
    fn a_copy_over_the_budget_alone_is_refused_and_other_copies_make_room_for_the_one_growing() {
        let mut a = Assembly::default();
        let mib = 1 << 20;
        // Copy 1: all but its last chunk, 400 MiB.
        for i in 0..400 {
            assert_eq!(a.add(key(1, 1), i, 401, vec![0; mib]), Added::Waiting);
        }
        // Copy 2 (another bubble) grows past the budget: copy 1 goes.
        for i in 0..200 {
            assert_eq!(a.add(key(2, 1), i, 201, vec![0; mib]), Added::Waiting);
        }
        assert!(a.bytes <= MAX_ASSEMBLING_BYTES, "{} bytes held", a.bytes);
        assert!(!a.chunks.contains_key(&key(1, 1)), "the other copy was dropped");
        match a.add(key(2, 1), 200, 201, vec![1; 10]) {
            Added::Whole(bytes) => assert_eq!(bytes.len(), 200 * mib + 10),
            other => panic!("{other:?}"),
        }
        assert_eq!(a.bytes, 0);
        // One copy larger than the whole budget: refused, nothing held.
        let chunks = (MAX_ASSEMBLING_BYTES / mib) as u32 + 2;
        let refused = (0..chunks)
            .map(|i| a.add(key(3, 1), i, chunks, vec![0; mib]))
            .any(|r| r == Added::Refused);
        assert!(refused);
        assert!(a.bytes <= MAX_ASSEMBLING_BYTES);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever chunks arrive (repeated, out of order, inconsistent totals), the bytes held
        /// are what the copies hold, within the budget and the count of copies.
        #[test]
        fn the_bytes_held_are_counted_exactly_and_stay_within_the_budget(
            chunks in prop::collection::vec((0u64..6, 0u64..3, 0u32..8, 1u32..8, 0usize..(64 << 20)), 1..80),
        ) {
            let mut a = Assembly::default();
            for (bubble, tick, index, total, size) in chunks {
                if index >= total {
                    continue;
                }
                let _ = a.add(key(bubble, tick), index, total, vec![0; size]);
                let held: usize = a.chunks.values().map(|p| held_bytes(p)).sum();
                prop_assert_eq!(held, a.bytes);
                prop_assert!(a.bytes <= MAX_ASSEMBLING_BYTES);
                prop_assert!(a.chunks.len() <= MAX_BACKUPS_IN_FLIGHT);
            }
        }
    }
}
