#!/usr/bin/env python3
"""A real Prometheus scrapes a running demo's core and agents with the chart's alert rules, and
an alert is seen firing when its condition is produced (run by .ci/run):

1. `horizon demo` runs with a drill cutting MTL's agent from the core for 90 s;
2. Prometheus (Debian's `prometheus`) scrapes the core's and every agent's /metrics each second
   and evaluates charts/horizon/rules/horizon-alerts.yaml unchanged;
3. every target is up, the core and each agent export their series, no alert fires before the
   cut, and HorizonAgentDisconnected{site="MTL"} fires during it (its `for` is 1 minute); the
   only other alert then is HorizonFailovers (reason lease_expired) for the sites that took
   MTL's bubbles.

Usage: tests/checks/prometheus.py HORIZON_BINARY OUT_DIR
"""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

from procs import announced

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "charts", "horizon", "rules", "horizon-alerts.yaml")
# The cut comes once every bubble of the demo has a copy: its bubbles for MTL are carved out of
# PAR's zones at about 20 s, and an agent copies its bubbles every 10 s. A bubble cut before its
# first copy is restored without one at its lease's end, and HorizonRestoredWithoutCopy fires
# for the site that takes it, as it should (its players' states come from the crossings kept).
CUT_AT_S, CUT_FOR_S = 40, 90


def listening_address(proc, log_path, deadline_s):
    """Where Prometheus, started on port 0, listens: its log's `msg="Listening on"
    address=ADDR` line. Its log goes on to `log_path` meanwhile and after."""
    log = open(log_path, "w")

    def sink(line):
        log.write(line)
        log.flush()

    try:
        return announced(proc, r'msg="Listening on" address=([0-9.:]+)', deadline_s, sink,
                         f"prometheus's listening address (see {log_path})")
    except RuntimeError as e:
        raise SystemExit(f"FAIL: {e}")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def until(what, deadline_s, check):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1)
    raise SystemExit(f"FAIL: {what} (waited {deadline_s} s)")


def main():
    binary, out = sys.argv[1], sys.argv[2]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    drill = os.path.join(out, "cut.toml")
    with open(drill, "w") as f:
        f.write(f'[[fault]]\nat_s = {CUT_AT_S}\nkind = "partition"\nsite = "MTL"\nfor_s = {CUT_FOR_S}\n')
    duration = CUT_AT_S + CUT_FOR_S + 15
    demo = subprocess.Popen(
        [binary, "demo", "--duration", str(duration), "--json", "--admin", "127.0.0.1:0",
         "--faults", drill, "--dir", os.path.join(out, "demo")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    prometheus = None
    try:
        targets = {}
        started = None
        for line in demo.stderr:
            m = re.match(r"console http://([0-9.:]+)/", line)
            if m:
                targets["core"] = m.group(1)
            m = re.match(r"agent (\w+) admin http://([0-9.:]+)/", line)
            if m:
                targets[m.group(1)] = m.group(2)
            if line.startswith("t=") or len(targets) == 4:
                started = time.monotonic()
                break
        if len(targets) != 4:
            raise SystemExit(f"FAIL: the demo did not print its admin addresses: {targets}")
        # Keep reading its output (logs) so the demo never blocks on a full pipe.
        log = open(os.path.join(out, "demo.log"), "w")
        threading.Thread(target=lambda: shutil.copyfileobj(demo.stderr, log), daemon=True).start()
        print(f"  scraping {targets}")
        config = os.path.join(out, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
            f.write(f"rule_files:\n  - {RULES}\n")
            f.write("scrape_configs:\n")
            for name, addr in sorted(targets.items()):
                job = "horizon-core" if name == "core" else "horizon-agent"
                f.write(f"  - job_name: {job}-{name.lower()}\n    static_configs:\n")
                f.write(f"      - targets: ['{addr}']\n")
        # Prometheus binds a free port itself and logs which.
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", "--web.listen-address=127.0.0.1:0",
             f"--storage.tsdb.path={os.path.join(out, 'tsdb')}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        addr = listening_address(prometheus, os.path.join(out, "prometheus.log"), 30)
        api = f"http://{addr}/api/v1"

        def all_up():
            try:
                active = get(f"{api}/targets")["data"]["activeTargets"]
            except OSError:
                return None
            return len(active) == 4 and all(t["health"] == "up" for t in active)

        until("every target up", 30, all_up)
        print("  every target is up")

        def series(query):
            try:
                return get(f"{api}/query?query={urllib.parse.quote(query)}")["data"]["result"]
            except OSError:
                return []

        until("the core's players by home site", 20, lambda: series("horizon_players"))
        registered = until(
            "every agent registered",
            20,
            lambda: (r := series("horizon_agent_registered == 1")) and len(r) == 3 and r,
        )
        print(f"  agents registered: {sorted(s['metric']['site'] for s in registered)}")
        firing = lambda: [a for a in get(f"{api}/alerts")["data"]["alerts"] if a["state"] == "firing"]
        before = firing()
        if before:
            raise SystemExit(f"FAIL: alerts firing before the cut: {before}")
        cut_at = started + CUT_AT_S
        seen = until(
            "HorizonAgentDisconnected{site=MTL} firing during the cut",
            CUT_AT_S + CUT_FOR_S,
            lambda: [a for a in firing() if a["labels"].get("alertname") == "HorizonAgentDisconnected"
                     and a["labels"].get("site") == "MTL"],
        )
        print(f"  HorizonAgentDisconnected{{site=MTL}} fired {time.monotonic() - cut_at:.0f} s after the cut: {seen[0]['annotations']['summary']}")
        # MTL's bubbles fail over to the sites that take them at their lease's end: that alert
        # is the cut's, whatever site it names.
        after = firing()
        failovers = [a["labels"] for a in after if a["labels"]["alertname"] == "HorizonFailovers"]
        if any(f.get("reason") != "lease_expired" for f in failovers):
            raise SystemExit(f"FAIL: failovers other than the cut's: {failovers}")
        print(f"  failovers alerted: {[(f['site'], f['reason']) for f in failovers]}")
        others = [a["labels"]["alertname"] for a in after
                  if a["labels"].get("site") not in (None, "MTL") and a["labels"]["alertname"] != "HorizonFailovers"]
        if others:
            raise SystemExit(f"FAIL: alerts for sites that were not cut: {others}")
        print("prometheus: ok")
    finally:
        if prometheus:
            prometheus.terminate()
            prometheus.wait(timeout=10)
        demo.terminate()
        demo.wait(timeout=20)


if __name__ == "__main__":
    main()
