//! What a connected entity is doing.

/// What a connected entity is doing; decides its weight in scoring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Flies a ship (weight 2.0 by default).
    Pilot,
    /// A playing human (1.0).
    Player,
    /// A human with no input for a while (0.05).
    Afk,
    /// Not a player: weight 0, never counted anywhere.
    Npc,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "pilot" => Role::Pilot,
            "player" => Role::Player,
            "afk" => Role::Afk,
            "npc" => Role::Npc,
            _ => return None,
        })
    }

    pub fn is_counted(self) -> bool {
        self != Role::Npc
    }
}
