"""The library's commands: `kvtune library list|show|forget|import|export`, `kvtune
profiles [export CATEGORY]` and `kvtune predict STUDY` (registered by kvtune.cli)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvtune import cli_options, present
from kvtune.cli_options import Commands, WithHiddenArguments, alias, json_flag, merged
from kvtune.errors import KvtuneError, UserError

if TYPE_CHECKING:
    from kvtune.library.entry import Entry
    from kvtune.library.store import Library
    from kvtune.safety.text import Console

LibraryOpt = Annotated[str | None, typer.Option(cli_options.LIBRARY,
                                                help=cli_options.LIBRARY_HELP)]
JsonFlag = Annotated[bool, json_flag()]
MAX_IMPORT_BYTES = 64 << 20


class NothingFound(KvtuneError):
    """A lookup found nothing to act on (exit 1)."""

    exit_code = 1


def _consoles() -> tuple[Console, Console]:
    """stdout and stderr, kvtune.cli's (as wide as the terminal or COLUMNS)."""
    return cli_options.out, cli_options.err


def _open(flag: str | None, storage: str | None = None, *, create: bool = False) -> Library:
    """The library a command uses; only `create` (an import) creates it: a command that
    reads or forgets says a library that is not there is missing."""
    from kvtune.library.store import LibraryUnavailable, open_library

    try:
        lib = open_library(flag, storage, create=create)
    except LibraryUnavailable as e:
        raise UserError(str(e)) from None
    if lib is None:
        raise UserError("the library is off (KVTUNE_LIBRARY=off); give --library PATH")
    return lib


def _entries(lib: Library) -> list[Entry]:
    from kvtune.library.store import LibraryUnavailable

    _, err = _consoles()
    try:
        read = lib.read()
    except LibraryUnavailable as e:
        raise UserError(str(e)) from None
    if read.invalid:
        rid, why = read.invalid[0]
        err.print(f"[yellow]note:[/] {len(read.invalid)} entr"
                  f"{'y does' if len(read.invalid) == 1 else 'ies do'} not validate and "
                  f"{'is' if len(read.invalid) == 1 else 'are'} ignored (first, {rid[:8]}: "
                  f"{_esc(why)})", highlight=False)
    return read.entries


def _esc(text: str) -> str:
    from kvtune.safety.text import for_markup

    return for_markup(text)


def _one(lib: Library, prefix: str) -> str:
    ids = lib.find(prefix)
    if not ids:
        raise NothingFound(f"no library entry {prefix!r} in {lib.url} (`kvtune library "
                           "list` shows the ids)")
    if len(ids) > 1:
        raise UserError(f"{prefix!r} names {len(ids)} entries: give more of the id")
    return ids[0]


def result_text(e: Entry) -> str:
    from kvtune.present import number

    if e.recommendation is None:
        return "defaults hold"
    r = e.recommendation
    if r.change is None:
        return "recommended (no interval)"
    ci = f" ({present.pct(r.ci[0])} … {present.pct(r.ci[1])})" if r.ci else ""
    cap = ""
    if e.capacity is not None:
        cap = f"; knee {number(e.capacity.knee)}/s"
    return f"{e.objective.metric} {present.pct(r.change)}{ci}{cap}"


library_app = typer.Typer(cls=Commands, no_args_is_help=True, rich_markup_mode=None,
                          help="The library of finished studies (docs/library.md).")


@library_app.command("list")
def library_list(library: LibraryOpt = None, as_json: JsonFlag = False) -> None:
    """List every entry of the library.

    Each entry's id, when, study, target, objective, workload, result and host."""
    from rich.table import Table

    from kvtune.workload.features import describe

    out, _ = _consoles()
    lib = _open(library)
    entries = _entries(lib)
    if as_json:
        print(json.dumps([e.as_json() for e in entries], indent=1))
        return
    if not entries:
        out.print(f"the library {_esc(lib.url)} is empty: every finished `kvtune tune` "
                  "adds its study", highlight=False)
        return
    t = Table(title=f"kvtune library {lib.url} ({len(entries)} entries)")
    t.add_column("id", width=8)  # a short id is whole on any terminal
    for col in ("date", "study", "target", "objective", "workload", "result", "host"):
        t.add_column(col, overflow="fold")  # narrow terminals: folded, never cut
    for e in entries:
        obj = e.objective.metric + (f" at {e.objective.slo}" if e.objective.slo else "")
        t.add_row(e.short_id, time.strftime("%Y-%m-%d %H:%M", time.gmtime(e.created)),
                  _esc(e.study), f"{e.target} {e.target_version or ''}".strip(), _esc(obj),
                  _esc(describe(e.workload)), _esc(result_text(e)),
                  _esc(f"{e.host.name or '?'}, {e.host.cpus} CPUs"))
    out.print(t)


@library_app.command("show")
def library_show(entry: Annotated[str, typer.Argument(help="an entry id (or its start)")],
                 library: LibraryOpt = None, as_json: JsonFlag = False) -> None:
    """Show one entry in full."""
    from kvtune.library.entry import parse
    from kvtune.present import fmt
    from kvtune.workload.features import FEATURES, describe

    out, _ = _consoles()
    lib = _open(library)
    rid = _one(lib, entry)
    raw = lib.get_raw(rid) or "{}"
    try:
        e = parse(json.loads(raw))
    except (ValueError, RecursionError) as ex:
        raise UserError(f"entry {rid[:8]} does not validate (it is never used): {ex}") \
            from None
    if as_json:
        print(json.dumps(e.as_json(), indent=1))
        return
    p = lambda s: out.print(s, highlight=False)  # noqa: E731
    p(f"[bold]entry {e.id}[/] — study {_esc(e.study)!r}, "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(e.created))}, kvtune "
      f"{e.kvtune_version}")
    p(f"  target: {e.target}{' ' + e.target_version if e.target_version else ''}; host "
      f"{_esc(e.host.name or '?')}: "
      f"{_esc(e.host.cpu_model)}, {e.host.cpus} CPUs, kernel {_esc(e.host.kernel)}, "
      f"server CPUs {e.host.server_cpus or '-'}, load CPUs {e.host.load_cpus or '-'}")
    p(f"  objective: {e.objective.metric} ({e.objective.direction})"
      + (f", SLO {_esc(e.objective.slo)}" if e.objective.slo else ""))
    p(f"  workload: {_esc(e.workload_source or describe(e.workload))}")
    p("    features: " + ", ".join(f"{f} {e.workload[f]:.3g}" for f in FEATURES
                                   if f in e.workload))
    p(f"  knobs tuned: {', '.join(e.knobs) or '-'}")
    if e.recommendation is None:
        p(f"  result: the defaults hold ({_esc(e.verdict)})")
    else:
        p(f"  result: {_esc(result_text(e))}")
        p("    changes: " + ", ".join(f"{k}={fmt(v)}" for k, v in
                                     e.recommendation.changes.items()))
        if e.carriers:
            p(f"    carried by (ablation): {', '.join(e.carriers)}")
    if e.noise is not None:
        p(f"  noise floor: CoV {present.share(e.noise.cov, 1)} over {e.noise.n} repetitions")
    if e.capacity is not None:
        c = e.capacity
        ci = f" (95% CI {present.figure(c.ci[0])} … {present.figure(c.ci[1])})" if c.ci else ""
        p(f"  capacity at {_esc(c.slo)}: baseline knee {present.figure(c.knee)} req/s{ci}"
          + (f", recommended {present.figure(c.recommended_knee)}" if c.recommended_knee else "")
          + f"; curve of {len(c.curve)} runs")
    p(f"  search: {e.search.trials} trials, best at trial {e.search.best_trial}")
    if e.warm_start:
        p("  drew from: " + ", ".join(f"{w.id[:8]} (distance {w.distance:.2f})"
                                      for w in e.warm_start))
    else:
        p("  drew from: nothing (started cold)")


@library_app.command("forget")
def library_forget(entry: Annotated[str, typer.Argument(help="an entry id (or its start)")],
                   library: LibraryOpt = None) -> None:
    """Remove one entry."""
    out, _ = _consoles()
    lib = _open(library)
    rid = _one(lib, entry)
    lib.forget(rid)
    out.print(f"forgot {rid[:8]}", highlight=False)


@library_app.command("export", cls=WithHiddenArguments)
def library_export(
    output: Annotated[Path | None, typer.Option(*cli_options.OUTPUT,
                                                help="the JSON file to write")] = None,
    library: LibraryOpt = None,
    file: Annotated[Path | None, typer.Argument(
        hidden=True, help="the file -o names (an older spelling)")] = None,
) -> None:
    """Write every entry to a file, for another host to import.

    The file is what another host's `kvtune library import` reads."""
    from kvtune.safety.files import write_file

    file = merged(output, file, "--output", "FILE")
    if file is None:
        raise UserError("give the file to write: kvtune library export -o FILE")
    out, _ = _consoles()
    lib = _open(library)
    entries = _entries(lib)
    doc = {"schema": "kvtune/library-export/1", "entries": [e.as_json() for e in entries]}
    write_file(file.absolute(), json.dumps(doc, indent=1) + "\n", what="library export")
    out.print(f"wrote {len(entries)} entries to {_esc(str(file))}", highlight=False)


@library_app.command("import")
def library_import(file: Annotated[Path, typer.Argument(help="a `kvtune library export` "
                                                               "file")],
                   library: LibraryOpt = None) -> None:
    """Add the entries of a file (another host's, a colleague's). Every entry is checked
    first: one that does not validate refuses the whole file, nothing is added."""
    from kvtune.library.entry import MAX_ENTRY_BYTES, parse
    from kvtune.safety.files import ReadRefused, read_input

    out, _ = _consoles()
    try:
        data = read_input(file, MAX_IMPORT_BYTES, "library import")
    except ReadRefused as e:
        raise UserError(str(e)) from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise UserError(f"{file}: not a JSON library export (kvtune library export "
                        "writes one)") from None
    items = doc.get("entries") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or (isinstance(doc, dict) and doc.get("schema") not in
                                       (None, "kvtune/library-export/1")):
        raise UserError(f"{file}: not a kvtune library export (an object with "
                        "schema kvtune/library-export/1 and a list of entries)")
    entries, problems = [], []
    for i, item in enumerate(items):
        try:
            if len(json.dumps(item)) > MAX_ENTRY_BYTES:
                raise ValueError(f"more than {MAX_ENTRY_BYTES // 1024} KiB")
            entries.append(parse(item))
        except (ValueError, TypeError, RecursionError) as e:
            problems.append(f"entries[{i}]: {e}")
    if problems:
        raise UserError(f"{file}: {len(problems)} of {len(items)} entries do not validate; "
                        "nothing was imported", problems[:10])
    lib = _open(library, create=True)
    from kvtune.library.store import LibraryUnavailable

    try:
        added = lib.add(entries)
    except LibraryUnavailable as e:
        raise UserError(str(e)) from None
    out.print(f"imported {added} entries into {_esc(lib.url)} ({len(entries) - added} "
              "already there)", highlight=False)


profiles_app = typer.Typer(cls=Commands, rich_markup_mode=None, invoke_without_command=True,
                           help="Workload categories and the configuration that held in "
                                "each.\n\nCategories of workloads and the configuration that "
                                "held across each one's studies (docs/library.md).")


def _categories(library: str | None) -> list[Any]:
    from kvtune.library.profiles import categories

    return categories(_entries(_open(library)))


@profiles_app.callback()
def profiles(ctx: typer.Context, library: LibraryOpt = None, as_json: JsonFlag = False) -> None:
    """Without a command: every category, its studies and its profile."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = library
        return
    from kvtune.library.profiles import spread
    from kvtune.present import fmt
    from kvtune.workload.features import describe

    out, _ = _consoles()
    cats = _categories(library)
    if as_json:
        print(json.dumps([_category_json(c) for c in cats], indent=1, default=str))
        return
    if not cats:
        out.print("no category: the library holds no study yet", highlight=False)
        return
    p = lambda s: out.print(s, highlight=False)  # noqa: E731
    for c in cats:
        n = len(c.members)
        holds = sum(1 for e in c.members if e.recommendation is None)
        target = _esc(f"{c.target} {c.target_version}" if c.target_version else c.target)
        p(f"[bold]{c.id}: {_esc(c.name)}[/] — {target}, {_esc(c.metric)}; {n} "
          f"stud{'y' if n == 1 else 'ies'} ({_esc(describe(c.centre))})")
        p("  studies: " + ", ".join(f"{_esc(e.study)} ({e.short_id})" for e in c.members))
        knobs = c.knobs()
        held = [k for k in knobs if k.holds]
        loose = [k for k in knobs if not k.holds]
        if held:
            for k in held:
                p(f"  holds: {_esc(k.knob)} = {_esc(fmt(k.value))} (confirmed in "
                  f"{k.confirmed_in} of {n}; "
                  f"gains {spread(k.gains)})")
        else:
            p("  holds: no change (no change was confirmed in most of its studies)")
        for k in loose:
            p(f"  did not generalise: {_esc(k.knob)} (confirmed in {k.confirmed_in} of {n}, "
              f"values {_esc(', '.join(map(fmt, k.values)))})")
        if holds:
            p(f"  the defaults held in {holds} of {n}")
        p(f"  gains of its studies: {spread(c.gains())}")


def _category_json(c: Any) -> dict[str, Any]:
    """`kvtune profiles --json`: one category as the text shows it."""
    return {"id": c.id, "name": c.name, "target": c.target,
            "target_version": c.target_version, "metric": c.metric,
            "direction": c.direction, "centre": c.centre,
            "studies": [{"study": e.study, "id": e.id, "holds": e.recommendation is None}
                        for e in c.members],
            "knobs": [{"knob": k.knob, "value": k.value, "holds": k.holds,
                       "confirmed_in": k.confirmed_in, "values": k.values, "gains": k.gains}
                      for k in c.knobs()],
            "gains": c.gains()}


@profiles_app.command("export")
def profiles_export(
    ctx: typer.Context,
    category: Annotated[str, typer.Argument(help="a category id (c1) or its name's start")],
    output: Annotated[Path | None, typer.Option(
        *cli_options.OUTPUT, help="directory to write (default ./profile)")] = None,
    out_dir: Annotated[Path | None, alias("--out-dir")] = None,
    library: LibraryOpt = None,
    as_json: Annotated[bool, json_flag("print the files written as JSON")] = False,
) -> None:
    """Write a category's profile as TuneD and server config files.

    A category's profile as a TuneD profile and the server's config drop-in (with
    rollbacks), as `kvtune export` writes a study's."""
    from kvtune.export.profile import export
    from kvtune.library.profiles import find

    out, _ = _consoles()
    target = merged(output, out_dir, "--output", "--out-dir") or Path("profile")
    cats = _categories(merged(library, ctx.obj, "--library", "kvtune profiles --library"))
    cat = find(cats, category)
    if cat is None:
        raise UserError(f"no category {category!r}: " + (", ".join(
            f"{c.id} ({c.name})" for c in cats) or "the library holds none"))
    if not cat.held():
        raise NothingFound(f"category {cat.id} ({cat.name}) has no change that held in most "
                           "of its studies: nothing to export")
    made = export(cat, target)
    if not made:
        raise NothingFound(f"category {cat.id}: its changes ({', '.join(cat.held())}) have "
                           "no export format (knobs of the synthetic target?)")
    if as_json:
        print(json.dumps({"category": cat.id, "directory": str(target), "files": [
            {"format": fmt, "path": str(target / f.path), "install": f.install}
            for fmt, f in made]}, indent=1))
        return
    for fmt, f in made:
        out.print(f"{fmt}: {_esc(str(target / f.path))}  — {_esc(f.install)}",
                  highlight=False)


def predict_command(study: str, storage: str | None, library: str | None,
                    as_json: bool = False) -> None:
    """`kvtune predict`: see kvtune.library.predict."""
    from kvtune.library.predict import predict, this_host_fingerprint
    from kvtune.library.profiles import spread
    from kvtune.present import fmt
    from kvtune.workload.features import NoFeatures, describe, nearest_differences

    out, _ = _consoles()
    spec = _spec_of(study, storage)
    lib = _open(library, spec.storage)
    try:
        pred = predict(spec, this_host_fingerprint(spec), _entries(lib))
    except NoFeatures as e:
        raise UserError(f"study {spec.study!r}: {e}") from None
    if as_json:
        print(json.dumps({
            "study": spec.study, "target": spec.target.kind,
            "metric": spec.objective.metric, "features": pred.features,
            "library": lib.url, "measured": False,
            "used": [{"study": e.study, "id": e.id, "distance": d, "result": result_text(e),
                      "changes": e.recommendation.changes if e.recommendation else {}}
                     for e, d in pred.found.used],
            "config": pred.config, "support": pred.support, "gains": pred.gains,
            "holds": pred.holds}, indent=1, default=str))
        if not pred.found.used:
            raise typer.Exit(1)
        return
    p = lambda s: out.print(s, highlight=False)  # noqa: E731
    p(f"[bold]PREDICTION[/] for study {_esc(spec.study)!r} from the library alone "
      f"(nothing measured): {spec.target.kind}, {spec.objective.metric}; "
      f"{_esc(describe(pred.features))}")
    if not pred.found.used:
        if pred.found.nearest_beyond:
            near, d = pred.found.nearest_beyond
            diff = "; ".join(nearest_differences(pred.features, near.workload))
            p(f"  no prediction: the nearest compatible study, {_esc(near.study)!r}, is at "
              f"distance {d:.2f} ({_esc(diff)}): this workload is unlike anything in the "
              "library")
        else:
            why = "; ".join(f"{k} ({v})" for k, v in pred.found.reasons().items())[:400]
            p(f"  no prediction: no compatible study in {_esc(lib.url)}"
              + (f"; not used: {_esc(why)}" if why else ""))
        raise typer.Exit(1)
    for used, d in pred.found.used:
        p(f"  {_esc(used.study)!r} ({used.short_id}), distance {d:.2f}: "
          f"{_esc(result_text(used))}"
          + (": " + ", ".join(f"{k}={fmt(v)}" for k, v in used.recommendation.changes.items())
             if used.recommendation else ""))
    n = len(pred.found.used)
    if pred.config:
        p("  suggested configuration: " + ", ".join(
            f"{k}={fmt(v)} ({pred.support[k]} of {n})" for k, v in pred.config.items()))
    else:
        p("  suggested configuration: the defaults (no change was confirmed in most of "
          "the nearest studies)")
    p(f"  expected change of {spec.objective.metric}: {spread(pred.gains)}"
      + (f"; the defaults held in {pred.holds} of {n}" if pred.holds else ""))
    p("  This is a prediction: `kvtune tune` measures it (its warm start queues these "
      "configurations first).")


def _spec_of(study: str, storage: str | None) -> Any:
    p = Path(study)
    if p.suffix in (".yaml", ".yml"):
        from kvtune.study.loader import parse_study, read_study

        return parse_study(read_study(p), str(p), base_dir=p.resolve().parent).spec
    import optuna

    from kvtune.store import results_store
    from kvtune.study.stored import stored_spec

    name = study
    url = storage or f"sqlite:///{(Path.cwd() / 'results' / f'{study}.db').as_posix()}"
    store = results_store(url)  # the one URL check; a missing database is not created
    try:
        s = optuna.load_study(study_name=name, storage=store.storage)
    except KeyError:
        raise UserError(f"no study named {name!r} in {store.url}") from None
    return stored_spec(s.user_attrs, name, store.url).spec
