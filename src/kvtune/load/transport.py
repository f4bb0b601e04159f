"""Where a load tool runs: `LocalTransport` (this host) or, with `load.host`,
`load.remote.SshTransport` (kvload on a load host over ssh), chosen once by
`kvtune.load.base.transport_for`."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from kvtune.errors import HarnessError, TrialFailed
from kvtune.safety import programs

__all__ = ["LocalTransport", "Ran", "Transport"]


@dataclass
class Ran:
    """One finished run of a tool through a transport."""

    returncode: int
    stdout: str
    stderr: str
    end_ns: int  # this host's time.monotonic_ns() when the run ended


class Transport(ABC):
    """Where a load tool runs. `prepare` once at preflight (nothing applied yet), then `run`
    once per repetition."""

    where: str = "local"

    def prepare(self, tool: str, binary: str, cpus: str | None) -> str:
        """Make `binary` (this host's copy of `tool`) runnable where the tool runs, check the
        CPU list there, and return the path to put in argv[0]. UserError or HarnessError
        when it cannot be (nothing has been applied yet)."""
        return binary

    def stage(self, path: str) -> str:
        """A local input file (a workload file) as a path where the tool runs."""
        return path

    @abstractmethod
    def run(self, argv: list[str], timeout: float, cpus: str | None) -> Ran:
        """Run argv (no shell) within `timeout` seconds. TrialFailed when it could not run to
        its end (timed out, the load host unreachable or lost, the tool missing there);
        HarnessError when it cannot be started at all here."""

    def finish(self, doc: dict[str, Any], ran: Ran) -> None:  # noqa: B027 (optional)
        """Add what the transport knows to the tool's raw document (the load host's facts
        and placement; its clock translated to this host's)."""


class LocalTransport(Transport):
    """The tool runs on this host, as a child process."""

    def run(self, argv: list[str], timeout: float, cpus: str | None) -> Ran:
        try:  # checked again before every run (kvtune.safety.programs)
            out = programs.run(argv, "load tool", capture_output=True, text=True,
                               timeout=timeout)
        except programs.Untrusted as e:
            raise HarnessError(str(e)) from None
        except programs.TimeoutExpired:
            raise TrialFailed(f"{argv[0]} did not finish within {timeout:g}s "
                              "(server hung?)") from None
        except OSError as e:
            raise HarnessError(f"cannot run {argv[0]}: {e.strerror}") from None
        return Ran(out.returncode, out.stdout, out.stderr, time.monotonic_ns())
