//! Transfer links reported down, and the routes round them.

use super::*;

/// `site`'s agent reports its transfer links (`None`: down).
fn links_report(h: &mut Harness, site: &str, links: &[(&str, Option<f32>)]) {
    let backbone = links
        .iter()
        .map(|&(to, rtt_ms)| control::BackboneSample {
            site: Name::new(to).unwrap(),
            rtt_ms,
            loss: 0.0,
        })
        .collect();
    let servers = (0..3).map(|i| server(&format!("{site}-{i}"), &[])).collect();
    let report = control::Request::Report {
        joins: Vec::new(),
        leaves: Vec::new(),
        players: Vec::new(),
        backbone,
        servers,
    };
    assert_eq!(h.request(site, report).unwrap(), control::Reply::Done);
}

/// The `Links` orders sent since the log was cleared: (to, the PAR–MTL link's round trip).
fn links_sent(h: &Harness) -> Vec<(String, Option<Option<f32>>)> {
    h.sent()
        .into_iter()
        .filter_map(|(site, _, request)| match request {
            control::Request::Links { links } => {
                let par_mtl = links
                    .iter()
                    .find(|l| [l.a.as_str(), l.b.as_str()] == ["PAR", "MTL"])
                    .map(|l| l.rtt_ms);
                Some((site, par_mtl))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_link_reported_down_is_told_to_every_agent_and_the_status_shows_the_route_round_it() {
    let mut h = Harness::new();
    links_report(&mut h, "PAR", &[("MTL", Some(85.0)), ("HKG", Some(160.0))]);
    links_report(&mut h, "MTL", &[("PAR", Some(88.0)), ("HKG", Some(190.0))]);
    links_report(&mut h, "HKG", &[("PAR", Some(160.0)), ("MTL", Some(190.0))]);
    let status = h.core.status(h.now, horizon_admin::Page::default());
    assert_eq!(status.links.len(), 3);
    assert!(status.routes.is_empty(), "every link direct: {:?}", status.routes);
    h.log.clear();
    // The same figures again: nobody is told anything.
    links_report(&mut h, "MTL", &[("PAR", Some(90.0)), ("HKG", Some(190.0))]);
    assert_eq!(links_sent(&h), []);
    // MTL's link to PAR goes silent: every agent is told, PAR and MTL go round through HKG.
    links_report(&mut h, "MTL", &[("PAR", None), ("HKG", Some(190.0))]);
    let told = links_sent(&h);
    let to: BTreeSet<&str> = told.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(to, BTreeSet::from(["PAR", "MTL", "HKG"]));
    assert!(told.iter().all(|(_, par_mtl)| *par_mtl == Some(None)), "{told:?}");
    let status = h.core.status(h.now, horizon_admin::Page::default());
    let routes: Vec<(String, String, String)> =
        status.routes.iter().map(|r| (r.from.clone(), r.to.clone(), r.via.clone())).collect();
    assert_eq!(
        routes,
        [("MTL".into(), "PAR".into(), "HKG".into()), ("PAR".into(), "MTL".into(), "HKG".into())]
    );
    // A new agent connection is told the table at its registration.
    h.log.clear();
    h.connect("HKG");
    assert_eq!(links_sent(&h), [("HKG".to_owned(), Some(None))]);
}
