//! A drill file, read and checked against the mesh: every problem named with its fault.

use std::path::Path;

use serde::Deserialize;

use super::{Fault, FaultKind, Mesh};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    fault: Vec<RawFault>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at_s: f64,
    kind: String,
    site: Option<String>,
    sites: Option<Vec<String>>,
    for_s: Option<f64>,
    rate: Option<f64>,
}

/// Longest drill fault, and latest start.
const MAX_S: f64 = 3_600.0;

/// Reads and checks a drill file against the mesh. Every problem is reported, each naming its
/// fault.
pub(crate) fn load(path: &Path, mesh: &Mesh) -> Result<Vec<Fault>, Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
    parse(&text, mesh)
        .map_err(|errors| errors.into_iter().map(|e| format!("{}: {e}", path.display())).collect())
}

pub(crate) fn parse(text: &str, mesh: &Mesh) -> Result<Vec<Fault>, Vec<String>> {
    let Mesh { sites, core, standby } = *mesh;
    let raw: RawFile = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
    let mut errors = Vec::new();
    let mut faults = Vec::new();
    for (i, f) in raw.fault.iter().enumerate() {
        let mut bad = |why: String| errors.push(format!("fault {} ({}): {why}", i + 1, f.kind));
        let known = |s: &str| sites.iter().any(|x| x == s);
        let relay = |s: &Option<String>, bad: &mut dyn FnMut(String)| -> Option<String> {
            match s {
                None => bad("needs `site`".into()),
                Some(s) if !known(s) => {
                    bad(format!("site {s:?} is not one of {}", sites.join(", ")))
                }
                Some(s) if s == core => bad(format!(
                    "{s} is the core site: its agent has no emulated link to the core to cut"
                )),
                Some(s) => return Some(s.clone()),
            }
            None
        };
        let any_site = |s: &Option<String>, bad: &mut dyn FnMut(String)| -> Option<String> {
            match s {
                Some(s) if known(s) => return Some(s.clone()),
                Some(s) => bad(format!("site {s:?} is not one of {}", sites.join(", "))),
                None => bad("needs `site`".into()),
            }
            None
        };
        if !(f.at_s.is_finite() && (0.0..=MAX_S).contains(&f.at_s)) {
            bad(format!("at_s = {} must be within 0..={MAX_S}", f.at_s));
        }
        let lasting = matches!(
            f.kind.as_str(),
            "partition"
                | "restart_core"
                | "cut_transfer"
                | "loss"
                | "restart_agent"
                | "partition_core_store"
        );
        let for_s = match (f.for_s, lasting) {
            (Some(s), true) if s.is_finite() && s > 0.0 && s <= MAX_S => s,
            (Some(s), true) => {
                bad(format!("for_s = {s} must be within 0 (excluded) ..= {MAX_S}"));
                0.0
            }
            (None, true) => {
                bad("needs `for_s`".into());
                0.0
            }
            (Some(_), false) => {
                bad("takes no `for_s`".into());
                0.0
            }
            (None, false) => 0.0,
        };
        if f.rate.is_some() && f.kind != "loss" {
            bad("takes no `rate`".into());
        }
        if f.sites.is_some() && f.kind != "cut_transfer" {
            bad("takes `site`, not `sites`".into());
        }
        let kind = match f.kind.as_str() {
            "partition" => relay(&f.site, &mut bad).map(|site| FaultKind::Partition { site }),
            "loss" => {
                let rate = f.rate.unwrap_or(f64::NAN);
                if !(0.0..=1.0).contains(&rate) {
                    bad("needs `rate` within 0..=1".into());
                }
                relay(&f.site, &mut bad).map(|site| FaultKind::Loss { site, rate })
            }
            "kill_server" => any_site(&f.site, &mut bad).map(|site| FaultKind::KillServer { site }),
            "drain_server" => {
                any_site(&f.site, &mut bad).map(|site| FaultKind::DrainServer { site })
            }
            "restart_agent" => {
                any_site(&f.site, &mut bad).map(|site| FaultKind::RestartAgent { site })
            }
            "restart_core" => {
                if f.site.is_some() {
                    bad("takes no `site`".into());
                }
                if standby {
                    bad("with --standby the core is two processes on etcd: kill_core or \
                         partition_core_store instead"
                        .into());
                }
                Some(FaultKind::RestartCore)
            }
            "kill_core" | "partition_core_store" => {
                if f.site.is_some() {
                    bad("takes no `site`".into());
                }
                if !standby {
                    bad("needs `horizon demo --standby` (a core standing by on etcd to take over)"
                        .into());
                }
                Some(if f.kind == "kill_core" {
                    FaultKind::KillCore
                } else {
                    FaultKind::PartitionCoreStore
                })
            }
            "cut_transfer" => match f.sites.as_deref() {
                Some([a, b]) if known(a) && known(b) && a != b => {
                    Some(FaultKind::CutTransfer { a: a.clone(), b: b.clone() })
                }
                _ => {
                    bad(format!("needs `sites` = two different sites of {}", sites.join(", ")));
                    None
                }
            },
            other => {
                bad(format!(
                    "unknown kind {other:?}: partition, kill_server, drain_server, \
                     restart_agent, restart_core, cut_transfer, loss, kill_core, partition_core_store"
                ));
                None
            }
        };
        if let Some(kind) = kind {
            faults.push(Fault { kind, at_s: f.at_s, for_s });
        }
    }
    if raw.fault.is_empty() {
        errors.push("no [[fault]] in the file".into());
    }
    if errors.is_empty() { Ok(faults) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sites() -> Vec<String> {
        ["PAR", "MTL", "HKG"].map(String::from).to_vec()
    }

    /// Checks `text` against PAR, MTL and HKG, with or without a standby.
    fn parse_for(text: &str, standby: bool) -> Result<Vec<Fault>, Vec<String>> {
        let sites = sites();
        parse(text, &Mesh { sites: &sites, core: "PAR", standby })
    }

    #[test]
    fn a_good_drill_parses() {
        let text = r#"
            [[fault]]
            at_s = 40
            kind = "partition"
            site = "MTL"
            for_s = 45
            [[fault]]
            at_s = 10
            kind = "kill_server"
            site = "PAR"
            [[fault]]
            at_s = 100
            kind = "cut_transfer"
            sites = ["PAR", "MTL"]
            for_s = 10
            [[fault]]
            at_s = 120
            kind = "loss"
            site = "HKG"
            rate = 0.2
            for_s = 5
            [[fault]]
            at_s = 130
            kind = "restart_core"
            for_s = 10
            [[fault]]
            at_s = 150
            kind = "restart_agent"
            site = "PAR"
            for_s = 3
        "#;
        let f = parse_for(text, false).unwrap();
        assert_eq!(f.len(), 6);
        assert_eq!(f[5].kind, FaultKind::RestartAgent { site: "PAR".into() });
        assert_eq!(
            f[0],
            Fault { kind: FaultKind::Partition { site: "MTL".into() }, at_s: 40.0, for_s: 45.0 }
        );
        assert_eq!(f[1].for_s, 0.0);
    }

    /// A leader's faults need a standby, and a core restart has no meaning with one.
    #[test]
    fn a_leaders_faults_need_the_standby_and_a_restart_refuses_it() {
        let leader = r#"
            [[fault]]
            at_s = 25
            kind = "partition_core_store"
            for_s = 15
            [[fault]]
            at_s = 55
            kind = "kill_core"
        "#;
        let f = parse_for(leader, true).unwrap();
        assert_eq!(f[0], Fault { kind: FaultKind::PartitionCoreStore, at_s: 25.0, for_s: 15.0 });
        assert_eq!(f[1], Fault { kind: FaultKind::KillCore, at_s: 55.0, for_s: 0.0 });
        assert!(f.iter().all(|f| f.kind.is_takeover() && !f.kind.is_restart()));
        let all = parse_for(leader, false).unwrap_err().join("\n");
        assert!(all.contains("fault 1 (partition_core_store): needs `horizon demo --standby`"));
        assert!(all.contains("fault 2 (kill_core): needs `horizon demo --standby`"), "{all}");
        let wrong = r#"
            [[fault]]
            at_s = 10
            kind = "kill_core"
            for_s = 5
            [[fault]]
            at_s = 20
            kind = "partition_core_store"
            [[fault]]
            at_s = 30
            kind = "restart_core"
            for_s = 5
        "#;
        let all = parse_for(wrong, true).unwrap_err().join("\n");
        assert!(all.contains("fault 1 (kill_core): takes no `for_s`"), "{all}");
        assert!(all.contains("fault 2 (partition_core_store): needs `for_s`"), "{all}");
        assert!(all.contains("fault 3 (restart_core): with --standby"), "{all}");
    }

    #[test]
    fn every_problem_is_named_with_its_fault() {
        let text = r#"
            [[fault]]
            at_s = 40
            kind = "partition"
            site = "SYD"
            for_s = 45
            [[fault]]
            at_s = 10
            kind = "partition"
            site = "PAR"
            for_s = 5
            [[fault]]
            at_s = 10
            kind = "kill_server"
            site = "MTL"
            for_s = 3
            [[fault]]
            at_s = 10
            kind = "restart_agent"
            site = "MTL"
            [[fault]]
            at_s = 10
            kind = "meteor"
        "#;
        let errors = parse_for(text, false).unwrap_err();
        let all = errors.join("\n");
        assert!(all.contains("fault 1 (partition): site \"SYD\""), "{all}");
        assert!(all.contains("fault 2 (partition): PAR is the core site"), "{all}");
        assert!(all.contains("fault 3 (kill_server): takes no `for_s`"), "{all}");
        assert!(all.contains("fault 4 (restart_agent): needs `for_s`"), "{all}");
        assert!(all.contains("fault 5 (meteor): unknown kind"), "{all}");
        assert!(
            parse_for(
                "[[fault]]\nat_s = 1\nkind = \"partition\"\nsite = \"MTL\"\nfor_s = 2\nwhen = 3\n",
                false
            )
            .unwrap_err()[0]
                .contains("when")
        );
    }
}
