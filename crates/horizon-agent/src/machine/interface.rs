//! What goes in and out of [`AgentMachine`](super::AgentMachine): the shell's events
//! ([`Input`]) and the machine's orders to it ([`Effect`]).

use super::*;

/// What a valid resumption credential claims (`horizon_transport::credential::Resumption`):
/// the machine checks it against what it knows (its site, the connection's account, the
/// player still in the game here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumption {
    pub site: Name,
    pub player: PlayerId,
    pub account: Client,
}

/// What happened, as the shell saw it.
#[derive(Debug)]
pub enum Input {
    /// The control connection is up (the shell opened its backup stream).
    CoreUp,
    CoreDown {
        error: String,
    },
    /// An order of the core, answered with [`Effect::AnswerCore`] carrying `token`.
    CoreOrder {
        token: Token,
        order: control::Request,
    },
    CoreReplied {
        pending: Pending,
        result: Result<control::Reply, Failure>,
    },
    /// A game server connected and said hello as `server`.
    ServerUp {
        server: Name,
        conn: ConnId,
    },
    /// A server's request, answered at once with [`Effect::AnswerServer`].
    ServerRequest {
        server: Name,
        conn: ConnId,
        token: Token,
        request: server::Request,
    },
    ServerItem {
        server: Name,
        item: StateItem,
    },
    ServerReplied {
        server: Name,
        pending: Pending,
        result: Result<server::Reply, Failure>,
    },
    ServerGone {
        server: Name,
        conn: ConnId,
    },
    /// The platform counts `server` ready (a pod's Ready condition): the answer to
    /// [`Effect::AskPlatformReady`], given only when it holds.
    PlatformReady {
        server: Name,
    },
    /// The driver saw a server's process (or pod) end.
    ServerEnded {
        server: String,
        why: String,
    },
    /// The driver could not start a server.
    ServerNotStarted {
        server: String,
        why: String,
    },
    /// A gateway connection from `client`; `rtt_ms` is its transport's estimate.
    PlayerUp {
        conn: ConnId,
        client: Client,
    },
    PlayerRequest {
        conn: ConnId,
        token: Token,
        request: gateway::Request,
        rtt_ms: f32,
    },
    /// An operator asked to drain game server `server` (the admin API), answered with
    /// [`Effect::AnswerDrain`] carrying `token`.
    DrainAsked {
        token: Token,
        server: String,
    },
    /// A player's `Resume` on `conn`, its credential checked by the shell (signature and
    /// expiry, against the site's player keys): what it claims, or why it is refused.
    /// Answered with [`Effect::AnswerPlayer`] carrying `token`.
    PlayerResume {
        conn: ConnId,
        token: Token,
        claim: Result<Resumption, String>,
        rtt_ms: f32,
    },
    PlayerDatagram {
        conn: ConnId,
        datagram: gateway::Datagram,
        rtt_ms: f32,
    },
    PlayerItem {
        conn: ConnId,
        item: gateway::Item,
    },
    PlayerGone {
        conn: ConnId,
    },
    /// A transfer connection with `site`, accepted or dialed.
    PeerUp {
        site: Name,
        conn: ConnId,
    },
    PeerRequest {
        site: Name,
        token: Token,
        request: transfer::Request,
    },
    PeerItem {
        site: Name,
        item: StateItem,
    },
    PeerDatagram {
        site: Name,
        probe: transfer::Probe,
    },
    PeerReplied {
        site: Name,
        pending: Pending,
        result: Result<transfer::Reply, Failure>,
    },
    PeerGone {
        site: Name,
        conn: ConnId,
    },
    /// The handover stream asked for with [`Effect::OpenMirror`] is open (or why not).
    MirrorOpened {
        handover: HandoverId,
        result: Result<(), Failure>,
    },
}

/// What the shell must do, in order.
#[derive(Debug)]
pub enum Effect {
    ToCore {
        pending: Pending,
        request: control::Request,
    },
    AnswerCore {
        token: Token,
        result: Result<control::Reply, Fault>,
    },
    /// One item of the universe backup stream to the core.
    Backup(control::Backup),
    StartServer {
        server: String,
    },
    StopServer {
        server: String,
    },
    /// Ask `server` to stop gracefully (SIGTERM; a pod's deletion): it drains first.
    TerminateServer {
        server: String,
    },
    /// The answer to [`Input::DrainAsked`].
    AnswerDrain {
        token: Token,
        result: Result<String, horizon_admin::Refused>,
    },
    /// Whether the platform counts `server` ready: answered with [`Input::PlatformReady`] if
    /// so, else not at all (the machine asks again every housekeeping period while it holds
    /// the server's `Ready`).
    AskPlatformReady {
        server: Name,
    },
    /// Tell the platform whether `server` holds a region (`hosting`) or waits in the warm pool
    /// (a pod's `horizon.dev/pool` label), as it changes.
    SetHosting {
        server: Name,
        hosting: bool,
    },
    /// A request to a game server, after every earlier one to it has been answered.
    ToServer {
        server: Name,
        pending: Pending,
        request: server::Request,
    },
    /// An item on the stream to a game server (dropped if its queue is full).
    ServerStream {
        server: Name,
        item: StateItem,
    },
    AnswerServer {
        token: Token,
        result: Result<server::Reply, Fault>,
    },
    /// An item on the stream to a player's connection (dropped if its queue is full).
    ToPlayer {
        conn: ConnId,
        item: gateway::Item,
    },
    PlayerDatagram {
        conn: ConnId,
        datagram: gateway::Datagram,
    },
    /// Closes a player's connection with `code` (a rule of the protocol broken by that player
    /// alone: an oversized input).
    ClosePlayer {
        conn: ConnId,
        code: horizon_proto::ErrorCode,
        reason: String,
    },
    AnswerPlayer {
        token: Token,
        result: Result<gateway::Reply, Fault>,
    },
    /// A player of this site saw their bubble move to a new holder: `gap` without updates, and
    /// `floor`, the least the move could cost them (design.md §5:
    /// `d(S,T) + d(T,h) − d(S,h) + tick`, one-way delays from the measured backbone: this
    /// agent's probes, the core's `Links` for a pair it is not on), once those are known. For
    /// the metrics.
    Freeze {
        from: Name,
        to: Name,
        gap: Duration,
        floor: Option<Duration>,
    },
    /// A player changed bubble (a border crossing, a merge): the gap between the last update
    /// of the old bubble (from `from`) and the first of the new one (from `to`), at their home
    /// gateway, and the least it could be (design.md §5's floor, as for [`Effect::Freeze`];
    /// one tick when both bubbles run on one site). For the metrics.
    Crossed {
        from: Name,
        to: Name,
        gap: Duration,
        floor: Option<Duration>,
    },
    /// Inputs of one player acknowledged by an update just delivered: for each, the time from
    /// reaching the gateway to that update (`delays`), and the player's access round trip
    /// (its smallest measured), which added to a delay estimates their click-to-screen. For the
    /// metrics.
    InputsServed {
        delays: Vec<Duration>,
        access_rtt: Duration,
    },
    /// Keep a transfer link to `site` at `addr` (reported back as [`Input::PeerUp`]).
    DialPeer {
        site: Name,
        addr: horizon_types::Target,
    },
    ToPeer {
        site: Name,
        pending: Pending,
        request: transfer::Request,
    },
    PeerStream {
        site: Name,
        item: StateItem,
    },
    PeerDatagram {
        site: Name,
        probe: transfer::Probe,
    },
    AnswerPeer {
        token: Token,
        result: Result<transfer::Reply, Fault>,
    },
    /// Ask `site` to take the handover's state (`Open`) and open a stream for it; the result
    /// comes back as [`Input::MirrorOpened`].
    OpenMirror {
        site: Name,
        handover: HandoverId,
        bubble: BubbleId,
        epoch: Epoch,
    },
    /// An item on a handover's stream (dropped if its queue is full).
    Mirror {
        handover: HandoverId,
        item: StateItem,
    },
    CloseMirror {
        handover: HandoverId,
    },
}
