"""The Kubernetes-driver demo's own checks, after tests/checks/demo.py: the agents' pods, on a
`horizon demo --driver kube --json` document."""
import json, sys
d = json.load(open(sys.argv[1]))
assert d["driver"] == "kube", d["driver"]
assert d["kube_pods_left"] == 0, "the agents left pods behind when they stopped"
print("pods by pool before the stop", d["kube_pods_by_pool"])
assert d["kube_pods_by_pool"].get("hosting", 0) >= 1, "no pod labelled as hosting a bubble"
