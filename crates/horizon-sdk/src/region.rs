//! One region held by a game server: its lease, its phase, exactly-once inputs, and the
//! event log that makes deltas. Sans-IO: the client feeds it and sends what it returns.

use std::collections::{BTreeMap, HashMap};

use horizon_proto::server::PlayerPosition;
use horizon_proto::{
    Aabb, Blob, BubbleId, Delta, Epoch, Input, LeaseRef, MAX_OWN_BYTES, Own, PlayerId, Region,
    Seal, Seq, Snapshot, Tick, Update,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::game::Game;

/// Inputs held per region while waiting for their turn (a gap, a player not joined yet, a
/// standby waiting for its seal). Beyond it they are dropped: the gateway re-sends them.
pub(crate) const MAX_PENDING_INPUTS: usize = 4096;
/// The bytes of those inputs, at most (with [`MAX_PENDING_INPUTS`]).
pub(crate) const MAX_PENDING_BYTES: usize = 8 << 20;

/// Inputs waiting for their turn, bounded in count and bytes.
#[derive(Debug, Default)]
struct Waiting {
    inputs: BTreeMap<(PlayerId, Seq), Blob>,
    bytes: usize,
}

impl Waiting {
    /// Holds an input; `false` (and dropped) past either budget. An input that is its
    /// player's next to apply (`next`) is never dropped for later ones: the waiting inputs
    /// with the highest seqs make room for it (the gateway re-sends them). Without that, a
    /// budget filled with a player's later inputs would refuse the one they all wait for, and
    /// nothing of theirs would ever be applied again.
    fn insert(&mut self, key: (PlayerId, Seq), input: Blob, next: bool) -> bool {
        let size = input.0.len();
        if self.inputs.contains_key(&key) {
            return true;
        }
        let full =
            |w: &Self| w.inputs.len() >= MAX_PENDING_INPUTS || w.bytes + size > MAX_PENDING_BYTES;
        while next && full(self) {
            let Some(&latest) = self.inputs.keys().max_by_key(|(p, seq)| (seq.0, p.0)) else {
                break;
            };
            self.remove(&latest);
        }
        if full(self) {
            return false;
        }
        self.bytes += size;
        self.inputs.insert(key, input);
        true
    }

    fn remove(&mut self, key: &(PlayerId, Seq)) -> Option<Blob> {
        let input = self.inputs.remove(key)?;
        self.bytes -= input.0.len();
        Some(input)
    }

    fn retain(&mut self, keep: impl Fn(&(PlayerId, Seq)) -> bool) {
        self.inputs.retain(|k, _| keep(k));
        self.bytes = self.inputs.values().map(|b| b.0.len()).sum();
    }

    fn keys(&self) -> Vec<(PlayerId, Seq)> {
        self.inputs.keys().copied().collect()
    }
}

/// Where a region is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A handover target: snapshot and deltas applied as they come, not simulated until the seal.
    Standby,
    /// Simulated every tick while the lease is valid.
    Running,
    /// Stopped and sealed at a freeze: never writes again under this epoch.
    Sealed,
}

/// Why a state item was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RegionError {
    #[error("bubble {bubble}: epoch {given} is not the held epoch {held}")]
    Epoch { bubble: u64, given: u64, held: u64 },
    #[error("bubble {bubble}: {what} in phase {phase:?}")]
    Phase { bubble: u64, what: &'static str, phase: Phase },
    #[error("bubble {bubble}: bad state bytes: {why}")]
    State { bubble: u64, why: String },
    #[error("bubble {bubble}: delta for tick {got} while at tick {at}")]
    Gap { bubble: u64, got: u64, at: u64 },
}

/// One entry of a tick's event log; a delta is the log of one tick.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Event {
    Join { player: PlayerId, last_applied: Seq, bytes: Vec<u8> },
    Leave { player: PlayerId },
    Input { player: PlayerId, seq: Seq, bytes: Vec<u8> },
    Step { tick: Tick },
}

/// The bytes of a snapshot: the game's state plus what the SDK keeps.
#[derive(Serialize, Deserialize)]
struct SnapshotBody {
    tick: Tick,
    last_applied: Vec<(PlayerId, Seq)>,
    game: Vec<u8>,
}

/// What applying inputs did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) applied: u64,
    pub(crate) duplicates: u64,
    pub(crate) dropped: u64,
    /// The players who had an input applied, each once, in id order.
    pub(crate) players: Vec<PlayerId>,
}

pub(crate) struct Held<G: Game> {
    pub(crate) lease: LeaseRef,
    pub(crate) region: Region,
    pub(crate) phase: Phase,
    valid_until: Instant,
    /// `None` only for a standby that has not received its snapshot yet.
    state: Option<G::State>,
    pub(crate) tick: Tick,
    last_applied: HashMap<PlayerId, Seq>,
    pending: Waiting,
    /// The events since the last step: the next delta.
    log: Vec<Event>,
    /// Stream a delta every tick (a handover is being prepared).
    pub(crate) mirroring: bool,
    /// The game was told [`Game::started`] and not [`Game::stopped`] since.
    live: bool,
    chunks: Vec<Option<Vec<u8>>>,
    /// The chunks of a part copy being received (a restore of a spread bubble).
    part_chunks: Vec<Option<Vec<u8>>>,
    /// The chunks of a copy players are adopted from (see [`Held::on_adopt`]).
    adopt_chunks: Vec<Option<Vec<u8>>>,
    /// The bubbles carved out of it (a zone), as the agent last said ([`Game::carved`]).
    pub(crate) holes: Vec<Aabb>,
}

impl<G: Game> Held<G> {
    /// A region to run from empty, or (`standby`) to fill from a snapshot first.
    pub(crate) fn new(
        game: &G,
        lease: LeaseRef,
        region: Region,
        valid_until: Instant,
        standby: bool,
    ) -> Self {
        Held {
            lease,
            region,
            phase: if standby { Phase::Standby } else { Phase::Running },
            valid_until,
            state: (!standby).then(|| game.empty(lease.bubble, &region)),
            tick: Tick(0),
            last_applied: HashMap::new(),
            pending: Waiting::default(),
            log: Vec::new(),
            mirroring: false,
            live: false,
            chunks: Vec::new(),
            part_chunks: Vec::new(),
            adopt_chunks: Vec::new(),
            holes: Vec::new(),
        }
    }

    /// The bubbles carved out of the region: the game hears them now, or a standby once it
    /// runs.
    pub(crate) fn carve(&mut self, game: &G, holes: Vec<Aabb>) {
        self.holes = holes;
        if self.phase != Phase::Standby
            && let Some(state) = self.state.as_mut()
        {
            game.carved(state, &self.holes);
        }
    }

    pub(crate) fn bubble(&self) -> BubbleId {
        self.lease.bubble
    }

    pub(crate) fn renew(&mut self, valid_until: Instant) {
        self.valid_until = self.valid_until.max(valid_until);
    }

    /// The same region under a newer epoch (a handover abandoned before the freeze): the state,
    /// tick and applied inputs stay; delta mirroring for the abandoned target stops.
    pub(crate) fn regrant(
        &mut self,
        game: &G,
        lease: LeaseRef,
        valid_until: Instant,
    ) -> Result<(), &'static str> {
        if self.phase != Phase::Running {
            return Err("regrant of a region that is not running");
        }
        if lease.bubble != self.lease.bubble || lease.epoch <= self.lease.epoch {
            return Err("regrant must be the same bubble under a newer epoch");
        }
        self.retire(game);
        self.lease = lease;
        self.valid_until = valid_until;
        self.mirroring = false;
        Ok(())
    }

    /// Simulating now is allowed: running, with a lease valid by our own clock.
    pub(crate) fn writable(&self, now: Instant) -> bool {
        self.phase == Phase::Running && now < self.valid_until && self.state.is_some()
    }

    /// Tells the game when writing starts or stops ([`Game::started`], [`Game::stopped`]);
    /// returns whether the region may be written now.
    fn refresh(&mut self, game: &G, now: Instant) -> bool {
        let writable = self.writable(now);
        if writable != self.live {
            if let Some(state) = self.state.as_mut() {
                if writable {
                    game.started(state, self.lease);
                } else {
                    game.stopped(state);
                }
            }
            self.live = writable;
        }
        writable
    }

    /// Stops writing for good under this lease: the game is told, if it was writing.
    pub(crate) fn retire(&mut self, game: &G) {
        if std::mem::take(&mut self.live)
            && let Some(state) = self.state.as_mut()
        {
            game.stopped(state);
        }
    }

    pub(crate) fn players(&self) -> usize {
        self.last_applied.len()
    }

    /// Where the game put this region's players, while it runs (`None` otherwise: a standby's
    /// or a sealed region's players are placed by whoever runs them).
    pub(crate) fn positions(&self, game: &G, now: Instant) -> Option<Vec<PlayerPosition>> {
        let state = self.state.as_ref().filter(|_| self.writable(now))?;
        let mut players = game.positions(state);
        players.truncate(horizon_proto::server::MAX_POSITIONS);
        Some(players)
    }

    /// Takes a player in with their state and last applied seq. A player already here is left
    /// as they are (returns `false`) unless this join carries more of their inputs: after a
    /// restore from a copy the agent joins every member, and those the copy holds keep their
    /// state and applied inputs; but a crossing that arrives late (its target was down) holds
    /// the player's newest state, and replaces the fresh or older one. Each input is applied
    /// once (I3), so the state that applied more of a player's inputs is the later one.
    pub(crate) fn join(
        &mut self,
        game: &G,
        player: PlayerId,
        last_applied: Seq,
        bytes: &[u8],
    ) -> bool {
        match self.last_applied.get(&player) {
            Some(here) if *here >= last_applied => return false,
            Some(_) => {
                self.leave(game, player);
            }
            None => {}
        }
        if let Some(state) = self.state.as_mut() {
            game.join(state, player, bytes);
        }
        self.last_applied.insert(player, last_applied);
        self.pending.retain(|&(p, s)| p != player || s > last_applied);
        self.log.push(Event::Join { player, last_applied, bytes: bytes.to_vec() });
        true
    }

    /// Takes a player out; `None` if they were not here.
    pub(crate) fn leave(&mut self, game: &G, player: PlayerId) -> Option<(Seq, Vec<u8>)> {
        let last = self.last_applied.remove(&player)?;
        let bytes = self.state.as_mut().map(|s| game.leave(s, player)).unwrap_or_default();
        self.pending.retain(|&(p, _)| p != player);
        self.log.push(Event::Leave { player });
        Some((last, bytes))
    }

    /// Takes inputs in: applied now if the region is writable and it is their turn, held
    /// otherwise, dropped if already applied.
    pub(crate) fn inputs(&mut self, game: &G, inputs: Vec<Input>, now: Instant) -> Applied {
        let mut out = Applied::default();
        for input in inputs {
            let last = self.last_applied.get(&input.player).copied();
            if last.is_some_and(|l| input.seq <= l) {
                out.duplicates += 1;
            } else if !self.pending.insert(
                (input.player, input.seq),
                input.bytes,
                last.is_some_and(|l| input.seq.0 == l.0 + 1),
            ) {
                out.dropped += 1;
            }
        }
        if self.refresh(game, now) {
            (out.applied, out.players) = self.drain(game);
        }
        out
    }

    /// Applies every held input whose turn has come: how many, and whose.
    fn drain(&mut self, game: &G) -> (u64, Vec<PlayerId>) {
        let Some(state) = self.state.as_mut() else { return (0, Vec::new()) };
        let mut applied = 0;
        let mut players = Vec::new();
        let ready = self.pending.keys();
        for (player, seq) in ready {
            let Some(last) = self.last_applied.get_mut(&player) else { continue };
            if seq.0 <= last.0 {
                self.pending.remove(&(player, seq));
            } else if seq.0 == last.0 + 1 {
                let Some(bytes) = self.pending.remove(&(player, seq)) else { continue };
                game.input(state, player, seq, &bytes.0);
                *last = seq;
                applied += 1;
                if players.last() != Some(&player) {
                    players.push(player);
                }
                self.log.push(Event::Input { player, seq, bytes: bytes.0 });
            }
        }
        (applied, players)
    }

    /// `player`'s own state now, with the last input of theirs it reflects (see
    /// [`Game::own`]); `None` when the game computes none, or one over
    /// [`horizon_proto::MAX_OWN_BYTES`].
    pub(crate) fn own(&self, game: &G, player: PlayerId) -> Option<Own> {
        let state = self.state.as_ref()?;
        let seq = *self.last_applied.get(&player)?;
        let bytes = game.own(state, player).filter(|b| b.len() <= MAX_OWN_BYTES)?;
        let (bubble, epoch, tick) = (self.lease.bubble, self.lease.epoch, self.tick);
        Some(Own { bubble, epoch, tick, player, seq, bytes: Blob(bytes) })
    }

    /// One tick: step, then the update for players and (when mirroring) the delta.
    pub(crate) fn step(&mut self, game: &G, now: Instant) -> Option<(Update, Option<Delta>, u64)> {
        if !self.refresh(game, now) {
            return None;
        }
        let (applied, _) = self.drain(game);
        let state = self.state.as_mut()?;
        self.tick = Tick(self.tick.0 + 1);
        game.step(state, self.tick);
        self.log.push(Event::Step { tick: self.tick });
        let mut acked: Vec<(PlayerId, Seq)> =
            self.last_applied.iter().map(|(&p, &s)| (p, s)).collect();
        acked.sort_unstable();
        let update = Update {
            bubble: self.lease.bubble,
            epoch: self.lease.epoch,
            tick: self.tick,
            acked,
            bytes: Blob(game.view(state, self.tick)),
        };
        let log = std::mem::take(&mut self.log);
        let delta = self.mirroring.then(|| Delta {
            bubble: self.lease.bubble,
            epoch: self.lease.epoch,
            tick: self.tick,
            bytes: Blob(encode_log(&log)),
        });
        Some((update, delta, applied))
    }

    /// The full state as snapshot chunks of at most `chunk` bytes. With `mirror`, deltas
    /// follow from here: the log restarts, since the snapshot already holds its effects.
    pub(crate) fn snapshot(&mut self, game: &G, chunk: usize, mirror: bool) -> Vec<Snapshot> {
        if mirror {
            self.log.clear();
            self.mirroring = true;
        }
        let Some(state) = self.state.as_ref() else { return Vec::new() };
        let mut last_applied: Vec<_> = self.last_applied.iter().map(|(&p, &s)| (p, s)).collect();
        last_applied.sort_unstable();
        let body = SnapshotBody { tick: self.tick, last_applied, game: game.encode(state) };
        let bytes = postcard::to_stdvec(&body).unwrap_or_default();
        let parts: Vec<&[u8]> =
            if bytes.is_empty() { vec![&[]] } else { bytes.chunks(chunk.max(1)).collect() };
        let total = parts.len() as u32;
        parts
            .into_iter()
            .enumerate()
            .map(|(i, part)| Snapshot {
                bubble: self.lease.bubble,
                epoch: self.lease.epoch,
                tick: self.tick,
                index: i as u32,
                total,
                bytes: Blob(part.to_vec()),
            })
            .collect()
    }

    /// Stops for good under this epoch and says where: the seal.
    pub(crate) fn seal(&mut self, game: &G) -> Seal {
        self.retire(game);
        self.phase = Phase::Sealed;
        let mut last_applied: Vec<_> = self.last_applied.iter().map(|(&p, &s)| (p, s)).collect();
        last_applied.sort_unstable();
        let log = std::mem::take(&mut self.log);
        Seal {
            bubble: self.lease.bubble,
            epoch: self.lease.epoch,
            tick: self.tick,
            final_delta: Blob(encode_log(&log)),
            last_applied,
        }
    }

    /// A standby takes one snapshot chunk from the source (any epoch older than ours).
    pub(crate) fn on_snapshot(&mut self, game: &G, s: Snapshot) -> Result<(), RegionError> {
        self.standby_only("snapshot")?;
        self.older_epoch(s.epoch)?;
        let mut chunks = std::mem::take(&mut self.chunks);
        let whole = gather(&mut chunks, s).map_err(|why| self.bad(format!("snapshot: {why}")));
        self.chunks = chunks;
        let Some(body) = whole? else { return Ok(()) };
        let state = game.decode(&body.game).map_err(|e| self.bad(e))?;
        self.state = Some(state);
        self.tick = body.tick;
        self.last_applied = body.last_applied.into_iter().collect();
        Ok(())
    }

    /// A standby being restored from a spread bubble's copies takes one chunk of another
    /// part's copy, after the snapshot of part 0. Once the part is whole, each of its players
    /// joins the state with their applied inputs; of two states of one player (it changed
    /// part between the copies), the one that applied more of its inputs stays.
    pub(crate) fn on_part_snapshot(&mut self, game: &G, s: Snapshot) -> Result<(), RegionError> {
        self.standby_only("part snapshot")?;
        self.older_epoch(s.epoch)?;
        let mut chunks = std::mem::take(&mut self.part_chunks);
        let whole = gather(&mut chunks, s).map_err(|why| self.bad(format!("part snapshot: {why}")));
        self.part_chunks = chunks;
        let Some(body) = whole? else { return Ok(()) };
        let mut part = game.decode(&body.game).map_err(|e| self.bad(e))?;
        let bubble = self.bubble().0;
        let state = self.state.as_mut().ok_or(RegionError::Phase {
            bubble,
            what: "part snapshot before the snapshot",
            phase: self.phase,
        })?;
        for (player, seq) in body.last_applied {
            let player_state = game.leave(&mut part, player);
            match self.last_applied.get(&player) {
                Some(&held) if held >= seq => continue,
                Some(_) => {
                    game.leave(state, player);
                }
                None => {}
            }
            game.join(state, player, &player_state);
            self.last_applied.insert(player, seq);
        }
        Ok(())
    }

    /// A running region takes one chunk of a stored copy (of any bubble) that holds states of
    /// `players`. Once the copy is whole, each listed player it holds joins with the copy's
    /// state and applied inputs, as a crossing would: of two states of one player, the one
    /// that applied more inputs stays. Returns how many players joined. The chunk names this
    /// region under its current epoch (a write like any other, fenced).
    pub(crate) fn on_adopt(
        &mut self,
        game: &G,
        chunk: Snapshot,
        players: &[PlayerId],
    ) -> Result<usize, RegionError> {
        if chunk.epoch != self.lease.epoch {
            return Err(RegionError::Epoch {
                bubble: self.bubble().0,
                given: chunk.epoch.0,
                held: self.lease.epoch.0,
            });
        }
        if self.phase != Phase::Running || self.state.is_none() {
            let (bubble, phase) = (self.bubble().0, self.phase);
            return Err(RegionError::Phase { bubble, what: "adopt", phase });
        }
        let mut chunks = std::mem::take(&mut self.adopt_chunks);
        let whole = gather(&mut chunks, chunk).map_err(|why| self.bad(format!("adopt: {why}")));
        self.adopt_chunks = chunks;
        let Some(body) = whole? else { return Ok(0) };
        let mut copy = game.decode(&body.game).map_err(|e| self.bad(e))?;
        let mut joined = 0;
        for (player, seq) in body.last_applied {
            if !players.contains(&player) {
                continue;
            }
            let player_state = game.leave(&mut copy, player);
            joined += usize::from(self.join(game, player, seq, &player_state));
        }
        Ok(joined)
    }

    /// A standby replays one tick of the source. Ticks it already has are skipped.
    pub(crate) fn on_delta(&mut self, game: &G, d: Delta) -> Result<(), RegionError> {
        self.standby_only("delta")?;
        self.older_epoch(d.epoch)?;
        self.replay(game, d.tick, &d.bytes.0)
    }

    /// A standby takes the source's last word and becomes the writer from the next tick.
    pub(crate) fn on_seal(&mut self, game: &G, seal: Seal) -> Result<(), RegionError> {
        self.standby_only("seal")?;
        self.older_epoch(seal.epoch)?;
        if seal.tick != self.tick || self.state.is_none() {
            return Err(RegionError::Gap {
                bubble: self.bubble().0,
                got: seal.tick.0,
                at: self.tick.0,
            });
        }
        // The final delta holds what happened after the last step (joins, inputs applied
        // between ticks): it belongs to the next tick, which we now run.
        self.apply_log(game, &seal.final_delta.0)?;
        for (player, seq) in seal.last_applied {
            self.last_applied.insert(player, seq);
        }
        self.phase = Phase::Running;
        if !self.holes.is_empty()
            && let Some(state) = self.state.as_mut()
        {
            game.carved(state, &self.holes);
        }
        Ok(())
    }

    fn replay(&mut self, game: &G, tick: Tick, bytes: &[u8]) -> Result<(), RegionError> {
        if tick.0 <= self.tick.0 {
            return Ok(());
        }
        if self.state.is_none() || tick.0 != self.tick.0 + 1 {
            return Err(RegionError::Gap { bubble: self.bubble().0, got: tick.0, at: self.tick.0 });
        }
        self.apply_log(game, bytes)
    }

    fn apply_log(&mut self, game: &G, bytes: &[u8]) -> Result<(), RegionError> {
        let log: Vec<Event> = if bytes.is_empty() {
            Vec::new()
        } else {
            postcard::from_bytes(bytes).map_err(|e| self.bad(format!("delta: {e}")))?
        };
        let bubble = self.bubble().0;
        let state = self.state.as_mut().ok_or(RegionError::Phase {
            bubble,
            what: "delta before the snapshot",
            phase: self.phase,
        })?;
        for event in log {
            match event {
                Event::Join { player, last_applied, bytes } => {
                    game.join(state, player, &bytes);
                    self.last_applied.insert(player, last_applied);
                }
                Event::Leave { player } => {
                    game.leave(state, player);
                    self.last_applied.remove(&player);
                }
                Event::Input { player, seq, bytes } => {
                    game.input(state, player, seq, &bytes);
                    self.last_applied.insert(player, seq);
                }
                Event::Step { tick } => {
                    game.step(state, tick);
                    self.tick = tick;
                }
            }
        }
        Ok(())
    }

    fn standby_only(&self, what: &'static str) -> Result<(), RegionError> {
        if self.phase == Phase::Standby {
            Ok(())
        } else {
            Err(RegionError::Phase { bubble: self.bubble().0, what, phase: self.phase })
        }
    }

    /// State items from a handover source carry the epoch just before ours.
    fn older_epoch(&self, given: Epoch) -> Result<(), RegionError> {
        if given < self.lease.epoch {
            Ok(())
        } else {
            Err(RegionError::Epoch {
                bubble: self.bubble().0,
                given: given.0,
                held: self.lease.epoch.0,
            })
        }
    }

    fn bad(&self, why: String) -> RegionError {
        RegionError::State { bubble: self.bubble().0, why }
    }
}

/// Takes one chunk of a snapshot into `chunks`; the decoded body once every chunk is in.
fn gather(chunks: &mut Vec<Option<Vec<u8>>>, s: Snapshot) -> Result<Option<SnapshotBody>, String> {
    if s.total == 0 || s.index >= s.total || s.total > 1 << 16 {
        return Err(format!("chunk {} of {}", s.index, s.total));
    }
    if chunks.len() != s.total as usize {
        *chunks = vec![None; s.total as usize];
    }
    chunks[s.index as usize] = Some(s.bytes.0);
    if chunks.iter().any(Option::is_none) {
        return Ok(None);
    }
    let bytes: Vec<u8> = chunks.drain(..).flatten().flatten().collect();
    postcard::from_bytes(&bytes).map(Some).map_err(|e| e.to_string())
}

fn encode_log(log: &[Event]) -> Vec<u8> {
    if log.is_empty() {
        return Vec::new();
    }
    // Events are plain data; postcard cannot fail on them.
    postcard::to_stdvec(log).unwrap_or_default()
}

#[cfg(test)]
mod tests;
