//! The universe backup: state copies arrive from the holders in chunks, are assembled, kept
//! only from a bubble's current holder under its current epoch (fencing: an old writer's copy
//! is refused), and stored. Once a whole copy is stored, its holder's `Covers` says which input
//! of each player it includes, and the players' home gateways are told (`Covered`): they may
//! forget those inputs, a restore from this copy no longer needs them.

use std::collections::BTreeMap;

use horizon_mesh::{SiteId, Time};
use horizon_proto::control;
use horizon_proto::{BubbleId, PlayerId, Seq};

use super::{CoreMachine, Effect};
use crate::store::{StoredBackup, StoredPart};

/// Copies being assembled from their chunks, at most this many at once (oldest dropped).
const MAX_BACKUPS_IN_FLIGHT: usize = 256;
/// Largest backup accepted, in chunks.
const MAX_BACKUP_CHUNKS: u32 = 4096;
/// Players listed in one `Covers`, at most (a bubble holds far fewer).
const MAX_COVERED: usize = 65_536;

/// A state copy: bubble, epoch, tick, part (`u32::MAX` for a whole copy).
type CopyKey = (BubbleId, u64, u64, u32);

/// Copies being assembled, and the last whole copy stored per bubble.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    chunks: BTreeMap<CopyKey, Vec<Option<Vec<u8>>>>,
    /// (epoch, tick) of each bubble's last whole copy stored.
    stored_whole: BTreeMap<BubbleId, (u64, u64)>,
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
                Some((part, parts)) => r.parts.len() == parts as usize && part < parts,
            };
            r.site == site && r.epoch == c.lease.epoch.0 && r.settled() && cut
        });
        if !current || c.total == 0 || c.total > MAX_BACKUP_CHUNKS || c.index >= c.total {
            self.metrics.backups_refused.inc(site.index());
            return;
        }
        let assembling = &mut self.assembling.chunks;
        let key = (bubble, c.lease.epoch.0, c.tick, c.part.map_or(u32::MAX, |p| p.0));
        if !assembling.contains_key(&key) && assembling.len() >= MAX_BACKUPS_IN_FLIGHT {
            assembling.pop_first();
        }
        let parts = assembling.entry(key).or_insert_with(|| vec![None; c.total as usize]);
        if parts.len() != c.total as usize {
            assembling.remove(&key);
            self.metrics.backups_refused.inc(site.index());
            return;
        }
        parts[c.index as usize] = Some(c.bytes);
        if parts.iter().any(Option::is_none) {
            return;
        }
        let bytes: Vec<u8> =
            assembling.remove(&key).unwrap_or_default().into_iter().flatten().flatten().collect();
        let (epoch, tick) = (key.1, key.2);
        let stored = self.stored.get(&bubble.0);
        let newer = stored.is_none_or(|b| match c.part {
            // A whole copy after a spread one of the same epoch: the bubble is on one server again.
            None => epoch > b.epoch || (epoch == b.epoch && (!b.parts.is_empty() || tick > b.tick)),
            Some((part, parts)) => {
                epoch > b.epoch
                    || (epoch == b.epoch
                        && (b.parts.len() != parts as usize
                            || b.parts[part as usize].is_none_or(|p| p.tick < tick)))
            }
        });
        if !newer {
            return;
        }
        let len = bytes.len() as u64;
        match c.part {
            None => {
                let b = StoredBackup { epoch, tick, bytes: len, parts: Vec::new() };
                self.stored.insert(bubble.0, b);
                self.assembling.stored_whole.insert(bubble, (epoch, tick));
            }
            Some((part, parts)) => {
                let (n, i) = (parts as usize, part as usize);
                let b = self.stored.entry(bubble.0).or_insert_with(|| StoredBackup {
                    epoch,
                    tick: 0,
                    bytes: 0,
                    parts: Vec::new(),
                });
                if b.epoch != epoch || b.parts.len() != n {
                    *b = StoredBackup { epoch, tick: 0, bytes: 0, parts: vec![None; n] };
                }
                b.parts[i] = Some(StoredPart { tick, bytes: len });
                b.tick = b.parts.iter().flatten().map(|p| p.tick).max().unwrap_or(0);
                b.bytes = b.parts.iter().flatten().map(|p| p.bytes).sum();
                self.assembling.stored_whole.remove(&bubble);
            }
        }
        self.metrics.backups.inc(site.index());
        self.effects.push_back(Effect::PutBackup { bubble, epoch, tick, part: c.part, bytes });
    }

    /// The holder says which inputs its last whole copy includes: tell the players' homes.
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
        if !stored || reg.site != site || reg.epoch != lease.epoch.0 || acked.len() > MAX_COVERED {
            return;
        }
        let mut per_home: BTreeMap<SiteId, Vec<control::CoveredInput>> = BTreeMap::new();
        for (player, seq) in acked {
            if let Some(&home) = reg.members.get(&player) {
                per_home.entry(home).or_default().push(control::CoveredInput { player, seq });
            }
        }
        for (home, players) in per_home {
            self.order(home, control::Request::Covered { players });
        }
    }
}
