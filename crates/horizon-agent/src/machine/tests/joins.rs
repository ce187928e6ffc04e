//! Players joining and sending inputs and positions: what reaches the core and the servers,
//! and what is refused.

use super::*;

#[test]
fn a_join_reaches_the_core_within_50_ms_not_at_the_next_report() {
    let mut h = running(10_000);
    with_ids(&mut h);
    // Past the first reports: the next periodic one is a second away.
    h.advance(Duration::from_secs(1));
    let (player, _) = join_player(&mut h);
    let out = h.advance(Duration::from_millis(60));
    let reports: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ToCore { request: control::Request::Report { joins, players, .. }, .. } => {
                Some((joins.iter().map(|j| j.player).collect::<Vec<_>>(), players.len()))
            }
            _ => None,
        })
        .collect();
    // The joins alone (and the servers' loads), not every player's sample.
    assert_eq!(reports, [(vec![player], 0)]);
}

#[test]
fn an_oversized_input_closes_its_player_s_connection_alone_and_big_resends_are_batched() {
    let mut h = running(30_000);
    with_ids(&mut h);
    let (player, conn) = join_player(&mut h);
    let (other, other_conn) = join_player(&mut h);
    let input =
        |seq: u64, len: usize| gateway::Item::Input { seq: Seq(seq), bytes: Blob(vec![1; len]) };
    let out =
        h.feed(Input::PlayerItem { conn, item: input(1, crate::gateway::MAX_INPUT_BYTES + 1) });
    assert!(inputs_to_servers(&out).is_empty(), "never reaches the server: {out:?}");
    assert!(
        matches!(&out[..], [Effect::ClosePlayer { conn: c, code: ErrorCode::TooLarge, .. }] if *c == conn),
        "{out:?}"
    );
    // The bystander plays on.
    let out = h.feed(Input::PlayerItem { conn: other_conn, item: input(1, 100) });
    assert_eq!(inputs_to_servers(&out), [("mtl-gs-0".to_owned(), vec![(other.0, 1)])]);
    // Sixty inputs of 16 KiB wait unacknowledged (the server froze); a new route sends them
    // all again, in items of at most 256 KiB of input.
    for seq in 1..=60 {
        h.feed(Input::PlayerItem { conn, item: input(seq, crate::gateway::MAX_INPUT_BYTES) });
    }
    let routes = vec![control::PlayerRoute { player, bubble: BubbleId(1), site: n("PAR") }];
    let (_, _) = h.order(control::Request::Route { routes });
    let routes = vec![control::PlayerRoute { player, bubble: BubbleId(1), site: n(SITE) }];
    let (_, out) = h.order(control::Request::Route { routes });
    let batches = inputs_to_servers(&out);
    let sent: Vec<u64> = batches.iter().flat_map(|(_, b)| b.iter().map(|(_, s)| *s)).collect();
    assert_eq!(sent, (1..=60).collect::<Vec<_>>(), "every kept input, once, in order");
    assert!(
        batches.len() >= 4 && batches.iter().all(|(_, b)| b.len() <= 16),
        "{} items",
        batches.len()
    );
}

#[test]
fn a_position_that_is_not_finite_is_refused() {
    let mut h = running(30_000);
    with_ids(&mut h);
    h.next_conn += 1;
    let conn = h.next_conn;
    h.feed(Input::PlayerUp { conn, client: n(&format!("bot-{conn}")) });
    let token = h.token();
    let pos = Vec3 { x: f64::NAN, y: 0.0, z: 0.0 };
    let request = gateway::Request::Join { role: Role::Player, world: WorldId(0), pos };
    let out = h.feed(Input::PlayerRequest { conn, token, request, rtt_ms: 20.0 });
    assert!(
        out.iter().any(|e| matches!(e, Effect::AnswerPlayer { result: Err(f), .. } if f.code == ErrorCode::Malformed)),
        "{out:?}"
    );
    // A joined player's position datagram with an infinity is dropped: the last one stays.
    let (player, conn) = join_player(&mut h);
    let moved = |x: f64, seq: u32| gateway::Datagram::Position {
        seq,
        world: WorldId(0),
        pos: Vec3 { x, y: 0.0, z: 0.0 },
        vel: Vec3::default(),
    };
    h.feed(Input::PlayerDatagram { conn, datagram: moved(5.0, 1), rtt_ms: 20.0 });
    h.feed(Input::PlayerDatagram { conn, datagram: moved(f64::INFINITY, 2), rtt_ms: 20.0 });
    assert_eq!(h.m.players[&player].pos.x, 5.0);
}
