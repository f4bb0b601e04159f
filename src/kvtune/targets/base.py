"""The one extension point for what is tuned: a `Target`.

`Target` is the base of every kind (its spec, its own knobs, its version). Two shapes:

- `ServerTarget`: a server process on this host (memcached, Redis). A fresh process for
  every repetition: started from an argv list (never a shell string), pinned to its CPUs
  with taskset, moved into the cgroup kvtune created for it, recorded in the journal (so
  `kvtune restore` can stop it after a crash), waited for until it accepts connections,
  and stopped and waited for until its port is free. The runner applies the host knobs,
  drives the load and reads telemetry around it.
- `SimulatedTarget`: no process; `measure` returns one repetition's metrics itself (the
  synthetic response surface).

Each implementation is one module, registered by kind in `kvtune.targets`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from kvtune.errors import HarnessError, TrialFailed, UserError
from kvtune.host.sched import ServerSched, wrap_argv
from kvtune.host.sched import verify as sched_verify
from kvtune.host.versions import parse_version, run_version
from kvtune.knobs.appliers.base import Launch
from kvtune.safety import programs
from kvtune.safety.programs import Program

if TYPE_CHECKING:
    import numpy as np

    from kvtune.knobs.domain import Value
    from kvtune.knobs.knob import Knob
    from kvtune.spec import CapacitySearch, TargetSpec


@dataclass
class ServerProcess:
    proc: programs.Popen[bytes]
    argv: list[str]
    stderr_file: IO[bytes]
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self, limit: int = 4000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.stderr_file.flush()
            self.stderr_file.seek(0)
            return self.stderr_file.read()[-limit:].decode(errors="replace")
        return ""


def port_in_use(host: str, port: int) -> bool:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                       socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Target(ABC):
    """One kind of system under test, built from the study's `target:` section."""

    kind: ClassVar[str]
    protocol: ClassVar[str] = "none"  # the load driver's protocol; "none" without a server
    runs_server: ClassVar[bool] = False  # a process on this host, measured under load
    binary: str | None = None

    # `target:` keys only this kind takes (the synthetic target's noise_cov, surface):
    # another kind refuses them.
    spec_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec

    @classmethod
    def check_args(cls, args: list[str]) -> None:
        """Check `target.args` against this kind's allow-list (kvtune.safety.args has the
        scanners). Raises ValueError naming the first refused item."""
        if args:
            raise ValueError(f"the {cls.kind} target takes no args")

    @classmethod
    def setting_name(cls, name: str) -> str:
        """One name per setting (a long flag's short form): how `arg_names` and an
        applier's `sets()` are compared."""
        return name

    @classmethod
    def arg_names(cls, args: list[str]) -> dict[str, str]:
        """The server settings checked `args` set (in the vocabulary of the applier's
        `sets()`), each mapped to the words that set it: a knob may not set one too."""
        return {}

    @classmethod
    def knobs(cls) -> Mapping[str, Knob]:
        """Knobs this target contributes itself (beyond the catalog), by name."""
        return {}

    @classmethod
    def installed(cls) -> tuple[str, tuple[int, ...]] | None:
        """(binary, version) of this kind's default binary on PATH, or None when absent
        or when the kind has no binary. Used once per process for the host context."""
        return None

    def version(self) -> tuple[int, ...] | None:
        """The version of the binary this study runs, or None without one."""
        return None


class SimulatedTarget(Target):
    """A target without a process: nothing is started, applied to the host or loaded."""

    # True for a target that measures `capacity` (a knee search at an SLO per repetition).
    searches: ClassVar[bool] = False

    @abstractmethod
    def measure(self, params: dict[str, Value], rng: np.random.Generator) -> dict[str, Any]:
        """The metrics of one repetition of configuration `params`. Raises TrialFailed
        when the configuration fails."""

    def repetition(self, params: dict[str, Value], rng: np.random.Generator,
                   capacity: CapacitySearch | None = None) -> tuple[dict[str, Any],
                                                                     dict[str, Any]]:
        """The metrics and the raw data of one repetition; `capacity`: the repetition is
        one knee search (only where `searches`). Raises TrialFailed when it fails."""
        if capacity is not None:
            raise UserError(f"the {self.kind} target cannot measure capacity")
        return self.measure(params, rng), {}


class ServerTarget(Target):
    """One kind of server. Subclasses build the argv and talk the protocol."""

    runs_server = True
    binary: str
    default_binary: ClassVar[str]
    version_args: ClassVar[tuple[str, ...]]  # e.g. ("-V",): prints the version; the probe ...
    version_banner: ClassVar[str] = ""  # ... proves the binary is this target's server (a
    # regex its first line matches; kvtune.safety.binary)
    # Seconds a stopped server has to exit after SIGTERM before SIGKILL. A server is fresh
    # per measurement and its data thrown away after it: nothing is lost by not waiting for
    # a slow orderly exit (memcached takes up to a second after load, see its target).
    stop_grace_s: ClassVar[float] = 5.0

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__(spec)
        self.host = spec.host
        try:  # the server listens on target.host: it must be an address of this host
            port = free_port(spec.host if spec.host != "localhost" else "127.0.0.1")
        except OSError as e:
            raise UserError(f"target.host: the server cannot listen on {spec.host}: "
                            f"{e.strerror} (give an address of this host)") from None
        self.port = spec.port or port
        self.program = self._find_binary(spec.binary or self.default_binary)
        self.binary = self.program.path

    def _find_binary(self, name: str) -> Program:
        from kvtune.safety.binary import find_server

        return find_server(name, self.kind, self.default_binary, self.version_args,
                           self.version_banner)

    @classmethod
    def installed(cls) -> tuple[str, tuple[int, ...]] | None:
        """The default binary on PATH and its version, probed only when kvtune may execute
        it (`kvtune.safety.programs`: owned by root, writable by nobody else, up to `/`)."""
        found, _why = programs.lookup(cls.default_binary)
        if found is None:
            return None
        return found.path, binary_version(found.path, cls.version_args)

    def version(self) -> tuple[int, ...]:
        """The server binary's version."""
        assert self.binary is not None
        return binary_version(self.binary, self.version_args)

    @abstractmethod
    def argv(self, launch: Launch) -> list[str]:
        """The full command line for one start, without the CPU pinning prefix."""

    @abstractmethod
    def ping(self, timeout: float = 1.0) -> bool:
        """True when the server answers a request."""

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """The server's own counters (memcached stats, Redis INFO)."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- life cycle ------------------------------------------------------------------------

    def start(self, launch: Launch, journal: Any | None = None,
              cgroup_dirs: list[Path] | None = None) -> ServerProcess:
        if port_in_use(self.host, self.port):
            raise HarnessError(
                f"port {self.port} on {self.host} is taken by another process; stop it or "
                "set target.port to a free port")
        argv = self.argv(launch)
        # The one program started is checked again now (kvtune.safety.programs); each link
        # of the chain (taskset, the scheduler shim) checks the next and execs it.
        launcher, rest = self.program, argv[1:]
        # Per-process scheduler knobs: applied at exec by kvtune's shim, before the server
        # creates a thread (host/sched.py); every link of the chain execs.
        sched = ServerSched.from_launch(launch.sched)
        if sched is not None:
            full = wrap_argv(sched, self.program.argv(rest))
            launcher, rest = programs.python(), full[1:]
        cpus = launch.server_cpus or self.spec.cpus
        if cpus:
            taskset, why = programs.lookup("taskset")
            if taskset is None:
                raise HarnessError(f"taskset (util-linux) is needed to pin the server: {why}")
            rest = ["-c", cpus, *launcher.argv(rest)]
            launcher = taskset
        full = [launcher.path, *rest]
        err = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        try:
            # From the root directory, whatever the caller's (kvtune's own Python in the
            # chain is isolated: kvtune.safety.programs.python).
            proc = launcher.popen(rest, stdin=programs.DEVNULL, stdout=err, stderr=err,
                                  start_new_session=True, cwd=programs.ISOLATED_CWD)
        except OSError as e:
            err.close()
            raise HarnessError(f"cannot start {argv[0]}: {e.strerror}") from None
        server = ServerProcess(proc, full, err)
        if journal is not None:
            journal.add_process(proc.pid, self.kind)
        for d in cgroup_dirs or []:
            # A write to a cgroup file: through the journal's checked path (resolved, only
            # kvtune's own cgroups), never directly. No undo is recorded: the pid leaves the
            # cgroup when the server ends, and restore removes the cgroup (journal docs).
            try:
                if journal is None:
                    raise HarnessError("a server is moved into a cgroup only through the "
                                       "journal")
                journal.move_into_cgroup(d, proc.pid)
            except OSError as e:
                self.stop(server, journal)
                raise HarnessError(f"cannot move the server into cgroup {d}: {e.strerror}") \
                    from None
            except HarnessError as e:
                self.stop(server, journal)
                raise HarnessError(f"cannot move the server into cgroup {d}: {e}") from None
        self._wait_ready(server, journal)
        if sched is not None:  # read every thread back; a setting that did not take fails
            problems = sched_verify(proc.pid, sched)
            if problems:
                self.stop(server, journal)
                raise TrialFailed("scheduler settings did not take on every thread: "
                                  + "; ".join(problems[:4]))
        return server

    def _wait_ready(self, server: ServerProcess, journal: Any | None) -> None:
        deadline = time.monotonic() + self.spec.start_timeout
        while time.monotonic() < deadline:
            rc = server.proc.poll()
            if rc is not None:
                text = server.stderr_text()
                self.stop(server, journal)
                raise TrialFailed(f"{self.kind} exited with code {rc} at start"
                                  + stderr_reason(text), text)
            if self.ping(timeout=0.5):
                return
            time.sleep(0.02)
        text = server.stderr_text()
        self.stop(server, journal)
        raise TrialFailed(f"{self.kind} did not accept connections within "
                          f"{self.spec.start_timeout:g}s", text)

    def stop(self, server: ServerProcess, journal: Any | None = None) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL after `stop_grace_s`), wait for it, and
        wait until its port is free. Returns the exit code (-9 when it was killed)."""
        proc = server.proc
        rc = proc.poll()
        if rc is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=self.stop_grace_s)
            except programs.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait(timeout=5)
        if journal is not None:
            journal.forget_process(proc.pid)
        deadline = time.monotonic() + 10
        while port_in_use(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        server.stderr_file.close()
        return rc


def stderr_reason(text: str, limit: int = 200) -> str:
    """": <the server's first stderr line>" for a failure message ("" without one), so a
    failed start says why (memcached: "Hash table power size (14) cannot be ...")."""
    for line in text.splitlines():
        if line.strip():
            return ": " + line.strip()[:limit]
    return ""


_VERSIONS: dict[tuple[str, ...], tuple[int, ...]] = {}


def binary_version(binary: str, args: tuple[str, ...]) -> tuple[int, ...]:
    """`binary args...`'s version, run once per process (only when kvtune may execute it:
    kvtune.safety.programs)."""
    key = (binary, *args)
    if key not in _VERSIONS:
        prog = programs.find(binary, "version probe")
        _VERSIONS[key] = parse_version(run_version(prog, args))
    return _VERSIONS[key]
