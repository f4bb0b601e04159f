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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtune.targets.base import free_port

REPO = Path(__file__).resolve().parents[2]
KVLOAD = REPO / "kvload" / "target" / "release" / "kvload"

__all__ = ["KVLOAD", "REPO", "Server", "free_port", "mc_settings", "mc_stats", "redis_call",
           "redis_info", "running", "served", "start_memcached", "start_redis", "wait_port"]


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
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"nothing listened on {host}:{port} within {timeout} s")


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


@contextmanager
def served(argv: list[str], port: int, cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Any server started from `argv` that listens on loopback `port`, stopped afterwards."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    try:
        wait_port(port, proc)
        yield proc
    finally:
        stop(proc)


@dataclass
class Server:
    kind: str  # memcached, redis or valkey
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid


def _argv(kind: str, binary: str, port: int, args: list[str], cwd: Path) -> list[str]:
    if kind == "memcached":
        return [binary, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-u", "memcache", *args]
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--daemonize", "no", "--logfile", "", "--dir", str(cwd), *args]


def start(kind: str, args: list[str] | None = None, cwd: Path | None = None,
          binary: str | None = None) -> Server:
    """A server of `kind` with extra `args` on a free loopback port, listening when returned.
    The caller stops it (`stop(server.proc)`), or uses `running`."""
    binary = binary or require({"memcached": "memcached", "redis": "redis-server",
                                "valkey": "valkey-server"}[kind])
    cwd = cwd or Path("/tmp")
    for _ in range(5):  # another process may take the port between the probe and the bind
        port = free_port()
        proc = subprocess.Popen(_argv(kind, binary, port, args or [], cwd),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
        try:
            wait_port(port, proc)
            return Server(kind, port, proc)
        except AssertionError:
            stop(proc)
            if b"in use" not in (proc.stderr.read() if proc.stderr and not
                                 proc.stderr.closed else b""):
                raise
    raise AssertionError(f"{kind}: no free port after 5 tries")


@contextmanager
def running(kind: str, args: list[str] | None = None, cwd: Path | None = None,
            binary: str | None = None) -> Iterator[Server]:
    server = start(kind, args, cwd, binary)
    try:
        yield server
    finally:
        stop(server.proc)


def start_memcached(binary: str, args: list[str], cwd: Path) -> Server:
    return start("memcached", args, cwd, binary)


def start_redis(binary: str, extra: list[str], cwd: Path) -> tuple[subprocess.Popen[bytes], int]:
    """redis-server or valkey-server (the same options) with `extra`: (process, port)."""
    s = start("redis", extra, cwd, binary)
    return s.proc, s.port


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
