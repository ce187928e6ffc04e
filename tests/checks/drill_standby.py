"""The standby drill (simulations/drills/standby.toml) on a `horizon demo --standby --faults
simulations/drills/standby.toml --json` document: SPEC §6's takeover targets, on real
processes with a real three-member etcd."""
import sys

import drills

d, faults = drills.load(sys.argv[1], ("stale_writes_refused", "standby"))
assert d["standby"] is True, "not a --standby run"
generation = 1
for kind in ("partition_core_store", "kill_core"):
    f = faults[kind]
    # One takeover each: the next generation, every region kept.
    assert f["generation"] == {"before": generation, "after": generation + 1}, f
    generation += 1
    # (The demo's leavers end a region or two meanwhile.)
    assert f["bubbles_kept"]["kept"] >= f["bubbles_kept"]["before"] - 2, f
    # No relay bubble (nor core-site zone) stopped: their 30 s leases outlive the takeover.
    assert f["relay_bubbles_stopped"] == 0 and f["core_site_regions_stopped"] == 0, f
    # SPEC §6: takeover (the fault → the new leader's first grant) ≤ 10 s; everyone playing
    # ≤ 15 s after the fault (nobody should have stopped at all).
    assert f["takeover_s"] is not None and f["takeover_s"] <= 10, f
    assert f["resumed_after_s"]["max"] <= 15, f
    assert f["sessions_ended"] == 0, f
p = faults["partition_core_store"]
# I7 on real processes: the cut leader stopped granting before the standby was elected.
assert p["fenced_s"] is not None and p["fenced_before_elected"] is True, p
assert faults["kill_core"]["fenced_s"] is None, faults["kill_core"]
