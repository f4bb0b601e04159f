"""Study-file validation: every bad file gets a message naming what and where."""

from __future__ import annotations

import textwrap

import pytest

from kvtune.errors import UserError
from kvtune.knobs.resolve import resolve_knobs
from kvtune.spec import parse_duration
from kvtune.study.loader import parse_study

GOOD = """\
study: mc
target:
  kind: memcached
  port: 22122
  cpus: "0"
load:
  mode: open
  rate: 20000
  duration: 2s
  warmup: 500ms
  cpus: "1"
knobs:
  - memcached.threads
  - name: memcached.reqs_per_event
    range: [1, 50]
objective:
  metric: p99_us
constraints:
  - "hit_ratio >= 0.9"
budget:
  trials: 5
"""


def _err(text: str) -> UserError:
    with pytest.raises(UserError) as ei:
        spec, lines = parse_study(textwrap.dedent(text), "s.yaml")
        resolve_knobs(spec, lines, "s.yaml")
    assert ei.value.exit_code == 2
    return ei.value


def test_good_file_parses_with_defaults() -> None:
    spec, lines = parse_study(GOOD)
    knobs = resolve_knobs(spec, lines)
    assert [k.name for k in knobs] == ["memcached.threads", "memcached.reqs_per_event"]
    assert knobs[1].domain.low == 1 and knobs[1].domain.high == 50
    assert spec.load is not None and spec.load.duration == 2.0 and spec.load.warmup == 0.5
    assert spec.objective.resolved_direction == "minimize"
    assert spec.repetitions == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("study: x\ntarget: {kind: memcached}\n", "a memcached target needs a load section"),
        ("study: x\ntarget: {kind: mongodb}\n", "target.kind, line 2"),
        ("study: x\ntarget: {kind: memcached, colour: red}\nload: {rate: 1}\n",
         "target.colour, line 2: unknown key"),
        ("study: x\ntarget: {kind: memcached}\nload: {mode: open}\n", "needs a rate"),
        ("study: x\ntarget: {kind: memcached}\nload: {rate: 10, duration: soon}\n",
         "load.duration, line 3: 'soon' is not a duration"),
        ("study: x\ntarget: {kind: memcached, host: 10.0.0.5}\nload: {rate: 10}\n",
         "not a loopback address"),
        ("study: x\ntarget: {kind: memcached, cpus: 'a-b'}\nload: {rate: 10}\n",
         "target.cpus"),
        ("study: x\ntarget: {kind: memcached}\nload: {rate: 10}\nobjective: {metric: speed}\n",
         "objective.metric, line 4: unknown metric 'speed'"),
        ("study: x\ntarget: {kind: memcached}\nload: {rate: 10}\nconstraints: ['p99 < 5']\n",
         "unknown metric 'p99'"),
        ("study: x\ntarget: {kind: memcached}\nload: {rate: 10}\nbudget: {}\n",
         "give trials, time or both"),
        ("study: x\ntarget: {kind: memcached}\nload: {rate: 10}\nrepetitions: 0\n",
         "repetitions, line 4"),
        ("study: 'a b'\ntarget: {kind: memcached}\nload: {rate: 10}\n", "study, line 1"),
        ("study: x\ntarget: {kind: memcached, port: 70000}\nload: {rate: 10}\n",
         "target.port, line 2"),
        ("study: x\ntarget: {kind: memcached}\nload: {rate: 10}\npreset: fastest\n",
         "unknown preset 'fastest'"),
        ("- just\n- a list\n", "a study file is a YAML mapping"),
        ("study: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_files(text: str, expected: str) -> None:
    assert expected in str(_err(text))


def test_every_problem_is_reported_at_once() -> None:
    e = _err("study: x\ntarget: {kind: memcached, port: -1}\nload: {rate: -5, connections: 0}\n")
    text = str(e)
    assert "target.port, line 2" in text
    assert "load.rate, line 3" in text
    assert "load.connections, line 3" in text


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ("  - memcached.thread_count\n", "knobs[0], line 5: unknown knob 'memcached.thread_count'"),
        ("  - redis.io_threads\n", "is a redis knob but the target is memcached"),
        ("  - name: memcached.threads\n    range: [8, 2]\n", "low 8.0 is above high 2.0"),
        ("  - name: memcached.slab_automove\n    range: [0, 2]\n", "range applies to numbers"),
        ("  - name: memcached.threads\n    choices: [1, 2]\n", "choices apply to categorical"),
        ("  - memcached.threads\n  - memcached.threads\n", "listed twice"),
        ("  - name: memcached.threads\n    default: 99\n", "outside [1, 16]"),
        ("  - name: my.knob\n    applier: {sysctl: net.core.somaxconn}\n", "needs a type"),
        ("  - name: my.knob\n    domain: {type: int, low: 1, high: 2}\n"
         "    applier: {sysfs: /etc/passwd}\n", "must be under /sys/"),
        ("  - name: my.knob\n    domain: {type: int, low: 1, high: 2}\n"
         "    applier: {sysctl: x, sysfs: /sys/y}\n", "give exactly one of"),
    ],
)
def test_bad_knobs(knobs: str, expected: str) -> None:
    text = "study: x\ntarget: {kind: memcached}\nload: {rate: 10}\nknobs:\n" + knobs
    assert expected in str(_err(text))


def test_inline_knob() -> None:
    text = ("study: x\ntarget: {kind: memcached}\nload: {rate: 10}\nknobs:\n"
            "  - name: my.fin\n    domain: {type: int, low: 10, high: 60}\n"
            "    applier: {sysctl: net.ipv4.tcp_fin_timeout}\n")
    spec, lines = parse_study(text)
    (k,) = resolve_knobs(spec, lines)
    assert k.scope == "host" and k.applier.where() == "/proc/sys/net/ipv4/tcp_fin_timeout"


def test_preset_expands_and_filters_by_target() -> None:
    text = "study: x\ntarget: {kind: redis}\nload: {rate: 10}\npreset: redis-throughput\n"
    spec, lines = parse_study(text)
    names = [k.name for k in resolve_knobs(spec, lines)]
    assert "redis.io_threads" in names and "thp.enabled" in names
    assert not any(n.startswith("memcached.") for n in names)


@pytest.mark.parametrize(("raw", "seconds"), [("10s", 10), ("500ms", 0.5), ("2m", 120), (3, 3)])
def test_durations(raw: object, seconds: float) -> None:
    assert parse_duration(raw) == seconds
