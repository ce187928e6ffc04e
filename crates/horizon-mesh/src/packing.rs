//! Several regions per game server (SPEC section 8, "Cost"): which server takes a new region.
//!
//! Today's Godot servers hold a list of zones; SMD-G's hold a list of regions (zones, bubbles,
//! parts of either), each under its own lease. A site's agent asks [`pick`] for the server of
//! each region it starts, and the population simulator asks the very same function, so the
//! servers it counts are the servers an agent would run.
//!
//! The rule is best fit with headroom: among the servers already holding something, the
//! fullest one that stays within its seats (`players_per_server × pack_fill_ratio`) with the
//! new region's players; else an empty server; else none (start one). Filling the fullest
//! server first keeps the others empty, so they go back to the warm pool; the headroom above
//! the seats absorbs the regions that grow after they were placed.

/// One candidate server, as its owner sees it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seat<S> {
    pub server: S,
    /// Players it simulates (the larger of what it reports and what it was given).
    pub players: u32,
    /// Regions it holds.
    pub regions: u32,
}

/// The server for a new region of `players` players (see the module): `None` when no offered
/// server fits and none is empty. Ties go to the first offered.
pub fn pick<S>(servers: impl IntoIterator<Item = Seat<S>>, players: u32, seats: u32) -> Option<S> {
    let mut best: Option<Seat<S>> = None;
    let mut empty: Option<S> = None;
    for s in servers {
        if s.regions == 0 {
            if empty.is_none() {
                empty = Some(s.server);
            }
        } else if s.players.saturating_add(players) <= seats
            && best.as_ref().is_none_or(|b| s.players > b.players)
        {
            best = Some(s);
        }
    }
    best.map(|s| s.server).or(empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(server: &'static str, players: u32, regions: u32) -> Seat<&'static str> {
        Seat { server, players, regions }
    }

    #[test]
    fn the_fullest_server_that_still_fits_takes_the_region() {
        let servers = [seat("a", 10, 1), seat("b", 50, 3), seat("c", 58, 2), seat("d", 0, 0)];
        assert_eq!(pick(servers, 1, 60), Some("c"));
        assert_eq!(pick(servers, 5, 60), Some("b"), "c would overflow its seats");
        assert_eq!(pick(servers, 30, 60), Some("a"));
    }

    #[test]
    fn an_empty_server_only_when_no_holding_server_fits_and_none_at_all_when_none_is_empty() {
        let full = [seat("a", 60, 4), seat("b", 0, 0), seat("c", 0, 0)];
        assert_eq!(pick(full, 1, 60), Some("b"));
        assert_eq!(pick([seat("a", 60, 4)], 1, 60), None);
        assert_eq!(pick(std::iter::empty::<Seat<&str>>(), 1, 60), None);
    }

    #[test]
    fn a_region_larger_than_a_server_gets_an_empty_one() {
        assert_eq!(pick([seat("a", 1, 1), seat("b", 0, 0)], 200, 60), Some("b"));
    }

    #[test]
    fn a_holding_server_with_no_players_yet_still_counts_as_holding() {
        // A region placed a moment ago has no players yet: the next one shares its server.
        assert_eq!(pick([seat("a", 0, 1), seat("b", 0, 0)], 1, 60), Some("a"));
    }
}
