"""SQLite without fsync for the unit tier's throw-away databases.

Every value Optuna stores is a transaction of its own (a trial's parameters, attributes and
constraints: about 30 commits a trial), and SQLite's default (`synchronous=FULL`) waits for
the disk at each commit: on a busy VM about 8 ms a commit, more than half of a synthetic
study's time (a 40-trial study: 15.5 s, 5.8 s without it). A unit test's database lives in
its temporary directory and needs to survive no power loss, so its connections skip the
wait (`PRAGMA synchronous=OFF`: a process killed mid-transaction still leaves a consistent
database, only an operating-system crash could lose one). What is stored, and everything a
test reads back, is the same. kvtune itself keeps SQLite's default: a study on a host whose
kernel it tunes should survive that host's crash.

`unsynced_sqlite()` applies to the SQLite connections SQLAlchemy opens in this process while
it is entered (a test module's autouse fixture); processes a test starts are not touched."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa


def _no_fsync(dbapi_connection: Any, _record: Any) -> None:
    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute("PRAGMA synchronous=OFF")


@contextlib.contextmanager
def unsynced_sqlite() -> Iterator[None]:
    sa.event.listen(sa.engine.Engine, "connect", _no_fsync)
    try:
        yield
    finally:
        sa.event.remove(sa.engine.Engine, "connect", _no_fsync)
