//! The core's status document (`/status`), typed: what the admin API serves, the console
//! draws, and the demo and tests read (`CoreHandle::status`). Field names are the JSON keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole document. Players are listed a page at a time (`players_total`, `players_next`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoreStatus {
    /// The core's site.
    pub core: String,
    /// The core's generation (+1 at every start on its store).
    pub generation: u32,
    /// Leases this core has kept (at an agent's registration) or renewed since it began to
    /// lead: the first one is a new leader's first grant (the drills' `takeover_s`).
    #[serde(default)]
    pub leases_granted: u64,
    /// The rollout stage it runs (`[placement] stage`): `relay` or `dynamic`.
    #[serde(default)]
    pub stage: String,
    pub uptime_s: f64,
    /// The brain's last tick.
    pub tick: horizon_mesh::TickStats,
    pub handovers: HandoverCounts,
    /// Stale-epoch writes refused (I1 seen from the core).
    pub stale_refused: StaleRefused,
    /// Failovers so far, by the site the bubbles went to.
    pub failovers: BTreeMap<String, u64>,
    /// Restores from the universe backup so far (failovers and drains), by the copy they
    /// came from: `whole`, `parts`, `none` (restored empty).
    #[serde(default)]
    pub restores: BTreeMap<String, u64>,
    pub sites: Vec<SiteStatus>,
    pub bubbles: Vec<BubbleStatus>,
    /// The core site's zones as the brain cuts them (SMD's split and merge), each run on a
    /// game server of the core site like any region.
    #[serde(default)]
    pub zones: Vec<ZoneStatus>,
    /// Zone splits and merges since the core started.
    #[serde(default)]
    pub zone_changes: ZoneChanges,
    /// The brain's proximity groups, largest first (at most 500).
    pub groups: Vec<GroupStatus>,
    pub players: Vec<PlayerStatus>,
    pub players_total: usize,
    /// The `after` of the next page, if any.
    pub players_next: Option<u64>,
    /// Stage 1's figures from the probe tables of the players online (any stage).
    #[serde(default)]
    pub measure: crate::machine::measure::MeasureStatus,
    /// The brain's latest decisions (free-form, newest first).
    pub recent_decisions: Vec<serde_json::Value>,
    /// What happened to regions and sites, in plain words, newest first (at most 256).
    #[serde(default)]
    pub timeline: Vec<TimelineEvent>,
    /// The placement rules' numbers, as configured (for reading `explain`).
    #[serde(default)]
    pub rules: Rules,
    /// The backbone between agents as their reports show it (a link is down when either end
    /// says so), and the routes through a third site it gives (`docs/running.md`, "Routing
    /// round a cut").
    #[serde(default)]
    pub links: Vec<LinkStatus>,
    #[serde(default)]
    pub routes: Vec<RouteStatus>,
}

/// One link on `/status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkStatus {
    pub a: String,
    pub b: String,
    /// The larger of the two ends' round trips, milliseconds; `None`: down.
    pub rtt_ms: Option<f32>,
}

/// A route through a third site on `/status`: traffic from `from` to `to` goes to `via` first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouteStatus {
    pub from: String,
    pub to: String,
    pub via: String,
}

/// The placement rules' numbers (`[thresholds]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rules {
    /// The fairness cap (ms).
    pub cap_ms: f64,
    /// The gain per counted player a move needs (ms).
    pub gain_ms: f64,
    /// How long a better site must stay best before a move (s).
    pub dwell_s: f64,
    /// How long a bubble stays after a move (s).
    pub hold_s: f64,
}

/// One line of the timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineEvent {
    /// When, on the core's clock (`uptime_s` × 1000 is now).
    pub t_ms: u64,
    pub kind: EventKind,
    /// The region it concerns, if one.
    pub region: Option<u64>,
    /// What happened, in words.
    pub text: String,
}

/// What a timeline event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A region created or ended.
    Region,
    /// A bubble moved to another site by a fenced handover (started, committed, abandoned).
    Handover,
    /// A bubble lost its holder and was granted elsewhere.
    Failover,
    /// A region restored from its copy (or empty, with none).
    Restore,
    /// Players crossed into a region from another site.
    Crossing,
    /// A zone split (SMD).
    Split,
    /// Regions joined: bubbles whose groups met, or a zone's halves.
    Merge,
    /// A bubble spread over more servers of its site, or fewer.
    Load,
    /// A site's agent registered again.
    Site,
    /// Something broke: an agent lost, a lease run out.
    Fault,
}

/// When a region last changed, and how.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub t_ms: u64,
    pub text: String,
}

/// Why a bubble is where it is (`horizon_mesh::Explanation`, with site names).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    /// `scored` (SMD-G), `delegated` (the fixed stage), `never` (a baseline policy),
    /// `failing_over` (its lease ran out).
    pub rule: String,
    /// Counted players in it now, and their weight.
    pub counted: u32,
    pub weight: f64,
    /// Every site, in configuration order.
    pub candidates: Vec<Candidate>,
    /// The site the scoring rules pick now.
    pub best: String,
    /// The best site's cost below the current one's, per counted weight (ms).
    pub gain_ms: f64,
    /// The current site breaks the cap and the best does not.
    pub fixes_cap: bool,
    /// `stay`, `wait` (dwell or hold not over) or `move` (at the next tick).
    pub verdict: String,
    /// How long the best site has been best (s).
    pub dwell_s: f64,
    /// How long the last move still holds it (s).
    pub hold_left_s: f64,
    /// All of it in one or two sentences.
    pub words: String,
}

/// One site as a candidate for a bubble.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub site: String,
    /// The weighted mean latency of its counted players if simulated there (ms).
    pub cost_ms: f64,
    /// The worst counted player's latency there (ms).
    pub worst_ms: f64,
    /// Over the fairness cap.
    pub breaks_cap: bool,
    /// Could take the bubble now.
    pub can_host: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HandoverCounts {
    pub committed: u64,
    /// Abandoned before the freeze or given up after it.
    pub failed: u64,
    pub in_flight: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StaleRefused {
    /// State copies refused (not the current holder or epoch).
    pub copies: u64,
    /// Renewals refused (fenced or expired).
    pub renewals: u64,
}

/// One site, as the core sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteStatus {
    pub site: String,
    /// The core's own site.
    pub core: bool,
    pub agent_connected: bool,
    /// Where operators reach the site agent's admin API (`host:port`), as it said.
    pub admin: Option<String>,
    /// Players homed here.
    pub players: usize,
    /// Bubbles simulated here.
    pub bubbles: usize,
    /// The agent's game servers, as it last reported them (`None` while it is away).
    pub servers: Option<Vec<ServerStatus>>,
    /// Backbone round trips to the other sites, as measured (ms).
    pub backbone_rtt_ms: BTreeMap<String, f64>,
    /// The bounds of its pool of game servers, as its agent said (`None`: not said yet).
    #[serde(default)]
    pub pool: Option<PoolBounds>,
}

/// A site's pool bounds (`servers.warm_pool`, `servers.max` of its agent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolBounds {
    /// Servers kept ready beyond the load; idle ones beyond it are stopped after 30 s.
    pub warm: u32,
    /// The most servers the site runs.
    pub max: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub server: String,
    pub tps: f32,
    pub players: u32,
    pub ready: bool,
    pub bubbles: Vec<u64>,
}

/// A box: `[[min x, y, z], [max x, y, z]]`.
pub type Bounds = [[f64; 3]; 2];

/// Zone splits and merges since the core started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneChanges {
    pub splits: u64,
    pub merges: u64,
}

/// One zone of the core site.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ZoneStatus {
    pub zone: u64,
    pub epoch: u64,
    pub world: u32,
    pub bounds: Bounds,
    /// Counted players in it and in no bubble, at the brain's last tick.
    pub players: u32,
    /// Players its server simulates now, as the core routed them.
    pub members: usize,
    /// Being restored on another server of the core site from its copy (its lease ran out).
    pub restoring: bool,
    /// The site simulating it (the core's).
    #[serde(default)]
    pub site: String,
    /// Its members by home site.
    #[serde(default)]
    pub homes: BTreeMap<String, usize>,
    /// What SMD's rule counts for it: its load against a server's capacity and the split or
    /// merge it counts towards.
    #[serde(default)]
    pub load: Option<horizon_mesh::split::Counting>,
    /// Groups playing in it whose best site is another, counting the dwell before a bubble is
    /// carved out of it for them there (SMD-G).
    #[serde(default)]
    pub carving: Vec<CarvingStatus>,
    #[serde(flatten)]
    pub life: RegionLife,
}

/// A group in a zone counting towards a carve (`horizon_mesh::Carving`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CarvingStatus {
    /// The group's smallest player id.
    pub first: u64,
    pub players: u32,
    /// Where it will be carved out to.
    pub site: String,
    /// Its gain there over the core site, per counted player (ms).
    pub gain_ms: f64,
    /// Seconds its best site has been `site`, of the dwell `rules.dwell_s`.
    pub dwelt_s: f64,
    /// The count in one sentence.
    pub words: String,
}

/// What every region shows, zone or bubble (flattened into its object).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RegionLife {
    /// The game servers holding it, as their agent last reported.
    #[serde(default)]
    pub servers: Vec<String>,
    /// Since this core created it or took it back (s).
    #[serde(default)]
    pub age_s: f64,
    #[serde(default)]
    pub last_change: Option<Change>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BubbleStatus {
    pub bubble: u64,
    /// Its holder.
    pub site: String,
    pub epoch: u64,
    pub world: u32,
    pub bounds: Bounds,
    pub players: usize,
    /// Its members by home site.
    pub homes: BTreeMap<String, usize>,
    /// The handover under way, if any.
    pub moving: Option<u64>,
    /// Being restored from its copy (a failover).
    pub restoring: bool,
    /// Ticks per second of each part, as its servers report (`None`: not reported yet).
    pub tps: Option<Vec<Option<f64>>>,
    /// The parts' boxes when spread over several servers.
    pub parts: Vec<Bounds>,
    /// What SMD's rule counts for each part (one when on one server): its load against a
    /// server's capacity and the split or merge it counts towards.
    #[serde(default)]
    pub load: Vec<horizon_mesh::split::Counting>,
    #[serde(flatten)]
    pub life: RegionLife,
    /// Why it is where it is (absent while the brain does not know it: during a restart).
    #[serde(default)]
    pub explain: Option<Explain>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupStatus {
    pub players: Vec<u64>,
    pub homes: BTreeMap<String, usize>,
    /// The bubble holding the whole group, if one does.
    pub bubble: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlayerStatus {
    pub player: u64,
    /// The site they reach fastest: their gateway's, unless the measure stage found another
    /// (`home_measured`).
    pub home: String,
    /// The site whose gateway they entered at: the brain measures every site from it.
    #[serde(default)]
    pub gateway: String,
    #[serde(default)]
    pub home_measured: bool,
    pub world: u32,
    pub pos: [f64; 3],
    pub bubble: Option<u64>,
    /// The latency the brain scores the player's bubble with (ms), if placed.
    pub latency_ms: Option<f64>,
}

impl CoreStatus {
    /// The site named `site`.
    pub fn site(&self, site: &str) -> Option<&SiteStatus> {
        self.sites.iter().find(|s| s.site == site)
    }

    /// The bubble `bubble`.
    pub fn bubble(&self, bubble: u64) -> Option<&BubbleStatus> {
        self.bubbles.iter().find(|b| b.bubble == bubble)
    }

    /// The bubble player `player` is in, and its holder.
    pub fn placement(&self, player: u64) -> Option<&BubbleStatus> {
        let bubble = self.players.iter().find(|p| p.player == player)?.bubble?;
        self.bubble(bubble)
    }

    /// The site simulating player `player`: its bubble's, or the core site's when it plays in
    /// a zone.
    pub fn site_of(&self, player: u64) -> Option<&str> {
        let region = self.players.iter().find(|p| p.player == player)?.bubble?;
        match self.bubble(region) {
            Some(b) => Some(b.site.as_str()),
            None => self.zones.iter().find(|z| z.zone == region).map(|z| z.site.as_str()),
        }
    }
}
