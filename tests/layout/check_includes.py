#!/usr/bin/env python3
"""Checks that no source file includes a header of a module above its own (DESIGN.md, STYLE.md).

Usage: check_includes.py [ROOT] [--allowlist FILE] [--graph]

A file's module is its directory under src/ or include/tollgate/ (src/store/redis/x.cpp is
`store`); include/tollgate/tollgate.hpp is `embed`. An include names a module when it is
`#include <tollgate/MODULE/...>` (or <tollgate/tollgate.hpp>) or a quoted path that resolves to a
file under src/ or include/ (relative to the including file, then to src/ and include/; quoted
paths that resolve to nothing, such as generated gRPC headers, are skipped).

A file may include its own module and any module on a lower layer. Modules on one layer are
siblings and may not include each other (the adapters share what lies below them). Layers not
yet present in the tree are fine; a directory in no layer is an error, so a new module gets a
place in the table below.

Violations print as `path:line: message` and fail the check (exit 1), unless the allowlist
(tests/layout/include_allowlist.txt, lines `path -> included/path.hpp`, `#` starts a comment)
names them; those print as warnings, and entries that match nothing print as notes.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

# Lowest first. One line is one layer; names on one line are siblings.
LAYERS = [
    ["core"],                   # pure math: the standard library only
    ["util"],                   # clocks, hashing, text, parsing helpers
    ["net"],                    # Asio/Beast compiled once; the store's Redis client uses it
    ["metrics"],                # counters and histograms, for any component above
    ["config"],
    ["policy"],
    ["store"],
    ["usage"],
    ["engine"],
    ["contract"],               # the decision -> status, headers and problem body mapping
    ["http", "rls", "embed", "replay"],  # the adapters (and replay): siblings, never including one another
    ["app"],                    # main() and wiring
]
LEVEL = {module: level for level, layer in enumerate(LAYERS) for module in layer}
SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".cc", ".ipp")
EMBED_HEADER = "include/tollgate/tollgate.hpp"
DEFAULT_ALLOWLIST = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "include_allowlist.txt")

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def module_of(rel: str) -> str | None:
    """The module of a path relative to the root, or None when it is not a source path."""
    rel = rel.replace(os.sep, "/")
    if rel == EMBED_HEADER:
        return "embed"
    for prefix in ("include/tollgate/", "src/"):
        if rel.startswith(prefix):
            rest = rel[len(prefix):]
            return rest.split("/", 1)[0] if "/" in rest else ""
    return None


def included_module(root: str, rel: str, bracket: str, target: str) -> tuple[str | None, str]:
    """(module, path of the header relative to root) for one include; module None to skip."""
    if target == "tollgate/tollgate.hpp":
        return "embed", EMBED_HEADER
    if bracket == "<":
        if target.startswith("tollgate/"):
            path = "include/" + target
            return module_of(path), path
        return None, target
    here = os.path.dirname(os.path.join(root, rel))
    for base in (here, os.path.join(root, "src"), os.path.join(root, "include")):
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(candidate):
            path = os.path.relpath(candidate, root).replace(os.sep, "/")
            return module_of(path), path
    return None, target


def source_files(root: str) -> list[str]:
    out = []
    for top in ("src", "include"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_SUFFIXES):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return out


def check(root: str) -> tuple[list[tuple[str, int, str, str]], list[tuple[str, str, str]]]:
    """Returns (violations as (path, line, key, message), edges as (from, to, path))."""
    violations = []
    edges = []
    for rel in source_files(root):
        mine = module_of(rel)
        if mine not in LEVEL:
            where = mine or "(top level)"
            violations.append((rel, 1, f"{rel} -> (module)",
                               f"module '{where}' is not in the layer table of "
                               f"tests/layout/check_includes.py"))
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        for number, line in enumerate(lines, start=1):
            m = _INCLUDE_RE.match(line)
            if not m:
                continue
            theirs, path = included_module(root, rel, m.group(1), m.group(2))
            if theirs is None or theirs == mine:
                continue
            edges.append((mine, theirs, rel))
            key = f"{rel} -> {m.group(2)}"
            if theirs not in LEVEL:
                violations.append((rel, number, key, f"includes {m.group(2)} of module "
                                   f"'{theirs}', which is not in the layer table"))
            elif LEVEL[theirs] > LEVEL[mine]:
                violations.append((rel, number, key, f"module '{mine}' includes {m.group(2)} "
                                   f"of module '{theirs}', a layer above it"))
            elif LEVEL[theirs] == LEVEL[mine]:
                violations.append((rel, number, key, f"module '{mine}' includes {m.group(2)} "
                                   f"of its sibling '{theirs}'; what they share belongs below "
                                   f"them"))
    return violations, edges


def read_allowlist(path: str) -> list[str]:
    entries = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for raw in f:
                line = raw.split("#", 1)[0].strip()
                if line:
                    entries.append(" -> ".join(part.strip() for part in line.split("->", 1)))
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--allowlist", default=DEFAULT_ALLOWLIST)
    ap.add_argument("--graph", action="store_true",
                    help="print which module includes which (with a count of files), then exit")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    violations, edges = check(root)

    if args.graph:
        counts: dict[tuple[str, str], set[str]] = {}
        for a, b, rel in edges:
            counts.setdefault((a, b), set()).add(rel)
        for (a, b), files in sorted(counts.items()):
            print(f"{a} -> {b} ({len(files)} file(s))")
        return 0

    allow = read_allowlist(args.allowlist)
    used = set()
    errors = []
    for rel, line, key, message in violations:
        if key in allow:
            used.add(key)
            print(f"{rel}:{line}: {message}  [warning: allowlisted]")
        else:
            errors.append(f"{rel}:{line}: {message}")
    for entry in allow:
        if entry not in used:
            print(f"{os.path.relpath(args.allowlist, root)}: note: '{entry}' no longer occurs; "
                  f"remove it from the allowlist")
    for e in errors:
        print(e)
    print(f"check_includes: {len(errors)} violation(s), {len(used)} allowlisted", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
