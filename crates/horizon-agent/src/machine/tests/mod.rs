//! The agent machine driven directly: orders in, effects out, answers fed back by hand.
//! This file holds the harness and the helpers the tests share; each other file one job's
//! tests.

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
        self.register_homed(Vec::new())
    }

    /// Registers with the core, which lists `homed` as this site's players.
    fn register_homed(&mut self, homed: Vec<control::HomedPlayer>) -> Vec<Effect> {
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
                        homed: homed.clone(),
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

/// Player `player`'s state crossing from bubble 9 into bubble `to` (epoch 1), having applied
/// its inputs up to `last_applied`.
fn crossing(player: u64, to: u64, last_applied: u64) -> transfer::Request {
    transfer::Request::Cross {
        player: PlayerId(player),
        from: BubbleId(9),
        to: BubbleId(to),
        epoch: Epoch(1),
        last_applied: Seq(last_applied),
        state: Blob(vec![4, 0]),
    }
}

/// A member of this site, at the origin, not crossing.
fn member(p: u64) -> control::Member {
    control::Member { player: PlayerId(p), home: n(SITE), pos: Vec3::default(), crossing: false }
}

/// Bubble `b`'s lease under epoch 1.
fn lref(b: u64) -> LeaseRef {
    LeaseRef { bubble: BubbleId(b), epoch: Epoch(1) }
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

mod carve;
mod crossings;
mod drain;
mod fences;
mod joins;
mod lane;
mod leases;
mod pool;
mod rehome;
mod resume;
mod routes;
mod spread;
