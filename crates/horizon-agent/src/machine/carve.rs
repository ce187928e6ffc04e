//! The bubbles carved out of a zone this site runs (design.md §4): the core sends their boxes
//! (`Carve`) whenever they change, and again under each new epoch; the zone's servers get
//! them, and must not write inside them.

use super::*;

impl AgentMachine {
    /// The core's `Carve` for a region held here: passed to every server of it.
    pub(super) fn carve(
        &mut self,
        lease: LeaseRef,
        holes: Vec<Aabb>,
    ) -> Result<control::Reply, Fault> {
        if holes.len() > server::MAX_HOLES {
            let why = format!("{} holes: over the limit of {}", holes.len(), server::MAX_HOLES);
            return Err(Fault::new(ErrorCode::TooLarge, why));
        }
        let local = self.bubbles.get(&lease.bubble).ok_or_else(|| unknown(lease.bubble))?;
        if local.lease().epoch != lease.epoch {
            let why = format!("epoch {} runs here", local.lease().epoch.0);
            return Err(Fault::new(ErrorCode::StaleEpoch, why));
        }
        let servers: Vec<Name> = local.servers().cloned().collect();
        for name in servers {
            let request = server::Request::Carve { lease, holes: holes.clone() };
            self.ask_server(&name, Then::Nothing("carve"), request);
        }
        Ok(control::Reply::Done)
    }
}
