"""The drains drill (simulations/drills/drains.toml) on a `horizon demo --faults
simulations/drills/drains.toml --json` document: each game server told to stop moved its
regions with their state (none restored, no session ended, nobody sent back to a copy), and
its players saw one short freeze."""
import sys

import drills

# The longest a drain may silence a player who played on, in ms (see below).
GUARD_MS = 400

d, _ = drills.load(sys.argv[1], ("handovers", "bubbles_by_site"))
drains = [f for f in d["faults"] if f["kind"] == "drain_server"]
assert {f["site"] for f in drains} == {"MTL", "HKG", "PAR"}, drains
for f in drains:
    assert f["restores"] == 0 and f["players_restored"] == 0, f"a region was restored: {f}"
    assert f["sessions_ended"] == 0 and f["reconnecting_shown"] == 0, f
    assert f["drains"]["moved"] >= 1 and f["drains"]["failed_over"] == 0, f
    # A move costs a tick of each server and the seal's trip within the site: the e2e drain
    # test measured 36 ms (44 ms under `stress-ng --cpu 2`), this drill's moves 21-31 ms at
    # their worst per site (`freeze_ms` X-X), and no player went silent 100 ms (the least
    # silence recorded). The guard is 3x the worst move within a site seen beside CI's other
    # lanes (a zone's crossing, 133 ms: tests/checks/demo.py).
    gap = f["longest_gap_ms"]
    assert gap is None or gap <= GUARD_MS, f"a drain froze a player {gap} ms: {f}"
