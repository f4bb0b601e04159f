"""The confirmation's coverage (issue 44, item 6): does the interval of a candidate's change
hold its 95% at the confirmation's few rounds, alone and for all k candidates together, and
how often does the confirmation recommend a candidate that changes nothing?

Simulated confirmations: a baseline and k candidates measured once per round for n rounds
(as `confirm.interleave` does), every candidate with the same true change (0 or +10%,
`ops_per_sec`, maximize). Each confirmation is judged three ways on the same draws:

- "current": kvtune's confirmation as `confirm.verdict` applies it to a latency or
  throughput objective: `stats.compare` (ratio of medians; percentile bootstrap of
  resampled medians, 4,000 resamples, at the simultaneous level 1 − 0.05/k of
  `confirm.simultaneous_level`, seeded with the study's seed, here the confirmation's index;
  one-sided Mann–Whitney), Holm across the candidates; a candidate is "better" when its
  Holm-adjusted p < alpha = 0.05 and its interval's low end > min_improvement = 0, and the
  recommendation is the better candidate with the largest measured gain.
- "paired": the candidate replacement, per round r d_r = log(candidate_r / baseline_r);
  change exp(mean d) − 1, interval exp(mean d ± t_{n−1} · sd(d)/√n) − 1 at the same
  Bonferroni level 1 − 0.05/k, p from the one-sided paired t, Holm, same "better" rule.
- "welch": the ablation's log-scale Welch interval (`stats.log_welch_ci`, unpaired) at the
  same level, change exp(mean log c − mean log b) − 1, p the one-sided Welch t (half of
  `stats.log_welch_p`'s two-sided p on the gain's side), Holm, same rule.

`stats.compare` costs a few milliseconds a call, too slow for 48 cells of 2,000
confirmations, so this file reimplements it vectorised (`current`): the same generator
calls per seed (resample indices of the candidate, then of the baseline), the same medians
and percentiles, and Mann–Whitney's exact one-sided p (no ties with continuous noise) from
a table built by scipy's own `mannwhitneyu`. `check` runs kvtune.stats.compare,
log_welch_ci and log_welch_p and scipy's ttest_rel on a few hundred of the simulated
comparisons and records the largest difference from the vectorised figures in the JSON
(the run stops if any exceeds 1e-9).

Noise models (σ = √log(1 + cov²), the log-noise scale of a log-normal with that CoV):
lognormal cov 5% and 15%; heavy-tailed, log-noise σ · t with 3 degrees of freedom (the same
scale, so a heavier spread); drift, lognormal noise times a common trend that rises 20% over
the confirmation (log-linear, 1 at the first round, 1.2 at the last), the same for every arm
of a round. Per cell: per-candidate coverage of the interval of the change, simultaneous
coverage (all k intervals hold), the rate of "better" per candidate and of a recommendation
(false recommendations at a true change of 0, power at +10%).

    .venv/bin/python bench/evaluator/coverage.py [--quick] [--confirmations 2000]
        [--json bench/evaluator/coverage.json] [--worktree | --commit REV]
    .venv/bin/python bench/evaluator/coverage.py --markdown   # the tables of docs/evaluation.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pin import interpreter, pin_source, portable

# The benchmark measures a snapshot of the last commit; imported (the unit test), the
# installed kvtune.
SOURCE = pin_source(sys.argv) if __name__ == "__main__" else "kvtune as installed"

from kvtune import present  # noqa: E402
from kvtune.stats import compare, holm, log_welch_ci, log_welch_p  # noqa: E402
from kvtune.study.confirm import simultaneous_level  # noqa: E402

ALPHA = 0.05           # EvaluationSpec.alpha's default
MIN_IMPROVEMENT = 0.0  # EvaluationSpec.min_improvement's default
RESAMPLES = 4000       # stats.compare's default, which confirm.verdict uses
DRIFT = 0.20
STATISTICS = ("current", "paired", "welch")


@dataclass(frozen=True)
class Noise:
    name: str
    cov: float
    tail: str = "normal"   # "normal" or "t3": the log-noise's distribution
    drift: float = 0.0     # the common trend's rise over the confirmation

    @property
    def sigma(self) -> float:
        return math.sqrt(math.log(1 + self.cov**2))


NOISES = (
    Noise("lognormal 5%", 0.05),
    Noise("lognormal 15%", 0.15),
    Noise("t3 5%", 0.05, "t3"),
    Noise("t3 15%", 0.15, "t3"),
    Noise("drift 20%, lognormal 5%", 0.05, drift=DRIFT),
    Noise("drift 20%, lognormal 15%", 0.15, drift=DRIFT),
)


def draw(rng: np.random.Generator, noise: Noise, confirmations: int, k: int, rounds: int,
         change: float) -> tuple[np.ndarray, np.ndarray]:
    """(baseline (B, n), candidates (B, k, n)): one value per arm and round."""
    shape = (confirmations, k + 1, rounds)
    eps = rng.standard_normal(shape) if noise.tail == "normal" else rng.standard_t(3, shape)
    log = noise.sigma * eps
    if noise.drift:
        log = log + math.log1p(noise.drift) * np.arange(rounds) / max(rounds - 1, 1)
    values = np.exp(log)
    return values[:, 0, :], values[:, 1:, :] * (1 + change)


# -- the statistics, vectorised over confirmations (B) and candidates (k) --------------------


def _median_last(x: np.ndarray) -> np.ndarray:
    """np.median over the last axis, as np.median computes it (the middle value, or the
    mean of the two middle ones), from one sort."""
    s = np.sort(x, axis=-1)
    n = x.shape[-1]
    if n % 2:
        return s[..., n // 2]
    return np.mean(s[..., n // 2 - 1:n // 2 + 1], axis=-1)


_MWU: dict[int, dict[int, float]] = {}


def mwu_table(n: int) -> dict[int, float]:
    """Mann–Whitney's exact one-sided ("greater") p for n against n without ties, by
    2·U (an integer), from scipy's own mannwhitneyu on every split of the ranks."""
    if n not in _MWU:
        table: dict[int, float] = {}
        ranks = np.arange(2 * n, dtype=float)
        for chosen in itertools.combinations(range(2 * n), n):
            x = ranks[list(chosen)]
            y = np.delete(ranks, list(chosen))
            u2 = int(2 * sum((xi > yj) + 0.5 * (xi == yj) for xi in x for yj in y))
            if u2 not in table:
                table[u2] = float(sps.mannwhitneyu(x, y, alternative="greater").pvalue)
        _MWU[n] = table
    return _MWU[n]


def holm_v(p: np.ndarray) -> np.ndarray:
    """stats.holm on each row of p (B, k)."""
    k = p.shape[1]
    order = np.argsort(p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, axis=1)
    adj = np.maximum.accumulate(np.minimum(1.0, (k - np.arange(k)) * ps), axis=1)
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=1)
    return out


def current(base: np.ndarray, cands: np.ndarray, level: float, seeds: np.ndarray,
            resamples: int = RESAMPLES, chunk: int = 50) -> dict[str, np.ndarray]:
    """stats.compare(candidate, baseline, "maximize", level, resamples, seed) for every
    candidate of every confirmation: point, interval and one-sided Mann–Whitney p."""
    b_n, k, n = cands.shape
    point = np.median(cands, axis=-1) / np.median(base, axis=-1)[:, None] - 1
    lo = np.empty((b_n, k))
    hi = np.empty((b_n, k))
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    for s in range(0, b_n, chunk):
        e = min(s + chunk, b_n)
        ic = np.empty((e - s, resamples, n), dtype=np.int64)
        ib = np.empty_like(ic)
        for i, seed in enumerate(seeds[s:e]):
            # The generator calls of stats.compare, in its order (every candidate of a
            # confirmation has the same seed and size, hence the same indices).
            rng = np.random.default_rng(int(seed))
            ic[i] = rng.integers(0, n, size=(resamples, n))
            ib[i] = rng.integers(0, n, size=(resamples, n))
        rows = np.arange(e - s)
        cs = _median_last(cands[s:e][rows[:, None, None, None], np.arange(k)[None, :, None, None],
                                     ic[:, None, :, :]])          # (b, k, R)
        bs = _median_last(base[s:e][rows[:, None, None], ib])  # (b, R)
        boot = cs / bs[:, None, :] - 1
        lo[s:e], hi[s:e] = np.percentile(boot, q, axis=-1)
    # Mann–Whitney's U of each candidate against the baseline (its own rounds, unpaired).
    gt = cands[:, :, :, None] > base[:, None, None, :]
    eq = cands[:, :, :, None] == base[:, None, None, :]
    if eq.any():
        raise ValueError("tied values: the exact Mann–Whitney table does not apply")
    u2 = 2 * gt.sum(axis=(2, 3))
    table = mwu_table(n)
    p = np.vectorize(table.__getitem__, otypes=[float])(u2)
    return {"point": point, "lo": lo, "hi": hi, "p": p}


def paired(base: np.ndarray, cands: np.ndarray, level: float) -> dict[str, np.ndarray]:
    """The paired-by-round log-ratio t interval and its one-sided p."""
    n = cands.shape[-1]
    d = np.log(cands) - np.log(base)[:, None, :]
    m = d.mean(axis=-1)
    se = d.std(axis=-1, ddof=1) / math.sqrt(n)
    t = float(sps.t.ppf(1 - (1 - level) / 2, n - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = sps.t.sf(m / se, n - 1)
    return {"point": np.expm1(m), "lo": np.expm1(m - t * se), "hi": np.expm1(m + t * se),
            "p": p}


def welch(base: np.ndarray, cands: np.ndarray, level: float) -> dict[str, np.ndarray]:
    """stats.log_welch_ci (unpaired) at `level` and the one-sided Welch p."""
    n = cands.shape[-1]
    xa, xb = np.log(cands), np.log(base)[:, None, :]
    va = xa.var(axis=-1, ddof=1) / n
    vb = xb.var(axis=-1, ddof=1) / n
    d = xa.mean(axis=-1) - xb.mean(axis=-1)
    se = np.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
    h = sps.t.ppf(0.5 + level / 2, dof) * se
    return {"point": np.expm1(d), "lo": np.expm1(d - h), "hi": np.expm1(d + h),
            "p": sps.t.sf(d / se, dof), "_d": d, "_h": h, "_se": se, "_dof": dof}


def judge(res: dict[str, np.ndarray], truth: float) -> dict[str, Any]:
    """The cell's figures from one statistic's results (B, k)."""
    b_n, k = res["p"].shape
    covered = (res["lo"] <= truth) & (truth <= res["hi"])
    adj = holm_v(res["p"])
    better = (adj < ALPHA) & (res["lo"] > MIN_IMPROVEMENT)
    made = better.any(axis=1)
    # The recommendation: the better candidate with the largest measured change.
    pick = np.argmax(np.where(better, res["point"], -np.inf), axis=1)
    rec_cov = covered[np.arange(b_n), pick][made]
    return {
        "coverage": float(covered.mean()),
        "coverage_wilson": wilson(int(covered.sum()), covered.size),
        "simultaneous": float(covered.all(axis=1).mean()),
        "simultaneous_wilson": wilson(int(covered.all(axis=1).sum()), b_n),
        "better": float(better.mean()),
        "recommended": float(made.mean()),
        "recommended_wilson": wilson(int(made.sum()), b_n),
        "recommended_covers": float(rec_cov.mean()) if rec_cov.size else None,
        "median_width_log": float(np.median(np.log1p(res["hi"]) - np.log1p(res["lo"]))),
    }


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = hits / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (c - h, c + h)


def cell(noise: Noise, rounds: int, k: int, change: float, confirmations: int,
         seed: int, stats: tuple[str, ...] = STATISTICS,
         ) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray, float, np.ndarray]]:
    """One cell: its figures for each statistic, and its draws (for `check`)."""
    rng = np.random.default_rng(seed)
    base, cands = draw(rng, noise, confirmations, k, rounds, change)
    level = simultaneous_level(k)
    seeds = np.arange(confirmations)  # the study's seed of each confirmation
    fns = {"current": lambda: current(base, cands, level, seeds),
           "paired": lambda: paired(base, cands, level),
           "welch": lambda: welch(base, cands, level)}
    out: dict[str, Any] = {"noise": noise.name, "rounds": rounds, "k": k, "change": change,
                           "level": level, "confirmations": confirmations}
    for s in stats:
        out[s] = judge(fns[s](), change)
    return out, (base, cands, level, seeds)


def check(base: np.ndarray, cands: np.ndarray, level: float, seeds: np.ndarray,
          count: int) -> dict[str, float]:
    """The vectorised statistics against kvtune's own on the first `count` confirmations:
    the largest absolute difference of each figure."""
    b = min(count, len(base))
    cur = current(base[:b], cands[:b], level, seeds[:b])
    pai = paired(base[:b], cands[:b], level)
    wel = welch(base[:b], cands[:b], level)
    worst = {"compare_point": 0.0, "compare_ci": 0.0, "compare_p": 0.0, "compare_holm": 0.0,
             "welch_ci": 0.0, "welch_p": 0.0, "paired_ci": 0.0, "paired_p": 0.0}
    comparisons = 0
    holm_v_adj = holm_v(cur["p"])
    for i in range(b):
        ps = []
        for j in range(cands.shape[1]):
            c, y = list(cands[i, j]), list(base[i])
            comp = compare(c, y, "maximize", level=level, seed=int(seeds[i]))
            ps.append(comp.p_value)
            worst["compare_point"] = max(worst["compare_point"],
                                         abs(comp.improvement - cur["point"][i, j]))
            worst["compare_ci"] = max(worst["compare_ci"], abs(comp.ci_low - cur["lo"][i, j]),
                                      abs(comp.ci_high - cur["hi"][i, j]))
            worst["compare_p"] = max(worst["compare_p"], abs(comp.p_value - cur["p"][i, j]))
            lo, hi = log_welch_ci(c, y, level)
            worst["welch_ci"] = max(worst["welch_ci"], abs(math.expm1(lo) - wel["lo"][i, j]),
                                    abs(math.expm1(hi) - wel["hi"][i, j]))
            # log_welch_p is two-sided; the one-sided p on the gain's side is half of it.
            d = wel["_d"][i, j]
            two = 2 * wel["p"][i, j] if d > 0 else 2 * (1 - wel["p"][i, j])
            worst["welch_p"] = max(worst["welch_p"], abs(log_welch_p(c, y) - two))
            tr = sps.ttest_rel(np.log(c), np.log(y), alternative="greater")
            ci = sps.ttest_rel(np.log(c), np.log(y)).confidence_interval(level)
            worst["paired_ci"] = max(worst["paired_ci"], abs(math.expm1(ci.low) - pai["lo"][i, j]),
                                     abs(math.expm1(ci.high) - pai["hi"][i, j]))
            worst["paired_p"] = max(worst["paired_p"], abs(float(tr.pvalue) - pai["p"][i, j]))
            comparisons += 1
        worst["compare_holm"] = max(worst["compare_holm"],
                                    max(abs(x - y) for x, y in zip(holm(ps), holm_v_adj[i],
                                                                    strict=True)))
    return {"comparisons": comparisons, **worst}


# -- the run ------------------------------------------------------------------------------------


def cells(quick: bool) -> list[tuple[int, Noise, int, int, float]]:
    out = []
    for ni, noise in enumerate(NOISES):
        for rounds in (4, 5):
            for k in (1, 3):
                for ci, change in enumerate((0.0, 0.10)):
                    seed = 44_000_000 + 10_000 * ni + 100 * rounds + 10 * k + ci
                    out.append((seed, noise, rounds, k, change))
    if quick:
        out = [c for c in out if c[1].name in ("lognormal 5%", "t3 15%",
                                               "drift 20%, lognormal 5%")]
    return out


def row_text(r: dict[str, Any]) -> str:
    parts = [f"{r['noise']:26s} n={r['rounds']} k={r['k']} change {present.pct(r['change'], 0):>5s}"]
    for s in STATISTICS:
        x = r[s]
        parts.append(f"{s} cov {present.share(x['coverage'], 1):>6s} all "
                     f"{present.share(x['simultaneous'], 1):>6s} rec "
                     f"{present.share(x['recommended'], 1):>6s}")
    return " | ".join(parts)


def _fig(x: float, low: float | None = None) -> str:
    """A rate as the tables print it; bold when below `low`."""
    s = present.share(x, 1)
    return f"**{s}**" if low is not None and x < low else s


def markdown(data: dict[str, Any], low: float = 0.94) -> str:
    """docs/evaluation.md's tables from a run's JSON: coverage per candidate and of all k
    together (at a true change of 0 / +10%, the same quantity measured twice: every
    statistic here is scale-equivariant), bold below `low`; then false recommendations
    (true change 0) and power (+10%)."""
    rows = data["rows"]
    by = {(r["noise"], r["rounds"], r["k"], r["change"]): r for r in rows}
    noises = list(dict.fromkeys(r["noise"] for r in rows))
    out = []
    for rounds in (4, 5):
        out += [f"Coverage at {rounds} rounds (true change 0 / +10%; bold below "
                f"{present.share(low)}):", "",
                "| noise | k | current, per candidate | current, all k | paired, per "
                "candidate | paired, all k | Welch, per candidate | Welch, all k |",
                "|---|---|---|---|---|---|---|---|"]
        for noise in noises:
            for k in (1, 3):
                cells = [noise, str(k)]
                for s in STATISTICS:
                    for key in ("coverage", "simultaneous"):
                        pair = [by[(noise, rounds, k, ch)][s][key] for ch in (0.0, 0.10)]
                        cells.append(" / ".join(_fig(x, low) for x in pair))
                out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out += ["False recommendations (any candidate recommended at a true change of 0) and "
            "power at +10% (a candidate said better; k = 3: per candidate / any of the 3, "
            "a recommendation):", "",
            "| noise | rounds | k | current, false | current, power | paired, false | "
            "paired, power | Welch, false | Welch, power |",
            "|---|---|---|---|---|---|---|---|---|"]
    for noise in noises:
        for rounds in (4, 5):
            for k in (1, 3):
                cells = [noise, str(rounds), str(k)]
                for s in STATISTICS:
                    cells.append(_fig(by[(noise, rounds, k, 0.0)][s]["recommended"]))
                    up = by[(noise, rounds, k, 0.10)][s]
                    cells.append(_fig(up["better"]) if k == 1 else
                                 f"{_fig(up['better'])} / {_fig(up['recommended'])}")
                out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--confirmations", type=int, default=None,
                    help="per cell (default 2,000; 300 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="3 noise models, 300 confirmations per cell")
    ap.add_argument("--check", type=int, default=25,
                    help="confirmations per cell checked against kvtune.stats (default 25)")
    ap.add_argument("--json", type=Path, default=Path(__file__).with_name("coverage.json"))
    ap.add_argument("--markdown", action="store_true",
                    help="print docs/evaluation.md's tables from --json's run; measure nothing")
    ap.add_argument("--worktree", action="store_true", help="measure the working tree's src/")
    ap.add_argument("--commit", help="measure this commit's src/kvtune")
    a = ap.parse_args()
    if a.markdown:
        print(markdown(json.loads(a.json.read_text())), end="")
        return
    confirmations = a.confirmations or (300 if a.quick else 2000)
    print("kvtune measured:", SOURCE, flush=True)
    t0 = time.time()
    rows = []
    checks: dict[str, float] = {}
    checked = 0
    for seed, noise, rounds, k, change in cells(a.quick):
        r, (base, cands, level, seeds) = cell(noise, rounds, k, change, confirmations, seed)
        rows.append(r)
        print(row_text(r), flush=True)
        if a.check:
            c = check(base, cands, level, seeds, a.check)
            checked += int(c.pop("comparisons"))
            for key, v in c.items():
                checks[key] = max(checks.get(key, 0.0), v)
    worst = max(checks.values(), default=0.0)
    print(f"checked against kvtune.stats / scipy: {present.figure(checked)} comparisons, "
          f"largest difference {worst:.2e}", flush=True)
    if worst > 1e-9:
        raise SystemExit("the vectorised statistics differ from kvtune.stats: not recorded")
    a.json.write_text(json.dumps({
        "what": "the confirmation's coverage (issue 44, item 6): per-candidate and "
                "simultaneous coverage of the interval of the change, 'better' and "
                "recommendation rates; current = kvtune.stats.compare at the confirmation's "
                "settings, paired = paired-by-round log-ratio t, welch = the ablation's "
                "log-scale Welch interval; each at level 1 - 0.05/k, one-sided p, Holm",
        "command": " ".join(["python3", portable(__file__), *sys.argv[1:]]),
        "measured": SOURCE, "python": interpreter(), "confirmations": confirmations,
        "alpha": ALPHA, "min_improvement": MIN_IMPROVEMENT, "resamples": RESAMPLES,
        "noises": [{"name": x.name, "cov": x.cov, "tail": x.tail, "drift": x.drift,
                    "sigma": x.sigma} for x in NOISES],
        "check": {"comparisons": checked, **checks},
        "rows": rows, "wall_s": round(time.time() - t0, 1)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
