//! What the next report tells the core, gathered between reports: players who joined and left,
//! whose probe tables to send, and where the game servers put their players. A part of the
//! agent machine that owns its state: `players.rs` and `servers.rs` put in, `core_link.rs`
//! takes out.

use std::collections::BTreeMap;

use horizon_proto::control;
use horizon_proto::{BubbleId, Name, PlayerId};

/// The newest `Positions` list of each region's server (one per part of a spread bubble).
pub(super) type Positions = BTreeMap<(BubbleId, Name), control::RegionPositions>;

#[derive(Debug, Default)]
pub(super) struct Outbox {
    joins: Vec<control::PlayerSample>,
    leaves: Vec<PlayerId>,
    /// Players whose believed probe table the core has not been sent yet.
    measured: Vec<PlayerId>,
    positions: Positions,
}

impl Outbox {
    pub(super) fn joined(&mut self, sample: control::PlayerSample) {
        self.joins.push(sample);
    }

    /// `player` left: the core hears it left, and never that it joined if it has not yet.
    pub(super) fn left(&mut self, player: PlayerId) {
        self.leaves.push(player);
        self.joins.retain(|j| j.player != player);
    }

    /// `player`'s probe table is believed: it goes with the next report.
    pub(super) fn measured(&mut self, player: PlayerId) {
        self.measured.push(player);
    }

    /// A region's server said where its players are: the newest list replaces the one before.
    pub(super) fn positions(&mut self, server: Name, region: control::RegionPositions) {
        self.positions.insert((region.lease.bubble, server), region);
    }

    /// A registration sends every player again (`Players`): joins not sent yet are in it, and
    /// every believed probe table (`measured`) goes again, as a restarted core has none.
    pub(super) fn resync(&mut self, measured: Vec<PlayerId>) {
        self.joins.clear();
        self.measured = measured;
    }

    pub(super) fn has_joins(&self) -> bool {
        !self.joins.is_empty()
    }

    /// The joins and leaves since the last report, in order.
    pub(super) fn take_changes(&mut self) -> (Vec<control::PlayerSample>, Vec<PlayerId>) {
        (std::mem::take(&mut self.joins), std::mem::take(&mut self.leaves))
    }

    /// The players whose probe tables to send, each once, in id order.
    pub(super) fn take_measured(&mut self) -> Vec<PlayerId> {
        let mut pending = std::mem::take(&mut self.measured);
        pending.sort_unstable();
        pending.dedup();
        pending
    }

    pub(super) fn take_positions(&mut self) -> Positions {
        std::mem::take(&mut self.positions)
    }
}

#[cfg(test)]
mod tests {
    use horizon_proto::{Epoch, LeaseRef, Role, Vec3, WorldId};

    use super::*;

    fn sample(player: u64) -> control::PlayerSample {
        control::PlayerSample {
            player: PlayerId(player),
            access_rtt_ms: 10.0,
            role: Role::Player,
            world: WorldId(0),
            pos: Vec3::default(),
            vel: Vec3::default(),
        }
    }

    #[test]
    fn a_player_who_leaves_before_the_report_is_never_said_to_have_joined() {
        let mut out = Outbox::default();
        out.joined(sample(1));
        out.joined(sample(2));
        out.left(PlayerId(1));
        let (joins, leaves) = out.take_changes();
        assert_eq!(joins.iter().map(|j| j.player).collect::<Vec<_>>(), [PlayerId(2)]);
        assert_eq!(leaves, [PlayerId(1)]);
        assert!(!out.has_joins() && out.take_changes().1.is_empty(), "taken once");
    }

    #[test]
    fn probe_tables_go_once_each_and_a_resync_sends_every_one_again() {
        let mut out = Outbox::default();
        out.joined(sample(3));
        out.measured(PlayerId(3));
        out.measured(PlayerId(1));
        out.measured(PlayerId(3));
        assert_eq!(out.take_measured(), [PlayerId(1), PlayerId(3)]);
        out.resync(vec![PlayerId(1), PlayerId(3)]);
        assert!(!out.has_joins(), "the registration's `Players` carries them");
        assert_eq!(out.take_measured(), [PlayerId(1), PlayerId(3)]);
    }

    #[test]
    fn the_newest_positions_of_a_regions_server_replace_the_ones_before() {
        let mut out = Outbox::default();
        let gs = Name::new("gs-0").expect("name");
        let lease = LeaseRef { bubble: BubbleId(4), epoch: Epoch(1) };
        out.positions(gs.clone(), control::RegionPositions { lease, players: Vec::new() });
        let lease = LeaseRef { bubble: BubbleId(4), epoch: Epoch(2) };
        out.positions(gs.clone(), control::RegionPositions { lease, players: Vec::new() });
        let taken = out.take_positions();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[&(BubbleId(4), gs)].lease.epoch, Epoch(2));
        assert!(out.take_positions().is_empty());
    }
}
