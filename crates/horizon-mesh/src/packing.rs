//! Several regions per game server (design.md §8, "Cost"): which server takes a new region.
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
//!
//! When the headroom is not enough (a server's regions grew past `players_per_server`), the
//! server gives whole regions away as today's SMD does ([`give_away`]), each to the server
//! [`pick`] names: a within-site move, a region never cut by it.

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

/// The regions an overfull server gives away, SMD's plan (`regions`: each with its players):
/// heaviest first, each to the lighter of the two sides, the heaviest staying, so the server
/// keeps at least one region and about half of its players. Nothing when it holds fewer than
/// two regions (one region too large for a server is cut by the brain, not moved) or when its
/// players fit in `capacity`. A region with no players stays (moving it relieves nothing).
/// Ties between equal regions keep their given order.
pub fn give_away<R: Copy>(regions: &[(R, u32)], capacity: u32) -> Vec<R> {
    let total: u64 = regions.iter().map(|&(_, p)| u64::from(p)).sum();
    if regions.len() < 2 || total <= u64::from(capacity) {
        return Vec::new();
    }
    let mut order: Vec<&(R, u32)> = regions.iter().collect();
    order.sort_by_key(|r| std::cmp::Reverse(r.1));
    let (mut stay, mut go) = (u64::from(order[0].1), 0u64);
    let mut away = Vec::new();
    for &&(region, players) in &order[1..] {
        if players > 0 && go < stay {
            go += u64::from(players);
            away.push(region);
        } else {
            stay += u64::from(players);
        }
    }
    away
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

    #[test]
    fn an_overfull_server_gives_away_whole_regions_heaviest_first_to_the_lighter_side() {
        // 70 + 10 over 75: the 10 go, the 70 stay.
        assert_eq!(give_away(&[("a", 70), ("b", 10)], 75), ["b"]);
        // 30, 30, 20: the first 30 stays, the second goes, the 20 joins the lighter side
        // (equal: it stays).
        assert_eq!(give_away(&[("c", 20), ("a", 30), ("b", 30)], 75), ["b"]);
        // 40, 20, 20, 10: 40 stays; 20 goes; 20 goes (20 < 40); 10 stays (40 = 40).
        assert_eq!(give_away(&[("a", 40), ("b", 20), ("c", 20), ("d", 10)], 75), ["b", "c"]);
    }

    #[test]
    fn a_server_within_capacity_or_with_one_region_gives_nothing_away() {
        assert!(give_away(&[("a", 40), ("b", 35)], 75).is_empty(), "75 fit in 75");
        assert!(give_away(&[("a", 200)], 75).is_empty(), "one region: the brain cuts it");
        assert!(give_away::<&str>(&[], 75).is_empty());
    }

    #[test]
    fn a_region_with_no_players_never_moves() {
        assert_eq!(give_away(&[("a", 4), ("z", 0), ("b", 3)], 6), ["b"]);
        assert!(give_away(&[("a", 7), ("z", 0)], 6).is_empty());
    }
}
