"""The one home of the test servers: memcached, redis-server and valkey-server started one way
on a free loopback port, found one way (kvtune's own `free_port`), waited for one way, and
stopped one way; the binaries' fixtures; the small clients the tests read them with.

A test that needs a server it does not change asks for `shared_memcached` (one per module);
a test that changes or kills its server starts its own with `running(...)`. Every fixture
here puts the test in the integration tier (conftest.py applies the marker from the fixtures
a test uses)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvtune.targets.base import free_port

REPO = Path(__file__).resolve().parents[2]
KVLOAD = REPO / "kvload" / "target" / "release" / "kvload"

__all__ = ["KVLOAD", "REPO", "Server", "free_port", "mc_settings", "mc_stats", "redis_call",
           "redis_info", "require", "running", "start", "stop", "wait_port"]


def require(binary: str) -> str:
    """The binary's path; fails (never skips) when it is missing: `make setup` installs it."""
    path = shutil.which(binary)
    if not path:
        pytest.fail(f"{binary} is not installed: run `make setup` (make test installs it)")
    return path


def wait_port(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 10,
              host: str = "127.0.0.1") -> None:
    """Until something accepts on host:port; fails at once when `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"server exited ({proc.returncode}): {err!r}")
        try:
            with socket.create_connection((host, port), timeout=0.2) as s:
                # a connect to a port nothing listens on that Linux paired with itself (its
                # source port the same) is no listener
                if s.getsockname() != s.getpeername():
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"nothing listened on {host}:{port} within {timeout} s")


# What a cache server is asked, and how its answer starts, to know it is the one listening
# (memcached's version; Redis's and Valkey's PING, answered +PONG, or -NOAUTH/-LOADING:
# still the server).
_ASK = {"memcached": (b"version\r\n", (b"VERSION ",)),
        "redis": (b"PING\r\n", (b"+", b"-")), "valkey": (b"PING\r\n", (b"+", b"-"))}


def answers(kind: str, port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server of `kind` answers on host:port (not merely something accepting)."""
    ask, replies = _ASK[kind]
    got = b""
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            if s.getsockname() == s.getpeername():
                return False
            s.settimeout(0.5)
            s.sendall(ask)
            while b"\n" not in got and len(got) < 256:
                chunk = s.recv(256)
                if not chunk:
                    break
                got += chunk
    except OSError:
        return False
    return got.startswith(replies)


def wait_answer(kind: str, port: int, proc: subprocess.Popen[bytes], timeout: float = 10
                ) -> None:
    """Until the server `proc` started answers on 127.0.0.1:port (`answers`); fails at once
    when it exits first (a port another process took: its stderr says so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"server exited ({proc.returncode}): {err!r}")
        if answers(kind, port):
            return
        time.sleep(0.02)
    raise AssertionError(f"no {kind} answered on 127.0.0.1:{port} within {timeout} s")


# A test's server is thrown away after it: SIGTERM, and SIGKILL when it has not exited by
# then (memcached 1.6 exits on SIGTERM only when its background threads next wake, ~0.9 s
# after load: kvtune's own targets stop it the same way, ServerTarget.stop_grace_s).
STOP_GRACE_S = 0.2


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr:
        proc.stderr.close()


@dataclass
class Server:
    kind: str  # memcached, redis or valkey
    port: int
    proc: subprocess.Popen[bytes]
    argv: list[str]  # the command as started (a test that checks what the server ran reads it)

    @property
    def pid(self) -> int:
        return self.proc.pid


BINARIES = {"memcached": "memcached", "redis": "redis-server", "valkey": "valkey-server"}


def _argv(kind: str, binary: str, port: int, args: list[str], cwd: Path, user: str) -> list[str]:
    if kind == "memcached":  # -u: the account a root-started memcached drops to
        return [binary, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-u", user, *args]
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--daemonize", "no", "--logfile", "", "--dir", str(cwd), *args]


def start(kind: str, args: list[str] | None = None, cwd: Path | None = None,
          binary: str | None = None, *, user: str = "memcache",
          command: Callable[[int], list[str]] | None = None, port: int | None = None,
          cpus: str | None = None, wrap: Callable[[list[str]], list[str]] | None = None,
          log: Path | None = None, run_as: str | None = None) -> Server:
    """A server of `kind` on a free loopback port, listening when returned; the caller stops
    it (`stop(server.proc)`), or uses `running`.

    By default the test's own command line: `binary` (the installed one unless given) with
    the loopback port, no persistence, and `args` after them. The rest is for a test that
    starts the server as something else would:
    - `command(port)`: the whole command for a port, for a server started from its own
      configuration (a file naming the port, Debian's wrapper, a packaged unit's options);
    - `port`: this port, not a free one (a server restarted where its file says);
    - `cpus`: pinned (`taskset -c cpus`, which execs: the PID is the server's);
    - `wrap(argv)`: started through a launcher that execs it (kvtune's scheduling shim);
    - `log`: its output (stdout and stderr) appended to this file, as its logfile;
    - `run_as`: as this account (user and group), not root."""
    binary = binary or require(BINARIES[kind])
    cwd = cwd or Path("/tmp")
    tries = 1 if port is not None else 5
    for _ in range(tries):  # another process may take the port between the probe and the bind
        p = port if port is not None else free_port()
        argv = command(p) if command else _argv(kind, binary, p, args or [], cwd, user)
        launched = argv
        if wrap is not None:
            launched = wrap(launched)
        if cpus is not None:
            launched = ["taskset", "-c", cpus, *launched]
        extra: dict[str, object] = {}
        if run_as is not None:
            extra = {"user": run_as, "group": run_as, "extra_groups": []}
        out = log.open("ab") if log is not None else None
        try:
            proc = subprocess.Popen(launched, cwd=cwd, stdout=out or subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT if out else subprocess.PIPE,
                                    **extra)  # type: ignore[call-overload]
        finally:
            if out is not None:
                out.close()
        try:
            wait_port(p, proc)
            # the server itself, not another process that holds the port while ours fails to
            # bind and exits (the start is then tried again on another port)
            wait_answer(kind, p, proc)
            return Server(kind, p, proc, launched)
        except AssertionError as e:  # its message carries the server's stderr
            stop(proc)
            said = str(e) + (log.read_text(errors="replace")[-4000:] if log else "")
            if "in use" not in said or tries == 1:
                raise
    raise AssertionError(f"{kind}: no free port after {tries} tries")


@contextmanager
def running(kind: str, args: list[str] | None = None, cwd: Path | None = None,
            binary: str | None = None, **how: Any) -> Iterator[Server]:
    """`start(kind, args, cwd, binary, **how)`, stopped afterwards."""
    server = start(kind, args, cwd, binary, **how)
    try:
        yield server
    finally:
        stop(server.proc)


# -- clients -------------------------------------------------------------------------------


def _ask(port: int, request: bytes, until: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        buf = b""
        while not buf.endswith(until):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return buf


def mc_stats(port: int, what: str = "") -> dict[str, str]:
    """memcached's `stats` (or `stats settings`, `stats slabs`...) as name -> value."""
    buf = _ask(port, f"stats {what}".strip().encode() + b"\r\n", b"END\r\n")
    out = {}
    for ln in buf.decode().splitlines():
        parts = ln.split()
        if len(parts) >= 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def mc_settings(port: int) -> dict[str, str]:
    return mc_stats(port, "settings")


def resp(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        out += b"$" + str(len(b)).encode() + b"\r\n" + b + b"\r\n"
    return out


def redis_call(port: int, *args: str) -> str:
    """One command to a Redis or Valkey server; its raw reply (RESP) as text."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(resp(*args))
        buf = s.recv(65536)
        s.settimeout(0.05)
        try:  # the rest of a long reply, until the server has nothing more to say
            while chunk := s.recv(65536):
                buf += chunk
        except TimeoutError:
            pass
        return buf.decode(errors="replace")


def redis_info(port: int, section: str = "stats") -> dict[str, str]:
    out = {}
    for ln in redis_call(port, "INFO", section).splitlines():
        k, sep, v = ln.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def gets_served(kind: str, port: int) -> int:
    """How many gets the server has answered (memcached's cmd_get, Redis's and Valkey's
    GET calls)."""
    if kind == "memcached":
        return int(mc_stats(port).get("cmd_get", 0))
    calls = redis_info(port, "commandstats").get("cmdstat_get", "")
    fields = dict(f.split("=", 1) for f in calls.split(",") if "=" in f)
    return int(fields.get("calls", 0))


def wait_traffic(kind: str, port: int, settle: float = 0.3, timeout: float = 30) -> None:
    """Until a load generator started on the server is past its preload (its sets) and
    sending its traffic (the server answers gets), then `settle` seconds more: what a
    capture of that traffic should see, without sleeping a fixed guess of it."""
    deadline = time.monotonic() + timeout
    while gets_served(kind, port) == 0:
        assert time.monotonic() < deadline, f"no get reached {kind} on port {port} " \
            f"within {timeout:g} s"
        time.sleep(0.05)
    time.sleep(settle)


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def kvload_bin() -> str:
    if not KVLOAD.exists():
        pytest.fail(f"{KVLOAD} is missing: run `make kvload` (make test builds it)")
    return str(KVLOAD)


@pytest.fixture
def memcached_bin() -> str:
    return require("memcached")


@pytest.fixture
def redis_bin() -> str:
    return require("redis-server")


@pytest.fixture
def valkey_bin() -> str:
    return require("valkey-server")  # bookworm-backports (make setup adds the suite)


@pytest.fixture(scope="module")
def shared_memcached() -> Iterator[Server]:
    """One memcached for the tests of a module that only read from it or store their own
    keys (never flush, reconfigure or kill it)."""
    with running("memcached", ["-m", "64"]) as server:
        yield server
