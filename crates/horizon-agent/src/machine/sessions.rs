//! Who is behind each gateway connection (the player it joined as, the client it said it is),
//! and the blocks of player ids the core handed this agent: two parts of the agent machine that
//! own their state. `players.rs` decides with them; nothing else touches their maps.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use horizon_proto::PlayerId;

use super::{Client, ConnId};

/// The gateway's connections: each one's client (from its hello) and player (once joined), and
/// the player each client joined as, so that a reconnecting client resumes it.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    player_of_conn: BTreeMap<ConnId, PlayerId>,
    player_of_client: BTreeMap<Client, PlayerId>,
    client_of_conn: BTreeMap<ConnId, Client>,
    /// The core told this agent (at its first registration since it started) which players
    /// entered at this site: until then, a `Resume` cannot be judged.
    homed_known: bool,
}

impl Sessions {
    /// Whether this agent learnt its site's players from the core since it started.
    pub(super) fn homed_known(&self) -> bool {
        self.homed_known
    }

    /// The core's list of this site's players arrived: `true` the first time (the agent takes
    /// them), `false` after (it knew its players already).
    pub(super) fn learn_homed(&mut self) -> bool {
        !std::mem::replace(&mut self.homed_known, true)
    }

    /// A connection said hello as `client`.
    pub(super) fn connected(&mut self, conn: ConnId, client: Client) {
        self.client_of_conn.insert(conn, client);
    }

    /// The player joined on `conn`, if any.
    pub(super) fn player(&self, conn: ConnId) -> Option<PlayerId> {
        self.player_of_conn.get(&conn).copied()
    }

    /// The client `conn` said it is, if it said.
    pub(super) fn client(&self, conn: ConnId) -> Option<Client> {
        self.client_of_conn.get(&conn).cloned()
    }

    /// The player `client` joined as before, if any: it resumes.
    pub(super) fn player_of(&self, client: &Client) -> Option<PlayerId> {
        self.player_of_client.get(client).copied()
    }

    /// `player` joined (or resumed) on `conn`; a connection it had before no longer speaks
    /// for it.
    pub(super) fn joined(&mut self, conn: ConnId, player: PlayerId, client: Option<Client>) {
        self.player_of_conn.retain(|_, p| *p != player);
        self.player_of_conn.insert(conn, player);
        if let Some(client) = client {
            self.player_of_client.insert(client, player);
        }
    }

    /// The player on `conn` asked to leave: the connection no longer speaks for it.
    pub(super) fn left(&mut self, conn: ConnId) -> Option<PlayerId> {
        self.player_of_conn.remove(&conn)
    }

    /// `conn` ended: its player, if one had joined on it.
    pub(super) fn ended(&mut self, conn: ConnId) -> Option<PlayerId> {
        self.client_of_conn.remove(&conn);
        self.player_of_conn.remove(&conn)
    }

    /// `player` is gone for good: no connection or client resumes it.
    pub(super) fn forget(&mut self, player: PlayerId) {
        self.player_of_client.retain(|_, p| *p != player);
        self.player_of_conn.retain(|_, p| *p != player);
    }
}

/// The player ids the core handed this agent and it has not given yet, oldest block first, and
/// whether a `PlayerIds` request is on its way.
#[derive(Debug, Default)]
pub(super) struct PlayerIds {
    blocks: VecDeque<Range<u64>>,
    asking: bool,
}

impl PlayerIds {
    /// The next id to give, if any is left.
    pub(super) fn next(&mut self) -> Option<PlayerId> {
        loop {
            let block = self.blocks.front_mut()?;
            match block.next() {
                Some(id) => return Some(PlayerId(id)),
                None => {
                    self.blocks.pop_front();
                }
            }
        }
    }

    /// Whether to ask the core for another block now: fewer than `low` are left and none is on
    /// its way. Saying yes counts the request as sent.
    pub(super) fn ask(&mut self, low: u64) -> bool {
        let left: u64 = self.blocks.iter().map(|r| r.end - r.start).sum();
        if left >= low || self.asking {
            return false;
        }
        self.asking = true;
        true
    }

    /// The core answered the request: `block`, or nothing (it failed; asked again later).
    pub(super) fn answered(&mut self, block: Option<Range<u64>>) {
        self.asking = false;
        self.blocks.extend(block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(name: &str) -> Client {
        Client::new(name).expect("a name")
    }

    #[test]
    fn a_client_that_reconnects_resumes_its_player_and_its_old_connection_speaks_for_nobody() {
        let mut s = Sessions::default();
        s.connected(1, client("phone"));
        assert_eq!(s.player(1), None);
        s.joined(1, PlayerId(7), s.client(1));
        assert_eq!(s.player(1), Some(PlayerId(7)));
        // A blip: the same client on a new connection, before the old one is seen ending.
        s.connected(2, client("phone"));
        let known = s.client(2).and_then(|c| s.player_of(&c));
        assert_eq!(known, Some(PlayerId(7)));
        s.joined(2, PlayerId(7), None);
        assert_eq!((s.player(1), s.player(2)), (None, Some(PlayerId(7))));
        assert_eq!(s.ended(1), None, "the old connection ends and takes nobody with it");
        s.forget(PlayerId(7));
        assert_eq!(s.player(2), None);
        assert_eq!(s.player_of(&client("phone")), None);
    }

    #[test]
    fn ids_are_given_in_order_across_blocks_and_asked_for_once_when_few_are_left() {
        let mut ids = PlayerIds::default();
        assert_eq!(ids.next(), None, "no block yet");
        assert!(ids.ask(2));
        assert!(!ids.ask(2), "one request at a time");
        ids.answered(Some(10..12));
        assert!(!ids.ask(2), "two left");
        assert_eq!(ids.next(), Some(PlayerId(10)));
        assert!(ids.ask(2), "one left");
        ids.answered(None);
        assert!(ids.ask(2), "a failed request is asked again");
        ids.answered(Some(20..21));
        assert_eq!(
            [ids.next(), ids.next(), ids.next()],
            [Some(PlayerId(11)), Some(PlayerId(20)), None]
        );
    }
}
