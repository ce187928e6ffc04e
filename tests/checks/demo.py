"""The plain demo's checks on a `horizon demo --json` document: `python3 tests/checks/demo.py
FILE`. `.ci/run` runs it after each demo that must pass them: the process driver's, the
Kubernetes driver's, Godot's, and the relay, measure and fixed stages', which check what those
stages promise instead of the moves between sites that they do not make."""
import json, sys
d = json.load(open(sys.argv[1]))
c = d["click_to_screen_ms"]
# Under measure, as under relay, everyone plays in the core site's zones; players also enter at
# the core site's gateway, having measured every site first.
measure = d.get("stage") == "measure"
relay = d.get("stage") in ("relay", "measure")
# Under fixed, a box of the demo's world (groups 0-12) is delegated to MTL: one region there.
fixed = d.get("stage") == "fixed"
print(json.dumps({k: d[k] for k in ("players", "bubbles_by_site", "handovers", "inputs_sent",
      "inputs_applied", "inputs_in_flight", "inputs_applied_twice", "state_chain_breaks")}))
print({site: (v["p50"], v["p95"]) for site, v in c.items()})
assert d["players"] == 60, d["errors"]
if relay:
    # Everything in the core site's zones: no bubble, no server busy on a relay site, and a
    # crowd that cut the world's zone, then dispersed so that the zones were joined again.
    print("bubbles_max", d["bubbles_max"], "zones", d["zones"])
    assert d["handovers"] == 0 and d["bubbles_max"] == 0, "a bubble under the relay stage"
    assert d["max_servers_by_site"]["MTL"] == 0 and d["max_servers_by_site"]["HKG"] == 0
    assert d["zones"]["splits"] >= 1, "the crowd never cut the zone"
    assert d["zones"]["merges"] >= 1, "no zones joined after the crowd left"
elif fixed:
    # The delegation is one region on MTL, whoever is in it, and nothing else is a bubble; the
    # players outside its box play in PAR's zone, and the dasher of group 14 crossed from that
    # zone into the region (a crossing PAR-MTL).
    print("bubbles_by_site", d["bubbles_by_site"], "bubbles_max", d["bubbles_max"],
          "max_servers_by_site", d["max_servers_by_site"])
    assert d["bubbles_by_site"] == {"HKG": 0, "MTL": 1, "PAR": 0}, "not one region on the delegation's site"
    assert d["bubbles_max"] == 1, "a bubble other than the delegation's region"
    assert d["max_servers_by_site"]["HKG"] == 0, "HKG hosted something"
    assert d["crossing_freeze_ms"].get("PAR-MTL", {}).get("samples", 0) >= 1, "nobody crossed into the region"
else:
    # SMD-G: the Parisians play in PAR's zones, and bubbles are carved out of them only for
    # groups placed on MTL or HKG; the Paris crowd cut PAR's zone (demo-sized servers), then
    # thinned out so that the zones were joined again. A Montrealer's bubble joined by Hong
    # Kong players was handed over to HKG.
    print("bubbles_by_site", d["bubbles_by_site"], "zones", d["zones"], "settings", d["settings"])
    assert d["handovers"] >= 1, "no handover happened"
    assert d["bubbles_by_site"].get("PAR", 0) == 0, "a bubble on the core site"
    assert d["bubbles_by_site"].get("MTL", 0) >= 1 and d["bubbles_by_site"].get("HKG", 0) >= 1
    assert d["zones"]["splits"] >= 1, "the Paris crowd never cut PAR's zone"
    assert d["zones"]["merges"] >= 1, "no zones joined after the Paris crowd thinned out"
if measure:
    # Every player measured every site's beacon and found their own home nearest; the core
    # believed every table and counts the players online under their home, the relay sites'
    # players all gaining from a relay site (85 and 185 ms of backbone), Paris's none. The
    # home every figure counts a player under is that nearest site, though all entered at PAR.
    m = d["measure"]
    print("measure", m)
    assert m["players_measured"] == 60 and m["players_measured_nearest_their_home"] == 60, m
    assert m["players"] >= 1 and sum(h["players"] for h in m["by_home"].values()) == m["players"], m
    for home, share in m["would_gain_share_by_home"].items():
        assert share == (0.0 if home == "PAR" else 1.0), f"{home}: would gain {share}"
    par = m["by_home"].get("PAR", {"players": 0})["players"]
    assert abs(m["entered_at_lowest_rtt_share"] - par / m["players"]) < 1e-9, m
    assert m["home_matches_lowest_rtt_share"] == 1.0, m
    for site, players in m["players_by_home"].items():
        assert players == m["by_home"].get(site, {"players": 0})["players"], (site, m)
    assert m["players_by_home"]["MTL"] >= 1 and m["players_by_home"]["HKG"] >= 1, m
assert d["inputs_applied_twice"] == 0 and d["state_chain_breaks"] == 0
# A restarted agent ends its players' sessions: what they had sent unacknowledged is counted apart.
ended = d.get("inputs_unacked_in_ended_sessions", 0)
assert d["inputs_applied"] + d["inputs_in_flight"] + ended == d["inputs_sent"], "inputs lost"
# Inputs go every 100 ms: more than 3 s of them unacknowledged means a player stopped being served.
assert d["inputs_in_flight_max_per_player"] <= 30, "a player's inputs were stuck"
# Every handover froze its players for a while, measured at their gateways.
print("freeze_ms", d["freeze_ms"], "excess", d["freeze_excess_ms"])
if not relay and not fixed:
    assert sum(v["samples"] for v in d["freeze_ms"].values()) >= 1, "no freeze measured"
    assert d["freeze_excess_ms"]["samples"] >= 1, "no freeze with a known floor"
# Players fly into other groups and change bubble (or zone, when a zone is cut or joined): each
# change is timed at their gateway.
print("crossing_freeze_ms", d["crossing_freeze_ms"], "excess", d["crossing_freeze_excess_ms"])
assert sum(v["samples"] for v in d["crossing_freeze_ms"].values()) >= 1, "no change of bubble timed"
# Regression guards on those freezes beyond their physical floor (goals: handovers p99 10 ms,
# crossings p99 15 ms; docs/performance.md), each over the worst measured as said below; a
# pair's p99 is held only over 5 samples or more.
# - Handovers, 100 ms per pair: a target used to wait for its own next tick after the seal (a
#   pair's p99 ranged 0-31 ms over the demos). It now runs that tick as the seal lands: the
#   handover bench's worst of 720 handovers was 2.3 ms over the floor (p99 per direction at
#   most 0.8), the demos' 0 alone. Beside CI's other lanes, three fresh-clone runs
#   (2026-12-07) measured 0-32.5 ms, the worst in the Godot demo, where one handover moved 8
#   players at once (8 samples, one event): 32.5 failed the former guard of 25. Three times the
#   worst seen, as every wall-clock bound on real processes here; what the agents add is held
#   exactly in virtual time (`machine/tests/crossings.rs`) and by the handover bench.
# - Crossings, 400 ms per pair and 450 ms each: three times the worst seen beside CI's other
#   lanes, as every wall-clock bound on real processes here. The floor counts the target
#   server's tick; a crossing within a site also waits for the source server's tick to let the
#   player go (up to 33.5 ms more), and a zone's split or merge moves a crowd at once, so a run's
#   46 samples are 4 events, not 46 draws. The relay demo's crossings measured 8-17 ms over the
#   floor alone under `stress-ng --cpu 2`, 18-87 ms beside CI's other lanes in seven runs, and
#   100-133 ms in one CI run (p50 100.6: the four lanes' servers, Chromium among them, late to
#   their ticks), which failed the former guard of 120. What the agents add themselves is held
#   in virtual time instead: a crossing is forwarded in the step that lets it go
#   (horizon-agent `machine/tests/crossings.rs`, the gap is exactly the time the clock moved).
#   A crossing from a zone into a bubble just created on another site once froze 184 ms over
#   its floor (it waited for the bubble's server, and for orders queued one round trip each):
#   players now wait in the zone until the bubble runs, and the site's orders travel together.
print("excess by pair", d["freeze_excess_ms_by_pair"], d["crossing_freeze_excess_ms_by_pair"])
for kind, guard in (("freeze_excess_ms_by_pair", 100), ("crossing_freeze_excess_ms_by_pair", 400)):
    for pair, v in d[kind].items():
        assert v["samples"] < 5 or v["p99"] <= guard, f"{kind} {pair}: p99 {v['p99']} ms over {guard}"
for pair, v in d["crossing_freeze_excess_ms_by_pair"].items():
    assert v["max"] <= 450, f"a crossing {pair} froze {v['max']} ms beyond its floor"
# SMD-G simulates each group near its players; the relay stage simulates everyone at the core,
# so a relay site's players see their input a backbone round trip later than Paris does.
# Under fixed, most play at MTL: Paris's players are 85 ms behind, Hong Kong's 225.
# Within 15 ms of it; under fixed, 45: there Paris's players cross the backbone twice per
# input and Montreal's not at all, so the load beside CI's other lanes lands on one side only
# (fresh-clone runs, 2026-12-07: MTL 94.6 and 100.1 ms ahead of Paris, 15.1 over the former
# 15; the other stages' demos were within 4 ms). 45 is three times the worst, and still tells
# each stage's figure from the others'.
backbone = ({"MTL": 85, "HKG": 185} if relay else {"MTL": -85, "HKG": 140} if fixed
            else {"MTL": 0, "HKG": 0})
within = 45 if fixed else 15
for site in ("MTL", "HKG"):
    behind = c[site]["p50"] - c["PAR"]["p50"]
    assert abs(behind - backbone[site]) <= within, f"{site} p50 {behind} ms behind PAR's"
# Own state first: players see their input the moment it is applied, ahead of the tick's update
# (click_to_update_ms is the update alone, measured in the same run).
u = d["click_to_update_ms"]
print("own_state", d["own_state"], "own_states_received", d["own_states_received"],
      "click_to_update p50", {site: v["p50"] for site, v in u.items()})
if d["own_state"] == "early":
    assert d["own_states_received"] > 0, "no own state reached a player"
    for site, v in c.items():
        assert v["p50"] <= u[site]["p50"], f"{site}: own states showed inputs later than updates"
# Several regions share a game server (one server per bubble seated 1.6 players each).
print("max_servers_by_site", d["max_servers_by_site"], "players_per_server_at_peak",
      d["players_per_server_at_peak"])
assert d["players_per_server_at_peak"] >= 5, "servers are not shared"
# The pool is bounded: every agent gave its bounds, and no site ever ran more servers than its
# max (idle ones beyond the warm pool are stopped after 30 s: horizon_agent_servers_stopped_idle_total).
pools = d["pool_by_site"]
print("pool_by_site", pools, "servers_running_max_by_site", d["servers_running_max_by_site"],
      "idle_servers_max_by_site", d["idle_servers_max_by_site"], "servers_stopped_idle",
      d["servers_stopped_idle"])
assert set(pools) == set(d["max_servers_by_site"]), f"an agent never gave its pool's bounds: {pools}"
for site, pool in pools.items():
    assert 0 <= pool["warm"] <= pool["max"], f"{site}: {pool}"
    assert d["servers_running_max_by_site"][site] <= pool["max"], f"{site} ran beyond its max"
# Regions moved whole off overfull servers (agents' horizon_agent_regions_moved_total).
print("region_moves", d["region_moves"])
assert isinstance(d["region_moves"], int) and d["region_moves"] >= 0
# A player alone at their spawn, or spawning inside a bubble, plays at once (not at the tick).
j = d["join_to_first_update_ms"]
print("join_to_first_update_ms", j, "players_unsimulated_max", d["players_unsimulated_max"])
assert j["samples"] == d["players"], "a player never saw an update"
assert j["p50"] <= 1000, "joins wait for the tick"
# The core site's zones: the demo's players are all in one world, which opens one zone, and a
# player no bubble holds plays in it: nobody is ever left unsimulated.
print("zones", d["zones"], "join_to_first_update_ms_by_home", d["join_to_first_update_ms_by_home"])
assert d["zones"]["count"] >= 1, "no zone for the demo's world"
assert d["players_unsimulated_max"] == 0, "a player was in no running region"
