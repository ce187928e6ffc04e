//! The bubbles carved out of each zone (design.md §4: a zone is its box minus the bubbles
//! inside it): its holder is told their boxes (`Carve`) whenever they change, and again under
//! each new epoch (a new server starts with none), so that the zone's server never writes
//! inside a bubble.

use horizon_proto::{Aabb, BubbleId, control, server::MAX_HOLES};

use super::registry::{Carved, Phase};
use super::*;

impl CoreMachine {
    /// Sends each running zone's holder the bubbles carved out of it, where they changed.
    pub(crate) fn carve_zones(&mut self) {
        let boxes = self.mesh.bubble_boxes_changes();
        // (zone, what it is worked out from now, whether to tell its holder)
        let mut changed: Vec<(BubbleId, Carved, bool)> = Vec::new();
        for (&id, reg) in &self.registry {
            if !id.is_zone() || reg.phase() != Phase::Running || reg.ending_since().is_some() {
                continue;
            }
            let Some(zone) = self.mesh.zone_by_id(id) else { continue };
            let unchanged = reg.holes().as_ref().is_some_and(|c| {
                c.epoch == reg.epoch() && c.bounds == zone.bounds && c.boxes == boxes
            });
            if unchanged {
                continue;
            }
            let mut holes: Vec<Aabb> =
                self.mesh.bubbles_meeting(zone.world, zone.bounds).map(|b| b.bounds).collect();
            if holes.len() > MAX_HOLES {
                tracing::warn!(
                    zone = id.0,
                    bubbles = holes.len(),
                    "more bubbles in a zone than one Carve lists: the first are told"
                );
                holes.truncate(MAX_HOLES);
            }
            // What its current holder has: nothing under a new epoch.
            let told: &[Aabb] = match &reg.holes() {
                Some(c) if c.epoch == reg.epoch() => &c.holes,
                _ => &[],
            };
            let tell = told != holes.as_slice();
            changed.push((
                id,
                Carved { epoch: reg.epoch(), bounds: zone.bounds, boxes, holes },
                tell,
            ));
        }
        for (zone, carved, tell) in changed {
            let Some(reg) = self.registry.get(&zone) else { continue };
            let (site, lease) = (reg.site(), reg.lease_ref(zone));
            // Not sent (the holder is away): told once it registers again (`resync`).
            let told = !tell || {
                let request = control::Request::Carve { lease, holes: carved.holes.clone() };
                self.order(site, request).is_some()
            };
            if told && let Some(reg) = self.registry.get_mut(&zone) {
                reg.carved(carved);
            }
        }
    }
}
