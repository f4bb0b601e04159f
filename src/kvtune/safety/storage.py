"""The results database a study file names: a URL that parses, a driver that is installed,
a SQLite file created only inside the results directory (or in a directory that already
exists and is writable), never under /proc, /sys or /dev; credentials never printed."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kvtune import roots

# DB-API driver module -> the package that provides it.
DRIVER_PACKAGES = {
    "psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]", "asyncpg": "asyncpg",
    "pg8000": "pg8000", "pymysql": "PyMySQL", "MySQLdb": "mysqlclient",
    "mysqlclient": "mysqlclient", "mysqldb": "mysqlclient",
    "mysqlconnector": "mysql-connector-python", "mysql": "mysql-connector-python",
    "cx_oracle": "cx-Oracle", "oracledb": "oracledb",
    "pyodbc": "pyodbc", "pymssql": "pymssql",
}
_SQLITE_HEADER = b"SQLite format 3\x00"
_REFUSED_TREES = roots.STORAGE_REFUSED


def mask(url: str) -> str:
    """The URL with its password replaced by ***, for messages, `show` and reports."""
    try:
        from sqlalchemy.engine import make_url

        u = make_url(url)
        if u.password is None:
            return url
        return u.render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", url)


def results_dir(cwd: Path | None = None) -> Path:
    return (cwd or Path.cwd()) / "results"


def sqlite_path(url: str) -> Path | None:
    """The file of a sqlite URL (None for other backends and in-memory databases)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return None
    db = u.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def check_url(url: str, cwd: Path | None = None) -> None:
    """Raises ValueError (shown with the key path `storage`) unless the URL is safe to
    open: parsable, its driver installed, its SQLite file in an allowed place."""
    if any(c in url for c in "\x00\n\r") or len(url) > 2048:
        raise ValueError("not a database URL")
    try:
        from sqlalchemy.engine import make_url

        u = make_url(url)
    except Exception:
        raise ValueError(f"{mask(url)!r} is not a database URL such as "
                         "sqlite:///results/NAME.db or postgresql+psycopg://user@host/db") \
            from None
    try:
        dialect = u.get_dialect()
    except Exception:
        raise ValueError(f"{mask(url)!r}: unknown database backend "
                         f"{u.drivername!r}") from None
    try:
        dialect.import_dbapi()
    except ImportError as e:
        driver = getattr(dialect, "driver", None) or str(e.name or "")
        pkg = DRIVER_PACKAGES.get(driver) or DRIVER_PACKAGES.get(str(e.name)) or driver
        raise ValueError(f"the {u.get_backend_name()} driver {driver!r} is not installed: "
                         f"pip install '{pkg}' (into kvtune's environment), or name an "
                         "installed driver in the URL, e.g. postgresql+psycopg://...") from None
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_path(path, cwd)


def check_sqlite_path(path: Path, cwd: Path | None = None) -> None:
    base = cwd or Path.cwd()
    full = path if path.is_absolute() else base / path
    if ".." in full.parts:
        raise ValueError(f"sqlite path {path} may not contain '..'")
    real = Path(os.path.realpath(full))
    for tree in _REFUSED_TREES:
        if real == Path(tree) or Path(tree) in real.parents:
            raise ValueError(f"sqlite path {path} is under {tree}, which holds kernel and "
                             "device files, not databases")
    if real.exists():
        if not real.is_file():
            raise ValueError(f"sqlite path {path} exists and is not a regular file")
        with open(real, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
        if head and head != _SQLITE_HEADER:
            raise ValueError(f"{path} exists and is not a SQLite database; kvtune will not "
                             "write into it")
        return
    parent = real.parent
    if parent.is_dir():
        if not os.access(parent, os.W_OK):
            raise ValueError(f"cannot create {path}: {parent} is not writable")
        return
    res = Path(os.path.realpath(results_dir(base)))
    if not (real.parent == res or res in real.parents):
        raise ValueError(f"{parent} does not exist; kvtune creates directories only inside "
                         f"the results directory {res} (create {parent} yourself, or put the "
                         "database there)")


def prepare(url: str, cwd: Path | None = None) -> None:
    """Before opening the store: check the URL and create the SQLite file's directory when
    it is inside the results directory. Raises ValueError."""
    check_url(url, cwd)
    path = sqlite_path(url)
    if path is not None:
        full = path if path.is_absolute() else (cwd or Path.cwd()) / path
        full.parent.mkdir(parents=True, exist_ok=True)
