//! Fixed delegations (the rollout's stage 3, design.md §8): a configured region of a world
//! — a planet, say, or the whole world — delegated to one relay site by configuration, to
//! rehearse handovers and failures before scoring decides anything.
//!
//! Under [`crate::Placement::Fixed`] each delegation is one region of its own: a bubble whose
//! box is the delegation's, created on its site as soon as the site has a server for it (with
//! nobody in it, if nobody is there yet), kept there whatever the scoring says and never ended
//! for being empty. Players entering its box cross into it; leaving it, they cross into the
//! core site's zone around them. It fails over like any bubble (its site cut from the core: to
//! the core site; its server lost: another server of its site) and goes back to its site by a
//! handover as soon as the site can host it again.

use crate::config::ConfigError;
use crate::geom::{Aabb, Vec3};
use crate::ids::{SiteId, WorldId};

/// One `[[delegations]]` entry.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Delegation {
    pub world: WorldId,
    /// The delegated box in the world's local coordinates; `None`: the whole world.
    pub bounds: Option<Aabb>,
    pub site: SiteId,
}

impl Delegation {
    /// The delegation's region: its box, or the whole world's (`±limit` m, the range positions
    /// are checked against) when it delegates the whole world. Its bubble has exactly this box.
    pub fn region(&self, limit: f64) -> Aabb {
        self.bounds.unwrap_or(Aabb {
            min: Vec3 { x: -limit, y: -limit, z: -limit },
            max: Vec3 { x: limit, y: limit, z: limit },
        })
    }

    /// Whether a group whose box is `bounds` in `world` plays under this delegation: the
    /// box's centre is inside it.
    pub fn holds(&self, world: WorldId, bounds: &Aabb) -> bool {
        let centre = Vec3 {
            x: (bounds.min.x + bounds.max.x) / 2.0,
            y: (bounds.min.y + bounds.max.y) / 2.0,
            z: (bounds.min.z + bounds.max.z) / 2.0,
        };
        world == self.world && self.bounds.is_none_or(|b| b.contains(centre))
    }
}

/// Checks delegations against each other, the sites and the world's range `±limit` m: every
/// problem, named by the delegation's index in the list.
pub fn validate_delegations(
    delegations: &[Delegation],
    core: SiteId,
    limit: f64,
) -> Result<(), Vec<ConfigError>> {
    let mut errors = Vec::new();
    let bad = |index: usize, why: String| ConfigError::BadDelegation { index, why };
    for (i, d) in delegations.iter().enumerate() {
        if d.site == core {
            errors.push(bad(
                i,
                "it delegates to the core site, which simulates everything already".into(),
            ));
        }
        if let Some(why) = d.bounds.and_then(|b| crate::zones::box_problem(&b, limit)) {
            errors.push(bad(i, why));
            continue;
        }
        let overlaps = |o: &Delegation| {
            o.world == d.world
                && match (o.bounds, d.bounds) {
                    (Some(a), Some(b)) => a.overlaps(&b),
                    _ => true,
                }
        };
        if let Some(j) = delegations[..i].iter().position(overlaps) {
            errors.push(bad(i, format!("it overlaps delegations[{j}] in the same world")));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(x0: f64, x1: f64) -> Option<Aabb> {
        Some(Aabb {
            min: Vec3 { x: x0, y: -10.0, z: -10.0 },
            max: Vec3 { x: x1, y: 10.0, z: 10.0 },
        })
    }

    #[test]
    fn a_group_plays_under_the_delegation_holding_its_centre() {
        let d = Delegation { world: WorldId(1), bounds: b(0.0, 100.0), site: SiteId(1) };
        assert!(d.holds(WorldId(1), &b(90.0, 108.0).unwrap()), "centre at 99 m");
        assert!(!d.holds(WorldId(1), &b(95.0, 120.0).unwrap()), "centre at 107.5 m");
        assert!(!d.holds(WorldId(2), &b(10.0, 20.0).unwrap()), "another world");
        let whole = Delegation { bounds: None, ..d };
        assert!(whole.holds(WorldId(1), &b(5_000.0, 5_010.0).unwrap()));
    }

    #[test]
    fn bad_delegations_are_named_by_index() {
        let core = SiteId(0);
        let mtl = SiteId(1);
        let ok = Delegation { world: WorldId(1), bounds: b(0.0, 100.0), site: mtl };
        assert_eq!(validate_delegations(&[ok], core, 1e6), Ok(()));
        let errors = validate_delegations(
            &[
                ok,
                Delegation { bounds: b(50.0, 150.0), ..ok },
                Delegation { world: WorldId(2), site: core, ..ok },
                Delegation { world: WorldId(3), bounds: b(10.0, 5.0), ..ok },
                Delegation { world: WorldId(1), bounds: None, ..ok },
            ],
            core,
            1e6,
        )
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("delegations[1]") && t.contains("overlaps delegations[0]")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t.starts_with("delegations[2]") && t.contains("core site")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t.starts_with("delegations[3]") && t.contains("empty")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t.starts_with("delegations[4]") && t.contains("overlaps")),
            "{text:?}"
        );
    }
}
