"""Export: ready-to-use files for a study's measured configuration, with rollbacks under
rollback/ (see base.py). One module per format (`sysctl`, `tuned`, `systemd`, and each server
kind's from its folder), registered in one table."""

from __future__ import annotations

import math
import re
import stat
from pathlib import Path
from typing import Any

from kvtune import kind_registry as kinds
from kvtune import present, roots
from kvtune.documents import Ablation, Candidate, Confirmation
from kvtune.errors import KvtuneError, UserError
from kvtune.export.base import Exporter, ExportFile, Recommendation
from kvtune.export.sysctl import SysctlExporter
from kvtune.export.systemd import SystemdExporter
from kvtune.export.tuned import TunedExporter
from kvtune.knobs.knob import Knob
from kvtune.safety.files import write_file

# The export formats registered by name (`--format`), beside the built-in ones.
_REGISTERED: dict[str, Exporter] = {}
_BUILT_IN: dict[str, Exporter] = {}


def register(exporter: Exporter) -> None:
    """Add an export format (replacing one of the same name)."""
    _REGISTERED[exporter.name] = exporter


def exporters() -> dict[str, Exporter]:
    """The one table of export formats, by name: sysctl, tuned, each server kind's (from
    its folder), systemd, then the registered ones. The kinds' are found at the first
    lookup rather than at import, so that a kind's export module may be imported before
    this package without a circle."""
    if not _BUILT_IN:
        found = (SysctlExporter(), TunedExporter(),
                 *(e for kind in kinds.every() for e in kind.exporters()), SystemdExporter())
        _BUILT_IN.update((e.name, e) for e in found)
    return {**_BUILT_IN, **_REGISTERED}

# Never write into the live configuration of the host: a person installs the files.
FORBIDDEN_ROOTS = tuple(Path(r) for r in (*roots.KERNEL_TREES, *roots.SYSTEM_TREES))

__all__ = ["ExportFile", "Exporter", "NoRecommendation", "Recommendation",
           "exporters", "recommendation", "register", "warnings", "with_content", "write"]


class NoRecommendation(KvtuneError):
    """The study has no significant recommendation (exit code 1)."""

    exit_code = 1


def _gain(conf: Confirmation, rec: Candidate) -> str:
    """The confirmed gain with its CI, in one phrase."""
    if rec.text:  # every trade-off and unsettled constraint named (issue 16)
        return f"confirmed against the baseline: {rec.text}"
    comp = rec.comparison
    if comp is None or comp.change is None:
        return conf.verdict or rec.label
    # The change and its interval formatted together (present.with_interval).
    point, span = present.with_interval(comp.change, comp.change_ci_low, comp.change_ci_high)
    return (f"{rec.name or 'the recommendation'} confirmed: {conf.metric or 'objective'} "
            f"{point} (95% CI {span or present.MISSING}) against the baseline")


def _operator_config(spec: dict[str, Any]) -> tuple[Path, str] | None:
    """The study's target.config and its text when it is on this host in a form the server
    exporters merge into (a redis.conf, or Debian's one-option-per-line memcached.conf),
    checked as `--from` is (the stored study may come from a shared storage)."""
    from kvtune.targets.server_config import check_config

    config = (spec.get("target") or {}).get("config")
    if not config or not Path(config).is_file():
        return None
    try:  # RHEL's /etc/sysconfig/memcached is not the Debian form written: not merged
        return Path(config), check_config((spec.get("target") or {}).get("kind"),
                                          Path(config), "target.config")
    except UserError:
        return None


def recommendation(store: Any, name: str, best_in_search: bool = False, minimal: bool = False,
                   previous: Path | None = None, tuned_include: str | None = None,
                   trial: int | None = None, full: bool = False,
                   verb: str = "export") -> Recommendation:
    """The recommendation of study `name`: the one the ablation chose (the changes that
    carry the gain alone, measured against the full confirmed configuration, or the full
    one when it was significantly better; `ablation.choose`), else the confirmed one; with
    `full`, the confirmed configuration whole; or (with `best_in_search`) the best
    feasible trial of the search; with `minimal`, the ablation's minimal configuration
    (only the changes that carry the gain). Raises NoRecommendation when there is none."""
    from kvtune.study.result import collect

    data = collect(store, name)
    if "trials" not in data:  # a study that only ran `kvtune sweep`: nothing was tuned
        raise NoRecommendation(f"study {name!r} has only sweeps (kvtune sweep measures, it "
                               "recommends nothing): nothing to export or verify; `kvtune "
                               "report` shows the sweeps, `kvtune tune` makes a "
                               "recommendation")
    from kvtune.study.stored import stored_spec

    study = store.load_study(name)
    # The study file stored with the study, checked as a study file is (a results database
    # is input: kvtune.study.stored), and the workload the study measured, as its run
    # described it (a workload model's own mix, keys and sizes, which the stored
    # load.workload defaults do not say).
    stored = stored_spec(study.user_attrs, name, store.url)
    spec, workload_text = dict(stored.data), stored.workload_text
    target = (spec.get("target") or {}).get("kind")
    conf = store.document(name, Confirmation)
    abl = store.document(name, Ablation)
    baseline: dict[str, Any] = dict(study.user_attrs.get("baseline") or {})
    if conf is not None and conf.baseline is not None and conf.baseline.config:
        baseline = dict(conf.baseline.config)
    previous_text = None
    if previous is not None:  # it must parse as the target's configuration file
        from kvtune.targets.server_config import check_config

        previous_text = check_config(target, previous, "--from")
    else:  # the operator's own file (target.config) is what is merged into
        found = _operator_config(spec)
        if found is not None:
            previous, previous_text = found
    if trial is not None:
        # The user's pick (a Pareto study's front, or another confirmed candidate).
        rows = conf.candidates if conf is not None else []
        row = conf.candidate(trial) if conf is not None else None
        if row is None or not row.significant:
            ok = [r.trial for r in rows if r.significant]
            raise NoRecommendation(
                f"--trial {trial}: not a confirmed candidate of study {name!r} (confirmed: "
                f"{', '.join(map(str, ok)) or 'none'}); `kvtune show` lists them")
        out = Recommendation(name, target, dict(row.config), baseline,
                             f"picked from the confirmation: {row.text or row.label}",
                             spec=spec, workload_text=workload_text, previous=previous,
                             previous_text=previous_text, tuned_include=tuned_include)
        check_domains(out, study.user_attrs.get("space"))
        return out
    if conf is not None and conf.recommended is not None:
        rec = conf.recommended
        config, source = dict(rec.config), _gain(conf, rec)
        choice = abl.chosen if abl is not None else None
        head = data.get("headline") or {}
        # The study's headline decides what ships by default (kvtune.study.headline): the
        # smaller change only when its own comparison with the defaults was significant.
        if choice and head.get("chosen") == "minimal" and not full and not minimal:
            config = {**baseline, **dict(choice.config)}
            left = "; ".join(f"{x.knob} {present.fmt(x.recommended)} (share "
                             + present.share(x.share) + ")" for x in choice.left_out)
            source = (f"{head.get('text')} (the ablation measured these changes alone "
                      "against the defaults and the whole)"
                      + (f". Left out: {left}" if left else ""))
        elif choice and choice.chosen == "minimal" and head.get("why") and not minimal:
            # The ablation's smaller change was not shown better alone: the whole ships,
            # and the header says why (the headline's words).
            source = f"{source}. {head['why']}"
        if minimal:
            if abl is None or abl.skipped or not abl.minimal_config:
                why = (abl.skipped if abl is not None else None) or "the study has no " \
                    "ablation (kvtune tune runs it after the confirmation)"
                raise NoRecommendation(f"--minimal: study {name!r} has no minimal "
                                       f"configuration: {why}")
            config = dict(abl.minimal_config)
            only = ', '.join(abl.minimal_changes) or 'no change'
            alone = choice.minimal_gain if choice is not None and choice.measured \
                and dict(choice.changes) == dict(abl.minimal_changes) else None
            if alone is not None and alone.change is not None:
                # The ablation measured it alone against the defaults: its own change,
                # as the headline quotes it (never the whole's gain as the smaller one's).
                measured = present.describe_change(
                    alone.metric or str(conf.metric or ""), alone.change, alone.direction,
                    alone.ci, alone.significant)
                source = (f"MINIMAL configuration from the ablation: only {only}, measured "
                          f"alone against the defaults: {measured} (the whole confirmed "
                          f"configuration: {source})")
            else:
                source += (f" — MINIMAL configuration from the ablation: only {only} "
                           "(derived, not measured on its own)")
        out = Recommendation(name, target, config, baseline, source, spec=spec,
                             workload_text=workload_text, previous=previous,
                             previous_text=previous_text, tuned_include=tuned_include)
        check_domains(out, study.user_attrs.get("space"))
        return out
    verdict = conf.verdict if conf is not None else ""
    why = (f"the confirmation's verdict: {verdict}" if conf is not None else
           "the study has no confirmation yet (`kvtune tune` runs it at the end)")
    if not best_in_search:
        done = "Nothing was exported" if verb == "export" else f"Nothing to {verb}"
        head = str((data.get("headline") or {}).get("text") or "")
        # The headline says what to do: keep the defaults, or measure more.
        if conf is not None and head:
            raise NoRecommendation(f"study {name!r}: {head} {done}.")
        raise NoRecommendation(f"study {name!r} has no significant recommendation: {why}. "
                               f"{done}; with --best-in-search, {verb} works on the best "
                               "feasible trial of the search instead (unconfirmed).")
    if minimal or full:
        raise NoRecommendation(f"--{'minimal' if minimal else 'full'} needs a confirmed "
                               "recommendation")
    best = data.get("best")
    if best is None:
        raise NoRecommendation(f"study {name!r} has no feasible trial to export ({why})")
    if not baseline and data.get("baseline"):
        baseline = dict(data["baseline"]["config"])
    out = Recommendation(name, target, dict(best["config"]), baseline,
                         f"best feasible trial of the search (trial {best['number']}), NOT "
                         f"confirmed: {why}", spec=spec, workload_text=workload_text,
                         previous=previous, previous_text=previous_text,
                         tuned_include=tuned_include)
    check_domains(out, study.user_attrs.get("space"))
    return out


def check_domains(rec: Recommendation, space: dict[str, Any] | None) -> None:
    """Every value lies in its knob's domain as the study searched it (the stored space,
    which holds the baseline's special values): anything else is not what was measured."""
    from kvtune.space import stored_domains

    domains = stored_domains(space, f"study {rec.study!r}")
    bad = [f"{k}={v!r} is outside {domains[k].describe()}" for k, v in rec.config.items()
           if k in domains and not domains[k].contains(v)]
    if bad:
        raise UserError(f"study {rec.study!r}: the configuration does not fit the study's "
                        "knob space", bad)


# A value a host or a server had that the catalog's domain does not list (a baseline
# outside the searched range): one word, nothing a configuration line could split on.
_WORD = re.compile(r"^[A-Za-z0-9_.:+\-]{0,128}$")
_STUDY = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


def _fits(knob: Knob, value: Any, recommended: bool) -> bool:
    from kvtune.cpulist import parse_cpus

    if value is None or knob.domain.contains(value):
        return True
    if knob.scope == "placement" and isinstance(value, str):
        try:  # a CPU list measured on another host's CPUs
            parse_cpus(value)
            return True
        except ValueError:
            return False
    if recommended:
        return False
    if isinstance(value, bool):
        return knob.domain.type == "bool"
    if isinstance(value, int | float):
        return knob.domain.type in ("int", "float") and math.isfinite(value) and (
            knob.domain.type == "float" or float(value).is_integer())
    return isinstance(value, str) and bool(_WORD.fullmatch(value))


def check_values(rec: Recommendation) -> None:
    """What an export writes is checked against the knob catalog, wherever the
    configuration came from (a results database, a library, a profile): every recommended
    value lies in its knob's catalog domain (a placement's CPU list in kvtune's CPU-list
    grammar), every baseline value written to a rollback is one a host could have had (a
    value of the domain, a finite number of the knob's type, or one word of letters,
    digits and `_.:+-`), the study's name is a study name, its fixed server arguments pass
    the target's own check and its CPUs the CPU-list grammar. UserError (exit 2) naming
    each offending knob; nothing is written."""
    from kvtune.cpulist import parse_cpus

    bad = []
    if not _STUDY.fullmatch(rec.study):
        bad.append("the study's name is not a study name (letters, digits, _ . -)")
    for knob, value, base in rec.knobs():
        if not _fits(knob, value, True):
            bad.append(f"{knob.name}: the value is outside {knob.domain.describe()}")
        if not _fits(knob, base, False):
            bad.append(f"{knob.name}: the baseline value is outside "
                       f"{knob.domain.describe()}")
    if rec.target_args:
        from kvtune.targets import kinds as target_kinds
        from kvtune.targets import target_class

        if rec.target not in target_kinds():
            bad.append("target.args: the study names no target kind kvtune knows")
        else:
            try:
                target_class(rec.target).check_args(rec.target_args)
            except ValueError as e:
                bad.append(f"target.args: {e}")
    if rec.target_cpus:
        try:
            parse_cpus(rec.target_cpus)
        except ValueError as e:
            bad.append(f"target.cpus: {e}")
    if bad:
        raise UserError(f"{rec.study if _STUDY.fullmatch(rec.study) else 'the study'}: the "
                        "configuration to export does not pass the knob catalog's checks "
                        "(nothing was written)", bad)


# Every character an installable file may hold besides printable text: newline and tab.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def with_content(rec: Recommendation) -> list[str]:
    """The formats that have something to export for `rec`."""
    return [name for name, e in exporters().items() if e.files(rec)]


def warnings(made: list[tuple[str, ExportFile]]) -> list[str]:
    """Warnings about files that would fight each other once installed together (a
    sysctl.d file over a TuneD profile's [sysctl] with reapply_sysctl)."""
    fmts = {m for m, _ in made}
    return [w for m, f in made for w in f.warnings if m != "tuned" or "sysctl" in fmts]


def check_out_dir(out_dir: Path) -> Path:
    real = out_dir.resolve()
    for root in FORBIDDEN_ROOTS:
        if real == root or root in real.parents:
            raise UserError(f"-o {out_dir}: kvtune export never writes under {root}; export "
                            "to a directory of your own and install the files from there")
    return real


def write(rec: Recommendation, formats: list[str], out_dir: Path) -> list[tuple[str,
                                                                              ExportFile]]:
    """Write the files of each format under `out_dir`; returns (format, file) pairs."""
    table = exporters()
    unknown = [f for f in formats if f not in table]
    if unknown:
        raise UserError(f"--format: unknown format {', '.join(unknown)}; known: "
                        f"{', '.join(table)}")
    from kvtune.knobs.catalog import check_rules

    # The rules between knobs (-L needs THP, ...) refuse a configuration that cannot run.
    check_values(rec)  # every value against the knob catalog, wherever it came from
    broken = check_rules(rec.config, rec.ctx)
    if broken:
        raise UserError(f"the configuration of study {rec.study!r} is not exported: {broken}")
    out_dir = check_out_dir(out_dir)
    files = [(fmt, f) for fmt in formats for f in table[fmt].files(rec)]
    if not files:
        return []
    for _, f in files:  # the last guard: no control character reaches an installable file
        for rel, text in ((f.path, f.text), (f.rollback_path, f.rollback_text)):
            if text is not None and (_CONTROL.search(text) or (rel and _CONTROL.search(rel))):
                raise UserError(f"export {rel}: a control character in what kvtune would "
                                "write (nothing was written)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"-o {out_dir}: {e.strerror}") from None
    # A file merged from the host's config (--from) is as private as that file was.
    mode = 0o644
    if rec.previous is not None and not rec.previous.stat().st_mode & stat.S_IROTH:
        mode = 0o600
    made: list[tuple[str, ExportFile]] = []
    for fmt, f in files:
        for rel, text in ((f.path, f.text), (f.rollback_path, f.rollback_text)):
            if rel is None or text is None:
                continue
            # No link followed below out_dir, atomic, never over an input
            # (kvtune.safety.files).
            write_file(rel, text, base=out_dir, mode=mode, what="export",
                       create_dirs=True)
        made.append((fmt, f))
    return made
