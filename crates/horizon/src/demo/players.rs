//! Who plays in `horizon demo`: 60 players from three continents in groups that meet, dash and
//! leave, deterministic; and, under the measure stage, where each enters from where they live.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use horizon_core::Stage;
use horizon_proto::Role;
use horizon_testkit::Sandbox;
use horizon_testkit::bots::{self, Away, BotSpec, Motion};

/// A group of players around one point: the first is the host (joins first).
struct Group {
    host: &'static str,
    guests: &'static [(&'static str, usize)],
    motion: Motion,
}

const GROUPS: &[Group] = &[
    // A Parisian hosting Montrealers: the host plays in PAR's zone; the group's bubble is
    // carved out of it for MTL once MTL has been best for the dwell time.
    Group {
        host: "PAR",
        guests: &[("MTL", 3)],
        motion: Motion::Wander { radius_m: 40.0, speed_mps: 1.5 },
    },
    Group {
        host: "PAR",
        guests: &[("MTL", 3)],
        motion: Motion::Wander { radius_m: 40.0, speed_mps: 1.5 },
    },
    Group { host: "PAR", guests: &[("MTL", 3)], motion: Motion::Still },
    // A Montrealer hosting four Hong Kong players: starts on MTL, handed over to HKG after the
    // dwell (no site keeps everyone under the cap; HKG costs least).
    Group {
        host: "MTL",
        guests: &[("HKG", 4)],
        motion: Motion::Wander { radius_m: 40.0, speed_mps: 1.5 },
    },
    // One from each continent: Paris is in the middle, they play in its zone. With groups 5 to
    // 7, 18 and 19, the Paris crowd in the zone (21 players): cut under the default stage
    // (demo-sized servers), and joined again once groups 5 and 6 leave (`DYNAMIC_DISPERSE`).
    Group { host: "PAR", guests: &[("MTL", 1), ("HKG", 1)], motion: Motion::Still },
    Group {
        host: "PAR",
        guests: &[("PAR", 4)],
        motion: Motion::Wander { radius_m: 60.0, speed_mps: 1.5 },
    },
    Group { host: "PAR", guests: &[("PAR", 5)], motion: Motion::Still },
    Group {
        host: "PAR",
        guests: &[("PAR", 4)],
        motion: Motion::Circle { radius_m: 2000.0, speed_mps: 120.0 },
    },
    Group {
        host: "MTL",
        guests: &[("MTL", 3)],
        motion: Motion::Wander { radius_m: 60.0, speed_mps: 1.5 },
    },
    Group {
        host: "MTL",
        guests: &[("MTL", 3)],
        motion: Motion::Circle { radius_m: 2000.0, speed_mps: 120.0 },
    },
    Group {
        host: "HKG",
        guests: &[("HKG", 3)],
        motion: Motion::Wander { radius_m: 60.0, speed_mps: 1.5 },
    },
    Group { host: "HKG", guests: &[("HKG", 3)], motion: Motion::Still },
    // Lone players, each on their own site.
    Group { host: "MTL", guests: &[], motion: Motion::Wander { radius_m: 200.0, speed_mps: 1.5 } },
    Group { host: "MTL", guests: &[], motion: Motion::Still }, // leaves (LEAVERS)
    Group { host: "MTL", guests: &[], motion: Motion::Still }, // flies to group 12 (DASHERS)
    Group { host: "HKG", guests: &[], motion: Motion::Wander { radius_m: 200.0, speed_mps: 1.5 } },
    Group { host: "HKG", guests: &[], motion: Motion::Still }, // leaves (LEAVERS)
    Group { host: "HKG", guests: &[], motion: Motion::Still }, // flies to group 10 (DASHERS)
    Group { host: "PAR", guests: &[], motion: Motion::Still },
    Group { host: "PAR", guests: &[], motion: Motion::Wander { radius_m: 200.0, speed_mps: 1.5 } },
];

/// Groups this far apart never meet.
const GROUP_SPACING_M: f64 = 40_000.0;

/// Lone players who fly to another group (group, target group, after s): a preventive merge
/// folds one bubble into the other, and a player's state crosses to the new holder.
const DASHERS: &[(usize, usize, u64)] = &[(14, 12, 30), (17, 10, 40)];
/// Lone players who leave before the end (group, after s).
const LEAVERS: &[(usize, u64)] = &[(13, 45), (16, 50)];
/// A dasher starts this far from its target, and flies this fast.
const DASH_FROM_M: f64 = 9_000.0;
const DASH_MPS: f64 = 200.0;

/// Under the relay stage, the groups before this one leave after this many seconds: the crowd
/// that cut the world's zone disperses, and the zones are joined again, the latest cut first.
pub(super) const RELAY_DISPERSE: (usize, u64) = (12, 35);

/// Under the default stage, these groups of Parisians leave after this many seconds: the
/// Paris crowd that cut PAR's zone thins out, and the zones are joined again.
pub(super) const DYNAMIC_DISPERSE: (&[usize], u64) = (&[5, 6], 45);

/// Under the fixed stage, the demo delegates this box of its players' world to this site: the
/// groups up to 487 km along x (groups 0 to 12) play in its one region; the others in the core
/// site's zone, and the dasher of group 14 flies into the region at 40 s, crossing from the zone.
pub(super) const FIXED_WORLD: u32 = 1;
pub(super) const FIXED_SITE: &str = "MTL";
pub(super) const FIXED_BOX: ([f64; 3], [f64; 3]) =
    ([-10_000.0; 3], [487_000.0, 10_000.0, 10_000.0]);

/// Stages that simulate everyone in the core site's zones: the demo's crowd cuts a zone and
/// leaves, as under `relay`.
pub(super) fn zoned(stage: Stage) -> bool {
    matches!(stage, Stage::Measure | Stage::Relay)
}

/// Under the measure stage, every player enters at the core site's gateway from where they
/// live (access plus the backbone from their home), and measures every site's beacon from
/// there first, joining with the table.
pub(super) async fn enter_at_the_core(
    sandbox: &mut Sandbox,
    specs: &mut [BotSpec],
) -> Result<(), String> {
    let core = sandbox.core_site().to_owned();
    let sites: Vec<String> = sandbox.gateways.keys().cloned().collect();
    let mut reach: BTreeMap<String, (SocketAddr, Vec<(String, SocketAddr)>)> = BTreeMap::new();
    for spec in specs.iter_mut() {
        if !reach.contains_key(&spec.site) {
            let mut beacons = Vec::new();
            for site in &sites {
                let (_, beacon) = sandbox
                    .reach(&spec.site, site)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no beacon at {site}"))?;
                beacons.push((site.clone(), beacon));
            }
            let (gateway, _) = sandbox
                .reach(&spec.site, &core)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no gateway at {core}"))?;
            reach.insert(spec.site.clone(), (gateway, beacons));
        }
        let (gateway, beacons) = reach[&spec.site].clone();
        spec.gateway = gateway;
        spec.enters_at = Some(core.clone());
        spec.measure = Some(bots::Measure { beacons, lie: None, gateways: BTreeMap::new() });
    }
    Ok(())
}

/// The demo's players, deterministic.
pub(crate) fn population(gateways: &BTreeMap<String, SocketAddr>, stage: Stage) -> Vec<BotSpec> {
    let mut bots = Vec::new();
    for (g, group) in GROUPS.iter().enumerate() {
        let dash = DASHERS.iter().find(|d| d.0 == g);
        let disperse = match stage {
            _ if zoned(stage) => (g < RELAY_DISPERSE.0).then_some(RELAY_DISPERSE.1),
            Stage::Dynamic => DYNAMIC_DISPERSE.0.contains(&g).then_some(DYNAMIC_DISPERSE.1),
            _ => None,
        };
        let leave = LEAVERS
            .iter()
            .find(|l| l.0 == g)
            .map(|l| l.1)
            .into_iter()
            .chain(disperse)
            .min()
            .map(Duration::from_secs);
        let centre = match dash {
            Some(&(_, to, _)) => [to as f64 * GROUP_SPACING_M + DASH_FROM_M, 0.0, 0.0],
            None => [g as f64 * GROUP_SPACING_M, 0.0, 0.0],
        };
        let motion = match dash {
            Some(&(_, to, after)) => Motion::Dash {
                after_s: after as f64,
                to_x: to as f64 * GROUP_SPACING_M + 20.0,
                speed_mps: DASH_MPS,
            },
            None => group.motion,
        };
        let pilots = matches!(group.motion, Motion::Circle { .. });
        let mut members: Vec<&str> = vec![group.host];
        for (site, n) in group.guests {
            members.extend(std::iter::repeat_n(*site, *n));
        }
        for (i, site) in members.iter().enumerate() {
            let Some(&gateway) = gateways.get(*site) else { continue };
            bots.push(BotSpec {
                name: format!("{}-g{g}-{i}", site.to_ascii_lowercase()),
                site: (*site).to_owned(),
                gateway,
                role: if pilots && i == 0 { Role::Pilot } else { Role::Player },
                world: 1,
                start: [centre[0] + 5.0 * i as f64, 0.0, centre[2] + 3.0 * i as f64],
                motion,
                leave_after: leave,
                reconnect_after: None,
                claim: None,
                enters_at: None,
                measure: None,
                // Hosts first; guests once the host's bubble exists.
                join_after: Duration::from_millis(if i == 0 {
                    200 * g as u64 % 2000
                } else {
                    7000 + 150 * i as u64
                }),
                input_every: Duration::from_millis(100),
                afk: if g % 4 == 1 && i == 1 {
                    Away::Once(Duration::from_secs(30), Duration::from_secs(15))
                } else {
                    Away::Never
                },
            });
        }
    }
    bots
}
