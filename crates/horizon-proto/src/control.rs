//! core ↔ agent: the control channel. One connection per agent, opened by the agent, mutual
//! TLS with site certificates. Both sides send requests; each variant says who sends it.

use serde::{Deserialize, Serialize};

use crate::channel::{Channel, Never, kinds};
use crate::frame::ChannelId;
use crate::types::{
    Aabb, Blob, BubbleId, Epoch, HandoverId, Lease, LeaseRef, Name, PlayerId, Region, Role, Seq,
    Tick, Vec3,
};

/// The control channel's types.
#[derive(Debug)]
pub enum Control {}

impl Channel for Control {
    const ID: ChannelId = ChannelId::Control;
    type Request = Request;
    type Reply = Reply;
    type Stream = Backup;
    type Datagram = Never;
}

/// A request on the control channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// agent → core, first request of every connection (full state sync): everything the agent
    /// holds. The core answers with the authoritative set: what to keep, what to stop.
    Register {
        site: Name,
        /// The agent's build, for the core's status.
        build: Name,
        /// Address other agents reach this agent's transfer endpoint at (`host:port`).
        transfer_addr: String,
        servers: Vec<ServerLoad>,
        /// Leases the agent's servers hold right now, with the last tick simulated.
        held: Vec<Held>,
    },
    /// agent → core, every few seconds: the scoring inputs seen at this site.
    Report {
        joins: Vec<PlayerSample>,
        leaves: Vec<PlayerId>,
        players: Vec<PlayerSample>,
        backbone: Vec<BackboneSample>,
        servers: Vec<ServerLoad>,
    },
    /// agent → core: one batched renewal for every lease of the site. The agent counts each
    /// granted lease's `ttl_ms` from when it sent this request.
    Renew { leases: Vec<LeaseRef> },
    /// agent (target) → core: the bubble runs here from `tick` under `epoch`; commit it.
    Started { handover: HandoverId, bubble: BubbleId, epoch: Epoch, tick: Tick },
    /// agent → core: a handover cannot go on (target not ready in time, transfer broken).
    Failed { handover: HandoverId, reason: String },
    /// core → agent: simulate a new bubble on a ready server of this site under `lease`.
    Create { bubble: BubbleId, region: Region, lease: Lease },
    /// core → agent: a bubble's border moved.
    Resize { lease: LeaseRef, region: Region },
    /// core → agent: start a handover. Sent to the target first (`lease` is its pre-authorised
    /// epoch `e+1`, valid only once the seal arrives), then to the source (`lease` is the current
    /// one) which opens the transfer to `target_addr`.
    Prepare {
        handover: HandoverId,
        bubble: BubbleId,
        source: Name,
        target: Name,
        target_addr: String,
        lease: Lease,
        /// The target must be ready (snapshot applied, deltas flowing) within this; else abort.
        deadline_ms: u32,
    },
    /// core → agent (source): freeze at the next tick and send the seal to the target.
    Freeze { handover: HandoverId },
    /// core → agent (source): the target committed; drop the sealed bubble.
    Commit { handover: HandoverId },
    /// core → agent (both): give up before the freeze; the source simply continues.
    Abort { handover: HandoverId, reason: String },
    /// core → agent: stop simulating these bubbles now (merge, delete, failover).
    Revoke { leases: Vec<LeaseRef> },
    /// core → agent (simulating site): the bubble's players, all of them, each time the set
    /// changes. Players who left for another bubble are in `departed`: the agent takes them out
    /// of the game server and sends their state and last applied input to the new holder
    /// (`transfer::Request::Cross`).
    Members { lease: LeaseRef, players: Vec<Member>, departed: Vec<Departure> },
    /// core → agent (home site): where these players are simulated from now on. The gateway
    /// sends their inputs there and re-sends those not yet acknowledged.
    Route { routes: Vec<PlayerRoute> },
    /// core → agent: the other sites' agents changed (one registered, or moved address).
    Peers { peers: Vec<Peer> },
    /// core → agent: keep simulating the bubble held as `old` under `lease` (same bubble, newer
    /// epoch); `old` is fenced off from now on. Sent to a handover's source when the handover is
    /// abandoned before the freeze (instead of `Abort`): whatever was prepared for `old` stops,
    /// the bubble keeps running.
    Regrant { old: LeaseRef, lease: Lease },
    /// core → agent (simulating site): spread the bubble over `parts.len()` servers of the
    /// site, part `i` simulating box `parts[i]` (the parts tile the bubble's box, cut by SMD's
    /// rule: a dense group is cut at its median). `players` says which part holds each member
    /// (a member keeps its part until 0.4 m past its edge); the agent moves a player
    /// whose part changed (leave with state and last applied seq, join on the new part's
    /// server). Sent whenever the cut or a member's part changes; one part = one server again.
    Parts { lease: LeaseRef, parts: Vec<Aabb>, players: Vec<PartMember> },
    /// agent → core: these bubbles can no longer run here (their game server exited or was
    /// lost). The core fails them over: restored from their latest copy on another server of
    /// the site if it has a spare, else on another site.
    Lost { leases: Vec<LeaseRef>, reason: String },
    /// core → agent: run this bubble here from its latest copy in the universe backup — a
    /// failover, its previous holder is gone. `copy` is the copy's bytes as the holder's server
    /// made them (a snapshot's content), taken at `tick` under the older epoch `from`; empty
    /// when the bubble had no copy yet (it starts empty). The agent assigns it to a ready
    /// server as a standby under `lease`, feeds it the copy as a snapshot of epoch `from`, then
    /// a seal at `tick` with no final delta: the server runs from `tick + 1`. The reply comes
    /// once the server took it. `lease.ttl_ms` counts from when the agent received this order.
    Restore { lease: Lease, region: Region, from: Epoch, tick: Tick, copy: Blob },
    /// core → agent (home site): a stored copy of the universe backup includes these inputs.
    /// The gateway may forget each player's inputs up to `seq`; it keeps the later ones, even
    /// acknowledged, to re-send them if the bubble is ever restored from that copy.
    Covered { players: Vec<CoveredInput> },
    /// agent → core, after every `Registered`: every player connected here now and the bubble
    /// each is routed to (full resync; a restarted core puts them back where they play). The
    /// core forgets this site's players missing from the list.
    Players { players: Vec<PlacedPlayer> },
    /// agent → core: a block of `count` fresh player ids (answered with `PlayerIds`). The core
    /// persists what it handed out before answering: an id is never given twice, across
    /// restarts of the core and of the agents.
    PlayerIds { count: u32 },
    /// agent → core, after every `Registered`: where operators reach this agent's admin API
    /// (`host:port`, for the core's status and console; empty: none).
    Admin { addr: String },
    /// core → agent: `Restore` for a bubble whose latest copy was taken while it was spread
    /// over several servers: `copy` is part 0's copy (at `tick`), `parts` the other parts'.
    /// The server takes `copy` as the snapshot, then each of `parts` as a `PartSnapshot` (its
    /// players join the state), then the seal at `tick`; the bubble runs on one server again.
    RestoreParts {
        lease: Lease,
        region: Region,
        from: Epoch,
        tick: Tick,
        copy: Blob,
        parts: Vec<Blob>,
    },
    /// core → agent (a site these players' states came through): the bubble each is in now was
    /// restored from a copy that may lack them. A state of theirs this agent still holds — a
    /// crossing on its way, or one delivered and kept a while — goes to that bubble, whichever
    /// bubble it was sent to; the bubble keeps the state that applied more inputs.
    Recover { routes: Vec<PlayerRoute> },
    /// core → agent (the holder of a bubble just restored): `copy` is a stored whole copy —
    /// of this bubble or of another one, whichever applied the most of these players' inputs
    /// — that holds these members' states, where the copy the bubble was restored from lacks
    /// them or holds less. The agent streams it to the bubble's server as `Adopt` chunks; each
    /// listed player joins with the copy's state, and the bubble keeps, of two states of one
    /// player, the one that applied more inputs.
    Adopt { lease: LeaseRef, players: Vec<PlayerId>, copy: Blob },
    /// agent → core (simulating site), with each `Report`: where the game servers of this site
    /// put the players of the regions they run, under the lease each region runs under. The
    /// only positions placement uses (the brain never reads a client's claim); the core takes
    /// a region's list only from the site holding that region under that epoch, and only for
    /// its members. At most [`crate::server::MAX_POSITIONS`] players per request: an agent
    /// with more sends several.
    Positions { regions: Vec<RegionPositions> },
    /// core → agent: one order of the core's ordered lane to this agent, `seq` counting from 0
    /// on each connection (`lane` names the connection: a new value starts a new count). The
    /// core sends them without waiting for each answer; the agent serves them one at a time in
    /// `seq` order, each once the one before is answered (or has run for 5 s, the time the
    /// core waits for an answer), and answers this request with `order`'s answer. `order` is
    /// never itself an `InOrder`.
    InOrder { lane: u64, seq: u64, order: Box<Request> },
    /// agent → core, after the `Report` with their joins: the probe tables of players who
    /// joined with one (`gateway::Request::JoinMeasured`) and passed this gateway's check, for
    /// stage 1's figures (`horizon_core_players_would_gain`, `/measure.csv`). Never read by
    /// placement. At most [`MAX_MEASURED`] players per request.
    Measured { players: Vec<MeasuredPlayer> },
    /// agent → core, after every `Registered`: the bounds of this site's pool of game servers,
    /// as configured: `warm` kept ready beyond the load (`servers.warm_pool`), at most `max`
    /// (`servers.max`). For the core's status and console.
    Pool { warm: u32, max: u32 },
    /// core → agent, at each registration and whenever a link goes down, comes up or its
    /// round trip moves by more than a tenth: every backbone link between agents as their
    /// reports show it (a link is down when either end reports it down or does not report
    /// it). The agent routes its transfer traffic over the live ones (a cut between two sites
    /// heals through a third); its own links it judges by its own probes.
    Links { links: Vec<LinkState> },
    /// agent → core: this site moves the region it holds under `lease` to another of its game
    /// servers, with its whole state (an overfull server gives it away). The core answers
    /// `Done` and fences the old server off with a newer epoch: a `Regrant { old: lease, .. }`
    /// order, in the lane's order, under which the new server takes the old one's snapshot,
    /// deltas and seal. Refused (`conflict`) while the region is created, moved, restored or
    /// ended, or not held under `lease` by this site (`stale_epoch`).
    Rehome { lease: LeaseRef },
    /// core → a zone's holder: the bubbles carved out of the zone it runs under `lease` (their
    /// boxes, at most [`crate::server::MAX_HOLES`]), simulated elsewhere; the agent passes
    /// them to the zone's server, which must not write inside them (design.md §4). The whole
    /// list each time it changes, and again under each new epoch.
    Carve { lease: LeaseRef, holes: Vec<Aabb> },
}

/// One backbone link between two sites' agents, as [`Request::Links`] carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkState {
    pub a: Name,
    pub b: Name,
    /// Smoothed round trip, milliseconds (the larger of the two ends' figures); `None`:
    /// down.
    pub rtt_ms: Option<f32>,
}

/// Players in one `Measured` request, at most.
pub const MAX_MEASURED: usize = 256;

/// A player's probe table as their gateway accepted it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPlayer {
    pub player: PlayerId,
    /// The RTT the gateway measured itself (QUIC), milliseconds: it stands for the client's
    /// claim about the gateway's own site.
    pub access_rtt_ms: f32,
    /// The client's claims about every site it probed, this gateway's site included.
    pub probes: Vec<crate::gateway::SiteProbe>,
}

/// How many orders of one lane may be on their way at once: the core sends no more, an agent
/// refuses (`busy`) an order further than this ahead of the one it serves next.
pub const MAX_IN_ORDER: u64 = 64;

/// The players of one region where its game server put them (see `Request::Positions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionPositions {
    pub lease: LeaseRef,
    pub players: Vec<crate::server::PlayerPosition>,
}

kinds!(Request {
    Register => "register",
    Report => "report",
    Renew => "renew",
    Started => "started",
    Failed => "failed",
    Create => "create",
    Resize => "resize",
    Prepare => "prepare",
    Freeze => "freeze",
    Commit => "commit",
    Abort => "abort",
    Revoke => "revoke",
    Members => "members",
    Route => "route",
    Peers => "peers",
    Regrant => "regrant",
    Parts => "parts",
    Lost => "lost",
    Restore => "restore",
    Covered => "covered",
    Players => "players",
    PlayerIds => "player_ids",
    Admin => "admin",
    RestoreParts => "restore_parts",
    Recover => "recover",
    Adopt => "adopt",
    Positions => "positions",
    InOrder => "in_order",
    Measured => "measured",
    Pool => "pool",
    Links => "links",
    Rehome => "rehome",
    Carve => "carve",
});

/// A reply on the control channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// The request was applied (or had already been: replies to a retried id are the same).
    Done,
    /// To `Register`: the core's view, which the agent adopts.
    Registered {
        /// The core's generation (the high half of every epoch it grants).
        generation: u32,
        /// The scoring tick, for the agent's report cadence.
        tick_ms: u32,
        /// Leases to keep (renewed from now), with their current epoch.
        keep: Vec<Lease>,
        /// Bubbles to stop at once: their lease is gone or moved elsewhere.
        stop: Vec<LeaseRef>,
        /// The other sites' agents, for probes and transfers.
        peers: Vec<Peer>,
        /// The players who entered the game at this site's gateway and have not left, as the
        /// core knows them (at most [`MAX_HOMED`]). An agent that just started (it knows
        /// nobody) keeps them for their clients to resume (`gateway::Request::Resume`); one
        /// that knew its players already ignores the list.
        homed: Vec<HomedPlayer>,
    },
    /// To `Renew`: `granted` run for `ttl_ms` from the renewal's send time; the others must stop.
    Renewed { ttl_ms: u32, granted: Vec<LeaseRef>, refused: Vec<LeaseRef> },
    /// To `Prepare` (target): ready to receive the transfer.
    Prepared { handover: HandoverId },
    /// To `Freeze` (source): frozen and sealed at `tick`; the seal is on its way to the target.
    Frozen { handover: HandoverId, tick: Tick },
    /// To `PlayerIds`: the ids `first .. first + count` are this agent's to give.
    PlayerIds { first: u64, count: u32 },
}

kinds!(Reply {
    Done => "done",
    Registered => "registered",
    Renewed => "renewed",
    Prepared => "prepared",
    Frozen => "frozen",
    PlayerIds => "player_ids",
});

/// A lease held at an agent, reported at registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub lease: LeaseRef,
    pub tick: Tick,
}

/// Another site's agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub site: Name,
    pub transfer_addr: String,
}

/// A player of a bubble.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Member {
    pub player: PlayerId,
    /// The player's home site, where their updates go.
    pub home: Name,
    /// Where the player was last reported, for a fresh player's spawn.
    pub pos: Vec3,
    /// The player comes from another bubble, whose holder sends their state (a `Cross`);
    /// `false` for a fresh connection (empty state, no input applied yet).
    pub crossing: bool,
}

/// Players in one `Registered` list at most: a site with more (far beyond its pool's
/// capacity) has the rest join again as new players after a restart of its agent.
pub const MAX_HOMED: usize = 6144;

/// A player of the registering site, as the core knows them (see `Reply::Registered`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HomedPlayer {
    pub sample: PlayerSample,
    /// The bubble simulating them, and the site holding it.
    pub route: Option<(BubbleId, Name)>,
    /// The highest of their inputs a stored copy holds (0: none): a restore brings back no
    /// input after it, so their client sends again from the next one.
    pub covered: Seq,
}

/// A player connected at this site, and the bubble simulating them (if routed).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacedPlayer {
    pub sample: PlayerSample,
    pub bubble: Option<BubbleId>,
}

/// A player's inputs up to `seq` are in a stored copy of their bubble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoveredInput {
    pub player: PlayerId,
    pub seq: Seq,
}

/// Which part of a bubble spread over several servers holds a player (index into `parts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartMember {
    pub player: PlayerId,
    pub part: u32,
}

/// A player who left a bubble for another one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Departure {
    pub player: PlayerId,
    /// The bubble the player now belongs to, under the epoch its holder runs.
    pub to: LeaseRef,
    /// The site simulating `to`.
    pub site: Name,
}

/// Where one player is simulated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlayerRoute {
    pub player: PlayerId,
    pub bubble: BubbleId,
    pub site: Name,
}

/// A player as seen by their home agent: at connection (in `joins`, where the RTT is the one
/// measured at connection) or now (in `players`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlayerSample {
    pub player: PlayerId,
    /// Latest access RTT measured by the agent (QUIC path RTT), milliseconds.
    pub access_rtt_ms: f32,
    pub role: Role,
    pub world: crate::types::WorldId,
    pub pos: Vec3,
    pub vel: Vec3,
}

/// This site's measured link to another site.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackboneSample {
    pub site: Name,
    /// Smoothed round trip, milliseconds; `None` when the link is down.
    pub rtt_ms: Option<f32>,
    /// Share of probes lost over the last report period, 0–1.
    pub loss: f32,
}

/// One game server of this site.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerLoad {
    pub server: Name,
    /// Simulation ticks per second over the last second.
    pub tps: f32,
    pub players: u32,
    pub chunks_loading: u32,
    /// Registered, tps ≥ 58, no chunk loading, and a seat left (holding nothing, or fewer
    /// players than the agent's `players_per_server × pack_fill_ratio`): takes a region now.
    pub ready: bool,
    pub bubbles: Vec<BubbleId>,
}

/// Stream items on the control channel (agent → core): the universe backup. The core keeps
/// the latest copy of every bubble, accepted only under the bubble's current epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backup {
    /// One chunk of a state copy of a bubble at `tick`.
    Chunk { lease: LeaseRef, tick: Tick, index: u32, total: u32, bytes: Blob },
    /// One chunk of a state copy of part `part` of a bubble spread over `parts` servers (each
    /// part's server copies its own state; the set of parts makes the bubble's copy).
    Part { lease: LeaseRef, part: u32, parts: u32, tick: Tick, index: u32, total: u32, bytes: Blob },
    /// Sent after the last chunk of a whole copy at `tick`: the last input of each player the
    /// copy includes (the acknowledgements of the holder's update of that tick; a lower bound).
    Covers { lease: LeaseRef, tick: Tick, acked: Vec<(PlayerId, Seq)> },
}

impl crate::channel::Weigh for Backup {
    fn weight(&self) -> usize {
        crate::channel::FIELDS_WEIGHT
            + match self {
                Backup::Chunk { bytes, .. } | Backup::Part { bytes, .. } => bytes.0.len(),
                Backup::Covers { acked, .. } => acked.len() * crate::channel::ENTRY_WEIGHT,
            }
    }
}

kinds!(Backup {
    Chunk => "backup_chunk",
    Part => "backup_part",
    Covers => "backup_covers",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{MAX_FRAME_BYTES, MAX_NAME_BYTES, PROTOCOL_VERSION, to_frame};
    use crate::types::RequestId;

    #[test]
    fn a_registration_answer_with_the_most_homed_players_of_the_longest_fields_fits_a_frame() {
        let far = Vec3 { x: f64::MAX, y: f64::MIN, z: 1e300 };
        let site = Name::new("s".repeat(MAX_NAME_BYTES)).unwrap();
        let worst = HomedPlayer {
            sample: PlayerSample {
                player: PlayerId(u64::MAX),
                access_rtt_ms: f32::MAX,
                role: Role::Pilot,
                world: crate::types::WorldId(u32::MAX),
                pos: far,
                vel: far,
            },
            route: Some((BubbleId(u64::MAX), site)),
            covered: Seq(u64::MAX),
        };
        let reply = Reply::Registered {
            generation: u32::MAX,
            tick_ms: u32::MAX,
            keep: Vec::new(),
            stop: Vec::new(),
            peers: Vec::new(),
            homed: vec![worst; MAX_HOMED],
        };
        let frame = crate::channel::ReplyFrame { id: RequestId(u64::MAX), result: Ok(reply) };
        let frame = to_frame(&frame, PROTOCOL_VERSION, ChannelId::Control, MAX_FRAME_BYTES);
        let len = frame.map(|f| f.len()).unwrap_or(usize::MAX);
        assert!(len < MAX_FRAME_BYTES - 64 * 1024, "{len} bytes");
    }
}
