//! The placement policies a population run compares.

use horizon_mesh::Placement;

/// A placement policy compared by the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The brain, placing with one of its [`Placement`]s.
    Brain(Placement),
    /// Every player on their own home site, groups ignored: a lower bound, not playable.
    Nearest,
}

impl Policy {
    pub const ALL: [Policy; 6] = [
        Policy::Brain(Placement::Smdg),
        Policy::Brain(Placement::AllCore),
        Policy::Brain(Placement::Fixed),
        Policy::Brain(Placement::Creator),
        Policy::Brain(Placement::OneShot),
        Policy::Nearest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Brain(p) => p.as_str(),
            Policy::Nearest => "nearest",
        }
    }

    /// The names of every policy, in the order reports show them.
    pub fn names() -> [&'static str; 6] {
        Policy::ALL.map(Policy::as_str)
    }
}
