"""Export: ready-to-use files for a study's recommended configuration, each with a
rollback. One module per format (`sysctl`, `tuned`, `memcached`, `redis`, `systemd`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtune.errors import KvtuneError, UserError
from kvtune.export.base import Exporter, ExportFile, Recommendation
from kvtune.export.memcached import MemcachedExporter
from kvtune.export.redis import RedisExporter
from kvtune.export.sysctl import SysctlExporter
from kvtune.export.systemd import SystemdExporter
from kvtune.export.tuned import TunedExporter

# The one table of export formats, by name (`--format`).
EXPORTERS: dict[str, Exporter] = {}


def register(exporter: Exporter) -> None:
    """Add an export format (replacing one of the same name)."""
    EXPORTERS[exporter.name] = exporter


for _e in (SysctlExporter(), TunedExporter(), MemcachedExporter(), RedisExporter(),
           SystemdExporter()):
    register(_e)

# Never write into the live configuration of the host: a person installs the files.
FORBIDDEN_ROOTS = (Path("/etc"), Path("/proc"), Path("/sys"), Path("/usr"), Path("/boot"))

__all__ = ["EXPORTERS", "ExportFile", "Exporter", "NoRecommendation", "Recommendation",
           "recommendation", "register", "write"]


class NoRecommendation(KvtuneError):
    """The study has no significant recommendation (exit code 1)."""

    exit_code = 1


def recommendation(store: Any, name: str, best_in_search: bool = False) -> Recommendation:
    """The confirmed recommendation of study `name`, or (with `best_in_search`) the best
    feasible trial of the search. Raises NoRecommendation when there is none."""
    import optuna

    from kvtune.summary import collect

    data = collect(store, name)
    study = optuna.load_study(study_name=name, storage=store.storage)
    spec = study.user_attrs.get("spec", {})
    target = spec.get("target", {}).get("kind")
    conf = data.get("confirmation")
    baseline: dict[str, Any] = dict(study.user_attrs.get("baseline") or {})
    if conf and conf.get("baseline", {}).get("config"):
        baseline = dict(conf["baseline"]["config"])
    if conf and conf.get("recommended"):
        rec = conf["recommended"]
        return Recommendation(name, target, dict(rec["config"]), baseline,
                              f"confirmed {conf.get('verdict', rec.get('name', ''))}")
    why = (f"the confirmation found {conf.get('verdict')}" if conf else
           "the study has no confirmation yet (`kvtune tune` runs it at the end)")
    if not best_in_search:
        raise NoRecommendation(f"study {name!r} has no significant recommendation: {why}. "
                               "Nothing was exported; --best-in-search exports the best "
                               "feasible trial of the search instead (unconfirmed).")
    best = data.get("best")
    if best is None:
        raise NoRecommendation(f"study {name!r} has no feasible trial to export ({why})")
    if not baseline and data.get("baseline"):
        baseline = dict(data["baseline"]["config"])
    return Recommendation(name, target, dict(best["config"]), baseline,
                          f"best feasible trial of the search (trial {best['number']}), NOT "
                          f"confirmed: {why}")


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
    unknown = [f for f in formats if f not in EXPORTERS]
    if unknown:
        raise UserError(f"--format: unknown format {', '.join(unknown)}; known: "
                        f"{', '.join(EXPORTERS)}")
    from kvtune.knobs.catalog import check_rules

    # The rules between knobs (-L needs THP, ...) refuse a configuration that cannot run.
    broken = check_rules(rec.config, rec.ctx)
    if broken:
        raise UserError(f"the configuration of study {rec.study!r} is not exported: {broken}")
    out_dir = check_out_dir(out_dir)
    made: list[tuple[str, ExportFile]] = []
    for fmt in formats:
        for f in EXPORTERS[fmt].files(rec):
            for rel, text in ((f.path, f.text), (f.rollback_path, f.rollback_text)):
                p = out_dir / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text)
            made.append((fmt, f))
    return made
