#!/usr/bin/env python3
"""No two files of a crate import each other (docs/ARCHITECTURE.md, "Arrows").

    python3 tests/checks/import_circles.py [ROOT]

Reads every crate's `src/` as text: a file's references are its `crate::…` and `super::…`
paths outside comments and outside its `#[cfg(test)] mod tests`, each resolved to the deepest
module file that exists. Two files that reference each other are a circle, unless one is the
other's ancestor (a module and the files that split its `impl` are one piece). Prints every
circle and exits 1 if there is any.
"""

import os
import re
import sys


def module_of(src, path):
    parts = os.path.relpath(path, src)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def code_of(path):
    text = open(path, encoding="utf-8").read()
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def resolve(parts, files):
    for k in range(len(parts), 0, -1):
        if parts[:k] in files:
            return parts[:k]
    return None


def circles(root):
    found = []
    for crate in sorted(os.listdir(os.path.join(root, "crates"))):
        src = os.path.join(root, "crates", crate, "src")
        if not os.path.isdir(src):
            continue
        files = {}
        for d, _, names in os.walk(src):
            for n in names:
                if n.endswith(".rs"):
                    files[module_of(src, os.path.join(d, n))] = os.path.join(d, n)
        refs = {m: set() for m in files}
        for m, path in files.items():
            code = code_of(path)
            # `super` in a/b.rs is `a`; in a/b/mod.rs it is also `a`.
            parent = m[:-1]
            paths = [tuple(r.strip(":").split("::")) for r in re.findall(r"\bcrate((?:::\w+)+)", code)]
            paths += [parent + tuple(r.strip(":").split("::")) for r in re.findall(r"\bsuper((?:::\w+)+)", code)]
            for p in paths:
                target = resolve(p, files)
                if target is not None and target != m:
                    refs[m].add(target)

        def nested(a, b):
            return a[: len(b)] == b or b[: len(a)] == a

        for a in sorted(files):
            for b in sorted(refs[a]):
                if a < b and not nested(a, b) and a in refs[b]:
                    found.append(f"{crate}: {'/'.join(a) or 'lib'} ↔ {'/'.join(b) or 'lib'}")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = circles(root)
    for c in found:
        print(f"import circle: {c}")
    if found:
        sys.exit(1)
    print("import circles: none")


if __name__ == "__main__":
    main()
