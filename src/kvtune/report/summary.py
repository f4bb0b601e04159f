"""What a study found, for the terminal (`kvtune show`) and for scripts (`--json`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from kvtune import present
from kvtune.documents import Candidate, Confirmation, ConfirmedArm, Drift, StoredComparison
from kvtune.metrics import unit as unit_of
from kvtune.present import (
    CHANGE,
    MISSING,
    NO_SIGNIFICANT_CHANGE,
    change_fraction,
    column,
    describe_change,
    judge,
    number,
    p_value,
    pct,
    with_interval,
)
from kvtune.safety.text import for_markup as esc
from kvtune.store import Store
from kvtune.study import result

SHOWN = ("ops_per_sec", "p50_us", "p99_us", "p999_us", "hit_ratio", "errors", "server_errors")

# What the summary says when no trial of the search finished feasible (each failed: the
# host spoiled its measurements, or its configuration broke a rule): the defaults stand.
NO_FEASIBLE_TRIAL = "No feasible search trial finished"


def change_cell(ch: dict[str, Any] | None) -> str:
    """A metric's confirmed change for the comparison table: "−18.0% (95% CI −21.0% …
    −15.2%), worse"; the words follow the CI (`present.judge`); never a bare
    percentage. `kvtune show` and the report's before/after table both print it, from the
    stored change and its interval (not a stored text an older kvtune may have worded
    otherwise)."""
    if not ch:
        return ""
    if ch.get("change") is None:
        return NO_SIGNIFICANT_CHANGE
    return describe_change("", ch["change"], ch.get("direction"), ch.get("ci"),
                           ch.get("significant")).strip()


def change_word(ch: dict[str, Any] | None) -> str | None:
    """The word `change_cell` ends with (the report colours the cell by it)."""
    if not ch:
        return None
    if ch.get("change") is None:
        return NO_SIGNIFICANT_CHANGE
    return judge(ch["change"], ch.get("direction"), ch.get("significant"), ch.get("ci"))


def _f(v: Any) -> str:
    """A figure as the report writes it (`present.number`: 253,360, never 2.534e+05)."""
    return number(v)


def collect(store: Store, name: str) -> dict[str, Any]:
    """The study's stored results (kvtune.study.result.collect) with the report's analysis:
    importance, zones and the telemetry most correlated with the objective."""
    data = result.collect(store, name)
    if "trials" not in data:  # only sweeps
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "sweeps":
            out["analysis"] = _analysis(store, name)
        out[key] = value
    return out


def _render_hosts(data: dict[str, Any], console: Console) -> None:
    """The per-host table of a study whose workers have several host fingerprints."""
    hosts = data.get("hosts") or []
    if len(hosts) < 2:
        return
    from kvtune.host.fingerprint import FIELDS

    varying = [f for f in FIELDS if len({str(h["host"].get(f)) for h in hosts}) > 1]
    t = Table(title="Hosts (each with its own baseline and confirmation)")
    for col in ("fingerprint", *varying, "workers", "trials", "baseline", "best",
                "best vs baseline", "confirmation"):
        t.add_column(col)
    # The hosts' baselines and bests: one column of the objective's figures.
    figures = iter(column([h["baseline"]["value"] if h["baseline"] else None for h in hosts]
                          + [h["best"]["value"] if h["best"] else None for h in hosts],
                          unit_of(str(data.get("metric") or ""))).labelled())
    bases = [next(figures) for _ in hosts]
    bests = [next(figures) for _ in hosts]
    for h, base_s, best_s in zip(hosts, bases, bests, strict=True):
        base, best = h["baseline"], h["best"]
        conf: Confirmation | None = h["confirmation"]
        vs = MISSING
        if best is not None and best.get("change"):
            vs = best["change"].get("text") or MISSING
        verdict = MISSING if conf is None else conf.verdict
        if conf is not None and conf.recommended is not None:
            verdict = f"trial {conf.recommended.trial}: {verdict}"
        t.add_row(h["fingerprint"], *(str(h["host"].get(f)) for f in varying),
                  ", ".join(h["workers"]), str(h["trials"]),
                  base_s if base else MISSING,
                  f"#{best['number']} {best_s}" if best else MISSING, vs,
                  str(verdict))
    console.print(t)


def _render_workers(data: dict[str, Any], console: Console) -> None:
    ws = data.get("workers") or []
    if not ws:
        return
    t = Table(title="Workers")
    for col in ("worker", "host", "pid", "state", "fingerprint", "trials", "note"):
        t.add_column(col)
    conf: Confirmation | None = data.get("confirmation")
    for w in ws:
        note = w.get("note") or ""
        if conf is not None and conf.confirmed_by == w["worker"]:
            note = ("confirmed; " + note).rstrip("; ")
        t.add_row(w["worker"], w["host"], str(w["pid"]), w["state"], w["fingerprint_key"],
                  f"{len(w['trials'])}: " + ",".join(str(n) for n in w["trials"]), note)
    console.print(t)


def _render_sweeps(data: dict[str, Any], console: Console) -> None:
    from kvtune.analysis.sweep import view_from_dict
    from kvtune.report.sweep import sweep_text

    for sw in data.get("sweeps") or []:
        console.print(sweep_text(view_from_dict(sw)), highlight=False, markup=False)


def next_steps(data: dict[str, Any], study: str) -> list[str]:
    """The commands that come next, with the files they write (the last lines `kvtune
    tune` and `kvtune show` print)."""
    from pathlib import Path

    if "trials" not in data:
        return [f"kvtune report {study} -o report.html   writes {Path.cwd() / 'report.html'}"]
    conf = data.get("confirmation")
    head = data.get("headline") or {}
    out = [f"kvtune report {study} -o report.html   writes {Path.cwd() / 'report.html'}"]
    export_dir = Path.cwd() / "export" / data["study"]
    # What comes next follows the headline: nothing suggests shipping what it keeps out.
    if head.get("action") in ("ship", "ship_smaller"):
        what = "the smaller change's" if head.get("chosen") == "minimal" else \
            "the confirmed configuration's"
        out.append(f"kvtune export {study}   writes {what} files into {export_dir}/ "
                   "(with rollback/)")
    elif conf is None and _search_best_is_better(data):
        out.append(f"kvtune export {study} --best-in-search   writes the best search trial's "
                   f"files (unconfirmed) into {export_dir}/")
    return out


def _search_best_is_better(data: dict[str, Any]) -> bool:
    """Whether the search's best trial measured better than the baseline (no claim: the
    search has no interval of a change; a worse one is never offered for export)."""
    from kvtune.metrics import Direction

    best, base = data.get("best"), data.get("baseline")
    b = present.as_number((best or {}).get("value"))
    a = present.as_number((base or {}).get("value"))
    if b is None or a is None or data.get("direction") not in tuple(Direction):
        return False
    return Direction(data["direction"]).better(b, a)


def render(data: dict[str, Any], console: Console, next_commands: list[str] | None = None
           ) -> None:
    """`kvtune show`: the trials, the best configuration beside the baseline, what mattered;
    last, the verdict and (`next_commands`) what to do next. Each result is said once."""
    if "trials" not in data:  # sweeps only
        console.print(f"[bold]Study {esc(data['study'])}[/]  ({esc(data['storage'])})")
        _render_sweeps(data, console)
        return
    console.print(f"[bold]Study {esc(data['study'])}[/]  ({data['direction']} {data['metric']}, "
                  f"{len(data['trials'])} trials, {esc(data['storage'])})")
    t = Table(title="Trials", show_lines=False)
    values, intervals, counts, vs_cells = trial_columns(data["trials"], data["metric"])
    name = data["metric"] or "value"
    for col in ("#", "kind", "state", f"{name} ({values.unit})" if values.unit else name,
                "interval", "n", f"{name} vs baseline"):
        t.add_column(col)
    # The configuration on one line: what differs from the baseline (a wrapped cell would
    # print the same continuation text on several rows). Never all the width: a longer
    # one would leave the other columns no width at all (rich shrinks them first).
    t.add_column("configuration (changes from the baseline)", no_wrap=True,
                 overflow="ellipsis", max_width=max(20, console.width - 90))
    base_cfg = (data.get("baseline") or {}).get("config") or {}
    for i, tr in enumerate(data["trials"]):
        cfg = " ".join(f"{k.split('.', 1)[-1]}={_f(v)}" for k, v in tr["config"].items()
                       if tr.get("kind") == "baseline" or base_cfg.get(k) != v) or MISSING
        state = tr["state"] if tr["state"] != "FAIL" else f"FAIL: {tr['failed']}"
        if tr["state"] == "COMPLETE" and not tr["feasible"]:
            state = "infeasible"
        t.add_row(str(tr["number"]), tr["kind"] or "", state, values.cells[i],
                  intervals[i], counts.cells[i], vs_cells[i], cfg)
    console.print(t)
    _render_workers(data, console)
    _render_hosts(data, console)
    base, best = data["baseline"], data["best"]
    conf: Confirmation | None = data.get("confirmation")
    if conf is not None and conf.multi:
        _render_analysis(data.get("analysis"), console)
        render_front(data, conf, console)
        _render_next(next_commands, console)
        return
    shown_row: Candidate | None = None  # the confirmation row whose changes are shown
    conf_base = conf.baseline if conf is not None and conf.baseline else ConfirmedArm()
    if conf is not None and conf.recommended is not None:
        rec = shown_row = conf.recommended
        best_cfg, best_m, base_m = dict(rec.config), dict(rec.metrics), dict(conf_base.metrics)
        label = f"recommended ({rec.label}, confirmed)"
    elif conf is not None and any(c.changes for c in conf.candidates):
        # Nothing recommended: show the candidate with the largest objective gain, with the
        # confirmation's CIs, so a blocked or insignificant candidate is seen as such.
        shown_row = conf.leading()
        assert shown_row is not None  # it has candidates
        best_cfg, best_m = dict(shown_row.config), dict(shown_row.metrics)
        base_m = dict(conf_base.metrics)
        label = f"best candidate ({shown_row.label}), NOT recommended"
    elif best is not None:
        best_cfg, best_m = best["config"], best["metrics"]
        base_m = base["metrics"] if base else {}
        label = f"best in search (trial {best['number']}), NOT confirmed"
    else:
        console.print(f"{NO_FEASIBLE_TRIAL}: nothing to set beside the baseline (the defaults "
                      "stand).")
        return
    if base is None:
        return
    cmp_t = Table(title="Best configuration beside the baseline")
    cmp_t.add_column("")
    # With target.config the baseline is the operator's own configuration.
    cmp_t.add_column("baseline (target.config)" if ((data.get("spec") or {}).get("target")
                                                    or {}).get("config")
                     else "baseline (defaults)")
    cmp_t.add_column(label)
    changes = {m: ch.stored() for m, ch in shown_row.changes.items()} if shown_row else {}
    rounds = conf.rounds if conf is not None else None
    cmp_t.add_column(f"change ({rounds} interleaved rounds, 95% CI)" if changes
                     else "change (search noise, not a claim)")
    cmp_t.add_column("unit")
    for k, v in base["config"].items():
        nv = best_cfg.get(k)
        cmp_t.add_row(k, _f(v), _f(nv), "" if nv == v else "changed", "")
    metrics = list(conf.shown or SHOWN) if changes and conf is not None else list(SHOWN)
    from kvtune.report.compare import figures_of

    # Where the confirmation compared a metric, the figures its change is the ratio of.
    base_m, best_m = figures_of(base_m, best_m, changes)
    for m in metrics:
        b, n = base_m.get(m), best_m.get(m)
        figures = present.pair(b, n, m)
        ch = changes.get(m) if changes else None
        if changes:
            change = change_cell(ch)
        elif shown_row is None and isinstance(b, int | float) and isinstance(n, int | float) \
                and b:
            # The best of many noisy searches overstates its gain, and a search has no CI
            # of a change: shown in brackets, as not a claim.
            change = f"({pct(n / b - 1)}, not confirmed)"
        else:
            change = ""
        cmp_t.add_row(f"[bold]{m}[/]", *figures.cells, change, figures.unit)
    console.print(cmp_t)
    head = data.get("headline") or {}
    if head.get("chosen") == "minimal":
        console.print(f"[bold]Of these changes kvtune recommends only "
                      f"{esc(', '.join(head.get('changes') or {}))}[/] (the ablation measured "
                      "them alone against the defaults and the whole; the headline closes "
                      "this summary)", highlight=False)
    if conf is not None and conf.recommended is not None:
        # What production must share (export says it too).
        from kvtune.export.base import placement_conditions

        for c in placement_conditions(data.get("spec") or {}, dict(conf.recommended.config),
                                      dict(conf_base.config)):
            console.print(f"[yellow]Condition:[/] {esc(c)}", highlight=False)
    drift: list[Drift] = data.get("drift") or []
    for d in drift:
        if d.moved and d.change is not None:
            dc = d.change
            when = "at the end of the search" if d.after_trial is None \
                else f"after trial {d.after_trial}"
            point, span = with_interval(dc.change, dc.change_ci_low, dc.change_ci_high)
            console.print(f"[yellow]Baseline drift {when}: "
                          f"{point} (95% CI {span}); trials are shown against the "
                          "nearest baseline measurement, search values across the drift "
                          "are not comparable, only the confirmation decides[/]")
    _render_analysis(data.get("analysis"), console)
    _render_sweeps(data, console)
    _render_verdict(data, conf, console)
    _render_next(next_commands, console)


def trial_columns(trials: list[dict[str, Any]], metric: str | None
                  ) -> tuple[present.Column, list[str], present.Column, list[str]]:
    """The trial table's columns, each formatted together (`present.column`): the
    objective's figures with their intervals (one scale, one number of decimals), each
    interval said for what it is (a 95% CI, or the range of a few repetitions), the
    repetitions, and each search trial's change against its baseline (the metric's own
    change, `present.CHANGE`; a figure with no claim: better and worse are said only where
    a confirmation measured an interval)."""
    from kvtune.stats import ci_kind

    n = len(trials)
    cis = [(tr.get("ci") or [None, None]) for tr in trials]
    figures = column([tr["value"] for tr in trials] + [c[0] for c in cis]
                     + [c[1] for c in cis], unit_of(metric or ""))
    values = present.Column(figures.cells[:n], figures.unit, figures.decimals)
    intervals = [MISSING if present.as_number(c[0]) is None else
                 f"{tr.get('ci_kind') or ci_kind(int(tr['n'] or 0))} {figures.cells[n + i]} … "
                 f"{figures.cells[2 * n + i]}" for i, (tr, c) in enumerate(zip(trials, cis,
                                                                               strict=True))]
    counts = column([tr["n"] for tr in trials], "count")
    vs = column([change_fraction(tr["baseline_ref"], tr["value"])
                 if tr.get("baseline_ref") is not None else None for tr in trials], CHANGE)
    changes = [c if tr.get("baseline_ref") is not None else "" for tr, c in
               zip(trials, vs.cells, strict=True)]
    return values, intervals, counts, changes


def _render_verdict(data: dict[str, Any], conf: Confirmation | None,
                    console: Console) -> None:
    """The confirmation: every other candidate's line, then the verdict, once each."""
    if conf is None:
        render_headline(data.get("headline"), console)
        return
    verdict = conf.verdict
    for c in conf.candidates:
        if c.text:
            line = c.text + (f" (failed: {c.failed})" if c.failed else "")
        else:
            comp = c.comparison or StoredComparison()
            point, span = with_interval(comp.change, comp.change_ci_low, comp.change_ci_high)
            line = (f"{c.label}: {data['metric']} {point} (95% CI {span or MISSING}), "
                    f"p={p_value(comp.p_value)}, "
                    f"Holm-adjusted p={p_value(c.p_adjusted)}"
                    + (f", failed: {c.failed}" if c.failed else ""))
        if line.strip() != verdict.strip():
            console.print(f"  {esc(line)}", highlight=False)
    style = "green" if conf.recommended is not None else "yellow"
    how = f" ({conf.rounds} interleaved rounds)" if conf.rounds else ""
    console.print(f"[{style}]Confirmation{how}: {esc(verdict)}[/]", highlight=False)
    render_headline(data.get("headline"), console)


HEADLINE_STYLE = {"ship": "bold green", "ship_smaller": "bold green",
                  "keep_defaults": "bold yellow", "not_decided": "bold yellow",
                  "pick": "bold", "failed": "bold red"}


def render_headline(head: dict[str, Any] | None, console: Console) -> None:
    """The study's headline (kvtune.study.headline), the last word of the summary: what to
    do, why, and what would settle it."""
    if not head or not head.get("text"):
        return
    style = HEADLINE_STYLE.get(str(head.get("action")), "bold")
    console.print(f"[{style}]{esc(str(head['text']))}[/]", highlight=False)
    if head.get("why"):
        console.print(f"  why: {esc(str(head['why']))}", highlight=False)
    if head.get("settle"):
        console.print(f"  next: {esc(str(head['settle']))}", highlight=False)


def _render_next(commands: list[str] | None, console: Console) -> None:
    if commands:
        console.print("Next:", highlight=False)
        for c in commands:
            console.print(f"  {c}", highlight=False, soft_wrap=True)


def render_front(data: dict[str, Any], conf: Confirmation, console: Console) -> None:
    """A Pareto study's confirmed front: every candidate's change in each objective with
    its CI from the interleaved rounds, its trade-offs, and whether it is on the front."""
    names = [o.metric for o in conf.objectives]
    t = Table(title=f"Pareto candidates against the baseline ({conf.rounds} "
                    "interleaved rounds, 95% CI)")
    for col in ("trial", *names, "on the confirmed front", "configuration"):
        t.add_column(col)
    base = conf.baseline or ConfirmedArm()
    t.add_row("baseline", *(_f(base.metrics.get(m)) for m in names), "", "the defaults")
    for c in conf.candidates:
        cfg = ", ".join(f"{k.split('.', 1)[-1]}={_f(v)}" for k, v in c.config.items()
                        if base.config.get(k) != v)
        t.add_row(str(c.trial), *(change_cell(ch.stored() if (ch := c.changes.get(m))
                                              else None) for m in names),
                  "yes" if c.significant else "no", cfg)
    console.print(t)
    for c in conf.candidates:
        console.print(f"  {esc(c.text)}" + (f" (failed: {esc(c.failed)})" if c.failed
                                            else ""))
    style = "green" if conf.front else "yellow"
    console.print(f"[{style}]Confirmation: {conf.verdict}[/]")


# -- analysis: what mattered and why (the report's summary, for the terminal) ---------------


def _analysis(store: Store, name: str, top: int = 8) -> dict[str, Any] | None:
    """Importance, optimizable zones and the telemetry counters most correlated with the
    objective (with their baseline and best values), as in `kvtune report`."""
    from kvtune.analysis import analyse, load
    from kvtune.report.compare import comparison
    from kvtune.study.stored import checked_spec

    try:
        data = load(store, name, checked_spec)
        a = analyse(data)
        cmp = comparison(data)
    except (ValueError, RuntimeError, KeyError, TypeError) as e:
        # The analysis adds to `show`; a study it cannot read must not hide the rest.
        return {"error": f"{type(e).__name__}: {e}"}
    bm, nm = cmp["base_metrics"] or {}, cmp["new_metrics"] or {}
    tel = [{**c.as_dict(), "baseline": bm.get(c.metric), "best": nm.get(c.metric)}
           for c in a.correlations if c.telemetry][:top]
    return {"importance": a.importance.as_dict(), "zones": [z.as_dict() for z in a.zones],
            "zones_text": {z.knob: z.describe() for z in a.zones}, "within": a.within,
            "telemetry": tel, "compared": cmp["label"],
            "ablation": data.ablation,
            "host_noise": data.host_noise}


def _render_analysis(an: dict[str, Any] | None, console: Console) -> None:
    """The ablation, host noise facts, importance and leads (kvtune.report.terminal)."""
    from kvtune.report.terminal import render_analysis

    render_analysis(an, console)
