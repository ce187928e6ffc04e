//! The region machine's tests: inputs once and in order, leases, regrants, standbys fed by
//! snapshots, deltas and seals, part copies, and what the game is told.

use super::*;
use crate::reference::{Entity, Reference, View, encode_input};
use horizon_proto::WorldId;

const GAME: Reference = Reference { tick_ms: 50 };

fn lease(epoch: u64) -> LeaseRef {
    LeaseRef { bubble: BubbleId(7), epoch: Epoch(epoch) }
}

fn input(player: u64, seq: u64) -> Input {
    Input { player: PlayerId(player), seq: Seq(seq), bytes: Blob(encode_input([1000, 0, -500])) }
}

fn held(epoch: u64, standby: bool) -> Held<Reference> {
    let region = Region { world: WorldId(1), bounds: None };
    let until = Instant::now() + std::time::Duration::from_secs(60);
    Held::new(&GAME, lease(epoch), region, until, standby)
}

#[test]
fn inputs_apply_once_and_in_order() {
    let now = Instant::now();
    let mut h = held(1, false);
    h.join(&GAME, PlayerId(1), Seq(0), &[]);
    // 2 waits for 1; 1 then releases both; a re-send of both is dropped.
    assert_eq!(h.inputs(&GAME, vec![input(1, 2)], now).applied, 0);
    assert_eq!(h.inputs(&GAME, vec![input(1, 1)], now).applied, 2);
    let again = h.inputs(&GAME, vec![input(1, 1), input(1, 2)], now);
    assert_eq!((again.applied, again.duplicates), (0, 2));
    let (update, _, _) = h.step(&GAME, now).unwrap();
    let view = View::decode(&update.bytes.0).unwrap();
    let e = view.entity(PlayerId(1)).unwrap();
    assert_eq!((e.inputs, e.last_seq), (2, 2));
    assert_eq!(update.acked, vec![(PlayerId(1), Seq(2))]);
}

#[test]
fn joining_a_player_already_here_keeps_their_state_and_applied_inputs() {
    let now = Instant::now();
    let mut h = held(1, false);
    assert!(h.join(&GAME, PlayerId(1), Seq(0), &[]));
    h.inputs(&GAME, vec![input(1, 1), input(1, 2)], now);
    assert!(!h.join(&GAME, PlayerId(1), Seq(0), &[]), "already here");
    let again = h.inputs(&GAME, vec![input(1, 1), input(1, 2)], now);
    assert_eq!((again.applied, again.duplicates), (0, 2), "nothing applied twice");
    assert!(!h.join(&GAME, PlayerId(1), Seq(2), &[]), "not newer than what is here");
    let (update, _, _) = h.step(&GAME, now).unwrap();
    let view = View::decode(&update.bytes.0).unwrap();
    let e = view.entity(PlayerId(1)).unwrap();
    assert_eq!((e.inputs, e.last_seq), (2, 2));
}

#[test]
fn a_late_crossing_with_more_applied_inputs_replaces_a_fresh_start() {
    let now = Instant::now();
    let mut h = held(1, false);
    // Restored without the player's crossing: it started afresh.
    assert!(h.join(&GAME, PlayerId(1), Seq(0), &[]));
    // The crossing arrives: the player's entity after 7 inputs.
    let crossed = Entity { pos: [5, 0, 0], vel: [0; 3], inputs: 7, last_seq: 7 };
    let bytes = postcard::to_stdvec(&crossed).unwrap();
    assert!(h.join(&GAME, PlayerId(1), Seq(7), &bytes));
    assert_eq!(h.inputs(&GAME, vec![input(1, 7), input(1, 8)], now).applied, 1);
    let (update, _, _) = h.step(&GAME, now).unwrap();
    let view = View::decode(&update.bytes.0).unwrap();
    let e = view.entity(PlayerId(1)).unwrap();
    assert_eq!((e.inputs, e.last_seq), (8, 8));
}

#[test]
fn nothing_moves_without_a_valid_lease() {
    let mut h = held(1, false);
    h.join(&GAME, PlayerId(1), Seq(0), &[]);
    let later = Instant::now() + std::time::Duration::from_secs(61);
    assert_eq!(h.inputs(&GAME, vec![input(1, 1)], later).applied, 0);
    assert!(h.step(&GAME, later).is_none(), "expired lease: no step");
    // A renewal brings it back and the held input is applied then.
    h.renew(later + std::time::Duration::from_secs(30));
    let (update, _, applied) = h.step(&GAME, later).unwrap();
    assert_eq!(applied, 1);
    assert_eq!(update.acked, vec![(PlayerId(1), Seq(1))]);
}

#[test]
fn a_regrant_keeps_the_state_under_the_newer_epoch_and_refuses_older_or_sealed() {
    let now = Instant::now();
    let mut h = held(1, false);
    h.join(&GAME, PlayerId(1), Seq(0), &[]);
    h.inputs(&GAME, vec![input(1, 1)], now);
    let (before, _, _) = h.step(&GAME, now).unwrap();
    assert!(h.regrant(&GAME, lease(1), now + std::time::Duration::from_secs(30)).is_err());
    h.regrant(&GAME, lease(3), now + std::time::Duration::from_secs(30)).unwrap();
    assert_eq!(h.lease, lease(3));
    assert_eq!(h.inputs(&GAME, vec![input(1, 2)], now).applied, 1);
    let (after, _, _) = h.step(&GAME, now).unwrap();
    let (was, is) = (View::decode(&before.bytes.0).unwrap(), View::decode(&after.bytes.0).unwrap());
    assert_eq!(is.prev_chain, was.chain, "the same simulation goes on");
    assert_eq!(is.entity(PlayerId(1)).unwrap().inputs, 2);
    h.seal(&GAME);
    assert!(h.regrant(&GAME, lease(4), now).is_err(), "a sealed region is not regranted");
}

#[test]
fn a_standby_fed_snapshot_deltas_and_seal_continues_the_chain() {
    let now = Instant::now();
    let mut source = held(1, false);
    for p in 1..=3 {
        source.join(&GAME, PlayerId(p), Seq(0), &[]);
    }
    let mut seq = 0;
    let mut feed = |h: &mut Held<Reference>| {
        seq += 1;
        let batch = (1..=3).map(|p| input(p, seq)).collect();
        h.inputs(&GAME, batch, now);
    };
    for _ in 0..5 {
        feed(&mut source);
        source.step(&GAME, now);
    }
    let mut target = held(2, true);
    for chunk in source.snapshot(&GAME, 16, true) {
        target.on_snapshot(&GAME, chunk).unwrap();
    }
    let mut last_chain = 0;
    for _ in 0..4 {
        feed(&mut source);
        let (update, delta, _) = source.step(&GAME, now).unwrap();
        target.on_delta(&GAME, delta.unwrap()).unwrap();
        last_chain = View::decode(&update.bytes.0).unwrap().chain;
    }
    // Inputs applied after the last step travel in the seal's final delta.
    feed(&mut source);
    let seal = source.seal(&GAME);
    assert!(source.step(&GAME, now).is_none(), "a sealed region never writes again");
    let sealed_tick = seal.tick;
    target.on_seal(&GAME, seal).unwrap();
    // Re-sent inputs after the switch are recognised as applied.
    let resent = target.inputs(&GAME, (1..=3).map(|p| input(p, seq)).collect(), now);
    assert_eq!(resent.duplicates, 3);
    let (update, _, _) = target.step(&GAME, now).unwrap();
    let view = View::decode(&update.bytes.0).unwrap();
    assert_eq!(view.tick, Tick(sealed_tick.0 + 1));
    assert_eq!(view.prev_chain, last_chain, "the target starts from the sealed state");
    for p in 1..=3 {
        let e = view.entity(PlayerId(p)).unwrap();
        assert_eq!((e.inputs, e.last_seq), (seq, seq), "every input applied once");
    }
}

#[test]
fn a_standby_restored_from_part_copies_holds_every_part_s_players_once() {
    let now = Instant::now();
    // Part 0 simulates players 1 and 2; part 1 player 3, and an older state of player 2
    // (it changed part between the two copies).
    let (mut part0, mut part1) = (held(1, false), held(1, false));
    for p in [1, 2] {
        part0.join(&GAME, PlayerId(p), Seq(0), &[]);
    }
    for p in [2, 3] {
        part1.join(&GAME, PlayerId(p), Seq(0), &[]);
    }
    for seq in 1..=4 {
        part0.inputs(&GAME, vec![input(1, seq), input(2, seq)], now);
        part0.step(&GAME, now);
    }
    for seq in 1..=2 {
        part1.inputs(&GAME, vec![input(2, seq), input(3, seq)], now);
        part1.step(&GAME, now);
    }
    let mut target = held(2, true);
    for chunk in part0.snapshot(&GAME, 16, false) {
        target.on_snapshot(&GAME, chunk).unwrap();
    }
    let tick = target.tick;
    for chunk in part1.snapshot(&GAME, 16, false) {
        target.on_part_snapshot(&GAME, chunk).unwrap();
    }
    let seal = Seal {
        bubble: BubbleId(1),
        epoch: Epoch(1),
        tick,
        final_delta: Blob::default(),
        last_applied: Vec::new(),
    };
    target.on_seal(&GAME, seal).unwrap();
    // Re-sent inputs: those the copies hold are recognised, the next ones applied.
    let resent = target.inputs(&GAME, vec![input(1, 4), input(2, 4), input(3, 2)], now);
    assert_eq!(resent.duplicates, 3);
    assert_eq!(target.inputs(&GAME, vec![input(3, 3)], now).applied, 1);
    let (update, _, _) = target.step(&GAME, now).unwrap();
    let view = View::decode(&update.bytes.0).unwrap();
    let e = |p| view.entity(PlayerId(p)).map(|e| (e.inputs, e.last_seq));
    assert_eq!(e(1), Some((4, 4)));
    assert_eq!(e(2), Some((4, 4)), "the state that applied more inputs stays");
    assert_eq!(e(3), Some((3, 3)));
    assert_eq!(view.entities.len(), 3, "each player once");
}

#[test]
fn a_part_snapshot_needs_the_snapshot_first_and_a_standby() {
    let mut part = held(1, false);
    part.join(&GAME, PlayerId(1), Seq(0), &[]);
    let chunk = part.snapshot(&GAME, 1 << 20, false).remove(0);
    let mut target = held(2, true);
    assert!(matches!(
        target.on_part_snapshot(&GAME, chunk.clone()),
        Err(RegionError::Phase { .. })
    ));
    let mut running = held(2, false);
    assert!(matches!(running.on_part_snapshot(&GAME, chunk), Err(RegionError::Phase { .. })));
}

#[test]
fn a_standby_refuses_items_of_its_own_or_a_newer_epoch() {
    let mut source = held(5, false);
    let mut target = held(5, true);
    let chunk = source.snapshot(&GAME, 1024, true).remove(0);
    assert!(matches!(target.on_snapshot(&GAME, chunk), Err(RegionError::Epoch { .. })));
}

/// A game with no state that records when it is told to start and stop writing.
#[derive(Default)]
struct Told(std::sync::Mutex<Vec<String>>);

impl Told {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl Game for Told {
    type State = ();
    fn empty(&self, _: BubbleId, _: &Region) {}
    fn encode(&self, _: &()) -> Vec<u8> {
        Vec::new()
    }
    fn decode(&self, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn join(&self, _: &mut (), _: PlayerId, _: &[u8]) {}
    fn leave(&self, _: &mut (), _: PlayerId) -> Vec<u8> {
        Vec::new()
    }
    fn input(&self, _: &mut (), _: PlayerId, _: Seq, _: &[u8]) {}
    fn step(&self, _: &mut (), _: Tick) {}
    fn view(&self, _: &(), _: Tick) -> Vec<u8> {
        Vec::new()
    }
    fn started(&self, _: &mut (), lease: LeaseRef) {
        self.0.lock().unwrap().push(format!("started {}", lease.epoch.0));
    }
    fn stopped(&self, _: &mut ()) {
        self.0.lock().unwrap().push("stopped".to_owned());
    }
}

#[test]
fn the_game_is_told_when_writing_starts_and_stops() {
    use std::time::Duration;
    let game = Told::default();
    let now = Instant::now();
    let region = Region { world: WorldId(1), bounds: None };
    let mut h = Held::new(&game, lease(1), region, now + Duration::from_secs(30), false);
    assert!(game.take().is_empty(), "nothing before the first tick or input");
    h.step(&game, now).unwrap();
    h.step(&game, now).unwrap();
    assert_eq!(game.take(), ["started 1"], "once, not every tick");
    // The lease lapses by our clock: stopped once; a late renewal starts it again.
    let later = now + Duration::from_secs(31);
    assert!(h.step(&game, later).is_none());
    assert_eq!(h.inputs(&game, vec![input(1, 1)], later).applied, 0);
    assert_eq!(game.take(), ["stopped"]);
    h.renew(later + Duration::from_secs(30));
    h.inputs(&game, Vec::new(), later);
    assert_eq!(game.take(), ["started 1"]);
    // A regrant stops the old lease and starts the new one; a seal stops for good.
    h.regrant(&game, lease(2), later + Duration::from_secs(30)).unwrap();
    assert_eq!(game.take(), ["stopped"]);
    h.step(&game, later).unwrap();
    assert_eq!(game.take(), ["started 2"]);
    h.seal(&game);
    assert!(h.step(&game, later).is_none());
    assert_eq!(game.take(), ["stopped"]);
    // A standby is not written until its seal, and a retired region is not stopped twice.
    let mut standby = Held::new(&game, lease(3), region, later + Duration::from_secs(30), true);
    standby.on_snapshot(&game, h.snapshot(&game, 1024, false).remove(0)).unwrap();
    assert!(standby.step(&game, later).is_none());
    standby.retire(&game);
    assert!(game.take().is_empty(), "a standby never started");
}

mod budgets {
    use super::*;
    use proptest::prelude::*;

    /// An input of `size` bytes (the reference game ignores what it cannot decode).
    fn sized(player: u64, seq: u64, size: usize) -> Input {
        Input { player: PlayerId(player), seq: Seq(seq), bytes: Blob(vec![0xa5; size]) }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever arrives, in whatever order and size, a region holds at most its budgets of
        /// waiting inputs (count and bytes); what it dropped, a re-send in order brings, and
        /// every input is applied exactly once.
        #[test]
        fn waiting_inputs_stay_within_their_budgets_and_resends_lose_nothing(
            arrivals in prop::collection::vec((1u64..4, 2u64..40, 0usize..(2 << 20)), 1..60),
        ) {
            let now = Instant::now();
            let mut h = held(1, false);
            for p in 1..4 {
                h.join(&GAME, PlayerId(p), Seq(0), &[]);
            }
            // Seq 1 of every player is held back: everything else waits for it.
            for (player, seq, size) in &arrivals {
                h.inputs(&GAME, vec![sized(*player, *seq, *size)], now);
                prop_assert!(h.pending.inputs.len() <= MAX_PENDING_INPUTS);
                prop_assert!(h.pending.bytes <= MAX_PENDING_BYTES, "{} bytes wait", h.pending.bytes);
                let sum: usize = h.pending.inputs.values().map(|b| b.0.len()).sum();
                prop_assert_eq!(sum, h.pending.bytes);
            }
            // The gateway re-sends every input in order, small ones (as it keeps them).
            let mut applied = 0;
            for seq in 1..40 {
                let resend: Vec<Input> = (1..4).map(|p| sized(p, seq, 16)).collect();
                applied += h.inputs(&GAME, resend, now).applied;
            }
            prop_assert_eq!(applied, 3 * 39, "each input applied once");
            prop_assert_eq!(h.pending.bytes, 0);
        }
    }
}

#[test]
fn a_running_region_adopts_listed_players_from_another_bubble_s_copy_keeping_the_more_applied() {
    let now = Instant::now();
    // Another bubble's copy: player 1 after 6 inputs, player 2 after 3, player 3 after 5.
    let mut other = held(1, false);
    for p in [1, 2, 3] {
        other.join(&GAME, PlayerId(p), Seq(0), &[]);
    }
    for seq in 1..=6 {
        let mut inputs = vec![input(1, seq)];
        if seq <= 3 {
            inputs.push(input(2, seq));
        }
        if seq <= 5 {
            inputs.push(input(3, seq));
        }
        other.inputs(&GAME, inputs, now);
        other.step(&GAME, now);
    }
    let copy = other.snapshot(&GAME, 16, false);
    // This bubble was restored without player 1 (started afresh) and with player 2 ahead.
    let mut h = held(4, false);
    h.join(&GAME, PlayerId(1), Seq(0), &[]);
    h.join(&GAME, PlayerId(2), Seq(0), &[]);
    for seq in 1..=4 {
        h.inputs(&GAME, vec![input(2, seq)], now);
    }
    let adopt = |c: &Snapshot| Snapshot { bubble: BubbleId(7), epoch: Epoch(4), ..c.clone() };
    let (last, first) = copy.split_last().unwrap();
    for chunk in first {
        assert_eq!(h.on_adopt(&GAME, adopt(chunk), &[PlayerId(1), PlayerId(2)]).unwrap(), 0);
    }
    // Player 3 is in the copy but not listed: not taken.
    assert_eq!(h.on_adopt(&GAME, adopt(last), &[PlayerId(1), PlayerId(2)]).unwrap(), 1);
    let resent = h.inputs(&GAME, vec![input(1, 6), input(1, 7)], now);
    assert_eq!((resent.duplicates, resent.applied), (1, 1));
    let (update, _, _) = h.step(&GAME, now).unwrap();
    let view = View::decode(&update.bytes.0).unwrap();
    let e = |p| view.entity(PlayerId(p)).map(|e| (e.inputs, e.last_seq));
    assert_eq!(e(1), Some((7, 7)), "adopted at 6, then 7 applied");
    assert_eq!(e(2), Some((4, 4)), "the state that applied more inputs stays");
    assert_eq!(e(3), None);
    // Only under this region's epoch, and only while it runs.
    let stale = Snapshot { epoch: Epoch(3), ..adopt(last) };
    assert!(matches!(h.on_adopt(&GAME, stale, &[PlayerId(1)]), Err(RegionError::Epoch { .. })));
    let mut standby = held(4, true);
    let r = standby.on_adopt(&GAME, adopt(last), &[PlayerId(1)]);
    assert!(matches!(r, Err(RegionError::Phase { .. })));
}
