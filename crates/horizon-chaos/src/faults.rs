//! The faults of one run, drawn from its seed: one at a time, each followed by a quiet spell
//! long enough for design.md §6's recovery targets, and none in the last minute (players must all
//! be playing again at the end). With `--overlapping`, a second fault strikes during each
//! (see [`overlap`]).

use horizon_mesh::rng::Rng;
use serde::Serialize;

/// The simulated mesh's sites, the core's first: where faults strike, and what the world
/// builds.
pub const SITES: [&str; 3] = ["PAR", "MTL", "HKG"];

/// Which way a partition of an agent's link to the core cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Both,
    /// Agent → core only.
    ToCore,
    /// Core → agent only.
    FromCore,
}

/// One fault.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// A relay agent's link to the core is cut.
    Partition { site: &'static str, direction: Direction, for_s: f64 },
    /// The transfer link between two agents is cut.
    CutTransfer { sites: [&'static str; 2], for_s: f64 },
    /// The game server holding the site's largest bubble is killed (SIGKILL).
    KillServer { site: &'static str },
    /// That server is told to stop instead (SIGTERM, `--drains`): it asks its agent to move
    /// its regions to other servers of the site, and exits once it holds none (or after its
    /// grace).
    DrainServer { site: &'static str },
    /// The agent is killed, with its game servers and its players' connections, and started
    /// again (without any state: agents keep nothing on disk) after `for_s`.
    RestartAgent { site: &'static str, for_s: f64 },
    /// The core is killed and started again on its store after `for_s`.
    RestartCore { for_s: f64 },
    /// Each packet on the agent–core link is lost with `rate` (QUIC resends it).
    Loss { site: &'static str, rate: f64, for_s: f64 },
    /// Every store write takes `ms`.
    SlowDisk { ms: f64, for_s: f64 },
    /// With a standby core: the leading core cannot reach the store (its keep-alives and
    /// writes go unanswered); the agents still reach it.
    StoreCut { for_s: f64 },
    /// With a standby core: the store changes leader, which resets every lease's TTL to full.
    StoreLeaderChange,
}

impl Fault {
    /// How long it lasts (0 for a kill).
    pub fn duration_s(&self) -> f64 {
        match self {
            Fault::Partition { for_s, .. }
            | Fault::CutTransfer { for_s, .. }
            | Fault::RestartAgent { for_s, .. }
            | Fault::RestartCore { for_s }
            | Fault::Loss { for_s, .. }
            | Fault::SlowDisk { for_s, .. }
            | Fault::StoreCut { for_s } => *for_s,
            Fault::KillServer { .. } | Fault::DrainServer { .. } | Fault::StoreLeaderChange => 0.0,
        }
    }

    /// A site whose players cannot be expected to play while this lasts (and shortly after):
    /// their home agent is down, or it is cut from the other sites.
    pub fn isolates(&self) -> Vec<&'static str> {
        match self {
            Fault::RestartAgent { site, .. } => vec![site],
            Fault::CutTransfer { sites, .. } => sites.to_vec(),
            _ => Vec::new(),
        }
    }
}

/// A fault at its time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timed {
    pub at_s: f64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// Seconds of quiet after each fault before the next.
const QUIET_S: f64 = 45.0;
/// No fault starts this close to the end.
const TAIL_S: f64 = 75.0;

/// The faults of a run of `seconds`; with a `standby` core, the store's faults too (and a
/// restarted core is the standby taking over).
pub(crate) fn schedule(rng: &mut Rng, seconds: f64, standby: bool) -> Vec<Timed> {
    let relays: Vec<&'static str> = SITES[1..].to_vec();
    let pick = |rng: &mut Rng, from: &[&'static str]| from[rng.below(from.len() as u64) as usize];
    let mut out = Vec::new();
    let mut t = 20.0 + rng.range(0.0, 10.0);
    while t < seconds - TAIL_S {
        let kinds = if standby { 9 } else { 7 };
        let fault = match rng.below(kinds) {
            0 => Fault::Partition {
                site: pick(rng, &relays),
                direction: match rng.below(3) {
                    0 => Direction::Both,
                    1 => Direction::ToCore,
                    _ => Direction::FromCore,
                },
                for_s: rng.range(5.0, 50.0).round(),
            },
            1 => {
                let a = pick(rng, &SITES);
                let others: Vec<_> = SITES.iter().copied().filter(|s| *s != a).collect();
                let b = pick(rng, &others);
                let mut sites = [a, b];
                sites.sort_unstable();
                Fault::CutTransfer { sites, for_s: rng.range(3.0, 30.0).round() }
            }
            2 => Fault::KillServer { site: pick(rng, &SITES) },
            3 => {
                Fault::RestartAgent { site: pick(rng, &SITES), for_s: rng.range(1.0, 10.0).round() }
            }
            4 => Fault::RestartCore { for_s: rng.range(1.0, 15.0).round() },
            5 => Fault::Loss {
                site: pick(rng, &relays),
                rate: (rng.range(0.05, 0.5) * 100.0).round() / 100.0,
                for_s: rng.range(5.0, 30.0).round(),
            },
            6 => Fault::SlowDisk {
                ms: rng.range(50.0, 800.0).round(),
                for_s: rng.range(5.0, 30.0).round(),
            },
            7 => Fault::StoreCut { for_s: rng.range(1.0, 20.0).round() },
            _ => Fault::StoreLeaderChange,
        };
        let end = t + fault.duration_s();
        if end > seconds - TAIL_S + 30.0 {
            break;
        }
        out.push(Timed { at_s: t.round(), fault });
        t = end.round() + QUIET_S + rng.range(0.0, 15.0);
    }
    out
}

/// `--drains`: every server killed becomes a server told to stop, the rest of the run as
/// without (a seed's other faults, and their times, are those of the same seed without it).
pub(crate) fn drains(faults: &mut [Timed]) {
    for timed in faults {
        if let Fault::KillServer { site } = timed.fault {
            timed.fault = Fault::DrainServer { site };
        }
    }
}

/// Adds to each fault of `faults` a second one that strikes while it lasts (or right after a
/// kill), at the same site where it has one: a transfer link cut during a partition from the
/// core, a server killed on a site cut off or restarting elsewhere, a partition during a
/// transfer cut, a server killed while the core is down or its disk is slow. Drawn from its
/// own `rng`, so the first faults of a seed are those of a run without overlaps. Never the
/// same link or site twice at once (a heal would end both), and over as long before the end
/// of the run as a first fault.
pub(crate) fn overlap(rng: &mut Rng, seconds: f64, faults: &mut Vec<Timed>) {
    let relays: Vec<&'static str> = SITES[1..].to_vec();
    let pick = |rng: &mut Rng, from: &[&'static str]| from[rng.below(from.len() as u64) as usize];
    let other = |rng: &mut Rng, not: &'static str| {
        let others: Vec<_> = SITES.iter().copied().filter(|s| *s != not).collect();
        pick(rng, &others)
    };
    let pair = |a: &'static str, b: &'static str| {
        let mut sites = [a, b];
        sites.sort_unstable();
        sites
    };
    let mut added = Vec::new();
    for first in faults.iter() {
        let lasts = first.fault.duration_s();
        // Within the first fault (a kill has none: within 3 s after it).
        let after = if lasts > 0.0 { rng.range(0.1, 0.7) * lasts } else { rng.range(0.5, 3.0) };
        let fault = match first.fault {
            Fault::Partition { site, for_s, .. } => match rng.below(2) {
                0 => Fault::CutTransfer {
                    sites: pair(site, other(rng, site)),
                    for_s: rng.range(3.0, for_s.max(4.0)).round(),
                },
                _ => Fault::KillServer { site },
            },
            Fault::CutTransfer { sites, for_s } => {
                let relay: Vec<_> = sites.iter().copied().filter(|s| relays.contains(s)).collect();
                match (rng.below(2), relay.is_empty()) {
                    (0, false) => Fault::Partition {
                        site: pick(rng, &relay),
                        direction: Direction::Both,
                        for_s: rng.range(5.0, for_s.max(6.0)).round(),
                    },
                    _ => Fault::KillServer { site: pick(rng, &sites) },
                }
            }
            Fault::KillServer { site } | Fault::DrainServer { site } => {
                match relays.contains(&site) {
                    true => Fault::Partition {
                        site,
                        direction: Direction::Both,
                        for_s: rng.range(5.0, 40.0).round(),
                    },
                    false => Fault::RestartAgent {
                        site: other(rng, site),
                        for_s: rng.range(1.0, 10.0).round(),
                    },
                }
            }
            Fault::RestartAgent { site, .. } => match rng.below(2) {
                0 => Fault::KillServer { site: other(rng, site) },
                _ => {
                    let relay: Vec<_> = relays.iter().copied().filter(|s| *s != site).collect();
                    Fault::Partition {
                        site: pick(rng, &relay),
                        direction: Direction::Both,
                        for_s: rng.range(5.0, 40.0).round(),
                    }
                }
            },
            Fault::RestartCore { .. }
            | Fault::SlowDisk { .. }
            | Fault::StoreCut { .. }
            | Fault::StoreLeaderChange => match rng.below(2) {
                0 => Fault::KillServer { site: pick(rng, &SITES) },
                _ => Fault::CutTransfer {
                    sites: pair(SITES[0], pick(rng, &relays)),
                    for_s: rng.range(3.0, 20.0).round(),
                },
            },
            Fault::Loss { site, .. } => Fault::KillServer { site },
        };
        let at_s = (first.at_s + after).round();
        // As for the first faults: over well before the end.
        if at_s + fault.duration_s() <= seconds - TAIL_S + 30.0 {
            added.push(Timed { at_s, fault });
        }
    }
    faults.extend(added);
    faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
}
