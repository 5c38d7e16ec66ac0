#!/usr/bin/env python3
"""Checks every include between modules against the allowed module pairs (DESIGN.md "Layers").

Usage: check_includes.py [ROOT] [--allowlist FILE] [--known FILE] [--doc FILE] [--graph|--table]

The pairs, the rooms and the (empty) exceptions are in tests/layout/include_allowlist.txt, which
says how it is read. An include names a module when it is `#include <tollgate/MODULE/...>` (or
<tollgate/tollgate.hpp>) or a quoted path that resolves to a file under src/ or include/ (relative
to the including file, then to src/ and include/; quoted paths that resolve to nothing, such as
generated gRPC headers, are skipped). A module or room may include its own module's files and
what its pairs allow; nothing else. A directory that is no module of the pairs is an error, so a
new module gets its line.

Breaches print as `path:line: message` and fail the check (exit 1), unless the exceptions name
them (printed as warnings) or the known violations do (tests/layout/include_known_violations.txt,
today's breaches that issue 32 removes: printed with their name and counted). A known violation
or exception that no longer occurs fails the check too: the lists say what is true.

docs/architecture.md holds the pairs as a table between the markers below; the check fails when
it differs from what `--table` prints from the pairs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".cc", ".ipp")
EMBED_HEADER = "include/tollgate/tollgate.hpp"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ALLOWLIST = os.path.join(HERE, "include_allowlist.txt")
DEFAULT_KNOWN = os.path.join(HERE, "include_known_violations.txt")
DOC = "docs/architecture.md"
TABLE_BEGIN = ("<!-- module pairs: printed by `python3 tests/layout/check_includes.py --table` "
               "from tests/layout/include_allowlist.txt; the check fails when they differ -->")
TABLE_END = "<!-- end of module pairs -->"

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


class Rules:
    """The pairs file: rooms (prefixes), pairs (node -> allowed nodes, in file order) and
    exceptions (`path -> header` keys)."""

    def __init__(self) -> None:
        self.rooms: dict[str, list[str]] = {}
        self.pairs: dict[str, list[str]] = {}
        self.notes: dict[str, str] = {}
        self.exceptions: list[str] = []

    def node_of(self, rel: str) -> str | None:
        """The room or module of a path relative to the root; None when not a source path."""
        rel = rel.replace(os.sep, "/")
        best = ""
        for room, prefixes in self.rooms.items():
            for prefix in prefixes:
                if rel.startswith(prefix) and len(prefix) > len(best):
                    best, node = prefix, room
        return node if best else module_of(rel)

    def allowed(self, node: str) -> set[str]:
        out = set(self.pairs.get(node, []))
        if "/" in node:
            out |= set(self.pairs.get(top(node), []))
        return out


def top(node: str) -> str:
    return node.split("/", 1)[0]


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


def key_of(line: str) -> str:
    return " -> ".join(part.strip() for part in line.split("->", 1))


def read_rules(path: str) -> Rules:
    rules = Rules()
    section = None
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, start=1):
            line, _, note = raw.partition("#")
            line = line.strip()
            if not line:
                continue
            where = f"{path}:{number}"
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                if section not in ("rooms", "pairs", "exceptions"):
                    raise ValueError(f"{where}: unknown section [{section}]")
            elif section == "rooms" and ":" in line:
                room, prefixes = line.split(":", 1)
                rules.rooms[room.strip()] = prefixes.split()
            elif section == "pairs" and "->" in line:
                node, targets = line.split("->", 1)
                node = node.strip()
                if node in rules.pairs:
                    raise ValueError(f"{where}: '{node}' has a line already")
                rules.pairs[node] = targets.split()
                rules.notes[node] = note.strip()
            elif section == "exceptions" and "->" in line:
                rules.exceptions.append(key_of(line))
            else:
                raise ValueError(f"{where}: cannot read '{line}'")
    known_nodes = set(rules.pairs) | set(rules.rooms)
    for node, targets in rules.pairs.items():
        for t in targets + ([top(node)] if "/" in node else []):
            if t not in known_nodes:
                raise ValueError(f"{path}: '{node} -> {t}': '{t}' is neither a module nor a room")
    for room in rules.rooms:
        if top(room) not in rules.pairs:
            raise ValueError(f"{path}: room '{room}' of no module of the pairs")
    return rules


def read_known(path: str) -> dict[str, str]:
    """Known violations: `path -> header` key -> name."""
    known = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for number, raw in enumerate(f, start=1):
                line = raw.split("#", 1)[0].strip()
                if not line:
                    continue
                name, sep, rest = line.partition(":")
                if not sep or "->" not in rest or not name.strip():
                    raise ValueError(f"{path}:{number}: not `name: path -> header`")
                known[key_of(rest)] = name.strip()
    return known


def included_path(root: str, rel: str, bracket: str, target: str) -> str | None:
    """The path relative to root of the header one include names, or None to skip it."""
    if target == "tollgate/tollgate.hpp":
        return EMBED_HEADER
    if bracket == "<":
        return "include/" + target if target.startswith("tollgate/") else None
    here = os.path.dirname(os.path.join(root, rel))
    for base in (here, os.path.join(root, "src"), os.path.join(root, "include")):
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(candidate):
            return os.path.relpath(candidate, root).replace(os.sep, "/")
    return None


def source_files(root: str) -> list[str]:
    out = []
    for top_dir in ("src", "include"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top_dir)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_SUFFIXES):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return out


def check(root: str, rules: Rules):
    """Returns (breaches as (path, line, key, message), edges as (from, to, path))."""
    breaches = []
    edges = []
    for rel in source_files(root):
        mine = rules.node_of(rel)
        if top(mine or "") not in rules.pairs:
            where = mine or "(top level)"
            breaches.append((rel, 1, f"{rel} -> (module)", f"module '{where}' has no line in the "
                             f"module pairs (tests/layout/include_allowlist.txt)"))
            continue
        allowed = rules.allowed(mine)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        for number, line in enumerate(lines, start=1):
            m = _INCLUDE_RE.match(line)
            if not m:
                continue
            path = included_path(root, rel, m.group(1), m.group(2))
            theirs = rules.node_of(path) if path else None
            if theirs is None or top(theirs) == top(mine):
                continue
            edges.append((mine, theirs, rel))
            if theirs in allowed:
                continue
            what = f"module '{mine}'" if "/" not in mine else f"room '{mine}'"
            if top(theirs) not in rules.pairs:
                message = (f"includes {m.group(2)} of module '{theirs}', which has no line in "
                           f"the module pairs")
            else:
                message = (f"{what} includes {m.group(2)} of '{theirs}': no pair "
                           f"'{mine} -> {theirs}' in tests/layout/include_allowlist.txt")
            breaches.append((rel, number, f"{rel} -> {m.group(2)}", message))
    return breaches, edges


def table(rules: Rules) -> str:
    """docs/architecture.md's table of the pairs, as the page holds it between the markers."""
    rows = [TABLE_BEGIN, "", "| module or room | may include | what it is |", "|---|---|---|"]
    for node, targets in rules.pairs.items():
        may = ", ".join(f"`{t}`" for t in targets) or "nothing of tollgate"
        if "/" in node:
            may = f"what `{top(node)}` may, and {may}"
        rows.append(f"| `{node}` | {may} | {rules.notes.get(node, '')} |")
    rows += ["", "| room | its files | included, outside its module, by |", "|---|---|---|"]
    for room, prefixes in rules.rooms.items():
        users = [n for n, targets in rules.pairs.items() if room in targets]
        files = ", ".join(f"`{p}*`" if p.endswith(("/", "_")) else f"`{p}`" for p in prefixes)
        rows.append(f"| `{room}` | {files} | {', '.join(f'`{u}`' for u in users) or 'none'} |")
    rows += ["", TABLE_END]
    return "\n".join(rows) + "\n"


def doc_table(root: str) -> str | None:
    """The table block of docs/architecture.md, markers included; None without the page."""
    path = os.path.join(root, DOC)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        return ""
    return text[begin:end + len(TABLE_END)] + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=os.path.join(HERE, "..", ".."))
    ap.add_argument("--allowlist", default=DEFAULT_ALLOWLIST, help="the module pairs")
    ap.add_argument("--known", default=DEFAULT_KNOWN, help="the known violations")
    ap.add_argument("--graph", action="store_true",
                    help="print which module includes which (with a count of files), then exit")
    ap.add_argument("--table", action="store_true",
                    help="print docs/architecture.md's table of the pairs, then exit")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    try:
        rules = read_rules(args.allowlist)
        known = read_known(args.known)
    except ValueError as e:
        print(e)
        return 1
    if args.table:
        sys.stdout.write(table(rules))
        return 0
    breaches, edges = check(root, rules)

    if args.graph:
        counts: dict[tuple[str, str], set[str]] = {}
        for a, b, rel in edges:
            counts.setdefault((a, b), set()).add(rel)
        for (a, b), files in sorted(counts.items()):
            print(f"{a} -> {b} ({len(files)} file(s))")
        return 0

    errors = []
    used_known, used_exceptions = set(), set()
    for rel, line, key, message in breaches:
        if key in rules.exceptions:
            used_exceptions.add(key)
            print(f"{rel}:{line}: {message}  [warning: an exception]")
        elif key in known:
            used_known.add(key)
            print(f"{rel}:{line}: {message}  [known violation '{known[key]}', "
                  f"to be removed by issue 32]")
        else:
            errors.append(f"{rel}:{line}: {message}")
    for listed, used, name in ((rules.exceptions, used_exceptions, args.allowlist),
                               (known, used_known, args.known)):
        for key in listed:
            if key not in used:
                errors.append(f"{os.path.relpath(name, root)}: '{key}' no longer breaks a pair: "
                              f"remove it from the list")
    page = doc_table(root)
    if page is not None and page != table(rules):
        errors.append(f"{DOC}: its table of module pairs is not the one the pairs give; "
                      f"replace it with the output of `python3 tests/layout/check_includes.py "
                      f"--table`")
    for e in errors:
        print(e)
    print(f"check_includes: {len(errors)} violation(s), {len(used_known)} known violation(s), "
          f"{len(used_exceptions)} exception(s)",
          file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
