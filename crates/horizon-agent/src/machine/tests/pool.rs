//! The fleet of game servers: the warm pool, seats, readiness the platform agrees to, idle
//! servers stopped, orders waiting for a ready server.

use super::*;

#[test]
fn after_every_registration_the_core_is_told_the_pools_bounds_and_the_gauges_show_them() {
    let mut h = Harness::new(2);
    for _ in 0..2 {
        let told: Vec<control::Request> = h
            .register()
            .into_iter()
            .filter_map(|e| match e {
                Effect::ToCore { request: r @ control::Request::Pool { .. }, .. } => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(told, [control::Request::Pool { warm: 2, max: 16 }]);
        h.feed(Input::CoreDown { error: "cut".into() });
    }
    let stats = &h.m.stats;
    let bounds = (
        stats.servers_warm_pool.load(Ordering::Relaxed),
        stats.servers_max.load(Ordering::Relaxed),
    );
    assert_eq!(bounds, (2, 16));
}

#[test]
fn the_warm_pool_is_started_at_once_and_topped_up_when_a_server_takes_a_bubble() {
    let mut h = Harness::new(2);
    let started: Vec<_> = h
        .effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::StartServer { server } => Some(server),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["mtl-gs-0", "mtl-gs-1"]);
    h.server_ready("mtl-gs-0");
    h.server_ready("mtl-gs-1");
    let (_, out) = h.order(control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, 10_000),
    });
    assert!(
        out.iter().any(|e| matches!(e, Effect::StartServer { server } if server == "mtl-gs-2"))
    );
}

#[test]
fn a_create_its_server_failed_tells_the_core_how_it_failed() {
    // Refused by the server: its own code; no answer: `timeout` (the server may run it);
    // unreachable: `not_ready`.
    let cases = [
        (
            Failure::Refused(Fault::new(ErrorCode::StaleEpoch, "newer epoch here")),
            ErrorCode::StaleEpoch,
        ),
        (Failure::TimedOut { ms: 10_000 }, ErrorCode::Timeout),
        (Failure::Unreachable("the server is gone".into()), ErrorCode::NotReady),
    ];
    for (b, (failure, code)) in (1..).zip(cases) {
        let mut h = Harness::new(1);
        h.effects();
        h.server_ready("mtl-gs-0");
        let create = control::Request::Create {
            bubble: BubbleId(b),
            region: region(),
            lease: lease(b, 1, 10_000),
        };
        let (token, out) = h.order(create);
        let out = h.answer_servers(out, |_| Err(failure.clone()));
        assert_eq!(answers(&out), [(token, Err(code))], "{failure}");
    }
}

#[test]
fn regions_share_a_server_up_to_its_seats_then_wait_for_another() {
    let mut h = Harness::with_seats(1, 2);
    h.effects();
    h.server_ready("mtl-gs-0");
    let create = |b| control::Request::Create {
        bubble: BubbleId(b),
        region: region(),
        lease: lease(b, 1, 10_000),
    };
    // Two regions of a player each on the one server (its two seats)...
    for b in 1..=2 {
        let (_, out) = h.order(create(b));
        let assign = to_servers(&out);
        assert!(matches!(assign[..], [(ref s, server::Request::Assign { .. })] if s == "mtl-gs-0"));
        h.answer_servers(out, done);
    }
    // ... and it says so in its report: it takes no more.
    assert!(h.m.server_loads().iter().all(|l| !l.ready && l.bubbles.len() == 2));
    // The third waits for the server the warm pool started when the first was taken.
    let (_, out) = h.order(create(3));
    assert!(to_servers(&out).is_empty(), "no seat left: the order waits");
    let out = h.server_ready("mtl-gs-1");
    assert!(
        matches!(to_servers(&out)[..], [(ref s, server::Request::Assign { .. })] if s == "mtl-gs-1")
    );
}

#[test]
fn idle_servers_beyond_the_warm_pool_are_stopped_after_half_a_minute() {
    let mut h = Harness::new(1);
    h.effects();
    for name in ["mtl-gs-0", "mtl-gs-1", "mtl-gs-2"] {
        h.server_ready(name);
    }
    let stopped = |out: &[Effect]| -> Vec<String> {
        out.iter()
            .filter_map(|e| match e {
                Effect::StopServer { server } => Some(server.clone()),
                _ => None,
            })
            .collect()
    };
    // Idle for less than 30 s: kept.
    assert!(stopped(&h.advance(Duration::from_secs(20))).is_empty());
    // Then all but the warm pool's one go, and never the pool.
    let out = h.advance(Duration::from_secs(15));
    assert_eq!(stopped(&out).len(), 2, "{out:?}");
    assert!(stopped(&h.advance(Duration::from_secs(120))).is_empty());
    assert_eq!(h.m.server_loads().len(), 1);
}

#[test]
fn a_servers_ready_counts_once_its_platform_agrees_and_a_second_ready_meanwhile_is_refused() {
    let mut h = Harness::new(1);
    h.register();
    h.effects();
    let conn = 77;
    h.feed(Input::ServerUp { server: n("mtl-gs-0"), conn });
    let ready = |h: &mut Harness| {
        let token = h.token();
        let request = server::Request::Ready;
        (token, h.feed(Input::ServerRequest { server: n("mtl-gs-0"), conn, token, request }))
    };
    let answers = |out: &[Effect], token: Token| -> Vec<bool> {
        out.iter()
            .filter_map(|e| match e {
                Effect::AnswerServer { token: t, result } if *t == token => Some(result.is_ok()),
                _ => None,
            })
            .collect()
    };
    let asked = |out: &[Effect]| {
        out.iter().any(
            |e| matches!(e, Effect::AskPlatformReady { server } if server.as_str() == "mtl-gs-0"),
        )
    };
    // Its `Ready` waits: the platform is asked, nothing is answered, nothing is placed on it.
    let (first, out) = ready(&mut h);
    assert!(asked(&out) && answers(&out, first).is_empty(), "{out:?}");
    let (_, out) = h.order(control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, 10_000),
    });
    assert!(to_servers(&out).is_empty(), "not ready yet: the order waits");
    // Asked again every housekeeping period while the platform has not agreed.
    assert!(asked(&h.advance(Duration::from_millis(400))));
    // A second `Ready` meanwhile is refused; the first still waits.
    let (second, out) = ready(&mut h);
    assert_eq!(answers(&out, second), [false]);
    // The platform agrees: the first is answered and the waiting order takes the server.
    let out = h.feed(Input::PlatformReady { server: n("mtl-gs-0") });
    assert_eq!(answers(&out, first), [true]);
    assert!(
        matches!(to_servers(&out)[..], [(ref s, server::Request::Assign { .. })] if s == "mtl-gs-0"),
        "{out:?}"
    );
    // Told twice, it counts once; a server gone takes its held `Ready` with it.
    assert!(answers(&h.feed(Input::PlatformReady { server: n("mtl-gs-0") }), first).is_empty());
    assert!(!asked(&h.advance(Duration::from_millis(400))));
}

#[test]
fn the_platform_hears_a_servers_pool_state_as_it_takes_a_region_and_gives_it_back() {
    let mut h = Harness::with_seats(1, 2);
    h.register();
    h.effects();
    let told = |out: &[Effect]| -> Vec<(String, bool)> {
        out.iter()
            .filter_map(|e| match e {
                Effect::SetHosting { server, hosting } => Some((server.to_string(), *hosting)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(told(&h.server_ready("mtl-gs-0")), [("mtl-gs-0".to_owned(), false)]);
    let create = |b| control::Request::Create {
        bubble: BubbleId(b),
        region: region(),
        lease: lease(b, 1, 10_000),
    };
    let (_, out) = h.order(create(1));
    assert_eq!(told(&out), [("mtl-gs-0".to_owned(), true)]);
    h.answer_servers(out, done);
    // A second region on the same server changes nothing.
    let (_, out) = h.order(create(2));
    assert!(told(&out).is_empty(), "{out:?}");
    h.answer_servers(out, done);
    let delete = |b| control::Request::Revoke {
        leases: vec![LeaseRef { bubble: BubbleId(b), epoch: Epoch(1) }],
    };
    let (_, out) = h.order(delete(1));
    assert!(told(&out).is_empty(), "{out:?}");
    let (_, out) = h.order(delete(2));
    assert_eq!(told(&out), [("mtl-gs-0".to_owned(), false)]);
}

#[test]
fn an_order_waits_for_a_ready_server_and_the_server_is_taken_before_it_answers() {
    // One seat per server: a region placed a moment ago fills it, members or not.
    let mut h = Harness::with_seats(1, 1);
    h.effects();
    let create = |b| control::Request::Create {
        bubble: BubbleId(b),
        region: region(),
        lease: lease(b, 1, 10_000),
    };
    let (first, out) = h.order(create(1));
    assert!(to_servers(&out).is_empty(), "no server yet: the order waits");
    let out = h.server_ready("mtl-gs-0");
    let assign = to_servers(&out);
    assert_eq!(assign.len(), 1);
    assert!(matches!(assign[0], (ref s, server::Request::Assign { .. }) if s == "mtl-gs-0"));
    // While the server has not answered, a second order does not get the same server.
    let (second, out2) = h.order(create(2));
    assert!(to_servers(&out2).is_empty());
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out), [(first, Ok(control::Reply::Done))]);
    // Nothing ready in time: the second is refused at the deadline.
    let out = h.advance(SERVER_WAIT + Duration::from_millis(400));
    assert_eq!(answers(&out), [(second, Err(ErrorCode::NotReady))]);
}

#[test]
fn a_stale_assign_is_refused_and_the_server_is_free_again() {
    let mut h = Harness::new(1);
    h.effects();
    h.server_ready("mtl-gs-0");
    let (token, out) = h.order(control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, 10_000),
    });
    let out = h.answer_servers(out, |_| Ok(server::Reply::Stale { newest: Epoch(3) }));
    assert_eq!(answers(&out), [(token, Err(ErrorCode::StaleEpoch))]);
    assert_eq!(h.m.free_servers(), 1);
    assert!(h.m.bubbles.is_empty());
}
