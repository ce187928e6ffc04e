"""The drill (simulations/drills/failures.toml) on a `horizon demo --faults ... --json` document:
each failure path of design.md §6 within its bound, nothing lost."""
import sys

import drills

d, faults = drills.load(sys.argv[1], ("stale_writes_refused",))
k = faults["kill_server"]
assert k["resumed_after_s"]["max"] <= 3, k
assert set(k["resumed_on"]) == {k["site"]}, k
p = faults["partition"]
assert p["stopped_after_fault_s"] is not None and p["stopped_after_fault_s"] <= 31, p
assert p["reconnecting_shown"] == sum(p["resumed_on"].values()) + p["resumed_unplaced"], p
assert p["resumed_after_s"]["max"] <= 40, p
assert set(p["resumed_on"]) == {d["core_site"]}, p
r = faults["restart_core"]
assert r["generation"]["after"] == r["generation"]["before"] + 1, r
assert r["bubbles_kept"]["kept"] >= r["bubbles_kept"]["before"] - 2, r
assert r["resumed_after_s"]["max"] <= r["for_s"] + 15, r
c = faults["cut_transfer"]
# Routed round through the third site: the design's target is 3 s; 1.2 s measured with the
# machine loaded (docs/running.md, "Routing round a cut"), so 4 s keeps 3x headroom. An
# unrouted cut leaves its players silent for the whole cut (10 s).
assert c["players_affected"] >= 1, c
assert c["resumed_after_s"]["max"] <= 4, c
assert c["never_resumed"] == 0 and c["inputs_applied_twice"] == 0, c
assert c["relayed"]["sent_round"] > 0 and c["relayed"]["passed_on"] > 0, c
l = faults["loss"]
assert l["resumed_after_s"]["max"] <= 3, l
a = faults["restart_agent"]
# Its players resume as themselves (their credential, checked by the restarted agent against
# the core's list): no session ends, no new player; nothing lost (drills.load's count).
assert a["sessions_ended"] == 0, a
assert sum(a["resumed_on"].values()) + a["resumed_unplaced"] == a["players_affected"] - a["left_game"], a
assert a["resumed_after_s"]["max"] <= a["for_s"] + 15, a
