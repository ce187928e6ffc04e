//! A game server that is stopping (`Drain`) gives its regions away with their whole state,
//! takes none, and is counted when it goes (`drain.rs`).

use super::*;
use horizon_proto::{Seal, Snapshot};

const OLD: &str = "mtl-gs-0";

/// Registered, two ready servers, region 1 running on the first (connection 1) under epoch 1.
fn running_on_old() -> Harness {
    let mut h = Harness::new(1);
    h.register();
    h.effects();
    h.server_ready(OLD);
    h.server_ready("mtl-gs-1");
    let (_, out) = h.order(create(1));
    h.answer_servers(out, done);
    h
}

/// The old server says it is stopping: the answer and what it set off.
fn drain(h: &mut Harness) -> Vec<Effect> {
    let token = h.token();
    let request = server::Request::Drain;
    h.feed(Input::ServerRequest { server: n(OLD), conn: 1, token, request })
}

fn drains(h: &Harness) -> (u64, u64) {
    let s = &h.m.stats;
    (s.drains_moved.load(Ordering::Relaxed), s.drains_failed_over.load(Ordering::Relaxed))
}

#[test]
fn a_stopping_server_gives_its_region_away_with_its_state_and_takes_no_other() {
    let mut h = running_on_old();
    let out = drain(&mut h);
    let answered =
        |e: &Effect| matches!(e, Effect::AnswerServer { result: Ok(server::Reply::Done), .. });
    assert!(out.iter().any(answered), "{out:?}");
    // The core is asked to fence the old server off first, as for an overfull server.
    let (pending, asked) = out
        .into_iter()
        .find_map(|e| match e {
            Effect::ToCore { pending, request: control::Request::Rehome { lease } } => {
                Some((pending, lease))
            }
            _ => None,
        })
        .expect("the region moves");
    assert_eq!(asked, lref(1));
    assert!(h.feed(Input::CoreReplied { pending, result: Ok(control::Reply::Done) }).is_empty());
    // A new region goes to the other server, never to the one stopping.
    let (_, out) = h.order(create(2));
    let assigned: Vec<String> = to_servers(&out).into_iter().map(|(s, _)| s).collect();
    assert_eq!(assigned, ["mtl-gs-1"]);
    h.answer_servers(out, done);
    // The move: the core's newer epoch, the new server standing by, the old one's copy and seal.
    let old = lref(1);
    let (token, out) = h.order(control::Request::Regrant { old, lease: lease(1, 2, 10_000) });
    h.answer_servers(out, done);
    let snapshot = Snapshot {
        bubble: BubbleId(1),
        epoch: Epoch(1),
        tick: Tick(40),
        index: 0,
        total: 1,
        bytes: Blob(vec![7; 16]),
    };
    h.feed(Input::ServerItem { server: n(OLD), item: StateItem::Snapshot(snapshot) });
    let seal = Seal {
        bubble: BubbleId(1),
        epoch: Epoch(1),
        tick: Tick(40),
        final_delta: Blob::default(),
        last_applied: Vec::new(),
    };
    h.feed(Input::ServerItem { server: n(OLD), item: StateItem::Seal(seal) });
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-1"), item: update(1, 2, 41, &[]) });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    let released = to_servers(&out);
    assert_eq!(released, [(OLD.to_owned(), &server::Request::Release { lease: old })]);
    // Holding nothing, it exits: counted as a drain whose regions all moved, none lost.
    h.answer_servers(out, done);
    let out = h.feed(Input::ServerGone { server: n(OLD), conn: 1 });
    assert!(
        !out.iter()
            .any(|e| matches!(e, Effect::ToCore { request: control::Request::Lost { .. }, .. })),
        "{out:?}"
    );
    assert_eq!(drains(&h), (1, 0));
}

#[test]
fn a_stopping_server_that_goes_before_its_region_moved_is_counted_and_the_region_fails_over() {
    let mut h = running_on_old();
    drain(&mut h);
    drain(&mut h);
    let out = h.feed(Input::ServerGone { server: n(OLD), conn: 1 });
    let lost = out.iter().find_map(|e| match e {
        Effect::ToCore { request: control::Request::Lost { leases, .. }, .. } => Some(leases),
        _ => None,
    });
    assert_eq!(lost, Some(&vec![lref(1)]), "restored from its copy, as after a crash");
    assert_eq!(drains(&h), (0, 1), "one drain, counted once");
    // A server that went without draining is no drain.
    h.server_ready("mtl-gs-2");
    h.feed(Input::ServerGone { server: n("mtl-gs-2"), conn: 3 });
    assert_eq!(drains(&h), (0, 1));
}

#[test]
fn without_the_core_a_stopping_servers_region_waits_and_moves_once_registered() {
    let mut h = running_on_old();
    h.feed(Input::CoreDown { error: "cut".into() });
    let out = drain(&mut h);
    assert!(
        !out.iter()
            .any(|e| matches!(e, Effect::ToCore { request: control::Request::Rehome { .. }, .. })),
        "no fencing without the core: {out:?}"
    );
    // Registered again: the next housekeeping moves it.
    h.register();
    let out = h.advance(Duration::from_secs(2));
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::ToCore { request: control::Request::Rehome { .. }, .. })),
        "{out:?}"
    );
}

#[test]
fn the_last_ready_server_keeps_its_region_until_another_is_ready_then_gives_it_away() {
    let mut h = Harness::new(0);
    h.register();
    h.effects();
    h.server_ready(OLD);
    let (_, out) = h.order(create(1));
    h.answer_servers(out, done);
    let out = drain(&mut h);
    let rehome =
        |e: &Effect| matches!(e, Effect::ToCore { request: control::Request::Rehome { .. }, .. });
    assert!(!out.iter().any(rehome), "nowhere to go: no move asked of the core: {out:?}");
    assert!(
        out.iter().any(|e| matches!(e, Effect::StartServer { .. })),
        "its replacement is started: {out:?}"
    );
    let out = h.advance(Duration::from_secs(2));
    assert!(!out.iter().any(rehome), "still nowhere to go: {out:?}");
    // The replacement is ready: the next housekeeping moves the region there.
    h.server_ready("mtl-gs-1");
    let out = h.advance(Duration::from_secs(2));
    assert!(out.iter().any(rehome), "{out:?}");
}

/// An operator's drain (the admin API) of `server`: the answer, and what it set off.
fn drain_asked(
    h: &mut Harness,
    server: &str,
) -> (Result<String, horizon_admin::Refused>, Vec<Effect>) {
    let token = h.token();
    let out = h.feed(Input::DrainAsked { token, server: server.to_owned() });
    let answer = out
        .iter()
        .find_map(|e| match e {
            Effect::AnswerDrain { token: t, result } if *t == token => Some(result.clone()),
            _ => None,
        })
        .expect("answered");
    (answer, out)
}

#[test]
fn an_operator_s_drain_moves_the_regions_and_tells_the_server_to_stop_once() {
    use horizon_admin::Refused;
    let mut h = running_on_old();
    let (answer, out) = drain_asked(&mut h, OLD);
    assert!(answer.is_ok_and(|a| a.contains("1 region")), "{out:?}");
    let told = |out: &[Effect]| {
        out.iter().any(|e| matches!(e, Effect::TerminateServer { server } if server == OLD))
    };
    assert!(told(&out), "SIGTERM, as a node drain would: {out:?}");
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::ToCore { request: control::Request::Rehome { .. }, .. })),
        "its region starts moving at once: {out:?}"
    );
    // Asked again: it is stopping already. The server's own `Drain` (its SIGTERM) changes
    // nothing more.
    let (again, out) = drain_asked(&mut h, OLD);
    assert!(matches!(again, Err(Refused::Conflict(_))), "{again:?}");
    assert!(!told(&out));
    let out = drain(&mut h);
    assert!(
        !out.iter()
            .any(|e| matches!(e, Effect::ToCore { request: control::Request::Rehome { .. }, .. }))
    );
    // A server this agent does not know.
    let (unknown, _) = drain_asked(&mut h, "mtl-gs-9");
    assert!(matches!(unknown, Err(Refused::NotFound(_))), "{unknown:?}");
}

#[test]
fn a_drain_with_nowhere_to_go_is_refused_and_changes_nothing() {
    use horizon_admin::Refused;
    // One server, holding the region, and the site at its `servers.max`.
    let mut h = Harness::new(0);
    h.m.cfg.max_servers = 1;
    h.register();
    h.effects();
    h.server_ready(OLD);
    let (_, out) = h.order(create(1));
    h.answer_servers(out, done);
    let (answer, out) = drain_asked(&mut h, OLD);
    assert!(
        matches!(&answer, Err(Refused::Conflict(why)) if why.contains("nowhere to go")),
        "{answer:?}"
    );
    assert!(!out.iter().any(|e| matches!(e, Effect::TerminateServer { .. })), "{out:?}");
    // With room for another server, the pool starts one for the region to go to.
    h.m.cfg.max_servers = 2;
    let (answer, out) = drain_asked(&mut h, OLD);
    assert!(answer.is_ok(), "{answer:?}");
    assert!(out.iter().any(|e| matches!(e, Effect::StartServer { .. })), "{out:?}");
}
