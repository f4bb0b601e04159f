"""The command line: `kvtune tune | run | sweep | show | restore | knobs`."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from kvtune import cli_options, present
from kvtune import kind_registry as kinds
from kvtune.cli_options import Commands, alias, json_flag, merged
from kvtune.errors import KvtuneError, UserError
from kvtune.safety.text import for_markup as escape

if TYPE_CHECKING:
    from kvtune.spec import StudySpec
    from kvtune.study.loader import Loaded, Override


def flag(*decls: str, **kw: Any) -> Any:
    """A boolean option shown as a flag in --help (no `<bool>` type column)."""
    return typer.Option(*decls, metavar="", **kw)


# Inline sysctl/sysfs knobs write kernel files outside the catalog: only with this flag,
# given by the person running kvtune, never by the study file (README, Safety).
AllowInline = Annotated[bool, flag(
    "--allow-inline-host-knobs", help="allow the study's inline sysctl/sysfs knobs (kernel "
                                      "files outside the catalog) to be written")]

_KINDS = ", ".join(kinds.names())  # the server kinds, for help texts

app = typer.Typer(cls=Commands, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  # Plain help: typer's rich panels label every flag (even --help) `<bool>`.
                  rich_markup_mode=None,
                  help=f"Honest auto-tuning of cache servers ({_KINDS}) and the Linux host "
                       "under them.")


def _version(value: bool) -> None:
    if value:
        from kvtune import __version__
        from kvtune.load.kvload import find_kvload
        from kvtune.safety import programs

        try:  # only a kvload kvtune may execute (kvtune.safety.programs)
            kvload = find_kvload()
            ran = programs.run([kvload, "--version"], "kvload", capture_output=True,
                               text=True, timeout=10)
            found = f"{ran.stdout.strip() or 'kvload ?'} at {kvload}"
        except programs.Untrusted as e:
            found = f"kvload not run: {e}"
        except (KvtuneError, OSError, programs.TimeoutExpired) as e:
            found = f"kvload not found: {e}"
        from kvtune.safety.text import one_line

        print(f"kvtune {__version__} ({one_line(found)})")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, flag("--version", callback=_version, is_eager=True,
                                          help="print kvtune's version and exit")] = False,
) -> None:
    """Honest auto-tuning of memcached and Redis and the Linux host under them.

    Exit codes: 0 success; 1 ran, but no significant recommendation (or nothing to export
    in the formats asked); 2 bad input; 3 harness fault; 130 interrupted."""
# As wide as COLUMNS or the terminal; wide tables stay readable when piped to a log.
out, err = cli_options.out, cli_options.err


def _storage_for(study_or_file: str, storage: str | None) -> tuple[str, str]:
    """`kvtune show` takes a study file or a study name (with --storage or the default
    results/NAME.db)."""
    p = Path(study_or_file)
    if p.suffix in (".yaml", ".yml") and not p.exists():
        raise UserError(f"study file {p} does not exist (give a study file, or a study "
                        "name with its --storage)")
    if p.suffix in (".yaml", ".yml"):
        from kvtune.study.loader import parse_study, read_study

        spec = parse_study(read_study(p), str(p), base_dir=p.resolve().parent).spec
        url = storage or spec.storage_url(Path.cwd())
        _existing(url, spec.study)
        return spec.study, url
    url = storage or f"sqlite:///{(Path.cwd() / 'results' / f'{study_or_file}.db').as_posix()}"
    _existing(url, study_or_file)
    return study_or_file, url


def _existing(url: str, study: str) -> None:
    """A command that reads results names a database that is there (the one URL check,
    kvtune.safety.storage): it never creates one."""
    from kvtune.safety.storage import check_url, mask

    try:
        check_url(url, create=False)
    except ValueError as e:
        raise UserError(f"no results for study {study!r} at {mask(url)}: {e} (give the "
                        "study file, or --storage URL)") from None


def _load(study_file: Path, allow_inline_host_knobs: bool, command: str = "",
          overrides: tuple[Override, ...] = ()) -> Loaded:
    """The study file, read once and checked before Optuna and SciPy are imported (a
    refused file fails in well under a second); its deprecation notes on stderr. With
    `command`, a study that manages this host needs root (one line why, exit 2).
    `overrides` (options that change the study) are checked by the loader as the file's
    own text is."""
    from kvtune.study.loader import load_text, parse_study, read_study

    text = read_study(study_file)
    base = study_file.resolve().parent
    if command:  # before the target's config is read or any binary probed
        _need_root(command, parse_study(text, str(study_file), base_dir=base,
                                        overrides=overrides).spec)
    loaded = load_text(text, str(study_file), base_dir=base,
                       allow_inline_host_knobs=allow_inline_host_knobs, path=study_file,
                       overrides=overrides)
    for note in loaded.notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    return loaded


def _need_root(command: str, spec: StudySpec) -> None:
    """A study whose target runs on this host needs root: say what and why in one line,
    exit 2, before anything is read beyond the study file or started."""
    from kvtune.study.check import root_reason

    why = root_reason(spec, command)
    if why:
        raise UserError(why)


@app.command()
def tune(
    study_file: Annotated[Path, typer.Argument(help="the study file (YAML)")],
    trials: Annotated[int | None, typer.Option(help="override budget.trials")] = None,
    no_confirm: Annotated[bool, flag("--no-confirm", help="skip the confirmation")]
    = False,
    no_ablation: Annotated[bool, flag(
        "--no-ablation", help="skip the ablation of the recommendation (at least (changed "
        "knobs + 2) x confirm_rounds repetitions, more for changes still ambiguous, up to "
        "evaluation.ablation_max_rounds)")] = False,
    allow_inline_host_knobs: AllowInline = False,
    worker: Annotated[str | None, typer.Option(
        help="run as one worker of a fleet sharing the study's storage (docs/fleet.md); "
        "a name unique in the fleet, e.g. the host name")] = None,
    cold: Annotated[bool, flag("--cold", help="start cold: draw nothing from the library "
                                              "of past studies (docs/library.md)")] = False,
    library: Annotated[str | None, typer.Option(
        help="the library of past studies: a SQLite file or a database URL (default: "
        "$KVTUNE_LIBRARY, else the study's PostgreSQL storage, else "
        "~/.local/share/kvtune/library.db; KVTUNE_LIBRARY=off: none)")] = None,
    as_json: Annotated[bool, json_flag("print the study's results as JSON at the end (as "
                                       "`kvtune show --json`)")] = False,
) -> None:
    """Tune: baseline, Bayesian search, confirmation.

    The baseline and noise floor, a Bayesian search, the confirmation against the defaults.
    Running it again resumes the same study. A fresh study starts from the past studies of
    alike workloads in the library (unless --cold), and a finished one is added to it."""
    from kvtune.study.loader import Override

    overrides = () if trials is None else (
        Override("--trials", ("budget", "trials"), trials, str(trials), create=True),)
    # before the heavy imports
    loaded = _load(study_file, allow_inline_host_knobs, "tune", overrides)
    from kvtune.documents import jsonable
    from kvtune.report.summary import collect, next_steps, render
    from kvtune.study.run import StudyRun

    if worker:
        from kvtune.study.worker import FleetWorker

        run = StudyRun(loaded, err, worker=worker, strategy=FleetWorker, cold=cold,
                       library=library)
    else:
        run = StudyRun(loaded, err, cold=cold, library=library)
    run.run(confirm=not no_confirm, ablation=not no_ablation)
    data = collect(run.store, loaded.spec.study)
    if as_json:
        print(json.dumps(jsonable(data), indent=1, default=str))
    else:
        render(data, out, next_steps(data, str(study_file)))
    conf = data.get("confirmation")
    if not no_confirm and conf is not None and conf.recommended is None:
        # The study ran; there is nothing to recommend (exit 1, not a harness fault's 3).
        raise typer.Exit(1)


def _parse_sets(sets: list[str]) -> dict[str, str]:
    pairs = {}
    for s in sets:
        if "=" not in s:
            raise UserError(f"--set {s!r}: expected knob=value")
        k, v = s.split("=", 1)
        pairs[k.strip()] = v.strip()
    return pairs


@app.command()
def run(
    study_file: Annotated[Path, typer.Argument(help="the study file (YAML)")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="knob=value (repeatable)")]
    = None,
    repetitions: Annotated[int | None, typer.Option(help="override repetitions")] = None,
    as_json: Annotated[bool, flag("--json", help="print JSON")] = False,
    allow_inline_host_knobs: AllowInline = False,
    load_tool: Annotated[str | None, typer.Option(
        "--load-tool", help="measure with another load driver (a server kind's own peer "
                            "tool, docs/evaluation.md) as a cross-check; the peers are "
                            "closed-loop")] = None,
    capacity: Annotated[str | None, typer.Option(
        "--capacity", help="measure the capacity at this latency SLO instead of the study's "
                           "objective: the highest open-loop rate whose latency meets it, "
                           "e.g. 'p99_us <= 200' (a knee search per repetition)")] = None,
) -> None:
    """Measure one configuration with repetitions and intervals.

    The defaults, changed by --set; each metric's median and interval."""
    from kvtune.study.loader import Override

    # Both change the study: the loader checks them as it checks the file's own text.
    overrides: list[Override] = []
    if capacity is not None:
        overrides.append(Override("--capacity", ("objective",),
                                  {"metric": "capacity", "slo": capacity}, capacity))
    if load_tool is not None:
        overrides.append(Override("--load-tool", ("load", "tool"), load_tool, load_tool))
    # before the heavy imports
    loaded = _load(study_file, allow_inline_host_knobs, "run", tuple(overrides))
    from kvtune import load as load_drivers
    from kvtune.study.commands import run_config

    if load_tool is not None and loaded.spec.load is not None:
        # what the tool's driver refuses (a peer is closed-loop), before anything starts
        load_drivers.driver_for(loaded.spec.load, loaded.spec.capacity)
    res = run_config(loaded, _parse_sets(set_ or []), repetitions, err)
    if as_json:
        print(json.dumps(res, indent=1, default=str))
        if res.get("failed"):
            raise typer.Exit(1)
        return
    from kvtune.metrics import unit as unit_of

    if res.get("capacity"):
        _print_capacity_run(res)
        if res["capacity"].get("value") is None:
            raise typer.Exit(1)

    t = Table(title="Measured configuration")
    t.add_column("metric", overflow="fold")  # narrow terminals: folded, never cut
    t.add_column("median", overflow="fold")
    t.add_column("interval", overflow="fold")  # a 95% CI from 6 repetitions on, else the range
    kind = res.get("ci_kind", "range")
    for k, v in res["metrics"].items():
        if v is None:
            continue
        ci = res["metric_cis"].get(k, [None, None])
        # The median and its interval together, in the metric's unit (present.column).
        col = present.column([v, ci[0], ci[1]], unit_of(k))
        cells = col.cells
        t.add_row(k, col.labelled()[0], f"{kind} {cells[1]} … {cells[2]}"
                  if ci[0] is not None else present.MISSING)
    out.print(t)
    if res.get("failed"):
        out.print(f"[red]failed:[/] {escape(res['failed'])}")
        if res.get("stderr"):
            out.print(f"server stderr:\n{res['stderr']}", markup=False, highlight=False)
        raise typer.Exit(1)


def _print_capacity_run(res: dict[str, Any]) -> None:
    """`kvtune run` of a capacity objective: the SLO, each search's knee with its interval
    (or why it has none), the pooled capacity and whether the searches agree; the other
    metrics follow in the table."""
    from rich.markup import escape

    from kvtune.present import number

    cap = res["capacity"]
    out.print(f"[bold]Capacity at {escape(cap['slo'])}[/]")
    for i, r in enumerate(res.get("repetitions") or [], 1):
        s = r.get("search") or {}
        what = (f"{number(s.get('runs'))} runs, {number(s.get('dropped'))} of "
                f"{number(s.get('windows'))} windows disturbed")
        if s.get("knee") is not None and s.get("ci"):
            lo, hi = s["ci"]
            line = (f"  search {i}: {number(s['knee'])} req/s (95% CI {number(lo)} … "
                    f"{number(hi)}), {what}")
            if s.get("verdict") == "imprecise":
                line += " [imprecise: the runs ran out]"
            out.print(line, highlight=False)
            if s.get("host_differed"):
                ref = (s.get("reference") or [{}])[0]
                out.print(f"    [yellow]the host differed from the other searches'[/]: at "
                          f"the reference rate its latency was {number(ref.get('latency_us'))}"
                          " µs, outside the others' intervals", highlight=False)
            if s.get("dips"):
                out.print("    the curve falls before it rises: rates below the capacity "
                          "missed the SLO (" + ", ".join(number(d) for d in s["dips"])
                          + " req/s)", highlight=False)
        else:
            tag = "spoiled by the host" if s.get("transient") else "no capacity"
            out.print(f"  search {i}: [yellow]{tag}[/]: {escape(str(r.get('reason') or ''))}"
                      f" ({what})", highlight=False)
    n, k = cap["searches"], cap["with_knee"]
    if cap.get("remeasured"):
        out.print(f"{cap['remeasured']} search(es) measured again after the host spoiled "
                  f"them ({cap.get('planned')} planned, {n} run)", highlight=False)
    if cap.get("value") is not None:
        lo, hi = cap["ci"]
        agree = ""
        if k > 1 and cap.get("heterogeneity_p") is not None:
            p = cap["heterogeneity_p"]
            agree = ("; the searches agree within their intervals" if p >= 0.05 else
                     "; [yellow]the searches disagree beyond their intervals[/] (heterogeneity"
                     f" p = {p:.3f}): the interval includes that spread")
        out.print(f"[bold]capacity {number(cap['value'])} req/s (95% CI {number(lo)} … "
                  f"{number(hi)})[/] from {k} of {n} search(es){agree}", highlight=False)
    else:
        out.print(f"[red]no capacity[/]: none of the {n} search(es) found one")
    out.print("The other metrics are the knee runs' (each search's highest passing rate).")


@app.command()
def sweep(
    study_file: Annotated[Path, typer.Argument(help="the study file (YAML)")],
    knob: Annotated[str, typer.Option(help="the knob to sweep, or load.rate (the open-loop "
                                           "rate: the latency–throughput curve)")],
    values: Annotated[str | None, typer.Option(help="comma-separated values")] = None,
    repetitions: Annotated[int | None, typer.Option(help="repetitions per value")] = None,
    as_json: Annotated[bool, flag("--json", help="print JSON")] = False,
    allow_inline_host_knobs: AllowInline = False,
) -> None:
    """Measure each value of one knob, the others at their defaults.

    Each value with N repetitions (--repetitions)."""
    loaded = _load(study_file, allow_inline_host_knobs, "sweep")  # before the heavy imports
    from kvtune.study.commands import sweep as run_sweep

    vals = [v.strip() for v in values.split(",")] if values else None
    res = run_sweep(loaded, knob, vals, repetitions, err)
    if as_json:
        print(json.dumps(res, indent=1, default=str))
        return
    from kvtune.metrics import unit as unit_of
    from kvtune.stats import ci_kind

    t = Table(title=f"Sweep of {knob}: {res['metric']} ({res['direction']})")

    by_rate = knob == "load.rate"  # the latency–throughput curve: what was achieved too
    for c in ("value", "median", "interval", "n", *(("achieved req/s",) if by_rate else ()),
              ""):
        t.add_column(c, overflow="fold")  # narrow terminals: folded, never cut
    # The medians and their intervals one column of the metric's unit, formatted together;
    # the achieved rates another.
    rows = res["rows"]
    col = present.column([r["median"] for r in rows] + [r["ci"][0] for r in rows]
                         + [r["ci"][1] for r in rows], unit_of(res["metric"]))
    figures = col.cells
    if col.unit:
        t.columns[1].header = f"median ({col.unit})"
    rates = present.column([r["metrics"].get("ops_per_sec") if by_rate else None
                            for r in rows], "req/s").cells
    n = len(rows)
    for i, r in enumerate(rows):
        ci = r["ci"]
        flags = sorted({v for v in r.get("verdicts", []) if v and v != "ok"})
        t.add_row(present.figure(r['value']) if by_rate else str(r["value"]),
                  figures[i],
                  f"{ci_kind(int(r['n']))} {figures[n + i]} … {figures[2 * n + i]}"
                  if present.as_number(ci[0]) is not None else present.MISSING, str(r["n"]),
                  *((rates[i],) if by_rate else ()),
                  ("baseline" if r["value"] == res["baseline_value"] else "")
                  + (f" {', '.join(flags)}" if flags else "")
                  + (f" failed: {r['failed']}" if r["failed"] else ""))
    out.print(t)


@app.command()
def show(
    study: Annotated[str, typer.Argument(help="a study file, or a study name")],
    storage: Annotated[str | None, typer.Option(help=cli_options.STORAGE_HELP)] = None,
    as_json: Annotated[bool, json_flag()] = False,
) -> None:
    """Show a study's trials and its best configuration.

    Trials, and the best configuration beside the baseline, metric by metric."""
    from kvtune.documents import jsonable
    from kvtune.report.summary import collect, next_steps, render
    from kvtune.store import results_store

    name, url = _storage_for(study, storage)
    data = collect(results_store(url), name)
    if as_json:
        print(json.dumps(jsonable(data), indent=1, default=str))
        return
    render(data, out, next_steps(data, study))


@app.command()
def check(
    study_file: Annotated[Path, typer.Argument(help="the study file (YAML)")],
    as_json: Annotated[bool, flag("--json", help="print JSON")] = False,
    allow_inline_host_knobs: AllowInline = False,
) -> None:
    """Validate a study file and print its plan, applying nothing.

    Preflight: the plan (knobs with domains and availability, host files it would write,
    rules, estimated wall time).
    Exit 0 when the study can run here, 2 otherwise."""
    from kvtune.study.check import main as check_main

    code = check_main(str(study_file), as_json, out, allow_inline_host_knobs)
    if code:
        raise typer.Exit(code)


@app.command()
def restore(
    journal: Annotated[Path | None, typer.Option(help="journal file")] = None,
) -> None:
    """Put back every host value an interrupted study changed.

    Each value verified by read-back; the journal is removed."""
    import os

    from kvtune import targets
    from kvtune.host.journal import default_path, restore_from_file

    path = journal or default_path()
    if path.exists() and os.geteuid() != 0:
        raise UserError(f"kvtune restore needs root: it puts back the kernel settings, "
                        f"cgroups and server processes recorded in {path}; run it as root "
                        "(sudo)")
    # The processes a journal may name: the servers of the registered target kinds.
    servers = {k: getattr(targets.target_class(k), "default_binary", "")
               for k in targets.kinds() if targets.target_class(k).runs_server}
    existed = path.exists()
    results = restore_from_file(path, servers=servers)
    if not results and existed:
        out.print(f"Nothing to restore: {escape(path)} recorded no change still in place (the "
                  "server processes it names have exited); the journal is removed.")
    elif not results:
        out.print(f"Nothing to restore ({escape(path)} is absent: the host is as kvtune found "
                  "it).")
        return
    failed = False
    for r in results:
        mark = "[green]ok[/]" if r.ok else "[red]FAILED[/]"
        failed |= not r.ok
        out.print(f"{mark} {escape(r.what)}: {escape(r.detail)}")
    if failed:
        raise typer.Exit(1)


@app.command()
def knobs(
    target: Annotated[str | None, typer.Option(help=f"a target kind: {_KINDS}, "
                                                    "synthetic")] = None,
    preset: Annotated[str | None, typer.Option(help="only the knobs of a preset")] = None,
    as_json: Annotated[bool, flag("--json", help="print JSON")] = False,
) -> None:
    """The knob catalog and what of it is available on this host.

    Each knob's default, current value, range and unit, and whether it is available on
    this host (and why not). Aliases used in the case studies map to
    catalog knobs; knobs left out on purpose are listed with the reason."""
    from kvtune.knobs import catalog

    if preset and preset not in catalog.PRESET_NAMES:
        raise UserError(f"--preset: unknown preset {preset!r}; known: "
                        f"{', '.join(catalog.PRESET_NAMES)}")
    from kvtune import targets

    if target and target not in targets.kinds():
        raise UserError(f"--target: unknown target {target!r}; known: "
                        f"{', '.join(targets.kinds())}")
    ctx = targets.host_context()
    # A target with knobs of its own (the synthetic surface) is tuned through those alone.
    own = list(targets.target_knobs(target).values()) if target else []
    rows = own or list(catalog.for_target(target))
    if preset:
        # The preset's own ranges (A-Tune's for memcached-app); every knob of the preset,
        # so that those unavailable here show why.
        names = catalog.preset_names(preset, ctx, available_only=False)
        rows = [catalog.apply_preset(preset, k) for k in rows if k.name in names]
    data = []
    for k in rows:
        a = k.applier.check(ctx)
        cur = a.current if a.current is not None else k.applier.current(ctx)
        data.append({**k.as_row(), "available": a.ok, "reason": a.reason, "current": cur,
                     "tags": list(k.tags)})
    aliases = {a: n for a, n in catalog.ALIASES.items() if not target and not preset}
    excluded = dict(catalog.EXCLUDED) if not target and not preset else {}
    if as_json:
        print(json.dumps(data, indent=1, default=str))
        return
    versions = ", ".join(f"{n} {'.'.join(map(str, v))}" for n, v in ctx.versions.items())
    t = Table(title=f"kvtune knob catalog on {ctx.facts.kernel}"
                    + (f" ({versions})" if versions else "") + f": {len(data)} knobs, "
                    f"{sum(d['available'] for d in data)} available")
    # As wide as the terminal: cells wrap (long words fold); on a narrow one the knob's
    # name keeps about a third of the width, the other columns share the rest.
    longest = max((len(d["name"]) for d in data), default=4)
    wide = out.width >= longest + 110
    t.add_column("knob", overflow="fold",
                 width=None if wide else min(longest, max(12, out.width * 3 // 10)))
    for c in ("range", "unit", "default", "current", "restart", "available"):
        t.add_column(c, overflow="fold")
    for d in data:
        avail = "[green]yes[/]" if d["available"] else f"[red]no[/]: {escape(d['reason'])}"
        if d["tags"]:
            avail += " [dim](" + ", ".join(d["tags"]) + ")[/]"
        t.add_row(d["name"], d["domain"], d["unit"], str(d["default"] if d["default"] is not None
                                                         else "(host)"),
                  escape(d["current"] if d["current"] is not None else "-"),
                  "yes" if d["restart"] else "no", avail)
    out.print(t)
    if aliases:
        out.print("Aliases (names from the case studies and older tools): " + ", ".join(
            f"{a} → {n}" for a, n in aliases.items() if a.startswith("kernel.")), highlight=False)
    for name, why in excluded.items():
        out.print(f"[dim]left out: {name}: {why}[/]", highlight=False)
    if not target or target in kinds.names():
        out.print("Case-study scheduler knobs and their working equivalent here:")
        for name in catalog.EQUIVALENTS:
            out.print(f"  {name}: {catalog.equivalent(name, ctx)}", highlight=False)
        out.print(f"  {catalog.sched_features_note()}", highlight=False)


@app.command()
def export(
    study: Annotated[str, typer.Argument(help="a study file, or a study name")],
    format_: Annotated[list[str] | None, typer.Option(
        "--format", help=f"sysctl, tuned, systemd or a server kind's ({_KINDS}) "
                         "(repeatable; default: every format the configuration has knobs "
                         "for)")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="directory for the files (default ./export/STUDY/)")] = None,
    out_old: Annotated[Path | None, alias("--out")] = None,
    storage: Annotated[str | None, typer.Option(help=cli_options.STORAGE_HELP)] = None,
    best_in_search: Annotated[bool, flag(
        "--best-in-search", help="without a significant recommendation, export the best "
                                 "feasible trial of the search (unconfirmed)")] = False,
    trial: Annotated[int | None, typer.Option(
        "--trial", help="export this confirmed candidate (a Pareto study's pick; "
                        "`kvtune show` lists the confirmed front)")] = None,
    minimal: Annotated[bool, flag(
        "--minimal", help="export the ablation's minimal configuration (only the changes "
                          "that carry the gain) even where the full one was kept")] = False,
    full: Annotated[bool, flag(
        "--full", help="export the confirmed configuration whole, even where the ablation "
                       "recommends only the changes that carry the gain")] = False,
    from_: Annotated[Path | None, typer.Option(
        "--from", help="the host's current server config file (its kind's own, under "
                       "/etc): merged into, and the rollback")] = None,
    tuned_include: Annotated[str | None, typer.Option(
        "--tuned-include", help="TuneD profile to include (default: `tuned-adm recommend`; "
                                "'' for none)")] = None,
    as_json: Annotated[bool, json_flag("print the files written, warnings and conditions "
                                       "as JSON")] = False,
) -> None:
    """Write ready-to-use files for the recommended configuration.

    Files for the measured configuration (fixed server arguments, placement,
    every changed knob): sysctl.d, a TuneD profile, memcached.conf, a redis.conf include, a
    systemd drop-in. Rollbacks go under rollback/. Files are written to a directory, never
    to /etc. Exit 1 when there is no recommendation or nothing in the formats asked."""
    from kvtune import export as ex
    from kvtune.store import results_store

    out_dir = merged(output, out_old, "--output", "--out")
    name, url = _storage_for(study, storage)
    if minimal and full:
        raise UserError("--minimal and --full ask for two configurations: give one")
    rec = ex.recommendation(results_store(url), name, best_in_search, minimal=minimal,
                            previous=from_, tuned_include=tuned_include, trial=trial,
                            full=full)
    formats = format_ or list(ex.exporters())
    target = out_dir or Path.cwd() / "export" / name
    made = ex.write(rec, formats, target)
    if as_json:
        _export_json(name, rec, formats, target, made)
        return
    out.print(f"[bold]{escape(name)}[/]: {escape(rec.source)}", highlight=False)
    if not made:
        have = ex.with_content(rec)
        err.print(f"Nothing to export for --format {', '.join(formats)}: "
                  + (f"the configuration has content for {', '.join(have)}" if have else
                     "the configuration changes nothing any format exports"), highlight=False)
        raise typer.Exit(1)
    for fmt, f in made:
        back = (f"rollback {target / f.rollback_path}" if f.rollback_path else
                "no rollback file")
        out.print(f"[green]{fmt}[/] {escape(target / f.path)}\n    {escape(back)}\n    "
                  f"{escape(f.install)}",
                  highlight=False)
    for w in [*ex.warnings(made), *rec.refused]:
        err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    conditions = rec.conditions()
    for c in conditions:
        out.print(f"[yellow]condition:[/] {escape(c)}", highlight=False)
    if conditions and "systemd" not in {m for m, _ in made}:
        can = "systemd" in ex.with_content(rec)
        err.print("[yellow]warning:[/] the recommendation depends on its placement and "
                  "the systemd drop-in that carries it was not written"
                  + (": add --format systemd" if can else f" ({rec.target} has no unit "
                     "kvtune writes a drop-in for): apply the placement by hand"),
                  highlight=False)
    empty = [f for f in formats if f not in {m for m, _ in made}]
    if empty:
        out.print(f"(nothing for: {', '.join(empty)})")


def _export_json(name: str, rec: Any, formats: list[str], target: Path,
                 made: list[Any]) -> None:
    """`kvtune export --json`: what was written, as the text says it (exit 1 when
    nothing was)."""
    from kvtune import export as ex

    print(json.dumps({
        "study": name, "source": rec.source, "directory": str(target),
        "files": [{"format": fmt, "path": str(target / f.path),
                   "rollback": str(target / f.rollback_path) if f.rollback_path else None,
                   "install": f.install} for fmt, f in made],
        "nothing_for": [f for f in formats if f not in {m for m, _ in made}],
        "warnings": [*ex.warnings(made), *rec.refused], "conditions": rec.conditions(),
    }, indent=1, default=str))
    if not made:
        raise typer.Exit(1)


@app.command()
def verify(
    study: Annotated[str, typer.Argument(help="a study file, or a study name")],
    storage: Annotated[str | None, typer.Option(help=cli_options.STORAGE_HELP)] = None,
    best_in_search: Annotated[bool, flag(
        "--best-in-search", help="verify the best feasible trial of the search "
                                 "(unconfirmed), as export --best-in-search exports it")] = False,
    trial: Annotated[int | None, typer.Option(
        "--trial", help="verify this confirmed candidate (as exported with --trial)")] = None,
    minimal: Annotated[bool, flag(
        "--minimal", help="verify the ablation's minimal configuration")] = False,
    full: Annotated[bool, flag(
        "--full", help="verify the confirmed configuration whole (as exported with --full)")]
    = False,
    pid: Annotated[int | None, typer.Option(
        "--pid", help="the server process to check (default: the one running)")] = None,
    host_only: Annotated[bool, flag(
        "--host-only", help="check the host knobs only, not a running server")] = False,
    port: Annotated[int | None, typer.Option(
        "--port", help="the TCP port the server listens on (default: the study's "
                       "target.port, else the port its config names, else 11211 or 6379)")]
    = None,
    as_json: Annotated[bool, json_flag("print the checks as JSON (same exit codes)")] = False,
) -> None:
    """Check that an exported recommendation is in effect here.

    Is the exported recommendation in effect on this host? Read-only, like `tuned-adm
    verify`: the host knobs it changes (sysctls, THP, ...) read back, and the running
    server's flags, options, CPU affinity and CPU quota — once the process is shown to be
    the server (it runs the trusted server binary, is owned by root or the service's user
    and listens on the study's port). One line per check; exit 0 when all hold, 1 when any
    differs or cannot be checked, 2 for a --pid that is no process."""
    from kvtune import export as ex
    from kvtune.store import results_store
    from kvtune.verify import verify as run_verify

    name, url = _storage_for(study, storage)
    if minimal and full:
        raise UserError("--minimal and --full ask for two configurations: give one")
    rec = ex.recommendation(results_store(url), name, best_in_search, minimal=minimal,
                            trial=trial, full=full, verb="verify")
    if port is not None and not 0 < port < 65536:
        raise UserError(f"--port: {port} is not a TCP port")
    checks, notes = run_verify(rec, pid, host_only, port)
    if as_json:
        print(json.dumps({"study": name, "source": rec.source, "notes": notes,
                          "checks": [{"what": c.what, "expected": c.expected,
                                      "found": c.found, "ok": c.ok, "note": c.note}
                                     for c in checks],
                          "in_effect": all(c.ok for c in checks)}, indent=1, default=str))
        if not all(c.ok for c in checks):
            raise typer.Exit(1)
        return
    out.print(f"[bold]{escape(name)}[/]: {escape(rec.source)}", highlight=False)
    for n in notes:
        out.print(n, highlight=False, markup=False)  # a process's argv: stripped by out
    for c in checks:
        out.print(c.line(), highlight=False, markup=False)
    bad = [c for c in checks if not c.ok]
    if not checks:
        server = [r.knob.name for r in rec.entries("app")]
        if host_only and (server or rec.target_cpus):
            what = ", ".join(server) + (" and " if server and rec.target_cpus else "") + (
                f"its placement on CPUs {rec.target_cpus}" if rec.target_cpus else "")
            out.print(f"nothing to verify with --host-only: the recommendation changes no host "
                      f"knob; it changes {what}, checked on the running server without "
                      "--host-only", highlight=False)
        else:
            out.print("nothing to verify: the recommendation changes no host knob and no "
                      "server setting")
    elif bad:
        out.print(f"{len(bad)} of {len(checks)} checks differ: the recommendation is not (all) "
                  "in effect")
        raise typer.Exit(1)
    else:
        out.print(f"all {len(checks)} checks hold: the recommendation is in effect")


@app.command(cls=cli_options.WithHiddenArguments)
def canary(
    kind: Annotated[str, typer.Option("--kind", help=f"the servers' kind: {_KINDS}")],
    canary_: Annotated[list[str], typer.Option(
        "--canary", metavar="HOST:PORT",
        help="a canary server running the change, HOST:PORT on this host (repeatable; "
             "paired with the --control in the same place)")],
    control: Annotated[list[str], typer.Option(
        "--control", metavar="HOST:PORT",
        help="a control server on the current configuration, HOST:PORT (repeatable)")],
    goal: Annotated[str | None, typer.Option(
        help="the change's goal, e.g. 'cpu_per_request better' (promote needs it met)")]
    = None,
    guardrail: Annotated[list[str] | None, typer.Option(
        help="e.g. 'p99 not worse than +5%' (repeatable; default: the study's canary: "
             "section, else CPU per request +10%, hit ratio -0.01, errors, refused "
             "connections, and p99 +10% where the server has latency figures)")] = None,
    interval: Annotated[str, typer.Option(help="time between looks (10s)")] = "10s",
    max_time: Annotated[str, typer.Option("--max-time", help="the time limit: "
                                          "inconclusive then")] = "30m",
    warmup: Annotated[int, typer.Option(help="looks discarded at the start")] = 1,
    alpha: Annotated[float, typer.Option(help="the chance of any wrong decision at any "
                                              "look")] = 0.05,
    aa: Annotated[bool, flag("--aa", help="A/A: both sides run the same configuration; "
                                          "checks the pair before the change goes in")]
    = False,
    study: Annotated[str | None, typer.Option(
        help="the study (file or name) whose recommendation the canary runs: `kvtune "
             "verify` checks the canary before watching")] = None,
    storage: Annotated[str | None, typer.Option(help=cli_options.STORAGE_HELP)] = None,
    export_dir: Annotated[Path | None, typer.Option(
        "--export", help="the directory `kvtune export -o` wrote: its rollback file is "
                         "the rollback")] = None,
    config_file: Annotated[Path | None, typer.Option(
        "--config", help="the canary's config file (the operator's own, instead of a "
                         "study's export): the change is what it sets differently from "
                         "--current-config, read back from the canary before watching")]
    = None,
    current_config: Annotated[Path | None, typer.Option(
        "--current-config", help="the control's config file: the current configuration, "
                                 "what the canary goes back to on a breach")] = None,
    rollback_on_breach: Annotated[bool, flag(
        "--rollback-on-breach", help="on 'roll back', apply the export's rollback file (or "
                                     "--current-config) to the canary, journalled, and "
                                     "verify the old configuration is back")] = False,
    probe_rate: Annotated[float | None, typer.Option(
        "--probe-rate", help="also probe each server with kvload at this many requests/s "
                             "on keys of its own: the probe's p99 (probe_p99), for servers "
                             "without latency figures of their own")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write the "
                                                "session's record (JSON) to this file")]
    = None,
    as_json: Annotated[bool, json_flag("print the session's record as JSON at the end (the "
                                       "looks go to stderr)")] = False,
    json_file: Annotated[Path | None, typer.Argument(
        hidden=True, help="with --json: the file -o names (an older spelling)")] = None,
    report_out: Annotated[Path | None, typer.Option("--report", help="write the session's "
                                                    "HTML page")] = None,
) -> None:
    """Watch canary servers running a change against controls.

    Canary servers running a change against control servers on the current
    configuration, serving the same class of live traffic (kvtune does not route it): per
    look, the canary's change against its control for each guardrail and the goal, with an
    interval valid at every look. Ends with promote (exit 0), roll back (1), or inconclusive
    at the time limit (1); --aa checks a pair on one configuration first."""
    from kvtune.canary import command as cc
    from kvtune.canary import page, session, watch

    if json_file is not None:  # `--json FILE`: an older spelling of `-o FILE`
        if not as_json:
            raise UserError(f"unexpected argument {json_file} (canary takes options only)")
        output, as_json = merged(output, json_file, "--output", "--json FILE"), False
    json_out = output
    say = err if as_json else out  # stdout holds the record alone
    if study is not None and aa:
        raise UserError("--study with --aa: an A/A pair runs the current configuration on "
                        "both sides; there is no change to verify")
    rec = cc.recommendation(_storage_for(study, storage)) if study is not None else None
    o = cc.Options(kind, list(canary_), list(control), goal, list(guardrail or []), interval,
                   max_time, warmup, alpha, aa, study, storage, export_dir,
                   rollback_on_breach, json_out, report_out, probe_rate=probe_rate,
                   study_rules=cc.study_rules(rec) if rec is not None else None,
                   config_file=config_file, current_config=current_config)
    plan = cc.plan_from(o)
    if (study is not None and rec is not None) or plan.change is not None:
        if plan.change is not None:
            ok, lines = cc.check_settings(
                plan, watch.reader_of(kind),
                {n: a for n, (a, _) in plan.change.settings.items()},
                f"in {plan.change.file.name}")
        else:
            assert study is not None and rec is not None
            ok, lines = cc.verify_canaries(plan, study, rec)
        plan.verified = lines
        for ln in lines:
            say.print(ln, highlight=False, markup=False)
        if not ok:
            say.print("the canary does not run the change (kvtune verify): not watched")
            raise typer.Exit(1)
    else:
        plan.verified = ["not verified: no --study or --config given"]
    who = ", ".join(f"{c.address} against {b.address}" for c, b in
                    zip(plan.canaries, plan.controls, strict=True))
    say.print(f"{'A/A ' if aa else ''}canary {who} ({kind}), a look every {interval} up "
              f"to {max_time}; "
              f"rules: {'; '.join(r.text for r in plan.rules)}", highlight=False, markup=False)
    record = session.run(plan, lambda ln: say.print(ln, highlight=False, markup=False))
    if "rollback" in record:
        ok, lines = cc.verify_rollback(plan, watch.reader_of(kind), rec)
        record["rollback"]["verify"] = {"ok": ok, "lines": lines}
        for ln in lines:
            say.print(ln, highlight=False, markup=False)
        say.print("verify: the old configuration is back on the canary" if ok else
                  "verify: the old configuration is NOT (all) back on the canary",
                  highlight=False, markup=False)
    if json_out is not None:
        session.write_record(record, json_out)
    if report_out is not None:
        page.write(record, report_out)
        say.print(f"wrote {escape(report_out)}")
    outcome = record["outcome"]
    if as_json:
        print(json.dumps(record, indent=1, default=str))
    say.print(f"{outcome}: {record['deciding']}", highlight=False, markup=False)
    if outcome == "roll back" and "rollback" not in record:
        how = (f"apply {plan.rollback.rollback_file}" if plan.rollback is not None else
               "apply the export's rollback file (under rollback/ in its directory)")
        say.print(f"not rolled back by kvtune (no --rollback-on-breach): {how} to the "
                  "canary", highlight=False, markup=False)
    if "rollback" in record and not record["rollback"]["verify"]["ok"]:
        raise typer.Exit(3)
    if outcome not in ("promote", session.AA_AGREES):
        raise typer.Exit(1)


@app.command()
def report(
    study: Annotated[str, typer.Argument(help="a study file, or a study name")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the HTML file to write")]
    = Path("report.html"),
    storage: Annotated[str | None, typer.Option(help=cli_options.STORAGE_HELP)] = None,
    within: Annotated[float, typer.Option(help="optimizable zones: within this fraction of "
                                          "the best")] = 0.05,
    importance: Annotated[str, typer.Option(
        help="main-effects (ranked, with intervals), ped-anova or fanova (needs scikit-learn)")]
    = "main-effects",
) -> None:
    """Write one self-contained HTML report of a study.

    The report works offline: the recommendation and its proof,
    before/after, convergence, importance, sensitivity, telemetry, reproduction."""
    from kvtune.analysis import analyse, load
    from kvtune.report import write
    from kvtune.store import results_store

    if importance not in ("main-effects", "ped-anova", "fanova"):
        raise UserError(f"--importance: {importance!r} is not main-effects, ped-anova or "
                        "fanova")
    if not 0 < within < 1:
        raise UserError(f"--within: {within} is not a fraction between 0 and 1")
    name, url = _storage_for(study, storage)
    store = results_store(url)
    if name not in store.study_names():  # a study that only swept: its sweeps by phase
        from kvtune.report.sweep import sweep_only_page

        page = sweep_only_page(store, name)
        if page is None:
            load(store, name)  # says which studies the database holds
            raise UserError(f"no study named {name!r} in {store.url}")
        from kvtune.safety.files import write_file

        output.parent.mkdir(parents=True, exist_ok=True)
        write_file(output, page, what="-o")
        out.print(f"wrote {escape(output)} (sweeps only)")
        return
    # A damaged stored trial or result is refused here (exit 2), never hidden behind the
    # sweeps-only page.
    from kvtune.study.stored import checked_spec

    data = load(store, name, checked_spec)
    path = write(data, output, within, analyse(data, within, importance))
    size = path.stat().st_size / 1e6
    out.print(f"wrote {escape(path)} ({size:.1f} MB, self-contained; open it in any browser)")


@app.command()
def dashboard(
    study: Annotated[str, typer.Argument(help="a study file, or a study name")],
    storage: Annotated[str | None, typer.Option(help=cli_options.STORAGE_HELP)] = None,
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8080,
) -> None:
    """Live view of a study in optuna-dashboard (127.0.0.1 only).

    optuna-dashboard on the study's storage, bound to 127.0.0.1 only."""
    from kvtune.store import results_store

    try:
        from optuna_dashboard import run_server
    except ImportError:
        raise UserError("optuna-dashboard is not installed: pip install 'kvtune[dashboard]' "
                        "(`make setup` installs it)") from None
    if not 0 < port < 65536:
        raise UserError(f"--port: {port} is not a TCP port")
    name, url = _storage_for(study, storage)
    st = results_store(url)
    try:
        study_id = st.storage.get_study_id_from_name(name)
    except KeyError:
        known = ", ".join(st.study_names()) or "none"
        raise UserError(f"no study named {name!r} in {st.url} (studies there: {known})") \
            from None
    err.print(f"optuna-dashboard for {escape(name)}: http://127.0.0.1:{port}/dashboard/studies/"
              f"{study_id}  (Ctrl-C stops it)")
    try:
        run_server(st.storage, host="127.0.0.1", port=port)
    except OSError as e:
        raise UserError(f"cannot serve on 127.0.0.1:{port}: {e.strerror}") from None


workload_app = typer.Typer(cls=Commands, no_args_is_help=True, rich_markup_mode=None,
                           help="Workload models of your own traffic (docs/kvload.md).\n\n"
                                "Capture a live server, import a public trace, describe a "
                                "model.")
app.add_typer(workload_app, name="workload")


def _size(text: str, what: str) -> int:
    from kvtune.quantities import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise UserError(f"{what}: {e}") from None


@workload_app.command("capture")
def workload_capture(
    url: Annotated[str, typer.Argument(help=f"KIND://HOST:PORT, a server kind: {_KINDS}")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the model to write")],
    duration: Annotated[str | None, typer.Option(
        help="how long to capture (default: 10s with a watcher, 5s with MONITOR, which "
             "captures at most 60s)")] = None,
    max_events: Annotated[int, typer.Option(help="stop after this many lines")] = 5_000_000,
    max_bytes: Annotated[str, typer.Option(help="stop after reading this much")] = "1G",
    sample: Annotated[bool, flag("--sample", help="a server with MONITOR, without it: INFO "
                                                   "commandstats, SCAN, STRLEN, TTL")] = False,
    remote: Annotated[bool, flag("--remote", help="allow a server that is not on a loopback "
                                                   "address")] = False,
    mget_gap_us: Annotated[float, typer.Option(
        "--mget-gap-us", help="a watcher's capture: fetches of one connection this close "
                              "form one "
                              "multiget; it also merges pipelined gets (default 0: never "
                              "group)")] = 0.0,
    keep_trace: Annotated[Path | None, typer.Option(
        "--keep-trace", help="also write the requests themselves (hashed keys, lengths, "
                             "times) for `kvload --trace`")] = None,
) -> None:
    """Record a running server's traffic as a workload model.

    memcached through `watch
    fetchers mutations`, Redis through MONITOR for a bounded window (or --sample). Keys are
    hashed at once, values never kept; only read-only commands are sent. Exit 2 on bad
    input, 3 when the server cannot be captured."""
    from kvtune.durations import parse_duration
    from kvtune.workload.capture import capture

    secs = None
    if duration is not None:
        try:
            secs = parse_duration(duration)
        except ValueError as e:
            raise UserError(f"--duration {duration!r}: {e}") from None
    doc, _cap = capture(url, secs, str(output), max_events=max_events,
                       max_bytes=_size(max_bytes, "--max-bytes"), sample=sample,
                       allow_remote=remote, mget_gap=mget_gap_us / 1e6,
                       keep_trace=str(keep_trace) if keep_trace is not None else None,
                       say=lambda m: err.print(m, highlight=False))
    from kvtune.workload.describe import lines

    for line in lines(doc):
        out.print(line, highlight=False, markup=False)
    out.print(f"wrote {escape(output)}", highlight=False)


@workload_app.command("import")
def workload_import(
    fmt: Annotated[str, typer.Argument(metavar="FORMAT", help="twitter or meta")],
    trace: Annotated[Path, typer.Argument(help="the CSV trace, plain or .zst")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the model to write")],
    start: Annotated[float | None, typer.Option(
        help="seconds from the trace's first request where the window starts")] = None,
    end: Annotated[float | None, typer.Option(
        help="seconds from the trace's first request where the window ends")] = None,
    key_sample: Annotated[float, typer.Option(
        help="keep this fraction of the keys (by hash, with all their requests)")] = 1.0,
    max_bad: Annotated[float, typer.Option(
        help="fail when more than this fraction of the lines is malformed")] = 0.01,
    keep_trace: Annotated[Path | None, typer.Option(
        "--keep-trace", help="also write the window's requests, normalized (hashed keys, "
                             "lengths, times), for `kvload --trace`")] = None,
) -> None:
    """Turn a public cache trace into a workload model.

    A trace of Twitter (OSDI'20) or Meta (kvcache), read as a stream (constant memory).
    Malformed lines are skipped and counted."""
    from kvtune.safety.files import note_input
    from kvtune.workload.capture import check_output, check_trace_output, write_model
    from kvtune.workload.describe import lines
    from kvtune.workload.trace import TraceWriter
    from kvtune.workload.traces import check_import_options, import_trace

    # The trace is this run's input: -o and --keep-trace may not name it, however spelled
    # (compared by device and inode: sub/../x.csv, a link, a hard link).
    note_input(str(trace))
    path = check_output(str(output))
    trace_path = check_trace_output(str(keep_trace) if keep_trace else None, path)
    check_import_options(fmt, start, end, key_sample, max_bad)
    # Both formats stamp whole seconds.
    writer = TraceWriter(trace_path, whole_seconds=True) if trace_path else None
    try:
        doc, _st = import_trace(fmt, str(trace), start=start, end=end,
                                key_sample=key_sample, max_bad=max_bad, trace=writer)
    except BaseException:
        if writer:
            writer.abandon()
        raise
    if writer:
        doc["about"]["trace"] = writer.close()
    write_model(path, doc)
    for line in lines(doc):
        out.print(line, highlight=False, markup=False)
    out.print(f"wrote {escape(output)}", highlight=False)


@workload_app.command("describe")
def workload_describe(
    model: Annotated[Path, typer.Argument(help="a workload model (or any kvload workload "
                                               "file)")],
    html: Annotated[Path | None, typer.Option(
        "--html", help="also write its plots (popularity, sizes, rate, miss-ratio curve) to "
                       "this page")] = None,
    kind: Annotated[str | None, typer.Option(
        help="the miss-ratio curve's server kind, or lru (default: the captured server's "
             "kind, else lru)")] = None,
    measured: Annotated[str | None, typer.Option(
        help="hit ratios measured on servers, to put on the curve "
             "(bench/mrc/check_real.py --json)")] = None,
    curve: Annotated[bool, flag("--curve/--no-curve", help="the miss-ratio curve (a few "
                                                           "seconds)")] = True,
    as_json: Annotated[bool, json_flag("print the model itself as JSON")] = False,
) -> None:
    """Describe what a workload model holds.

    Its mix, rate and arrivals, popularity and its fit, sizes,
    TTLs, connections, how it was captured or imported, and its miss-ratio curve (the hit
    ratio by memory, with measured points)."""
    from kvtune.mrc.view import Point, default_kind, describe_curve, page_block
    from kvtune.workload.describe import html as write_html
    from kvtune.workload.describe import lines, load_model

    doc = load_model(str(model))
    pts: list[Point] = []
    mrc, why = None, ""
    if curve and (html is not None or not as_json):  # --json alone prints the model only
        from kvtune.mrc.command import read_measured
        from kvtune.mrc.model import model_of

        k = kind or default_kind(doc)
        if k != "lru":
            model_of(k)  # UserError naming the kinds with a model
        rows = read_measured(measured, doc) if measured else []
        pts = [Point(int(r["memory"]), float(r["measured"]),
                     f"measured ({r['workload']})" if r["workload"] else "measured")
               for r in rows if r["kind"] in ("", k)]
        mrc, why = describe_curve(doc, k, [p.memory for p in pts])
    if as_json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        from kvtune.mrc.view import summary

        text = lines(doc)
        if curve:
            text += summary(mrc, measured=pts) if mrc is not None else [
                f"miss-ratio curve: not drawn ({why})"]
        for line in text:
            out.print(line, highlight=False, markup=False)
    if html is not None:
        write_html(doc, html, page_block(mrc, pts) if mrc is not None else "")
        (err if as_json else out).print(f"wrote {escape(html)}", highlight=False)


from kvtune.mrc.command import mrc_command  # noqa: E402

workload_app.command("mrc")(mrc_command)  # kvtune workload mrc: memory for a hit ratio

from kvtune.library_commands import library_app, predict_command, profiles_app  # noqa: E402

app.add_typer(library_app, name="library")
app.add_typer(profiles_app, name="profiles")

from kvtune.initcmd import init_command  # noqa: E402

app.command("init")(init_command)  # kvtune init: a study file for your own server


@app.command()
def predict(
    study: Annotated[str, typer.Argument(help="a study file, or a study name")],
    storage: Annotated[str | None, typer.Option(help=cli_options.STORAGE_HELP)] = None,
    library: Annotated[str | None, typer.Option(help=cli_options.LIBRARY_HELP)] = None,
    as_json: Annotated[bool, json_flag("print the prediction as JSON (same exit codes)")]
    = False,
) -> None:
    """Predict from the library's past studies (nothing measured).

    What the nearest past studies in the library suggest for this study's workload
    (configuration, expected change with its spread): a PREDICTION, nothing measured.
    Exit 1 when nothing in the library is near."""
    predict_command(study, storage, library, as_json)


@functools.cache
def command() -> Any:
    """The click command of `app`. `app(...)` builds it again from every command's signature
    on each call (a tenth of a second; `typer.main.get_command`); a process that calls
    `main` more than once (the unit tests, in process), or forks processes that do (the
    tests' fork server), builds it once. `app` has pretty_exceptions off, so calling the
    command is what `app(...)` does."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point. Usage errors are typer's (exit 2); kvtune's own errors are printed as
    one message for people, never a stack trace, with their exit code."""
    cli_options.fit_consoles()
    try:
        command()(args=argv)
    except PermissionError as e:
        # A file kvtune needs is root's: one line, never a traceback (exit 2: how it was run).
        err.print(f"[red]kvtune: error:[/] permission denied: {escape(e.filename or e)}: this "
                  "needs root (run kvtune as root, or with sudo)", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KvtuneError as e:
        err.print(f"[red]kvtune: error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
