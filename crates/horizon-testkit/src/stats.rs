//! Figures of the bots' samples: quantiles, freezes per pair of sites, percentiles per home.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::bots::BotReport;

/// The `p` quantile (0–1) of sorted samples, nearest rank; `None` without samples.
pub fn quantile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get((last as f64 * p.clamp(0.0, 1.0)).round() as usize).copied()
}

/// Freezes timed at the players' gateways, per `"FROM-TO"` pair of sites, in ms: every gap,
/// and the gap beyond its physical floor for those whose floor is known (the player's home is
/// one end, or both ends are one site), 0 when under it.
#[derive(Debug, Default)]
pub struct FreezesByPair {
    pub gaps_ms: BTreeMap<String, Vec<f64>>,
    pub excess_ms: BTreeMap<String, Vec<f64>>,
}

/// Groups `samples` (see [`FreezesByPair`]).
pub fn freezes_by_pair(samples: &[horizon_agent::FreezeSample]) -> FreezesByPair {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut out = FreezesByPair::default();
    for s in samples {
        let pair = format!("{}-{}", s.from, s.to);
        if let Some(floor) = s.floor {
            out.excess_ms.entry(pair.clone()).or_default().push(ms(s.gap.saturating_sub(floor)));
        }
        out.gaps_ms.entry(pair).or_default().push(ms(s.gap));
    }
    out
}

/// Percentiles per home site of one of the bots' samples (`|r| &r.click_ms`).
pub fn percentiles(
    reports: &[BotReport],
    samples: fn(&BotReport) -> &[f64],
) -> BTreeMap<String, serde_json::Value> {
    let mut per: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in reports {
        per.entry(r.site.clone()).or_default().extend(samples(r).iter().copied());
    }
    per.into_iter()
        .map(|(site, mut v)| {
            v.sort_by(f64::total_cmp);
            let q = |p: f64| quantile(&v, p);
            let round = |x: Option<f64>| x.map(|x| (x * 10.0).round() / 10.0);
            let doc = serde_json::json!({"p50": round(q(0.5)), "p95": round(q(0.95)), "p99": round(q(0.99)), "samples": v.len()});
            (site, doc)
        })
        .collect()
}
