//! What an agent counts as it runs: lock-free figures the machine updates (the metrics and the
//! admin API read them), and the freezes its players saw (written by the shell).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Live figures of an agent (for tests and the demo).
#[derive(Debug, Default)]
pub struct AgentStats {
    pub players: AtomicU64,
    pub bubbles: AtomicU64,
    pub servers: AtomicU64,
    /// Game servers that said they are ready (holding a bubble or not).
    pub servers_ready: AtomicU64,
    /// Idle game servers stopped because the warm pool was full.
    pub servers_stopped_idle: AtomicU64,
    /// The pool's bounds as configured: servers kept ready beyond the load
    /// (`servers.warm_pool`), and the most the site runs (`servers.max`).
    pub servers_warm_pool: AtomicU64,
    pub servers_max: AtomicU64,
    /// Regions moved whole from an overfull game server to another of this site.
    pub regions_moved: AtomicU64,
    /// Moves with the region's state given up: before the old server froze (the region stays
    /// there), and after (the region is lost here and fails over).
    pub region_moves_given_up: AtomicU64,
    pub region_moves_lost: AtomicU64,
    /// Game servers that stopped after draining (`Drain`): every region moved off first, or
    /// some left behind to fail over from their copies.
    pub drains_moved: AtomicU64,
    pub drains_failed_over: AtomicU64,
    /// Probe beacon: pings answered, packets that were no ping, pings over a source's rate.
    pub beacon_pongs: AtomicU64,
    pub beacon_malformed: AtomicU64,
    pub beacon_limited: AtomicU64,
    /// Joins with a probe table: believed, contradicted by the gateway's own RTT or the
    /// backbone; believed tables naming another site nearer than this one.
    pub probe_tables_accepted: AtomicU64,
    pub probe_tables_contradicted: AtomicU64,
    pub joins_not_nearest: AtomicU64,
    /// 1 while registered with the core.
    pub registered: AtomicU64,
    /// Inputs kept by the gateway until a stored copy covers them, every player together.
    pub inputs_unacked: AtomicU64,
    pub inputs_received: AtomicU64,
    pub inputs_resent: AtomicU64,
    pub inputs_refused: AtomicU64,
    /// Inputs over the size limit (their players' connections closed).
    pub inputs_too_large: AtomicU64,
    /// Updates from a game server for a bubble it does not hold here, or under another epoch
    /// than the bubble's lease here: refused (fencing).
    pub stale_updates_refused: AtomicU64,
    /// `Positions` reports from a game server for a region it does not run here under that
    /// lease: refused (placement takes positions only from whoever simulates the players).
    pub positions_refused: AtomicU64,
    /// Orders of the core's ordered lane refused: one that came twice, or too far ahead.
    pub orders_refused: AtomicU64,
    /// Orders of the core's ordered lane unanswered for 5 s: the next ones went without them.
    pub orders_overtaken: AtomicU64,
    /// Items dropped at a full outbound stream queue (items or bytes).
    pub stream_items_dropped: AtomicU64,
    /// Applied inputs forgotten before a stored copy covered them (a player's kept inputs were
    /// at their limit): a restore from the copy could not replay them.
    pub inputs_uncovered_dropped: AtomicU64,
    /// Updates a game server wrote for a bubble after its lease had ended by this agent's
    /// clock (beyond a 250 ms allowance for the hop): I5 seen from the agent, 0 when the
    /// servers stop on time.
    pub writes_after_lease: AtomicU64,
    /// Regions that stopped here because their lease ran out by this agent's clock (the core
    /// unreachable for a whole lease, or a renewal refused): each one's players waited for a
    /// failover. 0 through a core's restart or a standby's takeover.
    pub leases_lapsed: AtomicU64,
    /// Players who reconnected and resumed as themselves (the same client, or a resumption
    /// credential).
    pub resumes: AtomicU64,
    /// `Resume`s refused, by reason: a credential forged, expired or malformed; another
    /// site's; another account's; for a player no longer in the game here.
    pub resumes_refused_invalid: AtomicU64,
    pub resumes_refused_other_site: AtomicU64,
    pub resumes_refused_other_account: AtomicU64,
    pub resumes_refused_unknown: AtomicU64,
    pub updates_delivered: AtomicU64,
    /// Players' own states delivered to this site's players ahead of their tick's update.
    pub own_delivered: AtomicU64,
    /// Own states refused: from a server not holding the bubble here under its lease (fencing,
    /// as for updates), or over `MAX_OWN_BYTES`.
    pub own_refused: AtomicU64,
    pub crossings: AtomicU64,
    /// Crossings to another site given up: not taken within their deadline.
    pub crossings_lost: AtomicU64,
    /// The last moves of this site's players' bubbles to a new holder, as the gateway saw them
    /// (at most [`MAX_FREEZES`]; for the demo's report). Written by the shell, not the machine.
    pub freezes: std::sync::Mutex<Vec<FreezeSample>>,
    /// The last changes of bubble of this site's players (border crossings, merges), as the
    /// gateway saw them (at most [`MAX_FREEZES`], no floor; for the demo's report).
    pub crossing_freezes: std::sync::Mutex<Vec<FreezeSample>>,
    pub handovers_in: AtomicU64,
    /// Transfer traffic routed through a third site (the direct link down or much slower):
    /// items and requests this agent sent round, those it passed on for two other sites, and
    /// those it dropped (no route on, or past the hop limit).
    pub relayed_sent: AtomicU64,
    pub relayed_through: AtomicU64,
    pub relayed_dropped: AtomicU64,
    /// Changes of the first hop towards another site (a link down, up, or much slower).
    pub route_changes: AtomicU64,
    /// Sites this agent reaches through a third one now.
    pub routes_relayed: AtomicU64,
}

/// Freeze samples kept in [`AgentStats::freezes`].
pub const MAX_FREEZES: usize = 10_000;

/// One move of a player's bubble to a new holder, as the player's gateway saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct FreezeSample {
    pub from: String,
    pub to: String,
    /// The gap in the player's updates.
    pub gap: Duration,
    /// The physical floor of that gap, once the round trips it needs are known.
    pub floor: Option<Duration>,
}
