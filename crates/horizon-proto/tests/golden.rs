//! The wire is frozen: every message kind's bytes are in `tests/golden.txt`. A change here is a
//! protocol change: bump `PROTOCOL_VERSION` (or prove compatibility), then re-bless with
//! `HORIZON_BLESS=1 cargo test -p horizon-proto --test golden`.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::fmt::Write;

use horizon_proto::fixtures::{self, Part};
use horizon_proto::{ChannelId, control, gateway, server, transfer};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden.txt");

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        write!(s, "{b:02x}").unwrap();
        s
    })
}

#[test]
fn every_frame_matches_its_golden_bytes() {
    let fixtures = fixtures::all();
    let rendered: String =
        fixtures.iter().map(|f| format!("{} {}\n", f.name, hex(&f.frame))).collect();
    if std::env::var_os("HORIZON_BLESS").is_some() {
        std::fs::write(GOLDEN, &rendered).unwrap();
    }
    let golden = std::fs::read_to_string(GOLDEN).unwrap();
    let golden: Vec<&str> = golden.lines().collect();
    for (line, fixture) in rendered.lines().zip(&fixtures) {
        assert!(
            golden.contains(&line),
            "the wire bytes of {} changed (or it is new): {line}\nbump the protocol version or \
             re-bless with HORIZON_BLESS=1",
            fixture.name
        );
    }
    assert_eq!(golden.len(), fixtures.len(), "golden.txt has frames no fixture produces");
}

#[test]
fn every_fixture_decodes_and_encodes_back_to_the_same_bytes() {
    for fixture in fixtures::all() {
        let (channel, part) = fixtures::parse_name(&fixture.name).unwrap();
        let again = fixtures::reencode(channel, part, &fixture.frame)
            .unwrap_or_else(|e| panic!("{} does not decode: {e}", fixture.name));
        assert_eq!(again, fixture.frame, "{} does not round-trip", fixture.name);
    }
}

#[test]
fn fixtures_cover_every_message_kind_of_every_channel() {
    let names: BTreeSet<String> = fixtures::all().into_iter().map(|f| f.name).collect();
    let kinds: [(ChannelId, Part, &[&str]); 14] = [
        (ChannelId::Control, Part::Request, control::Request::KINDS),
        (ChannelId::Control, Part::Reply, control::Reply::KINDS),
        (ChannelId::Control, Part::Stream, control::Backup::KINDS),
        (ChannelId::Transfer, Part::Request, transfer::Request::KINDS),
        (ChannelId::Transfer, Part::Reply, transfer::Reply::KINDS),
        (ChannelId::Transfer, Part::Stream, horizon_proto::StateItem::KINDS),
        (ChannelId::Transfer, Part::Datagram, transfer::Probe::KINDS),
        (ChannelId::Server, Part::Request, server::Request::KINDS),
        (ChannelId::Server, Part::Reply, server::Reply::KINDS),
        (ChannelId::Server, Part::Stream, horizon_proto::StateItem::KINDS),
        (ChannelId::Gateway, Part::Request, gateway::Request::KINDS),
        (ChannelId::Gateway, Part::Reply, gateway::Reply::KINDS),
        (ChannelId::Gateway, Part::Stream, gateway::Item::KINDS),
        (ChannelId::Gateway, Part::Datagram, gateway::Datagram::KINDS),
    ];
    for (channel, part, kinds) in kinds {
        for kind in kinds {
            let name = format!("{}.{}.{kind}", channel.as_str(), part.as_str());
            assert!(names.contains(&name), "no fixture for {name}");
        }
    }
    for channel in ChannelId::ALL {
        assert!(names.contains(&format!("{}.hello.hello", channel.as_str())));
    }
}
