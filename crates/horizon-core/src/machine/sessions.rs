//! The agents' sessions, a part of the core machine that owns its state: which connection
//! speaks for each site, whether its `Register` came, and what it said of itself (transfer
//! address, admin address, pool, servers). Other files read a session; only this one changes
//! them.

use std::collections::BTreeMap;

use horizon_mesh::SiteId;
use horizon_proto::control;

use super::ConnId;

/// One agent's session.
#[derive(Debug)]
pub(crate) struct AgentSession {
    pub(crate) conn: ConnId,
    pub(crate) transfer_addr: String,
    /// Where operators reach its admin API (`host:port`), as it said; empty until then.
    pub(crate) admin: String,
    /// Its pool's bounds, as it said (`Pool`): (warm, max) servers.
    pub(crate) pool: Option<(u32, u32)>,
    /// Its Register arrived: it is told about peers, and peers about it.
    pub(crate) registered: bool,
    pub(crate) servers: Vec<control::ServerLoad>,
}

#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_site: BTreeMap<SiteId, AgentSession>,
}

impl Sessions {
    /// `site`'s agent connected on `conn`: its session starts afresh (a connection it had
    /// before no longer speaks for it); `false` if it replaces another connection.
    pub(crate) fn connected(&mut self, site: SiteId, conn: ConnId) -> bool {
        let fresh = self.by_site.get(&site).is_none_or(|old| old.conn == conn);
        let session = AgentSession {
            conn,
            transfer_addr: String::new(),
            admin: String::new(),
            pool: None,
            registered: false,
            servers: Vec::new(),
        };
        self.by_site.insert(site, session);
        fresh
    }

    /// `conn` closed: `site`'s session ends if `conn` was its connection (whether it was).
    pub(crate) fn disconnected(&mut self, site: SiteId, conn: ConnId) -> bool {
        let current = self.speaks(site, conn);
        if current {
            self.by_site.remove(&site);
        }
        current
    }

    /// `conn` is the connection that speaks for `site`.
    pub(crate) fn speaks(&self, site: SiteId, conn: ConnId) -> bool {
        self.by_site.get(&site).is_some_and(|a| a.conn == conn)
    }

    pub(crate) fn get(&self, site: SiteId) -> Option<&AgentSession> {
        self.by_site.get(&site)
    }

    /// `site`'s agent is connected (registered or not).
    pub(crate) fn has(&self, site: SiteId) -> bool {
        self.by_site.contains_key(&site)
    }

    /// `site`'s agent is connected and registered.
    pub(crate) fn registered(&self, site: SiteId) -> bool {
        self.by_site.get(&site).is_some_and(|a| a.registered)
    }

    /// The sites whose agents are connected, in order.
    pub(crate) fn sites(&self) -> impl Iterator<Item = SiteId> + '_ {
        self.by_site.keys().copied()
    }

    /// `site`'s `Register` came, saying where its transfer port is and which servers it has.
    pub(crate) fn register(
        &mut self,
        site: SiteId,
        transfer_addr: String,
        servers: Vec<control::ServerLoad>,
    ) {
        if let Some(agent) = self.by_site.get_mut(&site) {
            agent.transfer_addr = transfer_addr;
            agent.servers = servers;
            agent.registered = true;
        }
    }

    /// `site`'s servers, as its latest report says.
    pub(crate) fn servers(&mut self, site: SiteId, servers: Vec<control::ServerLoad>) {
        if let Some(agent) = self.by_site.get_mut(&site) {
            agent.servers = servers;
        }
    }

    /// Where operators reach `site`'s admin API, as it said.
    pub(crate) fn admin(&mut self, site: SiteId, addr: String) {
        if let Some(agent) = self.by_site.get_mut(&site) {
            agent.admin = addr;
        }
    }

    /// `site`'s pool's bounds, as it said.
    pub(crate) fn pool(&mut self, site: SiteId, warm: u32, max: u32) {
        if let Some(agent) = self.by_site.get_mut(&site) {
            agent.pool = Some((warm, max));
        }
    }
}

#[cfg(test)]
mod tests {
    use horizon_mesh::{SiteName, Sites};

    use super::*;

    #[test]
    fn a_newer_connection_speaks_for_its_site_and_the_old_ones_close_ends_nothing() {
        let n = |s: &str| SiteName::new(s).expect("valid");
        let sites = Sites::new(vec![n("PAR"), n("MTL")], &n("PAR"), &[(n("PAR"), n("MTL"), 85.0)])
            .expect("valid");
        let mut s = Sessions::default();
        let site = sites.id("MTL").expect("site");
        assert!(s.connected(site, 10));
        assert!(!s.registered(site));
        s.register(site, "mtl:7413".into(), Vec::new());
        assert!(s.registered(site) && s.speaks(site, 10));
        assert!(!s.connected(site, 11), "it replaces connection 10");
        assert!(!s.registered(site), "a new session registers again");
        assert!(!s.disconnected(site, 10), "the old connection's close is late: ignored");
        assert!(s.has(site));
        s.pool(site, 2, 8);
        s.admin(site, "mtl:7414".into());
        let agent = s.get(site).expect("session");
        assert_eq!((agent.pool, agent.admin.as_str()), (Some((2, 8)), "mtl:7414"));
        assert!(s.disconnected(site, 11));
        assert!(!s.has(site) && s.sites().next().is_none());
    }
}
