//! Each player's last stored copy. A player's state lives in the copy of the bubble it plays
//! in, until it crosses into another bubble: the copies of the bubble it left no longer hold
//! it, and until a copy of its new bubble does, the only stored state of the player is in an
//! older copy of the bubble it left (its gateway has forgotten the inputs that copy covers).
//! When the new bubble fails before its first copy including the player — or its holder died
//! with the crossing, or the bubble it left ended — a restore from the new bubble's copy alone
//! loses the player (I4).
//!
//! So the core keeps, per player, the stored whole copy that applied the most of its inputs
//! (told by each copy's `Covers`), and asks the store to keep that copy (`PinBackup`) while a
//! player needs it. A bubble restored from a copy that does not hold a member as far — the
//! member's best copy is another one — gets that copy too (`Adopt`): its server takes the
//! member's state from it, and keeps, of two states of one player, the one that applied more
//! inputs. The player's gateway holds every input after that copy, and sends them again. So
//! does a bubble whose copy shows a member behind its best copy: the member's state went back
//! on the way in (its crossing was lost, and its holder started it afresh).
//!
//! ```text
//!  Covers (copy c stored, player p at seq s) ──► best[p] = c if s ≥ best[p].seq
//!     first reference to c: PinBackup(c) · last reference to the old best gone: UnpinBackup
//!     a member p with s < best[p].seq ──► ReadPinned(best[p], p) ──► … Adopt
//!  restore of bubble b from copy r, done ──► for each member p with best[p] ≠ r:
//!     ReadPinned(best[p], players) ──► PinnedRead ──► Adopt { players, copy } to b's holder
//! ```
//!
//! The store keeps each such copy with the list of players it holds (not `fsync`ed: this is
//! help, not ownership), so a restarted core takes them back ([`CoreMachine::take_kept_copies`])
//! and forgets, a minute after it started, the players no agent brought back.
//!
//! [`CoreMachine::take_kept_copies`]: super::CoreMachine::take_kept_copies

use std::collections::BTreeMap;

use horizon_proto::{PlayerId, Seq};

pub use crate::store::CopyAt;

/// Players remembered, at most (a core holds far fewer; beyond, new players are not kept).
const MAX_PLAYERS: usize = 1 << 20;

/// What the store must do for the copies players need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pin {
    /// Keep this copy even once a newer copy of its bubble replaces it.
    Keep(CopyAt),
    /// No player needs it any more.
    Release(CopyAt),
}

/// Per player, the stored copy that applied the most of its inputs, and how many players
/// need each such copy.
#[derive(Debug, Default)]
pub(crate) struct PlayerCopies {
    best: BTreeMap<PlayerId, (CopyAt, Seq)>,
    refs: BTreeMap<CopyAt, u32>,
}

impl PlayerCopies {
    /// The whole copy `at` was stored and holds each listed player with their inputs applied
    /// up to `seq`. Returns the copies to keep and to release, in that order.
    pub(crate) fn covered(&mut self, at: CopyAt, acked: &[(PlayerId, Seq)]) -> Vec<Pin> {
        let mut pins = Vec::new();
        for &(player, seq) in acked {
            let old = self.best.get(&player).copied();
            // A newer copy holding as much replaces an older one: the copy of the bubble the
            // player is in now, rather than one of a bubble it left.
            if old.is_some_and(|(c, s)| s > seq || (s == seq && c >= at)) {
                continue;
            }
            if old.is_none() && self.best.len() >= MAX_PLAYERS {
                continue;
            }
            self.best.insert(player, (at, seq));
            let n = self.refs.entry(at).or_default();
            *n += 1;
            if *n == 1 {
                pins.push(Pin::Keep(at));
            }
            if let Some((c, _)) = old {
                pins.extend(self.unref(c));
            }
        }
        // Only `at` gains references here, and it is never released in the same call (a
        // player already on `at` that moves to `at` again holds two references first).
        pins
    }

    /// The most of `player`'s inputs a stored copy holds (none known: 0).
    pub(crate) fn covered_seq(&self, player: PlayerId) -> Seq {
        self.best.get(&player).map_or(Seq(0), |&(_, seq)| seq)
    }

    /// `player` left the game: its copy is no longer needed for it.
    pub(crate) fn forget(&mut self, player: PlayerId) -> Option<Pin> {
        let (c, _) = self.best.remove(&player)?;
        self.unref(c)
    }

    fn unref(&mut self, c: CopyAt) -> Option<Pin> {
        let n = self.refs.get_mut(&c)?;
        *n -= 1;
        if *n > 0 {
            return None;
        }
        self.refs.remove(&c);
        Some(Pin::Release(c))
    }

    /// The copies a bubble just restored from `restored` (none: restored empty) must adopt
    /// `members` from: those whose best copy is another one.
    pub(crate) fn wanted(
        &self,
        restored: Option<CopyAt>,
        members: impl IntoIterator<Item = PlayerId>,
    ) -> BTreeMap<CopyAt, Vec<PlayerId>> {
        let mut out: BTreeMap<CopyAt, Vec<PlayerId>> = BTreeMap::new();
        for player in members {
            if let Some(&(c, _)) = self.best.get(&player)
                && Some(c) != restored
            {
                out.entry(c).or_default().push(player);
            }
        }
        out
    }

    /// The players copy `at` holds with fewer of their inputs applied than their best copy
    /// (another one), by that copy.
    pub(crate) fn behind(
        &self,
        at: CopyAt,
        acked: &[(PlayerId, Seq)],
    ) -> BTreeMap<CopyAt, Vec<PlayerId>> {
        let mut out: BTreeMap<CopyAt, Vec<PlayerId>> = BTreeMap::new();
        for &(player, seq) in acked {
            if let Some(&(c, s)) = self.best.get(&player)
                && s > seq
                && c != at
            {
                out.entry(c).or_default().push(player);
            }
        }
        out
    }

    /// Some player needs copy `at`.
    pub(crate) fn needs(&self, at: CopyAt) -> bool {
        self.refs.contains_key(&at)
    }

    /// Forgets every player `present` says is not; returns the copies no longer needed.
    pub(crate) fn forget_unless(&mut self, present: impl Fn(PlayerId) -> bool) -> Vec<CopyAt> {
        let absent: Vec<PlayerId> = self.best.keys().copied().filter(|p| !present(*p)).collect();
        absent
            .into_iter()
            .filter_map(|p| match self.forget(p) {
                Some(Pin::Release(at)) => Some(at),
                _ => None,
            })
            .collect()
    }

    /// Copies kept for players.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.refs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::BubbleId;
    use proptest::prelude::*;

    fn at(bubble: u64, tick: u64) -> CopyAt {
        CopyAt { bubble: BubbleId(bubble), epoch: 1, tick }
    }

    fn p(id: u64) -> PlayerId {
        PlayerId(id)
    }

    #[test]
    fn a_player_who_crossed_keeps_the_copy_of_the_bubble_it_left_until_its_new_one_holds_it() {
        let mut k = PlayerCopies::default();
        // Bubble 1's copies hold players 1 and 2.
        assert_eq!(k.covered(at(1, 10), &[(p(1), Seq(5)), (p(2), Seq(3))]), [Pin::Keep(at(1, 10))]);
        assert_eq!(
            k.covered(at(1, 20), &[(p(1), Seq(9)), (p(2), Seq(6))]),
            [Pin::Keep(at(1, 20)), Pin::Release(at(1, 10))]
        );
        // Player 1 crossed into bubble 2: bubble 1's next copy lacks it.
        assert_eq!(k.covered(at(1, 30), &[(p(2), Seq(8))]), [Pin::Keep(at(1, 30))]);
        assert_eq!(k.kept(), 2, "the copy at tick 20 is kept for player 1");
        // Bubble 2, restored before any copy of it held player 1, adopts it from that copy.
        let wanted = k.wanted(None, [p(1)]);
        assert_eq!(wanted, BTreeMap::from([(at(1, 20), vec![p(1)])]));
        // Restored from bubble 1's latest copy: player 2 is in it, nothing to adopt for it.
        assert!(k.wanted(Some(at(1, 30)), [p(2)]).is_empty());
        // Bubble 2's copy holds player 1: the old copy is released.
        assert_eq!(
            k.covered(at(2, 5), &[(p(1), Seq(9))]),
            [Pin::Keep(at(2, 5)), Pin::Release(at(1, 20))]
        );
        assert_eq!(k.forget(p(1)), Some(Pin::Release(at(2, 5))));
        assert_eq!(k.forget(p(1)), None);
        assert_eq!(k.kept(), 1);
    }

    #[test]
    fn a_copy_holding_fewer_of_a_player_s_inputs_never_replaces_one_holding_more() {
        let mut k = PlayerCopies::default();
        k.covered(at(1, 10), &[(p(1), Seq(9))]);
        // A bubble restored from an older copy, then copied: the player at 4.
        let behind = [(p(1), Seq(4)), (p(2), Seq(1))];
        assert_eq!(k.covered(at(2, 10), &behind), [Pin::Keep(at(2, 10))], "for player 2 only");
        assert_eq!(k.wanted(Some(at(2, 10)), [p(1)]), BTreeMap::from([(at(1, 10), vec![p(1)])]));
        assert_eq!(k.behind(at(2, 10), &behind), BTreeMap::from([(at(1, 10), vec![p(1)])]));
        assert!(k.behind(at(1, 10), &[(p(1), Seq(9))]).is_empty(), "its own best copy");
    }

    proptest! {
        /// Whatever copies and departures come, every player's best copy is kept, every kept
        /// copy is some player's best, and the pins said add up to what is kept.
        #[test]
        fn kept_copies_are_exactly_those_players_need(
            steps in prop::collection::vec((0u64..4, 0u64..6, prop::collection::vec((0u64..6, 0u64..20), 0..5), any::<bool>(), 0u64..6), 1..60),
        ) {
            let mut k = PlayerCopies::default();
            let mut pinned = std::collections::BTreeSet::new();
            for (tick, (bubble, t, acked, leave, who)) in steps.into_iter().enumerate() {
                let c = CopyAt { bubble: BubbleId(bubble), epoch: 1, tick: (tick as u64) * 10 + t };
                let acked: Vec<_> = acked.into_iter().map(|(pl, s)| (p(pl), Seq(s))).collect();
                let mut pins = k.covered(c, &acked);
                if leave {
                    pins.extend(k.forget(p(who)));
                }
                for pin in pins {
                    match pin {
                        Pin::Keep(c) => prop_assert!(pinned.insert(c), "kept twice"),
                        Pin::Release(c) => prop_assert!(pinned.remove(&c), "released unkept"),
                    }
                }
                let needed: std::collections::BTreeSet<CopyAt> = k.best.values().map(|(c, _)| *c).collect();
                prop_assert_eq!(&needed, &pinned);
                prop_assert_eq!(k.kept(), pinned.len());
            }
        }
    }
}
