"""The one check of a database URL, however it arrives (a study file's `storage`, a
command's `--storage`, `kvtune predict`, the library): a URL that parses, a driver that is
installed, no SQLite `file:` URI (its own query language names files and modes no check
sees) and no query at all on a SQLite URL (the driver's options), a SQLite file never under
/proc, /sys or /dev, never created under /etc, /usr or /boot, an existing file only when it
is a SQLite database; credentials never printed.

Where a new SQLite file may be created is the caller's `places` (a study file's: its
results directory, the study file's own directory, the working directory; the loader
passes them), and a command that only reads results (`create=False`) never creates one: a
database that is not there is said to be missing."""

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
# Connection options (libpq's and the MySQL drivers') that name a file the driver reads.
FILE_OPTIONS = frozenset({"passfile", "sslcert", "sslkey", "sslrootcert", "sslcrl",
                          "sslcrldir", "service", "servicefile", "ssl_ca", "ssl_cert",
                          "ssl_key", "read_default_file", "local_infile"})
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


def check_url(url: str, cwd: Path | None = None, *, create: bool = True,
              places: tuple[Path, ...] | None = None) -> None:
    """Raises ValueError (shown with where the URL came from) unless the URL is safe to
    open: parsable, its driver installed, no SQLite `file:` URI, its SQLite file in an
    allowed place (`check_sqlite_path`)."""
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
    if u.get_backend_name() == "sqlite" and (
            (u.database or "").startswith("file:") or "uri" in u.query):
        raise ValueError("a SQLite file: URI is not accepted (it names "
                         "files and modes no check sees); write sqlite:///PATH")
    named = sorted(k for k in u.query if k.lower() in FILE_OPTIONS)
    if named:
        # libpq opens what these name, as root, before any check of kvtune's could see it.
        raise ValueError(f"the URL's option {named[0]!r} names a file the database driver "
                         "would read as root: set it in the operator's environment "
                         "(PGSSLROOTCERT, PGPASSFILE, ...) instead")
    if u.get_backend_name() == "sqlite" and u.query:
        # The driver's own options (timeout, isolation_level, ...) reach sqlite3.connect
        # unchecked (a bad one was a traceback, an unknown one a warning); none is needed.
        raise ValueError("a SQLite URL takes no query (?...): write sqlite:///PATH")
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
        check_sqlite_path(path, cwd, create=create, places=places)


def _inside(real: Path, tree: Path) -> bool:
    return real == tree or tree in real.parents


def check_sqlite_path(path: Path, cwd: Path | None = None, *, create: bool = True,
                      places: tuple[Path, ...] | None = None) -> None:
    """A SQLite file kvtune may open: never under /proc, /sys, /dev; an existing file only
    when it is a regular file holding a SQLite database (judged before it is opened); a
    new one only when `create`, never under /etc, /usr, /boot, in `places` when given
    (the results directory's tree, or directly in another of them), in an existing
    writable directory or inside the results directory (created)."""
    base = cwd or Path.cwd()
    full = path if path.is_absolute() else base / path
    if ".." in full.parts:
        raise ValueError(f"sqlite path {path} may not contain '..'")
    real = Path(os.path.realpath(full))
    for tree in _REFUSED_TREES:
        if _inside(real, Path(tree)):
            raise ValueError(f"sqlite path {path} is under {tree}, which holds kernel and "
                             "device files, not databases")
    if os.path.lexists(real):
        from kvtune.safety.files import ReadRefused, open_input

        try:
            fd = open_input(real, "sqlite path")
        except ReadRefused as e:
            raise ValueError(f"sqlite path {path} exists and is not a regular file kvtune "
                             f"reads ({str(e).rsplit(': ', 1)[-1]})") from None
        try:
            head = os.read(fd, len(_SQLITE_HEADER))
        finally:
            os.close(fd)
        if head and head != _SQLITE_HEADER:
            raise ValueError(f"{path} exists and is not a SQLite database; kvtune will not "
                             "write into it")
        return
    if not create:
        raise ValueError(f"{path} does not exist (this command reads results and creates "
                         "no database)")
    for tree in roots.SYSTEM_TREES:
        if _inside(real, Path(tree)):
            raise ValueError(f"sqlite path {path} is under {tree}: kvtune creates no "
                             "database among the system's files")
    res = Path(os.path.realpath(results_dir(base)))
    in_results = _inside(real.parent, res)
    if places is not None and not in_results and not any(
            real.parent == Path(os.path.realpath(p)) for p in places):
        shown = ", ".join(str(p) for p in (res, *places))
        raise ValueError(f"sqlite path {path}: a study's database is created only in its "
                         f"results directory or beside the study file ({shown}); create "
                         f"it there, or create {path} yourself")
    parent = real.parent
    if parent.is_dir():
        if not os.access(parent, os.W_OK):
            raise ValueError(f"cannot create {path}: {parent} is not writable")
        return
    if not in_results:
        raise ValueError(f"{parent} does not exist; kvtune creates directories only inside "
                         f"the results directory {res} (create {parent} yourself, or put the "
                         "database there)")


def prepare(url: str, cwd: Path | None = None, *, create: bool = True) -> None:
    """Before opening the store: check the URL and, when `create`, create the SQLite
    file's directory when it is inside the results directory. Raises ValueError."""
    check_url(url, cwd, create=create)
    path = sqlite_path(url)
    if path is not None and create:
        full = path if path.is_absolute() else (cwd or Path.cwd()) / path
        full.parent.mkdir(parents=True, exist_ok=True)
