"""The architecture's promises, checked from the source (docs/architecture.md):

- the module import graph, function-level imports included (TYPE_CHECKING ones aside),
  has no cycle, and neither has the graph of packages (they form a tree: a package
  imports only packages below it);
- everything specific to one server kind lives in its folder (kinds/<kind>/): no module
  outside kinds/ names a kind in code, and a kind is its folder plus one registry line;
- the schema (spec.py) imports no plugin: no target, load driver, knob or study module;
- the loader is the only reader of a study file;
- `kvtune tune` reads its study file once.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "kvtune"


@functools.cache
def _parse_source(source: str, name: str = "<unknown>") -> ast.Module:
    """A module's syntax tree, parsed once for all the checks of this file (each walks
    every module of src; none changes a tree)."""
    return ast.parse(source, name)


def _parse(path: Path) -> ast.Module:
    return _parse_source(path.read_text(), str(path))


@functools.cache
def _nodes_of_source(source: str, name: str) -> tuple[ast.AST, ...]:
    """Every node of a module's tree in `ast.walk`'s order, walked once for all the checks
    of this file (keyed by the text, as the tree is: a test may rewrite a file)."""
    return tuple(ast.walk(_parse_source(source, name)))


def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return _nodes_of_source(path.read_text(), str(path))


def _module(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The kvtune modules `path` imports at run time (module or function level)."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name.startswith("kvtune"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                if not base.startswith("kvtune"):
                    continue
                for a in child.names:  # `from kvtune.x import y` may name a module y
                    sub = f"{base}.{a.name}"
                    out.add(sub if sub in modules else base)
            visit(child)

    visit(_parse(path))
    # A module imports its own package's __init__ implicitly; only what is named counts.
    return {m for m in out if m in modules and m != me}


@functools.cache
def _graph_of_src() -> dict[str, frozenset[str]]:
    files = [p for p in PKG.rglob("*.py")]
    modules = {_module(p) for p in files}
    return {_module(p): frozenset(_imports(p, modules)) for p in files}


def _graph() -> dict[str, set[str]]:
    """The module import graph of src, computed once for the tests that read it (each gets
    its own copy)."""
    return {m: set(deps) for m, deps in _graph_of_src().items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state:
                found = dfs(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = dfs(n)
            if found:
                return found
    return None


def _descends(parent: str, child: str) -> bool:
    return child.startswith(parent + ".")


def test_import_graph_has_no_cycle() -> None:
    graph = _graph()
    # A package's __init__ that re-exports its modules is not a cycle with them when the
    # modules import siblings, not the package: only module-to-module edges count here.
    edges = {n: {m for m in deps if not _descends(m, n) and not _descends(n, m)}
             for n, deps in graph.items()}
    assert _cycle(edges) is None, " -> ".join(_cycle(edges) or [])


def test_the_checker_sees_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _package(module: str) -> str:
    """The package a module belongs to (a top-level module is its own)."""
    parts = module.split(".")
    if (PKG / "/".join(parts[1:])).is_dir():
        return module
    return ".".join(parts[:-1]) if len(parts) > 2 else module


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the packages its modules import (a package and its subpackages are
    different packages: kvtune.kinds, the registry, and kvtune.kinds.valkey, a kind)."""
    out: dict[str, set[str]] = {}
    for module, deps in graph.items():
        a = _package(module)
        out.setdefault(a, set())
        for d in deps:
            b = _package(d)
            if a != b and not _descends(a, b) and not _descends(b, a):
                out[a].add(b)
    return out


def test_packages_form_a_tree() -> None:
    """No two packages import each other, directly or around a circle (run-time imports,
    function-level ones included)."""
    packages = _package_graph(_graph())
    assert len(packages) > 20
    assert _cycle(packages) is None, " -> ".join(_cycle(packages) or [])


def test_top_level_packages_form_a_tree() -> None:
    """The same at the top level, a package with its subpackages (kvtune.kinds with every
    kind's folder): the generic layers reach a kind's folder only through the registry
    (kvtune.kind_registry, below them), never by import."""
    top: dict[str, set[str]] = {}
    for module, deps in _graph().items():
        a = ".".join(module.split(".")[:2])
        top.setdefault(a, set()).update(
            b for b in (".".join(d.split(".")[:2]) for d in deps) if b not in (a, "kvtune"))
    assert _cycle(top) is None, " -> ".join(_cycle(top) or [])


def test_the_package_checker_sees_a_cycle() -> None:
    graph = {"kvtune.a.x": {"kvtune.b.y"}, "kvtune.b.y": set(), "kvtune.b.z": {"kvtune.a.w"},
             "kvtune.a.w": set()}
    assert _cycle(_package_graph(graph)) is not None


def _kind_words() -> re.Pattern[str]:
    from kvtune import kind_registry as kinds

    return re.compile("|".join(map(re.escape, kinds.names())), re.I)


def _offenders(find: Callable[[Path], list[tuple[int, str]]],
               exempt: Callable[[Path], bool]) -> dict[str, list[tuple[int, str]]]:
    """The modules of kvtune (but the exempt ones) where `find` finds something, with the
    first three places of each."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        if not exempt(p) and (found := find(p)):
            out[str(p.relative_to(PKG))] = found[:3]
    return out


def _docstrings(nodes: tuple[ast.AST, ...]) -> set[int]:
    """The ids of the docstring constants among a tree's `nodes`: prose about the code, not
    code."""
    docs = set()
    for node in nodes:
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef |
                      ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return docs


def _names_in_code(path: Path, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    """Where `path` names `pattern` in code: identifiers, attributes, imports and string
    literals; docstrings and comments are prose about the code, not code."""
    return [(line, t[:60]) for line, t in _code_names(path.read_text(), str(path))
            if pattern.search(t)]


@functools.cache
def _code_names(source: str, name: str) -> tuple[tuple[int, str], ...]:
    """Every name and string literal of a module's code with its line, in the tree's order
    (what `_names_in_code` searches, gathered once a module for every pattern)."""
    nodes = _nodes_of_source(source, name)
    docs = _docstrings(nodes)
    found: list[tuple[int, str]] = []
    for node in nodes:
        texts: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            texts.append(node.value)
        elif isinstance(node, ast.Name):
            texts.append(node.id)
        elif isinstance(node, ast.Attribute):
            texts.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            texts.append(node.name)
        elif isinstance(node, ast.arg):
            texts.append(node.arg)
        elif isinstance(node, ast.alias):
            texts.append(node.name)
        elif isinstance(node, ast.keyword) and node.arg:
            texts.append(node.arg)
        elif isinstance(node, ast.ImportFrom) and node.module:
            texts.append(node.module)
        found += [(getattr(node, "lineno", 0), t) for t in texts]
    return tuple(found)


REGISTRY = PKG / "kind_registry.py"  # one line a kind: the one module outside kinds/ naming them


def test_no_module_outside_kinds_names_a_server_kind() -> None:
    """The generic layers (targets, knobs, measure, study, telemetry, export, report,
    workload, verify, the command line) ask the kind registry and name no kind."""
    pattern = _kind_words()
    offenders = _offenders(lambda p: _names_in_code(p, pattern),
                           lambda p: p.relative_to(PKG).parts[0] == "kinds" or p == REGISTRY)
    assert not offenders, offenders


def test_the_checker_sees_a_kind_named_in_code(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('"""memcached in a docstring is prose."""\n# redis in a comment too\n'
                 'x = 1\n')
    assert _names_in_code(f, _kind_words()) == []
    f.write_text('def f(kind):\n    """Prose."""\n    return kind == "redis"\n')
    assert _names_in_code(f, _kind_words()) == [(3, "redis")]
    f.write_text("from kvtune.kinds.memcached.target import MemcachedTarget\n")
    assert _names_in_code(f, _kind_words())


_HOST_PATH = re.compile(r"^/(proc|sys|dev)(/|$)")
ROOTS = PKG / "roots.py"  # the host's path roots, each defined once


def _host_paths(path: Path) -> list[tuple[int, str]]:
    """Where `path` spells a host path (/proc, /sys, /dev ...) in code: a string literal, or
    the literal start of an f-string; docstrings and messages for people (text with spaces)
    are not paths."""
    nodes = _nodes(path)
    docs = _docstrings(nodes)
    found = []
    for node in nodes:
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant):
                docs.add(id(first))  # judged here, as the f-string's start
                text = str(first.value)
                if _HOST_PATH.match(text) and " " not in text:
                    found.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs and _HOST_PATH.match(node.value) \
                and " " not in node.value:
            found.append((node.lineno, node.value))
    return found


def test_path_roots_are_defined_once() -> None:
    """Every host path is built from `kvtune.roots` (its roots, `sysctl_path`, `proc`): no
    other module spells /proc, /sys or /dev, so a root is defined in one place."""
    offenders = _offenders(_host_paths, lambda p: p == ROOTS)
    assert not offenders, offenders


def test_the_checker_sees_a_host_path_spelled(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('"""Reads /proc/stat."""\nwhy = "/proc/PID/exe is what runs"\n'
                 'x = "/system"\n')
    assert _host_paths(f) == []
    f.write_text('DEBUGFS = "/sys/kernel/debug"\n')
    assert _host_paths(f) == [(1, "/sys/kernel/debug")]
    f.write_text('def f(pid):\n    return f"/proc/{pid}/stat"\n')
    assert _host_paths(f) == [(2, "/proc/")]
    f.write_text('p = Path("/proc")\n')
    assert _host_paths(f) == [(1, "/proc")]


def _imports_scipy_stats(path: Path) -> bool:
    for node in _nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module.startswith("scipy.stats")
                or (node.module == "scipy" and any(a.name == "stats" for a in node.names))):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith("scipy.stats")
                                                for a in node.names):
            return True
    return False


def test_one_statistics_module(tmp_path: Path) -> None:
    """Tests, intervals, adjustments and correlations live in kvtune/stats.py: no other
    module imports scipy.stats (the ablation had its own Welch test, the importance
    analysis its own F test and Benjamini-Hochberg)."""
    stats = PKG / "stats.py"
    offenders = [str(p.relative_to(PKG)) for p in sorted(PKG.rglob("*.py"))
                 if p != stats and _imports_scipy_stats(p)]
    assert not offenders, offenders
    f = tmp_path / "m.py"
    for line in ("from scipy import stats as sps", "import scipy.stats",
                 "from scipy.stats import ttest_ind"):
        f.write_text(f"def g():\n    {line}\n")
        assert _imports_scipy_stats(f), line
    f.write_text("from scipy.optimize import brentq\n")
    assert not _imports_scipy_stats(f)


_IMPORT_EACH_FIRST = r"""
import importlib, json, sys
failed = {}
for name in json.loads(sys.argv[1]):
    for m in [m for m in sys.modules if m == "kvtune" or m.startswith("kvtune.")]:
        del sys.modules[m]
    try:
        importlib.import_module(name)
    except Exception as e:  # the circle shows as an ImportError or an AttributeError
        failed[name] = f"{type(e).__name__}: {e}"[:200]
print(json.dumps(failed))
"""


@pytest.mark.integration  # each module imported first in a fresh interpreter
@pytest.mark.parallel  # imports only: nothing measured, no host knob, no timing
def test_every_module_imports_first() -> None:
    """Each module of kvtune imports on its own, first, in a fresh interpreter's state (a
    kind's export or load module imported before kvtune.export or kvtune.load closed a
    circle while those registered the kinds' parts at import time: they now find them at
    the first lookup)."""
    names = sorted(_module(p) for p in PKG.rglob("*.py") if p.name != "__main__.py")
    out = subprocess.run([sys.executable, "-c", _IMPORT_EACH_FIRST, json.dumps(names)],
                         capture_output=True, text=True, timeout=300, cwd=SRC)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}


def _adhoc_figures(path: Path) -> list[tuple[int, str]]:
    """Where `path` formats a figure for people by hand: an f-string percentage (`:.1%`)
    or thousands separators (`:,.0f`), which present.py owns (`pct`, `share`, `figure`,
    `number`: a real minus, one spelling of a change everywhere)."""
    found = []
    for node in _nodes(path):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = "".join(v.value if isinstance(v, ast.Constant) else "{}"
                           for v in node.format_spec.values if isinstance(v, ast.Constant))
            if spec.endswith("%") or "," in spec:
                found.append((node.lineno, spec))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "format" and len(node.args) == 2 \
                and isinstance(node.args[1], ast.Constant) \
                and re.search(r"[%,]", str(node.args[1].value)):
            found.append((node.lineno, str(node.args[1].value)))
    return found


def _isdigit_calls(path: Path) -> list[tuple[int, str]]:
    """Where `path` asks `str.isdigit` (or isnumeric, isdecimal) itself: true of any
    script's digits and of superscripts, which int() reads as other numbers or refuses."""
    return [(node.lineno, node.func.attr) for node in _nodes(path)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("isdigit", "isnumeric", "isdecimal")]


def test_whole_numbers_are_told_by_one_function(tmp_path: Path) -> None:
    """`kvtune.quantities.is_count` (ASCII digits) decides what int() may read: a port
    given as `127.0.0.1:\u00b2` or COLUMNS=\u00b2 was a traceback."""
    from kvtune.quantities import is_count

    offenders = _offenders(_isdigit_calls, lambda p: p == PKG / "quantities.py")
    assert not offenders, offenders
    f = tmp_path / "m.py"
    f.write_text('a = "1".isdigit()\nb = "1".isnumeric() or "1".isdecimal()\n')
    assert [w for _, w in _isdigit_calls(f)] == ["isdigit", "isnumeric", "isdecimal"]
    assert [is_count(t) for t in ("11211", "0", "", "\u00b2", "\u0664", "1 ", "-1")] == \
        [True, True, False, False, False, False, False]


def test_figures_go_through_present(tmp_path: Path) -> None:
    offenders = _offenders(_adhoc_figures, lambda p: p == PKG / "present.py")
    assert not offenders, offenders
    f = tmp_path / "m.py"
    f.write_text('x = 0.5\na = f"{x:+.1%} {x:,.0f} {x:.3g}"\nb = format(x, ",")\n')
    assert sorted(s for _, s in _adhoc_figures(f)) == ["+.1%", ",", ",.0f"]


def test_a_kind_is_its_folder_and_one_registry_line() -> None:
    """Valkey, the proof: named in code only in kinds/valkey/ and on its one line of the
    registry (kind_registry.py); a kind another builds on (Redis, for Valkey) is named by
    that kind's folder too, and by no generic module (the test above)."""
    from kvtune import kind_registry as kinds

    for name in kinds.names():
        found = _names_in_code(REGISTRY, re.compile(re.escape(name), re.I))
        assert len({ln for ln, _ in found}) == 1, (name, found)  # its registry line
        pattern = re.compile(re.escape(name), re.I)
        outside = {}
        for p in sorted((PKG / "kinds").rglob("*.py")):
            rel = p.relative_to(PKG / "kinds")
            if rel.parts[0] == name:
                continue
            found = _names_in_code(p, pattern)
            builds_on = [t for _, t in found if t.startswith(f"kvtune.kinds.{name}")]
            if found and not builds_on:
                outside[str(rel)] = found[:3]
        assert not outside, (name, outside)
    registry = REGISTRY.read_text().splitlines()
    assert [ln for ln in registry if "valkey" in ln.lower() and "kvtune.kinds." in ln] == [
        '    "valkey": "kvtune.kinds.valkey",']


def test_schema_imports_no_plugin() -> None:
    deps = _graph()["kvtune.spec"]
    plugins = ("kvtune.targets", "kvtune.load", "kvtune.knobs", "kvtune.study",
               "kvtune.measure", "kvtune.telemetry", "kvtune.export")
    assert not [d for d in deps if d.startswith(plugins)], deps


def test_only_the_loader_reads_a_study_file() -> None:
    """`read_study_file`, `yaml_data` and `parse_data` are called by the loader alone."""
    callers = set()
    for p in PKG.rglob("*.py"):
        text = p.read_text()
        for name in ("read_study_file(", "yaml_data(", "parse_data("):
            for line in text.splitlines():
                s = line.strip()
                if name in s and not s.startswith(("def ", "#", '"', "`")):
                    callers.add(_module(p))
    assert callers == {"kvtune.study.loader"}, callers


def test_tune_reads_the_study_file_once(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtune import cli
    from kvtune.safety import yamlload

    reads: list[str] = []
    real = yamlload.read_study_file

    def counting(path: str | Path) -> str:
        reads.append(str(path))
        return real(path)

    monkeypatch.setattr(yamlload, "read_study_file", counting)
    study = in_tmp / "s.yaml"
    study.write_text("study: once\ntarget: {kind: synthetic, noise_cov: 0.01}\n"
                     "knobs: [synthetic.x]\nbudget: {trials: 2}\nrepetitions: 1\n"
                     "evaluation: {noise_floor_runs: 2, confirm_top: 1, confirm_rounds: 4, "
                     "ablation: false}\n")
    with pytest.raises(SystemExit) as done:
        cli.main(["tune", str(study)])
    assert done.value.code in (0, 1, None)
    assert reads == [str(study)]


# -- one way to run a program (issue 29) ----------------------------------------------------

RUNNER = "kvtune.safety.programs"
_START_MODULES = ("subprocess", "pty", "multiprocessing", "popen2", "commands")
_OS_STARTS = ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp")
_OS_PREFIXES = ("exec", "spawn")


def _starts(source: str, name: str = "<unknown>") -> list[str]:
    """Where `source` could start a program other than through the runner: an import of
    subprocess (or pty, multiprocessing), os.exec*/os.spawn*/os.system/os.popen/os.fork/
    os.posix_spawn*, shutil.which (a found binary must come from the runner, judged), and
    asyncio's subprocess functions. TYPE_CHECKING imports (annotations) are allowed."""
    found: list[str] = []

    def os_name(name: str) -> bool:
        return name in _OS_STARTS or name.startswith(_OS_PREFIXES)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            line = getattr(child, "lineno", 0)
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.split(".")[0] in _START_MODULES:
                        found.append(f"line {line}: import {a.name}")
            elif isinstance(child, ast.ImportFrom) and child.module:
                top = child.module.split(".")[0]
                if top in _START_MODULES:
                    found.append(f"line {line}: from {child.module} import ...")
                for a in child.names:
                    if (top == "os" and os_name(a.name)) or (
                            top == "shutil" and a.name == "which") or (
                            child.module == "asyncio" and "subprocess" in a.name):
                        found.append(f"line {line}: from {child.module} import {a.name}")
            elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
                mod, attr = child.value.id, child.attr
                if (mod == "os" and os_name(attr)) or (mod == "shutil" and attr == "which") \
                        or (mod == "asyncio" and "subprocess" in attr):
                    found.append(f"line {line}: {mod}.{attr}")
            visit(child)

    visit(_parse_source(source, name))
    return found


def test_only_the_runner_starts_programs() -> None:
    """Every program kvtune runs goes through kvtune.safety.programs, which judges the file
    and every directory on its path before each start (docs/security.md)."""
    offenders = {}
    for p in PKG.rglob("*.py"):
        if _module(p) == RUNNER:
            continue
        found = _starts(p.read_text(), str(p))
        if found:
            offenders[_module(p)] = found
    assert not offenders, offenders


def test_the_runner_check_sees_every_way_to_start_a_program() -> None:
    for snippet in ("import subprocess", "from subprocess import run",
                    "import os\nos.execvp('x', [])",
                    "import os\nos.system('x')", "import os\nos.posix_spawn('x', [], {})",
                    "from os import execv", "import shutil\nshutil.which('perf')",
                    "import asyncio\nasyncio.create_subprocess_exec('x')", "import pty",
                    "import os\nos.spawnv(0, 'x', [])", "import os\nos.popen('x')"):
        assert _starts(snippet), snippet
    assert not _starts("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    import subprocess\nimport os\nos.environ.get('X')")


def test_a_workload_file_is_read_once_per_run(in_tmp: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader reads and checks `load.workload_file` once; what uses it afterwards (the
    run budget, the library's features) takes the loader's document, never the file again."""
    from kvtune.load.kvload import file_duration
    from kvtune.safety import workload
    from kvtune.study.loader import load_study
    from kvtune.workload.features import of_spec

    reads: list[str] = []
    real = workload.check_workload_file

    def counting(name: str) -> dict:  # type: ignore[type-arg]
        reads.append(name)
        return real(name)

    monkeypatch.setattr(workload, "check_workload_file", counting)
    (in_tmp / "w.json").write_text('{"keys": 1000, "mix": "get:9,set:1", "value_size": 100, '
                                   '"rate": 4000, "duration": "2s"}')
    (in_tmp / "s.yaml").write_text(
        "study: once\ntarget: {kind: memcached, cpus: '0'}\n"
        "load: {mode: open, workload_file: w.json, warmup: 0, cpus: '1'}\n"
        "knobs: [memcached.threads]\n")
    loaded = load_study(in_tmp / "s.yaml")
    assert loaded.spec.load is not None
    assert file_duration(loaded.spec.load) == 2.0
    features, source = of_spec(loaded.spec)
    assert source == "model w.json" and features
    assert reads == [str(in_tmp / "w.json")]
