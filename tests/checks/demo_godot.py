"""The Godot demo's own checks, after tests/checks/demo.py: the game servers are headless Godot
processes, on a `horizon demo --game-server godot --json` document."""
import json, sys
d = json.load(open(sys.argv[1]))
assert d["game_server"] == "godot", d["game_server"]
# Three sites with a warm pool of four each, and the servers holding bubbles.
assert d["godot_processes"] >= 12, f"{d['godot_processes']} Godot processes under the game servers"
print("Godot processes just before the stop:", d["godot_processes"])
