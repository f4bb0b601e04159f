"""The kvload driver: runs kvload (kvtune's own open-loop generator, docs/kvload.md) and
turns its JSON document into kvtune's metrics and verdict.

kvload's contract (docs/kvload.md): exit 0 with a JSON document when the run completed
(its verdict may still be `saturated` or `client_bound`), exit 2 for bad arguments, exit
1 with one `kvload: error: ...` line for runtime failures such as a refused connection.
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtune import durations, present
from kvtune.errors import HarnessError, TrialFailed
from kvtune.load.base import VERDICTS, LoadDriver, LoadResult, transport_for
from kvtune.load.transport import LocalTransport, Transport
from kvtune.quantities import plain
from kvtune.safety import args as scan
from kvtune.safety import programs

if TYPE_CHECKING:
    from kvtune.spec import CapacitySearch, LoadSpec

# Set when kvtune runs from its repository checkout (src/kvtune beside kvload/Cargo.toml):
# the checkout's own cargo build is then the kvload that matches the source.
_SRC = Path(__file__).resolve().parents[2]
CHECKOUT: Path | None = _SRC.parent if (_SRC.name == "src" and (
    _SRC.parent / "kvload" / "Cargo.toml").is_file()) else None

# The most runs of one capacity search (kvload --max-steps): each is a warm-up and a window
# (the host watch's last looks may add up to three).
MAX_STEPS = 24
# The kvload JSON schemas kvtune reads.
SEARCH_SCHEMA = "kvload/search/2"
PROFILE_SCHEMA = "kvload/profile/1"
# Search verdicts the host, not the configuration, caused: the repetition failed, and the
# next one may not.
HOST_VERDICTS = ("host_disturbed", "host_changed")

# load.extra_args may hold only these kvload flags: they change how the load is measured,
# never where it goes (--server), what it writes (--json, --dump-arrivals) or what it
# reads (--workload). Flag -> pattern of its value (None: takes no value).
_DURATION = durations.pattern(6)  # kvload's units, at most 6 digits each side
SAFE_EXTRA_ARGS: dict[str, str | None] = {
    "--timeout": _DURATION, "--spin-us": r"[0-9]{1,6}", "--max-outstanding": r"[0-9]{1,5}",
    "--max-item-size": r"[0-9]{1,10}[KMkm]?", "--realtime": None,
}


def kvload_places() -> list[tuple[str, Path | None]]:
    """Where kvtune looks for kvload, in order (docs/kvload.md): the KVLOAD environment
    variable; the checkout's release build, only when kvtune runs from its checkout; the
    kvload installed beside kvtune (the same environment's scripts directory, where the
    kvload wheel puts it); then PATH."""
    env = os.environ.get("KVLOAD")
    places: list[tuple[str, Path | None]] = [("$KVLOAD", Path(env) if env else None)]
    if CHECKOUT is not None:
        places.append(("the checkout's build (make kvload)",
                       CHECKOUT / "kvload" / "target" / "release" / "kvload"))
    for d in dict.fromkeys((sysconfig.get_path("scripts"), str(Path(sys.executable).parent))):
        places.append(("installed beside kvtune", Path(d) / "kvload"))
    which = programs.which("kvload")
    places.append(("PATH", Path(which) if which else None))
    return places


def find_kvload() -> str:
    """The kvload binary: the first of `kvload_places` that is an executable file, when
    kvtune may execute it (kvtune.safety.programs: owned by root and writable by nobody
    else, up to `/`; refused with exit 2 otherwise, never run and never passed over for
    the next place). KVLOAD naming anything else is an error; no kvload at all names every
    place looked."""
    env = os.environ.get("KVLOAD")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return programs.find(env, "kvload ($KVLOAD)").path
        raise HarnessError(f"KVLOAD={env} is not an executable kvload binary")
    for what, p in kvload_places()[1:]:
        if p is not None and p.is_file() and os.access(p, os.X_OK):
            return programs.find(str(p), f"kvload ({what})").path
    looked = "; ".join(f"{what}{f' ({p})' if p else ''}" for what, p in kvload_places())
    raise HarnessError(f"kvload not found (looked at: {looked}): pip install the kvload wheel "
                       "(make dist), build it in the checkout (make kvload), or set "
                       "KVLOAD=/path/to/kvload")


def build_argv(binary: str, load: LoadSpec, server: str, protocol: str, seed: int,
               json_path: str, workload_path: str | None = None,
               capacity: CapacitySearch | None = None,
               watch: tuple[int, str] | None = None,
               profile: CapacitySearch | None = None) -> list[str]:
    """kvload's command line (`workload_path`: the workload file where kvload runs, when
    that is not this host). Without a workload file every setting is passed (kvtune's
    defaults are the study's). With one, the file's own keys win over kvtune's defaults:
    only what the study file sets explicitly is passed (pydantic's `model_fields_set`),
    since kvload's command line overrides the file. `capacity`: one knee search
    (`--search`, docs/kvload.md), load.rate being its first rate when given. `watch`: the
    server's PID and CPUs, watched for host disturbance in each window (this host only).
    `profile`: the host profile for the capacity SLO (`--profile`) instead of a run."""
    w = load.workload
    file = bool(load.workload_file)
    lset, wset = load.model_fields_set, w.model_fields_set

    def given(name: str, fields: set[str]) -> bool:
        return not file or name in fields

    argv = [binary, "--server", server, "--protocol", load.protocol or protocol,
            "--seed", str(seed), "--json", json_path, "--quiet"]
    for name, flag, text in (
            ("mode", "--mode", load.mode), ("connections", "--connections",
                                            str(load.connections)),
            ("pipeline", "--pipeline", str(load.pipeline)),
            ("duration", "--duration", f"{plain(load.duration)}s"),
            ("warmup", "--warmup", f"{plain(load.warmup)}s")):
        if given(name, lset):
            argv += [flag, text]
    if "workload" in lset or not file:
        for name, flag, text in (
                ("keys", "--keys", str(w.keys)), ("key_size", "--key-size", str(w.key_size)),
                ("value_size", "--value-size", str(w.value_size)),
                ("popularity", "--popularity", w.popularity), ("mix", "--mix", w.mix),
                ("mget_size", "--mget-size", str(w.mget_size)),
                ("arrival", "--arrival", w.arrival)):
            if given(name, wset):
                argv += [flag, text]
        if given("preload", wset):
            argv.append("--preload" if w.preload else "--no-preload")
    if load.mode == "open" and load.rate is not None and given("rate", lset) and not profile:
        argv += ["--rate", plain(load.rate)]
    if load.rate_scale is not None:
        argv += ["--rate-scale", plain(load.rate_scale)]
    if load.cpus:
        argv += ["--cpus", load.cpus]
    if load.window is not None:
        argv += ["--window", f"{plain(load.window * 1000)}ms"]
    if load.effective_spin_us and "--spin-us" not in load.extra_args:
        argv += ["--spin-us", str(load.effective_spin_us)]
    if load.workload_file:
        argv += ["--workload", workload_path or load.workload_file]
    if profile is not None:
        argv += ["--profile", profile.slo.kvload()]
        if profile.rates:
            argv += ["--rate", plain(profile.rates[0])]
    elif capacity is not None:
        argv += ["--search", capacity.slo.kvload(), "--precision", plain(capacity.precision),
                 "--max-steps", str(MAX_STEPS)]
        if capacity.rates:
            argv += ["--search-range", f"{plain(capacity.rates[0])}:{plain(capacity.rates[1])}"]
    if watch is not None:
        argv += ["--watch-pid", str(watch[0]), "--watch-cpus", watch[1]]
    argv += list(load.extra_args)
    return argv


def file_duration(load: LoadSpec) -> float:
    """The window kvload will measure: the study's duration when it sets one, else the
    workload file's `duration`, else the sum of its phases (docs/kvload.md)."""
    if not load.workload_file or "duration" in load.model_fields_set:
        return load.duration
    try:
        doc = load.workload_document() or {}
    except ValueError:
        return load.duration
    from kvtune.durations import parse_duration

    try:
        if doc.get("duration") is not None:
            return parse_duration(doc["duration"])
        phases = doc.get("phases") or []
        if phases:
            return sum(parse_duration(p.get("duration")) for p in phases)
    except (TypeError, ValueError):
        pass
    return load.duration


def run(load: LoadSpec, server: str, protocol: str, seed: int,
        binary: str | None = None, transport: Transport | None = None,
        workload_path: str | None = None,
        capacity: CapacitySearch | None = None,
        watch: tuple[int, str] | None = None,
        profile: CapacitySearch | None = None) -> dict[str, Any]:
    """Run kvload once (on this host, or through `transport` where it runs) and return its
    JSON document, which kvload writes to stdout (`capacity`: one knee search, its
    kvload/search/1 document).
    Raises TrialFailed when the server failed under load (refused, reset, malformed
    answers) or the load host was lost, HarnessError when kvload itself was misused or is
    missing."""
    transport = transport or LocalTransport()
    binary = binary or find_kvload()
    argv = build_argv(binary, load, server, protocol, seed, "-", workload_path, capacity,
                      watch, profile)
    budget = file_duration(load) + load.warmup + 120
    if capacity is not None:  # a closed-loop burst, then at most MAX_STEPS + 3 runs
        budget += (MAX_STEPS + 4) * (file_duration(load) + load.warmup + 2)
    ran = transport.run(argv, budget, load.cpus)
    err = ran.stderr.strip().splitlines()
    last = err[-1] if err else f"exit code {ran.returncode}"
    if ran.returncode == 2:
        raise HarnessError(f"kvload rejected its arguments: {last}")
    if ran.returncode != 0:
        raise TrialFailed(f"load failed: {last}", ran.stderr[-4000:])
    try:
        doc: dict[str, Any] = json.loads(ran.stdout)
    except ValueError as e:
        raise HarnessError(f"kvload wrote no readable JSON: {e}") from None
    doc["argv"] = argv
    transport.finish(doc, ran)
    return doc


def metrics_from(doc: dict[str, Any]) -> dict[str, Any]:
    """The flat metrics kvtune optimizes and reports (load.base.METRICS), from a kvload
    document."""
    total = doc.get("latency", {}).get("total", {})
    corr = total.get("corrected", {}) or {}
    serv = total.get("service", {}) or {}
    errors = doc.get("errors", {}) or {}
    return {
        "ops_per_sec": float(doc.get("achieved_rate") or 0.0),
        "p50_us": corr.get("p50_us"),
        "p90_us": corr.get("p90_us"),
        "p99_us": corr.get("p99_us"),
        "p999_us": corr.get("p999_us"),
        "p9999_us": corr.get("p9999_us"),
        "max_us": corr.get("max_us"),
        "mean_us": corr.get("mean_us"),
        "service_p99_us": serv.get("p99_us"),
        "hit_ratio": doc.get("hit_ratio"),
        "errors": int(errors.get("total", 0)),
        "server_errors": int(errors.get("server_error", 0)) + int(errors.get("out_of_memory", 0)),
        "client_utilization": (doc.get("client_cpu") or {}).get("utilization"),
        "offered_rate": doc.get("offered_rate"),
    }


def search_result(doc: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The metrics of a capacity search (a kvload/search/2 document): `capacity` is the
    knee (its 95% interval is the document's `ci`), every other metric is the highest
    passing run's, and the reason says when the search ran out of runs. A search without
    a knee (client-bound, no rate met the SLO, the range's top met it, the host disturbed
    it or changed during it) is a failed measurement, never a value: TrialFailed with
    kvload's reason (`transient` when the host caused it), the runs kept in its raw data."""
    verdict, reason = str(doc.get("verdict")), str(doc.get("reason") or "")
    knee = doc.get("knee")
    if knee is None or verdict not in ("ok", "imprecise"):
        what = {"client_bound": "the load generator was the limit, not the server",
                "no_pass": "no rate met the SLO", "range_top": "every rate met the SLO",
                "host_disturbed": "the host disturbed the measurement",
                "host_changed": "the host changed during the search",
                }.get(verdict, f"verdict {verdict}")
        if verdict == "client_bound":
            last = (doc.get("steps") or [{}])[-1]
            util = ((last.get("figures") or {}).get("client_cpu") or {}).get("utilization")
            busy = (f" (its CPUs {present.share(util)} busy)"
                    if isinstance(util, int | float) else "")
            reason = (f"kvload reached its own limit at {present.figure(last.get('rate', 0))} req/s"
                      f"{busy} before the server missed the SLO, so no capacity is claimed. "
                      "Keep the server the limit: a CPU quota on the server (knob "
                      "placement.cpu_quota_pct, e.g. `{name: placement.cpu_quota_pct, fixed: "
                      "50}`), fewer server CPUs (target.cpus), more load CPUs (load.cpus), or a "
                      "load host (load.host)")
        if reason.startswith(what):
            reason = reason[len(what):].lstrip(": ")
        raise TrialFailed(f"capacity search: {what}: {reason}",
                          raw={"load": doc, "transient": verdict in HOST_VERDICTS})
    passes = [s for s in doc.get("steps") or []
              if s.get("outcome") == "pass" and s.get("purpose", "search") == "search"
              and s.get("rate") == (doc.get("bracket") or {}).get("highest_pass")]
    if not passes:
        passes = [s for s in doc.get("steps") or [] if s.get("outcome") == "pass"]
    if not passes:
        raise HarnessError("kvload's search reported a knee without a passing run")
    metrics = metrics_from(passes[-1].get("figures") or {})
    metrics["capacity"] = float(knee)
    ci = search_ci(doc)
    if ci is not None:  # the search's own 95% interval travels with its knee
        metrics["capacity_ci_low"], metrics["capacity_ci_high"] = ci
    return metrics, (reason if verdict == "imprecise" else "")


def search_ci(doc: dict[str, Any] | None) -> tuple[float, float] | None:
    """The knee's 95% interval of one search (kvload/search/2), None without one."""
    ci = (doc or {}).get("ci")
    if (isinstance(ci, list) and len(ci) == 2
            and all(isinstance(x, int | float) and x == x and x > 0 for x in ci)):
        return float(ci[0]), float(ci[1])
    return None


def search_steps(load_raw: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The runs of a capacity search or ramp (kvload/search/2) in the order they ran, each
    as {n, rate, purpose, outcome, doubtful, latency_us, ci, run, repeat, windows, dropped,
    achieved_rate, p50_us, p99_us, verdict, client_utilization}; [] for any other
    document."""
    if not load_raw or not str(load_raw.get("schema", "")).startswith("kvload/search/"):
        return []
    out = []
    for s in load_raw.get("steps") or []:
        f = s.get("figures") or {}
        corr = ((f.get("latency") or {}).get("total") or {}).get("corrected") or {}
        dropped = s.get("dropped") or {}
        out.append({"n": s.get("n"), "rate": s.get("rate"),
                    "purpose": s.get("purpose", "search"), "outcome": s.get("outcome"),
                    "doubtful": bool(s.get("doubtful")),
                    "latency_us": s.get("latency_us"), "ci": s.get("ci"),
                    "run": s.get("run", 1), "repeat": bool(s.get("repeat")),
                    "windows": s.get("windows"),
                    "dropped": sum(v for v in dropped.values() if isinstance(v, int)),
                    "achieved_rate": f.get("achieved_rate"), "p50_us": corr.get("p50_us"),
                    "p99_us": corr.get("p99_us"), "verdict": f.get("verdict"),
                    "client_utilization": (f.get("client_cpu") or {}).get("utilization")})
    return out


class KvloadDriver(LoadDriver):
    """`load.tool: kvload` (the default)."""

    tool = "kvload"
    remote = True  # load.host: kvload runs on the load host (load/remote.py)
    searches = True  # --search: the capacity metric
    max_cpu = 1023  # kvload's --cpus: CPU_SETSIZE - 1 (kvload/tests/grammar.json)


    @classmethod
    def check_extra_args(cls, args: list[str]) -> None:
        def refuse(flag: str) -> str | None:
            if flag not in SAFE_EXTRA_ARGS:
                raise ValueError(
                    f"{flag!r} is refused: load.extra_args takes only the kvload flags that "
                    f"change the measurement ({scan.listing(SAFE_EXTRA_ARGS)}); the server, "
                    "the output files and the workload come from the study file's typed keys")
            return SAFE_EXTRA_ARGS[flag]

        def bounded(value: str, pattern: str, what: str) -> bool:
            # --max-item-size sizes kvload's value buffer: bounded before anything runs.
            from kvtune.safety.workload import size_problem

            if what.endswith("--max-item-size") and re.fullmatch(pattern, value):
                problem = size_problem("max_item_size", value)
                if problem:
                    raise ValueError(f"{what}: {problem}")
            return False

        scan.check_flag_list(args, refuse, bounded)

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self.transport = transport_for(spec)
        self.binary: str | None = None
        self.workload_path: str | None = None
        # The server's PID and CPUs for the next run (set by the session; this host only).
        self.watch: tuple[int, str] | None = None

    def prepare(self) -> None:
        self.binary = self.transport.prepare(self.tool, find_kvload(), self.spec.cpus)
        if self.spec.workload_file:
            self.workload_path = self.transport.stage(self.spec.workload_file)

    def run(self, address: str, protocol: str, seed: int) -> LoadResult:
        if self.binary is None:
            self.prepare()
        watch = self.watch if isinstance(self.transport, LocalTransport) else None
        doc = run(self.spec, address, protocol, seed, self.binary, self.transport,
                  self.workload_path, self.capacity, watch)
        if self.capacity is not None:
            if doc.get("schema") != SEARCH_SCHEMA:
                raise HarnessError(f"kvload answered a search with schema {doc.get('schema')!r}"
                                   f" (expected {SEARCH_SCHEMA}): an older kvload?")
            metrics, note = search_result(doc)
            return LoadResult(metrics, "ok", note, doc)
        verdict = str(doc.get("verdict") or "ok")
        if verdict not in VERDICTS:
            raise HarnessError(f"kvload reported an unknown verdict {verdict!r}")
        return LoadResult(metrics_from(doc), verdict, str(doc.get("verdict_reason") or ""),
                          doc)


def profile(load: LoadSpec, capacity: CapacitySearch, server: str, protocol: str, seed: int,
            binary: str, transport: Transport, workload_path: str | None,
            watch: tuple[int, str] | None) -> dict[str, Any]:
    """The host profile for a capacity study (kvload --profile: the server's peak, the
    latency floor at a low rate, the latency at half the peak, the client's cost per
    request), its kvload/profile/1 document. TrialFailed/HarnessError as `run`."""
    doc = run(load, server, protocol, seed, binary, transport, workload_path, None, watch,
              profile=capacity)
    if doc.get("schema") != PROFILE_SCHEMA:
        raise HarnessError(f"kvload answered --profile with schema {doc.get('schema')!r} "
                           f"(expected {PROFILE_SCHEMA}): an older kvload?")
    return doc
