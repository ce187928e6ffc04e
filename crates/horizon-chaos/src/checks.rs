//! design.md §6's invariants, checked at every step that could break them, and liveness.
//!
//! - **I1** no sink accepts a write of an epoch older than the newest it has seen for that
//!   region: the universe backup (a stored copy older than the newest stored) and the game
//!   servers (an assignment or regrant accepted under an older epoch than one already seen).
//! - **I2** no two servers tick the same region at the same time: once a bubble has ticked
//!   under epoch `e`, no tick under an older epoch follows (by the simulation's global clock).
//! - **I3** no input is applied twice: in every view a server writes, each player's entity has
//!   `inputs == last_seq` (the reference game counts applications).
//! - **I4** no acknowledged input is lost: at the end, every player whose session survived sees
//!   its entity with `last_seq` at least the highest seq it was ever told was applied, and
//!   `inputs == last_seq` (none skipped: a lost state started again would show as fewer).
//! - **I5** no holder writes more than one lease after its last granted renewal by its own clock:
//!   every tick of a bubble at a site happens before (site clock) the latest `send + ttl` of a
//!   renewal the core granted, or `receipt + ttl` of the order that granted the lease.
//! - **I6** epochs never go backwards: every lease an order carries is at least the newest
//!   the core granted that bubble before, across restarts; generations only grow; player ids
//!   are never handed out twice.
//! - **I7** at most one core grants or renews at any time (`--standby`): the running core acts
//!   only while its election lease is live at the store (`world/election.rs`).
//! - **liveness** a player outside any partition receives an update at least every
//!   [`LIVENESS_S`], and every player is playing at the end.
//! - **route** while a transfer link is cut and nothing else is wrong, the players of its two
//!   sites receive an update at least every [`ROUTE_ROUND_S`] (routed round through the
//!   third site).

use std::collections::BTreeMap;

use horizon_proto::{BubbleId, Epoch, PlayerId, StateItem, Update};
use horizon_sdk::reference::View;
use serde::Serialize;

/// The longest a player outside any partition may go without an update (design.md §6's worst
/// target is 40 s after a relay is cut; its lease alone is 30 s).
pub const LIVENESS_S: f64 = 60.0;
/// The longest a player of either end of a cut transfer link may go without an update while
/// that cut is the only fault (none in force or ended within [`LIVENESS_S`] when it began):
/// the agents see the link silent within 1.25 s and route round through the third site
/// (design target: playing again within 3 s).
pub const ROUTE_ROUND_S: f64 = 3.0;
/// How late a tick may be past its lease end (the hop from agent to server, rounding).
const I5_ALLOWANCE_US: u64 = 5_000;

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Violation {
    pub(crate) seed: u64,
    pub invariant: &'static str,
    pub at_s: f64,
    pub detail: String,
}

/// The checker of one run.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    pub(crate) seed: u64,
    pub(crate) violations: Vec<Violation>,
    /// Newest stored copy per bubble.
    stored: BTreeMap<BubbleId, Epoch>,
    /// Per bubble and epoch: (first, last) tick, global µs.
    ticks: BTreeMap<BubbleId, BTreeMap<Epoch, (u64, u64)>>,
    /// Newest lease end granted per (site, bubble, epoch), site-clock µs.
    granted: BTreeMap<(usize, BubbleId, Epoch), u64>,
    /// Newest epoch each order carried per bubble.
    ordered: BTreeMap<BubbleId, Epoch>,
    generation: u32,
    ids: BTreeMap<PlayerId, usize>,
    /// Newest epoch each (site, server, bubble) accepted.
    accepted: BTreeMap<(usize, String, BubbleId), Epoch>,
    pub(crate) ticks_checked: u64,
}

impl Checker {
    pub(crate) fn new(seed: u64) -> Self {
        Checker { seed, ..Checker::default() }
    }

    fn fail(&mut self, invariant: &'static str, now_us: u64, detail: String) {
        // One report per invariant and detail is enough to replay it.
        if self.violations.iter().any(|v| v.invariant == invariant && v.detail == detail) {
            return;
        }
        self.violations.push(Violation {
            seed: self.seed,
            invariant,
            at_s: now_us as f64 / 1e6,
            detail,
        });
    }

    /// A core acted while another may lead (I7: `world/election.rs` decides).
    pub(crate) fn i7(&mut self, now: u64, detail: String) {
        self.fail("I7", now, detail);
    }

    /// The core stores a copy (I1).
    pub(crate) fn stored(&mut self, now: u64, bubble: BubbleId, epoch: Epoch) {
        let newest = self.stored.entry(bubble).or_insert(epoch);
        if epoch < *newest {
            let detail = format!(
                "bubble {}: copy of epoch {} stored after epoch {}",
                bubble.0, epoch.0, newest.0
            );
            self.fail("I1", now, detail);
        } else {
            *newest = epoch;
        }
    }

    /// A game server accepted a lease (I1).
    pub(crate) fn accepted(
        &mut self,
        now: u64,
        site: usize,
        server: &str,
        bubble: BubbleId,
        epoch: Epoch,
    ) {
        let key = (site, server.to_owned(), bubble);
        let newest = self.accepted.entry(key).or_insert(epoch);
        if epoch < *newest {
            let detail = format!(
                "server {server} accepted bubble {} epoch {} after epoch {}",
                bubble.0, epoch.0, newest.0
            );
            self.fail("I1", now, detail);
        } else {
            *newest = epoch;
        }
    }

    /// A lease was granted to `site` until `until` on its clock (I5's bound).
    pub(crate) fn granted(&mut self, site: usize, bubble: BubbleId, epoch: Epoch, until: u64) {
        let g = self.granted.entry((site, bubble, epoch)).or_insert(until);
        *g = (*g).max(until);
    }

    /// An order carries a lease (I6).
    pub(crate) fn order_lease(&mut self, now: u64, what: &str, bubble: BubbleId, epoch: Epoch) {
        let newest = self.ordered.entry(bubble).or_insert(epoch);
        if epoch < *newest {
            let detail = format!(
                "{what} of bubble {} under epoch {} after epoch {}",
                bubble.0, epoch.0, newest.0
            );
            self.fail("I6", now, detail);
        } else {
            *newest = epoch;
        }
    }

    /// A core started with this generation (I6).
    pub(crate) fn generation(&mut self, now: u64, generation: u32) {
        if generation <= self.generation {
            let detail = format!("generation {generation} after {}", self.generation);
            self.fail("I6", now, detail);
        }
        self.generation = generation;
    }

    /// An agent gave a player this id (I6: never twice).
    pub(crate) fn player_id(&mut self, now: u64, id: PlayerId, player: usize) {
        if let Some(&other) = self.ids.get(&id)
            && other != player
        {
            self.fail("I6", now, format!("player id {} given twice", id.0));
        }
        self.ids.insert(id, player);
    }

    /// A server of `site` wrote `update` at `now` (global) and `local` (site clock): I2, I3, I5.
    pub(crate) fn tick(
        &mut self,
        now: u64,
        local: u64,
        site: usize,
        server: &str,
        update: &Update,
    ) {
        self.ticks_checked += 1;
        let (bubble, epoch) = (update.bubble, update.epoch);
        let epochs = self.ticks.entry(bubble).or_default();
        let span = epochs.entry(epoch).or_insert((now, now));
        span.1 = now;
        let newer_started = epochs
            .range(Epoch(epoch.0 + 1)..)
            .map(|(e, (first, _))| (*e, *first))
            .min_by_key(|(_, f)| *f);
        if let Some((newer, first)) = newer_started
            && first <= now
        {
            let detail = format!(
                "bubble {} ticked under epoch {} by {server} after epoch {} started",
                bubble.0, epoch.0, newer.0
            );
            self.fail("I2", now, detail);
        }
        match self.granted.get(&(site, bubble, epoch)) {
            Some(&until) if local > until + I5_ALLOWANCE_US => {
                let late_ms = (local - until) / 1000;
                let detail = format!(
                    "bubble {} epoch {} ticked by {server} {late_ms} ms after its lease ended",
                    bubble.0, epoch.0
                );
                self.fail("I5", now, detail);
            }
            Some(_) => {}
            None => {
                let detail = format!(
                    "bubble {} epoch {} ticked by {server} without a grant",
                    bubble.0, epoch.0
                );
                self.fail("I5", now, detail);
            }
        }
        if let Some(view) = View::decode(&update.bytes.0) {
            for (player, e) in &view.entities {
                if e.inputs > e.last_seq {
                    let detail = format!(
                        "player {} in bubble {}: {} inputs applied for seq {}",
                        player.0, bubble.0, e.inputs, e.last_seq
                    );
                    self.fail("I3", now, detail);
                }
            }
        }
    }

    pub(crate) fn lost_input(
        &mut self,
        now: u64,
        player: PlayerId,
        told: u64,
        inputs: u64,
        last_seq: u64,
    ) {
        let detail = format!(
            "player {}: told seq {told} was applied; its entity ends at seq {last_seq} with {inputs} inputs",
            player.0
        );
        self.fail("I4", now, detail);
    }

    pub(crate) fn not_live(&mut self, now: u64, detail: String) {
        self.fail("liveness", now, detail);
    }

    pub(crate) fn not_routed_round(&mut self, now: u64, detail: String) {
        self.fail("route", now, detail);
    }
}

/// The update in a state item, if any.
pub(crate) fn update_of(item: &StateItem) -> Option<&Update> {
    match item {
        StateItem::Update(u) => Some(u),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::{Blob, Seq, Tick};
    use horizon_sdk::reference::Entity;

    fn update(bubble: u64, epoch: u64, entities: &[(u64, u64, u64)]) -> Update {
        // A view as the reference game writes it, with (player, inputs, last_seq) entities.
        #[derive(serde::Serialize)]
        struct V {
            tick: Tick,
            wall_us: u64,
            origin: u64,
            prev_chain: u64,
            chain: u64,
            entities: Vec<(PlayerId, Entity)>,
        }
        let entities = entities
            .iter()
            .map(|&(p, inputs, last_seq)| {
                (PlayerId(p), Entity { inputs, last_seq, ..Entity::default() })
            })
            .collect();
        let v = V { tick: Tick(1), wall_us: 0, origin: 0, prev_chain: 0, chain: 0, entities };
        Update {
            bubble: BubbleId(bubble),
            epoch: Epoch(epoch),
            tick: Tick(1),
            acked: vec![(PlayerId(1), Seq(1))],
            bytes: Blob(postcard::to_stdvec(&v).unwrap()),
        }
    }

    fn names(c: &Checker) -> Vec<&'static str> {
        c.violations.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn an_older_copy_stored_after_a_newer_one_breaks_i1() {
        let mut c = Checker::new(7);
        c.stored(0, BubbleId(1), Epoch(2));
        c.stored(1, BubbleId(1), Epoch(2));
        assert!(c.violations.is_empty());
        c.stored(2, BubbleId(1), Epoch(1));
        assert_eq!(names(&c), ["I1"]);
        assert_eq!(c.violations[0].seed, 7);
    }

    #[test]
    fn an_old_epoch_ticking_after_a_new_one_started_breaks_i2() {
        let mut c = Checker::new(0);
        c.granted(0, BubbleId(1), Epoch(1), 10_000_000);
        c.granted(1, BubbleId(1), Epoch(2), 10_000_000);
        c.tick(100, 100, 0, "a", &update(1, 1, &[]));
        c.tick(200, 200, 1, "b", &update(1, 2, &[]));
        assert!(c.violations.is_empty(), "a handover: old stops, new starts");
        c.tick(300, 300, 0, "a", &update(1, 1, &[]));
        assert_eq!(names(&c), ["I2"]);
    }

    #[test]
    fn an_input_applied_twice_breaks_i3() {
        let mut c = Checker::new(0);
        c.granted(0, BubbleId(1), Epoch(1), 10_000_000);
        c.tick(1, 1, 0, "a", &update(1, 1, &[(1, 5, 5)]));
        assert!(c.violations.is_empty());
        c.tick(2, 2, 0, "a", &update(1, 1, &[(1, 6, 5)]));
        assert_eq!(names(&c), ["I3"]);
    }

    #[test]
    fn a_tick_past_the_granted_lease_or_without_one_breaks_i5() {
        let mut c = Checker::new(0);
        c.granted(0, BubbleId(1), Epoch(1), 1_000_000);
        c.tick(1, 1_004_000, 0, "a", &update(1, 1, &[]));
        assert!(c.violations.is_empty(), "within the hop's allowance");
        c.tick(2, 1_006_000, 0, "a", &update(1, 1, &[]));
        c.tick(3, 10, 1, "b", &update(2, 1, &[]));
        assert_eq!(names(&c), ["I5", "I5"]);
    }

    #[test]
    fn epochs_generations_and_ids_going_back_break_i6() {
        let mut c = Checker::new(0);
        c.order_lease(0, "create", BubbleId(1), Epoch(3));
        c.order_lease(1, "restore", BubbleId(1), Epoch(3));
        c.generation(0, 1);
        c.generation(1, 2);
        c.player_id(0, PlayerId(9), 0);
        c.player_id(1, PlayerId(9), 0);
        assert!(c.violations.is_empty(), "the same grant again, a rejoin of the same player");
        c.order_lease(2, "regrant", BubbleId(1), Epoch(2));
        c.generation(3, 2);
        c.player_id(4, PlayerId(9), 1);
        assert_eq!(names(&c), ["I6", "I6", "I6"]);
    }
}
