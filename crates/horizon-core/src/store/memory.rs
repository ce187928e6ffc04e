//! The store in memory, for simulations and tests: the same records and copies as the disk
//! store ([`super::Store`]), lost with the process.

use std::collections::BTreeMap;
use std::path::PathBuf;

use horizon_proto::{PlayerId, Seq};

use super::{
    CopyAt, Durable, KeptPlayers, Layout, Record, StoreError, StoreState, StoredBackup, StoredPart,
};

/// A store in memory, for simulations and tests: the same records and copies as [`Store`],
/// lost with the process. A simulated core restarted "with its disk" keeps the same one.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: StoreState,
    copies: BTreeMap<u64, Vec<u8>>,
    /// By bubble, layout and part.
    part_copies: BTreeMap<(u64, Layout, u32), Vec<u8>>,
    pinned: BTreeMap<CopyAt, (Vec<u8>, KeptPlayers)>,
}

impl MemoryStore {
    /// Forgets the parts' copies of `bubble` whose layout is no longer kept (as the disk store
    /// removes their files).
    fn forget_parts_dropped(&mut self, bubble: u64) {
        let kept = self.state.backups.get(&bubble).map(StoredBackup::layouts).unwrap_or_default();
        self.part_copies.retain(|(b, layout, _), _| *b != bubble || kept.contains(layout));
    }

    /// Persists the next generation (as [`Store::next_generation`] does) and returns it.
    pub fn next_generation(&mut self) -> u32 {
        let generation = self.state.generation + 1;
        self.state.apply(&Record::Generation { generation });
        generation
    }
}

impl Durable for MemoryStore {
    fn state(&self) -> &StoreState {
        &self.state
    }

    fn append(&mut self, record: Record) -> Result<(), StoreError> {
        self.state.apply(&record);
        Ok(())
    }

    fn put_backup(
        &mut self,
        bubble: u64,
        epoch: u64,
        tick: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        self.copies.insert(bubble, bytes.to_vec());
        self.append(Record::Backup { bubble, epoch, tick, bytes: bytes.len() as u64 })?;
        self.forget_parts_dropped(bubble);
        Ok(())
    }

    fn put_backup_part(
        &mut self,
        bubble: u64,
        epoch: u64,
        (part, parts): (u32, u32),
        tick: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        self.part_copies.insert((bubble, (epoch, parts), part), bytes.to_vec());
        let len = bytes.len() as u64;
        self.append(Record::BackupPart { bubble, epoch, part, parts, tick, bytes: len })?;
        self.forget_parts_dropped(bubble);
        Ok(())
    }

    fn backup(&self, bubble: u64) -> Option<(StoredBackup, Vec<u8>)> {
        let meta = self.state.backups.get(&bubble)?.clone();
        Some((meta, self.copies.get(&bubble)?.clone()))
    }

    fn backup_part(&self, bubble: u64, part: u32) -> Option<(StoredPart, Vec<u8>)> {
        let b = self.state.backups.get(&bubble)?;
        let meta = (*b.parts.get(part as usize)?)?;
        Some((meta, self.part_copies.get(&(bubble, b.layout()?, part))?.clone()))
    }

    fn pin_backup(&mut self, at: CopyAt, players: &[(PlayerId, Seq)]) -> Result<(), StoreError> {
        match self.backup(at.bubble.0) {
            Some((meta, bytes)) if (meta.epoch, meta.tick) == (at.epoch, at.tick) => {
                self.pinned.insert(at, (bytes, players.to_vec()));
                Ok(())
            }
            _ => Err(StoreError {
                path: PathBuf::from("memory"),
                why: "not the latest whole copy of its bubble".into(),
            }),
        }
    }

    fn unpin_backup(&mut self, at: CopyAt) {
        self.pinned.remove(&at);
    }

    fn pinned_backup(&self, at: CopyAt) -> Option<Vec<u8>> {
        self.pinned.get(&at).map(|(bytes, _)| bytes.clone())
    }

    fn pinned(&self) -> Vec<(CopyAt, KeptPlayers)> {
        self.pinned.iter().map(|(at, (_, players))| (*at, players.clone())).collect()
    }
}
