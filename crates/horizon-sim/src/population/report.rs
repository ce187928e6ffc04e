//! The population report: JSON for machines, markdown with SVG plots for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::policy::Policy;

/// Percentiles of click-to-screen, in whole milliseconds (1 ms buckets, upper edge).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    /// Player-ticks measured.
    pub samples: u64,
}

/// One policy's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyReport {
    /// Per home site, over the player-time of playing humans (AFK and NPCs excluded).
    pub click_to_screen_ms: BTreeMap<String, Percentiles>,
    /// The same, only while a player is alone in their bubble (the article's lone player).
    pub solo_click_to_screen_ms: BTreeMap<String, Percentiles>,
    /// Share of player-time whose latency (network only) exceeds the fairness cap.
    pub over_cap_share: f64,
    /// Changes of site of a running simulation: moves, merges across sites, players leaving a
    /// core zone or another world's bubble for a bubble on another site.
    pub handovers: u64,
    pub handovers_per_hour: f64,
    /// Per hour and per 1,000 concurrent players (the mean over the run).
    pub handovers_per_hour_per_1000: f64,
    /// Bubble moves (scoring decisions and failovers).
    pub moves: u64,
    /// Share of moves that take a bubble back to the site it left less than 10 min before.
    pub reversed_within_10min_share: f64,
    /// Those reversals, by what changed since the move they undo.
    pub reversed: Reversals,
    /// Players crossing a border into a bubble on another site (single-player handovers).
    pub border_crossings: u64,
    /// SMD's zone splits and merges at the core site, and the most zones at one sample.
    pub zone_splits: u64,
    pub zone_merges: u64,
    pub max_zones: u32,
    /// Share of players whose mean latency is at least 25 ms below their mean under `all_core`.
    pub gain_25ms_vs_all_core_share: f64,
    pub max_bubbles_by_site: BTreeMap<String, u32>,
    /// Game servers running, several regions each as the agents seat them (and the core
    /// site's zone servers for players outside every bubble).
    pub max_servers_by_site: BTreeMap<String, u32>,
    /// The most servers running at one sample, every site together.
    pub max_servers: u32,
    /// The most counted players simulated at one sample over the most servers running at one
    /// sample, every site together (the cost: SMD at one site seats 60 of 75).
    pub players_per_server_at_peak: f64,
    /// The most servers simulating more than `players_per_server` at one sample (regions grew
    /// after they were seated; a server over it for 10 s gives whole regions away).
    pub max_overfull_servers: u32,
    /// Server-seconds over `players_per_server`, every site together; and of them, those past
    /// the grace a region needs to be cut by SMD's rule (`split_after_samples` samples and the
    /// settle window): 0 when nothing stays over capacity longer than the rule allows.
    pub overfull_server_s: f64,
    pub overfull_server_s_beyond_grace: f64,
    /// The most counted players one region (a bubble's part, a zone) held at a tick: what one
    /// game server carried.
    pub largest_region_players: u32,
    /// Regions moved whole off overfull servers to another server of their site.
    pub region_moves: u64,
    /// The most counted players in one bubble, and the widest side of one bubble grown around
    /// players (a fixed delegation's region, its configured box, left out) (sampled).
    pub largest_bubble_players: u32,
    pub widest_bubble_km: f64,
    /// Wall time this policy's worker took.
    pub wall_s: f64,
}

/// Moves that took a bubble back to the site it left within 10 min, by what changed in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Reversals {
    /// Players joined or left the bubble.
    pub membership: u64,
    /// The same players, but their roles (AFK, pilot) or access RTTs changed: their weights did.
    pub roles: u64,
    /// Nothing the scoring reads changed: flapping proper (hysteresis keeps it at zero).
    pub unchanged: u64,
}

/// Figures of the population itself, the same for every policy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PopulationFigures {
    pub sessions: u64,
    pub mean_online: f64,
    pub peak_online: u64,
    pub npcs: u64,
    pub large_events: u64,
    /// Of the player-time spent in a bubble with others, the share in a bubble mixing home sites.
    pub mixed_home_share_of_grouped: f64,
    /// Where the players of homes with `cities` lived, and their access round trips.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cities: Vec<CityFigures>,
}

/// The sessions of one city (`[[homes.X.cities]]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CityFigures {
    pub home: String,
    pub city: String,
    pub sessions: u64,
    /// The route to the home site and back: great circle at fibre speed × `path_stretch`.
    pub route_ms: f64,
    /// Access RTT (route + last mile) over the sessions: p50, p95, rounded to 0.1 ms.
    pub access_p50_ms: f64,
    pub access_p95_ms: f64,
}

/// Per site, sampled every `sample_every_s`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteSeries {
    pub bubbles: BTreeMap<String, Vec<u32>>,
    pub servers: BTreeMap<String, Vec<u32>>,
    /// Counted players simulated on each site (bubbles and core zones).
    pub simulated_players: BTreeMap<String, Vec<u32>>,
}

/// Time series over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub t_h: Vec<f64>,
    pub online_by_home: BTreeMap<String, Vec<u32>>,
    pub policies: BTreeMap<String, SiteSeries>,
}

/// The result of `horizon sim population`; serialised as its `--json` document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PopulationReport {
    pub name: String,
    pub seed: u64,
    pub players: u32,
    pub hours: f64,
    pub tick_s: f64,
    pub frame_ms: f64,
    pub cap_ms: f64,
    /// What the `fixed` policy delegates (`[[delegations]]`), e.g. `world 0 → MTL`.
    pub delegations: Vec<String>,
    /// Simulated time over the wall time of the whole run (every policy, in parallel).
    pub sim_seconds_per_wall_second: f64,
    pub wall_s: f64,
    pub population: PopulationFigures,
    pub policies: BTreeMap<String, PolicyReport>,
    pub series: Series,
    /// Click-to-screen histograms (1 ms buckets) per policy and home site, for the plots.
    #[serde(skip)]
    pub histograms: BTreeMap<String, BTreeMap<String, Vec<u64>>>,
}

const COLOURS: [&str; 6] = ["#1f6feb", "#d1242f", "#8250df", "#bf8700", "#6e7781", "#1a7f37"];

impl PopulationReport {
    fn ordered(&self) -> impl Iterator<Item = (&'static str, &PolicyReport)> {
        Policy::names().into_iter().filter_map(|n| self.policies.get(n).map(|p| (n, p)))
    }

    fn sites(&self) -> Vec<String> {
        self.series.online_by_home.keys().cloned().collect()
    }

    /// The markdown report; it links `latency.svg`, `bubbles.svg` and `online.svg`.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let p = &self.population;
        let _ = writeln!(md, "# Population report: {}\n", self.name);
        let _ = writeln!(
            md,
            "Seed {}, {} average concurrent players over {} h (tick {} s), server frame time {} ms, \
             fairness cap {} ms. {} sessions, {:.0} online on average, {} at peak, {} NPCs, {} large \
             events. Of the player-time spent in a bubble with others, {:.1} % was in a bubble mixing \
             home sites.\n",
            self.seed,
            self.players,
            self.hours,
            self.tick_s,
            self.frame_ms,
            self.cap_ms,
            p.sessions,
            p.mean_online,
            p.peak_online,
            p.npcs,
            p.large_events,
            100.0 * p.mixed_home_share_of_grouped
        );
        let _ = writeln!(
            md,
            "Ran at {:.0} simulated seconds per wall second ({:.1} s of wall time, every policy \
             in parallel over the real `horizon-mesh`).\n",
            self.sim_seconds_per_wall_second, self.wall_s
        );
        if !p.cities.is_empty() {
            md.push_str("## Where the players live\n\n");
            md.push_str(
                "Access RTT to the home site: the city's route (great circle at fibre speed × \
                 `path_stretch`) plus the last mile.\n\n",
            );
            md.push_str("| home | city | sessions | route (ms) | access p50 / p95 (ms) |\n");
            md.push_str("|---|---|---|---|---|\n");
            for c in &p.cities {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.0} | {:.0} / {:.0} |",
                    c.home, c.city, c.sessions, c.route_ms, c.access_p50_ms, c.access_p95_ms
                );
            }
            md.push('\n');
        }
        let sites = self.sites();
        md.push_str("## Click-to-screen per home site (ms, p50 / p95 / p99)\n\n");
        md.push_str(
            "Network latency (access RTT + backbone RTT to the simulating site) plus the \
                     server frame time, over the player-time of playing humans.\n\n",
        );
        let mut columns: Vec<String> = sites.clone();
        columns.extend(["over cap".to_owned(), "gain ≥ 25 ms vs all_core".to_owned()]);
        table_header(&mut md, &columns);
        for (name, r) in self.ordered() {
            let _ = write!(md, "| `{name}` |");
            for s in &sites {
                match r.click_to_screen_ms.get(s) {
                    Some(x) => {
                        let _ = write!(md, " {:.0} / {:.0} / {:.0} |", x.p50, x.p95, x.p99);
                    }
                    None => md.push_str(" – |"),
                }
            }
            let _ = writeln!(
                md,
                " {:.2} % | {:.1} % |",
                100.0 * r.over_cap_share,
                100.0 * r.gain_25ms_vs_all_core_share
            );
        }
        md.push_str(
            "\n`nearest` puts every player on their own home site and ignores groups: it \
                     cuts groups apart, so it is not playable; it is the lower bound.\n\n",
        );
        md.push_str("![click-to-screen distributions](latency.svg)\n\n");
        self.stages(&mut md, &sites);

        md.push_str("## A player alone in their bubble (ms, p50)\n\n");
        md.push_str(
            "The article's headline: simulated at the core, a player alone from another \
                     continent crosses the backbone twice per step.\n\n",
        );
        table_header(&mut md, &sites);
        for (name, r) in self.ordered().filter(|(n, _)| *n != "nearest") {
            let _ = write!(md, "| `{name}` |");
            for s in &sites {
                match r.solo_click_to_screen_ms.get(s) {
                    Some(x) => {
                        let _ = write!(md, " {:.0} |", x.p50);
                    }
                    None => md.push_str(" – |"),
                }
            }
            md.push('\n');
        }

        md.push_str("\n## Handovers and stability\n\n");
        md.push_str(
            "| policy | handovers | per hour | per hour per 1,000 players | moves | \
                     reversed within 10 min | … players joined or left | … roles changed | \
                     … nothing changed | border crossings |\n\
                     |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (name, r) in self.ordered() {
            let _ = writeln!(
                md,
                "| `{name}` | {} | {:.1} | {:.2} | {} | {:.2} % | {} | {} | {} | {} |",
                r.handovers,
                r.handovers_per_hour,
                r.handovers_per_hour_per_1000,
                r.moves,
                100.0 * r.reversed_within_10min_share,
                r.reversed.membership,
                r.reversed.roles,
                r.reversed.unchanged,
                r.border_crossings
            );
        }
        md.push_str(
            "\nA handover is a change of the site simulating a running region: a move, a \
                     merge across sites, or players leaving a core zone for a bubble elsewhere. \
                     A move is *reversed* when the same bubble goes back to the site it left \
                     within 10 minutes. Each reversal is counted by what changed since the move \
                     it undoes: the players in the bubble, or only their roles (a player going \
                     AFK weighs 0.05, a pilot 2), or nothing the scoring reads — the last is \
                     flapping proper, which hysteresis must keep at zero.\n\n",
        );

        md.push_str("## Bubbles and servers per site (maximum over the run)\n\n");
        let mut columns: Vec<String> =
            sites.iter().flat_map(|s| [format!("{s} bubbles"), format!("{s} servers")]).collect();
        columns.extend([
            "largest bubble (players)".to_owned(),
            "widest bubble around players (km)".to_owned(),
        ]);
        table_header(&mut md, &columns);
        for (name, r) in self.ordered().filter(|(n, _)| *n != "nearest") {
            let _ = write!(md, "| `{name}` |");
            for s in &sites {
                let b = r.max_bubbles_by_site.get(s).copied().unwrap_or(0);
                let v = r.max_servers_by_site.get(s).copied().unwrap_or(0);
                let _ = write!(md, " {b} | {v} |");
            }
            let _ = writeln!(md, " {} | {} |", r.largest_bubble_players, r.widest_bubble_km);
        }
        md.push_str(
            "\n## Cost: game servers\n\n\
             A server holds several regions up to `players_per_server × pack_fill_ratio` \
             players, seated by the agents' own rule; the core site's zones are regions \
             too (under `all_core`, today's SMD, they are all there is). *Players per server* is the most players \
             simulated at one sample over the most servers running at one sample. SMD at one \
             site, full to 80 % of 75, seats 60. A server over 75 for 10 s gives whole regions \
             away to another server of its site (*region moves*), as the agents do. A region \
             over 75 is cut by SMD's rule (every kind alike: zones and bubbles' parts) after 10 \
             load samples and the 15 s settle window: *overfull server-seconds* counts every \
             second a server spent over 75, and in brackets those past that grace. The \
             *largest region* is what one server carried at most.\n\n",
        );
        table_header(
            &mut md,
            &[
                "servers at peak (all sites)".to_owned(),
                "players per server at peak".to_owned(),
                "overfull servers (max)".to_owned(),
                "overfull server-seconds (beyond sustain + settle)".to_owned(),
                "largest region (players)".to_owned(),
                "region moves".to_owned(),
                "zones (max)".to_owned(),
                "zone splits / merges".to_owned(),
            ],
        );
        for (name, r) in self.ordered().filter(|(n, _)| *n != "nearest") {
            let _ = writeln!(
                md,
                "| `{name}` | {} | {:.1} | {} | {:.0} ({:.0}) | {} | {} | {} | {} / {} |",
                r.max_servers,
                r.players_per_server_at_peak,
                r.max_overfull_servers,
                r.overfull_server_s,
                r.overfull_server_s_beyond_grace,
                r.largest_region_players,
                r.region_moves,
                r.max_zones,
                r.zone_splits,
                r.zone_merges
            );
        }
        md.push_str("\n![bubbles per site over the day](bubbles.svg)\n\n");
        md.push_str("![players online per home site](online.svg)\n");
        md
    }

    /// The rollout plan (design.md §8's stages), each stage read off the policy it places
    /// as: click-to-screen p50 / p95 per home site and the servers it needs.
    fn stages(&self, md: &mut String, sites: &[String]) {
        md.push_str(
            "## The rollout, stage by stage

",
        );
        let delegated = if self.delegations.is_empty() {
            "no delegation configured: placed as `all_core`".to_owned()
        } else {
            self.delegations.join(", ")
        };
        let stages: [(&str, &str, String); 4] = [
            (
                "1 `measure`",
                "all_core",
                "everyone enters at the core site and plays as today; the core counts who \
                 would gain ≥ 25 ms from a relay site (last column of the table above, from \
                 the players' probe tables on a real mesh)"
                    .to_owned(),
            ),
            (
                "2 `relay`",
                "all_core",
                "players enter at their home site and ride the backbone to the core: the \
                 same latency in this model (real paths often gain on the public internet), \
                 the agents and links proven, no handover"
                    .to_owned(),
            ),
            (
                "3 `fixed`",
                "fixed",
                format!(
                    "delegated regions run on their relay site ({delegated}): handovers and \
                     failures rehearsed on one region; its own players gain, its visitors pay"
                ),
            ),
            (
                "4–5 `dynamic`",
                "smdg",
                "every group simulated on its best site, re-placed as it moves".to_owned(),
            ),
        ];
        let mut columns: Vec<String> = sites.iter().map(|s| format!("{s} p50 / p95")).collect();
        columns.push("servers at peak".to_owned());
        table_header_with(md, &["stage", "placed as", "what it buys"], &columns);
        for (stage, policy, buys) in &stages {
            let Some(r) = self.policies.get(*policy) else { continue };
            let _ = write!(md, "| {stage} | `{policy}` | {buys} |");
            for s in sites {
                match r.click_to_screen_ms.get(s) {
                    Some(x) => {
                        let _ = write!(md, " {:.0} / {:.0} |", x.p50, x.p95);
                    }
                    None => md.push_str(" – |"),
                }
            }
            let _ = writeln!(md, " {} |", r.max_servers);
        }
        md.push('\n');
    }

    /// Cumulative distributions of click-to-screen, one panel per home site, one line per policy.
    pub fn latency_svg(&self) -> String {
        let sites = self.sites();
        let (pw, ph, x_max) = (300.0, 220.0, 400.0);
        let mut svg = Svg::new(pw * sites.len() as f64 + 40.0, ph + 90.0);
        svg.text(
            20.0,
            22.0,
            14.0,
            "Click-to-screen (ms): share of player-time at or below",
            "start",
        );
        for (k, site) in sites.iter().enumerate() {
            let panel = Panel { x0: 50.0 + k as f64 * pw, y0: 40.0, w: pw - 50.0, h: ph - 40.0 };
            panel.axes(&mut svg, &format!("home {site}"), x_max, 1.0, "ms", 100.0, 0.25);
            for (c, name) in Policy::names().into_iter().enumerate() {
                let Some(h) = self.histograms.get(name).and_then(|m| m.get(site)) else {
                    continue;
                };
                let total: u64 = h.iter().sum();
                if total == 0 {
                    continue;
                }
                let mut acc = 0u64;
                let mut pts = vec![(0.0, 0.0)];
                for (b, &n) in h.iter().enumerate().take(x_max as usize) {
                    acc += n;
                    pts.push(((b + 1) as f64, acc as f64 / total as f64));
                }
                panel.line(&mut svg, &pts, x_max, 1.0, COLOURS[c]);
            }
        }
        legend(&mut svg, 50.0, ph + 60.0, &Policy::names());
        svg.finish()
    }

    /// Bubbles per site over the run, one panel per brain policy.
    pub fn bubbles_svg(&self) -> String {
        let names: Vec<&str> =
            Policy::names().into_iter().filter(|n| *n != Policy::Nearest.as_str()).collect();
        let sites = self.sites();
        let (pw, ph) = (300.0, 200.0);
        let mut svg = Svg::new(pw * names.len() as f64 + 40.0, ph + 90.0);
        svg.text(20.0, 22.0, 14.0, "Bubbles per site over the run (hours, UTC)", "start");
        let y_max = names
            .iter()
            .filter_map(|n| self.series.policies.get(*n))
            .flat_map(|s| s.bubbles.values().flatten().copied())
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let y_max = nice(y_max);
        for (k, name) in names.iter().enumerate() {
            let panel = Panel { x0: 50.0 + k as f64 * pw, y0: 40.0, w: pw - 50.0, h: ph - 40.0 };
            panel.axes(&mut svg, name, self.hours, y_max, "h", tick_step(self.hours), y_max / 4.0);
            let Some(s) = self.series.policies.get(*name) else { continue };
            for (c, site) in sites.iter().enumerate() {
                let Some(v) = s.bubbles.get(site) else { continue };
                panel.line(&mut svg, &self.over_time(v), self.hours, y_max, COLOURS[c]);
            }
        }
        let labels: Vec<&str> = sites.iter().map(String::as_str).collect();
        legend(&mut svg, 50.0, ph + 60.0, &labels);
        svg.finish()
    }

    /// A time series as (hours, value) points.
    fn over_time(&self, values: &[u32]) -> Vec<(f64, f64)> {
        self.series.t_h.iter().zip(values).map(|(&t, &n)| (t, f64::from(n))).collect()
    }

    /// Players online per home site over the run.
    pub fn online_svg(&self) -> String {
        let sites = self.sites();
        let (pw, ph) = (620.0, 240.0);
        let mut svg = Svg::new(pw + 40.0, ph + 90.0);
        svg.text(20.0, 22.0, 14.0, "Players online per home site (hours, UTC)", "start");
        let y_max =
            nice(self.series.online_by_home.values().flatten().copied().max().unwrap_or(1).max(1)
                as f64);
        let panel = Panel { x0: 60.0, y0: 40.0, w: pw - 60.0, h: ph - 40.0 };
        panel.axes(&mut svg, "", self.hours, y_max, "h", tick_step(self.hours), y_max / 4.0);
        for (c, site) in sites.iter().enumerate() {
            let v = &self.series.online_by_home[site];
            panel.line(&mut svg, &self.over_time(v), self.hours, y_max, COLOURS[c]);
        }
        let labels: Vec<&str> = sites.iter().map(String::as_str).collect();
        legend(&mut svg, 60.0, ph + 60.0, &labels);
        svg.finish()
    }
}

/// `| policy | a | b |` and its alignment row (figures right-aligned).
fn table_header(md: &mut String, columns: &[String]) {
    table_header_with(md, &["policy"], columns);
}

/// `| t1 | t2 | a | b |` and its alignment row: the `text` columns left-aligned, the figures'
/// right-aligned.
fn table_header_with(md: &mut String, text: &[&str], columns: &[String]) {
    md.push('|');
    for t in text {
        let _ = write!(md, " {t} |");
    }
    for c in columns {
        let _ = write!(md, " {c} |");
    }
    md.push_str("\n|");
    for _ in text {
        md.push_str("---|");
    }
    for _ in columns {
        md.push_str("---:|");
    }
    md.push('\n');
}

fn nice(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * p).find(|&v| v >= x).unwrap_or(10.0 * p)
}

fn tick_step(hours: f64) -> f64 {
    if hours > 12.0 {
        6.0
    } else if hours > 4.0 {
        2.0
    } else {
        (hours / 4.0).max(0.25)
    }
}

fn legend(svg: &mut Svg, x: f64, y: f64, labels: &[&str]) {
    for (i, l) in labels.iter().enumerate() {
        let x = x + i as f64 * 110.0;
        svg.push(format!(
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="3"/>"#,
            x + 24.0,
            COLOURS[i % COLOURS.len()]
        ));
        svg.text(x + 30.0, y + 4.0, 12.0, l, "start");
    }
}

/// A minimal SVG writer: enough for line charts that render on GitHub.
struct Svg {
    w: f64,
    h: f64,
    body: String,
}

impl Svg {
    fn new(w: f64, h: f64) -> Self {
        Svg { w, h, body: String::new() }
    }

    fn push(&mut self, s: String) {
        self.body.push_str(&s);
        self.body.push('\n');
    }

    fn text(&mut self, x: f64, y: f64, size: f64, s: &str, anchor: &str) {
        let s = s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        self.push(format!(
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}">{s}</text>"#
        ));
    }

    fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\">\n\
             <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n{}</svg>\n",
            self.body,
            w = self.w,
            h = self.h
        )
    }
}

struct Panel {
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
}

impl Panel {
    fn px(&self, x: f64, x_max: f64) -> f64 {
        self.x0 + self.w * (x / x_max).clamp(0.0, 1.0)
    }

    fn py(&self, y: f64, y_max: f64) -> f64 {
        self.y0 + self.h * (1.0 - (y / y_max).clamp(0.0, 1.0))
    }

    #[allow(clippy::too_many_arguments)]
    fn axes(
        &self,
        svg: &mut Svg,
        title: &str,
        x_max: f64,
        y_max: f64,
        unit: &str,
        dx: f64,
        dy: f64,
    ) {
        let (x1, y1) = (self.x0 + self.w, self.y0 + self.h);
        svg.text(self.x0 + self.w / 2.0, self.y0 - 6.0, 12.0, title, "middle");
        let mut y = 0.0;
        while y <= y_max + 1e-9 {
            let py = self.py(y, y_max);
            svg.push(format!(
                r##"<line x1="{:.1}" y1="{py:.1}" x2="{x1:.1}" y2="{py:.1}" stroke="#d0d7de" stroke-width="0.5"/>"##,
                self.x0
            ));
            let label = if y_max <= 1.0 { format!("{:.0}%", y * 100.0) } else { format!("{y:.0}") };
            svg.text(self.x0 - 4.0, py + 4.0, 10.0, &label, "end");
            y += dy;
        }
        let mut x = 0.0;
        while x <= x_max + 1e-9 {
            let px = self.px(x, x_max);
            svg.push(format!(
                r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{y1:.1}" stroke="#d0d7de" stroke-width="0.5"/>"##,
                self.y0
            ));
            svg.text(px, y1 + 14.0, 10.0, &format!("{x:.0}"), "middle");
            x += dx;
        }
        svg.text(x1, y1 + 28.0, 10.0, unit, "end");
        svg.push(format!(
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#57606a"/>"##,
            self.x0, self.y0, self.w, self.h
        ));
    }

    fn line(&self, svg: &mut Svg, pts: &[(f64, f64)], x_max: f64, y_max: f64, colour: &str) {
        let mut d = String::new();
        let mut last: Option<(f64, f64)> = None;
        for &(x, y) in pts {
            let (px, py) = (self.px(x, x_max), self.py(y, y_max));
            // Thin the path: skip points that land on the same pixel as the previous one.
            if last.is_some_and(|(lx, ly)| (px - lx).abs() < 0.5 && (py - ly).abs() < 0.5) {
                continue;
            }
            let _ = write!(d, "{}{px:.1},{py:.1} ", if last.is_none() { "M" } else { "L" });
            last = Some((px, py));
        }
        svg.push(format!(
            r#"<path d="{}" fill="none" stroke="{colour}" stroke-width="1.6"/>"#,
            d.trim_end()
        ));
    }
}
