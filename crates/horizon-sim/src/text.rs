//! The readable form of a report.

use std::fmt::Write;

use crate::runner::Report;

/// Renders a report as a timeline followed by where everyone ended.
pub fn render_text(r: &Report, verbose: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Scenario {:?} (seed {}): {} s in ticks of {} s",
        r.name, r.seed, r.duration_s, r.tick_s
    );
    for e in &r.timeline {
        if verbose || e.kind != "border" {
            let _ = writeln!(out, "[{:>8.1}s] {:<8} {}", e.t_s, e.kind, e.text);
        }
    }
    let _ = writeln!(out, "\nChanges of site: {}", r.moves.len());
    for m in &r.moves {
        let _ = writeln!(
            out,
            "  {:>8.1}s  {} -> {}  ({})  {}",
            m.t_s,
            m.from,
            m.to,
            m.reason,
            m.players.join(" ")
        );
    }
    let _ = writeln!(out, "\nEnd (t = {} s):", r.duration_s);
    let _ = writeln!(out, "  {:<16} {:<6} {:>10}", "player", "site", "latency");
    const SHOWN: usize = 40;
    for (name, f) in r.final_players.iter().take(SHOWN) {
        let _ = writeln!(out, "  {name:<16} {:<6} {:>7.1} ms", f.site, f.latency_ms);
    }
    if r.final_players.len() > SHOWN {
        let _ =
            writeln!(out, "  … and {} more (use --json for all)", r.final_players.len() - SHOWN);
    }
    let sites: Vec<String> = r
        .bubbles_by_site
        .iter()
        .map(|(s, n)| {
            format!("{s}: {n} bubbles / {} servers", r.servers_by_site.get(s).copied().unwrap_or(0))
        })
        .collect();
    let _ = writeln!(
        out,
        "  {}",
        if sites.is_empty() { "no bubbles".to_owned() } else { sites.join(", ") }
    );
    out
}
