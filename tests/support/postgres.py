"""Fixtures with real parts for the fleet tests: a throw-away PostgreSQL 15 (Debian's
postgresql: initdb and pg_ctl into a temp dir, on a loopback port, run as a non-root user).

`postgres_server` is started once per session (about 0.9 s to start); `pg_url` gives each
test a fresh, empty database on it (about 0.1 s).
"""

from __future__ import annotations

import itertools
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtune.targets.base import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def pick_user(preferred: str | None = None) -> str:
    """The non-root account the server runs as. initdb/postgres refuse to run as root."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    for name in ([preferred] if preferred else []) + ["postgres", "nobody"]:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("no non-root user to run PostgreSQL as")


@dataclass
class Postgres:
    root: Path
    datadir: Path
    sockdir: Path
    port: int
    user: str  # OS user running the server
    db: str
    role: str
    password: str
    timings: dict[str, float]

    @property
    def url(self) -> str:
        return f"postgresql://{self.role}:{self.password}@127.0.0.1:{self.port}/{self.db}"

    def url_for(self, db: str) -> str:
        return f"postgresql://{self.role}:{self.password}@127.0.0.1:{self.port}/{db}"

    def psql(self, stmt: str, db: str = "postgres") -> str:
        """Run one statement as the bootstrap superuser over the unix socket."""
        r = subprocess.run(
            [str(PG_BIN / "psql"), "-h", str(self.sockdir), "-p", str(self.port), "-U",
             "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-Atqc", stmt],
            user=self.user, env={"PATH": "/usr/bin:/bin"}, cwd=self.root, check=True,
            capture_output=True, text=True, timeout=60)
        return r.stdout

    def createdb(self, db: str) -> str:
        """A fresh, empty database owned by the test role; returns its URL."""
        self.psql(f"CREATE DATABASE {db} OWNER {self.role}")
        return self.url_for(db)

    def stop(self) -> None:
        subprocess.run(
            [PG_BIN / "pg_ctl", "-D", self.datadir, "-m", "immediate", "-w", "stop"],
            user=self.user, check=False, capture_output=True, timeout=60,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(user: str | None = None, db: str = "kvtune", role: str = "kvtune",
                   password: str | None = None) -> Postgres:
    user = pick_user(user)
    pw = pwd.getpwnam(user)
    password = password or secrets.token_hex(8)
    # NOT pytest's tmp_path: /tmp/pytest-of-root/... is 0700 root, the server user cannot enter.
    root = Path(tempfile.mkdtemp(prefix="test-pg-"))
    os.chown(root, pw.pw_uid, pw.pw_gid)  # mkdtemp gives 0700; hand the dir over
    datadir, sockdir = root / "data", root / "sock"
    t: dict[str, float] = {}
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(root)}

    def run(argv: list[object]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(a) for a in argv], user=user, env=env, cwd=root,
                              check=True, capture_output=True, text=True, timeout=120)

    try:
        t0 = time.monotonic()
        sockdir.mkdir()
        os.chown(sockdir, pw.pw_uid, pw.pw_gid)
        # -N: no fsync of the new cluster (throw-away); trust on the unix socket (only the
        # server user + root can enter root/), scram on TCP so the URL's password is checked.
        run([PG_BIN / "initdb", "-D", datadir, "-U", "postgres", "-N", "-E", "UTF8",
             "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256"])
        t["initdb"] = time.monotonic() - t0
        for _ in range(5):
            port = free_port()
            t1 = time.monotonic()
            opts = (f"-k {sockdir} -p {port} -c listen_addresses=127.0.0.1 "
                    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            r = subprocess.run(
                [str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-l", str(root / "log"),
                 "-o", opts, "-w", "-t", "30", "start"],
                user=user, env=env, cwd=root, capture_output=True, text=True, timeout=60,
                check=False)
            if r.returncode == 0:
                break
            # lost the port race with someone else: try another port
        else:
            raise RuntimeError(f"pg_ctl start failed: {r.stdout}{r.stderr}"
                               f"{(root / 'log').read_text(errors='replace')}")
        t["start"] = time.monotonic() - t1
        t2 = time.monotonic()
        sql = (f"CREATE ROLE {role} LOGIN PASSWORD '{password}';"
               f"CREATE DATABASE {db} OWNER {role};")
        # psql over the unix socket as the bootstrap superuser (trust). -v ON_ERROR_STOP=1
        # makes a failing statement a non-zero exit. CREATE DATABASE can't be in a tx block,
        # so run the statements as separate -c's.
        for stmt in sql.rstrip(";").split(";"):
            run([PG_BIN / "psql", "-h", sockdir, "-p", port, "-U", "postgres",
                 "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", stmt])
        t["createdb"] = time.monotonic() - t2
        t["total"] = time.monotonic() - t0
        return Postgres(root, datadir, sockdir, port, user, db, role, password, t)
    except BaseException:
        subprocess.run([str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-m", "immediate",
                        "stop"], user=user, capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)
        raise



_DB_SEQ = itertools.count()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"{PG_BIN / 'initdb'} is missing: run `make setup` (apt: postgresql)")
    pg = start_postgres()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture
def pg_url(postgres_server: Postgres) -> str:
    """A fresh, empty database for this test (its URL carries the role's password)."""
    return postgres_server.createdb(f"t{os.getpid()}_{next(_DB_SEQ)}")
