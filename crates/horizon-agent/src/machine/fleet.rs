//! This site's game servers as the agent knows them: the ones being started, and for each
//! connected one its connection, whether it is ready (its `Ready` held until the platform
//! agrees), its last reported load, the regions it holds, and its idle and overfull clocks.
//!
//! Only this file changes a server. Whether a server *holds* a region is kept here, from the
//! server's side; which server a bubble's members are on is the bubble's own (`Local`), and
//! the machine keeps the two in step by giving and releasing through [`Fleet::give`] and
//! [`Fleet::release`]. What a server's players weigh (members per server) needs the bubbles,
//! so the seat counting stays in `bubbles.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use horizon_proto::{BubbleId, Name};
use std::time::Instant;

use super::{ConnId, Token};

/// A connected game server.
#[derive(Debug)]
pub(super) struct GameServer {
    conn: ConnId,
    ready: bool,
    /// Its `Ready`, held until its platform agrees (a pod's Ready condition).
    platform_wait: Option<Token>,
    tps: f32,
    players: u32,
    regions: Vec<BubbleId>,
    /// Ready and holding nothing since (seen at housekeeping); `None` while it holds a region.
    idle_since: Option<Instant>,
    /// Simulating more than it should with several regions since (seen at housekeeping).
    over_since: Option<Instant>,
    /// It gave regions away at this time.
    relieved_at: Option<Instant>,
    /// It said it is stopping (`Drain`): it takes no region, and gives away those it holds.
    draining: bool,
}

impl GameServer {
    /// It said `Ready` and its platform agrees: it takes regions.
    pub(super) fn ready(&self) -> bool {
        self.ready
    }

    /// The connection it registered on (the machine asks [`Fleet::on`]).
    #[cfg(test)]
    pub(super) fn conn(&self) -> ConnId {
        self.conn
    }

    /// The regions it holds (a bubble's part, a whole bubble or a zone), in the order given.
    pub(super) fn regions(&self) -> &[BubbleId] {
        &self.regions
    }

    pub(super) fn holds(&self, bubble: BubbleId) -> bool {
        self.regions.contains(&bubble)
    }

    /// It is stopping: its regions move to other servers of the site.
    pub(super) fn draining(&self) -> bool {
        self.draining
    }

    /// Its last `Load`: ticks per second and players it simulates.
    pub(super) fn load(&self) -> (f32, u32) {
        (self.tps, self.players)
    }
}

/// What [`Fleet::hold_ready`] did with a server's `Ready`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ReadyHold {
    /// Held: the platform is to be asked.
    Asked,
    /// One was held already: this one is refused.
    Twice,
    /// Not a server of this fleet.
    Unknown,
}

/// The servers. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Fleet {
    servers: BTreeMap<Name, GameServer>,
    /// Started and not registered yet, since.
    starting: BTreeMap<String, Instant>,
    /// The number the next server started is named with.
    next: u32,
}

impl Fleet {
    /// Connected servers.
    pub(super) fn len(&self) -> usize {
        self.servers.len()
    }

    pub(super) fn get(&self, server: &Name) -> Option<&GameServer> {
        self.servers.get(server)
    }

    pub(super) fn contains(&self, server: &Name) -> bool {
        self.servers.contains_key(server)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Name, &GameServer)> {
        self.servers.iter()
    }

    pub(super) fn ready_count(&self) -> usize {
        self.servers.values().filter(|s| s.ready).count()
    }

    /// Whether `server` is connected on `conn` (and not on a connection since replaced).
    pub(super) fn on(&self, server: &Name, conn: ConnId) -> bool {
        self.servers.get(server).is_some_and(|s| s.conn == conn)
    }

    /// Servers that would take a region without starting one: holding nothing, or starting.
    pub(super) fn spare(&self) -> usize {
        self.servers.values().filter(|s| s.regions.is_empty()).count() + self.starting.len()
    }

    /// Names a new server of `site` and counts it as starting from `now`.
    pub(super) fn start(&mut self, site: &Name, now: Instant) -> String {
        let server = format!("{}-gs-{}", site.as_str().to_ascii_lowercase(), self.next);
        self.next += 1;
        self.starting.insert(server.clone(), now);
        server
    }

    /// `server` is no longer being started (it ended, or could not start).
    pub(super) fn not_starting(&mut self, server: &str) {
        self.starting.remove(server);
    }

    /// Servers started more than `timeout` ago that never registered: no longer counted.
    pub(super) fn late_starts(&mut self, now: Instant, timeout: Duration) -> Vec<String> {
        let late: Vec<String> = self
            .starting
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) > timeout)
            .map(|(n, _)| n.clone())
            .collect();
        for server in &late {
            self.starting.remove(server);
        }
        late
    }

    /// `server` registered on `conn`: not ready, holding nothing. A server of the same name
    /// before it (a restart) is replaced.
    pub(super) fn connected(&mut self, server: Name, conn: ConnId) {
        self.starting.remove(server.as_str());
        let srv = GameServer {
            conn,
            ready: false,
            platform_wait: None,
            tps: 0.0,
            players: 0,
            regions: Vec::new(),
            idle_since: None,
            over_since: None,
            relieved_at: None,
            draining: false,
        };
        self.servers.insert(server, srv);
    }

    /// `server` is gone: the regions it held.
    pub(super) fn remove(&mut self, server: &Name) -> Option<Vec<BubbleId>> {
        self.servers.remove(server).map(|s| s.regions)
    }

    /// Holds `server`'s `Ready` (answered with `token`) until its platform agrees.
    pub(super) fn hold_ready(&mut self, server: &Name, token: Token) -> ReadyHold {
        let Some(srv) = self.servers.get_mut(server) else { return ReadyHold::Unknown };
        if srv.platform_wait.is_some() {
            return ReadyHold::Twice;
        }
        srv.platform_wait = Some(token);
        ReadyHold::Asked
    }

    /// The platform agrees `server` is ready: the token of its held `Ready`, if one is held.
    pub(super) fn platform_agrees(&mut self, server: &Name) -> Option<Token> {
        self.servers.get_mut(server).and_then(|s| s.platform_wait.take())
    }

    /// `server` takes regions from now on (unless it is draining).
    pub(super) fn set_ready(&mut self, server: &Name) {
        if let Some(srv) = self.servers.get_mut(server) {
            srv.ready = !srv.draining;
        }
    }

    /// `server` is stopping: it takes no region from now on. `true` the first time.
    pub(super) fn drain(&mut self, server: &Name) -> bool {
        let Some(srv) = self.servers.get_mut(server) else { return false };
        let first = !srv.draining;
        (srv.draining, srv.ready) = (true, false);
        first
    }

    /// Servers draining that still hold regions.
    pub(super) fn draining_with_regions(&self) -> Vec<Name> {
        let draining = self.servers.iter().filter(|(_, s)| s.draining && !s.regions.is_empty());
        draining.map(|(n, _)| n.clone()).collect()
    }

    /// Servers whose `Ready` waits for their platform.
    pub(super) fn awaiting_platform(&self) -> impl Iterator<Item = &Name> {
        self.servers.iter().filter(|(_, s)| s.platform_wait.is_some()).map(|(n, _)| n)
    }

    /// `server`'s `Load` report.
    pub(super) fn set_load(&mut self, server: &Name, tps: f32, players: u32) {
        if let Some(srv) = self.servers.get_mut(server) {
            srv.tps = tps;
            srv.players = players;
        }
    }

    /// `server` takes `bubble`: `true` when it held nothing before (it hosts from now on).
    pub(super) fn give(&mut self, server: &Name, bubble: BubbleId) -> bool {
        let Some(srv) = self.servers.get_mut(server) else { return false };
        let first = srv.regions.is_empty();
        srv.regions.push(bubble);
        first
    }

    /// `server` lets `bubble` go. `None`: no such server; `Some(true)`: it held something
    /// and now holds nothing (it no longer hosts).
    pub(super) fn release(&mut self, server: &Name, bubble: BubbleId) -> Option<bool> {
        let srv = self.servers.get_mut(server)?;
        let held = !srv.regions.is_empty();
        srv.regions.retain(|b| *b != bubble);
        Some(held && srv.regions.is_empty())
    }

    /// Stops counting ready servers that hold nothing beyond `keep`, idle for `after`: the
    /// longest idle first. Every server's idle clock is brought up to `now` first; `stop`
    /// false only does that (orders wait for a server: none is stopped).
    pub(super) fn stop_idle(
        &mut self,
        now: Instant,
        keep: usize,
        after: Duration,
        stop: bool,
    ) -> Vec<Name> {
        for s in self.servers.values_mut() {
            if s.ready && s.regions.is_empty() {
                s.idle_since.get_or_insert(now);
            } else {
                s.idle_since = None;
            }
        }
        if !stop {
            return Vec::new();
        }
        let mut idle: Vec<(Instant, Name)> =
            self.servers.iter().filter_map(|(n, s)| s.idle_since.map(|t| (t, n.clone()))).collect();
        idle.sort();
        let surplus = idle.len().saturating_sub(keep);
        let stopped: Vec<Name> = idle
            .into_iter()
            .take(surplus)
            .take_while(|(since, _)| now >= *since + after)
            .map(|(_, name)| name)
            .collect();
        for name in &stopped {
            self.servers.remove(name);
        }
        stopped
    }

    /// Whether `server`, overfull (`over`) or not now, is due to give regions away: overfull
    /// for `after`, and its last relief `settle` ago or more.
    pub(super) fn overfull_due(
        &mut self,
        server: &Name,
        over: bool,
        now: Instant,
        after: Duration,
        settle: Duration,
    ) -> bool {
        let Some(s) = self.servers.get_mut(server) else { return false };
        if !over {
            s.over_since = None;
            return false;
        }
        let since = *s.over_since.get_or_insert(now);
        let settled = s.relieved_at.is_none_or(|t| now >= t + settle);
        settled && now >= since + after
    }

    /// `server` gave regions away at `now`: its overfull clock starts again.
    pub(super) fn relieved(&mut self, server: &Name, now: Instant) {
        if let Some(s) = self.servers.get_mut(server) {
            s.relieved_at = Some(now);
            s.over_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn ready(fleet: &mut Fleet, server: &str, conn: ConnId) {
        fleet.connected(n(server), conn);
        fleet.set_ready(&n(server));
    }

    #[test]
    fn a_draining_server_takes_nothing_and_its_platform_cannot_make_it_ready_again() {
        let mut fleet = Fleet::default();
        ready(&mut fleet, "gs-0", 1);
        fleet.give(&n("gs-0"), BubbleId(1));
        assert!(fleet.drain(&n("gs-0")));
        assert!(!fleet.drain(&n("gs-0")), "once");
        let gs = fleet.get(&n("gs-0")).unwrap();
        assert!(gs.draining() && !gs.ready());
        fleet.set_ready(&n("gs-0"));
        assert!(!fleet.get(&n("gs-0")).unwrap().ready());
        assert_eq!(fleet.draining_with_regions(), [n("gs-0")]);
        fleet.release(&n("gs-0"), BubbleId(1));
        assert!(fleet.draining_with_regions().is_empty());
        assert!(!fleet.drain(&n("gs-9")), "an unknown server");
    }

    #[test]
    fn a_server_hosts_from_its_first_region_until_its_last_goes() {
        let mut fleet = Fleet::default();
        ready(&mut fleet, "gs-0", 1);
        assert!(fleet.give(&n("gs-0"), BubbleId(1)), "first region: it hosts");
        assert!(!fleet.give(&n("gs-0"), BubbleId(2)));
        assert_eq!(fleet.get(&n("gs-0")).unwrap().regions(), [BubbleId(1), BubbleId(2)]);
        assert_eq!(fleet.release(&n("gs-0"), BubbleId(1)), Some(false));
        assert_eq!(fleet.release(&n("gs-0"), BubbleId(2)), Some(true), "last region gone");
        assert_eq!(fleet.release(&n("gs-0"), BubbleId(2)), Some(false), "held nothing");
        assert_eq!(fleet.release(&n("gs-9"), BubbleId(2)), None);
        assert!(!fleet.give(&n("gs-9"), BubbleId(3)), "no such server");
    }

    #[test]
    fn starting_servers_count_as_spare_until_they_register_or_are_late() {
        let t0 = tokio::time::Instant::now().into_std();
        let mut fleet = Fleet::default();
        let a = fleet.start(&n("MTL"), t0);
        let b = fleet.start(&n("MTL"), t0 + Duration::from_secs(10));
        assert_eq!((a.as_str(), b.as_str()), ("mtl-gs-0", "mtl-gs-1"));
        assert_eq!(fleet.spare(), 2);
        fleet.connected(n(&a), 7);
        assert_eq!(fleet.spare(), 2, "registered and holding nothing");
        fleet.give(&n(&a), BubbleId(1));
        assert_eq!(fleet.spare(), 1);
        let late = fleet.late_starts(t0 + Duration::from_secs(35), Duration::from_secs(30));
        assert!(late.is_empty(), "b started 25 s ago");
        let late = fleet.late_starts(t0 + Duration::from_secs(41), Duration::from_secs(30));
        assert_eq!(late, [b]);
        assert_eq!(fleet.spare(), 0);
    }

    #[test]
    fn a_ready_is_held_once_until_the_platform_agrees() {
        let mut fleet = Fleet::default();
        fleet.connected(n("gs-0"), 1);
        assert_eq!(fleet.hold_ready(&n("gs-0"), 10), ReadyHold::Asked);
        assert_eq!(fleet.hold_ready(&n("gs-0"), 11), ReadyHold::Twice);
        assert_eq!(fleet.hold_ready(&n("gs-1"), 12), ReadyHold::Unknown);
        assert_eq!(fleet.awaiting_platform().collect::<Vec<_>>(), [&n("gs-0")]);
        assert!(!fleet.get(&n("gs-0")).unwrap().ready());
        assert_eq!(fleet.platform_agrees(&n("gs-0")), Some(10));
        assert_eq!(fleet.platform_agrees(&n("gs-0")), None, "answered once");
        assert_eq!(fleet.awaiting_platform().count(), 0);
    }

    #[test]
    fn a_reconnected_server_is_known_on_its_new_connection_only() {
        let mut fleet = Fleet::default();
        ready(&mut fleet, "gs-0", 1);
        fleet.give(&n("gs-0"), BubbleId(1));
        fleet.connected(n("gs-0"), 2);
        assert!(fleet.on(&n("gs-0"), 2) && !fleet.on(&n("gs-0"), 1));
        assert!(fleet.get(&n("gs-0")).unwrap().regions().is_empty(), "a new process");
        assert_eq!(fleet.remove(&n("gs-0")), Some(vec![]));
        assert_eq!(fleet.len(), 0);
    }

    #[test]
    fn idle_servers_beyond_the_pool_stop_longest_idle_first_after_the_wait() {
        let t0 = tokio::time::Instant::now().into_std();
        let after = Duration::from_secs(30);
        let mut fleet = Fleet::default();
        for (i, s) in ["gs-0", "gs-1", "gs-2"].into_iter().enumerate() {
            ready(&mut fleet, s, i as u64);
        }
        fleet.give(&n("gs-2"), BubbleId(1));
        // gs-0 idle from t0, gs-1 from t0 + 10 s (it held a region until then).
        fleet.give(&n("gs-1"), BubbleId(2));
        assert!(fleet.stop_idle(t0, 0, after, true).is_empty());
        fleet.release(&n("gs-1"), BubbleId(2));
        assert!(fleet.stop_idle(t0 + Duration::from_secs(10), 0, after, false).is_empty());
        assert_eq!(fleet.stop_idle(t0 + Duration::from_secs(31), 0, after, true), [n("gs-0")]);
        // A pool of one keeps gs-1.
        assert!(fleet.stop_idle(t0 + Duration::from_secs(60), 1, after, true).is_empty());
        assert_eq!(fleet.stop_idle(t0 + Duration::from_secs(60), 0, after, true), [n("gs-1")]);
        assert!(fleet.contains(&n("gs-2")), "it holds a region");
    }

    #[test]
    fn an_overfull_server_is_due_after_the_wait_and_not_again_within_the_settle() {
        let t0 = tokio::time::Instant::now().into_std();
        let (after, settle) = (Duration::from_secs(10), Duration::from_secs(15));
        let at = |s| t0 + Duration::from_secs(s);
        let mut fleet = Fleet::default();
        ready(&mut fleet, "gs-0", 1);
        let gs = n("gs-0");
        assert!(!fleet.overfull_due(&gs, true, at(0), after, settle));
        assert!(!fleet.overfull_due(&gs, false, at(5), after, settle), "the clock restarts");
        assert!(!fleet.overfull_due(&gs, true, at(6), after, settle));
        assert!(fleet.overfull_due(&gs, true, at(16), after, settle));
        fleet.relieved(&gs, at(16));
        assert!(!fleet.overfull_due(&gs, true, at(17), after, settle));
        assert!(!fleet.overfull_due(&gs, true, at(28), after, settle), "within the settle");
        assert!(fleet.overfull_due(&gs, true, at(31), after, settle));
    }
}
