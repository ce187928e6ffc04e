//! One sample of every message kind, framed exactly as on the wire. The golden test compares
//! them with `tests/golden.txt`, the fuzz target starts from them, and `docs/protocol.md`
//! quotes them.

use serde::Serialize;

use crate::channel::{Channel, Hello, Message, ReplyFrame, RequestFrame, Welcome};
use crate::error::{ErrorCode, Fault};
use crate::frame::{ChannelId, MAX_DATAGRAM_BYTES, MAX_FRAME_BYTES, PROTOCOL_VERSION, to_frame};
use crate::state::{Adopt, Delta, Input, Inputs, Own, Relayed, Seal, Snapshot, StateItem, Update};
use crate::types::{
    Aabb, Blob, BubbleId, Epoch, HandoverId, Lease, LeaseRef, Name, PlayerId, Region, RequestId,
    Role, Seq, Tick, Vec3, WorldId,
};
use crate::{control, gateway, server, transfer};

/// A resumption credential as a gateway signs one (docs/security.md).
const RESUME: &str =
    "hz1.resume.MTL:5:alice.1893456000.k1.bWFjLW9mLXRoZS1ib2R5LXNpZ25lZC13aXRoLWsx";

/// A named frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixture {
    /// `channel.part.kind`, e.g. `control.request.register`.
    pub name: String,
    pub frame: Vec<u8>,
}

/// Which part of a channel a frame belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Hello,
    Welcome,
    Request,
    Reply,
    Stream,
    Datagram,
}

impl Part {
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Hello => "hello",
            Part::Welcome => "welcome",
            Part::Request => "request",
            Part::Reply => "reply",
            Part::Stream => "stream",
            Part::Datagram => "datagram",
        }
    }
}

struct Builder {
    out: Vec<Fixture>,
}

impl Builder {
    fn push<M: Serialize>(&mut self, channel: ChannelId, part: Part, kind: &str, message: &M) {
        let max = if part == Part::Datagram { MAX_DATAGRAM_BYTES } else { MAX_FRAME_BYTES };
        // Samples are small, fixed values: they always encode.
        #[allow(clippy::expect_used)]
        let frame = to_frame(message, PROTOCOL_VERSION, channel, max).expect("fixture encodes");
        self.out.push(Fixture {
            name: format!("{}.{}.{kind}", channel.as_str(), part.as_str()),
            frame,
        });
    }

    fn channel<C: Channel>(
        &mut self,
        requests: Vec<C::Request>,
        replies: Vec<C::Reply>,
        stream: Vec<C::Stream>,
        datagrams: Vec<C::Datagram>,
    ) {
        for (n, body) in requests.into_iter().enumerate() {
            let kind = body.kind();
            self.push(
                C::ID,
                Part::Request,
                kind,
                &RequestFrame { id: RequestId(n as u64 + 1), body },
            );
        }
        for (n, reply) in replies.into_iter().enumerate() {
            let kind = reply.kind();
            let frame = ReplyFrame { id: RequestId(n as u64 + 1), result: Ok::<_, Fault>(reply) };
            self.push(C::ID, Part::Reply, kind, &frame);
        }
        let fault = ReplyFrame::<C::Reply> {
            id: RequestId(99),
            result: Err(Fault::new(
                ErrorCode::StaleEpoch,
                "epoch 4294967298 is older than 4294967299",
            )),
        };
        self.push(C::ID, Part::Reply, "fault", &fault);
        for item in stream {
            self.push(C::ID, Part::Stream, item.kind(), &item);
        }
        for datagram in datagrams {
            self.push(C::ID, Part::Datagram, datagram.kind(), &datagram);
        }
    }
}

fn name(s: &str) -> Name {
    // Sample names are short literals.
    #[allow(clippy::expect_used)]
    Name::new(s).expect("short name")
}

/// Every fixture, in a stable order.
pub fn all() -> Vec<Fixture> {
    let mut b = Builder { out: Vec::new() };
    let bubble = BubbleId(42);
    let epoch = Epoch((3 << 32) | 7);
    let lease = Lease { bubble, epoch, ttl_ms: 30_000 };
    let lref = LeaseRef { bubble, epoch };
    let pos = Vec3 { x: 1500.0, y: -20.5, z: 3.25 };
    let vel = Vec3 { x: 0.0, y: 0.0, z: 120.0 };
    let position = server::PlayerPosition { player: PlayerId(4097), pos, vel };
    let probes = vec![
        gateway::SiteProbe { site: name("PAR"), sent: 10, answered: 10, median_us: 12_480 },
        gateway::SiteProbe { site: name("HKG"), sent: 10, answered: 0, median_us: 0 },
    ];
    let region = Region {
        world: WorldId(1),
        bounds: Some(Aabb { min: Vec3 { x: -100.0, y: -100.0, z: -100.0 }, max: pos }),
    };
    let handover = HandoverId(9);
    let blob = Blob(vec![0xde, 0xad, 0xbe, 0xef]);
    let snapshot =
        Snapshot { bubble, epoch, tick: Tick(1000), index: 0, total: 2, bytes: blob.clone() };
    let delta = Delta { bubble, epoch, tick: Tick(1001), bytes: blob.clone() };
    let seal = Seal {
        bubble,
        epoch,
        tick: Tick(1002),
        final_delta: blob.clone(),
        last_applied: vec![(PlayerId(5), Seq(77))],
    };
    let inputs = Inputs {
        bubble,
        inputs: vec![Input { player: PlayerId(5), seq: Seq(78), bytes: blob.clone() }],
    };
    let update = Update {
        bubble,
        epoch,
        tick: Tick(1003),
        acked: vec![(PlayerId(5), Seq(78))],
        bytes: blob.clone(),
    };
    let own = Own {
        bubble,
        epoch,
        tick: Tick(1003),
        player: PlayerId(5),
        seq: Seq(79),
        bytes: blob.clone(),
    };

    for channel in ChannelId::ALL {
        let hello = Hello {
            min_version: 1,
            max_version: PROTOCOL_VERSION,
            peer: name("MTL"),
            token: (channel == ChannelId::Server).then(|| "s3cret".to_owned()),
            session: 0x1234_5678,
        };
        b.push(channel, Part::Hello, "hello", &hello);
    }
    let welcome = Welcome::Accepted { version: 1, peer: name("PAR"), session: 0x9abc };
    b.push(ChannelId::Control, Part::Welcome, "accepted", &welcome);
    let refused =
        Welcome::Refused(Fault::new(ErrorCode::VersionMismatch, "we speak 1..=1, you 2..=3"));
    b.push(ChannelId::Control, Part::Welcome, "refused", &refused);

    let server_load = control::ServerLoad {
        server: name("mtl-gs-0"),
        tps: 60.0,
        players: 12,
        chunks_loading: 0,
        ready: false,
        bubbles: vec![bubble],
    };
    b.channel::<control::Control>(
        vec![
            control::Request::Register {
                site: name("MTL"),
                build: name("0.1.0"),
                transfer_addr: "10.0.1.2:7401".to_owned(),
                servers: vec![server_load.clone()],
                held: vec![control::Held { lease: lref, tick: Tick(1000) }],
            },
            control::Request::Report {
                joins: vec![control::PlayerSample {
                    player: PlayerId(5),
                    access_rtt_ms: 9.5,
                    role: Role::Pilot,
                    world: WorldId(1),
                    pos,
                    vel,
                }],
                leaves: vec![PlayerId(6)],
                players: vec![control::PlayerSample {
                    player: PlayerId(5),
                    access_rtt_ms: 10.0,
                    role: Role::Afk,
                    world: WorldId(1),
                    pos,
                    vel,
                }],
                backbone: vec![
                    control::BackboneSample { site: name("PAR"), rtt_ms: Some(85.2), loss: 0.0 },
                    control::BackboneSample { site: name("HKG"), rtt_ms: None, loss: 1.0 },
                ],
                servers: vec![server_load],
            },
            control::Request::Renew { leases: vec![lref] },
            control::Request::Started { handover, bubble, epoch, tick: Tick(1003) },
            control::Request::Failed { handover, reason: "target not ready in 2000 ms".to_owned() },
            control::Request::Create { bubble, region, lease },
            control::Request::Resize {
                lease: lref,
                region: Region { world: WorldId(2), bounds: None },
            },
            control::Request::Prepare {
                handover,
                bubble,
                source: name("PAR"),
                target: name("MTL"),
                target_addr: "10.0.1.2:7401".to_owned(),
                lease,
                deadline_ms: 2000,
            },
            control::Request::Freeze { handover },
            control::Request::Commit { handover },
            control::Request::Abort { handover, reason: "hysteresis hold".to_owned() },
            control::Request::Revoke { leases: vec![lref] },
            control::Request::Members {
                lease: lref,
                players: vec![control::Member {
                    player: PlayerId(5),
                    home: name("MTL"),
                    pos,
                    crossing: true,
                }],
                departed: vec![control::Departure {
                    player: PlayerId(6),
                    to: LeaseRef { bubble: BubbleId(43), epoch },
                    site: name("PAR"),
                }],
            },
            control::Request::Route {
                routes: vec![control::PlayerRoute {
                    player: PlayerId(5),
                    bubble,
                    site: name("MTL"),
                }],
            },
            control::Request::Peers {
                peers: vec![control::Peer {
                    site: name("HKG"),
                    transfer_addr: "10.0.2.2:7401".to_owned(),
                }],
            },
            control::Request::Regrant { old: lref, lease },
            control::Request::Parts {
                lease: lref,
                parts: vec![
                    Aabb {
                        min: Vec3 { x: 0.0, y: -50.0, z: -50.0 },
                        max: Vec3 { x: 300.0, y: 50.0, z: 50.0 },
                    },
                    Aabb {
                        min: Vec3 { x: 300.0, y: -50.0, z: -50.0 },
                        max: Vec3 { x: 900.0, y: 50.0, z: 50.0 },
                    },
                ],
                players: vec![control::PartMember { player: PlayerId(5), part: 1 }],
            },
            control::Request::Lost { leases: vec![lref], reason: "server exited".to_owned() },
            control::Request::Restore {
                lease,
                region,
                from: Epoch((3 << 32) | 6),
                tick: Tick(1000),
                copy: blob.clone(),
            },
            control::Request::Covered {
                players: vec![control::CoveredInput { player: PlayerId(5), seq: Seq(77) }],
            },
            control::Request::Players {
                players: vec![control::PlacedPlayer {
                    sample: control::PlayerSample {
                        player: PlayerId(5),
                        access_rtt_ms: 9.5,
                        role: Role::Player,
                        world: WorldId(1),
                        pos,
                        vel,
                    },
                    bubble: Some(bubble),
                }],
            },
            control::Request::PlayerIds { count: 4096 },
            control::Request::Admin { addr: "agent-mtl.example.net:7414".into() },
            control::Request::RestoreParts {
                lease,
                region,
                from: Epoch((3 << 32) | 6),
                tick: Tick(1000),
                copy: blob.clone(),
                parts: vec![blob.clone()],
            },
            control::Request::Recover {
                routes: vec![control::PlayerRoute {
                    player: PlayerId(4097),
                    bubble: BubbleId(7),
                    site: name("HKG"),
                }],
            },
            control::Request::Adopt {
                lease: lref,
                players: vec![PlayerId(4097)],
                copy: blob.clone(),
            },
            control::Request::Positions {
                regions: vec![control::RegionPositions { lease: lref, players: vec![position] }],
            },
            control::Request::InOrder {
                lane: 0x5eed,
                seq: 2,
                order: Box::new(control::Request::Revoke { leases: vec![lref] }),
            },
            control::Request::Measured {
                players: vec![control::MeasuredPlayer {
                    player: PlayerId(5),
                    access_rtt_ms: 12.5,
                    probes: probes.clone(),
                }],
            },
            control::Request::Pool { warm: 2, max: 64 },
            control::Request::Links {
                links: vec![
                    control::LinkState { a: name("PAR"), b: name("MTL"), rtt_ms: None },
                    control::LinkState { a: name("MTL"), b: name("HKG"), rtt_ms: Some(190.5) },
                ],
            },
            control::Request::Rehome { lease: lref },
            control::Request::Carve { lease: lref, holes: region.bounds.into_iter().collect() },
        ],
        vec![
            control::Reply::Done,
            control::Reply::Registered {
                generation: 3,
                tick_ms: 5000,
                keep: vec![lease],
                stop: vec![LeaseRef { bubble: BubbleId(41), epoch: Epoch(3 << 32) }],
                peers: vec![control::Peer {
                    site: name("HKG"),
                    transfer_addr: "10.0.2.2:7401".to_owned(),
                }],
                homed: vec![control::HomedPlayer {
                    sample: control::PlayerSample {
                        player: PlayerId(5),
                        access_rtt_ms: 21.5,
                        role: Role::Pilot,
                        world: WorldId(1),
                        pos,
                        vel,
                    },
                    route: Some((BubbleId(41), name("MTL"))),
                    covered: Seq(77),
                }],
            },
            control::Reply::Renewed { ttl_ms: 30_000, granted: vec![lref], refused: vec![] },
            control::Reply::Prepared { handover },
            control::Reply::Frozen { handover, tick: Tick(1002) },
            control::Reply::PlayerIds { first: 1 << 20, count: 4096 },
        ],
        vec![
            control::Backup::Chunk {
                lease: lref,
                tick: Tick(1000),
                index: 0,
                total: 1,
                bytes: blob.clone(),
            },
            control::Backup::Part {
                lease: lref,
                part: 1,
                parts: 2,
                tick: Tick(1000),
                index: 0,
                total: 1,
                bytes: blob.clone(),
            },
            control::Backup::Covers {
                lease: lref,
                tick: Tick(1000),
                acked: vec![(PlayerId(5), Seq(77))],
            },
        ],
        vec![],
    );

    b.channel::<transfer::Transfer>(
        vec![
            transfer::Request::Open { handover, bubble, epoch: Epoch(epoch.0 + 1) },
            transfer::Request::Cross {
                player: PlayerId(5),
                from: bubble,
                to: BubbleId(43),
                epoch,
                last_applied: Seq(77),
                state: blob.clone(),
            },
            transfer::Request::Relay {
                from: name("PAR"),
                to: name("MTL"),
                hops: 1,
                request: Box::new(transfer::Request::Cross {
                    player: PlayerId(5),
                    from: bubble,
                    to: BubbleId(43),
                    epoch,
                    last_applied: Seq(77),
                    state: blob.clone(),
                }),
            },
        ],
        vec![transfer::Reply::Done, transfer::Reply::Accepted { from_tick: Tick(0) }],
        vec![
            StateItem::Snapshot(snapshot.clone()),
            StateItem::Delta(delta.clone()),
            StateItem::Seal(seal.clone()),
            StateItem::Inputs(inputs.clone()),
            StateItem::Update(update.clone()),
            StateItem::PartSnapshot(snapshot.clone()),
            StateItem::Adopt(Adopt { chunk: snapshot.clone(), players: vec![PlayerId(5)] }),
            StateItem::Own(own.clone()),
            StateItem::Relay(Box::new(Relayed {
                from: name("MTL"),
                to: name("PAR"),
                hops: 1,
                item: StateItem::Own(own.clone()),
            })),
        ],
        vec![
            transfer::Probe::Ping { seq: 1, sent_us: 1_000_000 },
            transfer::Probe::Echo { seq: 1, sent_us: 1_000_000 },
        ],
    );

    b.channel::<server::Server>(
        vec![
            server::Request::Register {
                server: name("mtl-gs-0"),
                build: name("godot-3.2.3"),
                max_players: 200,
            },
            server::Request::Ready,
            server::Request::Load { tps: 59.5, players: 12, chunks_loading: 1 },
            server::Request::Assign { lease, region, from_snapshot: true },
            server::Request::Renew { leases: vec![lref], ttl_ms: 30_000, sent_ago_ms: 3 },
            server::Request::Resize { lease: lref, region },
            server::Request::Freeze { lease: lref },
            server::Request::Release { lease: lref },
            server::Request::Join {
                lease: lref,
                player: PlayerId(5),
                last_applied: Seq(0),
                state: Blob::default(),
            },
            server::Request::Leave { lease: lref, player: PlayerId(5) },
            server::Request::Copy { lease: lref, deltas: true },
            server::Request::Regrant { old: lref, lease },
            server::Request::Positions { lease: lref, players: vec![position] },
            server::Request::Continue { lease, region, tick: Tick(100_123) },
            server::Request::Carve { lease: lref, holes: region.bounds.into_iter().collect() },
            server::Request::Drain,
        ],
        vec![
            server::Reply::Done,
            server::Reply::Registered { load_every_ms: 1000 },
            server::Reply::Frozen { tick: Tick(1002) },
            server::Reply::Left { last_applied: Seq(77), state: blob.clone() },
            server::Reply::Stale { newest: Epoch(epoch.0 + 1) },
            server::Reply::Released { bubble, tick: Tick(1002) },
        ],
        vec![
            StateItem::Snapshot(snapshot.clone()),
            StateItem::Delta(delta),
            StateItem::Seal(seal),
            StateItem::Inputs(inputs),
            StateItem::Update(update),
            StateItem::PartSnapshot(snapshot.clone()),
            StateItem::Adopt(Adopt { chunk: snapshot, players: vec![PlayerId(5)] }),
            StateItem::Own(own.clone()),
            // Never sent to a server (agent ↔ agent only); the channel's type carries it.
            StateItem::Relay(Box::new(Relayed {
                from: name("MTL"),
                to: name("PAR"),
                hops: 1,
                item: StateItem::Own(own),
            })),
        ],
        vec![],
    );

    b.channel::<gateway::Gateway>(
        vec![
            gateway::Request::Join { role: Role::Player, world: WorldId(1), pos },
            gateway::Request::SetRole { role: Role::Pilot },
            gateway::Request::Leave,
            gateway::Request::JoinMeasured { role: Role::Player, world: WorldId(1), pos, probes },
            gateway::Request::Resume { credential: RESUME.to_owned() },
            gateway::Request::Credential,
        ],
        vec![
            gateway::Reply::Done,
            gateway::Reply::Joined {
                player: PlayerId(5),
                home: name("MTL"),
                resume_after: Seq(1),
                resume: RESUME.to_owned(),
            },
            gateway::Reply::Credential { player: PlayerId(5), resume: RESUME.to_owned() },
        ],
        vec![
            gateway::Item::Input { seq: Seq(78), bytes: blob.clone() },
            gateway::Item::Update { bubble, tick: Tick(1003), acked: Seq(78), bytes: blob.clone() },
            gateway::Item::Reconnecting { reason: "site lost the core".to_owned() },
            gateway::Item::Own { bubble, tick: Tick(1003), seq: Seq(79), bytes: blob },
        ],
        vec![
            gateway::Datagram::Position { seq: 3, world: WorldId(1), pos, vel },
            gateway::Datagram::Ping { nonce: 7, sent_us: 5_000 },
            gateway::Datagram::Pong { nonce: 7, sent_us: 5_000 },
        ],
    );
    b.out
}

/// Decodes `frame` as the `part` of `channel` and encodes it again: equal bytes mean the frame
/// round-trips. Used by the golden test and the fuzz target (which only needs "no panic").
pub fn reencode(
    channel: ChannelId,
    part: Part,
    frame: &[u8],
) -> Result<Vec<u8>, crate::DecodeError> {
    match channel {
        ChannelId::Control => reencode_in::<control::Control>(part, frame),
        ChannelId::Transfer => reencode_in::<transfer::Transfer>(part, frame),
        ChannelId::Server => reencode_in::<server::Server>(part, frame),
        ChannelId::Gateway => reencode_in::<gateway::Gateway>(part, frame),
    }
}

fn reencode_in<C: Channel>(part: Part, frame: &[u8]) -> Result<Vec<u8>, crate::DecodeError> {
    use crate::frame::{MAX_HELLO_BYTES, decode, decode_any_version};
    fn again<M: Serialize>(m: &M, channel: ChannelId, max: usize) -> Vec<u8> {
        // A decoded message is within the limit it was decoded under, so it re-encodes.
        #[allow(clippy::expect_used)]
        to_frame(m, PROTOCOL_VERSION, channel, max).expect("decoded message re-encodes")
    }
    let (v, id) = (PROTOCOL_VERSION, C::ID);
    Ok(match part {
        Part::Hello => {
            let hello: Hello = decode_any_version(frame, id, MAX_HELLO_BYTES)?;
            again(&hello, id, MAX_HELLO_BYTES)
        }
        Part::Welcome => {
            again(&decode::<Welcome>(frame, v, id, MAX_HELLO_BYTES)?, id, MAX_HELLO_BYTES)
        }
        Part::Request => {
            let m: RequestFrame<C::Request> = decode(frame, v, id, MAX_FRAME_BYTES)?;
            again(&m, id, MAX_FRAME_BYTES)
        }
        Part::Reply => {
            let m: ReplyFrame<C::Reply> = decode(frame, v, id, MAX_FRAME_BYTES)?;
            again(&m, id, MAX_FRAME_BYTES)
        }
        Part::Stream => {
            again(&decode::<C::Stream>(frame, v, id, MAX_FRAME_BYTES)?, id, MAX_FRAME_BYTES)
        }
        Part::Datagram => {
            again(&decode::<C::Datagram>(frame, v, id, MAX_DATAGRAM_BYTES)?, id, MAX_DATAGRAM_BYTES)
        }
    })
}

/// Every part, for loops over all decoders.
pub const PARTS: [Part; 6] =
    [Part::Hello, Part::Welcome, Part::Request, Part::Reply, Part::Stream, Part::Datagram];

/// The channel and part a fixture name starts with.
pub fn parse_name(name: &str) -> Option<(ChannelId, Part)> {
    let (channel, rest) = name.split_once('.')?;
    let (part, _kind) = rest.split_once('.')?;
    let channel = ChannelId::ALL.into_iter().find(|c| c.as_str() == channel)?;
    let part = PARTS.into_iter().find(|p| p.as_str() == part)?;
    Some((channel, part))
}
