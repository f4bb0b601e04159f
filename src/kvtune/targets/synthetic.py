"""The synthetic target: a known response surface with realistic noise.

For fast tests of the whole search loop and for the evaluator's benchmarks, never as a
substitute for a real server. The surface mixes knob types (float, int, categorical,
bool), has interactions, a failure region (the "server" refuses to start), and
heteroscedastic multiplicative noise: the coefficient of variation grows with `x`.

Surface "default" (maximize ops_per_sec; p99_us moves the other way):
    true(x, threads, mode, flag) = 100000
        * (1 + 0.30 * exp(-((x - 7) / 2.0) ** 2))              # a peak at x = 7
        * (1 + 0.10 * (mode == "b") - 0.05 * (mode == "c"))    # categorical effect
        * (1 - 0.02 * (threads - 6) ** 2 / 25)                 # best at 6 threads
        * (1 + 0.08 * flag * (x > 5))                          # interaction
    fails when threads >= 14 and mode == "c".
The defaults (x=2, threads=4, mode="a", flag=False) sit well below the optimum.
`synthetic.inert` changes nothing: the knob a recommendation should never keep.

Surface "tradeoff": the same ops_per_sec, but the latencies follow a surface of their own
with a known trade-off against throughput, and their own noise:
    true_p99(x, threads, mode, flag) = 500 µs
        * (BASE_RATE / true(...)) ** 0.5                       # a faster server queues less
        * (1 + 0.08 * x)                                       # bigger batches, longer tail
        * (1 + 0.12 * (threads - 2))                           # fewer threads, shorter tail
        * (0.55 if mode == "c" else 1.0)                       # mode c: p99 −45%, ops −5%
    p50(...) = 125 µs * (BASE_RATE / true(...)) ** 0.5 * (1.6 if mode == "c" else 1.0)
so minimising p99 leads to x = 0, one thread and mode c: p99 about −65% and throughput
about −7% against the defaults, p50 about +65%; with `ops_per_sec >= 0.98 * baseline` the best
is mode b instead (p99 about −40%). `SyntheticTarget.true_medians` gives the medians each
reported change should be checked against.

Capacity (`objective: {metric: capacity, slo: ...}`): each repetition is one knee search by
kvload against a simulated server (`kvload --simulate`, an M/M/1 queue: docs/kvload.md),
the same search and the same kvload/search/1 document as against a real server. The
server's median service rate is `true(...)` above, each repetition's (a fresh server) is
log-normal around it with the target's noise, each step's varies by 2% more, and every
response carries a base latency
    base_us(x, threads) = 40 µs * (1 + 0.08 * x) * (1 + 0.06 * (threads - 1))
so the knee at an SLO `pq <= B` is known exactly (`true_capacity`):
    capacity = true(...) - ln(1 / (1 - q)) / (B - base_us)      (req/s; B and base in s)
A tight SLO rewards a short base latency as well as a fast server: the configuration of
the highest capacity is not the one of the highest throughput.

Surface "workload" (kvtune.targets.synthetic_workload): a family of surfaces whose
optimum moves with the study's workload (its load section's features): what the warm
start from the library is benchmarked against (bench/warmstart/).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from kvtune.errors import HarnessError, TrialFailed, UserError
from kvtune.knobs.appliers.base import Applier, ApplyEnv, Availability, HostContext
from kvtune.knobs.domain import Domain, Value
from kvtune.knobs.knob import Knob
from kvtune.metrics import SLO_METRICS
from kvtune.quantities import plain
from kvtune.safety import programs
from kvtune.targets.base import SimulatedTarget

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kvtune.spec import CapacitySearch, Slo, TargetSpec

BASE_RATE = 100_000.0
# Each step of a simulated capacity search: a window of this length after this warm-up.
SEARCH_WINDOW, SEARCH_WARMUP, SEARCH_WINDOWS = "1500ms", "200ms", "250ms"
# The run-to-run noise of one simulated server's steps (its spread between fresh servers
# is the target's noise_cov).
STEP_NOISE = 0.02
SURFACES = ("default", "tradeoff", "workload")


class SyntheticParam(Applier):
    scope = "app"
    restart = True
    target = "synthetic"

    def __init__(self, name: str) -> None:
        self.name = name

    def where(self) -> str:
        return f"synthetic surface parameter {self.name}"

    def check(self, ctx: HostContext) -> Availability:
        return Availability(True)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        pass  # the value reaches the surface through launch.params


def _knobs() -> dict[str, Knob]:
    ks = [
        Knob("synthetic.x", Domain("float", 0.0, 10.0), SyntheticParam("x"), 2.0,
             "continuous knob with a peak at 7"),
        Knob("synthetic.threads", Domain("int", 1, 16), SyntheticParam("threads"), 4,
             "integer knob, best at 6, failure region at >= 14 with mode c"),
        Knob("synthetic.mode", Domain("categorical", choices=("a", "b", "c")),
             SyntheticParam("mode"), "a", "categorical knob, b is best"),
        Knob("synthetic.flag", Domain("bool"), SyntheticParam("flag"), False,
             "helps only when x > 5"),
        Knob("synthetic.inert", Domain("float", 0.0, 10.0), SyntheticParam("inert"), 5.0,
             "no effect on the surface: what an ablation must not keep"),
    ]
    return {k.name: k for k in ks}


SYNTHETIC_KNOBS = _knobs()


def synthetic_knob(name: str) -> Knob | None:
    return SYNTHETIC_KNOBS.get(name)


def _get(params: dict[str, Any], key: str) -> Any:
    return params.get(f"synthetic.{key}", SYNTHETIC_KNOBS[f"synthetic.{key}"].default)


def true_value(params: dict[str, Any]) -> float:
    """The noiseless ops_per_sec of a configuration (NaN in the failure region)."""
    x = float(_get(params, "x"))
    threads = int(_get(params, "threads"))
    mode = str(_get(params, "mode"))
    flag = bool(_get(params, "flag"))
    if threads >= 14 and mode == "c":
        return math.nan
    v = BASE_RATE
    v *= 1 + 0.30 * math.exp(-(((x - 7) / 2.0) ** 2))
    v *= 1 + (0.10 if mode == "b" else -0.05 if mode == "c" else 0.0)
    v *= 1 - 0.02 * (threads - 6) ** 2 / 25
    v *= 1 + (0.08 if flag and x > 5 else 0.0)
    return v


def true_p99(params: dict[str, Any]) -> float:
    """The noiseless p99 latency (µs) of the "tradeoff" surface (NaN where it fails)."""
    v = true_value(params)
    x = float(_get(params, "x"))
    threads = int(_get(params, "threads"))
    mode = str(_get(params, "mode"))
    return (500.0 * (BASE_RATE / v) ** 0.5 * (1 + 0.08 * x) * (1 + 0.12 * (threads - 2))
            * (0.55 if mode == "c" else 1.0))


def base_latency_us(params: dict[str, Any]) -> float:
    """The simulated server's constant latency (µs) under a capacity search."""
    x = float(_get(params, "x"))
    threads = int(_get(params, "threads"))
    return 40.0 * (1 + 0.08 * x) * (1 + 0.06 * (threads - 1))


def slo_quantile(slo: Slo) -> float:
    """The quantile an SLO bounds (p99_us: 0.99)."""
    label = SLO_METRICS[slo.metric].removeprefix("service.")
    return float(label.removeprefix("p")) / 100


def true_capacity(params: dict[str, Any], slo: Slo) -> float:
    """The knee of the median repetition's latency curve at `slo` (req/s): NaN where the
    configuration fails, 0 where even an idle server misses the SLO."""
    mu = true_value(params)
    if math.isnan(mu):
        return math.nan
    room = (slo.bound_us - base_latency_us(params)) * 1e-6
    if room <= 0:
        return 0.0
    return max(0.0, mu - math.log(1 / (1 - slo_quantile(slo))) / room)


def true_metrics(params: dict[str, Any], surface: str = "tradeoff") -> dict[str, float]:
    """The noiseless ops_per_sec, p50_us and p99_us of a configuration on `surface`."""
    v = true_value(params)
    if surface == "default":
        p99 = 1e6 / v * 50
        return {"ops_per_sec": v, "p50_us": p99 / 4, "p99_us": p99}
    p99 = true_p99(params)
    p50 = 125.0 * (BASE_RATE / v) ** 0.5 * (1.6 if str(_get(params, "mode")) == "c" else 1.0)
    return {"ops_per_sec": v, "p50_us": p50, "p99_us": p99}


def optimum() -> float:
    """The true maximum over the domain, by a fine grid (the surface is smooth)."""
    best = 0.0
    for x in np.linspace(0, 10, 1001):
        for t in range(1, 17):
            v = true_value({"synthetic.x": float(x), "synthetic.threads": t,
                            "synthetic.mode": "b", "synthetic.flag": True})
            best = max(best, v)
    return best


class SyntheticTarget(SimulatedTarget):
    """Measured, not started: `measure` returns the metrics of one repetition."""

    kind = "synthetic"
    searches = True
    spec_keys = frozenset({"noise_cov", "surface"})

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.cov = spec.noise_cov
        if spec.surface not in SURFACES:
            raise UserError(f"target.surface: unknown synthetic surface {spec.surface!r} "
                            f"(known: {', '.join(SURFACES)})")
        self.surface = spec.surface
        self.features: dict[str, float] | None = None  # the "workload" surface's

    def bind_study(self, spec: Any) -> None:
        """The "workload" surface reads the study's workload (its load section)."""
        if self.surface != "workload":
            return
        from kvtune.workload.features import NoFeatures, of_spec

        try:
            self.features, _ = of_spec(spec)
        except NoFeatures as e:
            raise UserError(f"target.surface workload: {e} (give the study a load "
                            "section with its workload)") from None

    def true_value(self, params: dict[str, Any]) -> float:
        """The noiseless ops_per_sec of this target's surface (NaN where it fails)."""
        if self.surface == "workload" and self.features is not None:
            from kvtune.targets import synthetic_workload

            defaults = {k: kn.default for k, kn in SYNTHETIC_KNOBS.items()}
            return synthetic_workload.value(params, self.features, defaults)
        return true_value(params)

    @classmethod
    def knobs(cls) -> Mapping[str, Knob]:
        return SYNTHETIC_KNOBS

    def _sigma(self, params: dict[str, Any]) -> float:
        cov = self.cov * (1 + 0.5 * float(_get(params, "x")) / 10)  # heteroscedastic
        return math.sqrt(math.log(1 + cov**2))

    def true_medians(self, params: dict[str, Any]) -> dict[str, float]:
        """The medians of ops_per_sec, p50_us and p99_us that `measure` draws around (the
        truth a reported change is checked against)."""
        s = self._sigma(params)
        m = math.exp(-s**2 / 2)  # the median of the shared noise factor
        t = true_metrics(params, self.surface)
        if self.surface == "workload":
            v = self.true_value(params)
            t = {"ops_per_sec": v, "p50_us": 1e6 / v * 50 / 4, "p99_us": 1e6 / v * 50}
        if self.surface in ("default", "workload"):
            return {"ops_per_sec": t["ops_per_sec"] * m, "p50_us": t["p50_us"] / m,
                    "p99_us": t["p99_us"] / m}
        return {"ops_per_sec": t["ops_per_sec"] * m, "p99_us": t["p99_us"] * m**0.6,
                "p50_us": t["p50_us"] * math.exp(-s**2 / 8) / m**0.2}

    def measure(self, params: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        v = self.true_value(params)
        if math.isnan(v):
            raise TrialFailed("synthetic server refuses to start: threads >= 14 with mode c",
                              "FATAL: thread pool exhausted (synthetic)")
        sigma = self._sigma(params)
        noise = float(rng.lognormal(-sigma**2 / 2, sigma))
        ops = v * noise
        p99 = 1e6 / v * 50 / noise
        p50 = p99 / 4
        if self.surface == "tradeoff":
            # Latency noise of its own, partly shared with throughput's (a slow repetition
            # is slow in both).
            own = float(rng.lognormal(-sigma**2 / 2, sigma))
            t = true_metrics(params, "tradeoff")
            p99 = t["p99_us"] * own ** 0.8 / noise ** 0.2
            p50 = t["p50_us"] * float(rng.lognormal(-sigma**2 / 8, sigma / 2)) / noise ** 0.2
        return {
            "ops_per_sec": ops, "p50_us": p50, "p90_us": p99 / 2, "p99_us": p99,
            "p999_us": p99 * 2, "p9999_us": p99 * 3, "max_us": p99 * 5, "mean_us": p99 / 3,
            "service_p99_us": p99 * 0.8, "hit_ratio": 1.0, "errors": 0, "server_errors": 0,
            "verdict": "ok", "client_utilization": 0.2,
        }

    def repetition(self, params: dict[str, Any], rng: np.random.Generator,
                   capacity: CapacitySearch | None = None) -> tuple[dict[str, Any],
                                                                     dict[str, Any]]:
        if capacity is None:
            return self.measure(params, rng), {}
        return self.search(params, rng, capacity)

    def search(self, params: dict[str, Any], rng: np.random.Generator,
               capacity: CapacitySearch) -> tuple[dict[str, Any], dict[str, Any]]:
        """One knee search by kvload against the simulated server of `params` (its metrics
        and its kvload/search/2 document under "load")."""
        from kvtune.load.kvload import find_kvload, search_result

        v = self.true_value(params)
        if math.isnan(v):
            raise TrialFailed("synthetic server refuses to start: threads >= 14 with mode c",
                              "FATAL: thread pool exhausted (synthetic)")
        sim = (f"service={v:.6f},base={base_latency_us(params):.4f}us,"
               f"jitter={self._sigma(params):.6f},noise={STEP_NOISE}")
        argv = [find_kvload(), "--simulate", sim, "--search", capacity.slo.kvload(),
                "--precision", plain(capacity.precision), "--connections", "16",
                "--duration", SEARCH_WINDOW, "--warmup", SEARCH_WARMUP,
                "--window", SEARCH_WINDOWS,
                "--seed", str(int(rng.integers(0, 2**62))), "--json", "-", "--quiet"]
        if capacity.rates:
            argv += ["--search-range", f"{plain(capacity.rates[0])}:{plain(capacity.rates[1])}"]
        try:
            ran = programs.run(argv, "kvload", capture_output=True, text=True, timeout=120)
        except (OSError, programs.TimeoutExpired) as e:
            raise HarnessError(f"kvload --simulate did not run: {e}") from None
        if ran.returncode != 0:
            last = (ran.stderr.strip().splitlines() or [f"exit code {ran.returncode}"])[-1]
            raise HarnessError(f"kvload --simulate failed: {last}")
        try:
            doc: dict[str, Any] = json.loads(ran.stdout)
        except ValueError as e:
            raise HarnessError(f"kvload --simulate wrote no readable JSON: {e}") from None
        doc["argv"] = argv
        doc["tool"] = "kvload"
        metrics, note = search_result(doc)
        metrics["verdict"] = "ok"
        if note:
            metrics["verdict_reason"] = note
        return metrics, {"load": doc}
