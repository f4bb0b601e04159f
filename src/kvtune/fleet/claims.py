"""A fleet: several workers (one per host, or several synthetic ones on one machine) share one
study through Optuna's RDB storage (PostgreSQL; SQLite on one machine).

- **Storage.** `open_storage` creates the RDB storage under a per-database lock (PostgreSQL's
  `pg_advisory_lock`, a file lock beside a SQLite file), so workers starting together on an
  empty database never race on the schema; a missing driver is named (with the extra that
  provides it) and the password is never shown.
- **Live or dead.** Each worker records a heartbeat for the trial it measures (its own small
  thread: ask/tell gets none from Optuna) and calls `fail_stale_trials` before each ask; a
  trial whose worker stopped beating for the grace period is failed and queued again once
  (`RetryHeartbeatStaleTrialCallback`). A RUNNING trial is never failed for being RUNNING.
- **Sampling.** Each worker draws from its own stream (`worker_seed`: the study's seed plus a
  hash of the worker's identity), with TPE's `constant_liar`.
- **Claims.** One row per (study, key) in `kvtune_claims`, inserted or not: who measures the
  baseline of a host fingerprint, which budget slots are taken, who confirms. A claim of a
  worker whose heartbeat stopped can be taken over.
- **Workers.** `kvtune_workers` lists every worker of a study: its host, PID, fingerprint,
  state and last heartbeat; `kvtune show` prints them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from kvtune.errors import UserError

# study.ask() outside Study.optimize warns that heartbeats are meant for optimize: kvtune
# records them itself (Heartbeat below).
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")

# A constant key; PostgreSQL's advisory locks are scoped to the current database.
_PG_LOCK_KEY = 0x6B76_7475_6E65  # "kvtune"

#: The package extra that provides each driver SQLAlchemy may need.
DRIVER_EXTRAS = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary",
                 "pymysql": "pymysql"}

HEARTBEAT_INTERVAL = 5  # seconds (whole seconds: Optuna's RDBStorage wants ints)
GRACE_PERIOD = 20

_META = sa.MetaData()
CLAIMS = sa.Table(
    "kvtune_claims", _META,
    sa.Column("study", sa.String(256), primary_key=True),
    sa.Column("key", sa.String(128), primary_key=True),
    sa.Column("worker", sa.String(256), nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)
WORKERS = sa.Table(
    "kvtune_workers", _META,
    sa.Column("study", sa.String(256), primary_key=True),
    sa.Column("worker", sa.String(256), primary_key=True),
    sa.Column("host", sa.String(256), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("fingerprint_key", sa.String(32), nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("state", sa.String(32), nullable=False),  # running, finished, failed
    sa.Column("started", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
    sa.Column("note", sa.Text, nullable=False, default=""),
)


def masked(url: str) -> str:
    """`url` with its password hidden (for every message kvtune prints)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: show no part of it that may be secret
        return url.split("@")[-1] if "@" in url else url


def heartbeat_settings() -> tuple[int, int]:
    """(interval, grace) in whole seconds; `KVTUNE_HEARTBEAT=interval,grace` overrides them
    (the fleet tests use short ones)."""
    raw = os.environ.get("KVTUNE_HEARTBEAT")
    if raw:
        a, b = (int(x) for x in raw.split(","))
        return a, b
    return HEARTBEAT_INTERVAL, GRACE_PERIOD


def driver_problem(url: str) -> str | None:
    """None when the storage URL's database driver can be imported; otherwise a message that
    names the missing module and the extra that provides it (the password masked)."""
    try:
        u = make_url(url)
        dialect = u.get_dialect()
    except Exception as e:
        return f"storage {masked(url)}: not a database URL SQLAlchemy understands ({e})"
    try:
        dialect.import_dbapi()
    except ImportError as e:
        mod = getattr(e, "name", None) or str(e)
        driver = u.get_driver_name()
        extra = DRIVER_EXTRAS.get(driver, mod)
        return (f"storage {u.render_as_string(hide_password=True)} needs the Python module "
                f"{mod!r} (SQLAlchemy driver {driver!r}), which is not installed: run "
                f"`make setup` (it installs the extra when the study's storage needs it) or "
                f"`pip install 'kvtune[postgres]'` / `pip install '{extra}'`")
    return None


@contextlib.contextmanager
def _pg_lock(url: str, timeout_s: float) -> Iterator[None]:
    eng = sa.create_engine(url, poolclass=NullPool)
    try:
        with eng.connect() as c:
            # lock_timeout also bounds the advisory lock's wait: never hang.
            c.execute(sa.text(f"SET lock_timeout = '{int(timeout_s * 1000)}ms'"))
            c.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            c.commit()
            try:
                yield
            finally:
                c.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                c.commit()
    finally:
        eng.dispose()


@contextlib.contextmanager
def _file_lock(db_path: str, timeout_s: float) -> Iterator[None]:
    """flock on the database's directory: creation of the SQLite schema is serialized
    between processes and nothing is left beside the database (a lock file would be)."""
    directory = os.path.dirname(db_path) or "."
    os.makedirs(directory, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the creation lock on {directory} held for "
                                       f"{timeout_s:.0f}s") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def creation_lock(url: str, timeout_s: float = 60.0) -> contextlib.AbstractContextManager[None]:
    """The lock under which a database's schema is created (a no-op for other dialects)."""
    u = make_url(url)
    if u.get_backend_name() == "postgresql":
        return _pg_lock(url, timeout_s)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        return _file_lock(os.path.abspath(u.database), timeout_s)
    return contextlib.nullcontext()


def open_storage(url: str, heartbeat: bool = True,
                 extra_tables: sa.MetaData | None = None,
                 storage_class: type[optuna.storages.RDBStorage] = optuna.storages.RDBStorage,
                 ) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage for `url`, created idempotently under concurrency, with
    heartbeats (a dead worker's trial is failed and retried once) when `heartbeat`. Also
    creates kvtune's fleet tables, and `extra_tables`, under the same lock. Raises
    UserError naming a missing driver, never showing the password."""
    problem = driver_problem(url)
    if problem:
        raise UserError(problem)
    kw: dict[str, Any] = {}
    if heartbeat:
        interval, grace = heartbeat_settings()
        stale = _StaleCallback()
        kw = {"heartbeat_interval": interval, "grace_period": grace,
              "heartbeat_stale_trial_callback": stale}
    try:
        with creation_lock(url), warnings.catch_warnings():
            # heartbeat_interval is "experimental" in Optuna: kvtune depends on it knowingly.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # Optuna's schema check, its head revision read once a process (_schema_head);
            # a database at another revision is opened again with Optuna's own check,
            # which refuses it with its own message.
            storage = storage_class(url, skip_compatibility_check=True, **kw)
            if storage.get_current_version() != _schema_head(storage):
                storage = storage_class(url, **kw)
            eng = storage.engine
            if heartbeat:
                stale.engine = eng
            _META.create_all(eng)
            if extra_tables is not None:
                extra_tables.create_all(eng)
    except UserError:
        raise
    except Exception as e:  # SQLAlchemy and driver errors vary by backend
        text = str(e).replace(make_url(url).password or "\0", "***")
        raise UserError(f"storage {masked(url)} cannot be opened: {text}") from None
    return storage


_HEAD: list[str] = []  # the head revision of Optuna's schema, once read


def _schema_head(storage: optuna.storages.RDBStorage) -> str:
    """The head revision of Optuna's schema, what RDBStorage checks a database against
    when it opens: read from Optuna's migration scripts once a process. Optuna loads every
    one of its migration scripts to find it again at each open (a tenth of a second of
    each command; hundreds of opens in the tests)."""
    if not _HEAD:
        _HEAD.append(storage.get_head_version())
    return _HEAD[0]


class _StaleCallback:
    """A stale trial (its worker stopped beating) is queued again once, and the budget slot
    it held is freed."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
        # The storage's engine, set once the storage this callback is given to exists.
        self.engine: sa.Engine | None = None

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.retry(study, trial)
        engine = self.engine
        if engine is not None:
            with engine.begin() as c:
                c.execute(CLAIMS.delete().where(CLAIMS.c.study == study.study_name)
                          .where(CLAIMS.c.key.like("slot:%"))
                          .where(CLAIMS.c.data == json.dumps({"trial": trial.number})))


def worker_id() -> str:
    """This worker's identity: `$KVTUNE_WORKER`, else host:pid."""
    return os.environ.get("KVTUNE_WORKER") or f"{socket.gethostname()}:{os.getpid()}"


def worker_seed(seed: int, worker: str) -> int:
    """The worker's own random stream: stable, needs no coordination, 32 bits for numpy."""
    return (seed + zlib.crc32(worker.encode())) % 2**32


def fail_stale(study: optuna.Study, fleet: Fleet | None = None,
               storage: optuna.storages.BaseStorage | None = None) -> None:
    """Fail (and retry once) the trials whose workers stopped beating; called before ask.
    With `fleet` and the study's `storage`, also the RUNNING trials of a worker of this
    host whose process is gone (a `kill -9`, then `kvtune tune` again: no need to wait for
    the grace period). A trial is never failed because it is RUNNING."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    if fleet is None or storage is None:
        return
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    gone = {w for w in {t.user_attrs.get("worker") for t in running}
            if w and w != fleet.worker and fleet.process_gone(w)}
    callback = storage.get_heartbeat_stale_trial_callback() \
        if hasattr(storage, "get_heartbeat_stale_trial_callback") else None
    study_id = storage.get_study_id_from_name(study.study_name)
    for t in running:
        if t.user_attrs.get("worker") not in gone:
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            if not storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another worker failed it first
        if callback is not None:
            callback(study, storage.get_trial(trial_id))


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Heartbeat:
    """Records a heartbeat for `trial_id` every interval, and the worker's last_seen, in a
    small thread (what Study.optimize does; ask/tell gets none). A context manager."""

    def __init__(self, storage: optuna.storages.BaseStorage, trial_id: int | None,
                 beat: Callable[[], None] | None = None) -> None:
        self.storage = storage
        self.trial_id = trial_id
        self.beat = beat
        self.interval = heartbeat_settings()[0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kvtune-heartbeat")

    def _run(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat is retried next interval
                if self.trial_id is not None:
                    self.storage.record_heartbeat(self.trial_id)  # type: ignore[attr-defined]
                if self.beat is not None:
                    self.beat()
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class Claim:
    won: bool
    worker: str  # who holds it
    data: dict[str, Any]


class Fleet:
    """One worker's view of the fleet tables of `study` in the database of `engine`."""

    def __init__(self, engine: sa.Engine, study: str, worker: str) -> None:
        self.engine = engine
        self.study = study
        self.worker = worker

    # -- claims -----------------------------------------------------------------------------

    def claim(self, key: str, data: dict[str, Any] | None = None) -> Claim:
        """Insert the claim `key` for this worker; when it exists, who holds it."""
        text = json.dumps(data or {}, sort_keys=True)
        try:
            with self.engine.begin() as c:
                c.execute(CLAIMS.insert().values(study=self.study, key=key, worker=self.worker,
                                                 data=text, created=time.time()))
            return Claim(True, self.worker, data or {})
        except sa.exc.IntegrityError:
            got = self.holder(key)
            if got is None:  # released between our insert and our read: try once more
                return self.claim(key, data)
            return got

    def holder(self, key: str) -> Claim | None:
        q = sa.select(CLAIMS.c.worker, CLAIMS.c.data).where(CLAIMS.c.study == self.study) \
            .where(CLAIMS.c.key == key)
        with self.engine.connect() as c:
            row = c.execute(q).first()
        if row is None:
            return None
        return Claim(row[0] == self.worker, str(row[0]), json.loads(row[1]))

    def set_claim_data(self, key: str, data: dict[str, Any]) -> None:
        with self.engine.begin() as c:
            c.execute(CLAIMS.update().where(CLAIMS.c.study == self.study)
                      .where(CLAIMS.c.key == key).where(CLAIMS.c.worker == self.worker)
                      .values(data=json.dumps(data, sort_keys=True)))

    def release(self, key: str, worker: str | None = None) -> bool:
        """Delete the claim `key` if `worker` (default: this one) still holds it."""
        with self.engine.begin() as c:
            r = c.execute(CLAIMS.delete().where(CLAIMS.c.study == self.study)
                          .where(CLAIMS.c.key == key)
                          .where(CLAIMS.c.worker == (worker or self.worker)))
        return bool(r.rowcount)

    def claim_or_take_over(self, key: str, data: dict[str, Any] | None = None) -> Claim:
        """Claim `key`; when a worker that stopped beating holds it, take it over."""
        got = self.claim(key, data)
        if not got.won and self.dead(got.worker) and self.release(key, got.worker):
            got = self.claim(key, data)
        return got

    def take_slot(self, budget: int) -> int | None:
        """A free budget slot (0 .. budget-1), or None when every slot is taken: the trial
        budget counts across all workers, exactly."""
        taken = self.slots_taken()
        for k in range(budget):
            if k in taken:
                continue
            if self.claim(f"slot:{k:06d}", {}).won:
                return k
        return None

    def slots_taken(self) -> set[int]:
        q = sa.select(CLAIMS.c.key).where(CLAIMS.c.study == self.study) \
            .where(CLAIMS.c.key.like("slot:%"))
        with self.engine.connect() as c:
            return {int(r[0].split(":", 1)[1]) for r in c.execute(q)}

    def slot_trial(self, slot: int, trial_number: int) -> None:
        """Bind a slot to the trial measured in it (a stale trial frees its slot)."""
        self.set_claim_data(f"slot:{slot:06d}", {"trial": trial_number})

    def free_slot(self, slot: int) -> None:
        self.release(f"slot:{slot:06d}")

    # -- workers ----------------------------------------------------------------------------

    def register(self, fingerprint: dict[str, Any], fingerprint_key: str) -> None:
        now = time.time()
        row = {"host": socket.gethostname(), "pid": os.getpid(),
               "fingerprint_key": fingerprint_key,
               "fingerprint": json.dumps(fingerprint, sort_keys=True), "state": "running",
               "started": now, "last_seen": now, "note": ""}
        with self.engine.begin() as c:
            r = c.execute(WORKERS.update().where(WORKERS.c.study == self.study)
                          .where(WORKERS.c.worker == self.worker).values(**row))
            if not r.rowcount:
                c.execute(WORKERS.insert().values(study=self.study, worker=self.worker, **row))

    def unregister(self) -> None:
        """Remove this worker's row (a process refused before it measured anything)."""
        with self.engine.begin() as c:
            c.execute(WORKERS.delete().where(WORKERS.c.study == self.study)
                      .where(WORKERS.c.worker == self.worker))

    def seen(self) -> None:
        with self.engine.begin() as c:
            c.execute(WORKERS.update().where(WORKERS.c.study == self.study)
                      .where(WORKERS.c.worker == self.worker).values(last_seen=time.time()))

    def finish(self, state: str, note: str = "") -> None:
        with self.engine.begin() as c:
            c.execute(WORKERS.update().where(WORKERS.c.study == self.study)
                      .where(WORKERS.c.worker == self.worker)
                      .values(state=state, note=note[:2000], last_seen=time.time()))

    def alive(self, worker: str) -> bool:
        """True when `worker` is running and beat within the grace period."""
        q = sa.select(WORKERS.c.state, WORKERS.c.last_seen).where(
            WORKERS.c.study == self.study).where(WORKERS.c.worker == worker)
        with self.engine.connect() as c:
            row = c.execute(q).first()
        if row is None:
            return False
        return row[0] == "running" and time.time() - float(row[1]) <= heartbeat_settings()[1]

    def _row(self, worker: str) -> Any:
        q = sa.select(WORKERS.c.state, WORKERS.c.last_seen, WORKERS.c.host, WORKERS.c.pid) \
            .where(WORKERS.c.study == self.study).where(WORKERS.c.worker == worker)
        with self.engine.connect() as c:
            return c.execute(q).first()

    def process_gone(self, worker: str) -> bool:
        """True when `worker` ran on this host and its process no longer exists while its
        row still says running (killed): certain without waiting for the grace period."""
        row = self._row(worker)
        return row is not None and row[0] == "running" and \
            row[2] == socket.gethostname() and int(row[3]) != os.getpid() and \
            not pid_running(int(row[3]))

    def dead(self, worker: str) -> bool:
        """True when `worker` failed, or stopped beating while running (killed), or its
        process on this host is gone; a worker that finished did what it claimed."""
        row = self._row(worker)
        if row is None or row[0] == "failed":
            return True
        if row[0] != "running":
            return False
        return time.time() - float(row[1]) > heartbeat_settings()[1] or \
            self.process_gone(worker)

    def active(self, worker: str) -> bool:
        """True when `worker` is running, beating and (on this host) its process exists."""
        return self.alive(worker) and not self.process_gone(worker)

    def holders(self, prefix: str) -> list[str]:
        """The workers holding a claim whose key starts with `prefix`."""
        q = sa.select(CLAIMS.c.worker).where(CLAIMS.c.study == self.study) \
            .where(CLAIMS.c.key.like(prefix + "%"))
        with self.engine.connect() as c:
            return [str(r[0]) for r in c.execute(q)]

    def workers(self) -> list[dict[str, Any]]:
        return workers_of(self.engine, self.study)


def workers_of(engine: sa.Engine, study: str) -> list[dict[str, Any]]:
    """Every worker of `study` (empty when the database has no fleet tables)."""
    if not sa.inspect(engine).has_table("kvtune_workers"):
        return []
    q = sa.select(WORKERS).where(WORKERS.c.study == study).order_by(WORKERS.c.started)
    with engine.connect() as c:
        rows = [dict(r) for r in c.execute(q).mappings()]
    grace = heartbeat_settings()[1]
    for r in rows:
        r["fingerprint"] = json.loads(r["fingerprint"])
        if r["state"] == "running" and time.time() - float(r["last_seen"]) > grace:
            r["state"] = "lost"  # stopped beating without saying goodbye (killed)
    return rows


def create_fleet_tables(engine: sa.Engine) -> None:
    _META.create_all(engine)
