"""The one way a study file becomes a study, used by every command.

    loaded = load_study("examples/memcached.yaml")      # read once, every check, knobs
    loaded.spec, loaded.knobs, loaded.text, loaded.notes

The steps, in order, each reporting every problem it finds with its key path and line
(a `UserError`, exit 2) before anything touches the host:

1. read the file once, within the limits of `kvtune.safety.yamlload`;
2. modernize old spellings (each one a one-line deprecation note in `notes`);
3. validate the schema (`kvtune.spec`, shapes and values only);
4. the registries' checks: the target kind and its own arguments and keys, the load tool
   and its extra arguments, whether the target needs a load;
5. paths the file names, relative to the study file (`load.workload_file`);
6. resolve the knobs (`kvtune.knobs.resolve`), check a knob against `target.args`, the
   inline knobs' values against the target's allow-lists, the grid against the budget;
7. the command line's gates (inline host knobs need `--allow-inline-host-knobs`).

A command-line option that changes the study (`kvtune run --capacity SLO`, `--load-tool`,
`kvtune tune --trials`) is an `Override`: set on the document after step 2, so it passes
steps 3-6 as the file's own text would, and a problem with it names the option.
"""

from __future__ import annotations

import copy
import math
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtune import present
from kvtune.cpulist import parse_cpus
from kvtune.errors import UserError
from kvtune.knobs.knob import Knob
from kvtune.metrics import direction as objective_direction
from kvtune.safety import yamlload
from kvtune.spec import KnobSpec, LineMap, StudySpec, line_map, parse_data, yaml_data
from kvtune.spec import where_in_file as where

__all__ = ["Loaded", "Override", "check_stored", "load_study", "load_text", "parse_study",
           "read_study"]

Lines = dict[tuple[Any, ...], int]

# TargetSpec keys that belong to one kind (Target.spec_keys).
_KIND_KEYS = ("noise_cov", "surface")
_DOMAIN_KEYS = ("type", "range", "step", "log", "choices", "special")


@dataclass
class Loaded:
    """A study file, loaded: the validated spec, its knobs, the file as written (`text`,
    stored with the study), the line of every key, and the deprecation notes."""

    spec: StudySpec
    knobs: list[Knob]
    path: Path
    text: str = ""
    lines: Lines = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Override:
    """A command-line option that sets one key of the study (`option` as typed, e.g.
    "--capacity"; `path` the key, e.g. ("objective",); `value` as the file would write it).
    With `create`, missing mappings on the way are created (`budget:` for --trials);
    without, the key's section must be in the file (`load:` for --load-tool)."""

    option: str
    path: tuple[str, ...]
    value: Any
    typed: str = ""  # the option's argument as given, for messages
    create: bool = False

    def shown(self) -> str:
        return f"{self.option} {shlex.quote(self.typed)}" if self.typed else self.option


def _apply_overrides(data: dict[str, Any], overrides: tuple[Override, ...],
                     name: str) -> dict[str, Any]:
    """The document with each override set (a copy); a section an override needs but the
    file lacks is a UserError naming the option."""
    if not overrides:
        return data
    data = copy.deepcopy(data)
    problems = []
    for o in overrides:
        node: Any = data
        for i, key in enumerate(o.path[:-1]):
            if not isinstance(node.get(key), dict):
                if o.create and node.get(key) is None:
                    node[key] = {}
                else:
                    section = ".".join(o.path[:i + 1])
                    problems.append(f"{o.option}: study {data.get('study')!r} has no "
                                    f"{section} section to set {'.'.join(o.path)} in")
                    break
            node = node[key]
        else:
            node[o.path[-1]] = copy.deepcopy(o.value)
    if problems:
        raise UserError(f"{name}: {len(problems)} problem(s) with the command line",
                        problems)
    return data


@dataclass
class Parsed:
    """A study file's checked spec, the line of every key, and its deprecation notes;
    unpacks as `spec, lines`."""

    spec: StudySpec
    lines: Lines
    notes: list[str]
    name: str = "<study>"  # as problems name it (with the overrides' options)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.spec, self.lines))


def read_study(path: str | Path) -> str:
    """The study file's text, read once within the limits (UserError otherwise)."""
    return yamlload.read_study_file(Path(path))


def load_study(path: str | Path, allow_inline_host_knobs: bool = False) -> Loaded:
    """Read, check and resolve a study file: the one way a file becomes a study."""
    p = Path(path)
    return load_text(read_study(p), str(p), base_dir=p.resolve().parent,
                     allow_inline_host_knobs=allow_inline_host_knobs, path=p)


def load_text(text: str, name: str = "<study>", *, base_dir: Path | None = None,
              allow_inline_host_knobs: bool = False, path: Path | None = None,
              overrides: tuple[Override, ...] = ()) -> Loaded:
    """`load_study` of a study file's text (`base_dir`: where its relative paths start;
    the working directory when None), with the command line's `overrides` set on it
    before any check."""
    from kvtune.knobs.resolve import resolve_knobs
    from kvtune.study.inline import check_inline_host_knobs
    from kvtune.targets import target_knobs

    parsed = parse_study(text, name, base_dir=base_dir, overrides=overrides)
    shown = parsed.name  # the file's name, with the overrides' options
    spec, lines = parsed.spec, parsed.lines
    notes = list(parsed.notes)
    if spec.target.config is not None:
        notes += _server_config(spec, lines, base_dir or Path.cwd(), shown)
    knobs = resolve_knobs(spec, lines, shown, target_knobs(spec.target.kind))
    problems = _knob_problems(spec, knobs, lines)
    if problems:
        raise UserError(f"{shown}: {len(problems)} problem(s) with knobs", problems)
    check_inline_host_knobs(spec, lines, allow_inline_host_knobs, shown)
    return Loaded(spec, knobs, path or Path(name), text, lines, notes)


def parse_study(text: str, name: str = "<study>", *, base_dir: Path | None = None,
                overrides: tuple[Override, ...] = ()) -> Parsed:
    """Steps 2–5: the spec of a study file's text, checked against the registries, without
    resolving its knobs (what `kvtune show` and `report` need); `overrides` set on the
    document first (a problem names the file with the options: "s.yaml (with --capacity
    ...)")."""
    data = yaml_data(text, name)
    lines: Lines = line_map(text)
    notes: list[str] = []
    data = _modernize(data, lines, notes)
    shown = name
    if overrides:
        shown = f"{name} (with {' '.join(o.shown() for o in overrides)})"
        data = _apply_overrides(data, overrides, shown)
        lines = LineMap(lines, {o.path: o.option for o in overrides})
    problems = _raw_registry_problems(data, lines)
    spec = parse_data(data, shown, lines, problems)
    problems = _registry_problems(spec, lines)
    problems += _resolve_paths(spec, lines, base_dir or Path.cwd(), notes)
    problems += _storage_place(spec, lines, base_dir or Path.cwd())
    if problems:
        raise UserError(f"{shown}: {len(problems)} problem(s) in the study file", problems)
    return Parsed(spec, lines, [f"{name}: {n}" for n in notes], shown)


def check_stored(data: dict[str, Any], name: str) -> StudySpec:
    """Steps 3–4 for a study file stored with a study (a results database is input too:
    `kvtune.study.stored`): the schema and the registries' checks of its target and load,
    every problem named by its key path. Nothing on this host is read (the paths it names
    were checked when it ran, and are checked again where they are read)."""
    from kvtune.targets import kinds, target_class

    target = data.get("target")
    if isinstance(target, dict) and target.get("kind") in kinds():
        # A stored study is the whole model, defaults included: another kind's keys are
        # there at their defaults, not written by anyone.
        own = target_class(str(target["kind"])).spec_keys
        data = {**data, "target": {k: v for k, v in target.items()
                                   if k not in _KIND_KEYS or k in own}}
    lines: Lines = {}

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if len(path) > 16:
            return
        lines[path] = 0  # every key path known, no line (where_in_file names the path)
        if isinstance(node, dict):
            for k, v in list(node.items())[:1000]:
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node[:1000]):
                walk(v, (*path, i))

    walk(data, ())
    problems = _raw_registry_problems(data, lines)
    spec = parse_data(data, name, lines, problems)
    problems = _registry_problems(spec, lines)
    if problems:
        raise UserError(f"{name}: {len(problems)} problem(s)", problems)
    return spec


# -- 2. old spellings ------------------------------------------------------------------------


def _modernize(data: dict[str, Any], lines: Lines, notes: list[str]) -> dict[str, Any]:
    """Old spellings in today's form, each with a note (they work for one more release)."""
    data = copy.deepcopy(data)
    obj = data.get("objective")
    if isinstance(obj, dict) and "also" in obj:
        also = obj.pop("also")
        if isinstance(also, list):
            data["objective"] = [obj, *also]
            notes.append(f"{where(('objective', 'also'), lines)}: objective.also is "
                         "deprecated; list the objectives: objective: [p99_us, ops_per_sec]")
        else:
            obj["also"] = also  # the schema says what is wrong with it
    objs = data.get("objective")
    for i, o in enumerate(objs if isinstance(objs, list) else [objs]):
        if isinstance(o, dict) and isinstance(o.get("direction"), str) \
                and isinstance(o.get("metric"), str):
            try:
                own = objective_direction(o["metric"])
            except KeyError:
                continue  # the schema names the unknown metric
            if o["direction"] == own:
                del o["direction"]
                loc = ("objective", "direction") if not isinstance(objs, list) else \
                    ("objective", i, "direction")
                notes.append(f"{where(loc, lines)}: direction is deprecated: {o['metric']} "
                             f"is always {own}d; leave it out")
    knobs = data.get("knobs")
    for i, k in enumerate(knobs if isinstance(knobs, list) else []):
        if not isinstance(k, dict):
            continue
        if isinstance(k.get("domain"), dict) and not any(x in k for x in _DOMAIN_KEYS):
            d = k.pop("domain")
            flat: dict[str, Any] = {}
            for key in ("type", "step", "log", "choices", "special"):
                if key in d:
                    flat[key] = d.pop(key)
            if "low" in d or "high" in d:
                flat["range"] = [d.pop("low", None), d.pop("high", None)]
            if d:
                flat["domain"] = d  # keys the schema will name as unknown
            k.update(flat)
            notes.append(f"{where(('knobs', i, 'domain'), lines)}: domain is deprecated; "
                         "give type, range, step, log, choices and special on the knob itself")
        rng = k.get("range")
        if isinstance(rng, list) and len(rng) == 2 and rng[0] == rng[1] \
                and k.get("default") == rng[0] and "applier" not in k:
            notes.append(f"{where(('knobs', i, 'range'), lines)}: range [{rng[0]}, "
                         f"{rng[1]}] with default {rng[0]} pins the knob; write fixed: {rng[0]}")
    return data


# -- 4. the registries -----------------------------------------------------------------------


def _raw_registry_problems(data: dict[str, Any], lines: Lines) -> list[str]:
    """The registered names, checked on the raw document: reported together with schema
    problems, in one list."""
    from kvtune.load import tools
    from kvtune.targets import kinds

    problems = []
    target = data.get("target")
    kind = target.get("kind") if isinstance(target, dict) else None
    if isinstance(kind, str) and kind not in kinds():
        problems.append(f"{where(('target', 'kind'), lines)}: unknown target kind {kind!r} "
                        f"(known: {', '.join(kinds())})")
    load = data.get("load")
    tool = load.get("tool") if isinstance(load, dict) else None
    if isinstance(tool, str) and tool not in tools():
        problems.append(f"{where(('load', 'tool'), lines)}: unknown load tool {tool!r} "
                        f"(known: {', '.join(tools())})")
    return problems


def _registry_problems(spec: StudySpec, lines: Lines) -> list[str]:
    """What each registered target and load driver says of its own part of the file."""
    from kvtune.load import driver_class
    from kvtune.targets import target_class

    problems = []
    tc = target_class(spec.target.kind)
    try:
        tc.check_args(spec.target.args)
    except ValueError as e:
        problems.append(f"{where(('target', 'args'), lines)}: {e}")
    for key in _KIND_KEYS:
        if key in spec.target.model_fields_set and key not in tc.spec_keys:
            problems.append(f"{where(('target', key), lines)}: {key} is not a key of the "
                            f"{spec.target.kind} target (it is the synthetic target's)")
    if spec.capacity is not None and not tc.runs_server and not getattr(tc, "searches", False):
        problems.append(f"{where(('objective',), lines)}: the {spec.target.kind} target "
                        "cannot measure capacity (a knee search over open-loop rates)")
    if tc.runs_server and spec.load is None:
        problems.append(f"{where(('target',), lines)}: a {spec.target.kind} target needs a "
                        "load section")
    if spec.load is not None:
        dc = driver_class(spec.load.tool)
        try:
            dc.check_extra_args(spec.load.extra_args)
        except ValueError as e:
            problems.append(f"{where(('load', 'extra_args'), lines)}: {e}")
        top = max(parse_cpus(spec.load.cpus)) if spec.load.cpus is not None else 0
        if top > dc.max_cpu:
            problems.append(f"{where(('load', 'cpus'), lines)}: CPU {top} is beyond what "
                            f"{spec.load.tool} can pin to (CPUs 0 to {dc.max_cpu})")
        if spec.load.host is not None and not dc.remote:
            problems.append(f"{where(('load', 'host'), lines)}: {spec.load.tool} cannot run "
                            "on a load host (kvload can)")
        if spec.capacity is not None and not dc.searches:
            problems.append(f"{where(('load', 'tool'), lines)}: {spec.load.tool} cannot "
                            "measure capacity (a knee search over open-loop rates); kvload "
                            "can")
    return problems


# -- 5. paths --------------------------------------------------------------------------------


def _resolve_paths(spec: StudySpec, lines: Lines, base: Path, notes: list[str]) -> list[str]:
    """`load.workload_file` relative to the study file (an old study whose file is found
    only from the working directory works, with a note); the file itself is checked as
    untrusted input."""
    from kvtune.safety.workload import check_workload_file

    if spec.load is None or spec.load.workload_file is None:
        return []
    at = where(("load", "workload_file"), lines)
    given = Path(spec.load.workload_file)
    path = given if given.is_absolute() else base / given
    if not given.is_absolute() and not path.exists() and given.exists() \
            and given.resolve() != path.resolve():
        notes.append(f"{at}: {given} is found from the working directory, not beside the "
                     "study file; paths in a study file are relative to the study file")
        path = given.resolve()
    try:
        doc = check_workload_file(str(path))
    except ValueError as e:
        return [f"{at}: {e}"]
    spec.load.set_workload_document(str(path), doc)  # read once: what the run uses
    return []


def _storage_place(spec: StudySpec, lines: Lines, base: Path) -> list[str]:
    """A study file's `storage` creates a SQLite database only in the results directory,
    beside the study file or in the working directory (kvtune.safety.storage); an
    existing database anywhere else that is allowed is used as it is."""
    from kvtune.safety.storage import check_url

    if spec.storage is None:
        return []
    try:
        check_url(spec.storage, places=(base, Path.cwd()))
    except ValueError as e:
        return [f"{where(('storage',), lines)}: {e}"]
    return []


def _server_config(spec: StudySpec, lines: Lines, base: Path, name: str) -> list[str]:
    """`target.config`: the operator's server configuration becomes the baseline (each
    setting placed by targets/server_config.py: replaced by kvtune's placement, a searched
    knob's default, a fixed argument, or refused). Returns the notes `kvtune check` shows;
    UserError (exit 2) naming each refused setting, before anything runs."""
    from kvtune.knobs import catalog
    from kvtune.targets import host_context, target_class
    from kvtune.targets.server_config import place

    at = where(("target", "config"), lines)
    given = Path(spec.target.config or "")
    path = given if given.is_absolute() else base / given
    names = [e if isinstance(e, str) else e.name for e in spec.knobs]
    study_knobs = {n: k for n in names if (k := catalog.lookup(n)) is not None}
    cfg = place(spec.target.kind, path, target_class(spec.target.kind), study_knobs,
                host_context())
    if cfg.problems:
        raise UserError(f"{name}: {at}: {len(cfg.problems)} setting(s) of {path} kvtune "
                        "cannot run (nothing was started)", cfg.problems)
    spec.target.config = str(path)
    spec.target.args = [*cfg.args, *spec.target.args]
    notes = cfg.notes()
    for i, entry in enumerate(spec.knobs):
        kname = entry if isinstance(entry, str) else entry.name
        if kname not in cfg.defaults:
            continue
        value = cfg.defaults[kname]
        if isinstance(entry, str):
            spec.knobs[i] = KnobSpec(name=kname, default=value)
        elif entry.default is None and entry.fixed is None:
            spec.knobs[i] = entry.model_copy(update={"default": value})
        else:
            notes.append(f"{where(('knobs', i), lines)}: the study file's "
                         f"{'fixed' if entry.fixed is not None else 'default'} for {kname} "
                         f"wins over target.config's {value!r}")
    return notes


# -- 6. knobs against the rest ---------------------------------------------------------------


def _knob_problems(spec: StudySpec, knobs: list[Knob], lines: Lines) -> list[str]:
    from kvtune.safety.values import check_inline_values
    from kvtune.targets import target_class

    tc = target_class(spec.target.kind)
    problems = []
    index = {(e if isinstance(e, str) else e.name): i for i, e in enumerate(spec.knobs)}
    for i, entry in enumerate(spec.knobs):
        if isinstance(entry, KnobSpec) and entry.applier is not None:
            try:
                check_inline_values(entry, spec.target.kind, tc)
            except ValueError as e:
                problems.append(f"{where(('knobs', i, 'applier'), lines)}: {e}")
    set_by_args = tc.arg_names(spec.target.args) if spec.target.args else {}
    for knob in knobs:
        for setting in knob.applier.sets():
            words = set_by_args.get(tc.setting_name(setting))
            if words is None:
                continue
            at = where(("knobs", index[knob.name]), lines) if knob.name in index else \
                f"preset {spec.preset}"
            problems.append(f"{at}: knob {knob.name} sets {setting}, and target.args sets it "
                            f"too ({words}, {where(('target', 'args'), lines)}): set it in "
                            "one place (a knob's fixed: pins it)")
    if spec.sampler == "grid" and knobs and spec.budget.trials is not None:
        size = _grid_size(knobs)
        if size > spec.budget.trials:
            problems.append(f"{where(('sampler',), lines)}: the grid of {len(knobs)} knob(s) "
                            f"has {present.figure(size)} points and budget.trials is "
                            f"{spec.budget.trials}: "
                            "raise the budget to the grid's size, narrow the knobs, or use "
                            "sampler: tpe")
    return problems


def _grid_size(knobs: list[Knob]) -> int:
    from kvtune.space import GRID_POINTS

    return math.prod(len(k.domain.grid(GRID_POINTS)) for k in knobs)
