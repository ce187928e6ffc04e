//! Epochs and leases fence every write: stale updates, own states and positions reach
//! nobody unless the holder sends them; the same inputs give the same effects.

use super::*;

#[test]
fn the_same_inputs_give_the_same_effects() {
    let run = || {
        let mut h = running(3_000);
        with_ids(&mut h);
        join_player(&mut h);
        let mut log: Vec<String> = Vec::new();
        for e in h.advance(Duration::from_secs(5)) {
            log.push(format!("{e:?}"));
        }
        log
    };
    let a = run();
    assert!(!a.is_empty());
    // Timers, renewals and reports come out in one order; only the clock's origin differs.
    let strip = |v: Vec<String>| -> Vec<String> {
        v.into_iter().map(|s| s.split("sent:").next().unwrap_or_default().to_owned()).collect()
    };
    assert_eq!(strip(a), strip(run()));
}

#[test]
fn an_update_under_an_old_epoch_or_from_a_server_not_holding_the_bubble_reaches_nobody() {
    let mut h = running(30_000);
    with_ids(&mut h);
    let (player, conn) = join_player(&mut h);
    let acked = [(player.0, 1)];
    let delivered = |out: &[Effect]| player_items(out).iter().any(|(c, _)| *c == conn);
    // Bubble 1 runs on mtl-gs-0 under epoch 1: its update reaches the player.
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(1, 1, 5, &acked) });
    assert!(delivered(&out), "the holder's update is delivered");
    // An older epoch (0), a newer one nobody granted here (2), and another server: refused.
    for (server, epoch) in [("mtl-gs-0", 0), ("mtl-gs-0", 2), ("mtl-gs-9", 1)] {
        let out =
            h.feed(Input::ServerItem { server: n(server), item: update(1, epoch, 6, &acked) });
        assert!(!delivered(&out), "{server} under epoch {epoch} reached the player");
    }
    assert_eq!(h.m.stats.stale_updates_refused.load(Ordering::Relaxed), 3);
}

#[test]
fn an_own_state_reaches_its_player_only_from_the_holder_and_once_an_update_confirmed_the_epoch() {
    let mut h = running(30_000);
    with_ids(&mut h);
    let (player, conn) = join_player(&mut h);
    let own = |server: &str, epoch: u64, seq: u64, len: usize| Input::ServerItem {
        server: n(server),
        item: StateItem::Own(Own {
            bubble: BubbleId(1),
            epoch: Epoch(epoch),
            tick: Tick(5),
            player,
            seq: Seq(seq),
            bytes: Blob(vec![7; len]),
        }),
    };
    let shown = |out: &[Effect]| -> Vec<u64> {
        player_items(out)
            .into_iter()
            .filter(|(c, _)| *c == conn)
            .filter_map(|(_, i)| match i {
                gateway::Item::Own { bubble, seq, .. } if *bubble == BubbleId(1) => Some(seq.0),
                _ => None,
            })
            .collect()
    };
    // Before any update of the bubble, the route's epoch is unconfirmed: the update comes first.
    assert!(shown(&h.feed(own("mtl-gs-0", 1, 1, 40))).is_empty());
    h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(1, 1, 5, &[(player.0, 1)]) });
    assert_eq!(shown(&h.feed(own("mtl-gs-0", 1, 2, 40))), [2], "the holder's own state, at once");
    // An older epoch, one nobody granted here, another server, too many bytes: refused.
    for (server, epoch, len) in
        [("mtl-gs-0", 0, 40), ("mtl-gs-0", 2, 40), ("mtl-gs-9", 1, 40), ("mtl-gs-0", 1, 17 << 10)]
    {
        let out = h.feed(own(server, epoch, 3, len));
        assert!(shown(&out).is_empty(), "{server} under epoch {epoch}, {len} bytes, was shown");
    }
    assert_eq!(h.m.stats.own_refused.load(Ordering::Relaxed), 4);
    assert_eq!(h.m.stats.own_delivered.load(Ordering::Relaxed), 1);
    // An own state acknowledges nothing: the player's inputs stay kept until an update.
    assert_eq!(h.m.players[&player].session.acked(), Seq(1));
}

#[test]
fn positions_go_to_the_core_only_from_the_server_running_the_region_under_its_lease() {
    let mut h = running(30_000);
    h.server_ready("mtl-gs-1");
    let at = |x: f64| server::PlayerPosition {
        player: PlayerId(7),
        pos: Vec3 { x, y: 0.0, z: 0.0 },
        vel: Vec3::default(),
    };
    let report = |h: &mut Harness,
                  server: &str,
                  epoch: u64,
                  players: Vec<server::PlayerPosition>| {
        let conn = h.m.fleet.get(&n(server)).unwrap().conn();
        let token = h.token();
        let lease = LeaseRef { bubble: BubbleId(1), epoch: Epoch(epoch) };
        let request = server::Request::Positions { lease, players };
        let out = h.feed(Input::ServerRequest { server: n(server), conn, token, request });
        out.iter()
            .find_map(|e| match e {
                Effect::AnswerServer { result, .. } => Some(result.as_ref().map_err(|f| f.code)),
                _ => None,
            })
            .expect("answered")
            .cloned()
    };
    assert_eq!(report(&mut h, "mtl-gs-0", 1, vec![at(1.0)]), Ok(server::Reply::Done));
    // Another server, another epoch, too many players: refused, nothing kept.
    assert_eq!(report(&mut h, "mtl-gs-1", 1, vec![at(2.0)]), Err(ErrorCode::StaleEpoch));
    assert_eq!(report(&mut h, "mtl-gs-0", 2, vec![at(3.0)]), Err(ErrorCode::StaleEpoch));
    let flood = vec![at(4.0); server::MAX_POSITIONS + 1];
    assert_eq!(report(&mut h, "mtl-gs-0", 1, flood), Err(ErrorCode::TooLarge));
    assert_eq!(h.m.stats.positions_refused.load(Ordering::Relaxed), 2);
    // The holder's newest list goes to the core with the next report, once.
    assert_eq!(report(&mut h, "mtl-gs-0", 1, vec![at(5.0)]), Ok(server::Reply::Done));
    let sent = |h: &mut Harness| -> Vec<control::RegionPositions> {
        let now = h.now;
        h.m.report(now);
        h.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::ToCore { request: control::Request::Positions { regions }, .. } => {
                    Some(regions)
                }
                _ => None,
            })
            .flatten()
            .collect()
    };
    let regions = sent(&mut h);
    assert_eq!(regions.len(), 1);
    assert_eq!(regions[0].lease, LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) });
    assert_eq!(regions[0].players, vec![at(5.0)]);
    assert!(sent(&mut h).is_empty(), "sent once");
}
