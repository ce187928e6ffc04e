//! The console's timeline: what happened to regions and sites, in plain words, the newest last
//! (at most [`TIMELINE`] events). Each region also keeps its own last change
//! ([`Hosted::changed`](super::registry::Hosted)), for the region table.

use horizon_mesh::{Command, CreateReason, DeleteReason, LoadReason, MoveReason, SiteId, Time};
use horizon_proto::BubbleId;

use super::CoreMachine;
use crate::stats::FailoverReason;
use crate::status::{EventKind, TimelineEvent};

/// Events kept for `/status`.
pub(crate) const TIMELINE: usize = 256;

impl CoreMachine {
    /// Records an event at `now`; with a region, it becomes that region's last change.
    pub(crate) fn note(
        &mut self,
        now: Time,
        kind: EventKind,
        region: Option<BubbleId>,
        text: String,
    ) {
        if let Some(reg) = region.and_then(|r| self.registry.get_mut(&r)) {
            reg.note(now, text.clone());
        }
        let event = TimelineEvent { t_ms: now.as_ms(), kind, region: region.map(|r| r.0), text };
        self.timeline.push(event);
    }

    /// A brain's command in words, if it is worth a line (a border that follows its players
    /// is not). Read before the command is carried out: a failover's cause is still known.
    pub(crate) fn told(&self, command: &Command) -> Option<(EventKind, BubbleId, String)> {
        let name = |s: SiteId| self.cfg.sites.name(s).to_string();
        let players = |n: usize| match n {
            1 => "1 player".to_owned(),
            n => format!("{n} players"),
        };
        Some(match command {
            Command::Create { bubble, site, previous_site, players: p, reason, .. } => {
                let why = match reason {
                    CreateReason::Join => "players joined with nobody from elsewhere near",
                    CreateReason::ServerReady => {
                        "a server became ready for players waiting in a zone"
                    }
                    CreateReason::Split => "part of a bubble walked away from the rest",
                    CreateReason::Travel => "players arrived from another world",
                    CreateReason::Delegation => "a fixed delegation's region",
                    CreateReason::Carve => {
                        "carved out of the zones: the scoring placed the group on another site"
                    }
                };
                let from = match previous_site {
                    Some(prev) if prev != site => format!(", their state from {}", name(*prev)),
                    _ => String::new(),
                };
                let text = format!(
                    "{} created on {} for {}{from}: {why}.",
                    bubble.label(),
                    name(*site),
                    players(p.len())
                );
                (EventKind::Region, *bubble, text)
            }
            Command::Move {
                bubble, from, to, players: p, reason: MoveReason::Failover, ..
            } => {
                let cause = match self.loss_reason(*bubble) {
                    FailoverReason::LeaseExpired => "its lease ran out",
                    FailoverReason::ServerLost => "its game server was lost",
                    FailoverReason::NotHeld => "its agent restarted without it",
                    FailoverReason::RestoreFailed => "a restore elsewhere did not happen",
                };
                let text = format!(
                    "{} fails over {} → {} with {} ({cause}): restored from its copy.",
                    bubble.label(),
                    name(*from),
                    name(*to),
                    players(p.len())
                );
                (EventKind::Failover, *bubble, text)
            }
            Command::Move { bubble, from, to, players: p, reason, .. } => {
                let why = match reason {
                    MoveReason::Gain => "the gain per player passed the threshold after dwell",
                    MoveReason::Cap => "its site broke the fairness cap",
                    MoveReason::Delegation => "back to its delegated site",
                    MoveReason::Failover => "failover",
                };
                let text = format!(
                    "{} moves {} → {} with {} ({why}): a handover starts.",
                    bubble.label(),
                    name(*from),
                    name(*to),
                    players(p.len())
                );
                (EventKind::Handover, *bubble, text)
            }
            Command::Enter { bubble, site, from_site: Some(from), players: p } => {
                let text = format!(
                    "{} cross from {} into {} on {}.",
                    players(p.len()),
                    name(*from),
                    bubble.label(),
                    name(*site)
                );
                (EventKind::Crossing, *bubble, text)
            }
            Command::Enter { from_site: None, .. } | Command::Border { .. } => return None,
            Command::Merge { into, from, from_site, into_site, players: p } => {
                let moved = match from_site == into_site {
                    true => String::new(),
                    false => {
                        format!(", who change site {} → {}", name(*from_site), name(*into_site))
                    }
                };
                let text = format!(
                    "{} merges into {} (groups met): {}{moved}.",
                    from.label(),
                    into.label(),
                    players(p.len())
                );
                (EventKind::Merge, *into, text)
            }
            Command::Delete { bubble, site, reason, .. } => {
                let why = match reason {
                    DeleteReason::Empty => "its last player left",
                    DeleteReason::Stage => {
                        "this stage runs no bubble: its players go back to the zones"
                    }
                    DeleteReason::Dissolve => {
                        "its group's best site is the core site: its players go back to the zones"
                    }
                };
                (
                    EventKind::Region,
                    *bubble,
                    format!("{} on {} ends: {why}.", bubble.label(), name(*site)),
                )
            }
            Command::Servers { bubble, site, parts, reason } => {
                let why = match reason {
                    LoadReason::Overload => "overloaded",
                    LoadReason::Underload => "load stayed low",
                };
                let text = format!(
                    "{} now runs on {} server{} of {} ({why}).",
                    bubble.label(),
                    parts.len(),
                    if parts.len() == 1 { "" } else { "s" },
                    name(*site)
                );
                (EventKind::Load, *bubble, text)
            }
            Command::Stalled { bubble, site, .. } => {
                let text = format!(
                    "{}'s lease on {} ran out: {} stopped renewing it; it fails over.",
                    bubble.label(),
                    name(*site),
                    name(*site)
                );
                (EventKind::Fault, *bubble, text)
            }
            Command::ZoneCreate { zone, site, reason, .. } => {
                let why = match reason {
                    horizon_mesh::ZoneReason::Configured => "configured in [[zones]]",
                    _ => "its world's first player arrived",
                };
                (
                    EventKind::Region,
                    *zone,
                    format!("{} opens on {} ({why}).", zone.label(), name(*site)),
                )
            }
            Command::ZoneSplit { zone, new_zone, players: p, .. } => {
                let text = format!(
                    "{} split (overloaded): {} takes {} to another server.",
                    zone.label(),
                    new_zone.label(),
                    players(p.len())
                );
                (EventKind::Split, *zone, text)
            }
            Command::ZoneMerge { into, from, players: p, .. } => {
                let text = format!(
                    "{} merges back into {} (load stayed low): {}.",
                    from.label(),
                    into.label(),
                    players(p.len())
                );
                (EventKind::Merge, *into, text)
            }
        })
    }

    /// The least each home's players can freeze in a move `from` → `to` (design.md §5:
    /// `d(S,T) + d(T,h) − d(S,h)`, one-way delays as half the measured backbone round trips),
    /// before one server tick; in words, for the homes present.
    pub(crate) fn floors(&self, from: SiteId, to: SiteId, homes: &[SiteId]) -> String {
        let sites = self.mesh.sites();
        let d = |a: SiteId, b: SiteId| if a == b { 0.0 } else { sites.backbone_ms(a, b) / 2.0 };
        let mut homes = homes.to_vec();
        homes.sort_unstable();
        homes.dedup();
        homes
            .iter()
            .map(|&h| {
                let floor = d(from, to) + d(to, h) - d(from, h);
                format!("{} {:.0} ms", self.cfg.sites.name(h), floor.max(0.0))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
