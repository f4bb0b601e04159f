"""The explanations for the terminal (`kvtune show`): which change made the gain (the
ablation), the host noise facts beside the noise floor, importance with its intervals (or
"not enough trials to rank"), and the telemetry leads with Benjamini–Hochberg q-values and
units. summary.py calls `render_analysis` with the dict `_analysis` builds."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from kvtune import present


def render_analysis(an: dict[str, Any] | None, console: Console) -> None:
    if not an:
        return
    if an.get("error"):
        console.print(f"[yellow]analysis unavailable: {an['error']}[/]")
        return
    from kvtune.measure.host_noise import lines as noise_lines
    from kvtune.study.ablation import lines as ablation_lines

    for line in noise_lines(an.get("host_noise")):
        console.print(line, markup=False, highlight=False)
    ab = an.get("ablation")
    for i, line in enumerate(ablation_lines(ab)):
        console.print(f"[bold]{line}[/]" if i == 0 else line, markup=i == 0, highlight=False)
    imp = an["importance"]
    if imp["values"]:
        ranked = imp.get("ranked")
        t = Table(title=f"What mattered: knob importance ({imp['method']}, "
                        f"{imp.get('trials_text') or str(imp['n_trials']) + ' trials'}, "
                        "bootstrap 95% intervals) and optimizable "
                        "zones")
        t.add_column("knob")
        t.add_column("importance (95% interval)")
        t.add_column("effect" if ranked else "ranking")
        t.add_column(f"within {present.share(an['within'])} of the best at")
        # The importances and their intervals: one column of shares, formatted together.
        cells = present.share_cells(list(imp["values"].values()),
                                    [(imp.get("intervals") or {}).get(k)
                                     for k in imp["values"]])
        for (k, _), share in zip(imp["values"].items(), cells, strict=True):
            if ranked:
                tiers = imp.get("tiers") or [[r] for r in imp["ranking"]]
                tier = next((i for i, t in enumerate(tiers) if k in t), None)
                rank = ("no measurable effect" if tier is None else f"#{tier + 1}"
                        + (" (tied: not separable)" if len(tiers[tier]) > 1 else ""))
            else:
                rank = "not enough trials to rank"
            t.add_row(k, share, rank, an["zones_text"].get(k, ""))
        console.print(t)
        if not ranked and imp.get("note"):
            console.print(f"Importance: not enough trials to rank ({imp['note']}).")
        for tie in imp.get("ties") or []:
            console.print(f"Importance: {tie}.", highlight=False)
    elif imp.get("note"):
        console.print(f"Importance: {imp['note']}.")
    if an["telemetry"]:
        t = Table(title="Leads: telemetry correlated with the objective (Spearman per "
                        "repetition; BH q over every figure tested)")
        for c in ("counter", "unit", "ρ", "p", "BH q", "n", "baseline",
                  an.get("compared") or "best"):
            t.add_column(c)
        for c in an["telemetry"]:
            # A counter's two figures together, in its unit (present.pair).
            figures = present.pair(c["baseline"], c["best"], c["metric"])
            t.add_row(c["metric"] + ("" if c.get("lead", True) else " (chance?)"),
                      figures.unit or c.get("unit", ""), present.signed(c["rho"]),
                      present.p_value(c["p_value"], 2), present.p_value(c.get("q_value"), 2),
                      str(c["n"]), *figures.cells)
        console.print(t)
