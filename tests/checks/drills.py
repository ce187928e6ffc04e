"""What every drill must show, whatever its faults (imported by drill.py and drill_fixed.py):
every player there, nothing lost or applied twice, no write after a lease, and each fault's
players all accounted for, none left without a simulation."""
import json


def load(path, keys=()):
    """The drill's `horizon demo --faults … --json` document, its common checks passed, and its
    faults by kind. `keys` are printed with the usual figures."""
    d = json.load(open(path))
    shown = ("players", "inputs_sent", "inputs_applied", "inputs_in_flight",
             "inputs_applied_twice", "state_chain_breaks", "writes_after_lease") + tuple(keys)
    print(json.dumps({k: d[k] for k in shown}))
    for f in d["faults"]:
        print(json.dumps(f))
    assert d["players"] == 60, d["errors"]
    assert d["inputs_applied_twice"] == 0 and d["state_chain_breaks"] == 0
    ended = d["inputs_unacked_in_ended_sessions"]
    assert d["inputs_applied"] + d["inputs_in_flight"] + ended == d["inputs_sent"], "inputs lost"
    assert d["writes_after_lease"] == 0, "a game server wrote after its lease (I5)"
    for f in d["faults"]:
        assert f["problem"] is None, f
        assert f["never_resumed"] == 0 and f["inputs_applied_twice"] == 0, f
        assert f["players_affected"] >= 1, f
        counted = (sum(f["resumed_on"].values()) + f["resumed_unplaced"] + f["never_resumed"]
                   + f["sessions_ended"] + f["left_game"])
        assert counted == f["players_affected"], f"{counted} players counted of {f['players_affected']}: {f}"
    return d, {f["kind"]: f for f in d["faults"]}
