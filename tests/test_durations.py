"""Durations have one parser, kvtune.durations, with kvload's grammar (issue 32): the study
file, the workload-file check, the run budget and load.extra_args agree, so a workload
file's `us` duration is the budget it says, and a unit kvload does not read is refused with
the forms it does, exit 2, before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.cli import cli

from kvtune.durations import parse_duration
from kvtune.load.kvload import KvloadDriver, file_duration
from kvtune.study.loader import load_text

REPO = Path(__file__).resolve().parents[1]

STUDY = """\
study: dur
target: {{kind: memcached, cpus: "0"}}
load:
  mode: closed
  cpus: "1"
  workload_file: {wl}
knobs: []
repetitions: 1
"""


@pytest.mark.parametrize(("text", "seconds"), [
    ("250us", 250e-6), ("250µs", 250e-6), ("1500000000ns", 1.5), ("1500ms", 1.5), ("1.5s", 1.5),
    ("2m", 120), ("1h", 3600), ("3", 3), (" 5 ms ", 0.005), (2.5, 2.5)])
def test_kvloads_units_are_read(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5ks", "1e3ms", "-1s", "", "5 s s", ".5s", "1d", "0s"])
def test_other_forms_are_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"must be positive|units ns, us, ms, s, m, h"):
        parse_duration(text)


def _budget(tmp_path: Path, doc: dict[str, object], name: str) -> float:
    wl = tmp_path / f"{name}.json"
    wl.write_text(json.dumps(doc))
    loaded = load_text(STUDY.format(wl=wl.name), "s.yaml", base_dir=tmp_path)
    assert loaded.spec.load is not None
    return file_duration(loaded.spec.load)


def test_a_workload_files_us_duration_is_its_budget(tmp_path: Path) -> None:
    """The file's duration, not load.duration's default, whatever unit it is written in."""
    base = {"mode": "closed", "keys": 100}
    ms = _budget(tmp_path, {**base, "duration": "1500ms"}, "ms")
    us = _budget(tmp_path, {**base, "duration": "1500000us"}, "us")
    ns = _budget(tmp_path, {**base, "duration": "1500000000ns"}, "ns")
    assert ms == us == ns == pytest.approx(1.5)
    phases = _budget(tmp_path, {**base, "phases": [{"duration": "500000us"},
                                                   {"duration": "1s"}]}, "phases")
    assert phases == pytest.approx(1.5)


def test_the_study_file_and_extra_args_take_the_same_units(tmp_path: Path) -> None:
    text = STUDY.format(wl="-").replace("  workload_file: -\n", "  duration: 1500000us\n"
                         "  warmup: 0us\n  extra_args: [--timeout, 500us]\n")
    load = load_text(text, "s.yaml", base_dir=tmp_path).spec.load
    assert load is not None and load.duration == pytest.approx(1.5) and load.warmup == 0
    KvloadDriver.check_extra_args(["--timeout", "250us"])
    with pytest.raises(ValueError, match="--timeout"):
        KvloadDriver.check_extra_args(["--timeout", "5ks"])


def kvtune(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd)


@pytest.mark.parametrize(("doc", "where"), [
    ({"duration": "5ks"}, "duration: not a duration such as 10s, 500ms, 250us or 2m"),
    ({"phases": [{"duration": "2 weeks"}]}, "phases[0].duration: not a duration"),
    ({"phases": [{"rate": 100}]}, "phases[0].duration: a phase needs a positive duration"),
])
def test_a_bad_duration_in_a_workload_file_is_a_clear_error(tmp_path: Path,
                                                            doc: dict[str, object],
                                                            where: str) -> None:
    (tmp_path / "w.json").write_text(json.dumps(doc))
    (tmp_path / "s.yaml").write_text(STUDY.format(wl="w.json"))
    r = kvtune(tmp_path, "run", "s.yaml")
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert "load.workload_file, line 6" in r.stderr and where in r.stderr, r.stderr
    assert not Path(os.environ["KVTUNE_JOURNAL"]).exists()  # nothing was started


GRAMMAR = REPO / "kvload" / "tests" / "grammar.json"


def _or_none(parse, text):  # type: ignore[no-untyped-def]
    try:
        return parse(text)
    except ValueError:
        return None


def test_python_and_kvload_read_every_quantity_alike() -> None:
    """One table of cases (kvload/tests/grammar.json) for the quantities both kvtune's
    Python and kvload read: durations, rates, sizes and CPU lists, each text with what it
    parses to or null when both refuse it. kvload's `the_grammar_table` (cargo test) checks
    its parsers against the same table, so a form one side takes and the other refuses
    fails one of them."""
    from kvtune.cpulist import parse_cpus
    from kvtune.load.kvload import KvloadDriver
    from kvtune.quantities import MAX_RATE, MAX_RELATIVE_TTL, parse_rate, parse_size
    from kvtune.spec import parse_slo

    parsers = {  # each as kvload gives it: nanoseconds, req/s, bytes, sorted CPUs, µs
        "duration": lambda t: round(parse_duration(t, zero=True) * 1e9),
        "rate": parse_rate, "size": parse_size, "cpus": parse_cpus,
        "slo_bound_us": lambda t: parse_slo(f"p99_us <= {t}").bound_us,
    }
    table = json.loads(GRAMMAR.read_text())
    wrong = [(name, text, got, want) for name, parse in parsers.items()
             for text, want in table[name] if (got := _or_none(parse, text)) != want]
    assert not wrong, wrong
    assert (table["max_relative_ttl"], table["max_rate"], table["kvload_max_cpu"]) == (
        MAX_RELATIVE_TTL, MAX_RATE, KvloadDriver.max_cpu)


def test_the_table_checks_each_side() -> None:
    """The table is not vacuous: it holds accepted and refused texts of each quantity, and
    the forms Rust's own number parsers take (exponent, sign, a bare point) are refused."""
    table = json.loads(GRAMMAR.read_text())
    for name in ("duration", "rate", "size", "cpus", "slo_bound_us"):
        wants = [w for _, w in table[name]]
        assert any(w is None for w in wants) and any(w is not None for w in wants), name
    refused = {t for name in ("duration", "rate", "size", "cpus")
               for t, w in table[name] if w is None}
    assert {"1e3ms", "+2s", ".5s", "1e5", "+5", "+1", "1e3"} <= refused
