"""The store: Optuna's RDB storage for trials, plus kvtune's own tables in the same database
for every raw repetition and the study's results (noise floor, drift, confirmation).

Any SQLAlchemy URL works: a SQLite file by default, PostgreSQL when several workers share a
study. Nothing measured is ever lost: a repetition is written as soon as it ends.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import optuna
import sqlalchemy as sa

from kvtune import documents, present
from kvtune.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Container, Iterator

    from optuna.study._frozen import FrozenStudy
    from optuna.trial import TrialState

    from kvtune.spec import StudySpec

D = TypeVar("D", bound=documents.Document)

_META = sa.MetaData()
REPETITIONS = sa.Table(
    "kvtune_repetitions", _META,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(256), nullable=False, index=True),
    sa.Column("kind", sa.String(32), nullable=False),  # trial, baseline, drift, confirm, run
    sa.Column("trial_number", sa.Integer, nullable=True),
    sa.Column("config_key", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # ok, flagged, failed
    sa.Column("value", sa.Float, nullable=True),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("metrics", sa.Text, nullable=False),
    sa.Column("raw", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)
RESULTS = sa.Table(
    "kvtune_results", _META,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(256), nullable=False, index=True),
    sa.Column("key", sa.String(64), nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)


_CONTROLS = {c: "\ufffd" for c in (*range(0x20), *range(0x7f, 0xa0)) if chr(c) not in "\n\t"}


def _clean(obj: Any) -> Any:
    """JSON without NaN/Infinity (they become null), so every reader can parse it, and
    text without control characters other than a newline or a tab (a server's stderr can
    hold escape sequences: stored as U+FFFD, it passes `check_document` when read back)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, str):
        return obj.translate(_CONTROLS)
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(_clean(obj), default=str, allow_nan=False)


class Store:
    """The study's database (its URL checked by `kvtune.safety.storage`; without `create`,
    as the commands that read results open it, a SQLite file that is not there is refused,
    never created: `results_store`). `heartbeat`: Optuna's heartbeats on (every `kvtune tune`,
    alone or as a fleet worker: a live trial is told from a dead one by its heartbeat);
    the storage is created under a lock either way (`kvtune.fleet.open_storage`), so that
    processes opening an empty database together never race on the schema. `tag` is added
    to every repetition's raw record (a run's worker and host fingerprint)."""

    def __init__(self, url: str, heartbeat: bool = False, *, create: bool = True) -> None:
        from kvtune.fleet.claims import open_storage
        from kvtune.safety.storage import mask, prepare

        self.url = mask(url)  # for people: messages, `show`, reports (never the password)
        try:  # the one check of a URL (kvtune.safety.storage); only a study creates one
            prepare(url, create=create)
        except ValueError as e:
            raise UserError(f"storage {self.url!r}: {e}") from None
        if not create:  # opening creates the schema: a reader opens only a filled database
            _holds_results(url, self.url)
        storage = open_storage(url, heartbeat=heartbeat, extra_tables=_META,
                               storage_class=CheckedStorage)
        if isinstance(storage, CheckedStorage):
            storage.where = self.url
        self.storage = storage
        self.engine = self.storage.engine
        if url.startswith("sqlite:///"):  # no report or export may replace it
            from kvtune.safety.files import note_input

            note_input(url.removeprefix("sqlite:///").split("?", 1)[0])
        self.tag: dict[str, Any] = {}
        # A store that only reads (`results_store`) loads each study once (`load_study`).
        self._studies: dict[str, optuna.Study] | None = None if create else {}

    def add_repetition(self, study: str, kind: str, trial_number: int | None,
                       config_key: str, status: str, value: float | None,
                       params: dict[str, Any], metrics: dict[str, Any],
                       raw: dict[str, Any]) -> None:
        with self.engine.begin() as c:
            c.execute(REPETITIONS.insert().values(
                study=study, kind=kind, trial_number=trial_number, config_key=config_key,
                status=status, value=None if value is None or math.isnan(value) else value,
                params=dumps(params), metrics=dumps(metrics),
                raw=dumps({**raw, "fleet": self.tag} if self.tag else raw),
                created=time.time()))

    def repetitions(self, study: str, kind: str | None = None,
                    trial_number: int | None = None) -> list[dict[str, Any]]:
        q = sa.select(REPETITIONS).where(REPETITIONS.c.study == study)
        if kind is not None:
            q = q.where(REPETITIONS.c.kind == kind)
        if trial_number is not None:
            q = q.where(REPETITIONS.c.trial_number == trial_number)
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(REPETITIONS.c.id)).mappings().all()
        out = []
        for r in rows:
            d = dict(r)
            where = f"study {study!r} in {self.url}, repetition #{d.get('id')}"
            for k in ("params", "metrics", "raw"):
                d[k] = _loads(d[k], where)
            out.append(check_repetition(d, where))
        return out

    def put_result(self, study: str, key: str, data: Any) -> None:
        """Store a result as its typed document (`kvtune.documents`: a mapping a phase
        built is validated as its key's type first), written with its schema version; it
        gets the run's host fingerprint (`tag`) when it has none, so that each
        fingerprint's noise floor and confirmation can be told apart."""
        doc = documents.build(key, data, f"result {key!r} of study {study!r}")
        fp = self.tag.get("fingerprint")
        if isinstance(doc, documents.Document):
            if fp and doc.fingerprint is None:
                doc = doc.model_copy(update={"fingerprint": fp})
            data = doc.stored()
        with self.engine.begin() as c:
            c.execute(RESULTS.insert().values(study=study, key=key, data=dumps(data),
                                              created=time.time()))

    def results(self, study: str, key: str) -> list[Any]:
        """Every result `key` of `study`, oldest first, as mappings in the current layout
        (each read through its typed document: `documents_in`)."""
        return results_in(self.engine, study, key)

    def last_result(self, study: str, key: str, fingerprint: str | None = None) -> Any | None:
        return latest(self.results(study, key), fingerprint)

    def documents(self, study: str, key: str) -> list[Any]:
        """Every result `key` of `study`, oldest first, as typed documents."""
        return documents_in(self.engine, study, key)

    def document(self, study: str, kind: type[D], fingerprint: str | None = None,
                 key: str | None = None) -> D | None:
        """The latest result of `kind` (of `fingerprint`'s host, when given) as its typed
        document, or None."""
        return documents.latest([d for d in documents_in(self.engine, study, key or kind.KEY)
                                 if isinstance(d, kind)], fingerprint)

    def load_study(self, name: str) -> optuna.Study:
        """Optuna's study `name` (KeyError when the database holds none). A store that only
        reads (`results_store`) loads each study once: the parts of a command read it
        through one study and Optuna's cache of its finished trials (`kvtune show` read
        every trial from the database twice, for its table and for its analysis)."""
        if self._studies is None:
            return optuna.load_study(study_name=name, storage=self.storage)
        study = self._studies.get(name)
        if study is None:
            study = optuna.load_study(study_name=name, storage=self.storage)
            self._studies[name] = study
        return study

    def study_names(self) -> list[str]:
        return [s.study_name for s in optuna.get_all_study_summaries(self.storage)]


def results_in(engine: sa.Engine, study: str, key: str) -> list[Any]:
    """Every result `key` of `study` in the database of `engine`, oldest first, as
    mappings in the current layout (`documents_in`)."""
    return [d.stored() if isinstance(d, documents.Document) else d
            for d in documents_in(engine, study, key)]


def documents_in(engine: sa.Engine, study: str, key: str) -> list[Any]:
    """Every result `key` of `study` in the database of `engine`, oldest first, each
    checked as input (`check_document`: a field of the wrong type is refused, UserError,
    naming the study, the result and the field) and read as its typed document
    (`kvtune.documents.read`: an older layout upgraded, the fields' shapes validated)."""
    from kvtune.safety.storage import mask

    q = (sa.select(RESULTS.c.id, RESULTS.c.data).where(RESULTS.c.study == study)
         .where(RESULTS.c.key == key).order_by(RESULTS.c.id))
    with engine.connect() as c:
        rows = list(c.execute(q))
    url = mask(engine.url.render_as_string(hide_password=True))
    out = []
    for rid, data in rows:
        where = f"study {study!r} in {url}, result {key!r} #{rid}"
        out.append(documents.read(key, check_document(_loads(data, where), where), where))
    return out


def _loads(text: Any, where: str) -> Any:
    """A stored JSON text, or UserError naming `where` (storage is input)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raise UserError(f"{where}: the stored document is not JSON (the results database "
                        "was changed?); nothing was written") from None


def latest(results: list[Any], fingerprint: str | None = None) -> Any | None:
    """The latest of `results`; with `fingerprint`, the latest of that host fingerprint
    (results stored before fingerprints were recorded count for every host)."""
    if fingerprint is not None:
        results = [r for r in results if not isinstance(r, dict)
                   or r.get("fingerprint", fingerprint) == fingerprint]
    return results[-1] if results else None


def config_key(params: dict[str, Any]) -> str:
    """A stable short key for a configuration (knob name → value)."""
    import hashlib

    text = json.dumps(_clean(params), sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _holds_results(url: str, shown: str) -> None:
    """UserError unless the database at `url` holds Optuna's tables: opening one without
    them (an empty SQLite file, an empty PostgreSQL database) would create them."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        there = sa.inspect(engine).has_table("studies")
    except sa.exc.SQLAlchemyError as e:
        from sqlalchemy.engine import make_url

        why = str(getattr(e, "orig", None) or e).splitlines()[0][:300]
        password = make_url(url).password
        if password:
            why = why.replace(str(password), "***")
        raise UserError(f"storage {shown!r} cannot be opened: {why}") from None
    finally:
        engine.dispose()
    if not there:
        raise UserError(f"storage {shown!r} holds no results (no study was ever stored "
                        "there); this command reads results and creates none")


def results_store(url: str) -> Store:
    """The store of a command that only reads results (show, report, export, verify,
    predict): the URL checked like any other, and a database that is not there is said to
    be missing (UserError, exit 2), never created."""
    return Store(url, create=False)


def open_store(spec: StudySpec, base: Path | None = None, heartbeat: bool = False) -> Store:
    """The study's store: its `storage` URL, else kvtune's default BASE/results/STUDY.db
    (BASE: the working directory unless given)."""
    if spec.storage is None:
        (base or Path.cwd()).joinpath("results").mkdir(parents=True, exist_ok=True)
    return Store(spec.storage_url(base or Path.cwd()), heartbeat=heartbeat)


# -- stored documents are input -------------------------------------------------------------
#
# What kvtune stores of a study's phases (the `kvtune_results` rows: confirmation, ablation,
# noise floor, drift, sweeps, host profile...) and of a trial (its `eval`) is read back by
# every screen. A stored document is JSON that kvtune wrote, so each field name carries one
# type wherever it appears: the rules below are that type system, applied to every document
# read back (`check_document`), older layouts included (they use the same names). A number
# storage could not keep (NaN, ±inf) is stored as null and reads as "not measured"; a field
# of the wrong type, or text with control characters other than a newline or a tab (an
# escape sequence a terminal would obey), refuses
# the study (UserError, exit 2) naming the storage, the document and the field.

# Fields that hold a figure (or null) wherever they appear.
NUMBER_FIELDS = frozenset({
    "achieved_rate", "alpha", "cpu", "pid", "bound", "bound_us", "burst_rate", "capacity", "change",
    "change_ci_high", "change_ci_low", "ci_high", "ci_level", "ci_low",
    "ci_simultaneous_over", "client_late", "client_utilization", "cost_us_per_request",
    "detectable_improvement", "df", "drift_cov", "first_rounds", "good_windows",
    "improvement", "latency_us", "limit_rate", "max_rounds", "measurements", "median",
    "n", "n_baseline", "n_candidate", "noise_sd", "offered_rate", "others", "p50_us",
    "p_adjusted", "p_value", "planned_rounds", "quantile", "rounds", "schedule_lag_p99_us",
    "search_value", "seconds", "share", "shares_sum", "steal", "trial", "window_s",
    "windows", "after_trial",
})
# Fields that hold a list of figures (or nulls; a trial's `violations` attribute, one per
# constraint, holds numbers only: `check_trial_attrs`).
NUMBER_LISTS = frozenset({"samples", "values", "ci", "share_ci", "looks", "levels",
                          "baseline_samples", "recommended_samples", "violations"})
# Fields that hold a list of text (a command line).
TEXT_LISTS = frozenset({"argv"})
# Fields that hold a mapping (or null): a repetition's measurement (`load`), its telemetry
# and the server's statistics.
OBJECT_FIELDS = frozenset({"telemetry", "load", "server_stats"})
# Fields that map names to figures (or nulls; a repetition's metrics also hold its verdict
# in words).
NUMBER_MAPS = frozenset({"metrics", "cov", "robust_cov"})
# Fields that hold a configuration's values (knob → value): any scalar; `export` checks
# each against the knob catalog before it writes one.
CONFIG_FIELDS = frozenset({"config", "changes", "minimal_changes", "minimal_config",
                           "baseline_value", "value", "baseline", "recommended"})
MAX_DEPTH = 32
MAX_STRING = 20_000
# Text with a control character other than a newline or a tab.
_NOT_PLAIN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What passes every rule as it is (a figure or null: every field holds one; bool is not).
_FIGURES = frozenset({int, float, type(None)})
_SHAPED = OBJECT_FIELDS | TEXT_LISTS


def _is_number(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def check_document(doc: Any, where: str) -> Any:
    """`doc` (a stored result or a trial's stored evaluation) when every field has its
    type (the rules above); UserError naming `where` and the field otherwise."""
    _check(doc, where, "", None, 0)
    return doc


def _shape(v: Any, name: str | None) -> str | None:
    """What is wrong with `v` as field `name` of the shapes `TEXT_LISTS` and
    `OBJECT_FIELDS` give (None: nothing)."""
    if v is None:
        return None
    if name in OBJECT_FIELDS and not isinstance(v, dict):
        return f"is {_short(v)}, not a mapping"
    if name in TEXT_LISTS and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
        return f"is {_short(v)}, not a list of text"
    return None


def _check(v: Any, where: str, path: str, name: str | None, depth: int,
           typed: bool = True) -> None:
    """Check `v` (field `name`, at `path`); `typed`: the rules by field name apply (without
    it, only plain text, text keys and the depth: a document of another program's own
    names, as a repetition's telemetry)."""
    def refuse(what: str, at: str | None = None) -> UserError:
        at = path if at is None else at
        return UserError(f"{where}: the stored field {at or '(the document)'} {what} (the "
                         "results database was changed?); nothing was written")

    if not typed:
        name = None

    if depth > MAX_DEPTH:
        raise refuse(f"is nested deeper than {MAX_DEPTH} levels")
    if isinstance(v, str):
        if len(v) > MAX_STRING or _NOT_PLAIN.search(v):
            raise refuse("is not plain text (control characters, or longer than "
                         f"{present.figure(MAX_STRING)} characters)")
        if name in NUMBER_FIELDS and name not in CONFIG_FIELDS:
            raise refuse(f"is {_short(v)}, not a number")
        return
    if name in NUMBER_FIELDS and not _is_number(v) and not isinstance(v, dict | list):
        raise refuse(f"is {_short(v)}, not a number")
    if isinstance(v, list):
        if name in NUMBER_LISTS and not all(_is_number(x) for x in v):
            bad = next(x for x in v if not _is_number(x))
            raise refuse(f"holds {_short(bad)}, not a number")
        for i, x in enumerate(v):
            if type(x) in _FIGURES and depth < MAX_DEPTH:
                continue  # a figure is every field's figure (a field of figures' too)
            _check(x, where, f"{path}[{i}]", name, depth + 1, typed)
        return
    if isinstance(v, dict):
        if name in NUMBER_MAPS:  # figures, and a repetition's verdict words
            for k, x in v.items():
                if not (_is_number(x) or isinstance(x, str)):
                    raise refuse(f"maps {_short(k)} to {_short(x)}, not a number")
        for k, x in v.items():
            if not isinstance(k, str):
                raise refuse("has a key that is not text")
            sub = None if name in CONFIG_FIELDS and name not in ("baseline", "recommended") \
                else k
            wrong = _shape(x, sub) if typed and sub in _SHAPED else None
            if wrong:
                raise refuse(wrong, f"{path}.{k}" if path else k)
            if depth < MAX_DEPTH and (type(x) in _FIGURES or (
                    type(x) is str and len(x) <= MAX_STRING and not _NOT_PLAIN.search(x)
                    and not (typed and sub in NUMBER_FIELDS))):
                continue  # a figure is every field's figure; plain text, a field of text's
            _check(x, where, f"{path}.{k}" if path else k, sub, depth + 1, typed)
        return


# A study's own attributes (Optuna's user_attrs) as kvtune stores them: the study file's
# text, and mappings (the study file as parsed, the host, the baseline, the searched space,
# the search's signature, the warm start, the run's workload). Read back by every screen and
# export through `study.user_attrs`, so each is checked where the storage hands it out.
ATTR_TEXT = frozenset({"spec_text"})
ATTR_MAPS = frozenset({"spec", "host", "baseline", "space", "signature", "warm_start",
                       "workload"})


def check_study_attrs(attrs: Any, where: str) -> Any:
    """A study's stored attributes when each of kvtune's has its shape (`ATTR_TEXT`,
    `ATTR_MAPS`; the baseline a configuration, the space's domains mappings) and every
    field its type (`check_document`; the study file is checked as a study file by
    `kvtune.study.stored`); UserError naming `where` and the attribute otherwise."""
    def refuse(key: str, what: str) -> UserError:
        return UserError(f"{where}: the stored {key} {what} (the results database was "
                         "changed?); nothing was written")

    if not isinstance(attrs, dict):
        raise refuse("attributes", "are not a mapping")
    for key, v in attrs.items():
        if v is None:
            continue
        if key in ATTR_TEXT and not isinstance(v, str):
            raise refuse(key, "is not text")
        if key in ATTR_MAPS and not isinstance(v, dict):
            raise refuse(key, "is not a mapping")
    base = attrs.get("baseline") or {}
    if any(not isinstance(x, str | int | float | bool) and x is not None
           for x in base.values()):
        raise refuse("baseline", "holds a value that is not a single value")
    domains = (attrs.get("space") or {}).get("domains")
    if domains is not None and (not isinstance(domains, dict) or not all(
            isinstance(d, dict) for d in domains.values())):
        raise refuse("space", "holds domains that are not mappings")
    for key in ATTR_MAPS - {"spec"}:
        if attrs.get(key) is not None:
            _check(attrs[key], where, key, key if key == "baseline" else None, 0)
    return attrs


def check_trial_attrs(attrs: Any, where: str) -> Any:
    """A trial's stored attributes when its configuration is a mapping of single values,
    its kind, worker and host fingerprint text, its violations a list of numbers
    (one per constraint: each reader compares them with 0) and every field typed as
    `check_document` types it; UserError naming `where` and the attribute otherwise."""
    def refuse(key: str, what: str) -> UserError:
        return UserError(f"{where}: the stored {key} {what} (the results database was "
                         "changed?); nothing was written")

    if not isinstance(attrs, dict):
        raise refuse("attributes", "are not a mapping")
    config = attrs.get("config")
    if config is not None and (not isinstance(config, dict) or any(
            not isinstance(x, str | int | float | bool) and x is not None
            for x in config.values())):
        raise refuse("config", "is not a configuration (knob: single value)")
    for key in ("kind", "worker", "fingerprint"):
        if attrs.get(key) is not None and not isinstance(attrs[key], str):
            raise refuse(key, f"is not text ({_short(attrs[key])})")
    if "violations" in attrs:
        v = attrs["violations"]
        # Numbers, infinite and NaN included: kvtune writes an infinite one itself (a
        # saturated run's p99 against its bound), and each reader compares it with 0.
        if not isinstance(v, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in v):
            raise refuse("violations", f"are {_short(v)}, not a list of numbers "
                         "(one per constraint)")
    _check(attrs, where, "", None, 0)
    return attrs


def check_repetition(rep: dict[str, Any], where: str) -> dict[str, Any]:
    """A stored repetition (its `params`, `metrics` and `raw` parsed) when its
    configuration is a mapping of single values, its metrics a mapping of figures (or
    verdict words) and its raw record a mapping whose fields have their types
    (`check_document`: the command line a list of text; the measurement, the telemetry and
    the server's statistics mappings). The telemetry holds the sampler's own records (its
    `samples` are rows, not figures): it is checked as plain text under text keys, its
    parts the report reads mappings. UserError naming `where` and the field otherwise."""
    def refuse(key: str, what: str) -> UserError:
        return UserError(f"{where}: the stored {key} {what} (the results database was "
                         "changed?); nothing was written")

    for key in ("params", "metrics", "raw"):
        if not isinstance(rep.get(key), dict):
            raise refuse(key, f"is {_short(rep.get(key))}, not a mapping")
    if any(not isinstance(x, str | int | float | bool) and x is not None
           for x in rep["params"].values()):
        raise refuse("params", "is not a configuration (knob: single value)")
    _check(rep["params"], where, "params", "config", 0)
    check_document({"metrics": rep["metrics"]}, where)
    raw = rep["raw"]
    tel = raw.get("telemetry")
    check_document({k: v for k, v in raw.items() if k != "telemetry"}
                   if tel is not None else raw, where)
    wrong = _shape(tel, "telemetry")
    if wrong:
        raise refuse("field telemetry", wrong)
    if tel is not None:
        for part in ("samples", "server"):
            if tel.get(part) is not None and not isinstance(tel[part], dict):
                raise refuse(f"field telemetry.{part}", f"is {_short(tel[part])}, "
                             "not a mapping")
        rows = (tel.get("samples") or {}).get("samples")
        if rows is not None and not (isinstance(rows, list)
                                     and all(isinstance(r, dict) for r in rows)):
            raise refuse("field telemetry.samples.samples", "is not a list of mappings")
        _check(tel, where, "telemetry", None, 1, typed=False)
    return rep


# What Optuna raises reading a row of its own tables it did not write: a JSON text that is
# not JSON (ValueError), a distribution it does not know (ValueError, KeyError), a
# categorical index outside its choices (IndexError), a value missing from a finished trial
# (AssertionError), a state or direction that is none of its names (LookupError), a column
# of the wrong type (TypeError, ValueError, SQLAlchemy's errors). LookupError covers
# KeyError and IndexError, ValueError json.JSONDecodeError.
_UNREADABLE = (ValueError, TypeError, LookupError, AssertionError, RecursionError,
               sa.exc.SQLAlchemyError)


class _TrialUnreadable(UserError):
    """A trial Optuna cannot build from its rows (`CheckedStorage`): the reading method
    names the study."""

    def __init__(self, why: str, study_id: Any, number: Any) -> None:
        super().__init__(f"trial {number}: the stored trials cannot be read: {why}")
        self.why, self.study_id, self.number = why, study_id, number


class CheckedStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose every read of a study's attributes (what
    `study.user_attrs` asks) passes `check_study_attrs` first: one place, whichever command
    reads them. A subclass (Optuna's public storage class), not a method replaced on an
    instance. (A trial's attributes are checked where the screens read a study:
    `kvtune.analysis.load`.)

    Optuna's own tables are input too: each read that parses them (a study's attributes
    and directions, every trial: what `load_study`, `study.trials`, `get_trials` and
    `get_trial` go through) turns what Optuna raises on a row it did not write
    (`_UNREADABLE`) into UserError naming the storage, the study and the trial. The same
    queries: only the errors are caught. Optuna's KeyError for a study or trial that is not
    there is left as it is (its callers tell "no study named ...")."""

    where = "the results database"  # the masked URL, for messages (Store sets it)

    def _name(self, study_id: Any) -> str | None:
        try:  # only for a message
            return str(super().get_study_name_from_id(study_id))
        except Exception:
            return None

    @contextlib.contextmanager
    def _reading(self, study_id: Any = None, what: str = "trials") -> Iterator[None]:
        """Optuna's read of the `what` of study `study_id` inside: what it raises building
        a row it did not write becomes `_unreadable`'s UserError; "no such study or trial"
        (KeyError) stays Optuna's."""
        try:
            yield
        except _TrialUnreadable as e:
            raise self._unreadable(e) from None
        except KeyError:
            raise
        except _UNREADABLE as e:
            raise self._unreadable(e, study_id, what) from None

    def _unreadable(self, e: BaseException, study_id: Any = None,
                    what: str = "trials") -> UserError:
        """UserError for `e` raised reading the `what` of study `study_id` (None: not
        known), the storage and the study named, no password shown."""
        from sqlalchemy.engine import make_url

        if isinstance(e, _TrialUnreadable):
            why, study_id, trial = e.why, e.study_id, f", trial {e.number}"
        else:
            why, trial = _why(e), ""
        try:
            password = make_url(self.url).password
        except Exception:
            password = None
        if password:
            why = why.replace(str(password), "***")
        name = None if study_id is None else self._name(study_id)
        place = self.where if name is None else f"study {name!r} in {self.where}"
        # A database that answers with an error (a lock, a lost connection) is not said to
        # have been changed.
        hint = "" if isinstance(e, sa.exc.DBAPIError) else \
            " (the results database was changed?)"
        return UserError(f"{place}{trial}: the stored {what} cannot be read: {why}{hint}; "
                         "nothing was written")

    def _build_frozen_trial_from_trial_model(self, trial: Any) -> optuna.trial.FrozenTrial:
        try:
            return super()._build_frozen_trial_from_trial_model(trial)
        except _UNREADABLE as e:
            raise _TrialUnreadable(_why(e), getattr(trial, "study_id", None),
                                   getattr(trial, "number", None)) from None

    def _get_trials(self, study_id: int, states: Container[TrialState] | None,
                    included_trial_ids: set[int], trial_id_greater_than: int,
                    ) -> list[optuna.trial.FrozenTrial]:
        with self._reading(study_id):
            return super()._get_trials(study_id, states, included_trial_ids,
                                       trial_id_greater_than)

    def get_trial(self, trial_id: int) -> optuna.trial.FrozenTrial:
        with self._reading():
            return super().get_trial(trial_id)

    def get_study_directions(self, study_id: int) -> list[optuna.study.StudyDirection]:
        with self._reading(study_id, "study"):
            return super().get_study_directions(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        with self._reading(study_id, "study attributes"):
            return super().get_study_system_attrs(study_id)

    def get_all_studies(self) -> list[FrozenStudy]:
        with self._reading(what="studies"):
            return super().get_all_studies()

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        with self._reading(study_id, "study attributes"):
            attrs = super().get_study_user_attrs(study_id)
        name = self._name(study_id) or str(study_id)
        return check_study_attrs(attrs, f"study {name!r} in {self.where}")


def _why(e: BaseException) -> str:
    """One line of what `e` says (a driver's own error when SQLAlchemy wraps one), plain
    text: the stored text it may quote is shown, never obeyed."""
    text = str(getattr(e, "orig", None) or e).strip()
    line = text.splitlines()[0] if text else ""
    line = (f"{type(e).__name__}: {line}" if line else type(e).__name__).translate(_CONTROLS)
    return line if len(line) <= 300 else line[:297] + "..."


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."
