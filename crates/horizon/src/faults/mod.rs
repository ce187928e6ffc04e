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
//! that site's most players), `drain_server` (site: SIGTERM to that server instead, as a pod's
//! deletion or a node's drain sends: it moves its regions to other servers of the site, then
//! exits), `restart_core` (for_s: down that long, then back on its store),
//! `restart_agent` (site, for_s: killed as a crash would, its game servers with it, started
//! again with nothing after for_s; its players resume as themselves), `cut_transfer`
//! (sites = [A, B], for_s), `loss` (site, rate 0–1, for_s: on the agent–core link). With
//! `--standby` (two cores on etcd): `kill_core` (the leader dies as its machine would, never
//! restarted: the standby takes over) and `partition_core_store` (for_s: the leader cut from
//! etcd fences itself, the standby takes over; at the end the old leader is started again and
//! stands by, as its supervisor would).

mod carry;
mod parse;
mod report;

pub(crate) use carry::{OBSERVE_AFTER_S, Running, end, now_s, observe, start, take_over};
pub(crate) use parse::load;
pub(crate) use report::{describe, report};

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
    DrainServer { site: String },
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
            FaultKind::DrainServer { site } => write!(f, "a game server of {site} told to stop"),
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
            FaultKind::DrainServer { .. } => "drain_server",
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
            | FaultKind::DrainServer { site }
            | FaultKind::RestartAgent { site }
            | FaultKind::Loss { site, .. } => vec![site.clone()],
            FaultKind::CutTransfer { a, b } => vec![a.clone(), b.clone()],
            FaultKind::RestartCore | FaultKind::KillCore | FaultKind::PartitionCoreStore => {
                Vec::new()
            }
        }
    }
}

/// The mesh a drill runs on: its sites (the core site first), and whether its core has a
/// standby on etcd (`horizon demo --standby`).
pub(crate) struct Mesh<'a> {
    pub(crate) sites: &'a [String],
    pub(crate) core: &'a str,
    pub(crate) standby: bool,
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
}
