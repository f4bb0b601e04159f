"""The import graph of src/kvtune at the level of files and of packages, its cycles, and the
modules outside kinds/ that name a server kind in code (docs/architecture.md).

    python bench/architecture/graph.py [SRC]     # SRC: a checkout's src/ (default: this one)

Run it on two checkouts to compare a layout before and after (the counts are the tests'
own: tests/test_architecture.py builds the graph)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import test_architecture as ta  # noqa: E402

KINDS = ("memcached", "redis", "valkey")


def sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (the cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    src = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "src"
    ta.SRC, ta.PKG = src, src / "kvtune"
    files = ta._graph()
    edges = {n: {m for m in deps if not ta._descends(m, n) and not ta._descends(n, m)}
             for n, deps in files.items()}
    packages = ta._package_graph(files)
    top: dict[str, set[str]] = {}
    for module, deps in files.items():
        a = ".".join(module.split(".")[:2])
        top.setdefault(a, set()).update(
            b for b in (".".join(d.split(".")[:2]) for d in deps) if b not in (a, "kvtune"))
    pattern = re.compile("|".join(KINDS), re.I)
    naming = sorted(str(p.relative_to(ta.PKG)) for p in ta.PKG.rglob("*.py")
                    if p.relative_to(ta.PKG).parts[0] != "kinds"
                    and p.name != "kind_registry.py"
                    and ta._names_in_code(p, pattern))
    print(json.dumps({
        "src": str(src),
        "files": {"modules": len(files), "edges": sum(map(len, edges.values())),
                  "cycles": sccs(edges)},
        "packages": {"packages": len(packages),
                     "edges": sum(map(len, packages.values())),
                     "cycles": sccs(packages)},
        "top_level": {"packages": len(top), "edges": sum(map(len, top.values())),
                      "cycles": sccs(top)},
        "modules_outside_kinds_naming_a_kind": naming,
    }, indent=1))


if __name__ == "__main__":
    main()
