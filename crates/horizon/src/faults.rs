//! `horizon demo --faults FILE`: drills. Timed faults carried out on the running mesh, and
//! what each did to the players it touched (docs/running.md, "Drills").
//!
//! ```toml
//! [[fault]]
//! at_s = 40
//! kind = "partition"     # the site agent's link to the core, both ways
//! site = "MTL"
//! for_s = 45
//! ```
//!
//! Kinds: `partition` (site, for_s), `kill_server` (site: SIGKILL of the game server holding
//! that site's most players), `restart_core` (for_s: down that long, then back on its store),
//! `restart_agent` (site, for_s: killed as a crash would, its game servers with it, started
//! again with nothing after for_s; its players join again as new players), `cut_transfer`
//! (sites = [A, B], for_s), `loss` (site, rate 0–1, for_s: on the agent–core link). With
//! `--standby` (two cores on etcd): `kill_core` (the leader dies as its machine would, never
//! restarted: the standby takes over) and `partition_core_store` (for_s: the leader cut from
//! etcd fences itself, the standby takes over; at the end the old leader is started again and
//! stands by, as its supervisor would).

use std::collections::BTreeMap;
use std::path::Path;

use horizon_core::CoreStatus;
use horizon_testkit::Sandbox;
use horizon_testkit::bots::BotReport;
use serde::Deserialize;

/// One fault of a drill file, checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) at_s: f64,
    /// How long it lasts (0 for a kill).
    pub(crate) for_s: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum FaultKind {
    Partition { site: String },
    KillServer { site: String },
    RestartCore,
    RestartAgent { site: String },
    CutTransfer { a: String, b: String },
    Loss { site: String, rate: f64 },
    KillCore,
    PartitionCoreStore,
}

/// The fault in words, for the demo's lines: "MTL cut from the core", "a game server of MTL
/// killed".
impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultKind::Partition { site } => write!(f, "{site} cut from the core"),
            FaultKind::KillServer { site } => write!(f, "a game server of {site} killed"),
            FaultKind::RestartCore => write!(f, "the core restarted"),
            FaultKind::RestartAgent { site } => write!(f, "{site}'s agent restarted"),
            FaultKind::CutTransfer { a, b } => write!(f, "the {a}-{b} transfer link cut"),
            FaultKind::Loss { site, rate } => {
                write!(f, "{:.0} % of packets lost between {site} and the core", rate * 100.0)
            }
            FaultKind::KillCore => write!(f, "the leading core killed"),
            FaultKind::PartitionCoreStore => write!(f, "the leading core cut from etcd"),
        }
    }
}

impl FaultKind {
    fn name(&self) -> &'static str {
        match self {
            FaultKind::Partition { .. } => "partition",
            FaultKind::KillServer { .. } => "kill_server",
            FaultKind::RestartCore => "restart_core",
            FaultKind::RestartAgent { .. } => "restart_agent",
            FaultKind::CutTransfer { .. } => "cut_transfer",
            FaultKind::Loss { .. } => "loss",
            FaultKind::KillCore => "kill_core",
            FaultKind::PartitionCoreStore => "partition_core_store",
        }
    }

    /// Carried out by the caller, which owns the sandbox (the process comes back after
    /// `for_s`; nothing is to be ended later).
    pub(crate) fn is_restart(&self) -> bool {
        matches!(self, FaultKind::RestartCore | FaultKind::RestartAgent { .. })
    }

    /// A fault of the leading core, taken over by its standby (`--standby`).
    pub(crate) fn is_takeover(&self) -> bool {
        matches!(self, FaultKind::KillCore | FaultKind::PartitionCoreStore)
    }

    fn sites(&self) -> Vec<String> {
        match self {
            FaultKind::Partition { site }
            | FaultKind::KillServer { site }
            | FaultKind::RestartAgent { site }
            | FaultKind::Loss { site, .. } => vec![site.clone()],
            FaultKind::CutTransfer { a, b } => vec![a.clone(), b.clone()],
            FaultKind::RestartCore | FaultKind::KillCore | FaultKind::PartitionCoreStore => {
                Vec::new()
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    fault: Vec<RawFault>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at_s: f64,
    kind: String,
    site: Option<String>,
    sites: Option<Vec<String>>,
    for_s: Option<f64>,
    rate: Option<f64>,
}

/// Longest drill fault, and latest start.
const MAX_S: f64 = 3_600.0;

/// The mesh a drill runs on: its sites (the core site first), and whether its core has a
/// standby on etcd (`horizon demo --standby`).
pub(crate) struct Mesh<'a> {
    pub(crate) sites: &'a [String],
    pub(crate) core: &'a str,
    pub(crate) standby: bool,
}

/// Reads and checks a drill file against the mesh. Every problem is reported, each naming its
/// fault.
pub(crate) fn load(path: &Path, mesh: &Mesh) -> Result<Vec<Fault>, Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
    parse(&text, mesh)
        .map_err(|errors| errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect())
}

pub(crate) fn parse(text: &str, mesh: &Mesh) -> Result<Vec<Fault>, Vec<String>> {
    let Mesh { sites, core, standby } = *mesh;
    let raw: RawFile = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
    let mut errors = Vec::new();
    let mut faults = Vec::new();
    for (i, f) in raw.fault.iter().enumerate() {
        let mut bad = |why: String| errors.push(format!("fault {} ({}): {why}", i + 1, f.kind));
        let known = |s: &str| sites.iter().any(|x| x == s);
        let relay = |s: &Option<String>, bad: &mut dyn FnMut(String)| -> Option<String> {
            match s {
                None => bad("needs `site`".into()),
                Some(s) if !known(s) => {
                    bad(format!("site {s:?} is not one of {}", sites.join(", ")))
                }
                Some(s) if s == core => bad(format!(
                    "{s} is the core site: its agent has no emulated link to the core to cut"
                )),
                Some(s) => return Some(s.clone()),
            }
            None
        };
        let any_site = |s: &Option<String>, bad: &mut dyn FnMut(String)| -> Option<String> {
            match s {
                Some(s) if known(s) => return Some(s.clone()),
                Some(s) => bad(format!("site {s:?} is not one of {}", sites.join(", "))),
                None => bad("needs `site`".into()),
            }
            None
        };
        if !(f.at_s.is_finite() && (0.0..=MAX_S).contains(&f.at_s)) {
            bad(format!("at_s = {} must be within 0..={MAX_S}", f.at_s));
        }
        let lasting = matches!(
            f.kind.as_str(),
            "partition"
                | "restart_core"
                | "cut_transfer"
                | "loss"
                | "restart_agent"
                | "partition_core_store"
        );
        let for_s = match (f.for_s, lasting) {
            (Some(s), true) if s.is_finite() && s > 0.0 && s <= MAX_S => s,
            (Some(s), true) => {
                bad(format!("for_s = {s} must be within 0 (excluded) ..= {MAX_S}"));
                0.0
            }
            (None, true) => {
                bad("needs `for_s`".into());
                0.0
            }
            (Some(_), false) => {
                bad("takes no `for_s`".into());
                0.0
            }
            (None, false) => 0.0,
        };
        if f.rate.is_some() && f.kind != "loss" {
            bad("takes no `rate`".into());
        }
        if f.sites.is_some() && f.kind != "cut_transfer" {
            bad("takes `site`, not `sites`".into());
        }
        let kind = match f.kind.as_str() {
            "partition" => relay(&f.site, &mut bad).map(|site| FaultKind::Partition { site }),
            "loss" => {
                let rate = f.rate.unwrap_or(f64::NAN);
                if !(0.0..=1.0).contains(&rate) {
                    bad("needs `rate` within 0..=1".into());
                }
                relay(&f.site, &mut bad).map(|site| FaultKind::Loss { site, rate })
            }
            "kill_server" => any_site(&f.site, &mut bad).map(|site| FaultKind::KillServer { site }),
            "restart_agent" => {
                any_site(&f.site, &mut bad).map(|site| FaultKind::RestartAgent { site })
            }
            "restart_core" => {
                if f.site.is_some() {
                    bad("takes no `site`".into());
                }
                if standby {
                    bad("with --standby the core is two processes on etcd: kill_core or \
                         partition_core_store instead"
                        .into());
                }
                Some(FaultKind::RestartCore)
            }
            "kill_core" | "partition_core_store" => {
                if f.site.is_some() {
                    bad("takes no `site`".into());
                }
                if !standby {
                    bad("needs `horizon demo --standby` (a core standing by on etcd to take over)"
                        .into());
                }
                Some(if f.kind == "kill_core" {
                    FaultKind::KillCore
                } else {
                    FaultKind::PartitionCoreStore
                })
            }
            "cut_transfer" => match f.sites.as_deref() {
                Some([a, b]) if known(a) && known(b) && a != b => {
                    Some(FaultKind::CutTransfer { a: a.clone(), b: b.clone() })
                }
                _ => {
                    bad(format!("needs `sites` = two different sites of {}", sites.join(", ")));
                    None
                }
            },
            other => {
                bad(format!(
                    "unknown kind {other:?}: partition, kill_server, restart_agent, \
                     restart_core, cut_transfer, loss, kill_core, partition_core_store"
                ));
                None
            }
        };
        if let Some(kind) = kind {
            faults.push(Fault { kind, at_s: f.at_s, for_s });
        }
    }
    if raw.fault.is_empty() {
        errors.push("no [[fault]] in the file".into());
    }
    if errors.is_empty() { Ok(faults) } else { Err(errors) }
}

/// A fault being carried out, and what is needed to report it.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) fault: Fault,
    /// When it started, in seconds since the Unix epoch (the bots' clock).
    started_at: f64,
    /// Index of each affected bot, with its `reconnecting_seen` and `sessions_ended` at the
    /// start.
    affected: Vec<(usize, u64, u64)>,
    /// What could not be done (e.g. no server to kill).
    pub(crate) problem: Option<String>,
    /// The core's generation and bubble ids when it began.
    generation: Option<u64>,
    bubbles: Vec<u64>,
    /// Looked at [`OBSERVE_AFTER_S`] after the fault ended.
    observed: Option<Observed>,
    /// Every agent's transfer items and requests sent round a cut, and passed on for others,
    /// when it began (`agent_stats`'s `relayed_sent`, `relayed_through`).
    relayed: (u64, u64),
    /// Regions stopped at their lease's end so far: at relay sites, at the core site.
    lapsed: (u64, u64),
    /// A leader's fault: how its standby took over ([`take_over`]).
    pub(crate) takeover: Option<Takeover>,
}

/// How a standby took over from a leader that died or was cut from etcd, in seconds from the
/// fault.
#[derive(Debug, Default)]
pub(crate) struct Takeover {
    /// The cut leader fenced itself (stopped granting and renewing): `None` for a kill.
    fenced_s: Option<f64>,
    /// The standby was elected (wrote the next generation).
    elected_s: f64,
    /// The new leader's first lease kept or renewed.
    first_grant_s: Option<f64>,
}

/// The mesh after a fault.
#[derive(Debug, Default)]
struct Observed {
    /// Where each affected player (by bot index: a player who joins again later, after an
    /// agent restart, has a new id) was simulated.
    placed: BTreeMap<usize, String>,
    /// Each affected bot's `sessions_ended` then: a session a later fault ended (a restarted
    /// agent) is not this one's doing.
    sessions: BTreeMap<usize, u64>,
    generation: Option<u64>,
    bubbles: Vec<u64>,
    /// What was relayed since the fault began: (sent round, passed on).
    relayed: (u64, u64),
    /// Regions stopped at their lease's end since the fault began: (relay sites, core site).
    lapsed: (u64, u64),
}

/// Every agent's relayed traffic so far: (sent round, passed on).
fn relayed(sandbox: &Sandbox) -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    sandbox.every_agent_stats().fold((0, 0), |(sent, through), s| {
        (sent + s.relayed_sent.load(Relaxed), through + s.relayed_through.load(Relaxed))
    })
}

/// Regions stopped at their lease's end so far, every agent that ran: (relay sites, core site).
fn lapsed(sandbox: &Sandbox) -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    let core = sandbox.core_site();
    let of = |core_site: bool| -> u64 {
        sandbox
            .every_agent_site_stats()
            .filter(|(site, _)| (*site == core) == core_site)
            .map(|(_, s)| s.leases_lapsed.load(Relaxed))
            .sum()
    };
    (of(false), of(true))
}

/// A leader's fault, carried out: kills the leader (`kill_core`; `partition_core_store` cut it
/// from etcd at [`start`] and it fences itself), waits for its standby to lead, then for the
/// new leader's first lease kept or renewed. Each at most 30 s.
pub(crate) async fn take_over(r: &mut Running, sandbox: &mut Sandbox) -> Result<(), String> {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(30);
    let began = r.started_at;
    let mut takeover = Takeover::default();
    if r.fault.kind == FaultKind::KillCore {
        sandbox.kill_leader().await;
    } else {
        let fenced = tokio::time::timeout(WITHIN, sandbox.core.fenced()).await;
        let why = fenced.map_err(|_| "the leader cut from etcd never fenced itself".to_owned())?;
        takeover.fenced_s = Some(now_s() - began);
        tracing::info!(%why, "drill: the leader fenced itself");
    }
    sandbox.standby_leads(WITHIN).await.map_err(|e| e.to_string())?;
    takeover.elected_s = now_s() - began;
    let deadline = tokio::time::Instant::now() + WITHIN;
    while tokio::time::Instant::now() < deadline {
        if sandbox.core.status().await.is_some_and(|s| s.leases_granted > 0) {
            takeover.first_grant_s = Some(now_s() - began);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    r.takeover = Some(takeover);
    Ok(())
}

/// A fault's outcome is looked at this long after it ended (or began, for a kill).
/// (Past a tick of the core, so that a restarted one has placed everyone again.)
pub(crate) const OBSERVE_AFTER_S: f64 = 8.0;

pub(crate) fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The player (bot index) → bubble and bubble → site maps of a status document.
fn placement(status: &CoreStatus) -> (BTreeMap<u64, u64>, BTreeMap<u64, String>) {
    let of = status.players.iter().filter_map(|p| Some((p.player, p.bubble?))).collect();
    let site = status.bubbles.iter().map(|b| (b.bubble, b.site.clone())).collect();
    (of, site)
}

/// Starts `fault` (everything but a core restart, which the caller carries out): decides who
/// it affects from the core's status, then breaks the link or kills the server.
pub(crate) fn start(
    fault: &Fault,
    sandbox: &Sandbox,
    status: &CoreStatus,
    bots: &[BotReport],
) -> Running {
    let (bubble_of, site_of) = placement(status);
    let player_site = |r: &BotReport| {
        r.player.and_then(|p| bubble_of.get(&p)).and_then(|b| site_of.get(b)).cloned()
    };
    let mut problem = None;
    let mut affected_bubbles: Option<Vec<u64>> = None;
    let pick = |pred: &dyn Fn(&BotReport) -> bool| -> Vec<(usize, u64, u64)> {
        bots.iter()
            .enumerate()
            .filter(|(_, r)| r.joined && !r.left_early && pred(r))
            .map(|(i, r)| (i, r.reconnecting_seen, r.sessions_ended))
            .collect()
    };
    let affected = match &fault.kind {
        FaultKind::Partition { site } => {
            sandbox.partition_core(site, true);
            pick(&|r| player_site(r).as_deref() == Some(site))
        }
        FaultKind::Loss { site, rate } => {
            sandbox.core_link_loss(site, *rate);
            pick(&|r| player_site(r).as_deref() == Some(site))
        }
        FaultKind::CutTransfer { a, b } => {
            sandbox.partition_transfer(a, b, true);
            pick(&|r| {
                let at = player_site(r);
                let pair = [a.as_str(), b.as_str()];
                pair.contains(&r.site.as_str())
                    && at.as_deref().is_some_and(|s| pair.contains(&s) && s != r.site)
            })
        }
        FaultKind::RestartCore | FaultKind::KillCore => pick(&|_| true),
        FaultKind::PartitionCoreStore => {
            sandbox.cut_leader_from_store(true);
            pick(&|_| true)
        }
        // Its players (their gateway dies) and those it simulates (its servers die).
        FaultKind::RestartAgent { site } => {
            pick(&|r| r.site == *site || player_site(r).as_deref() == Some(site))
        }
        FaultKind::KillServer { site } => {
            let servers = status.site(site).and_then(|s| s.servers.clone()).unwrap_or_default();
            let busiest =
                servers.iter().filter(|s| !s.bubbles.is_empty()).max_by_key(|s| s.players);
            match busiest.map(|s| (s.server.as_str(), s.bubbles.clone())) {
                Some((name, bubbles)) => {
                    if !sandbox.kill_server(site, name) {
                        problem = Some(format!("server {name} not found to kill"));
                    }
                    affected_bubbles = Some(bubbles);
                }
                None => problem = Some(format!("no game server at {site} holds a bubble")),
            }
            let bubbles = affected_bubbles.clone().unwrap_or_default();
            pick(&|r| r.player.and_then(|p| bubble_of.get(&p)).is_some_and(|b| bubbles.contains(b)))
        }
    };
    let generation = Some(u64::from(status.generation));
    let bubbles = bubble_ids(status);
    Running {
        fault: fault.clone(),
        started_at: now_s(),
        affected,
        problem,
        generation,
        bubbles,
        observed: None,
        relayed: relayed(sandbox),
        lapsed: lapsed(sandbox),
        takeover: None,
    }
}

fn bubble_ids(status: &CoreStatus) -> Vec<u64> {
    status.bubbles.iter().map(|b| b.bubble).collect()
}

/// Looks at where the fault left its players ([`OBSERVE_AFTER_S`] after it ended).
pub(crate) fn observe(r: &mut Running, status: &CoreStatus, bots: &[BotReport], sandbox: &Sandbox) {
    let (bubble_of, site_of) = placement(status);
    let mut at = BTreeMap::new();
    let mut sessions = BTreeMap::new();
    for &(i, ..) in &r.affected {
        let Some(bot) = bots.get(i) else { continue };
        sessions.insert(i, bot.sessions_ended);
        let Some(p) = bot.player else { continue };
        if let Some(site) = bubble_of.get(&p).and_then(|b| site_of.get(b)) {
            at.insert(i, site.clone());
        }
    }
    let generation = Some(u64::from(status.generation));
    let (sent, through) = relayed(sandbox);
    let relayed = (sent - r.relayed.0, through - r.relayed.1);
    let (relay, core) = lapsed(sandbox);
    let lapsed = (relay - r.lapsed.0, core - r.lapsed.1);
    let bubbles = bubble_ids(status);
    r.observed = Some(Observed { placed: at, sessions, generation, bubbles, relayed, lapsed });
}

/// Ends a lasting fault: the link heals.
pub(crate) fn end(fault: &Fault, sandbox: &Sandbox) {
    match &fault.kind {
        FaultKind::Partition { site } => {
            sandbox.partition_core(site, false);
        }
        FaultKind::Loss { site, .. } => {
            sandbox.core_link_loss(site, 0.0);
        }
        FaultKind::CutTransfer { a, b } => {
            sandbox.partition_transfer(a, b, false);
        }
        // Healed by the caller, which starts the fenced leader again as a standby.
        FaultKind::PartitionCoreStore => {}
        FaultKind::RestartCore
        | FaultKind::RestartAgent { .. }
        | FaultKind::KillServer { .. }
        | FaultKind::KillCore => {}
    }
}

/// A few words for the 5 s summary line: the faults in force and the players waiting.
/// (Reads the live reports under their locks: called every 5 s, it copies nothing.)
pub(crate) fn describe(
    running: &[Running],
    bots: &[std::sync::Arc<std::sync::Mutex<BotReport>>],
    now: f64,
) -> String {
    let mut parts = Vec::new();
    for r in running.iter().filter(|r| now < r.started_at + r.fault.for_s.max(5.0)) {
        let since = now - r.started_at;
        let what = match &r.fault.kind {
            FaultKind::Partition { site } => format!("{site} cut from core {since:.0} s"),
            FaultKind::Loss { site, rate } => format!("{site}–core loss {rate} {since:.0} s"),
            FaultKind::CutTransfer { a, b } => format!("{a}–{b} transfer cut {since:.0} s"),
            FaultKind::RestartCore => format!("core restarted {since:.0} s ago"),
            FaultKind::RestartAgent { site } => format!("{site} agent restarted {since:.0} s ago"),
            FaultKind::KillServer { site } => format!("{site} server killed {since:.0} s ago"),
            FaultKind::KillCore => format!("leader killed {since:.0} s ago"),
            FaultKind::PartitionCoreStore => format!("leader cut from etcd {since:.0} s"),
        };
        let waiting = r
            .affected
            .iter()
            .filter(|(i, seen, _)| {
                bots.get(*i)
                    .and_then(|b| b.lock().ok())
                    .is_some_and(|b| b.reconnecting_seen > *seen && now - b.last_update_at > 1.0)
            })
            .count();
        parts.push(if waiting > 0 {
            format!("{what}; {waiting} players reconnecting")
        } else {
            what
        });
    }
    parts.join(" · ")
}

/// The `faults[]` entry of the final document for one fault.
pub(crate) fn report(r: &Running, bots: &[BotReport], run_end: f64) -> serde_json::Value {
    let empty = Observed::default();
    let Observed {
        placed,
        sessions: sessions_then,
        generation: generation_after,
        bubbles: bubbles_after,
        relayed,
        lapsed,
    } = r.observed.as_ref().unwrap_or(&empty);
    let mut resumed = Vec::new();
    let mut stopped = Vec::new();
    let mut resumed_on: BTreeMap<String, u64> = BTreeMap::new();
    // Every affected player is in exactly one of: resumed (on a site, or not placed when the
    // mesh was looked at), never resumed, session ended, left the game.
    let mut unplaced = 0;
    let mut never = 0;
    let mut told = 0;
    let mut twice = 0;
    let mut new_sessions = 0;
    let mut left_game = 0;
    // A silence this fault caused begins before it is over (and a little after, for a kill).
    let window_end = r.started_at + r.fault.for_s + OBSERVE_AFTER_S;
    for &(i, _, sessions) in &r.affected {
        let Some(b) = bots.get(i) else { continue };
        if b.left_early {
            // Left during the drill (the demo's leavers): nothing to resume.
            left_game += 1;
            continue;
        }
        // Ended by this fault: by the time the mesh was looked at after it.
        let session_ended = sessions_then.get(&i).copied().unwrap_or(b.sessions_ended) > sessions;
        let in_window = |t: &f64| *t >= r.started_at - 0.5 && *t <= window_end;
        told += u64::from(b.reconnecting_at.iter().any(in_window));
        twice += b.applied_twice;
        if b.last_update_at < run_end - 3.0 || b.last_update_at < r.started_at {
            never += 1;
            continue;
        }
        new_sessions += u64::from(session_ended);
        // The silence the fault caused: the first gap ending after the fault began.
        let gap = b
            .gaps
            .iter()
            .find(|(began, len)| began + len / 1000.0 > r.started_at - 0.5 && *began < window_end);
        match gap {
            Some((began, len)) => {
                resumed.push((began + len / 1000.0 - r.started_at).max(0.0));
                stopped.push((began - r.started_at).max(0.0));
            }
            None => resumed.push(0.0),
        }
        match placed.get(&i) {
            // It played on, as a new player: counted as such, not as resumed.
            _ if session_ended => {}
            Some(site) => *resumed_on.entry(site.clone()).or_default() += 1,
            None => unplaced += 1,
        }
    }
    resumed.sort_by(f64::total_cmp);
    let p50 = resumed.get(resumed.len() / 2).copied();
    let max = resumed.last().copied();
    let mut doc = serde_json::json!({
        "kind": r.fault.kind.name(),
        "at_s": r.fault.at_s,
        "for_s": r.fault.for_s,
        "players_affected": r.affected.len(),
        "stopped_after_fault_s": stopped.iter().copied().fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
        "reconnecting_shown": told,
        "resumed_after_s": { "p50": p50, "max": max },
        "resumed_on": resumed_on,
        "resumed_unplaced": unplaced,
        "never_resumed": never,
        "sessions_ended": new_sessions,
        "left_game": left_game,
        "inputs_applied_twice": twice,
        "problem": r.problem,
    });
    if let FaultKind::CutTransfer { .. } = r.fault.kind {
        // Routed round through the third site (docs/running.md, "Routing round a cut").
        doc["relayed"] = serde_json::json!({ "sent_round": relayed.0, "passed_on": relayed.1 });
    }
    if let Some(t) = &r.takeover {
        let round = |s: f64| (s * 100.0).round() / 100.0;
        doc["takeover_s"] = t.first_grant_s.map(round).into();
        doc["elected_s"] = round(t.elected_s).into();
        doc["fenced_s"] = t.fenced_s.map(round).into();
        // The leader stopped granting before the standby could begin (I7 on real processes).
        doc["fenced_before_elected"] = t.fenced_s.map(|f| f < t.elected_s).into();
    }
    if r.fault.kind.is_takeover() {
        doc["relay_bubbles_stopped"] = lapsed.0.into();
        doc["core_site_regions_stopped"] = lapsed.1.into();
    }
    if r.fault.kind == FaultKind::RestartCore || r.fault.kind.is_takeover() {
        doc["generation"] =
            serde_json::json!({ "before": r.generation, "after": generation_after });
        let kept = r.bubbles.iter().filter(|b| bubbles_after.contains(b)).count();
        doc["bubbles_kept"] = serde_json::json!({ "before": r.bubbles.len(), "kept": kept });
    }
    let sites = r.fault.kind.sites();
    match sites.len() {
        1 => doc["site"] = sites[0].clone().into(),
        2 => doc["sites"] = serde_json::json!(sites),
        _ => {}
    }
    doc
}

#[cfg(test)]
mod tests {
    #[test]
    fn faults_are_said_in_words() {
        use super::FaultKind;
        let said = [
            FaultKind::Partition { site: "MTL".into() }.to_string(),
            FaultKind::KillServer { site: "HKG".into() }.to_string(),
            FaultKind::CutTransfer { a: "PAR".into(), b: "MTL".into() }.to_string(),
            FaultKind::Loss { site: "HKG".into(), rate: 0.2 }.to_string(),
        ];
        assert_eq!(
            said,
            [
                "MTL cut from the core",
                "a game server of HKG killed",
                "the PAR-MTL transfer link cut",
                "20 % of packets lost between HKG and the core",
            ]
        );
    }

    use super::*;

    fn sites() -> Vec<String> {
        ["PAR", "MTL", "HKG"].map(String::from).to_vec()
    }

    /// Checks `text` against PAR, MTL and HKG, with or without a standby.
    fn parse_for(text: &str, standby: bool) -> Result<Vec<Fault>, Vec<String>> {
        let sites = sites();
        parse(text, &Mesh { sites: &sites, core: "PAR", standby })
    }

    /// Six players touched by a partition: one resumed on PAR, one resumed but in no bubble
    /// when the mesh was looked at, one never heard of again, one whose session it ended and
    /// who played on as a new player, one who left the game, one resumed on MTL whose session
    /// a later fault ended. Each is counted once.
    #[test]
    fn every_affected_player_is_counted_once() {
        let started_at = 1_000.0;
        let fault =
            Fault { kind: FaultKind::Partition { site: "MTL".into() }, at_s: 40.0, for_s: 45.0 };
        let played = BotReport { joined: true, last_update_at: 1_200.0, ..Default::default() };
        let bots = vec![
            played.clone(),
            played.clone(),
            BotReport { last_update_at: 1_010.0, ..played.clone() },
            BotReport { sessions_ended: 1, ..played.clone() },
            BotReport { left_early: true, last_update_at: 1_010.0, ..played.clone() },
            // Its session ended later, by another fault (an agent restarted): resumed here.
            BotReport { sessions_ended: 1, ..played.clone() },
        ];
        let r = Running {
            fault,
            started_at,
            affected: (0..bots.len()).map(|i| (i, 0, 0)).collect(),
            problem: None,
            generation: None,
            bubbles: Vec::new(),
            observed: Some(Observed {
                placed: [(0, "PAR".to_string()), (3, "PAR".to_string()), (5, "MTL".to_string())]
                    .into(),
                sessions: [(0, 0), (1, 0), (2, 0), (3, 1), (4, 0), (5, 0)].into(),
                generation: None,
                bubbles: Vec::new(),
                relayed: (0, 0),
                lapsed: (0, 0),
            }),
            relayed: (0, 0),
            lapsed: (0, 0),
            takeover: None,
        };
        let doc = report(&r, &bots, 1_201.0);
        assert_eq!(doc["players_affected"], 6);
        assert_eq!(doc["resumed_on"], serde_json::json!({ "PAR": 1, "MTL": 1 }));
        assert_eq!(doc["resumed_unplaced"], 1);
        assert_eq!(doc["never_resumed"], 1);
        assert_eq!(doc["sessions_ended"], 1);
        assert_eq!(doc["left_game"], 1);
    }

    #[test]
    fn a_good_drill_parses() {
        let text = r#"
            [[fault]]
            at_s = 40
            kind = "partition"
            site = "MTL"
            for_s = 45
            [[fault]]
            at_s = 10
            kind = "kill_server"
            site = "PAR"
            [[fault]]
            at_s = 100
            kind = "cut_transfer"
            sites = ["PAR", "MTL"]
            for_s = 10
            [[fault]]
            at_s = 120
            kind = "loss"
            site = "HKG"
            rate = 0.2
            for_s = 5
            [[fault]]
            at_s = 130
            kind = "restart_core"
            for_s = 10
            [[fault]]
            at_s = 150
            kind = "restart_agent"
            site = "PAR"
            for_s = 3
        "#;
        let f = parse_for(text, false).unwrap();
        assert_eq!(f.len(), 6);
        assert_eq!(f[5].kind, FaultKind::RestartAgent { site: "PAR".into() });
        assert_eq!(
            f[0],
            Fault { kind: FaultKind::Partition { site: "MTL".into() }, at_s: 40.0, for_s: 45.0 }
        );
        assert_eq!(f[1].for_s, 0.0);
    }

    /// A leader's faults need a standby, and a core restart has no meaning with one.
    #[test]
    fn a_leaders_faults_need_the_standby_and_a_restart_refuses_it() {
        let leader = r#"
            [[fault]]
            at_s = 25
            kind = "partition_core_store"
            for_s = 15
            [[fault]]
            at_s = 55
            kind = "kill_core"
        "#;
        let f = parse_for(leader, true).unwrap();
        assert_eq!(f[0], Fault { kind: FaultKind::PartitionCoreStore, at_s: 25.0, for_s: 15.0 });
        assert_eq!(f[1], Fault { kind: FaultKind::KillCore, at_s: 55.0, for_s: 0.0 });
        assert!(f.iter().all(|f| f.kind.is_takeover() && !f.kind.is_restart()));
        let all = parse_for(leader, false).unwrap_err().join("\n");
        assert!(all.contains("fault 1 (partition_core_store): needs `horizon demo --standby`"));
        assert!(all.contains("fault 2 (kill_core): needs `horizon demo --standby`"), "{all}");
        let wrong = r#"
            [[fault]]
            at_s = 10
            kind = "kill_core"
            for_s = 5
            [[fault]]
            at_s = 20
            kind = "partition_core_store"
            [[fault]]
            at_s = 30
            kind = "restart_core"
            for_s = 5
        "#;
        let all = parse_for(wrong, true).unwrap_err().join("\n");
        assert!(all.contains("fault 1 (kill_core): takes no `for_s`"), "{all}");
        assert!(all.contains("fault 2 (partition_core_store): needs `for_s`"), "{all}");
        assert!(all.contains("fault 3 (restart_core): with --standby"), "{all}");
    }

    #[test]
    fn every_problem_is_named_with_its_fault() {
        let text = r#"
            [[fault]]
            at_s = 40
            kind = "partition"
            site = "SYD"
            for_s = 45
            [[fault]]
            at_s = 10
            kind = "partition"
            site = "PAR"
            for_s = 5
            [[fault]]
            at_s = 10
            kind = "kill_server"
            site = "MTL"
            for_s = 3
            [[fault]]
            at_s = 10
            kind = "restart_agent"
            site = "MTL"
            [[fault]]
            at_s = 10
            kind = "meteor"
        "#;
        let errors = parse_for(text, false).unwrap_err();
        let all = errors.join("\n");
        assert!(all.contains("fault 1 (partition): site \"SYD\""), "{all}");
        assert!(all.contains("fault 2 (partition): PAR is the core site"), "{all}");
        assert!(all.contains("fault 3 (kill_server): takes no `for_s`"), "{all}");
        assert!(all.contains("fault 4 (restart_agent): needs `for_s`"), "{all}");
        assert!(all.contains("fault 5 (meteor): unknown kind"), "{all}");
        assert!(
            parse_for(
                "[[fault]]\nat_s = 1\nkind = \"partition\"\nsite = \"MTL\"\nfor_s = 2\nwhen = 3\n",
                false
            )
            .unwrap_err()[0]
                .contains("when")
        );
    }
}
