//! The agent machine driven directly: orders in, effects out, answers fed back by hand.

use super::*;

const SITE: &str = "MTL";

struct Harness {
    m: AgentMachine,
    now: Instant,
    next_token: Token,
    next_conn: ConnId,
}

fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn lease(bubble: u64, epoch: u64, ttl_ms: u32) -> Lease {
    Lease { bubble: BubbleId(bubble), epoch: Epoch(epoch), ttl_ms }
}

fn region() -> Region {
    Region { world: WorldId(0), bounds: None }
}

fn update(bubble: u64, epoch: u64, tick: u64, acked: &[(u64, u64)]) -> StateItem {
    StateItem::Update(Update {
        bubble: BubbleId(bubble),
        epoch: Epoch(epoch),
        tick: Tick(tick),
        acked: acked.iter().map(|&(p, s)| (PlayerId(p), Seq(s))).collect(),
        bytes: Blob::default(),
    })
}

impl Harness {
    fn new(warm_pool: usize) -> Self {
        Self::with_seats(warm_pool, 60)
    }

    fn with_seats(warm_pool: usize, seats_per_server: u32) -> Self {
        Self::with_limits(warm_pool, seats_per_server, 75)
    }

    fn with_limits(warm_pool: usize, seats_per_server: u32, players_per_server: u32) -> Self {
        let cfg = MachineConfig {
            site: n(SITE),
            advertise_transfer: "127.0.0.1:1".into(),
            peers: BTreeMap::new(),
            warm_pool,
            max_servers: 16,
            seats_per_server,
            players_per_server,
            report_every: Duration::from_secs(1),
            renew_every: Duration::from_secs(2),
            server_tick: Duration::from_millis(33),
            advertise_admin: None,
        };
        let now = tokio::time::Instant::now().into_std();
        let m = AgentMachine::new(cfg, Arc::new(AgentStats::default()), now);
        Harness { m, now, next_token: 0, next_conn: 0 }
    }

    fn effects(&mut self) -> Vec<Effect> {
        std::iter::from_fn(|| self.m.poll_effect()).collect()
    }

    fn feed(&mut self, input: Input) -> Vec<Effect> {
        self.m.handle(input, self.now);
        self.effects()
    }

    fn advance(&mut self, by: Duration) -> Vec<Effect> {
        let end = self.now + by;
        let mut out = Vec::new();
        loop {
            let due = self.m.poll_timeout();
            if due > end {
                break;
            }
            self.now = due.max(self.now);
            self.m.handle_timeout(self.now);
            out.extend(self.effects());
        }
        self.now = end;
        out
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        self.next_token
    }

    /// A game server connects and says it is ready.
    fn server_ready(&mut self, name: &str) -> Vec<Effect> {
        self.next_conn += 1;
        let conn = self.next_conn;
        let mut out = self.feed(Input::ServerUp { server: n(name), conn });
        let token = self.token();
        let request = server::Request::Ready;
        out.extend(self.feed(Input::ServerRequest { server: n(name), conn, token, request }));
        // Its platform agrees at once (a process; a pod whose Ready condition holds).
        if out
            .iter()
            .any(|e| matches!(e, Effect::AskPlatformReady { server } if server.as_str() == name))
        {
            out.extend(self.feed(Input::PlatformReady { server: n(name) }));
        }
        out
    }

    fn order(&mut self, order: control::Request) -> (Token, Vec<Effect>) {
        let token = self.token();
        (token, self.feed(Input::CoreOrder { token, order }))
    }

    /// Registers with the core (which keeps nothing and names no peer).
    fn register(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        for e in self.feed(Input::CoreUp) {
            match e {
                Effect::ToCore { pending, request: control::Request::Register { .. } } => {
                    let reply = control::Reply::Registered {
                        keep: Vec::new(),
                        stop: Vec::new(),
                        peers: Vec::new(),
                        generation: 1,
                        tick_ms: 5000,
                    };
                    out.extend(self.feed(Input::CoreReplied { pending, result: Ok(reply) }));
                }
                other => out.push(other),
            }
        }
        out
    }

    /// Answers every request to a server in `effects` with `reply`; returns the other effects
    /// and those the answers produced.
    fn answer_servers(
        &mut self,
        effects: Vec<Effect>,
        reply: impl Fn(&server::Request) -> Result<server::Reply, Failure>,
    ) -> Vec<Effect> {
        self.answer_servers_seen(effects, reply).1
    }

    /// [`Harness::answer_servers`], also returning every request answered (server, request),
    /// in order.
    fn answer_servers_seen(
        &mut self,
        effects: Vec<Effect>,
        reply: impl Fn(&server::Request) -> Result<server::Reply, Failure>,
    ) -> (Vec<(String, server::Request)>, Vec<Effect>) {
        let mut rest = Vec::new();
        let mut seen = Vec::new();
        let mut queue: VecDeque<Effect> = effects.into();
        while let Some(e) = queue.pop_front() {
            match e {
                Effect::ToServer { server, pending, request } => {
                    let result = reply(&request);
                    seen.push((server.to_string(), request));
                    queue.extend(self.feed(Input::ServerReplied { server, pending, result }));
                }
                other => rest.push(other),
            }
        }
        (seen, rest)
    }
}

/// The core's `Create` of bubble `b` here under epoch 1, with a 10 s lease.
fn create(b: u64) -> control::Request {
    control::Request::Create { bubble: BubbleId(b), region: region(), lease: lease(b, 1, 10_000) }
}

fn done(_: &server::Request) -> Result<server::Reply, Failure> {
    Ok(server::Reply::Done)
}

fn answers(effects: &[Effect]) -> Vec<(Token, Result<control::Reply, ErrorCode>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::AnswerCore { token, result } => {
                Some((*token, result.clone().map_err(|f| f.code)))
            }
            _ => None,
        })
        .collect()
}

fn to_servers(effects: &[Effect]) -> Vec<(String, &server::Request)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ToServer { server, request, .. } => Some((server.to_string(), request)),
            _ => None,
        })
        .collect()
}

fn player_items(effects: &[Effect]) -> Vec<(ConnId, &gateway::Item)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ToPlayer { conn, item } => Some((*conn, item)),
            _ => None,
        })
        .collect()
}

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

/// A machine with one running bubble (id 1, epoch 1) on `mtl-gs-0`, registered.
fn running(ttl_ms: u32) -> Harness {
    let mut h = Harness::new(1);
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    let (_, out) = h.order(control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, ttl_ms),
    });
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out).len(), 1);
    h
}

/// A player of this site joins (id from the core's block) and is routed to bubble 1 here.
fn join_player(h: &mut Harness) -> (PlayerId, ConnId) {
    h.next_conn += 1;
    let conn = h.next_conn;
    h.feed(Input::PlayerUp { conn, client: n(&format!("bot-{conn}")) });
    let token = h.token();
    let request =
        gateway::Request::Join { role: Role::Player, world: WorldId(0), pos: Vec3::default() };
    let out = h.feed(Input::PlayerRequest { conn, token, request, rtt_ms: 20.0 });
    let player = out
        .iter()
        .find_map(|e| match e {
            Effect::AnswerPlayer { result: Ok(gateway::Reply::Joined { player, .. }), .. } => {
                Some(*player)
            }
            _ => None,
        })
        .expect("joined");
    let routes = vec![control::PlayerRoute { player, bubble: BubbleId(1), site: n(SITE) }];
    let (_, _) = h.order(control::Request::Route { routes });
    (player, conn)
}

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

fn with_ids(h: &mut Harness) {
    let out = h.effects();
    let _ = out;
    let pending = Pending(Then::PlayerIds);
    let reply = control::Reply::PlayerIds { first: 100, count: 10 };
    h.feed(Input::CoreReplied { pending, result: Ok(reply) });
}

/// The inputs the effects carry to game servers, as (server, [(player, seq)]) per item.
fn inputs_to_servers(effects: &[Effect]) -> Vec<(String, Vec<(u64, u64)>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ServerStream { server, item: StateItem::Inputs(i) } => {
                Some((server.to_string(), i.inputs.iter().map(|x| (x.player.0, x.seq.0)).collect()))
            }
            _ => None,
        })
        .collect()
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

#[test]
fn a_lease_not_renewed_stops_the_bubble_at_its_end_and_its_players_are_told() {
    let mut h = running(3_000);
    with_ids(&mut h);
    let (_, conn) = join_player(&mut h);
    // Renewals leave but are never answered (the core is cut off).
    let out = h.advance(Duration::from_millis(2_900));
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::ToCore { request: control::Request::Renew { .. }, .. }))
    );
    let lease_lost = |i: &gateway::Item| matches!(i, gateway::Item::Reconnecting { reason } if reason.contains("lost its lease"));
    assert!(!player_items(&out).iter().any(|(_, i)| lease_lost(i)));
    let out = h.advance(Duration::from_millis(400));
    let told: Vec<_> = player_items(&out).into_iter().filter(|(_, i)| lease_lost(i)).collect();
    assert_eq!(told.len(), 1, "told once, at the lease's end");
    assert_eq!(told[0].0, conn);
}

#[test]
fn a_granted_renewal_counts_from_its_send_and_reaches_the_server_with_its_age() {
    let mut h = running(3_000);
    let out = h.advance(Duration::from_millis(2_000));
    let pending = out
        .into_iter()
        .filter_map(|e| match e {
            Effect::ToCore { pending, request: control::Request::Renew { .. } } => Some(pending),
            _ => None,
        })
        .next_back()
        .expect("a renewal at 2 s");
    let sent = h.now;
    h.now += Duration::from_millis(300);
    let reply = control::Reply::Renewed {
        ttl_ms: 3_000,
        granted: vec![LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) }],
        refused: Vec::new(),
    };
    let out = h.feed(Input::CoreReplied { pending, result: Ok(reply) });
    let renew = to_servers(&out);
    assert!(matches!(
        renew[..],
        [(_, server::Request::Renew { sent_ago_ms: 300, ttl_ms: 3_000, .. })]
    ));
    assert_eq!(h.m.bubbles[&BubbleId(1)].valid_until(), sent + Duration::from_millis(3_000));
}

#[test]
fn a_regrant_answers_once_every_server_of_the_bubble_took_the_new_epoch() {
    let mut h = running(10_000);
    let old = LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) };
    let (token, out) = h.order(control::Request::Regrant { old, lease: lease(1, 2, 10_000) });
    assert!(answers(&out).is_empty(), "waits for the server");
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    assert_eq!(h.m.bubbles[&BubbleId(1)].lease().epoch, Epoch(2));
}

#[test]
fn a_game_server_that_exits_is_reported_lost_and_replaced() {
    let mut h = running(10_000);
    let out = h.feed(Input::ServerEnded { server: "mtl-gs-0".into(), why: "signal 9".into() });
    let lost = out.iter().find_map(|e| match e {
        Effect::ToCore { request: control::Request::Lost { leases, .. }, .. } => {
            Some(leases.clone())
        }
        _ => None,
    });
    assert_eq!(lost, Some(vec![LeaseRef { bubble: BubbleId(1), epoch: Epoch(1) }]));
    assert!(out.iter().any(|e| matches!(e, Effect::StopServer { server } if server == "mtl-gs-0")));
    assert!(h.m.bubbles.is_empty());
}

#[test]
fn a_restore_feeds_the_copy_and_answers_at_the_servers_first_update() {
    let mut h = Harness::new(1);
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    let (token, out) = h.order(control::Request::Restore {
        lease: lease(5, 3, 10_000),
        region: region(),
        from: Epoch(2),
        tick: Tick(40),
        copy: Blob(vec![7; 100_000]),
    });
    let out = h.answer_servers(out, done);
    let fed: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ServerStream { item: StateItem::Snapshot(s), .. } => Some(s.index),
            _ => None,
        })
        .collect();
    assert_eq!(fed, [0, 1], "two chunks of 64 KiB");
    assert!(out.iter().any(
        |e| matches!(e, Effect::ServerStream { item: StateItem::Seal(s), .. } if s.tick == Tick(40))
    ));
    assert!(answers(&out).is_empty(), "answered when it runs");
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(5, 3, 41, &[]) });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
}

/// Seed 9013801: an agent cut from the core while the source of a handover registered
/// without that bubble; the core took it as gone and drained it elsewhere while its server
/// still ticked here. Every bubble a server here may still write is held.
#[test]
fn a_registration_holds_the_source_of_a_handover_not_frozen_yet_but_not_a_sealed_one() {
    let mut h = running(10_000);
    let held = |h: &mut Harness| -> Vec<u64> {
        h.feed(Input::CoreUp)
            .into_iter()
            .filter_map(|e| match e {
                Effect::ToCore { request: control::Request::Register { held, .. }, .. } => {
                    Some(held.into_iter().map(|x| x.lease.bubble.0).collect::<Vec<_>>())
                }
                _ => None,
            })
            .flatten()
            .collect()
    };
    assert_eq!(held(&mut h), [1], "running");
    let handover = HandoverId(4);
    h.m.bubbles.get_mut(&BubbleId(1)).unwrap().leaving(handover);
    assert_eq!(held(&mut h), [1], "still simulating until the freeze");
    h.m.bubbles.get_mut(&BubbleId(1)).unwrap().sealed(handover);
    assert!(held(&mut h).is_empty(), "sealed: never runs again");
}

#[test]
fn a_copy_kept_for_players_goes_to_the_bubble_s_server_in_chunks_under_its_epoch() {
    let mut h = running(10_000);
    let lref = |epoch| LeaseRef { bubble: BubbleId(1), epoch: Epoch(epoch) };
    let players = vec![PlayerId(9)];
    let adopt = |epoch| control::Request::Adopt {
        lease: lref(epoch),
        players: players.clone(),
        copy: Blob(vec![3; 100_000]),
    };
    let (token, out) = h.order(adopt(1));
    let fed: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ServerStream { server, item: StateItem::Adopt(a) } => Some((
                server.to_string(),
                a.chunk.index,
                a.chunk.total,
                a.chunk.epoch,
                a.players.clone(),
            )),
            _ => None,
        })
        .collect();
    let chunk = |i| ("mtl-gs-0".to_string(), i, 2, Epoch(1), players.clone());
    assert_eq!(fed, [chunk(0), chunk(1)], "two chunks of 64 KiB to the bubble's server");
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    // Another epoch of the bubble, or a bubble not here: refused, nothing sent.
    for (order, code) in [
        (adopt(2), ErrorCode::StaleEpoch),
        (
            control::Request::Adopt {
                lease: LeaseRef { bubble: BubbleId(8), epoch: Epoch(1) },
                players: vec![],
                copy: Blob(vec![1]),
            },
            ErrorCode::UnknownBubble,
        ),
    ] {
        let (token, out) = h.order(order);
        assert_eq!(answers(&out), [(token, Err(code))]);
        assert!(!out.iter().any(|e| matches!(e, Effect::ServerStream { .. })));
    }
}

#[test]
fn a_restore_from_part_copies_feeds_part_0_then_every_other_part_then_the_seal() {
    let mut h = Harness::new(1);
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    let (token, out) = h.order(control::Request::RestoreParts {
        lease: lease(5, 3, 10_000),
        region: region(),
        from: Epoch(2),
        tick: Tick(40),
        copy: Blob(vec![0; 10]),
        parts: vec![Blob(vec![1; 70_000]), Blob(vec![2; 10])],
    });
    let out = h.answer_servers(out, done);
    let fed: Vec<(&str, u32, u8)> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ServerStream { item: StateItem::Snapshot(s), .. } => {
                Some(("snapshot", s.index, s.bytes.0[0]))
            }
            Effect::ServerStream { item: StateItem::PartSnapshot(s), .. } => {
                Some(("part", s.index, s.bytes.0[0]))
            }
            Effect::ServerStream { item: StateItem::Seal(s), .. } if s.tick == Tick(40) => {
                Some(("seal", 0, 0))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        fed,
        [("snapshot", 0, 0), ("part", 0, 1), ("part", 1, 1), ("part", 0, 2), ("seal", 0, 0)],
        "part 0 as the snapshot, each other part whole in order, then the seal"
    );
    let out = h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(5, 3, 41, &[]) });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
}

#[test]
fn a_restore_whose_server_never_runs_is_refused_at_its_deadline() {
    let mut h = Harness::new(1);
    h.effects();
    h.server_ready("mtl-gs-0");
    let (token, out) = h.order(control::Request::Restore {
        lease: lease(5, 3, 10_000),
        region: region(),
        from: Epoch(2),
        tick: Tick(40),
        copy: Blob(vec![7; 10]),
    });
    h.answer_servers(out, done);
    let out = h.advance(RESTORE_DEADLINE + Duration::from_millis(400));
    assert_eq!(answers(&out), [(token, Err(ErrorCode::NotReady))]);
    assert!(to_servers(&out).iter().any(|(_, r)| matches!(r, server::Request::Release { .. })));
}

/// `h` registered with `mtl-gs-0` and `mtl-gs-1` ready, and bubble 1 (epoch 1, a lease of
/// `ttl_ms`) running on `mtl-gs-0`.
fn one_bubble_two_servers(mut h: Harness, ttl_ms: u32) -> Harness {
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    h.server_ready("mtl-gs-1");
    let (_, out) = h.order(control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, ttl_ms),
    });
    h.answer_servers(out, done);
    h
}

#[test]
fn spreading_a_bubble_takes_a_server_then_moves_each_member_with_its_state() {
    let mut h = one_bubble_two_servers(Harness::new(2), 10_000);
    let lref = lref(1);
    let (_, out) = h.order(control::Request::Members {
        lease: lref,
        players: vec![member(1), member(2)],
        departed: Vec::new(),
    });
    h.answer_servers(out, done);
    let half = |x0: f64, x1: f64| Aabb {
        min: Vec3 { x: x0, y: 0.0, z: 0.0 },
        max: Vec3 { x: x1, y: 1.0, z: 1.0 },
    };
    let (token, out) = h.order(control::Request::Parts {
        lease: lref,
        parts: vec![half(0.0, 1.0), half(1.0, 2.0)],
        players: vec![
            control::PartMember { player: PlayerId(1), part: 0 },
            control::PartMember { player: PlayerId(2), part: 1 },
        ],
    });
    let sent: Vec<String> =
        to_servers(&out).iter().map(|(s, r)| format!("{s}:{}", kind(r))).collect();
    assert_eq!(sent, ["mtl-gs-1:assign"]);
    let out = h.answer_servers(out, |r| match r {
        server::Request::Leave { .. } => {
            Ok(server::Reply::Left { last_applied: Seq(3), state: Blob(vec![9]) })
        }
        _ => Ok(server::Reply::Done),
    });
    assert_eq!(answers(&out), [(token, Ok(control::Reply::Done))]);
    let local = &h.m.bubbles[&BubbleId(1)];
    assert_eq!(local.extra(), [n("mtl-gs-1")]);
    assert_eq!(local.server_of(PlayerId(2)), &n("mtl-gs-1"));
    assert_eq!(local.server_of(PlayerId(1)), &n("mtl-gs-0"));
}

/// A member of this site, at the origin, not crossing.
fn member(p: u64) -> control::Member {
    control::Member { player: PlayerId(p), home: n(SITE), pos: Vec3::default(), crossing: false }
}

/// Bubble `b`'s lease under epoch 1.
fn lref(b: u64) -> LeaseRef {
    LeaseRef { bubble: BubbleId(b), epoch: Epoch(1) }
}

/// Servers of at most 4 players, seating 4: `mtl-gs-0` holds bubbles 1 (players 1 to 3) and 2
/// (players 4 and 5), placed when they were empty; `mtl-gs-1` holds nothing. The core is
/// reachable (a region moves with its state: `rehome.rs`).
fn overfull_server() -> Harness {
    let mut h = Harness::with_limits(1, 4, 4);
    h.effects();
    h.register();
    h.server_ready("mtl-gs-0");
    h.server_ready("mtl-gs-1");
    for b in 1..=2 {
        let (_, out) = h.order(control::Request::Create {
            bubble: BubbleId(b),
            region: region(),
            lease: lease(b, 1, 60_000),
        });
        assert!(
            matches!(to_servers(&out)[..], [(ref s, server::Request::Assign { .. })] if s == "mtl-gs-0")
        );
        h.answer_servers(out, done);
    }
    for (b, players) in [(1, vec![1, 2, 3]), (2, vec![4, 5])] {
        let players = players.into_iter().map(member).collect();
        let (_, out) =
            h.order(control::Request::Members { lease: lref(b), players, departed: Vec::new() });
        h.answer_servers(out, done);
    }
    h
}

/// [`overfull_server`], cut from the core: a region moves players only, by a regroup.
fn overfull_server_without_its_core() -> Harness {
    let mut h = overfull_server();
    h.feed(Input::CoreDown { error: "cut".into() });
    h
}

#[test]
fn an_overfull_server_cut_from_its_core_gives_its_lighter_region_away_with_every_players_state() {
    let mut h = overfull_server_without_its_core();
    // Over its 4 players for less than 10 s: nothing moves.
    let out = h.advance(Duration::from_secs(9));
    assert!(!to_servers(&out).iter().any(|(_, r)| matches!(r, server::Request::Continue { .. })));
    // Past 10 s: the lighter bubble (2, of 2 players) goes to the other server, which counts
    // its ticks on from far past the old server's last update (tick 0 here: none came).
    let out = h.advance(Duration::from_secs(2));
    let sent: Vec<String> = to_servers(&out)
        .iter()
        .filter(|(_, r)| !matches!(r, server::Request::Renew { .. } | server::Request::Copy { .. }))
        .map(|(s, r)| format!("{s}:{}", kind(r)))
        .collect();
    assert_eq!(sent, ["mtl-gs-1:continue"]);
    assert!(to_servers(&out).iter().any(|(_, r)| matches!(
        r,
        server::Request::Continue { tick, .. } if tick.0 == RELOCATE_TICK_GAP
    )));
    // A member list that comes meanwhile waits for the move: player 6 joins where the bubble
    // runs once it moved.
    let players = [4, 5, 6].into_iter().map(member).collect();
    let (_, waiting) =
        h.order(control::Request::Members { lease: lref(2), players, departed: Vec::new() });
    assert!(to_servers(&waiting).is_empty(), "{waiting:?}");
    let (seen, _) = h.answer_servers_seen(out, |r| match r {
        server::Request::Leave { player, .. } => {
            Ok(server::Reply::Left { last_applied: Seq(7), state: Blob(vec![player.0 as u8]) })
        }
        _ => Ok(server::Reply::Done),
    });
    let mut sent: Vec<String> = Vec::new();
    let mut joined = Vec::new();
    for (s, r) in &seen {
        sent.push(format!("{s}:{}", kind(r)));
        if let server::Request::Join { player, last_applied, state, .. } = r {
            joined.push((s.clone(), player.0, last_applied.0, state.0.clone()));
        }
    }
    // 4 and 5 left with their state and joined with it; the old server let the region go; the
    // new one got the lease as it stands and its box; then 6 joined afresh on the new server.
    assert_eq!(
        joined,
        [
            ("mtl-gs-1".to_owned(), 4, 7, vec![4]),
            ("mtl-gs-1".to_owned(), 5, 7, vec![5]),
            ("mtl-gs-1".to_owned(), 6, 0, vec![]),
        ]
    );
    assert!(sent.contains(&"mtl-gs-0:release".to_owned()), "{sent:?}");
    assert!(sent.contains(&"mtl-gs-1:resize".to_owned()), "{sent:?}");
    assert!(seen.iter().any(|(s, r)| s == "mtl-gs-1"
        && matches!(r, server::Request::Renew { leases, .. } if leases == &[lref(2)])));
    let local = &h.m.bubbles[&BubbleId(2)];
    assert_eq!(local.server(), &n("mtl-gs-1"));
    assert!(local.holder().is_empty() && local.extra().is_empty());
    assert_eq!(h.m.bubbles[&BubbleId(1)].server(), &n("mtl-gs-0"), "the heavier stays");
    assert_eq!(h.m.fleet.get(&n("mtl-gs-0")).unwrap().regions(), [BubbleId(1)]);
    assert_eq!(h.m.stats.regions_moved.load(Ordering::Relaxed), 1);
    // Within its settle window, and then under its 4 players, the server gives nothing more.
    let out = h.advance(Duration::from_secs(30));
    assert!(!to_servers(&out).iter().any(|(_, r)| matches!(r, server::Request::Continue { .. })));
}

#[test]
fn a_move_the_new_server_refuses_is_given_up_and_the_member_list_that_waited_applies() {
    let mut h = overfull_server_without_its_core();
    let out = h.advance(Duration::from_secs(11));
    assert!(to_servers(&out).iter().any(|(s, r)| s == "mtl-gs-1" && kind(r) == "continue"));
    // A member list waits for the move...
    let players = [4, 5, 6].into_iter().map(member).collect();
    let (_, waiting) =
        h.order(control::Request::Members { lease: lref(2), players, departed: Vec::new() });
    assert!(to_servers(&waiting).is_empty());
    // ... which the new server refuses: the bubble stays, and player 6 joins it where it runs.
    let (seen, _) = h.answer_servers_seen(out, |r| match r {
        server::Request::Continue { .. } => {
            Err(Failure::Refused(Fault::new(ErrorCode::NotReady, "refused")))
        }
        _ => Ok(server::Reply::Done),
    });
    let joined: Vec<(String, u64)> = seen
        .iter()
        .filter_map(|(s, r)| match r {
            server::Request::Join { player, .. } => Some((s.clone(), player.0)),
            _ => None,
        })
        .collect();
    assert_eq!(joined, [("mtl-gs-0".to_owned(), 6)]);
    assert_eq!(h.m.bubbles[&BubbleId(2)].server(), &n("mtl-gs-0"));
    assert!(h.m.regroups.is_empty());
    assert_eq!(h.m.stats.regions_moved.load(Ordering::Relaxed), 0);
}

#[test]
fn a_server_with_one_region_over_its_players_keeps_it_for_the_brain_to_cut() {
    let mut h = one_bubble_two_servers(Harness::with_limits(1, 4, 4), 60_000);
    let players = (1..=9).map(member).collect();
    let (_, out) =
        h.order(control::Request::Members { lease: lref(1), players, departed: Vec::new() });
    h.answer_servers(out, done);
    let out = h.advance(Duration::from_secs(30));
    assert!(!to_servers(&out).iter().any(|(_, r)| matches!(
        r,
        server::Request::Assign { .. } | server::Request::Continue { .. }
    )));
    assert_eq!(h.m.stats.regions_moved.load(Ordering::Relaxed), 0);
}

fn kind(r: &server::Request) -> &'static str {
    match r {
        server::Request::Assign { .. } => "assign",
        server::Request::Continue { .. } => "continue",
        server::Request::Leave { .. } => "leave",
        server::Request::Join { .. } => "join",
        server::Request::Release { .. } => "release",
        server::Request::Resize { .. } => "resize",
        _ => "other",
    }
}

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

mod carve;
mod crossings;
mod lane;
mod rehome;
mod routes;
