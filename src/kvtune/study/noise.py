"""The baseline and the noise floor: trial 0 is the baseline configuration, measured
`max(noise_floor_runs, repetitions)` times; the CoV of the main metrics says how much
noise the study must see through, and how small an improvement the confirmation can show."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from kvtune import present
from kvtune.errors import UserError
from kvtune.measure.evaluator import Evaluation
from kvtune.spec import EvaluationSpec
from kvtune.stats import (
    cov,
    detectable_improvement,
    robust_cov,
    rounds_needed,
)

NOISE_METRICS = ("ops_per_sec", "p50_us", "p99_us", "p999_us")


@dataclass
class NoiseFloor:
    """The noise of the baseline's repetitions: CoV and robust CoV per metric, and the
    smallest improvement the confirmation can show (80% power)."""

    n: int
    cov: dict[str, float]
    robust_cov: dict[str, float]
    flags: list[str]
    detectable_improvement: float

    @classmethod
    def of(cls, e: Evaluation, metric: str, ev: EvaluationSpec) -> NoiseFloor:
        def values(m: str) -> list[float]:
            return [float(r.metrics[m]) for r in e.reps
                    if r.status != "failed" and r.metrics.get(m) is not None]

        noise = {m: cov(values(m)) for m in (*NOISE_METRICS, metric)}
        robust = {m: robust_cov(values(m)) for m in noise}
        # The confirmation's paired t works on each round's log ratio; the robust CoV
        # estimates the spread of one arm's values without the floor's isolated outliers.
        c = robust.get(metric, math.nan)
        if math.isnan(c):
            c = noise.get(metric, math.nan)
        # The recommendation's CI (two-sided, simultaneous over the candidates) must clear
        # zero: one-sided alpha / (2 × candidates), the level the power is computed at.
        detectable = detectable_improvement(c, ev.confirm_rounds, ev.alpha, ev.confirm_top,
                                            two_sided=True, paired=True)
        return cls(e.measured, noise, robust, e.flags, detectable)

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "cov": self.cov, "robust_cov": self.robust_cov,
                "flags": self.flags, "detectable_improvement": self.detectable_improvement}

    def objective_cov(self, metric: str) -> float:
        """The objective's robust CoV, else its CoV (NaN when neither is known)."""
        c = self.robust_cov.get(metric, math.nan)
        return self.cov.get(metric, math.nan) if math.isnan(c) else c

    def report(self, console: Console, metric: str, ev: EvaluationSpec) -> None:
        parts = [f"{m} CoV {present.share(v, 1)}" + (f" (robust "
                                                     f"{present.share(self.robust_cov[m], 1)})"
                                       if not math.isnan(self.robust_cov.get(m, math.nan))
                                       else "")
                 for m, v in self.cov.items() if not math.isnan(v)]
        if not parts:
            console.print(f"  noise floor: not measured ({self.n} measured repetition"
                          f"{'s' if self.n != 1 else ''}; a spread needs 2)")
            return
        console.print("  noise floor: " + ", ".join(dict.fromkeys(parts)))
        detectable = self.detectable_improvement
        if math.isnan(detectable) or ev.confirm_rounds == 0:
            return
        want = ev.min_improvement or 0.05
        console.print(
            f"  at this noise the confirmation ({ev.confirm_rounds} rounds, each candidate "
            f"paired with the baseline by round, Holm over {ev.confirm_top} at alpha "
            f"{ev.alpha:g}) shows an improvement of about {present.share(detectable)} or "
            f"more "
            "(80% power), as long as the host stays as quiet as during these repetitions"
            + (" (drift checks will tell)" if ev.drift_every else
               " (drift checks are off: evaluation.drift_every is 0)"))
        if detectable > 2 * want:
            need = rounds_needed(self.objective_cov(metric), want, ev.alpha, ev.confirm_top,
                                 two_sided=True, paired=True)
            console.print(
                f"  [yellow]warning:[/] smaller real gains may end as \"no significant "
                f"improvement\"; to resolve {present.share(want)}, set evaluation.confirm_rounds "
                f"to about "
                f"{need} (or lengthen load.duration, or quiet the host)")


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def check_not_client_bound(e: Evaluation) -> None:
    """Raise UserError when most of the baseline's repetitions are flagged: the study would
    measure something other than the configuration. The message names what was measured
    (the load generator at its limit, an overloaded server, or CPU time stolen by another
    tenant of the host) and only advice that can help against that cause."""
    bad = [r for r in e.reps if r.status == "flagged"]
    if not bad or len(bad) * 2 <= len(e.reps):
        return
    flags = [f for r in bad for f in r.flags]
    steal = sorted({f for f in flags if f.startswith("steal")})
    load = sorted({f for f in flags if not f.startswith("steal")})
    causes, advice = [], []
    if steal:
        causes.append(f"CPU time was stolen from this virtual machine ({', '.join(steal)} in "
                      "flagged repetitions): another tenant of the host was busy, and the "
                      "figures measure it, not the configuration")
        advice.append("run again when the host is quiet, on a dedicated or larger instance, "
                      "or raise evaluation.steal_threshold if this much steal is normal "
                      "where the server runs")
    if "client_bound" in load:
        causes.append("the load generator was the limit (client_bound): the figures "
                      "measure the client, not the server")
        advice.append("use pipelining (load.pipeline), give kvload more client CPUs "
                      "(load.cpus), or a lower open-loop rate (load.mode: open, load.rate)")
    if "saturated" in load:
        causes.append("the server was overloaded (saturated): it could not keep up with "
                      "the offered rate, so latency measures the queue")
        advice.append("measure latency at a fixed open-loop rate below capacity (a lower "
                      "load.rate), or ask for capacity at an SLO (objective.slo)")
    other = [f for f in load if f not in ("client_bound", "saturated")]
    if other:
        causes.append(f"its repetitions were flagged ({', '.join(other)})")
    raise UserError(f"most of the baseline's repetitions ({len(bad)} of {len(e.reps)}) were "
                    f"flagged on this host: {'; '.join(causes)}. The study stops before "
                    f"searching. {_sentence('; or '.join(advice))}"
                    .rstrip() + ("." if advice else ""))
