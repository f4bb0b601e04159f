"""Property tests (hypothesis): mutated example study files are accepted or refused with
a UserError (exit 2) by the parse + preflight path, never anything else (a traceback is
always a bug). The preflight writes nothing: it checks knobs and probes binaries only."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtune.errors import UserError
from kvtune.knobs.resolve import resolve_knobs
from kvtune.measure.session import Session
from kvtune.study.inline import check_inline_host_knobs
from kvtune.study.loader import parse_study
from kvtune.targets import target_knobs

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {p.name: p.read_text() for p in sorted((REPO / "examples").glob("*.yaml"))}
DOCS = {name: yaml.safe_load(text) for name, text in EXAMPLES.items()}

NASTY = ["-d", "-l", "0.0.0.0", "a,b=c", "murmur3,ext_path=/tmp/kvtune-fuzz:1m",
         "/sys/../etc/passwd", "/sys/power/state", "kernel.core_pattern", "0-4294967295",
         "-1", ".inf", "1e309", "--server", "--dump-arrivals", "\n", "\x00", "", "memcached",
         "/usr/bin", "sqlite:////proc/x.db", "sqlite:////tmp/kvtune-fuzz/deep/x.db",
         "postgresql+psycopg2://u:p@127.0.0.1:1/d", "|/bin/sh", "../../x", "1e400",
         "memcached.threads", "synthetic.x", "net.core.somaxconn", "etc", "zipf:0.99"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(NASTY))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
        ["name", "range", "choices", "default", "domain", "applier", "type", "low", "high",
         "sysfs", "sysctl", "memcached_flag", "memcached_option", "redis_directive",
         "args", "binary", "cpus", "x"]), inner, max_size=4)), max_leaves=8)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> str:
    doc = copy.deepcopy(DOCS[draw(st.sampled_from(sorted(DOCS)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["args", "extra_args", "storage", "seed", "cpus",
                                         "binary", "workload_file", "colour"]))] = draw(VALUES)
        else:
            parent.append(draw(VALUES))
    return yaml.safe_dump(doc, allow_unicode=True)


def _parse_and_preflight(text: str) -> str:
    try:
        spec, lines = parse_study(text, "fuzz.yaml")
        knobs = resolve_knobs(spec, lines, "fuzz.yaml", target_knobs(spec.target.kind))
        check_inline_host_knobs(spec, lines, False, "fuzz.yaml")
        Session(spec, knobs, None).preflight()
    except UserError as e:
        assert str(e).strip()
        return "refused"
    return "accepted"


@pytest.fixture
def fuzz_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=mutated())
def test_mutated_examples_are_accepted_or_refused(text: str, fuzz_cwd: Path) -> None:
    _parse_and_preflight(text)
    assert not list(fuzz_cwd.iterdir()), "the parse and preflight created a file"
    assert not Path("/tmp/kvtune-fuzz").exists()


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(EXAMPLES)), data=st.data())
def test_byte_mutations_are_refused_cleanly(name: str, data: st.DataObject,
                                           fuzz_cwd: Path) -> None:
    """Text-level damage (deleted, inserted or replaced characters) never raises
    anything but UserError."""
    text = EXAMPLES[name]
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = min(len(text), i + data.draw(st.integers(0, 8)))
        insert = data.draw(st.one_of(st.text(max_size=6), st.sampled_from(
            ["&a ", "*a", "[", "{", ": ", "\n  - ", "!!python/object ", "\t", "'", '"',
             "? ", "<<: ", "---\n", "%YAML 1.1\n"])))
        text = text[:i] + insert + text[j:]
    _parse_and_preflight(text)


def test_the_examples_themselves_are_accepted(fuzz_cwd: Path) -> None:
    # Beside what they name (examples/workloads/: the captured models), as they ship.
    (fuzz_cwd / "workloads").symlink_to(REPO / "examples" / "workloads")
    for name, text in EXAMPLES.items():
        assert _parse_and_preflight(text) == "accepted", name
