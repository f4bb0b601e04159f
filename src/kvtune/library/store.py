"""Where the library lives: one table, `kvtune_library`, in a SQLite file under the
user's data directory by default, or in the study's PostgreSQL database when the study's
storage is PostgreSQL (so a fleet shares it).

Which library (`resolve`): `--library PATH|URL`, else the environment's
`KVTUNE_LIBRARY` (`off`: none), else the study's storage when it is PostgreSQL, else
`$XDG_DATA_HOME/kvtune/library.db` (`~/.local/share/kvtune/library.db`).

A library that cannot be opened or read (a file that is not SQLite, a damaged database, a
server that does not answer) raises `LibraryUnavailable`: a study then starts cold and
says why, and its entry is not added. An entry that does not validate is skipped and
counted, never used.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from kvtune.library.entry import MAX_ENTRY_BYTES, Entry, parse

_META = sa.MetaData()
LIBRARY = sa.Table(
    "kvtune_library", _META,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("target", sa.String(128), nullable=False, index=True),
    sa.Column("metric", sa.String(128), nullable=False),
    sa.Column("kvtune_version", sa.String(32), nullable=False),
    sa.Column("data", sa.Text, nullable=False),
)
MAX_ENTRIES = 100_000  # read at most this many entries
ENV = "KVTUNE_LIBRARY"


class LibraryUnavailable(Exception):
    """The library cannot be used (the message says why, for people)."""


def default_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kvtune" / "library.db"


def resolve(flag: str | None = None, storage_url: str | None = None) -> str | None:
    """The library's database URL (None: no library, `KVTUNE_LIBRARY=off`)."""
    given = flag or os.environ.get(ENV)
    if given is not None and given.strip().lower() in ("off", "none", ""):
        return None
    if given:
        return given if "://" in given else f"sqlite:///{Path(given).absolute().as_posix()}"
    if storage_url and storage_url.startswith("postgresql"):
        return storage_url
    return f"sqlite:///{default_path().as_posix()}"


@dataclass
class Read:
    """The entries read, and those skipped (id or row number → why)."""

    entries: list[Entry] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)


class LibraryMissing(LibraryUnavailable):
    """A library a reading command was given that is not there (said to be missing; it
    is never created by reading)."""


class Library:
    """The library at `url` (`resolve`). With `create` (a study adding its entry, `kvtune
    library import`), opening creates the table (and, for the default location, its
    directory). Without it, as every command that only reads opens it, nothing is
    created: a SQLite file that is not there raises LibraryMissing, except at the default
    location, where no library yet is an empty one (as is a database without the table).
    Raises LibraryUnavailable."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        from kvtune.safety.storage import check_url, mask, sqlite_path

        self.url = mask(url)
        path = sqlite_path(url)
        default = path is not None and path.absolute() == default_path().absolute()
        self.engine: sa.Engine | None = None
        if not create and path is not None and not os.path.lexists(path):
            if default:
                return  # no library yet: empty
            raise LibraryMissing(f"library {self.url}: {path} does not exist (a command "
                                 "that reads the library creates none; give an existing "
                                 "library with --library)")
        try:
            if create and default and path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            check_url(url, create=create)
        except (OSError, ValueError) as e:
            raise LibraryUnavailable(f"library {self.url}: {e}") from None
        try:
            engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
            if create:
                _META.create_all(engine, checkfirst=True)
            if create or sa.inspect(engine).has_table(LIBRARY.name):
                self.engine = engine
            else:  # a database without the library's table: empty
                engine.dispose()
        except sa.exc.SQLAlchemyError as e:
            raise LibraryUnavailable(f"library {self.url}: {_why(e)}") from None
        if path is not None:  # no output of this run (`library export -o`) may replace it
            from kvtune.safety.files import note_input

            note_input(path)

    def read(self, target: str | None = None) -> Read:
        """Every entry (of `target` when given), oldest first, validated."""
        q = sa.select(LIBRARY.c.id, LIBRARY.c.data).order_by(LIBRARY.c.created)
        if target is not None:
            q = q.where(LIBRARY.c.target == target)
        out = Read()
        if self.engine is None:
            return out
        try:
            with self.engine.connect() as c:
                rows = c.execute(q.limit(MAX_ENTRIES)).all()
        except sa.exc.SQLAlchemyError as e:
            raise LibraryUnavailable(f"library {self.url}: {_why(e)}") from None
        for rid, data in rows:
            try:
                if not isinstance(data, str | bytes):  # a row's text may be NULL, a number
                    raise TypeError(f"the entry is not JSON text ({str(data)[:40]})")
                if len(data) > MAX_ENTRY_BYTES:
                    raise ValueError(f"more than {MAX_ENTRY_BYTES // 1024} KiB")
                out.entries.append(parse(json.loads(data)))
            except (ValueError, TypeError, RecursionError) as e:
                out.invalid.append((str(rid)[:32], str(e)[:300]))
        return out

    def add(self, entries: list[Entry]) -> int:
        """Add `entries` in one transaction (those whose id is there already are
        skipped); the number added."""
        if self.engine is None:
            raise LibraryUnavailable(f"library {self.url}: opened for reading only")
        try:
            with self.engine.begin() as c:
                have = {r[0] for r in c.execute(sa.select(LIBRARY.c.id).where(
                    LIBRARY.c.id.in_([e.id for e in entries])))}
                new = [e for e in entries if e.id not in have]
                for e in new:
                    c.execute(LIBRARY.insert().values(
                        id=e.id, created=e.created or time.time(), target=e.target,
                        metric=e.objective.metric, kvtune_version=e.kvtune_version,
                        data=json.dumps(e.as_json(), allow_nan=False)))
        except sa.exc.SQLAlchemyError as e:
            raise LibraryUnavailable(f"library {self.url}: {_why(e)}") from None
        return len(new)

    def find(self, prefix: str) -> list[str]:
        """The ids starting with `prefix`."""
        if self.engine is None or not prefix or any(
                c not in "0123456789abcdef" for c in prefix.lower()):
            return []
        try:
            with self.engine.connect() as c:
                return [r[0] for r in c.execute(sa.select(LIBRARY.c.id).where(
                    LIBRARY.c.id.like(prefix.lower() + "%")))]
        except sa.exc.SQLAlchemyError as e:
            raise LibraryUnavailable(f"library {self.url}: {_why(e)}") from None

    def get_raw(self, rid: str) -> str | None:
        if self.engine is None:
            return None
        try:
            with self.engine.connect() as c:
                row = c.execute(sa.select(LIBRARY.c.data).where(LIBRARY.c.id == rid)).first()
        except sa.exc.SQLAlchemyError as e:
            raise LibraryUnavailable(f"library {self.url}: {_why(e)}") from None
        return None if row is None else str(row[0])

    def forget(self, rid: str) -> bool:
        if self.engine is None:
            return False
        try:
            with self.engine.begin() as c:
                n = c.execute(LIBRARY.delete().where(LIBRARY.c.id == rid)).rowcount
        except sa.exc.SQLAlchemyError as e:
            raise LibraryUnavailable(f"library {self.url}: {_why(e)}") from None
        return bool(n)


def _why(e: Exception) -> str:
    orig = getattr(e, "orig", None)
    return str(orig or e).splitlines()[0][:300]


def open_library(flag: str | None = None, storage_url: str | None = None, *,
                 create: bool = True) -> Library | None:
    """The library kvtune uses (None: `KVTUNE_LIBRARY=off`); `create` as `Library`'s.
    Raises LibraryUnavailable (LibraryMissing: a library to read that is not there)."""
    url = resolve(flag, storage_url)
    return None if url is None else Library(url, create=create)
