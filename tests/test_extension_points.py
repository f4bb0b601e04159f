"""Each extension point takes a toy implementation in its own module plus one registration:
the toy runs through kvtune's real machinery (the runner, a real server on loopback)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvtune import load, telemetry
from kvtune.errors import UserError
from kvtune.knobs.resolve import resolve_knobs
from kvtune.load import base as load_base
from kvtune.measure.session import Session
from kvtune.study.loader import parse_study
from kvtune.telemetry import Collector
from kvtune.telemetry import base as telemetry_base


class ToyDriver(load.LoadDriver):
    """A closed-loop memcached client in Python: one connection, set then get, for the
    study's load.duration."""

    tool = "toy"

    def run(self, address: str, protocol: str, seed: int) -> load.LoadResult:
        assert protocol == "memcache"
        host, _, port = address.rpartition(":")
        lat: list[float] = []
        hits = gets = sent = 0
        with socket.create_connection((host, int(port)), timeout=5) as s:
            f = s.makefile("rb")
            t0 = time.monotonic()
            while time.monotonic() - t0 < self.spec.duration:
                key = f"toy{seed}:{len(lat) % 100}"
                start = time.perf_counter()
                req = f"set {key} 0 0 3\r\nabc\r\n".encode()
                s.sendall(req)
                assert f.readline() == b"STORED\r\n"
                get = f"get {key}\r\n".encode()
                s.sendall(get)
                sent += len(req) + len(get)
                gets += 1
                while (line := f.readline()) not in (b"END\r\n", b""):
                    hits += line.startswith(b"VALUE")
                lat.append((time.perf_counter() - start) * 1e6)
            elapsed = time.monotonic() - t0
        us = np.array(lat)
        metrics = {"ops_per_sec": 2 * len(lat) / elapsed, "p50_us": float(np.median(us)),
                   "p99_us": float(np.percentile(us, 99)), "hit_ratio": hits / gets,
                   "errors": 0, "server_errors": 0}
        return load.LoadResult(metrics, "ok", "", {"gets": gets, "sets": len(lat),
                                                 "sent_bytes": sent})


STUDY = """\
study: toy-load
target: {kind: memcached, cpus: "0"}
load: {tool: toy, mode: closed, connections: 1, duration: 300ms, warmup: 10ms, cpus: "1"}
knobs: [{name: memcached.threads, range: [1, 4]}]
objective: {metric: p99_us}
"""


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_base, "_REGISTERED", dict(load_base._REGISTERED))
    load.register(ToyDriver)


def test_toy_load_driver(toy_registered: None, memcached_bin: str) -> None:
    spec, lines = parse_study(STUDY, "toy.yaml")  # load.tool: toy validates once registered
    assert spec.load is not None and spec.load.tool == "toy"
    session = Session(spec, resolve_knobs(spec, lines), None)
    session.preflight()
    rep = session.measure({**session.baseline, "memcached.threads": 2})
    # A busy hypervisor may flag the repetition for steal; any other flag is the driver's.
    assert rep.status == "ok" or all(f.startswith("steal") for f in rep.flags), rep.flags
    assert rep.raw["load"]["tool"] == "toy"
    assert rep.metrics["verdict"] == "ok" and rep.metrics["hit_ratio"] == 1.0
    assert rep.metrics["ops_per_sec"] > 0 and rep.metrics["p99_us"] >= rep.metrics["p50_us"]
    # The toy's requests reached the real server the runner started (with the trial's -t 2).
    stats = rep.raw["server_stats"]["stats"]
    assert stats["cmd_get"] == rep.raw["load"]["gets"] > 10
    assert stats["threads"] == 2
    # Telemetry ran around the toy load as around kvload.
    assert rep.metrics["proc_voluntary_switches"] > 0


def test_unknown_load_tool_is_a_study_file_error() -> None:
    with pytest.raises(UserError, match=r"load.tool, line 3: unknown load tool 'toy' "
                                        r"\(known: cache-aside, kvload, "):
        parse_study(STUDY, "toy.yaml")


class ToyCollector(Collector):
    """`toy_`: bytes the server read (sockets included) over the load, from /proc/PID/io."""

    name = "toy"
    prefixes = ("toy_",)

    def _rchar(self) -> int:
        for line in Path(f"/proc/{self.ctx.pid}/io").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "rchar":
                return int(value)
        raise ValueError("no rchar in /proc/PID/io")

    def start(self) -> None:
        self.before = self._rchar()

    def stop(self) -> None:
        self.after = self._rchar()

    def metrics(self) -> dict[str, float]:
        return {"toy_read_bytes": float(self.after - self.before)}

    def raw(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after}


@pytest.fixture
def toy_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry_base, "_COLLECTORS", dict(telemetry_base._COLLECTORS))
    telemetry.register(ToyCollector)


def test_toy_collector(toy_collector: None, toy_registered: None, memcached_bin: str) -> None:
    """A registered collector runs around every repetition's load, beside the built-in
    ones; its figures are stored with the repetition and count as telemetry."""
    spec, lines = parse_study(STUDY, "toy.yaml")
    session = Session(spec, resolve_knobs(spec, lines), None)
    session.preflight()
    rep = session.measure(dict(session.baseline))
    assert rep.status == "ok" or all(f.startswith("steal") for f in rep.flags), rep.flags
    # memcached read at least every byte the toy driver sent it, during the window.
    sent = rep.raw["load"]["sent_bytes"]
    assert sent > 1000 and sent <= rep.metrics["toy_read_bytes"] < 4 * sent
    tel = rep.raw["telemetry"]["toy"]
    assert tel["after"] - tel["before"] == rep.metrics["toy_read_bytes"]
    assert telemetry.is_telemetry("toy_read_bytes") and not telemetry.is_telemetry("p99_us")
    assert rep.metrics["proc_voluntary_switches"] > 0  # the built-in ones still ran


# -- a knob family: an applier module and its catalog entries --------------------------------


def test_toy_knob_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new knob family takes an applier (here a class in this test) and catalog entries
    (`catalog.register`): a study file names the knob, resolution builds it with the file's
    range, the baseline is the host's value, apply goes through the journal, the rules
    accept it, export asks the applier for its entry, and restore puts the value back."""
    from kvtune.export.base import Recommendation
    from kvtune.host.facts import HostFacts
    from kvtune.host.fs import HostFS
    from kvtune.host.journal import Journal
    from kvtune.knobs import catalog
    from kvtune.knobs.appliers.base import (
        Applier,
        ApplyEnv,
        Availability,
        ExportEntry,
        HostContext,
        Launch,
    )
    from kvtune.knobs.baseline import baseline_value
    from kvtune.knobs.domain import Domain, Value
    from kvtune.knobs.knob import Knob

    class ToyLevel(Applier):
        """A host setting in a sysfs-like file, written through the journal."""

        scope = "host"
        restart = False

        def __init__(self, path: str) -> None:
            self.path = path

        def where(self) -> str:
            return self.path

        def check(self, ctx: HostContext) -> Availability:
            if not ctx.fs.exists(self.path):
                return Availability(False, f"{self.path} does not exist")
            return Availability(True, current=self.current(ctx))

        def current(self, ctx: HostContext) -> Value | None:
            text = ctx.fs.read_text(self.path, default="")  # None when unreadable here
            return int(text) if text.strip() else None

        def apply(self, value: Value, env: ApplyEnv) -> None:
            assert env.journal is not None
            env.journal.write(env.ctx.fs.path(self.path), self.format(value))

        def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
            return ExportEntry("sysfs", self.path, self.format(value), live=True)

    root = tmp_path / "root"
    (root / "sys/kernel/toy").mkdir(parents=True)
    (root / "sys/kernel/toy/level").write_text("3\n")
    ctx = HostContext(HostFacts("6.12.0", (6, 12), "toy", 2, "v2", None, "eevdf", False),
                      fs=HostFS(root))

    monkeypatch.setattr(catalog, "CATALOG", dict(catalog.CATALOG))
    catalog.register(Knob("toy.level", Domain("int", 1, 9), ToyLevel("/sys/kernel/toy/level"),
                          None, "a toy host knob"))
    with pytest.raises(ValueError, match="already"):
        catalog.register(Knob("toy.level", Domain("int", 1, 9), ToyLevel("/x")))

    spec, lines = parse_study("study: toy\ntarget: {kind: memcached}\nload: {rate: 10}\n"
                             "knobs:\n  - name: toy.level\n    range: [2, 8]\n")
    (knob,) = resolve_knobs(spec, lines, ctx=ctx)
    assert knob.domain.low == 2 and knob.domain.high == 8 and knob.scope == "host"
    assert knob.applier.check(ctx) == Availability(True, current=3)
    assert baseline_value(knob, ctx, None) == 3
    assert catalog.check_rules({"toy.level": 7}, ctx) is None

    jpath = tmp_path / "journal.json"
    with Journal(jpath, allowed_roots=(root / "sys",)) as j:
        knob.applier.apply(7, ApplyEnv(j, Launch(), ctx))
        assert knob.applier.current(ctx) == 7
    assert knob.applier.current(ctx) == 3 and not jpath.exists()

    rec = Recommendation("toy", "memcached", {"toy.level": 7}, {}, "test", ctx)
    (row,) = rec.entries("host")
    assert row.entry == ExportEntry("sysfs", "/sys/kernel/toy/level", "7", live=True)
    assert row.rollback is not None and row.rollback.value == "3"


# -- a target: its module (the class and its own knobs) plus one registration -------------


def _toy_target_classes() -> tuple[type, type]:
    from kvtune.knobs.appliers.base import Applier, ApplyEnv, Availability, HostContext
    from kvtune.knobs.appliers.base import Launch as _Launch
    from kvtune.knobs.domain import Domain, Value
    from kvtune.knobs.knob import Knob
    from kvtune.targets.base import ServerTarget, SimulatedTarget

    class ToyFlag(Applier):
        """A command-line flag of the toy server (its own knob family, one class)."""

        scope = "app"
        target = "toymc"

        def __init__(self, flag: str) -> None:
            self.flag = flag

        def where(self) -> str:
            return self.flag

        def check(self, ctx: HostContext) -> Availability:
            return Availability("toymc" in ctx.versions, "toymc is not installed")

        def apply(self, value: Value, env: ApplyEnv) -> None:
            env.launch.flags += [self.flag, self.format(value)]

    class ToyMemcached(ServerTarget):
        """memcached under another name: the argv, a ping and (no) stats are all a server
        target needs; the runner starts it, loads it with kvload and reads telemetry."""

        kind = "toymc"
        default_binary = "memcached"
        version_args = ("-V",)
        protocol = "memcache"

        @classmethod
        def knobs(cls) -> dict[str, Knob]:
            return {"toymc.threads": Knob("toymc.threads", Domain("int", 1, 4),
                                          ToyFlag("-t"), 4, "worker threads")}

        def argv(self, launch: _Launch) -> list[str]:
            return [self.binary, "-l", self.host, "-p", str(self.port), "-U", "0",
                    "-u", "root", *launch.flags]

        def ping(self, timeout: float = 1.0) -> bool:
            try:
                with socket.create_connection((self.host, self.port), timeout=timeout) as s:
                    s.sendall(b"version\r\n")
                    return s.recv(64).startswith(b"VERSION")
            except OSError:
                return False

        def stats(self) -> dict[str, Any]:
            return {}

    class ToySurface(SimulatedTarget):
        """A process-less target: throughput peaks at depth 6."""

        kind = "toysurface"

        @classmethod
        def knobs(cls) -> dict[str, Knob]:
            from kvtune.targets.synthetic import SyntheticParam

            return {"toy.depth": Knob("toy.depth", Domain("int", 1, 10),
                                      SyntheticParam("depth"), 1, "queue depth")}

        def measure(self, params: dict[str, Value], rng: np.random.Generator
                    ) -> dict[str, Any]:
            depth = int(params["toy.depth"])  # type: ignore[arg-type]
            ops = 1000.0 * (1 + 0.5 * np.exp(-((depth - 6) / 2) ** 2)) * rng.lognormal(0, 0.01)
            return {"ops_per_sec": ops, "p99_us": 1e6 / ops, "errors": 0, "verdict": "ok"}

    return ToyMemcached, ToySurface


@pytest.fixture
def toy_targets(monkeypatch: pytest.MonkeyPatch) -> tuple[type, type]:
    from kvtune import targets

    monkeypatch.setattr(targets, "_REGISTRY", dict(targets._REGISTRY))
    monkeypatch.setattr(targets, "_CLASSES", dict(targets._CLASSES))
    server, surface = _toy_target_classes()
    targets.register("toymc", server)
    targets.register("toysurface", surface)
    yield server, surface
    targets._host_context.cache_clear()


def test_toy_simulated_target_runs_a_whole_study(toy_targets: tuple[type, type],
                                                 tmp_path: Path) -> None:
    from rich.console import Console

    from kvtune.study.loader import load_study
    from kvtune.study.run import StudyRun

    p = tmp_path / "toy.yaml"
    p.write_text("study: toy\ntarget: {kind: toysurface}\nknobs: [toy.depth]\n"
                 "budget: {trials: 12}\nrepetitions: 2\nsampler: random\nseed: 1\n"
                 "evaluation: {noise_floor_runs: 3, confirm_top: 1, confirm_rounds: 5, "
                 "drift_every: 0}\n")
    run = StudyRun(load_study(p), Console(quiet=True), base_dir=tmp_path)
    result = run.run()
    assert run.session.space is not None and run.session.space.baseline == {"toy.depth": 1}
    assert result is not None and result.recommended is not None, result
    assert 4 <= result.recommended.config["toy.depth"] <= 8


def test_toy_server_target_is_started_loaded_and_stopped(
        toy_targets: tuple[type, type], memcached_bin: str, kvload_bin: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtune import targets

    monkeypatch.setenv("KVLOAD", kvload_bin)
    assert targets.host_context().versions["toymc"] >= (1, 4, 0)  # found on PATH, once
    spec, lines = parse_study(
        "study: toymc\ntarget: {kind: toymc, cpus: '0'}\n"
        "load: {mode: closed, connections: 2, duration: 300ms, warmup: 100ms, cpus: '1', "
        "workload: {keys: 1000}}\nknobs: [toymc.threads]\n", "toymc.yaml")
    knobs = resolve_knobs(spec, lines, extra_knobs=targets.target_knobs("toymc"))
    session = Session(spec, knobs, None)
    space = session.preflight()
    assert space.baseline == {"toymc.threads": 4}
    rep = session.measure({"toymc.threads": 2})
    assert rep.status in ("ok", "flagged"), rep.reason
    assert rep.metrics["ops_per_sec"] > 0 and rep.metrics["hit_ratio"] == 1.0
    assert rep.raw["argv"][-2:] == ["-t", "2"] and "memcached" in rep.raw["argv"][3]
    assert rep.metrics["proc_voluntary_switches"] > 0  # telemetry ran around the toy server
    with pytest.raises(UserError, match="unknown target kind 'nosuch'"):
        parse_study("study: x\ntarget: {kind: nosuch}\n", "x.yaml")


# -- a new target kind and a new load driver: one module each, plus one registration line --

TOY_TARGET_MODULE = '''\
"""A memcached look-alike target kind: its module is the whole of it."""
from kvtune.kinds.memcached.target import MemcachedTarget


class Mc2Target(MemcachedTarget):
    kind = "mc2"

    @classmethod
    def check_args(cls, args):
        if any(a.startswith("--") for a in args):
            raise ValueError("mc2 takes short flags only")
        super().check_args(args)
'''

TOY_DRIVER_MODULE = '''\
"""A load driver in Python: one connection, sets and gets, for load.duration."""
import json
import socket
import time

from kvtune.load import LoadDriver, LoadResult


class PingLoad(LoadDriver):
    tool = "pingload"

    @classmethod
    def check_extra_args(cls, args):
        if args not in ([], ["--quick"]):
            raise ValueError("pingload takes only --quick")

    def run(self, address, protocol, seed):
        host, _, port = address.rpartition(":")
        n = 0
        with socket.create_connection((host, int(port)), timeout=5) as s:
            f = s.makefile("rb")
            t0 = time.monotonic()
            while time.monotonic() - t0 < self.spec.duration:
                s.sendall(b"set k 0 0 1\\r\\nx\\r\\nget k\\r\\n")
                assert f.readline() == b"STORED\\r\\n"
                while f.readline() not in (b"END\\r\\n", b""):
                    pass
                n += 2
            elapsed = time.monotonic() - t0
        return LoadResult({"ops_per_sec": n / elapsed, "errors": 0, "server_errors": 0})
'''

# The one line each that a new kind or driver adds to its registry (targets/__init__.py's
# _REGISTRY, load/__init__.py's register list), made here from outside the package.
REGISTRATION = ("from kvtune import load, targets; import pingload; "
                "targets.register('mc2', 'mc2target:Mc2Target'); load.register(pingload.PingLoad)")


def _own_host_state() -> dict[str, str]:
    """This test's private journal, run directory (the host lock) and no library (conftest),
    not the host's /run/kvtune and ~/.local/share/kvtune, for a child given an environment
    of its own."""
    return {k: os.environ[k] for k in ("KVTUNE_JOURNAL", "KVTUNE_RUN_DIR", "KVTUNE_LIBRARY")}


def test_new_target_kind_and_load_driver_touch_two_files_each(
        memcached_bin: str, tmp_path: Path) -> None:
    """The architecture's promise: a target kind is its module plus one registry line, a
    load driver likewise; the schema, the loader, the session and the command line need no
    change. Both run a real memcached through `kvtune run`, and each validates its own
    arguments (the loader asks the registered class, with the key and line)."""
    import subprocess
    import sys

    (tmp_path / "mc2target.py").write_text(TOY_TARGET_MODULE)
    (tmp_path / "pingload.py").write_text(TOY_DRIVER_MODULE)
    study = tmp_path / "mc2.yaml"
    study.write_text("study: mc2\ntarget: {kind: mc2, cpus: '0', args: ['-m', '32']}\n"
                     "load: {tool: pingload, mode: closed, duration: 300ms, warmup: 0}\n"
                     )
    src = Path(__file__).resolve().parents[1] / "src"

    def kvtune(*args: str) -> subprocess.CompletedProcess[str]:
        code = (f"{REGISTRATION}; from kvtune.cli import main; import sys; "
                f"main({list(args)!r})")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path,
                              env={"PYTHONPATH": f"{tmp_path}:{src}", "PATH": "/usr/bin:/bin",
                                   **_own_host_state()})

    out = kvtune("run", str(study), "--repetitions", "1", "--json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["metrics"]["ops_per_sec"] > 0, doc
    # Each validates its own part of the study file, reported at the key and its line.
    study.write_text(study.read_text().replace("['-m', '32']", "['--memory-limit', '32']"))
    bad = kvtune("run", str(study))
    assert bad.returncode == 2 and "target.args, line 2: mc2 takes short flags only" in \
        bad.stderr, bad.stderr
    study.write_text(study.read_text().replace("['--memory-limit', '32']", "[]")
                     .replace("warmup: 0}", "warmup: 0, extra_args: ['--slow']}"))
    bad = kvtune("run", str(study))
    assert bad.returncode == 2 and "load.extra_args, line 3: pingload takes only --quick" in \
        bad.stderr, bad.stderr
    # Two files each: the module and the registry line; nothing else of kvtune was touched.
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["mc2target.py", "pingload.py"]


TOY_KIND_MODULE = '''
"""A server kind from outside kvtune: memcached's parts under another name, its own
target class and telemetry prefix."""
from dataclasses import replace

from kvtune.kinds import memcached
from kvtune.kinds.memcached.target import MemcachedTarget


class Mc4Target(MemcachedTarget):
    kind = "mc4"


def digest(stats):
    items = (stats.get("stats") or {}).get("curr_items", 0)
    return {"mc4_items": float(items)}, {"version": "toy"}


KIND = replace(memcached.KIND, name="mc4", label="mc4", target="mc4kind:Mc4Target",
               knobs=lambda: [], rules=lambda: [], presets=lambda: {},
               exporters=lambda: [], load_drivers=lambda: [], inline={}, capture=None,
               thread_knob=None, export_family=None, metric_prefix="mc4_", digest=digest)
'''


def test_a_new_server_kind_is_its_folder_and_one_registry_line(
        memcached_bin: str, tmp_path: Path) -> None:
    """A kind registered from outside the package (its module and `kind_registry.register`) is a
    target the loader accepts, the runner starts, and whose stats the telemetry digests
    under its prefix: nothing of kvtune's generic layers names it."""
    import subprocess
    import sys

    (tmp_path / "mc4kind.py").write_text(TOY_KIND_MODULE)
    study = tmp_path / "mc4.yaml"
    study.write_text("study: mc4\ntarget: {kind: mc4, cpus: '0', args: ['-m', '32']}\n"
                     "load: {mode: closed, duration: 300ms, warmup: 0, cpus: '1'}\n")
    src = Path(__file__).resolve().parents[1] / "src"
    code = ("from kvtune import kind_registry; kind_registry.register('mc4', 'mc4kind'); "
            "from kvtune.cli import main; main(['run', 'mc4.yaml', '--repetitions', '1', "
            "'--json'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path,
                         env={"PYTHONPATH": f"{tmp_path}:{src}", "PATH": "/usr/bin:/bin",
                              **_own_host_state()})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["metrics"]["ops_per_sec"] > 0
    assert doc["metrics"]["mc4_items"] > 0, doc["metrics"]
