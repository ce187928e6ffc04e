//! The store on the core's own volume: the ownership log as an append-only file of
//! checksummed JSON lines, each `fsync`ed before it counts, folded into a snapshot now and then
//! and locked against a second core; and, whatever holds the log (this file, or etcd), the
//! copies as files beside it (`backups/`, `pinned/`).

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use horizon_proto::{BubbleId, PlayerId, Seq};

use super::{
    CopyAt, Durable, KeptPlayers, Layout, Record, StoreError, StoreState, StoredBackup, StoredPart,
};

/// Records in the log before it is folded into the snapshot.
const COMPACT_AFTER: usize = 10_000;

impl Durable for Store {
    fn state(&self) -> &StoreState {
        &self.state
    }

    /// Writes one record and waits for it to be on disk.
    fn append(&mut self, record: Record) -> Result<(), StoreError> {
        let compact = match &mut self.log {
            Log::File { file, since_snapshot, .. } => {
                let path = self.dir.join("log.jsonl");
                let fail = |e: &dyn std::fmt::Display| StoreError {
                    path: path.clone(),
                    why: e.to_string(),
                };
                let line = encode_line(&record).map_err(|e| fail(&e))?;
                file.write_all(line.as_bytes()).map_err(|e| fail(&e))?;
                file.sync_data().map_err(|e| fail(&e))?;
                *since_snapshot += 1;
                *since_snapshot >= COMPACT_AFTER
            }
            #[cfg(feature = "etcd")]
            Log::Etcd(log) => {
                log.append(&self.state, &record)?;
                false
            }
        };
        self.state.apply(&record);
        if compact {
            self.compact()?;
        }
        Ok(())
    }

    /// Keeps `bytes` as the latest copy of `bubble` (the caller checked the epoch is current).
    fn put_backup(
        &mut self,
        bubble: u64,
        epoch: u64,
        tick: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let path = self.dir.join("backups").join(format!("{bubble}.bin"));
        write_atomic(&path, bytes)?;
        let before = self.layouts_of(bubble);
        self.append(Record::Backup { bubble, epoch, tick, bytes: bytes.len() as u64 })?;
        self.remove_parts_dropped(bubble, &before);
        Ok(())
    }

    /// Keeps `bytes` as the latest copy of part `part` of `bubble`, spread over `parts` servers
    /// (the caller checked the epoch is current), in a file named by its layout: a new layout's
    /// copies never overwrite those of the layout a restore reads until they are all here.
    /// The files of a layout no longer kept are removed.
    fn put_backup_part(
        &mut self,
        bubble: u64,
        epoch: u64,
        (part, parts): (u32, u32),
        tick: u64,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        write_atomic(&self.part_path(bubble, (epoch, parts), part), bytes)?;
        let before = self.layouts_of(bubble);
        let len = bytes.len() as u64;
        self.append(Record::BackupPart { bubble, epoch, part, parts, tick, bytes: len })?;
        self.remove_parts_dropped(bubble, &before);
        Ok(())
    }

    /// The latest copy of `bubble`, if any.
    fn backup(&self, bubble: u64) -> Option<(StoredBackup, Vec<u8>)> {
        let meta = self.state.backups.get(&bubble)?.clone();
        let bytes = fs::read(self.dir.join("backups").join(format!("{bubble}.bin"))).ok()?;
        Some((meta, bytes))
    }

    fn backup_part(&self, bubble: u64, part: u32) -> Option<(StoredPart, Vec<u8>)> {
        let b = self.state.backups.get(&bubble)?;
        let meta = (*b.parts.get(part as usize)?)?;
        Some((meta, fs::read(self.part_path(bubble, b.layout()?, part)).ok()?))
    }

    /// A hard link to the copy's file, under `pinned/`: a newer copy replaces the file by a
    /// rename, which leaves the linked bytes as they were. Its players beside it, in JSON.
    fn pin_backup(&mut self, at: CopyAt, players: &[(PlayerId, Seq)]) -> Result<(), StoreError> {
        let latest = self.state.backups.get(&at.bubble.0).map(|b| (b.epoch, b.tick, b.parts.len()));
        let path = self.pinned_path(at, "bin");
        if latest != Some((at.epoch, at.tick, 0)) {
            let why = "not the latest whole copy of its bubble".to_owned();
            return Err(StoreError { path, why });
        }
        let fail = |path: &Path, e: &dyn std::fmt::Display| StoreError {
            path: path.to_owned(),
            why: e.to_string(),
        };
        let list = self.pinned_path(at, "players.json");
        let json = serde_json::to_vec(players).map_err(|e| fail(&list, &e))?;
        fs::write(&list, json).map_err(|e| fail(&list, &e))?;
        let from = self.dir.join("backups").join(format!("{}.bin", at.bubble.0));
        let _ = fs::remove_file(&path);
        fs::hard_link(&from, &path).map_err(|e| fail(&path, &e))
    }

    fn unpin_backup(&mut self, at: CopyAt) {
        let _ = fs::remove_file(self.pinned_path(at, "bin"));
        let _ = fs::remove_file(self.pinned_path(at, "players.json"));
    }

    fn pinned_backup(&self, at: CopyAt) -> Option<Vec<u8>> {
        fs::read(self.pinned_path(at, "bin")).ok()
    }

    /// Each `B.E.T.bin` with its `B.E.T.players.json` (a pair missing either is skipped).
    fn pinned(&self) -> Vec<(CopyAt, KeptPlayers)> {
        let Ok(dir) = fs::read_dir(self.dir.join("pinned")) else { return Vec::new() };
        let mut out = Vec::new();
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".players.json")) else {
                continue;
            };
            let mut parts = stem.split('.').map(str::parse::<u64>);
            let (Some(Ok(bubble)), Some(Ok(epoch)), Some(Ok(tick)), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let at = CopyAt { bubble: BubbleId(bubble), epoch, tick };
            let players = fs::read(entry.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Vec<(PlayerId, Seq)>>(&b).ok());
            if let Some(players) = players
                && self.pinned_path(at, "bin").exists()
            {
                out.push((at, players));
            }
        }
        out.sort_by_key(|(at, _)| *at);
        out
    }
}

impl Store {
    /// `backups/B.E.N.partI.bin`: part `I` of bubble `B`'s copies spread over `N` servers
    /// under epoch `E`.
    fn part_path(&self, bubble: u64, (epoch, parts): Layout, part: u32) -> PathBuf {
        self.dir.join("backups").join(format!("{bubble}.{epoch}.{parts}.part{part}.bin"))
    }

    fn layouts_of(&self, bubble: u64) -> Vec<Layout> {
        self.state.backups.get(&bubble).map(StoredBackup::layouts).unwrap_or_default()
    }

    /// Removes the parts' files of the layouts of `bubble` kept `before` a record and no
    /// longer kept (replaced by a complete newer layout or a whole copy, or a layout being
    /// gathered that a newer one replaced). A file left behind (a crash in between) only
    /// takes room.
    fn remove_parts_dropped(&self, bubble: u64, before: &[Layout]) {
        let now = self.layouts_of(bubble);
        for &layout in before.iter().filter(|l| !now.contains(l)) {
            for part in 0..layout.1 {
                let _ = fs::remove_file(self.part_path(bubble, layout, part));
            }
        }
    }

    fn pinned_path(&self, at: CopyAt, ext: &str) -> PathBuf {
        let name = format!("{}.{}.{}.{ext}", at.bubble.0, at.epoch, at.tick);
        self.dir.join("pinned").join(name)
    }
}

/// The open store.
#[derive(Debug)]
pub struct Store {
    /// The copies, and the file log's files.
    dir: PathBuf,
    log: Log,
    state: StoreState,
}

/// Where the ownership records go.
#[derive(Debug)]
enum Log {
    /// `log.jsonl` in the store's directory, folded into `snapshot.json` now and then.
    File {
        file: File,
        since_snapshot: usize,
        /// Held (an exclusive file lock on `LOCK`) while the store is open: two cores never
        /// share it.
        _lock: File,
    },
    /// etcd, each record a transaction guarded by this core's leadership (`etcd.rs`). No file
    /// lock: the leadership is the lock, and the directory may be shared with a standby.
    #[cfg(feature = "etcd")]
    Etcd(Box<super::etcd::EtcdLog>),
}

/// One log line: the record's JSON after the CRC-32 of that JSON (8 hex digits and a space).
fn encode_line(record: &Record) -> Result<String, serde_json::Error> {
    let json = serde_json::to_string(record)?;
    Ok(format!("{:08x} {json}\n", crc32fast::hash(json.as_bytes())))
}

/// A log line back into its record. Lines of older builds are plain JSON (no checksum).
fn decode_line(line: &str) -> Result<Record, String> {
    let line = line.trim_end_matches('\n');
    let json = match line.split_once(' ') {
        Some((crc, json)) if crc.len() == 8 && !line.starts_with('{') => {
            let want = u32::from_str_radix(crc, 16).map_err(|_| "bad checksum field".to_owned())?;
            if crc32fast::hash(json.as_bytes()) != want {
                return Err("checksum mismatch".into());
            }
            json
        }
        _ if line.starts_with('{') => line,
        _ => return Err("not a record".into()),
    };
    serde_json::from_str(json).map_err(|e| e.to_string())
}

impl Store {
    /// Opens (or creates) the store in `dir` and recovers its state. A torn last record (a
    /// crash mid-write) is dropped; any other unreadable or corrupt record (checksum) is an
    /// error naming the file and the byte offset: later records are never dropped silently.
    /// Refused while another process holds the store open.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let fail = |path: &Path, e: &dyn std::fmt::Display| StoreError {
            path: path.to_owned(),
            why: e.to_string(),
        };
        fs::create_dir_all(dir.join("backups")).map_err(|e| fail(dir, &e))?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| fail(&lock_path, &e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(fail(
                    &lock_path,
                    &"the store is open in another core (its lock is held)",
                ));
            }
            Err(fs::TryLockError::Error(e)) => return Err(fail(&lock_path, &e)),
        }
        let pinned = dir.join("pinned");
        fs::create_dir_all(&pinned).map_err(|e| fail(&pinned, &e))?;
        let snapshot = dir.join("snapshot.json");
        let mut state = match fs::read(&snapshot) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| fail(&snapshot, &e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => StoreState::default(),
            Err(e) => return Err(fail(&snapshot, &e)),
        };
        let log_path = dir.join("log.jsonl");
        let mut valid_len = 0u64;
        let mut since_snapshot = 0;
        if let Ok(file) = File::open(&log_path) {
            let mut reader = BufReader::new(file);
            let mut line = String::new();
            loop {
                line.clear();
                let n = reader.read_line(&mut line).map_err(|e| fail(&log_path, &e))?;
                if n == 0 {
                    break;
                }
                let decoded = if line.ends_with('\n') {
                    decode_line(&line)
                } else {
                    Err("no end of line".to_owned())
                };
                match decoded {
                    Ok(r) => state.apply(&r),
                    Err(why) => {
                        // Only the last record may be torn (a crash mid-write).
                        let mut rest = String::new();
                        reader.read_to_string(&mut rest).map_err(|e| fail(&log_path, &e))?;
                        if !rest.trim().is_empty() {
                            let why = format!(
                                "corrupt record at byte {valid_len} ({why}), with records after it: \
                                 refusing to start (restore the file, or cut it at that offset \
                                 to drop what follows)"
                            );
                            return Err(fail(&log_path, &why));
                        }
                        tracing::warn!(path = %log_path.display(), offset = valid_len, %why, "log ends in a torn record; dropped");
                        break;
                    }
                }
                valid_len += n as u64;
                since_snapshot += 1;
            }
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&log_path)
            .map_err(|e| fail(&log_path, &e))?;
        log.set_len(valid_len).map_err(|e| fail(&log_path, &e))?;
        let log = Log::File { file: log, since_snapshot, _lock: lock };
        Ok(Store { dir: dir.to_owned(), log, state })
    }

    /// A store whose ownership log is in etcd (`state`, read from it by the leader that holds
    /// `log`), with its copies in `dir`.
    #[cfg(feature = "etcd")]
    pub fn replicated(
        dir: &Path,
        log: super::etcd::EtcdLog,
        state: StoreState,
    ) -> Result<Store, StoreError> {
        for sub in ["backups", "pinned"] {
            let path = dir.join(sub);
            fs::create_dir_all(&path)
                .map_err(|e| StoreError { path: path.clone(), why: e.to_string() })?;
        }
        Ok(Store { dir: dir.to_owned(), log: Log::Etcd(Box::new(log)), state })
    }

    /// Persists the next generation and returns it. Called once at start, before serving:
    /// every epoch granted afterwards is higher than any granted before the restart.
    pub fn next_generation(&mut self) -> Result<u32, StoreError> {
        let generation = self.state.generation + 1;
        self.append(Record::Generation { generation })?;
        Ok(generation)
    }

    /// Folds the file log into the snapshot: write, fsync, rename, then empty the log. (etcd
    /// keeps the state itself: nothing to fold.)
    #[cfg_attr(not(feature = "etcd"), allow(irrefutable_let_patterns))]
    pub fn compact(&mut self) -> Result<(), StoreError> {
        let Log::File { file, since_snapshot, .. } = &mut self.log else { return Ok(()) };
        let path = self.dir.join("snapshot.json");
        let bytes = serde_json::to_vec(&self.state)
            .map_err(|e| StoreError { path: path.clone(), why: e.to_string() })?;
        write_atomic(&path, &bytes)?;
        file.set_len(0)
            .and_then(|()| file.sync_data())
            .map_err(|e| StoreError { path: self.dir.join("log.jsonl"), why: e.to_string() })?;
        *since_snapshot = 0;
        Ok(())
    }
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let fail = |e: std::io::Error| StoreError { path: path.to_owned(), why: e.to_string() };
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(fail)?;
    f.write_all(bytes).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    fs::rename(&tmp, path).map_err(fail)?;
    if let Some(dir) = path.parent() {
        File::open(dir).and_then(|d| d.sync_all()).map_err(fail)?;
    }
    Ok(())
}
