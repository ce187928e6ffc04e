//! Routes round a cut: a silent transfer link is routed round through the third site (and
//! back once it answers), and an agent in the middle passes relayed traffic on.

use super::*;
use horizon_proto::{Relayed, Snapshot};

fn link(a: &str, b: &str, rtt_ms: Option<f32>) -> control::LinkState {
    control::LinkState { a: n(a), b: n(b), rtt_ms }
}

/// MTL, registered, with transfer links to PAR and HKG, told the whole triangle is up.
fn triangle() -> Harness {
    let mut h = running(60_000);
    with_ids(&mut h);
    h.feed(Input::PeerUp { site: n("PAR"), conn: 99 });
    h.feed(Input::PeerUp { site: n("HKG"), conn: 98 });
    let links = vec![
        link("MTL", "PAR", Some(85.0)),
        link("MTL", "HKG", Some(190.0)),
        link("PAR", "HKG", Some(160.0)),
    ];
    let (_, out) = h.order(control::Request::Links { links });
    assert_eq!(answers(&out).len(), 1);
    h
}

/// Runs the agent for `by`, echoing the probes of the sites in `answering` (the others' links
/// are silent).
fn probe_rounds(h: &mut Harness, by: Duration, answering: &[&str]) -> Vec<Effect> {
    let end = h.now + by;
    let mut out = Vec::new();
    while h.now < end {
        let step = h.advance(Duration::from_millis(100));
        for e in step {
            match e {
                Effect::PeerDatagram { site, probe: transfer::Probe::Ping { seq, sent_us } }
                    if answering.contains(&site.as_str()) =>
                {
                    let probe = transfer::Probe::Echo { seq, sent_us };
                    out.extend(h.feed(Input::PeerDatagram { site, probe }));
                }
                other => out.push(other),
            }
        }
    }
    out
}

/// The inputs in the effects, as (first hop, the site they are for, seqs).
fn inputs_sent(effects: &[Effect]) -> Vec<(String, String, Vec<u64>)> {
    let seqs = |i: &Inputs| i.inputs.iter().map(|x| x.seq.0).collect::<Vec<_>>();
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PeerStream { site, item: StateItem::Inputs(i) } => {
                Some((site.to_string(), site.to_string(), seqs(i)))
            }
            Effect::PeerStream { site, item: StateItem::Relay(r) } => match &r.item {
                StateItem::Inputs(i) => Some((site.to_string(), r.to.to_string(), seqs(i))),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn input(h: &mut Harness, conn: ConnId, seq: u64) -> Vec<Effect> {
    let item = gateway::Item::Input { seq: Seq(seq), bytes: Blob(vec![1; 8]) };
    h.feed(Input::PlayerItem { conn, item })
}

#[test]
fn a_silent_link_is_routed_round_through_the_third_site_and_direct_again_once_it_answers() {
    let mut h = triangle();
    let (player, conn) = join_player(&mut h);
    // The player plays in PAR's bubble 2.
    let routes = vec![control::PlayerRoute { player, bubble: BubbleId(2), site: n("PAR") }];
    h.order(control::Request::Route { routes });
    let out = input(&mut h, conn, 1);
    assert_eq!(inputs_sent(&out), [("PAR".into(), "PAR".into(), vec![1])]);

    // PAR's link goes silent: 1 s after its last echo (a probe every 0.25 s) the route goes
    // round through HKG, and every input kept goes again that way.
    // (Unacknowledged, the input is also re-sent on its own timer, over the route of the day.)
    let out = probe_rounds(&mut h, Duration::from_millis(900), &["HKG"]);
    assert!(
        inputs_sent(&out).iter().all(|(via, ..)| via == "PAR"),
        "not yet: {:?}",
        inputs_sent(&out)
    );
    let out = probe_rounds(&mut h, Duration::from_millis(400), &["HKG"]);
    let sent = inputs_sent(&out);
    let round: Vec<_> = sent.iter().skip_while(|(via, ..)| via == "PAR").collect();
    assert_eq!(round.first(), Some(&&("HKG".into(), "PAR".into(), vec![1])), "{sent:?}");
    assert!(round.iter().all(|(via, to, _)| via == "HKG" && to == "PAR"), "{sent:?}");
    let relayed = out.iter().find_map(|e| match e {
        Effect::PeerStream { item: StateItem::Relay(r), .. } => Some((r.from.to_string(), r.hops)),
        _ => None,
    });
    assert_eq!(relayed, Some((SITE.to_owned(), 1)), "the origin rides with it");
    let stats = &h.m.stats;
    assert_eq!(stats.routes_relayed.load(Ordering::Relaxed), 1);
    assert_eq!(stats.route_changes.load(Ordering::Relaxed), 1);
    let out = input(&mut h, conn, 2);
    assert_eq!(inputs_sent(&out), [("HKG".into(), "PAR".into(), vec![2])]);
    // The next report tells the core the link is down.
    let reported = out
        .iter()
        .chain(&probe_rounds(&mut h, Duration::from_millis(1_000), &["HKG"]))
        .find_map(|e| match e {
            Effect::ToCore { request: control::Request::Report { backbone, .. }, .. } => {
                backbone.iter().find(|b| b.site.as_str() == "PAR").map(|b| b.rtt_ms)
            }
            _ => None,
        });
    assert_eq!(reported, Some(None), "PAR reported down");

    // PAR answers again: direct at the next probe, and what is kept goes again that way.
    let out = probe_rounds(&mut h, Duration::from_millis(300), &["HKG", "PAR"]);
    let sent = inputs_sent(&out);
    let direct: Vec<_> = sent.iter().skip_while(|(via, ..)| via == "HKG").collect();
    assert_eq!(direct.first(), Some(&&("PAR".into(), "PAR".into(), vec![1, 2])), "{sent:?}");
    assert!(direct.iter().all(|(via, ..)| via == "PAR"), "{sent:?}");
    assert_eq!(h.m.stats.routes_relayed.load(Ordering::Relaxed), 0);
    let out = input(&mut h, conn, 3);
    assert_eq!(inputs_sent(&out), [("PAR".into(), "PAR".into(), vec![3])]);
}

#[test]
fn with_every_path_down_nothing_is_relayed_and_the_direct_link_is_kept_for_its_return() {
    let mut h = triangle();
    let links = vec![link("PAR", "HKG", None)];
    h.order(control::Request::Links { links });
    let (player, conn) = join_player(&mut h);
    let routes = vec![control::PlayerRoute { player, bubble: BubbleId(2), site: n("PAR") }];
    h.order(control::Request::Route { routes });
    probe_rounds(&mut h, Duration::from_millis(1_500), &["HKG"]);
    let out = input(&mut h, conn, 1);
    assert_eq!(inputs_sent(&out), [("PAR".into(), "PAR".into(), vec![1])]);
    assert_eq!(h.m.stats.relayed_sent.load(Ordering::Relaxed), 0);
}

#[test]
fn an_agent_in_the_middle_passes_relayed_items_and_requests_on_and_answers_back() {
    let mut h = triangle();
    let item = |hops| {
        StateItem::Relay(Box::new(Relayed {
            from: n("PAR"),
            to: n("HKG"),
            hops,
            item: update(2, 1, 10, &[(5, 1)]),
        }))
    };
    let out = h.feed(Input::PeerItem { site: n("PAR"), item: item(1) });
    let on: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::PeerStream { site, item: StateItem::Relay(r) } => {
                Some((site.to_string(), r.from.to_string(), r.to.to_string(), r.hops))
            }
            _ => None,
        })
        .collect();
    assert_eq!(on, [("HKG".into(), "PAR".into(), "HKG".into(), 2)]);
    // Past the hop limit: dropped and counted.
    let out = h.feed(Input::PeerItem { site: n("PAR"), item: item(transfer::MAX_HOPS) });
    assert!(!out.iter().any(|e| matches!(e, Effect::PeerStream { .. })), "{out:?}");
    assert_eq!(h.m.stats.relayed_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(h.m.stats.relayed_through.load(Ordering::Relaxed), 1);

    // A request passed on: its answer goes back on the caller's token.
    let cross = transfer::Request::Cross {
        player: PlayerId(5),
        from: BubbleId(2),
        to: BubbleId(3),
        epoch: Epoch(1),
        last_applied: Seq(4),
        state: Blob::default(),
    };
    let relay = |to: &str, request| transfer::Request::Relay {
        from: n("PAR"),
        to: n(to),
        hops: 1,
        request: Box::new(request),
    };
    let out = h.feed(Input::PeerRequest {
        site: n("PAR"),
        token: 77,
        request: relay("HKG", cross.clone()),
    });
    let pending = out
        .into_iter()
        .find_map(|e| match e {
            Effect::ToPeer { site, pending, request: transfer::Request::Relay { hops: 2, .. } }
                if site.as_str() == "HKG" =>
            {
                Some(pending)
            }
            _ => None,
        })
        .expect("passed on to HKG");
    let out =
        h.feed(Input::PeerReplied { site: n("HKG"), pending, result: Ok(transfer::Reply::Done) });
    assert!(
        out.iter().any(|e| matches!(
            e,
            Effect::AnswerPeer { token: 77, result: Ok(transfer::Reply::Done) }
        )),
        "{out:?}"
    );
    // For this site: handled here, as from PAR (bubble 3 is not expected here: not ready).
    let out = h.feed(Input::PeerRequest { site: n("HKG"), token: 78, request: relay(SITE, cross) });
    let answer = out.iter().find_map(|e| match e {
        Effect::AnswerPeer { token: 78, result } => Some(result.clone().map_err(|f| f.code)),
        _ => None,
    });
    assert_eq!(answer, Some(Err(ErrorCode::NotReady)));
    assert!(!out.iter().any(|e| matches!(e, Effect::ToPeer { .. })), "not passed on");
}

#[test]
fn an_update_acknowledging_fewer_inputs_than_the_last_delivered_in_its_epoch_is_dropped() {
    let mut h = running(60_000);
    with_ids(&mut h);
    let (player, _) = join_player(&mut h);
    let p = player.0;
    let updates = |h: &mut Harness, tick, acked| {
        let item = update(1, 1, tick, &[(p, acked)]);
        player_items(&h.feed(Input::ServerItem { server: n("mtl-gs-0"), item })).len()
    };
    assert_eq!(updates(&mut h, 10, 5), 1);
    // A state from before input 5 arriving after it (it came round a cut): dropped.
    assert_eq!(updates(&mut h, 9, 4), 0);
    // Another server of a spread bubble counts ticks of its own: a lower tick is no older.
    assert_eq!(updates(&mut h, 3, 5), 1);
    assert_eq!(updates(&mut h, 4, 6), 1);
}

#[test]
fn a_handover_s_state_goes_round_the_cut_link_on_the_relay_it_was_opened_through() {
    let mut h = triangle();
    probe_rounds(&mut h, Duration::from_millis(1_300), &["HKG"]);
    assert_eq!(h.m.stats.routes_relayed.load(Ordering::Relaxed), 1, "PAR only through HKG");
    let handover = HandoverId(9);
    let (token, out) = h.order(control::Request::Prepare {
        handover,
        bubble: BubbleId(1),
        source: n(SITE),
        target: n("PAR"),
        target_addr: "127.0.0.1:2".into(),
        lease: lease(1, 1, 60_000),
        deadline_ms: 2_000,
    });
    assert!(!out.iter().any(|e| matches!(e, Effect::OpenMirror { .. })), "no direct stream");
    let pending = out
        .into_iter()
        .find_map(|e| match e {
            Effect::ToPeer {
                site,
                pending,
                request: transfer::Request::Relay { to, request, .. },
            } if site.as_str() == "HKG"
                && to.as_str() == "PAR"
                && matches!(*request, transfer::Request::Open { .. }) =>
            {
                Some(pending)
            }
            _ => None,
        })
        .expect("the open goes round through HKG");
    let accepted = Ok(transfer::Reply::Accepted { from_tick: Tick(0) });
    let out = h.feed(Input::PeerReplied { site: n("HKG"), pending, result: accepted });
    let copies = to_servers(&out);
    assert!(matches!(copies[..], [(_, server::Request::Copy { deltas: true, .. })]), "{copies:?}");
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    // The snapshot follows the open's way, even once the direct link answers again.
    probe_rounds(&mut h, Duration::from_millis(300), &["HKG", "PAR"]);
    assert_eq!(h.m.stats.routes_relayed.load(Ordering::Relaxed), 0, "direct again");
    let snapshot = StateItem::Snapshot(Snapshot {
        bubble: BubbleId(1),
        epoch: Epoch(1),
        tick: Tick(5),
        index: 0,
        total: 1,
        bytes: Blob(vec![7; 16]),
    });
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: snapshot });
    let sent: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::PeerStream { site, item: StateItem::Relay(r) } => {
                Some((site.to_string(), r.to.to_string(), matches!(r.item, StateItem::Snapshot(_))))
            }
            Effect::Mirror { .. } => Some(("direct stream".into(), String::new(), false)),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [("HKG".into(), "PAR".into(), true)]);
}

/// SPEC §5's floor for this site's players, for a move between any two sites: this agent's
/// round trips for its own links, the core's table for the pair it is not on.
#[test]
fn a_freeze_floor_is_known_for_a_move_between_two_other_sites() {
    let mut h = triangle();
    let tick = Duration::from_millis(33);
    let ms = |x: f64| Duration::from_secs_f64(x / 1000.0);
    assert_eq!(h.m.freeze_floor(&n("PAR"), &n("HKG")), None, "this agent measured nothing yet");
    for (site, rtt) in [("PAR", 85.0), ("HKG", 190.0)] {
        h.m.peers.get_mut(&n(site)).expect("a peer").rtt_ms = Some(rtt);
    }
    // A Montrealer in a bubble moving PAR → HKG: the seal crosses PAR–HKG (80 ms one way),
    // then the updates come from HKG (95 ms) instead of PAR (42.5 ms).
    let floor = h.m.freeze_floor(&n("PAR"), &n("HKG")).expect("known");
    assert!(floor.abs_diff(ms(80.0 + 95.0 - 42.5) + tick) < ms(0.01), "{floor:?}");
    assert_eq!(h.m.freeze_floor(&n("PAR"), &n("MTL")), Some(tick), "towards home: one tick");
    let out = h.m.freeze_floor(&n("MTL"), &n("HKG")).expect("known");
    assert!(out.abs_diff(ms(190.0) + tick) < ms(0.01), "{out:?}");
}
