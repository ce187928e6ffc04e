//! Players as the brain sees them: the gateway they entered at and their home, both fixed for
//! the session; session-minimum access RTT, role, motion.

use crate::geom::Vec3;
use crate::ids::{PlayerId, SiteId, WorldId};

pub use horizon_types::Role;

/// A player joining: what their gateway knows at connection.
#[derive(Clone, Debug, PartialEq)]
pub struct PlayerJoin {
    pub id: PlayerId,
    /// The site whose gateway the player entered at, where their access RTT is measured:
    /// scoring measures every candidate site from it. Also their home, until the measure stage
    /// finds it elsewhere ([`crate::Mesh::handle_measured_home`]).
    pub gateway: SiteId,
    /// First access RTT measured by the infrastructure (never reported by the client).
    pub access_rtt_ms: f64,
    pub role: Role,
    pub world: WorldId,
    pub position: Vec3,
    pub velocity: Vec3,
}

/// A change to a connected player. `None` fields are unchanged. Neither the gateway nor the
/// home changes here.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlayerUpdate {
    /// A new access RTT sample: the decision uses the session minimum.
    pub access_rtt_ms: Option<f64>,
    pub role: Option<Role>,
    pub world: Option<WorldId>,
    pub position: Option<Vec3>,
    pub velocity: Option<Vec3>,
}

/// A connected player.
#[derive(Clone, Debug, PartialEq)]
pub struct Player {
    pub id: PlayerId,
    /// The site whose gateway they entered at: every decision's latency is measured from it
    /// (`crate::scoring`), whatever their home.
    pub gateway: SiteId,
    /// The site they reach fastest (design.md §1): their gateway from the relay stage on, as
    /// they dial the nearest site; under the measure stage, where everyone enters at the core
    /// site, the site of lowest RTT in the probe table their gateway believed. Every figure
    /// counts players by it; no decision reads it.
    pub home: SiteId,
    /// Whether `home` comes from a believed probe table (set once a session).
    pub home_measured: bool,
    /// The minimum access RTT observed this session: a delay can only raise an RTT.
    pub access_rtt_min_ms: f64,
    pub role: Role,
    pub world: WorldId,
    pub position: Vec3,
    pub velocity: Vec3,
}

impl Player {
    pub(crate) fn from_join(j: &PlayerJoin) -> Self {
        Player {
            id: j.id,
            gateway: j.gateway,
            home: j.gateway,
            home_measured: false,
            access_rtt_min_ms: j.access_rtt_ms,
            role: j.role,
            world: j.world,
            position: j.position,
            velocity: j.velocity,
        }
    }

    pub(crate) fn apply(&mut self, u: &PlayerUpdate) {
        if let Some(rtt) = u.access_rtt_ms {
            self.access_rtt_min_ms = self.access_rtt_min_ms.min(rtt);
        }
        if let Some(r) = u.role {
            self.role = r;
        }
        if let Some(w) = u.world {
            self.world = w;
        }
        if let Some(p) = u.position {
            self.position = p;
        }
        if let Some(v) = u.velocity {
            self.velocity = v;
        }
    }

    pub fn speed(&self) -> f64 {
        self.velocity.norm()
    }
}
