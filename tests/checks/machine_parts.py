#!/usr/bin/env python3
"""Machines from typed parts (docs/ARCHITECTURE.md, "Machine and shell, per daemon"): each field
of a machine's struct is touched (`self.field`) from one file of the machine, its part's; what
other files need of it, they ask that part for.

    python3 tests/checks/machine_parts.py          # the check (CI's lint stage)
    python3 tests/checks/machine_parts.py --list   # every field and the files touching it

It also checks that a machine names no transport, tokio or prometheus type (SHELL_DEBT lists
what is still named).

A field whose type is a part — a struct of its own file (`sessions: sessions::Sessions`) whose
fields are all private, so Rust stops any other file touching its state — may be asked from any
file: its methods are the part's interface. Every other field is state, and is touched from one
file. Only `self.field` inside `impl Machine` blocks counts (in a part's `impl`, `self` is the
part), and `machine.field` where a closure takes `machine: &Self`. Fields still touched from
several files would be listed below as debt, machine by machine (none is now): the check fails
on a field newly shared, and on a listed field no longer shared (take it off the list), so the
list only shrinks. Test modules are not counted.
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# (machine, its directory, the file declaring its struct, the fields read everywhere by design:
# the configuration, the counters and the queue of effects out, which are the machine's plumbing;
# for the chaos world, the run's one seeded random source (a replay draws in the same order),
# the invariants' checker (it looks after every step) and the run's counters)
MACHINES = [
    ("AgentMachine", "crates/horizon-agent/src/machine", "mod.rs", {"cfg", "stats", "effects"}),
    ("CoreMachine", "crates/horizon-core/src/machine", "mod.rs", {"cfg", "stats", "effects"}),
    ("World", "crates/horizon-chaos/src", "world.rs", {"rng", "checker", "stats"}),
]

# A machine names no transport, tokio or prometheus type: those are its shell's. Both count in
# plain atomics (`AgentStats`, `CoreStats`) that their metrics read at each scrape. Any crate
# named again is debt, listed here like SHARED.
SHELL_CRATES = ("horizon_transport", "tokio", "prometheus")
# (The chaos world is no daemon's machine: it stands in for the shells, so it is not checked.)
SHELL_DEBT = {"AgentMachine": set(), "CoreMachine": set()}

# Parts that are crates of their own (their state private there): asked from any file.
PARTS_ELSEWHERE = {
    "CoreMachine": {"mesh"},  # horizon_mesh::Mesh, the brain
}

# The debt: fields still touched from more than one file, machine by machine, to become parts
# of their own. None is left; a field shared again fails the check.
SHARED = {}


def struct_body(path, struct):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^(?:pub(?:\([a-z]+\))? )?struct %s(?:<[^>]*>)? \{\n(.*?)^\}" % struct, text, re.M | re.S)
    return m.group(1) if m else None


def struct_fields(path, struct):
    """The struct's fields, each with its type as written."""
    body = struct_body(path, struct)
    if body is None:
        sys.exit(f"machine parts: no struct {struct} in {path}")
    return re.findall(r"^    (?:pub(?:\([a-z]+\))? )?([a-z_][a-z0-9_]*): ([^\n]+?),?$", body, re.M)


def is_part(directory, decl, ty):
    """`module::Type`, declared in `module.rs` beside the machine with no public field."""
    m = re.fullmatch(r"([a-z_]+)::([A-Z]\w*)(<.*>)?", ty.strip())
    if not m:
        return False
    base = os.path.dirname(os.path.join(directory, decl))
    for path in (os.path.join(base, m.group(1) + ".rs"),
                 os.path.join(base, os.path.splitext(decl)[0], m.group(1) + ".rs")):
        if os.path.exists(path):
            body = struct_body(path, m.group(2))
            return body is not None and not re.search(r"^    pub", body, re.M)
    return False


def without_tests(text):
    """The file's text before its test module, if any (`#[cfg(test)] mod tests { … }`)."""
    return re.split(r"#\[cfg\(test\)\]\s*mod tests \{", text, maxsplit=1)[0]


def impl_blocks(text, struct):
    """The bodies of the file's `impl Struct { … }` and `impl Trait for Struct { … }` blocks:
    there, `self` is the machine (a part's file has `impl Part`, where `self` is the part)."""
    bodies = []
    for m in re.finditer(r"^impl(?:<[^>]*>)? (?:[\w:<>, ]+ for )?%s \{" % struct, text, re.M):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        bodies.append(text[m.end():i])
    return "\n".join(bodies)


def touches(directory, struct, fields):
    out = {f: set() for f in fields}
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if d != "tests"]
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            text = impl_blocks(without_tests(open(path, encoding="utf-8").read()), struct)
            # `self`, and any closure's parameter that is the machine (`|machine: &Self|`).
            receivers = "|".join(["self"] + re.findall(r"(\w+): &(?:mut )?Self\b", text))
            for f in fields:
                if re.search(r"\b(?:%s)\s*\.%s\b(?!\s*\()" % (receivers, f), text):
                    out[f].add(os.path.relpath(path, directory))
    return out


def shell_crate_files(directory, crate):
    """The machine's files (tests aside) that name `crate` (`crate::` paths or `use crate`)."""
    named = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if d != "tests"]
        for name in sorted(files):
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                code = "\n".join(line.split("//")[0] for line in
                                 without_tests(open(path, encoding="utf-8").read()).splitlines())
                if re.search(r"\b%s::" % crate, code):
                    named.append(os.path.relpath(path, directory))
    return named


def main():
    listing = "--list" in sys.argv[1:]
    problems = []
    for struct, directory, decl, plumbing in MACHINES:
        directory = os.path.join(ROOT, directory)
        typed = struct_fields(os.path.join(directory, decl), struct)
        fields = [f for f, _ in typed]
        parts = {f for f, ty in typed if is_part(directory, decl, ty)}
        parts |= PARTS_ELSEWHERE.get(struct, set()) & set(fields)
        touched = touches(directory, struct, fields)
        shared = {f for f, files in touched.items()
                  if len(files) > 1 and f not in plumbing and f not in parts}
        debt = SHARED.get(struct, set())
        for f in sorted(shared - debt):
            problems.append(f"{struct}.{f} is touched from {', '.join(sorted(touched[f]))}: "
                            "give it to one part and ask that part")
        for f in sorted(debt - shared):
            state = ("gone" if f not in touched else "a part now" if f in parts
                     else "touched from one file now")
            problems.append(f"{struct}.{f} is {state}: take it off the SHARED list")
        own = len(fields) - len(shared) - len(parts) - len(plumbing & set(fields))
        print(f"machine parts: {struct}: {len(fields)} fields: {len(parts)} parts, {own} state "
              f"touched from one file, {len(shared)} state still shared, "
              f"{len(plumbing & set(fields))} plumbing")
        if listing:
            for f in fields:
                kind = "part" if f in parts else "plumbing" if f in plumbing else "state"
                print(f"  {f:22} {kind:8} {' '.join(sorted(touched[f]))}")
        for crate in SHELL_CRATES if struct in SHELL_DEBT else ():
            named = shell_crate_files(directory, crate)
            debt = crate in SHELL_DEBT.get(struct, set())
            if named and not debt:
                problems.append(f"{struct}'s machine names {crate} in {', '.join(named)}: "
                                "that belongs to its shell")
            if debt and not named:
                problems.append(f"{struct} no longer names {crate}: take it off SHELL_DEBT")
    for p in problems:
        print(f"machine parts: {p}")
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
