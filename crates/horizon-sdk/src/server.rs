//! A game server's side of the agent protocol as a sans-IO state machine: the agent's
//! requests are served ([`ServerMachine::serve`]), its stream items taken in
//! ([`ServerMachine::item`]), the regions stepped ([`ServerMachine::tick`]); what goes back on
//! the stream to the agent waits in [`ServerMachine::poll_item`], to be sent *before* the
//! request's reply (a `Copy`'s snapshot, a `Freeze`'s seal). `client.rs` is its tokio shell; the
//! whole-mesh simulator drives it directly.
//!
//! A region runs only under a valid lease by the server's own clock, and the newest epoch seen
//! per bubble fences older assignments.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use horizon_proto::server::{Reply, Request};
use horizon_proto::{
    Aabb, BubbleId, Epoch, ErrorCode, Fault, Lease, LeaseRef, MAX_CHUNK_BYTES, Region, StateItem,
    Tick,
};
use tokio::time::Instant;

use crate::game::{Game, OwnState};
use crate::region::{Held, Phase};

/// What the server did, for tests and its own logs.
#[derive(Debug, Default)]
pub struct Counters {
    pub ticks: AtomicU64,
    pub inputs_applied: AtomicU64,
    /// Inputs received again after they were applied, and dropped (a re-send, not an error).
    pub inputs_duplicate: AtomicU64,
    /// Inputs dropped because the pending queue was full (the gateway re-sends them).
    pub inputs_dropped: AtomicU64,
    pub regions: AtomicU64,
    /// Own states sent ahead of the tick's update ([`crate::OwnState::Early`]).
    pub own_sent: AtomicU64,
}

/// One game server's regions. See the module documentation.
pub struct ServerMachine<G: Game> {
    game: G,
    counters: Arc<Counters>,
    regions: BTreeMap<BubbleId, Held<G>>,
    /// The newest epoch seen per bubble: an older assignment is stale.
    newest: BTreeMap<BubbleId, Epoch>,
    out: VecDeque<StateItem>,
    ticks_this_second: u32,
    own_state: OwnState,
}

impl<G: Game> std::fmt::Debug for ServerMachine<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerMachine").field("regions", &self.regions.len()).finish()
    }
}

impl<G: Game> ServerMachine<G> {
    pub fn new(game: G, counters: Arc<Counters>) -> Self {
        ServerMachine {
            game,
            counters,
            regions: BTreeMap::new(),
            newest: BTreeMap::new(),
            out: VecDeque::new(),
            ticks_this_second: 0,
            own_state: OwnState::default(),
        }
    }

    /// When players see their own inputs' effect (early by default).
    pub fn with_own_state(mut self, own_state: OwnState) -> Self {
        self.own_state = own_state;
        self
    }

    /// A new connection to the agent: the regions held are dropped (the agent assigns them
    /// again from its copies); the newest epochs seen stay.
    pub fn reconnected(&mut self) {
        for held in self.regions.values_mut() {
            held.retire(&self.game);
        }
        self.regions.clear();
        self.out.clear();
        self.count_regions();
    }

    /// The next item for the stream to the agent.
    pub fn poll_item(&mut self) -> Option<StateItem> {
        self.out.pop_front()
    }

    /// The game it drives.
    pub fn game(&self) -> &G {
        &self.game
    }

    /// How many regions this server holds.
    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// The bubbles carved out of a region held here (a zone), as the agent last said.
    pub fn holes(&self, bubble: BubbleId) -> Option<&[Aabb]> {
        self.regions.get(&bubble).map(|h| h.holes.as_slice())
    }

    /// The epoch a region runs under, if held.
    pub fn epoch_of(&self, bubble: BubbleId) -> Option<Epoch> {
        self.regions.get(&bubble).map(|h| h.lease.epoch)
    }

    /// `Assign` (and `Continue`, counting ticks on from `tick`).
    fn assign(
        &mut self,
        lease: &Lease,
        region: &Region,
        from_snapshot: bool,
        tick: Option<Tick>,
        now: Instant,
    ) -> Result<Reply, Fault> {
        let newest = self.newest.entry(lease.bubble).or_insert(lease.epoch);
        if lease.epoch < *newest {
            return Ok(Reply::Stale { newest: *newest });
        }
        *newest = lease.epoch;
        let lref = LeaseRef { bubble: lease.bubble, epoch: lease.epoch };
        let until = now + Duration::from_millis(u64::from(lease.ttl_ms));
        let mut held = Held::new(&self.game, lref, *region, until, from_snapshot);
        if let Some(tick) = tick {
            held.tick = tick;
        }
        if let Some(mut replaced) = self.regions.insert(lease.bubble, held) {
            replaced.retire(&self.game);
        }
        self.count_regions();
        tracing::info!(
            bubble = lease.bubble.0,
            epoch = lease.epoch.0,
            standby = from_snapshot,
            from_tick = tick.map(|t| t.0),
            "assigned"
        );
        Ok(Reply::Done)
    }

    pub fn serve(&mut self, body: &Request, now: Instant) -> Result<Reply, Fault> {
        match body {
            Request::Assign { lease, region, from_snapshot } => {
                self.assign(lease, region, *from_snapshot, None, now)
            }
            Request::Continue { lease, region, tick } => {
                self.assign(lease, region, false, Some(*tick), now)
            }
            Request::Renew { leases, ttl_ms, sent_ago_ms } => {
                let sent =
                    now.checked_sub(Duration::from_millis(u64::from(*sent_ago_ms))).unwrap_or(now);
                let until = sent + Duration::from_millis(u64::from(*ttl_ms));
                for l in leases {
                    if let Some(h) = self.regions.get_mut(&l.bubble).filter(|h| h.lease == *l) {
                        h.renew(until);
                    }
                }
                Ok(Reply::Done)
            }
            Request::Resize { lease, region } => {
                let held = held(&mut self.regions, *lease)?;
                held.region = *region;
                Ok(Reply::Done)
            }
            Request::Join { lease, player, last_applied, state } => {
                let game = &self.game;
                let held = held(&mut self.regions, *lease)?;
                if !held.join(game, *player, *last_applied, &state.0) {
                    tracing::debug!(player = player.0, "join of a player already here: kept as is");
                }
                Ok(Reply::Done)
            }
            Request::Leave { lease, player } => {
                let game = &self.game;
                let held = held(&mut self.regions, *lease)?;
                let (last_applied, state) = held.leave(game, *player).ok_or_else(|| {
                    Fault::new(ErrorCode::Unexpected, format!("player {} is not here", player.0))
                })?;
                Ok(Reply::Left { last_applied, state: horizon_proto::Blob(state) })
            }
            Request::Copy { lease, deltas } => {
                let game = &self.game;
                let held = held(&mut self.regions, *lease)?;
                let chunks = held.snapshot(game, MAX_CHUNK_BYTES, *deltas);
                self.out.extend(chunks.into_iter().map(StateItem::Snapshot));
                Ok(Reply::Done)
            }
            Request::Freeze { lease } => {
                let game = &self.game;
                let held = held(&mut self.regions, *lease)?;
                if held.phase != Phase::Running {
                    return Err(Fault::new(
                        ErrorCode::Unexpected,
                        "freeze of a region not running",
                    ));
                }
                let seal = held.seal(game);
                let tick = seal.tick;
                self.out.push_back(StateItem::Seal(seal));
                tracing::info!(bubble = lease.bubble.0, tick = tick.0, "frozen and sealed");
                Ok(Reply::Frozen { tick })
            }
            Request::Release { lease } => {
                let held = held(&mut self.regions, *lease)?;
                held.retire(&self.game);
                let reply = Reply::Released { bubble: held.bubble(), tick: held.tick };
                self.regions.remove(&lease.bubble);
                self.count_regions();
                Ok(reply)
            }
            Request::Regrant { old, lease } => {
                let until = now + Duration::from_millis(u64::from(lease.ttl_ms));
                let lref = LeaseRef { bubble: lease.bubble, epoch: lease.epoch };
                let game = &self.game;
                held(&mut self.regions, *old)?
                    .regrant(game, lref, until)
                    .map_err(|why| Fault::new(ErrorCode::StaleEpoch, why))?;
                let newest = self.newest.entry(lease.bubble).or_insert(lease.epoch);
                *newest = (*newest).max(lease.epoch);
                tracing::info!(bubble = lease.bubble.0, epoch = lease.epoch.0, "regranted");
                Ok(Reply::Done)
            }
            Request::Carve { lease, holes } => {
                if holes.len() > horizon_proto::server::MAX_HOLES {
                    let why = format!(
                        "{} holes: over the limit of {}",
                        holes.len(),
                        horizon_proto::server::MAX_HOLES
                    );
                    return Err(Fault::new(ErrorCode::TooLarge, why));
                }
                let game = &self.game;
                held(&mut self.regions, *lease)?.carve(game, holes.clone());
                Ok(Reply::Done)
            }
            Request::Register { .. }
            | Request::Ready
            | Request::Load { .. }
            | Request::Positions { .. }
            | Request::Drain => {
                Err(Fault::new(ErrorCode::Unexpected, "a server request, sent by the agent"))
            }
        }
    }

    /// An item of the agent's stream: inputs, or a handover's (or a restore's) state.
    pub fn item(&mut self, item: StateItem, now: Instant) {
        let game = &self.game;
        let result = match item {
            StateItem::Inputs(inputs) => {
                let Some(held) = self.regions.get_mut(&inputs.bubble) else { return };
                let done = held.inputs(game, inputs.inputs, now);
                let c = &self.counters;
                c.inputs_applied.fetch_add(done.applied, Ordering::Relaxed);
                c.inputs_duplicate.fetch_add(done.duplicates, Ordering::Relaxed);
                c.inputs_dropped.fetch_add(done.dropped, Ordering::Relaxed);
                if self.own_state == OwnState::Early {
                    // Each player whose input was just applied sees it now, not at the tick.
                    let own: Vec<_> =
                        done.players.iter().filter_map(|&p| held.own(game, p)).collect();
                    c.own_sent.fetch_add(own.len() as u64, Ordering::Relaxed);
                    self.out.extend(own.into_iter().map(StateItem::Own));
                }
                Ok(())
            }
            StateItem::Snapshot(s) => match self.regions.get_mut(&s.bubble) {
                Some(held) => held.on_snapshot(game, s),
                None => return,
            },
            StateItem::PartSnapshot(s) => match self.regions.get_mut(&s.bubble) {
                Some(held) => held.on_part_snapshot(game, s),
                None => return,
            },
            StateItem::Delta(d) => match self.regions.get_mut(&d.bubble) {
                Some(held) => held.on_delta(game, d),
                None => return,
            },
            StateItem::Seal(seal) => match self.regions.get_mut(&seal.bubble) {
                Some(held) => {
                    let tick = seal.tick;
                    let r = held.on_seal(game, seal);
                    if r.is_ok() {
                        tracing::info!(
                            bubble = held.bubble().0,
                            tick = tick.0 + 1,
                            "running from the seal"
                        );
                        // The region's players have seen nothing since the source's last tick:
                        // the next one runs now, not at this server's next tick (up to a whole
                        // tick later, which a handover's players would see as a longer freeze).
                        step(game, &self.counters, &mut self.out, held, now);
                    }
                    r
                }
                None => return,
            },
            StateItem::Adopt(a) => match self.regions.get_mut(&a.chunk.bubble) {
                Some(held) => held.on_adopt(game, a.chunk, &a.players).map(|joined| {
                    if joined > 0 {
                        tracing::info!(
                            bubble = held.bubble().0,
                            joined,
                            "players adopted from a stored copy"
                        );
                    }
                }),
                None => return,
            },
            // Items a server sends, or agents send each other: never the agent's to a server.
            StateItem::Update(_) | StateItem::Own(_) | StateItem::Relay(_) => return,
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "state item refused");
        }
    }

    /// One tick of every region with a valid lease: its update (and delta while mirroring).
    pub fn tick(&mut self, now: Instant) {
        for held in self.regions.values_mut() {
            step(&self.game, &self.counters, &mut self.out, held, now);
        }
        self.ticks_this_second += 1;
        self.counters.ticks.fetch_add(1, Ordering::Relaxed);
    }

    /// The load report, once a second: ticks since the last one, and players held.
    pub fn load(&mut self) -> Request {
        let counted = self.ticks_this_second as f32;
        self.ticks_this_second = 0;
        let players = self.regions.values().map(Held::players).sum::<usize>() as u32;
        let engine = self.game.engine_load();
        let tps = engine.map_or(counted, |e| e.tps);
        Request::Load { tps, players, chunks_loading: engine.map_or(0, |e| e.chunks_loading) }
    }

    /// One `Positions` report per region running now, sent after each load report.
    pub fn positions(&self, now: Instant) -> Vec<Request> {
        self.regions
            .values()
            .filter_map(|held| {
                let players = held.positions(&self.game, now)?;
                Some(Request::Positions { lease: held.lease, players })
            })
            .collect()
    }

    fn count_regions(&self) {
        self.counters.regions.store(self.regions.len() as u64, Ordering::Relaxed);
    }
}

/// One tick of `held`, if its lease is valid: its update (and delta while mirroring) go out.
/// A free function, as [`held`].
fn step<G: Game>(
    game: &G,
    counters: &Counters,
    out: &mut VecDeque<StateItem>,
    held: &mut Held<G>,
    now: Instant,
) {
    if let Some((update, delta, applied)) = held.step(game, now) {
        counters.inputs_applied.fetch_add(applied, Ordering::Relaxed);
        out.push_back(StateItem::Update(update));
        out.extend(delta.map(StateItem::Delta));
    }
}

/// The region held under exactly `lease`. A free function, so the game stays borrowable.
fn held<G: Game>(
    regions: &mut BTreeMap<BubbleId, Held<G>>,
    lease: LeaseRef,
) -> Result<&mut Held<G>, Fault> {
    regions.get_mut(&lease.bubble).filter(|h| h.lease == lease).ok_or_else(|| unknown(lease.bubble))
}

fn unknown(bubble: BubbleId) -> Fault {
    Fault::new(ErrorCode::UnknownBubble, format!("bubble {} is not held here", bubble.0))
}

#[cfg(test)]
mod tests {
    use horizon_proto::{Blob, Input, Inputs, Lease, PlayerId, Region, Seq, Tick, WorldId};

    use super::*;
    use crate::reference::{OwnView, Reference, View, encode_input};

    const LEASE: Lease = Lease { bubble: BubbleId(7), epoch: Epoch(3), ttl_ms: 30_000 };
    const LREF: LeaseRef = LeaseRef { bubble: BubbleId(7), epoch: Epoch(3) };

    /// A server running bubble 7 with player 1 in it.
    fn running(own_state: OwnState, now: Instant) -> ServerMachine<Reference> {
        let counters = Arc::new(Counters::default());
        let mut m =
            ServerMachine::new(Reference { tick_ms: 50 }, counters).with_own_state(own_state);
        let region = Region { world: WorldId(1), bounds: None };
        let assign = Request::Assign { lease: LEASE, region, from_snapshot: false };
        assert_eq!(m.serve(&assign, now), Ok(Reply::Done));
        let join = Request::Join {
            lease: LREF,
            player: PlayerId(1),
            last_applied: Seq(0),
            state: Blob::default(),
        };
        assert_eq!(m.serve(&join, now), Ok(Reply::Done));
        m.tick(now);
        while m.poll_item().is_some() {}
        m
    }

    fn inputs(seqs: &[u64]) -> StateItem {
        let input = |seq| Input {
            player: PlayerId(1),
            seq: Seq(seq),
            bytes: Blob(encode_input([1000, 0, 0])),
        };
        StateItem::Inputs(Inputs {
            bubble: BubbleId(7),
            inputs: seqs.iter().map(|&s| input(s)).collect(),
        })
    }

    fn drain(m: &mut ServerMachine<Reference>) -> Vec<StateItem> {
        std::iter::from_fn(|| m.poll_item()).collect()
    }

    #[test]
    fn a_region_continued_from_a_tick_steps_on_after_it_and_its_copy_says_so() {
        let now = Instant::now();
        let counters = Arc::new(Counters::default());
        let mut m = ServerMachine::new(Reference { tick_ms: 50 }, counters);
        let region = Region { world: WorldId(1), bounds: None };
        let go_on = Request::Continue { lease: LEASE, region, tick: Tick(100_041) };
        assert_eq!(m.serve(&go_on, now), Ok(Reply::Done));
        m.tick(now);
        let items = drain(&mut m);
        let [StateItem::Update(update)] = items.as_slice() else { panic!("{items:?}") };
        assert_eq!(update.tick, Tick(100_042));
        let copy = Request::Copy { lease: LREF, deltas: false };
        assert_eq!(m.serve(&copy, now), Ok(Reply::Done));
        let items = drain(&mut m);
        let [StateItem::Snapshot(s)] = items.as_slice() else { panic!("{items:?}") };
        assert_eq!(s.tick, Tick(100_042));
    }

    #[test]
    fn an_applied_input_sends_its_player_their_own_state_before_the_tick() {
        let now = Instant::now();
        let mut m = running(OwnState::Early, now);
        m.item(inputs(&[1, 2]), now);
        let items = drain(&mut m);
        let [StateItem::Own(own)] = items.as_slice() else { panic!("one own state: {items:?}") };
        assert_eq!((own.bubble, own.epoch, own.tick), (BubbleId(7), Epoch(3), Tick(1)));
        assert_eq!((own.player, own.seq), (PlayerId(1), Seq(2)), "both inputs, in one");
        let entity = OwnView::decode(&own.bytes.0).expect("an own view").entity;
        assert_eq!((entity.inputs, entity.last_seq, entity.vel), (2, 2, [1000, 0, 0]));
        assert_eq!(m.counters.own_sent.load(Ordering::Relaxed), 1);

        // Nothing for a re-send, or for an input still waiting for its turn.
        m.item(inputs(&[2, 4]), now);
        assert!(drain(&mut m).is_empty());
        // The tick's update acknowledges what the own state showed: nothing else changed.
        m.tick(now);
        let items = drain(&mut m);
        let [StateItem::Update(update)] = items.as_slice() else { panic!("{items:?}") };
        assert_eq!(update.acked, vec![(PlayerId(1), Seq(2))]);
        let view = View::decode(&update.bytes.0).expect("a view");
        assert_eq!(view.entity(PlayerId(1)).map(|e| (e.inputs, e.last_seq)), Some((2, 2)));
    }

    #[test]
    fn a_handover_target_runs_its_first_tick_as_the_seal_lands_not_at_its_next_timer_tick() {
        let now = Instant::now();
        let mut source = running(OwnState::Batched, now);
        source.item(inputs(&[1]), now);
        source.tick(now);
        let copy = Request::Copy { lease: LREF, deltas: true };
        assert_eq!(source.serve(&copy, now), Ok(Reply::Done));
        assert_eq!(
            source.serve(&Request::Freeze { lease: LREF }, now),
            Ok(Reply::Frozen { tick: Tick(2) })
        );
        let mut target =
            ServerMachine::new(Reference { tick_ms: 50 }, Arc::new(Counters::default()));
        let next = Lease { epoch: Epoch(4), ..LEASE };
        let region = Region { world: WorldId(1), bounds: None };
        let assign = Request::Assign { lease: next, region, from_snapshot: true };
        assert_eq!(target.serve(&assign, now), Ok(Reply::Done));
        for item in drain(&mut source) {
            if let StateItem::Seal(_) = item {
                assert!(drain(&mut target).is_empty(), "a standby writes nothing before its seal");
            }
            target.item(item, now);
        }
        let items = drain(&mut target);
        let [StateItem::Update(update)] = items.as_slice() else { panic!("{items:?}") };
        assert_eq!((update.epoch, update.tick), (Epoch(4), Tick(3)), "the tick after the seal's");
        assert_eq!(update.acked, vec![(PlayerId(1), Seq(1))]);
        // The timer's next tick is the one after.
        target.tick(now);
        let items = drain(&mut target);
        assert!(
            matches!(items.as_slice(), [StateItem::Update(u)] if u.tick == Tick(4)),
            "{items:?}"
        );
    }

    /// The reference game, remembering every list of holes it was told.
    struct Carving {
        inner: Reference,
        told: std::sync::Mutex<Vec<Vec<Aabb>>>,
    }

    impl Game for Carving {
        type State = <Reference as Game>::State;
        fn empty(&self, bubble: BubbleId, region: &Region) -> Self::State {
            self.inner.empty(bubble, region)
        }
        fn encode(&self, state: &Self::State) -> Vec<u8> {
            self.inner.encode(state)
        }
        fn decode(&self, bytes: &[u8]) -> Result<Self::State, String> {
            self.inner.decode(bytes)
        }
        fn join(&self, state: &mut Self::State, player: PlayerId, bytes: &[u8]) {
            self.inner.join(state, player, bytes)
        }
        fn leave(&self, state: &mut Self::State, player: PlayerId) -> Vec<u8> {
            self.inner.leave(state, player)
        }
        fn input(&self, state: &mut Self::State, player: PlayerId, seq: Seq, bytes: &[u8]) {
            self.inner.input(state, player, seq, bytes)
        }
        fn step(&self, state: &mut Self::State, tick: Tick) {
            self.inner.step(state, tick)
        }
        fn view(&self, state: &Self::State, tick: Tick) -> Vec<u8> {
            self.inner.view(state, tick)
        }
        fn carved(&self, _state: &mut Self::State, holes: &[Aabb]) {
            self.told.lock().expect("told").push(holes.to_vec());
        }
    }

    fn carving() -> ServerMachine<Carving> {
        let game = Carving { inner: Reference { tick_ms: 50 }, told: Default::default() };
        ServerMachine::new(game, Arc::new(Counters::default()))
    }

    fn told(m: &ServerMachine<Carving>) -> Vec<Vec<Aabb>> {
        m.game.told.lock().expect("told").clone()
    }

    #[test]
    fn a_zone_hears_the_bubbles_carved_out_of_it_and_a_standby_once_it_runs() {
        let now = Instant::now();
        let hole = Aabb {
            min: horizon_proto::Vec3 { x: 0.0, y: 0.0, z: 0.0 },
            max: horizon_proto::Vec3 { x: 10.0, y: 10.0, z: 10.0 },
        };
        let region = Region { world: WorldId(1), bounds: None };
        let mut zone = carving();
        let assign = Request::Assign { lease: LEASE, region, from_snapshot: false };
        assert_eq!(zone.serve(&assign, now), Ok(Reply::Done));
        let carve = |holes: Vec<Aabb>| Request::Carve { lease: LREF, holes };
        assert_eq!(zone.serve(&carve(vec![hole]), now), Ok(Reply::Done));
        assert_eq!(zone.serve(&carve(Vec::new()), now), Ok(Reply::Done));
        assert_eq!(told(&zone), [vec![hole], vec![]]);
        assert_eq!(zone.holes(BubbleId(7)), Some(&[][..]));
        // Under another epoch, or too many: refused, and the game hears nothing.
        let stale = Request::Carve { lease: LeaseRef { epoch: Epoch(2), ..LREF }, holes: vec![] };
        assert_eq!(zone.serve(&stale, now).map_err(|f| f.code), Err(ErrorCode::UnknownBubble));
        let many = carve(vec![hole; horizon_proto::server::MAX_HOLES + 1]);
        assert_eq!(zone.serve(&many, now).map_err(|f| f.code), Err(ErrorCode::TooLarge));
        assert_eq!(told(&zone).len(), 2);
        // A standby keeps its holes and tells the game once the seal lets it run.
        assert_eq!(zone.serve(&carve(vec![hole]), now), Ok(Reply::Done));
        zone.tick(now);
        let copy = Request::Copy { lease: LREF, deltas: true };
        assert_eq!(zone.serve(&copy, now), Ok(Reply::Done));
        assert!(matches!(
            zone.serve(&Request::Freeze { lease: LREF }, now),
            Ok(Reply::Frozen { .. })
        ));
        let mut target = carving();
        let next = Lease { epoch: Epoch(4), ..LEASE };
        let standby = Request::Assign { lease: next, region, from_snapshot: true };
        assert_eq!(target.serve(&standby, now), Ok(Reply::Done));
        let next_ref = LeaseRef { bubble: BubbleId(7), epoch: Epoch(4) };
        let carve_next = Request::Carve { lease: next_ref, holes: vec![hole] };
        assert_eq!(target.serve(&carve_next, now), Ok(Reply::Done));
        assert!(told(&target).is_empty(), "a standby writes nothing, holes or not");
        for item in std::iter::from_fn(|| zone.poll_item()).collect::<Vec<_>>() {
            target.item(item, now);
        }
        assert_eq!(told(&target), [vec![hole]]);
    }

    #[test]
    fn batched_or_without_a_valid_lease_no_own_state_leaves() {
        let now = Instant::now();
        let mut batched = running(OwnState::Batched, now);
        batched.item(inputs(&[1]), now);
        assert!(drain(&mut batched).is_empty(), "batched: the update alone shows it");
        assert_eq!(batched.counters.inputs_applied.load(Ordering::Relaxed), 1);

        let mut early = running(OwnState::Early, now);
        let lapsed = now + Duration::from_secs(31);
        early.item(inputs(&[1]), lapsed);
        assert!(drain(&mut early).is_empty(), "a lapsed lease applies nothing and shows nothing");
    }
}
