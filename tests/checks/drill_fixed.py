"""The fixed stage's drill (simulations/drills/fixed.toml) on a `horizon demo --stage fixed
--faults simulations/drills/fixed.toml --json` document: design.md §6's bounds for the
delegation's site, and its bubbles back on it."""
import json, sys

import drills

d, faults = drills.load(sys.argv[1], ("handovers", "bubbles_by_site"))
print("freeze_ms", json.dumps(d["freeze_ms"]))
k = faults["kill_server"]
assert k["resumed_after_s"]["max"] <= 3, k
assert set(k["resumed_on"]) == {"MTL"}, k
# design.md §6 for the delegation's site cut from the core: its bubbles stop at lease expiry,
# their players play again on the core site within 40 s (the freezes MTL-PAR), and the bubbles
# go back to MTL by handovers once the link heals (PAR-MTL): where the players were seen 8 s
# after the cut ended, and where everything is at the end.
p = faults["partition"]
assert p["stopped_after_fault_s"] is not None and p["stopped_after_fault_s"] <= 31, p
assert p["reconnecting_shown"] == sum(p["resumed_on"].values()) + p["resumed_unplaced"], p
assert p["resumed_after_s"]["max"] <= 40, p
assert d["freeze_ms"].get("MTL-PAR", {}).get("samples", 0) >= 1, "no failover to the core site"
assert d["freeze_ms"].get("PAR-MTL", {}).get("samples", 0) >= 1, "no handover back to MTL"
assert set(p["resumed_on"]) == {"MTL"}, p
assert d["handovers"] >= 1, "the delegation never went back to its site"
assert d["bubbles_by_site"]["PAR"] == 0 and d["bubbles_by_site"]["HKG"] == 0, d["bubbles_by_site"]
