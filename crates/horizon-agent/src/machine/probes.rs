//! A joining client's probe table (`gateway::Request::JoinMeasured`: its round trip to every
//! site's beacon) checked against what this gateway measures itself, the QUIC RTT of the very
//! connection (design.md §2: nothing trusts a client-supplied latency).
//!
//! Two claims can be checked from here, and both are:
//! - **This site's own figure.** The client reached this gateway, so its beacon answered, and
//!   the client's median must agree with the gateway's RTT within [`tolerance_ms`]. A client
//!   that claims a far site is its fastest joins that far site and shows a round trip the
//!   gateway sees to be false.
//! - **Physics for the others.** A site `S` cannot be nearer to the client than this site's
//!   RTT minus the backbone between the two (the triangle inequality over the measured
//!   backbone): a claim below that bound is false.
//!
//! What cannot be checked from one site is a client *hiding* a nearer site (blocking its
//! beacon). That only makes the client join a farther gateway; its access RTT there is
//! measured by the infrastructure, so the placement it gets is the one its real path deserves.
//!
//! A contradicted table is dropped (counted, and logged): the player still plays from this
//! gateway, but is not counted in stage 1's figures under the home it claimed.

use horizon_proto::gateway::{MAX_PROBED_SITES, SiteProbe};

/// How far a claim may stray from the gateway's own measure: 20 ms, or a quarter of the RTT,
/// whichever is larger (the QUIC estimate at connection includes the handshake's processing;
/// a beacon's pong has its hold time taken out).
pub(crate) fn tolerance_ms(seen_ms: f32) -> f32 {
    (seen_ms * 0.25).max(20.0)
}

/// Why a probe table was not believed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Contradiction {
    /// The table says this site's beacon did not answer (or leaves this site out), yet the
    /// client is connected to it.
    OwnSiteSilent,
    /// The client's figure for this site is not what the gateway measures.
    OwnSite { claimed_ms: f32, seen_ms: f32 },
    /// Another site claimed nearer than the backbone allows.
    Nearer { site: String, claimed_ms: f32, bound_ms: f32 },
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Contradiction::OwnSiteSilent => {
                f.write_str("the table says this site did not answer, yet the client reached it")
            }
            Contradiction::OwnSite { claimed_ms, seen_ms } => write!(
                f,
                "the table says {claimed_ms:.1} ms to this site, the gateway measures {seen_ms:.1} ms"
            ),
            Contradiction::Nearer { site, claimed_ms, bound_ms } => write!(
                f,
                "the table says {claimed_ms:.1} ms to {site}, nearer than the backbone allows ({bound_ms:.1} ms at least)"
            ),
        }
    }
}

/// A table that is not a table: refused as malformed (the join fails).
pub(crate) fn malformed(probes: &[SiteProbe]) -> Option<&'static str> {
    if probes.len() > MAX_PROBED_SITES {
        return Some("a probe table lists at most 32 sites (docs/protocol.md, JoinMeasured)");
    }
    if probes.iter().any(|p| p.answered > p.sent) {
        return Some("a probe's answered count is above its sent count");
    }
    let mut names: Vec<&str> = probes.iter().map(|p| p.site.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Some("a probe table names a site twice");
    }
    None
}

/// A claim in milliseconds, for a site that answered.
fn claimed_ms(p: &SiteProbe) -> Option<f32> {
    (p.answered > 0).then(|| p.median_us as f32 / 1000.0)
}

/// Checks a well-formed table (see [`malformed`]) received by the gateway of `site`, which
/// measures `seen_ms` to the client; `backbone_ms(s)` is this site's measured RTT to site `s`
/// (`None`: not measured, no bound). On success, the site the table says is nearest.
pub(crate) fn check(
    probes: &[SiteProbe],
    site: &str,
    seen_ms: f32,
    backbone_ms: impl Fn(&str) -> Option<f32>,
) -> Result<String, Contradiction> {
    let tolerance = tolerance_ms(seen_ms);
    let own = probes.iter().find(|p| p.site.as_str() == site);
    let claimed = own.and_then(claimed_ms).ok_or(Contradiction::OwnSiteSilent)?;
    if (claimed - seen_ms).abs() > tolerance {
        return Err(Contradiction::OwnSite { claimed_ms: claimed, seen_ms });
    }
    for p in probes.iter().filter(|p| p.site.as_str() != site) {
        let (Some(claimed), Some(backbone)) = (claimed_ms(p), backbone_ms(p.site.as_str())) else {
            continue;
        };
        let bound = seen_ms - backbone - tolerance;
        if claimed < bound {
            let site = p.site.as_str().to_owned();
            return Err(Contradiction::Nearer { site, claimed_ms: claimed, bound_ms: bound });
        }
    }
    let nearest = probes
        .iter()
        .filter_map(|p| claimed_ms(p).map(|ms| (ms, p.site.as_str())))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(site, |(_, s)| s);
    Ok(nearest.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use horizon_proto::Name;

    fn probe(site: &str, ms: Option<f32>) -> SiteProbe {
        SiteProbe {
            site: Name::new(site).expect("short"),
            sent: 10,
            answered: if ms.is_some() { 10 } else { 0 },
            median_us: ms.map_or(0, |ms| (ms * 1000.0) as u32),
        }
    }

    /// From Paris: Montreal 85 ms away, Hong Kong 185 ms.
    fn backbone(site: &str) -> Option<f32> {
        match site {
            "MTL" => Some(85.0),
            "HKG" => Some(185.0),
            _ => None,
        }
    }

    #[test]
    fn an_honest_table_names_its_nearest_site() {
        let hongkonger =
            [probe("PAR", Some(192.0)), probe("MTL", Some(240.0)), probe("HKG", Some(8.0))];
        assert_eq!(check(&hongkonger, "PAR", 190.0, backbone), Ok("HKG".to_owned()));
        let parisian = [probe("PAR", Some(11.0)), probe("MTL", Some(95.0)), probe("HKG", None)];
        assert_eq!(check(&parisian, "PAR", 12.0, backbone), Ok("PAR".to_owned()));
    }

    #[test]
    fn a_client_claiming_a_far_gateway_is_near_is_contradicted_by_the_rtt_it_shows() {
        // A Hong Konger on Paris's gateway who says Paris is 10 ms away.
        let liar = [probe("PAR", Some(10.0)), probe("HKG", Some(300.0))];
        assert_eq!(
            check(&liar, "PAR", 190.0, backbone),
            Err(Contradiction::OwnSite { claimed_ms: 10.0, seen_ms: 190.0 })
        );
        // Within the tolerance (a quarter of 190 ms) is believed.
        let close = [probe("PAR", Some(150.0))];
        assert_eq!(check(&close, "PAR", 190.0, backbone), Ok("PAR".to_owned()));
    }

    #[test]
    fn a_site_nearer_than_the_backbone_allows_is_contradicted() {
        // 190 ms from Paris cannot be 20 ms from Montreal, 85 ms from Paris.
        let liar = [probe("PAR", Some(190.0)), probe("MTL", Some(20.0))];
        let Err(Contradiction::Nearer { site, bound_ms, .. }) =
            check(&liar, "PAR", 190.0, backbone)
        else {
            panic!("believed");
        };
        assert_eq!(site, "MTL");
        assert!((bound_ms - (190.0 - 85.0 - 47.5)).abs() < 1e-3);
        // A site with no measured backbone is not bounded.
        let unknown = [probe("PAR", Some(190.0)), probe("SYD", Some(20.0))];
        assert_eq!(check(&unknown, "PAR", 190.0, backbone), Ok("SYD".to_owned()));
    }

    #[test]
    fn a_table_saying_the_gateway_did_not_answer_is_contradicted() {
        let silent = [probe("PAR", None), probe("MTL", Some(90.0))];
        assert_eq!(check(&silent, "PAR", 12.0, backbone), Err(Contradiction::OwnSiteSilent));
        let absent = [probe("MTL", Some(90.0))];
        assert_eq!(check(&absent, "PAR", 12.0, backbone), Err(Contradiction::OwnSiteSilent));
    }

    #[test]
    fn malformed_tables_are_named() {
        let twice = [probe("PAR", Some(1.0)), probe("PAR", Some(2.0))];
        assert!(malformed(&twice).is_some_and(|w| w.contains("twice")));
        let mut over = probe("PAR", Some(1.0));
        over.answered = 11;
        assert!(malformed(&[over]).is_some_and(|w| w.contains("answered")));
        let long: Vec<SiteProbe> = (0..33).map(|i| probe(&format!("S{i}"), Some(1.0))).collect();
        assert!(malformed(&long).is_some_and(|w| w.contains("32")));
        assert_eq!(malformed(&[probe("PAR", Some(1.0))]), None);
    }
}
