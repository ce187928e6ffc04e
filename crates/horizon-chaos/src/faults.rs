//! The faults of one run, drawn from its seed: one at a time, each followed by a quiet spell
//! long enough for the SPEC's recovery targets, and none in the last minute (players must all
//! be playing again at the end).

use horizon_mesh::rng::Rng;
use serde::Serialize;

use crate::world::SITES;

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
    /// The agent is killed, with its game servers and its players' connections, and started
    /// again (without any state: agents keep nothing on disk) after `for_s`.
    RestartAgent { site: &'static str, for_s: f64 },
    /// The core is killed and started again on its store after `for_s`.
    RestartCore { for_s: f64 },
    /// Each packet on the agent–core link is lost with `rate` (QUIC resends it).
    Loss { site: &'static str, rate: f64, for_s: f64 },
    /// Every store write takes `ms`.
    SlowDisk { ms: f64, for_s: f64 },
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
            | Fault::SlowDisk { for_s, .. } => *for_s,
            Fault::KillServer { .. } => 0.0,
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

/// The faults of a run of `seconds`.
pub(crate) fn schedule(rng: &mut Rng, seconds: f64) -> Vec<Timed> {
    let relays: Vec<&'static str> = SITES[1..].to_vec();
    let pick = |rng: &mut Rng, from: &[&'static str]| from[rng.below(from.len() as u64) as usize];
    let mut out = Vec::new();
    let mut t = 20.0 + rng.range(0.0, 10.0);
    while t < seconds - TAIL_S {
        let fault = match rng.below(7) {
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
            _ => Fault::SlowDisk {
                ms: rng.range(50.0, 800.0).round(),
                for_s: rng.range(5.0, 30.0).round(),
            },
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
