#!/usr/bin/env python3
"""The workspace's crates depend only downwards (docs/ARCHITECTURE.md, "The crates, layer by layer").

    python3 tests/checks/crate_layers.py

Reads the layer table from docs/ARCHITECTURE.md and the workspace's dependencies (normal and
build, not dev) from `cargo metadata`; fails on a crate the table does not place, a crate the
workspace does not have, or a dependency on a crate of the same or a higher layer.
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def layers():
    text = open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    section = text.split("## The crates, layer by layer", 1)[1].split("\n## ", 1)[0]
    placed = {}
    for layer, crates in re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M):
        for name in re.findall(r"`(horizon[\w-]*)`", crates):
            placed[name] = int(layer)
    return placed


def main():
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT,
        capture_output=True, text=True, check=True).stdout)
    ours = {p["name"]: p for p in meta["packages"]}
    placed = layers()
    problems = [f"{name}: not in the layer table" for name in sorted(set(ours) - set(placed))]
    problems += [f"{name}: in the layer table, not in the workspace" for name in sorted(set(placed) - set(ours))]
    for name, package in sorted(ours.items()):
        for dep in package["dependencies"]:
            target = dep["name"]
            if target in ours and dep["kind"] != "dev" and name in placed and target in placed:
                if placed[target] >= placed[name]:
                    problems.append(f"{name} (layer {placed[name]}) depends on {target} (layer {placed[target]})")
    for p in problems:
        print(f"crate layers: {p}")
    if problems:
        sys.exit(1)
    print(f"crate layers: {len(ours)} crates, every dependency downwards")


if __name__ == "__main__":
    main()
